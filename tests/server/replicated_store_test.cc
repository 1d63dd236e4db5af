// replica/replicated_store.h: three replicas in one process (real raft over
// 127.0.0.1, real SQLite files): the leader's change lists land in every
// replica's database byte for byte, a write refused on its own is refused
// alike, a follower refuses writes naming the leader, and a replica
// restarted from its files applies nothing twice.
#include "server/replica/replicated_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "server/control/controller.h"
#include "tests/server/replica_testing.h"

namespace xl::replica {
namespace {

std::shared_ptr<const store::ChangeBatch> Submit(int id, std::string key = "") {
  auto job = std::make_shared<v1::Job>();
  job->set_id(absl::StrCat(id));
  job->set_idempotency_key(key.empty() ? absl::StrCat("key-", id) : key);
  job->set_user("alice");
  job->set_state(v1::PENDING);
  job->set_attempt(1);
  (*job->mutable_spec()->mutable_env())["B"] = "2";
  (*job->mutable_spec()->mutable_env())["A"] = "1";
  v1::JobEvent e;
  e.set_job_id(absl::StrCat(id));
  e.set_seq(1);
  e.set_to_state(v1::PENDING);
  auto chunk = std::make_shared<v1::LogChunk>();
  chunk->set_job_id(absl::StrCat(id));
  chunk->set_attempt(1);
  chunk->set_data("no end offset: a second apply would store it twice");
  return std::make_shared<const store::ChangeBatch>(store::ChangeBatch{
      {store::change::PutJob{job}, store::change::AddEvent{e},
       store::change::AppendLog{chunk}}});
}

class ReplicatedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xl-replstore-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    for (uint64_t id = 1; id <= 3; ++id) {
      peers_[id] = absl::StrCat("127.0.0.1:", xl::testing::FreePort());
    }
  }
  void TearDown() override {
    stores_.clear();
    std::filesystem::remove_all(dir_);
  }

  std::string Db(uint64_t id) const {
    return absl::StrCat(dir_, "/replica-", id, ".db");
  }

  void Open(uint64_t id, unsigned snapshot_every = 16384,
            unsigned snapshot_trailing = 4096) {
    RaftLog::Options o;
    o.id = id;
    o.peers = peers_;
    o.dir = absl::StrCat(dir_, "/raft-", id);
    o.election_timeout = absl::Milliseconds(300);
    o.heartbeat = absl::Milliseconds(50);
    o.snapshot_every = snapshot_every;
    o.snapshot_trailing = snapshot_trailing;
    auto s = ReplicatedStore::Open(Db(id), std::move(o));
    ASSERT_TRUE(s.ok()) << s.status();
    stores_[id] = *std::move(s);
  }

  uint64_t Leader() {
    const absl::Time until = absl::Now() + absl::Seconds(15);
    while (absl::Now() < until) {
      for (auto& [id, s] : stores_) {
        if (s->log_state().leader) return id;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return 0;
  }

  absl::Status Write(uint64_t id, std::shared_ptr<const store::ChangeBatch> c) {
    absl::Notification done;
    absl::Status result;
    stores_[id]->WriteChanges(std::move(c), [&](absl::Status st) {
      result = st;
      done.Notify();
    });
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(15))) {
      return absl::DeadlineExceededError("no answer in 15 s");
    }
    return result;
  }

  // The last log entry replica `id` applied, as its database says.
  uint64_t Applied(uint64_t id) {
    auto state = stores_[id]->Load();
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? state->applied_index : 0;
  }

  // Waits until replica `id` has applied log entry `index`.
  bool AppliedUpTo(uint64_t id, uint64_t index) {
    const absl::Time until = absl::Now() + absl::Seconds(15);
    while (absl::Now() < until) {
      if (Applied(id) >= index) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  std::string dir_;
  std::map<uint64_t, std::string> peers_;
  std::map<uint64_t, std::unique_ptr<ReplicatedStore>> stores_;
};

TEST_F(ReplicatedStoreTest, EveryReplicaHoldsTheSameBytesAndAppliesOnce) {
  for (uint64_t id = 1; id <= 3; ++id) Open(id);
  const uint64_t leader = Leader();
  ASSERT_NE(leader, 0u);
  for (int job = 1; job <= 20; ++job) {
    auto batch = Submit(job);
    ASSERT_TRUE(Write(leader, batch).ok()) << job;
    // The leader applies its own batch: what the write gives back (the
    // chunk's seq) reaches the writer, as with a local store.
    const auto& append = std::get<store::change::AppendLog>(batch->changes[2]);
    EXPECT_GT(append.chunk->seq(), 0) << job;
  }
  // A barrier is an entry too, applied on the leader before it answers.
  const uint64_t before = Applied(leader);
  absl::Notification barrier;
  stores_[leader]->Barrier([&](absl::Status st) {
    EXPECT_TRUE(st.ok()) << st;
    barrier.Notify();
  });
  ASSERT_TRUE(barrier.WaitForNotificationWithTimeout(absl::Seconds(15)));
  EXPECT_EQ(Applied(leader), before + 1);
  EXPECT_TRUE(stores_[leader]->WaitAnswered(absl::Seconds(1)));
  // Refused on its own (job 1's idempotency key again): refused alike on
  // every replica, and nothing of it (job, event, output) written anywhere.
  absl::Status again = Write(leader, Submit(50, "key-1"));
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  ASSERT_TRUE(Write(leader, Submit(21)).ok());
  const uint64_t last = Applied(leader);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(AppliedUpTo(id, last));
  auto state = stores_[leader]->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->jobs.size(), 21u);
  EXPECT_EQ(state->applied_index, last);
  const std::string dump = xl::testing::DumpDatabase(Db(leader));
  for (uint64_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(xl::testing::DumpDatabase(Db(id)), dump) << "replica " << id;
  }
  // A follower refuses and names the leader; a function is not replicated.
  const uint64_t follower = leader == 1 ? 2 : 1;
  absl::Status refused = Write(follower, Submit(99));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find(peers_[leader]), std::string::npos)
      << refused;
  absl::Notification done;
  stores_[leader]->Write([](store::Tx&) { return absl::OkStatus(); },
                         [&](absl::Status st) {
                           EXPECT_EQ(st.code(),
                                     absl::StatusCode::kUnimplemented);
                           done.Notify();
                         });
  done.WaitForNotification();
  // A follower restarted from its files: raft hands it the whole log
  // again (no snapshots yet); it applies nothing twice.
  stores_.erase(follower);
  Open(follower);
  ASSERT_TRUE(AppliedUpTo(follower, last));
  ASSERT_TRUE(Write(Leader(), Submit(22)).ok());
  const uint64_t now = Applied(Leader());
  ASSERT_TRUE(AppliedUpTo(follower, now));
  EXPECT_EQ(xl::testing::DumpDatabase(Db(follower)),
            xl::testing::DumpDatabase(Db(Leader())));
  auto reloaded = stores_[follower]->Load();
  ASSERT_TRUE(reloaded.ok());
  EXPECT_EQ(reloaded->jobs.size(), 22u);
}

// Snapshots: with a log compacted every 8 entries, a replica that was down
// while 40 were written catches up from the leader's snapshot (the entries
// it missed are gone from every log) to the same bytes; a restarted
// replica starts from its own snapshot and applies nothing twice.
TEST_F(ReplicatedStoreTest, AReplicaFarBehindCatchesUpFromASnapshot) {
  for (uint64_t id = 1; id <= 3; ++id) Open(id, 8, 2);
  uint64_t leader = Leader();
  ASSERT_NE(leader, 0u);
  const uint64_t behind = leader == 3 ? 2 : 3;
  stores_.erase(behind);
  for (int job = 1; job <= 40; ++job) {
    ASSERT_TRUE(Write(leader, Submit(job)).ok()) << job;
  }
  bool snapshot_taken = false;
  for (const auto& f : std::filesystem::directory_iterator(
           absl::StrCat(dir_, "/raft-", leader))) {
    snapshot_taken |= f.path().filename().string().rfind("snapshot-", 0) == 0;
  }
  EXPECT_TRUE(snapshot_taken);
  Open(behind, 8, 2);
  const uint64_t last = Applied(leader);
  ASSERT_TRUE(AppliedUpTo(behind, last));
  ASSERT_TRUE(Write(leader, Submit(41)).ok());
  const uint64_t after = Applied(leader);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(AppliedUpTo(id, after));
  auto state = stores_[behind]->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->jobs.size(), 41u);
  const std::string dump = xl::testing::DumpDatabase(Db(leader));
  EXPECT_EQ(xl::testing::DumpDatabase(Db(behind)), dump);
  // A database whose Raft log is gone is refused, not silently skipped
  // ahead of the new log.
  {
    RaftLog::Options o;
    o.id = behind;
    o.peers = peers_;
    o.dir = absl::StrCat(dir_, "/raft-elsewhere");
    stores_.erase(behind);
    auto refused = ReplicatedStore::Open(Db(behind), std::move(o));
    ASSERT_FALSE(refused.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(refused.status()))
        << refused.status();
    EXPECT_NE(refused.status().message().find("Raft log"), std::string::npos);
  }
  // Every replica restarted: each starts from its snapshot and log, and
  // holds the same bytes (nothing applied twice: AppendLog has no end
  // offset, a second apply would add a row).
  stores_.clear();
  for (uint64_t id = 1; id <= 3; ++id) Open(id, 8, 2);
  leader = Leader();
  ASSERT_NE(leader, 0u);
  ASSERT_TRUE(Write(leader, Submit(42)).ok());
  const uint64_t end = Applied(leader);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(AppliedUpTo(id, end));
  const std::string final_dump = xl::testing::DumpDatabase(Db(leader));
  for (uint64_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(xl::testing::DumpDatabase(Db(id)), final_dump) << "replica " << id;
  }
}

TEST_F(ReplicatedStoreTest, TheControllersWritesGoThroughTheLog) {
  for (uint64_t id = 1; id <= 3; ++id) Open(id);
  const uint64_t leader = Leader();
  ASSERT_NE(leader, 0u);
  FakeClock clock;
  control::ControllerOptions opts;
  opts.heartbeat_timeout = absl::Seconds(10);
  opts.lease = absl::Seconds(10);
  opts.advertise_address = "127.0.0.1:7070";
  opts.self_pause = absl::InfiniteDuration();
  opts.submit_limits = state::SubmitLimits{0, 0, 1};
  auto controller = std::make_unique<control::Controller>(stores_[leader].get(),
                                                          &clock, opts);
  ASSERT_TRUE(controller->Recover().ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    v1::SubmitJobRequest req;
    req.set_idempotency_key(absl::StrCat("submit-", i));
    req.mutable_spec()->add_command("/bin/true");
    req.mutable_spec()->mutable_resources()->set_nodes(1);
    req.mutable_spec()->mutable_resources()->set_gpus_per_node(1);
    absl::Notification answered;
    absl::StatusOr<v1::SubmitJobResponse> answer;
    controller->Submit(scheduler::Submitter{"alice", {}, true}, req,
                       [&](absl::StatusOr<v1::SubmitJobResponse> r) {
                         answer = std::move(r);
                         answered.Notify();
                       });
    ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(15)));
    ASSERT_TRUE(answer.ok()) << answer.status();
    ids.push_back(answer->job_id());
  }
  // Acknowledged: on a majority and applied on the leader; every replica
  // gets the same rows.
  const uint64_t last = Applied(leader);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(AppliedUpTo(id, last)) << "replica " << id;
    auto state = stores_[id]->Load();
    ASSERT_TRUE(state.ok());
    ASSERT_EQ(state->jobs.size(), 5u) << "replica " << id;
    EXPECT_EQ(state->jobs[4].id(), ids[4]);
    EXPECT_EQ(state->jobs[4].idempotency_key(), "submit-4");
  }
  const std::string dump = xl::testing::DumpDatabase(Db(leader));
  for (uint64_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(xl::testing::DumpDatabase(Db(id)), dump) << "replica " << id;
  }
  controller->Stop();
  stores_.clear();
  controller.reset();
}

}  // namespace
}  // namespace xl::replica
