// The sort phase: the order a pass considers jobs and applies earlier holds.
#include "server/scheduler/pass/queue_order.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/server/pass/fleet.h"

namespace xl::scheduler {
namespace {

using testing::Job;
using testing::Request;

TEST(QueueOrderTest, HighestRankFirstThenSubmitOrderThenQueueOrder) {
  std::vector<JobRequest> queue = {
      Job("low", Request(1, 1), 0, 1),   Job("late", Request(1, 1), 5, 9),
      Job("early", Request(1, 1), 5, 2), Job("tie-b", Request(1, 1), 1, 4),
      Job("tie-a", Request(1, 1), 1, 4),
  };
  // Fair share moves a job above its priority.
  queue[0].effective_priority = 7.5;
  std::vector<std::string> ids;
  for (int32_t i : QueueOrder(queue)) ids.push_back(queue[i].job_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"low", "early", "late", "tie-b",
                                           "tie-a"}));
}

TEST(HoldOrderTest, AHoldAppliesOnlyBeforeTheFirstJobRankedAfterIt) {
  std::vector<Reservation> holds(3);
  holds[0].job_id = "h-low";
  holds[0].priority = 1;
  holds[1].job_id = "h-high";
  holds[1].priority = 9;
  holds[2].job_id = "h-mid";
  holds[2].priority = 5;
  holds[2].submit_seq = 10;
  HoldOrder order(holds);
  // A job ranked above every hold takes nodes before any applies.
  EXPECT_EQ(order.NextBefore(10, 0), nullptr);
  const Reservation* r = order.NextBefore(5, 3);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->job_id, "h-high");
  // At equal rank, the one submitted first goes first.
  EXPECT_EQ(order.NextBefore(5, 3), nullptr);
  r = order.NextBefore(5, 11);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->job_id, "h-mid");
  r = order.Next();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->job_id, "h-low");
  EXPECT_EQ(order.Next(), nullptr);
}

}  // namespace
}  // namespace xl::scheduler
