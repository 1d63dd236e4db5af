// state/queue_edits.h: queue edits as functions of the model, called with
// no controller, store or server: what an edit records, that the model
// takes it only when committed, what a delete forgets, and what a queue
// still has in it.
#include "server/state/queue_edits.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "server/state/lifecycle.h"

namespace xl::state {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

v1::Queue QueueNamed(const std::string& name, int weight) {
  v1::Queue q;
  q.mutable_spec()->set_name(name);
  q.mutable_spec()->set_weight(weight);
  q.set_defined(true);
  return q;
}

v1::Job PendingIn(int64_t id, const std::string& queue,
                  const std::string& user) {
  v1::Job job;
  job.set_id(absl::StrCat(id));
  job.set_user(user);
  job.set_state(v1::PENDING);
  job.set_attempt(1);
  job.mutable_spec()->set_queue(queue);
  auto* res = job.mutable_spec()->mutable_resources();
  res->set_nodes(1);
  res->set_gpus_per_node(1);
  res->set_ranks_per_node(1);
  return job;
}

class QueueEditsTest : public ::testing::Test {
 protected:
  QueueEditsTest() : model_(29500, 100) {
    model_.next_queue_change_seq = 40;
    model_.queues["research"] = QueueNamed("research", 1);
    model_.queues["research"].set_version(12);
    model_.queue_usage["research"].value = 50;
    model_.user_usage[{"research", "alice"}].value = 20;
    model_.user_usage[{"research", "bob"}].value = 30;
    model_.user_usage[{"researchers", "carol"}].value = 7;
  }

  Model model_;
};

TEST_F(QueueEditsTest, ACreateIsNumberedAndEntersTheModelOnceCommitted) {
  QueueEdit edit =
      EditQueue(&model_, "admin", "create", QueueNamed("prod", 3), kNow);
  EXPECT_EQ(edit.name, "prod");
  EXPECT_FALSE(edit.remove);
  EXPECT_EQ(edit.queue.version(), 40);
  EXPECT_EQ(edit.change.seq(), 40);
  EXPECT_EQ(edit.change.version(), 40);
  EXPECT_EQ(edit.change.action(), "create");
  EXPECT_EQ(edit.change.by(), "admin");
  EXPECT_EQ(edit.change.time().seconds(), 1'000'000);
  EXPECT_EQ(edit.change.spec().weight(), 3);
  EXPECT_EQ(model_.next_queue_change_seq, 41);
  // Recorded: the row, then the history entry. Not in the model yet.
  ASSERT_EQ(edit.changes.size(), 2u);
  const auto* put = std::get_if<store::change::PutQueue>(&edit.changes[0]);
  ASSERT_NE(put, nullptr);
  EXPECT_EQ(put->queue.version(), 40);
  EXPECT_TRUE(
      std::holds_alternative<store::change::AddQueueChange>(edit.changes[1]));
  EXPECT_EQ(model_.queues.count("prod"), 0u);
  EXPECT_TRUE(model_.queue_changes.empty());
  CommitQueueEdit(&model_, edit);
  ASSERT_EQ(model_.queues.count("prod"), 1u);
  EXPECT_EQ(model_.queues["prod"].version(), 40);
  ASSERT_EQ(model_.queue_changes.size(), 1u);
  EXPECT_EQ(model_.queue_changes.back().seq(), 40);
}

TEST_F(QueueEditsTest, ADeleteForgetsTheQueuesUsageAndOnlyItsOwn) {
  QueueEdit edit =
      EditQueue(&model_, "admin", "delete", model_.queues["research"], kNow);
  EXPECT_TRUE(edit.remove);
  // A delete keeps the version it deleted; the change is numbered anyway.
  EXPECT_EQ(edit.change.version(), 12);
  EXPECT_EQ(edit.change.seq(), 40);
  ASSERT_EQ(edit.changes.size(), 5u);
  EXPECT_TRUE(
      std::holds_alternative<store::change::DeleteQueue>(edit.changes[0]));
  std::set<std::string> zeroed;
  for (int i = 1; i <= 3; ++i) {
    const auto* u = std::get_if<store::change::PutUsage>(&edit.changes[i]);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->usage.queue, "research");
    EXPECT_EQ(u->usage.gpu_seconds, 0);
    zeroed.insert(u->usage.user);
  }
  EXPECT_EQ(zeroed, (std::set<std::string>{"", "alice", "bob"}));
  EXPECT_TRUE(
      std::holds_alternative<store::change::AddQueueChange>(edit.changes[4]));
  EXPECT_EQ(model_.queues.count("research"), 1u);  // not before the commit
  CommitQueueEdit(&model_, edit);
  EXPECT_EQ(model_.queues.count("research"), 0u);
  EXPECT_EQ(model_.queue_usage.count("research"), 0u);
  EXPECT_EQ(model_.user_usage.size(), 1u);
  EXPECT_EQ(model_.user_usage.count({"researchers", "carol"}), 1u);
  // Made again: a version above every earlier one.
  QueueEdit again =
      EditQueue(&model_, "admin", "create", QueueNamed("research", 1), kNow);
  EXPECT_EQ(again.queue.version(), 41);
}

TEST_F(QueueEditsTest, TheHistoryKeepsTheLatestChanges) {
  for (int i = 0; i < store::kLoadedQueueChanges + 5; ++i) {
    CommitQueueEdit(&model_, EditQueue(&model_, "admin", "update",
                                       QueueNamed("research", i + 1), kNow));
  }
  ASSERT_EQ(model_.queue_changes.size(),
            static_cast<size_t>(store::kLoadedQueueChanges));
  EXPECT_EQ(model_.queue_changes.front().seq(), 45);
  EXPECT_EQ(model_.queue_changes.back().seq(),
            40 + store::kLoadedQueueChanges + 4);
  EXPECT_EQ(model_.queues["research"].spec().weight(),
            store::kLoadedQueueChanges + 5);
}

TEST_F(QueueEditsTest, AQueuesJobsArePendingOrActive) {
  store::StoredState s;
  store::StoredNode n;
  n.name = "a";
  n.inventory.set_cpus(8);
  n.inventory.set_memory_bytes(64ll << 30);
  n.inventory.add_gpus()->set_index(0);
  s.nodes = {n};
  s.jobs = {PendingIn(1, "research", "alice"), PendingIn(2, "research", "bob"),
            PendingIn(3, "researchers", "carol"), PendingIn(4, "prod", "dan")};
  s.last_job_id = 4;
  Model::LoadClock clock;
  clock.now_wall = kNow;
  model_.Load(&s, clock);
  scheduler::Placement p;
  p.shares.push_back({"a", {0}, 1, 1 << 30, 0, 0});
  ASSERT_TRUE(Start(&model_, model_.jobs.Find(2), p, "tok", {kNow, kNow}).ok());
  QueueJobs jobs = JobsInQueue(model_, "research");
  EXPECT_EQ(jobs.pending, 1);
  EXPECT_EQ(jobs.active, 1);
  jobs = JobsInQueue(model_, "prod");
  EXPECT_EQ(jobs.pending, 1);
  EXPECT_EQ(jobs.active, 0);
  jobs = JobsInQueue(model_, "nothing");
  EXPECT_EQ(jobs.pending + jobs.active, 0);
}

}  // namespace
}  // namespace xl::state
