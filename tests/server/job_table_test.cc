// The job table's indexes: the pending order (by priority), and the
// per-user counts of pending jobs and their specs' bytes.
#include "server/state/job_table.h"

#include <gtest/gtest.h>

namespace xl::state {
namespace {

JobRecord Pending(int64_t id, const std::string& user, int priority) {
  JobRecord rec;
  rec.id = id;
  rec.job.set_id(std::to_string(id));
  rec.job.set_user(user);
  rec.job.set_state(v1::PENDING);
  rec.job.mutable_spec()->set_priority(priority);
  rec.job.mutable_spec()->add_command("/bin/true");
  return rec;
}

std::vector<int64_t> Order(const JobTable& t) {
  std::vector<int64_t> ids;
  for (const auto& [key, rec] : t.pending()) ids.push_back(rec->id);
  return ids;
}

TEST(JobTable, ANewPriorityMovesAPendingJobAndItLeavesCleanly) {
  JobTable t;
  t.Insert(Pending(1, "alice", 0));
  t.Insert(Pending(2, "alice", 5));
  EXPECT_EQ(Order(t), (std::vector<int64_t>{2, 1}));
  t.SetPriority(t.Find(1), 10);
  EXPECT_EQ(Order(t), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(t.PendingOf("alice"), 2);
  // Leaving PENDING finds it under its new priority.
  ASSERT_TRUE(t.Transition(t.Find(1), v1::CANCELLED, "x", absl::Now()).ok());
  EXPECT_EQ(Order(t), (std::vector<int64_t>{2}));
  EXPECT_EQ(t.PendingOf("alice"), 1);
  // A running job's priority changes no pending entry.
  ASSERT_TRUE(t.Transition(t.Find(2), v1::SCHEDULED, "x", absl::Now()).ok());
  t.SetPriority(t.Find(2), 1);
  EXPECT_TRUE(t.pending().empty());
  EXPECT_EQ(t.PendingOf("alice"), 0);
}

TEST(JobTable, PendingSpecBytesAreCountedPerUser) {
  JobTable t;
  JobRecord big = Pending(1, "mallory", 0);
  (*big.job.mutable_spec()->mutable_env())["PAD"] = std::string(100000, 'x');
  const int64_t bytes = JobTable::SpecBytes(big.job.spec());
  EXPECT_GT(bytes, 100000);
  t.Insert(std::move(big));
  t.Insert(Pending(2, "alice", 0));
  EXPECT_EQ(t.PendingBytesOf("mallory"), bytes);
  ASSERT_TRUE(t.Transition(t.Find(1), v1::SCHEDULED, "x", absl::Now()).ok());
  EXPECT_EQ(t.PendingBytesOf("mallory"), 0);
  EXPECT_GT(t.PendingBytesOf("alice"), 0);
}

}  // namespace
}  // namespace xl::state
