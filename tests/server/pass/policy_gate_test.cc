// The quota plugin of a pass: admission, narrowing to the GPU models a
// quota covers, reclaiming lent quota, and when running gangs ending admit
// a job.
#include "server/scheduler/pass/policy_gate.h"

#include <gtest/gtest.h>

#include <memory>
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

QueuePolicy Policy(const std::string& name, const std::string& key,
                   int64_t nominal, const std::string& cohort = "") {
  QueuePolicy p;
  p.name = name;
  p.cohort = cohort;
  p.quotas[key] = {nominal, -1, -1};
  p.reclaim = !cohort.empty();
  return p;
}

TEST(PolicyGateTest, AQueueAdmitsUpToItsQuotaAndCountsWhatStarts) {
  ClusterSnapshot s;
  s.nodes = Fleet(4, 8);
  s.policies["research"] = Policy("research", "*", 16);
  FleetIndex fleet(s.nodes);
  PolicyGate gate(s, fleet);
  JobRequest first = Job("first", Request(1, 8), 0, 0, "research");
  JobRequest other = Job("other", Request(1, 8), 0, 0, "elsewhere");
  EXPECT_TRUE(gate.governs(first));
  EXPECT_FALSE(gate.governs(other));
  bool narrowed = false, reclaimable = false;
  std::shared_ptr<const std::string> why;
  ASSERT_TRUE(gate.Admit(&first, &narrowed, &why, &reclaimable));
  EXPECT_FALSE(narrowed);
  Placement p;
  p.shares = {testing::WholeNode(s.nodes[0])};
  gate.Charge(first, p);
  JobRequest second = Job("second", Request(1, 8), 0, 1, "research");
  ASSERT_TRUE(gate.Admit(&second, &narrowed, &why, &reclaimable));
  p.shares = {testing::WholeNode(s.nodes[1])};
  gate.Charge(second, p);
  // 16 of 16 in use: the third waits, told why.
  JobRequest third = Job("third", Request(1, 8), 0, 2, "research");
  ASSERT_FALSE(gate.Admit(&third, &narrowed, &why, &reclaimable));
  ASSERT_NE(why, nullptr);
  EXPECT_TRUE(absl::StrContains(*why, "research")) << *why;
  EXPECT_FALSE(reclaimable);
}

TEST(PolicyGateTest, AReservedJobKeepsItsQuota) {
  ClusterSnapshot s;
  s.nodes = Fleet(4, 8);
  s.policies["research"] = Policy("research", "*", 16);
  FleetIndex fleet(s.nodes);
  PolicyGate gate(s, fleet);
  // Reserved without nodes known: charged to the first model it may use.
  gate.ChargeReserved(Job("big", Request(1, 8), 0, 0, "research"), {});
  bool narrowed = false, reclaimable = false;
  std::shared_ptr<const std::string> why;
  JobRequest eight = Job("eight", Request(1, 8), 0, 1, "research");
  ASSERT_TRUE(gate.Admit(&eight, &narrowed, &why, &reclaimable));
  gate.ChargeReserved(eight, {{"H100", 8}});
  JobRequest more = Job("more", Request(1, 8), 0, 2, "research");
  EXPECT_FALSE(gate.Admit(&more, &narrowed, &why, &reclaimable));
}

TEST(PolicyGateTest, AQuotaOnOneModelNarrowsTheJobToThatModel) {
  ClusterSnapshot s;
  s.nodes = Fleet(1, 8, "H100");
  for (NodeCapacity& n : Fleet(1, 8, "A100", 1)) s.nodes.push_back(n);
  s.policies["lab"] = Policy("lab", "A100", 8);
  FleetIndex fleet(s.nodes);
  PolicyGate gate(s, fleet);
  JobRequest job = Job("job", Request(1, 8), 0, 0, "lab");
  const v1::ResourceRequest* asked = job.resources.get();
  bool narrowed = false, reclaimable = false;
  std::shared_ptr<const std::string> why;
  ASSERT_TRUE(gate.Admit(&job, &narrowed, &why, &reclaimable));
  EXPECT_TRUE(narrowed);
  EXPECT_NE(job.resources.get(), asked);
  ASSERT_EQ(job.resources->gpu_models_size(), 1);
  EXPECT_EQ(job.resources->gpu_models(0), "A100");
  EXPECT_EQ(gate.NarrowedWhy(job),
            "queue lab's quota has room only for A100 now: ");
}

TEST(PolicyGateTest, ALenderReclaimsFromTheCheapestBorrowerOnly) {
  ClusterSnapshot s;
  s.now = kNow;
  s.preemption = true;
  std::vector<NodeCapacity> nodes = Fleet(3, 8);
  s.policies["a"] = Policy("a", "*", 8, "lab");
  s.policies["b"] = Policy("b", "*", 8, "lab");
  s.policies["c"] = Policy("c", "*", 8, "lab");
  s.running = {Gang("g1", nodes, {0}), Gang("g2", nodes, {1}),
               Gang("g3", nodes, {2})};
  const char* queues[] = {"b", "b", "c"};
  const int ran_minutes[] = {60, 10, 1};
  for (int i = 0; i < 3; ++i) {
    s.running[i].queue = queues[i];
    s.running[i].preemptible = true;
    s.running[i].ran = absl::Minutes(ran_minutes[i]);
    s.queues[queues[i]].gpus_by_model["H100"] += 8;
  }
  s.nodes = testing::Busy(nodes, s.running);
  FleetIndex fleet(s.nodes);
  PolicyGate gate(s, fleet);
  JobRequest job = Job("p", Request(1, 8), 0, 0, "a");
  bool narrowed = false, reclaimable = false;
  std::shared_ptr<const std::string> why;
  ASSERT_FALSE(gate.Admit(&job, &narrowed, &why, &reclaimable));
  EXPECT_TRUE(reclaimable);
  std::vector<const RunningGang*> victims;
  ASSERT_TRUE(gate.Reclaim(&job, s.running, {}, &victims, &narrowed));
  ASSERT_EQ(victims.size(), 1u);
  // b borrowed; of its gangs the one that ran least goes. c keeps its own.
  EXPECT_EQ(victims[0]->job_id, "g2");
  // Already preempted gangs are not counted again.
  ASSERT_TRUE(gate.Reclaim(&job, s.running, {"g2"}, &victims, &narrowed));
  EXPECT_EQ(victims[0]->job_id, "g1");
  gate.CommitReclaim();
  EXPECT_TRUE(gate.Admit(&job, &narrowed, &why, &reclaimable));
}

TEST(PolicyGateTest, FreesAtIsWhenEnoughOfTheQueuesGangsHaveEnded) {
  ClusterSnapshot s;
  s.now = kNow;
  s.policy_frees = true;
  std::vector<NodeCapacity> nodes = Fleet(3, 8);
  s.policies["q"] = Policy("q", "*", 16);
  s.running = {Gang("early", nodes, {0}, 0, kNow + absl::Hours(1)),
               Gang("late", nodes, {1}, 0, kNow + absl::Hours(3))};
  for (RunningGang& g : s.running) g.queue = "q";
  s.queues["q"].gpus_by_model["H100"] = 16;
  s.nodes = testing::Busy(nodes, s.running);
  FleetIndex fleet(s.nodes);
  PolicyGate gate(s, fleet);
  EXPECT_EQ(gate.FreesAt(Job("eight", Request(1, 8), 0, 0, "q"), s.running),
            kNow + absl::Hours(1));
  EXPECT_EQ(gate.FreesAt(Job("all", Request(2, 8), 0, 0, "q"), s.running),
            kNow + absl::Hours(3));
  EXPECT_EQ(gate.FreesAt(Job("more", Request(3, 8), 0, 0, "q"), s.running),
            absl::InfiniteFuture());
}

}  // namespace
}  // namespace xl::scheduler
