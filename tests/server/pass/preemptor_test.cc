// The preemption plugin of a pass: who may be preempted, in which order,
// within which budget, and what a preemption decides.
#include "server/scheduler/pass/preemptor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/server/pass/fleet.h"

namespace xl::scheduler {
namespace {

using testing::Fleet;
using testing::Gang;
using testing::Job;
using testing::kNow;
using testing::Request;

std::vector<std::string> Ids(const std::vector<const RunningGang*>& gangs) {
  std::vector<std::string> out;
  for (const RunningGang* g : gangs) out.push_back(g->job_id);
  return out;
}

TEST(SortVictimsTest, LowestPriorityThenLeastGpuTimeLost) {
  std::vector<NodeCapacity> nodes = Fleet(3, 8);
  RunningGang high = Gang("high", nodes, {0}, 3);
  RunningGang long_run = Gang("long", nodes, {1}, 1);
  long_run.ran = absl::Hours(5);
  RunningGang short_run = Gang("short", nodes, {2}, 1);
  short_run.ran = absl::Hours(1);
  std::vector<const RunningGang*> gangs = {&high, &long_run, &short_run};
  SortVictims(&gangs);
  EXPECT_EQ(Ids(gangs), (std::vector<std::string>{"short", "long", "high"}));
}

class PreemptorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    s_.now = kNow;
    s_.preemption = true;
    s_.max_preemptors = 1;
    std::vector<NodeCapacity> nodes = Fleet(4, 8);
    s_.running = {Gang("low", nodes, {0}, 1), Gang("same", nodes, {1}, 5),
                  Gang("elsewhere", nodes, {2}, 1),
                  Gang("protected", nodes, {3}, 0)};
    s_.running[2].queue = "other";
    for (RunningGang& g : s_.running) g.preemptible = true;
    s_.running[3].preemptible = false;
    s_.nodes = testing::Busy(nodes, s_.running);
  }
  ClusterSnapshot s_;
};

TEST_F(PreemptorTest, OnlyPreemptibleLowerGangsOfItsQueueAreCandidates) {
  Preemptor preemptor(s_);
  JobRequest job = Job("p", Request(1, 8), 5);
  EXPECT_EQ(Ids(preemptor.Candidates(job, job)),
            std::vector<std::string>{"low"});
  // A gang that would outrank the job once requeued is not taken.
  s_.running[0].rank = 6;
  EXPECT_TRUE(Preemptor(s_).Candidates(job, job).empty());
  s_.running[0].rank = 1;
  s_.preempt_across_queues = true;
  EXPECT_EQ(Ids(Preemptor(s_).Candidates(job, job)),
            (std::vector<std::string>{"elsewhere", "low"}));
}

TEST_F(PreemptorTest, ARequestThatFoundNoRoomIsNotTriedAgainAtALowerRank) {
  Preemptor preemptor(s_);
  JobRequest job = Job("p", Request(2, 8), 5);
  ASSERT_FALSE(preemptor.Candidates(job, job).empty());
  preemptor.NoneFound(job, job);
  JobRequest lower = job;
  lower.priority = 4;
  EXPECT_TRUE(preemptor.Candidates(lower, lower).empty());
  JobRequest higher = job;
  higher.priority = 6;
  EXPECT_FALSE(preemptor.Candidates(higher, higher).empty());
}

TEST_F(PreemptorTest,
       ARecordedPreemptionUsesTheBudgetAndShrinksAnElasticVictim) {
  s_.running[0].min_nodes = 1;
  s_.running[0].nodes.push_back("n1");
  s_.running[0].shares.push_back(testing::WholeNode(s_.nodes[1]));
  s_.running[0].grace = absl::Seconds(30);
  Preemptor preemptor(s_);
  FleetIndex fleet(s_.nodes);
  PolicyGate policy(s_, fleet);
  JobRequest job = Job("p", Request(1, 8), 5);
  EXPECT_TRUE(preemptor.MayTry(job));
  JobRequest waiting = job;
  waiting.may_preempt = false;
  EXPECT_FALSE(preemptor.MayTry(waiting));
  Placement on_n0;
  on_n0.shares = {testing::WholeNode(s_.nodes[0])};
  Decisions out;
  preemptor.Record(job, {&s_.running[0]}, on_n0, "priority 5 > ",
                   /*may_shrink=*/true, &policy, &out);
  ASSERT_EQ(out.preemptions.size(), 1u);
  EXPECT_EQ(out.preemptions[0].victim, "low");
  EXPECT_EQ(out.preemptions[0].keep_nodes, std::vector<std::string>{"n1"});
  EXPECT_TRUE(absl::StrContains(out.preemptions[0].reason,
                                "(priority 5 > 1); elastic, it shrinks from "
                                "2 to 1 nodes"))
      << out.preemptions[0].reason;
  // The shrunk victim's nodes and the job's are held for them.
  ASSERT_EQ(out.reservations.size(), 2u);
  EXPECT_EQ(out.reservations[1].job_id, "p");
  EXPECT_EQ(out.reservations[1].start, kNow + absl::Seconds(30));
  EXPECT_EQ(out.reservations[1].waits_for, std::vector<std::string>{"low"});
  ASSERT_EQ(out.waiting.size(), 1u);
  EXPECT_TRUE(absl::StrContains(*out.waiting[0].second, "preempting job low"))
      << *out.waiting[0].second;
  EXPECT_EQ(preemptor.preempted().count("low"), 1u);
  // One preemptor a pass: the budget is spent.
  EXPECT_FALSE(preemptor.MayTry(job));
  EXPECT_TRUE(preemptor.Candidates(job, job).empty());
}

}  // namespace
}  // namespace xl::scheduler
