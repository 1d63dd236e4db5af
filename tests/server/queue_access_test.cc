// Who may submit to a queue and how high a priority they may ask for.
#include "server/scheduler/queue_access.h"

#include <gtest/gtest.h>

namespace xl::scheduler {
namespace {

v1::QueueSpec Queue(std::vector<std::string> users,
                    std::vector<std::string> groups) {
  v1::QueueSpec q;
  q.set_name("research");
  for (auto& u : users) q.add_users(u);
  for (auto& g : groups) q.add_groups(g);
  return q;
}

TEST(QueueAccess, AQueueWithoutAListAdmitsEveryoneAtPriorityZeroAtMost) {
  const v1::QueueSpec q = Queue({}, {});
  const Submitter bob{"bob", {}, false};
  EXPECT_TRUE(CheckQueueAccess(q, bob, 0).ok());
  EXPECT_TRUE(CheckQueueAccess(q, bob, -5).ok()) << "lower is always allowed";
  const absl::Status high = CheckQueueAccess(q, bob, 1);
  EXPECT_EQ(high.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(high.message(),
            "priority: 1 is above what queue research lets its users ask for "
            "(max_priority 0, the default where a queue sets none); ask for 0 "
            "or less, or ask an admin to raise the job's priority (xlctl "
            "set-priority JOB N)");
  EXPECT_TRUE(CheckQueueAccess(q, Submitter{"root", {}, true}, 2147483647).ok());
}

TEST(QueueAccess, MaxPriorityCapsUsersNotAdmins) {
  v1::QueueSpec q = Queue({}, {});
  q.mutable_max_priority()->set_value(10);
  EXPECT_TRUE(CheckQueueAccess(q, Submitter{"bob", {}, false}, 10).ok());
  EXPECT_EQ(CheckQueueAccess(q, Submitter{"bob", {}, false}, 11).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckQueueAccess(q, Submitter{"root", {}, true}, 11).ok());
  EXPECT_EQ(UserPriorityCap(q), 10);
}

TEST(QueueAccess, UsersAndGroupsAdmitTheirOwnOnly) {
  const v1::QueueSpec q = Queue({"alice"}, {"ml"});
  EXPECT_TRUE(Admits(q, Submitter{"alice", {}, false}));
  EXPECT_TRUE(Admits(q, Submitter{"carol", {"vision", "ml"}, false}));
  EXPECT_FALSE(Admits(q, Submitter{"mallory", {"vision"}, false}));
  EXPECT_TRUE(Admits(q, Submitter{"root", {}, true}));
  const absl::Status denied =
      CheckQueueAccess(q, Submitter{"mallory", {"vision"}, false}, 0);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(),
            "queue: mallory may not submit to queue research, which admits "
            "users alice and groups ml; submit to a queue you are admitted "
            "to (xlctl queue list), or ask an admin to add you (xlctl queue "
            "set research --admit-user mallory)");
  EXPECT_EQ(DescribeAdmission(q), "users alice and groups ml");
}

TEST(QueueAccess, AStarAdmitsEveryone) {
  EXPECT_TRUE(Admits(Queue({"alice", "*"}, {}), Submitter{"bob", {}, false}));
  EXPECT_TRUE(Admits(Queue({}, {"*"}), Submitter{"bob", {}, false}));
  EXPECT_EQ(DescribeAdmission(Queue({}, {"*"})), "everyone");
}

TEST(QueueAccess, ListsAreValidated) {
  EXPECT_TRUE(ValidateQueueAdmission(Queue({"alice", "*"}, {"ml"})).ok());
  EXPECT_EQ(ValidateQueueAdmission(Queue({"a b"}, {})).message(),
            "users[0]: not a name; give 1-64 letters, digits and . _ @ -, or "
            "\"*\" for everyone");
  EXPECT_EQ(ValidateQueueAdmission(Queue({}, {"ml", "ml"})).message(),
            "groups[1]: 'ml' is listed twice; give it once");
  std::vector<std::string> many;
  for (int i = 0; i < 1001; ++i) many.push_back("u" + std::to_string(i));
  EXPECT_EQ(ValidateQueueAdmission(Queue(many, {})).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace xl::scheduler
