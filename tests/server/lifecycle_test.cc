// state/lifecycle.h: a job's life as functions of the model, called with no
// controller, store, clock or server: what each step changes in the model,
// what it says to record, whom it says to stop, and that a refused step
// changes nothing.
#include "server/state/lifecycle.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "tests/server/model_fixture.h"

namespace xl::state {
namespace {

using testing::Count;
using testing::kNow;
using testing::NullConnection;

// Job 7 pending: 2 nodes x 1 GPU, one rank a node, one retry.
class LifecycleTest : public testing::ModelTest {
 protected:
  LifecycleTest() : ModelTest(/*ranks_per_node=*/1, /*max_retries=*/1) {}
};

TEST_F(LifecycleTest, StartPlacesTheAttemptAndSaysWhatToRecord) {
  rec_->last_first_node = "b";  // rank 0 stays where its checkpoint is
  Step step = Started();
  const v1::Job& job = rec_->job;
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.world_size(), 2);
  ASSERT_EQ(job.allocations_size(), 2);
  EXPECT_EQ(job.allocations(0).node(), "b");
  EXPECT_EQ(job.allocations(0).ranks(0), 0);
  EXPECT_EQ(job.allocations(1).node(), "a");
  EXPECT_EQ(job.master_addr(), model_.nodes.Find("b")->address);
  EXPECT_GE(job.master_port(), 29500);
  EXPECT_LT(job.master_port(), 30500);
  EXPECT_TRUE(model_.ports.Taken(job.master_addr(), job.master_port()));
  EXPECT_EQ(job.start_time().seconds(), 1'000'000);
  EXPECT_EQ(rec_->token, "tok");
  EXPECT_EQ(rec_->start_mono, kNow.mono);
  // The ledger holds what the attempt took.
  const Hold* hold = model_.ledger.FindHold("a", 7, 1);
  ASSERT_NE(hold, nullptr);
  EXPECT_EQ(hold->live_ranks.count(1), 1u);
  EXPECT_EQ(model_.ledger.Capacity("a")->gpu_free, 0b10u);
  // To record: the event, the token and both holds; nobody to stop.
  ASSERT_EQ(step.events.size(), 1u);
  EXPECT_EQ(step.events[0].to_state(), v1::SCHEDULED);
  EXPECT_EQ(step.events[0].seq(), 2);
  EXPECT_EQ(Count<store::change::PutToken>(step.extra), 1);
  EXPECT_EQ(Count<store::change::PutHold>(step.extra), 2);
  EXPECT_EQ(step.holds.size(), 2u);
  EXPECT_TRUE(step.stops.empty());
  // The job's row and its events come first in what is recorded.
  auto changes = JobChanges(std::make_shared<const v1::Job>(job), step.events);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<store::change::PutJob>(changes[0]));
  EXPECT_TRUE(std::holds_alternative<store::change::AddEvent>(changes[1]));
}

TEST_F(LifecycleTest, ARefusedStartChangesNothing) {
  Started();
  const std::string before = rec_->job.SerializeAsString();
  auto again = Start(&model_, rec_, OnAAndB(), "tok2", kNow);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rec_->job.SerializeAsString(), before);
  EXPECT_EQ(rec_->token, "tok");
  EXPECT_EQ(model_.ledger.Holds("a").size(), 1u);
}

TEST_F(LifecycleTest, EndStopsARunningAttempt) {
  Started();
  auto cancelled =
      End(&model_, rec_, v1::CANCELLED, "cancelled by alice", kNow);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(rec_->job.state(), v1::CANCELLED);
  EXPECT_TRUE(rec_->stopping);
  EXPECT_TRUE(cancelled->attempt_closed);
  EXPECT_FALSE(
      model_.ports.Taken(rec_->job.master_addr(), rec_->job.master_port()));
  ASSERT_EQ(cancelled->stops.size(), 2u);
  const v1::StopJob& stop = cancelled->stops[0].second.stop_job();
  EXPECT_EQ(stop.job_id(), "7");
  EXPECT_EQ(stop.attempt(), 1);
  EXPECT_EQ(stop.reason(), "cancelled by alice");
  // The holds stay until the ranks are known to be gone.
  EXPECT_NE(model_.ledger.FindHold("a", 7, 1), nullptr);
  // Nothing leaves a final state.
  auto again = End(&model_, rec_, v1::FAILED, "late", kNow);
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(rec_->job.state(), v1::CANCELLED);
}

TEST_F(LifecycleTest, ASuccessfulAttemptStopsNobody) {
  Started();
  auto ok = End(&model_, rec_, v1::SUCCEEDED, "all ranks exited 0", kNow);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->stops.empty());  // its ranks are exiting on their own
  EXPECT_TRUE(ok->attempt_closed);
}

TEST_F(LifecycleTest, EndAttemptRequeuesSpendingARetry) {
  Started();
  const std::string addr = rec_->job.master_addr();
  const int port = rec_->job.master_port();
  Requeue r;
  r.why = "rank 1 exited 3";
  auto step = EndAttempt(&model_, rec_, r, kNow);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_FALSE(model_.ports.Taken(addr, port));
  EXPECT_TRUE(step->requeued);
  EXPECT_TRUE(step->attempt_closed);
  const v1::Job& job = rec_->job;
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.retries_used(), 1);
  EXPECT_EQ(job.allocations_size(), 0);
  EXPECT_EQ(job.master_port(), 0);
  EXPECT_TRUE(rec_->token.empty());
  EXPECT_EQ(rec_->last_first_node, "a");
  ASSERT_EQ(step->stops.size(), 2u);
  for (const auto& [conn, msg] : step->stops) {
    EXPECT_EQ(msg.stop_job().attempt(), 1);  // the attempt that ended
  }
  ASSERT_EQ(step->events.size(), 1u);
  EXPECT_EQ(step->events[0].reason(),
            "rank 1 exited 3; requeued as attempt 2 (retry 1 of 1)");
  // The second failure has no retry left.
  Started();
  auto failed = EndAttempt(&model_, rec_, r, kNow);
  ASSERT_TRUE(failed.ok());
  EXPECT_FALSE(failed->requeued);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.reason(), "rank 1 exited 3; no retries left (max_retries 1)");
}

TEST_F(LifecycleTest, APreemptionEndsPreemptedAndSpendsNoRetry) {
  Started();
  Requeue r;
  r.why = "preempted by job 9";
  r.spend_retry = false;
  r.preempted = true;
  auto step = EndAttempt(&model_, rec_, r, kNow);
  ASSERT_TRUE(step.ok());
  ASSERT_EQ(step->events.size(), 2u);
  EXPECT_EQ(step->events[0].to_state(), v1::PREEMPTED);
  EXPECT_EQ(step->events[1].to_state(), v1::PENDING);
  EXPECT_EQ(step->events[1].seq(), step->events[0].seq() + 1);
  EXPECT_EQ(rec_->job.preemptions(), 1);
  EXPECT_EQ(rec_->job.retries_used(), 0);
}

TEST_F(LifecycleTest, AFenceDelaysTheNextStart) {
  Started();
  Requeue r;
  r.why = "node a lost";
  r.spend_retry = false;
  r.fence = absl::Seconds(90);
  auto step = EndAttempt(&model_, rec_, r, kNow);
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(rec_->eligible_mono, kNow.mono + absl::Seconds(90));
  EXPECT_NE(rec_->job.reason().find("no sooner than 1m30s"), std::string::npos)
      << rec_->job.reason();
}

TEST_F(LifecycleTest, ARefusedEndAttemptChangesNothing) {
  // Pending: there is no attempt to end.
  const std::string before = rec_->job.SerializeAsString();
  Requeue r;
  r.why = "late exit";
  r.spend_retry = false;
  auto step = EndAttempt(&model_, rec_, r, kNow);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rec_->job.SerializeAsString(), before);
  EXPECT_EQ(rec_->events.size(), 1u);
  // Ended: its port was given back once and is not given back again (it
  // may be another attempt's by now).
  Started();
  ASSERT_TRUE(End(&model_, rec_, v1::CANCELLED, "cancelled", kNow).ok());
  const int port = rec_->job.master_port();
  model_.ports.Reserve(rec_->job.master_addr(), port);  // someone else's now
  const std::string ended = rec_->job.SerializeAsString();
  EXPECT_FALSE(EndAttempt(&model_, rec_, r, kNow).ok());
  EXPECT_EQ(rec_->job.SerializeAsString(), ended);
  EXPECT_TRUE(model_.ports.Taken(rec_->job.master_addr(), port));
}

TEST_F(LifecycleTest, RanksAreNumberedNodeByNode) {
  rec_->job.mutable_spec()->mutable_resources()->set_ranks_per_node(2);
  Started();
  const v1::Job& job = rec_->job;
  EXPECT_EQ(job.world_size(), 4);
  ASSERT_EQ(job.allocations_size(), 2);
  EXPECT_EQ(job.allocations(0).ranks_size(), 2);
  EXPECT_EQ(job.allocations(1).ranks(0), 2);
  EXPECT_EQ(job.allocations(1).ranks(1), 3);
  EXPECT_EQ(model_.ledger.FindHold("b", 7, 1)->live_ranks.count(3), 1u);
}

TEST_F(LifecycleTest, ASubmitGivesTheNextIdAndEntersTheModelOnlyOnceRecorded) {
  Submission s;
  s.user = "bob";
  s.idempotency_key = "k1";
  s.spec.mutable_resources()->set_nodes(3);
  s.spec.mutable_resources()->set_ranks_per_node(2);
  s.memory_derived = true;
  JobRecord first = Submitted(&model_, s, kNow);
  s.idempotency_key = "k2";
  JobRecord second = Submitted(&model_, s, kNow);
  EXPECT_EQ(first.id, 8);  // the store gave ids up to 7
  EXPECT_EQ(second.id, 9);
  EXPECT_EQ(first.job.id(), "8");
  EXPECT_EQ(first.job.state(), v1::PENDING);
  EXPECT_EQ(first.job.attempt(), 1);
  EXPECT_EQ(first.job.world_size(), 6);
  // A restart rebuilds the key map from these.
  EXPECT_EQ(first.job.user(), "bob");
  EXPECT_EQ(first.job.idempotency_key(), "k1");
  EXPECT_TRUE(first.job.memory_derived());
  EXPECT_FALSE(first.job.has_plan());  // the planner sized nothing
  EXPECT_EQ(first.job.create_time().seconds(), 1'000'000);
  ASSERT_EQ(first.events.size(), 1u);
  EXPECT_EQ(first.events[0].seq(), 1);
  EXPECT_EQ(first.events[0].reason(), "submitted by bob");
  EXPECT_EQ(first.events[0].attempt(), 1);
  EXPECT_EQ(first.events[0].time().seconds(), 1'000'000);
  ASSERT_NE(first.request, nullptr);
  EXPECT_EQ(first.request.get(), second.request.get());  // shared
  // Not in the job table until recorded; each key names its job.
  EXPECT_EQ(model_.jobs.Find(8), nullptr);
  EXPECT_EQ(model_.jobs.keys()[JobTable::ScopedKey("bob", "k1")], 8);
  EXPECT_EQ(model_.jobs.keys()[JobTable::ScopedKey("bob", "k2")], 9);
}

v1::RankStatus Status(int rank, v1::RankState state, int code = 0,
                      int signal = 0) {
  v1::RankStatus st;
  st.set_job_id("7");
  st.set_attempt(1);
  st.set_rank(rank);
  st.set_state(state);
  st.set_exit_code(code);
  st.set_signal(signal);
  return st;
}

TEST_F(LifecycleTest, TheJobRunsOnceEveryRankDoesAndAnExitStaysCounted) {
  Started();
  auto first = RankRunning(&model_, rec_, Status(0, v1::RANK_RUNNING), kNow);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->events.empty());
  EXPECT_EQ(rec_->job.state(), v1::SCHEDULED);
  auto all = RankRunning(&model_, rec_, Status(1, v1::RANK_RUNNING), kNow);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->events.size(), 1u);
  EXPECT_EQ(all->events[0].reason(), "all 2 ranks running");
  EXPECT_EQ(rec_->job.state(), v1::RUNNING);
  // Rank 0 exits 0; a restarted agent then says it runs: still exited.
  ExitOutcome done = CountExit(rec_, "b", Status(0, v1::RANK_EXITED));
  EXPECT_EQ(done.kind, ExitOutcome::kRankDone);
  EXPECT_EQ(done.exit.node(), "b");
  ASSERT_TRUE(
      RankRunning(&model_, rec_, Status(0, v1::RANK_RUNNING), kNow).ok());
  EXPECT_TRUE(IsExit(rec_->ranks[0]));
  ExitOutcome last = CountExit(rec_, "a", Status(1, v1::RANK_EXITED));
  EXPECT_EQ(last.kind, ExitOutcome::kJobSucceeded);
  EXPECT_EQ(last.why, "all 2 ranks exited with code 0");
  EXPECT_EQ(rec_->job.rank_exits_size(), 2);
}

TEST_F(LifecycleTest, AnExitSaysWhatHappenedAndWhoseFaultItWas) {
  Started();
  v1::RankStatus oom = Status(1, v1::RANK_EXITED, 0, 9);
  oom.set_message("killed by the memory limit (peak 8 GiB)");
  ExitOutcome killed = CountExit(rec_, "a", oom);
  EXPECT_EQ(killed.kind, ExitOutcome::kFailed);
  EXPECT_EQ(killed.why,
            "rank 1 on a was killed by signal 9 (killed by the memory limit "
            "(peak 8 GiB))");
  EXPECT_EQ(rec_->job.exit_code(), 137);
  EXPECT_FALSE(killed.node_fault);

  v1::RankStatus bad = Status(0, v1::RANK_FAILED_TO_START);
  bad.set_message("no such file");
  bad.set_node_fault(true);
  ExitOutcome start = CountExit(rec_, "b", bad);
  EXPECT_EQ(start.kind, ExitOutcome::kFailed);
  EXPECT_EQ(start.why, "rank 0 on b failed to start: no such file");
  EXPECT_TRUE(start.node_fault);
  EXPECT_TRUE(start.exit.failed_to_start());
  EXPECT_EQ(rec_->job.exit_code(), 127);

  v1::RankStatus agent = Status(0, v1::RANK_EXITED, 143);
  agent.set_stopped_by_agent(true);
  agent.set_message("stopped: the scheduler was out of reach");
  ExitOutcome requeue = CountExit(rec_, "b", agent);
  EXPECT_EQ(requeue.kind, ExitOutcome::kRequeue);
  EXPECT_EQ(requeue.why, "rank 0 on b stopped: the scheduler was out of reach");

  ExitOutcome code = CountExit(rec_, "a", Status(1, v1::RANK_EXITED, 3));
  EXPECT_EQ(code.kind, ExitOutcome::kFailed);
  EXPECT_EQ(code.why, "rank 1 on a exited with code 3");
  EXPECT_EQ(rec_->job.exit_code(), 3);
}

}  // namespace
}  // namespace xl::state
