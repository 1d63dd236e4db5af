// Gang-aware preemption in the scheduling core: a blocked job stops whole
// running gangs of a lower priority, the fewest and cheapest that make room
// (lowest priority, least GPU time lost), never one that is not
// preemptible; it then holds the nodes they free. Hand-made clusters with
// the decisions spelled out, and random ones: every preemption is of a
// whole lower-priority preemptible gang, no gang twice, and what the
// victims free lets the preemptor start.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "server/scheduler/placement.h"
#include "server/scheduler/schedule.h"

namespace xl::scheduler {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1800000000);

v1::NodeInventory Inventory(int gpus) {
  v1::NodeInventory inv;
  inv.set_cpus(64);
  inv.set_memory_bytes(uint64_t{512} << 30);
  (*inv.mutable_labels())["switch"] = "s1";
  for (int i = 0; i < gpus; ++i) {
    auto* g = inv.add_gpus();
    g->set_index(i);
    g->set_model("NVIDIA H100 80GB HBM3");
    g->set_memory_bytes(uint64_t{80} << 30);
  }
  return inv;
}

JobRequest Job(const std::string& id, int nodes, int gpus, int prio,
               int64_t seq) {
  auto r = std::make_shared<v1::ResourceRequest>();
  r->set_nodes(nodes);
  r->set_gpus_per_node(gpus);
  r->set_ranks_per_node(gpus);
  JobRequest j;
  j.job_id = id;
  j.priority = prio;
  j.submit_seq = seq;
  j.resources = r;
  j.user = "u";
  return j;
}

struct Cluster {
  ClusterSnapshot snap;
  explicit Cluster(int count) {
    for (int i = 0; i < count; ++i) {
      snap.nodes.push_back(
          NodeCapacity::Empty("n" + std::to_string(i), Inventory(8)));
    }
    snap.now = kNow;
    snap.preemption = true;
    snap.max_reservations = 8;
  }
  // A running gang on `nodes`, `gpus` GPUs each.
  RunningGang& Run(const std::string& id, std::vector<int> nodes, int gpus,
                   int prio, absl::Duration ran, bool preemptible = true) {
    RunningGang gang;
    gang.job_id = id;
    gang.priority = prio;
    gang.ran = ran;
    gang.preemptible = preemptible;
    gang.grace = absl::Seconds(30);
    for (int n : nodes) {
      NodeCapacity& node = snap.nodes[n];
      NodeShare share;
      share.node = node.name();
      for (int g = 0; g < 8 && static_cast<int>(share.gpu_indices.size()) < gpus;
           ++g) {
        if (node.gpu_free >> g & 1) share.gpu_indices.push_back(g);
      }
      EXPECT_TRUE(Consume(&node, share));
      gang.nodes.push_back(share.node);
      gang.gpus += gpus;
      gang.shares.push_back(share);
    }
    snap.running.push_back(gang);
    return snap.running.back();
  }
};

std::vector<std::string> Victims(const Decisions& d) {
  std::vector<std::string> out;
  for (const auto& p : d.preemptions) out.push_back(p.victim);
  return out;
}

TEST(PreemptionTest, TheCheapestLowerPriorityGangGoesWhole) {
  Cluster c(3);
  c.Run("a", {0, 1}, 8, 0, absl::Hours(1));
  c.Run("b", {2}, 8, 0, absl::Minutes(10));
  Decisions d = c.snap.preemption ? Schedule(c.snap, {Job("p", 1, 8, 5, 1)})
                                  : Decisions();
  ASSERT_EQ(Victims(d), std::vector<std::string>{"b"});
  EXPECT_EQ(d.preemptions[0].for_job, "p");
  EXPECT_NE(d.preemptions[0].reason.find("preempted by job p"),
            std::string::npos);
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job_id, "p");
  EXPECT_EQ(d.reservations[0].nodes, std::vector<std::string>{"n2"});
  EXPECT_EQ(d.reservations[0].start, kNow + absl::Seconds(30));
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_NE(d.waiting[0].second->find("preempting job b (priority 0"),
            std::string::npos)
      << *d.waiting[0].second;
  EXPECT_TRUE(d.starts.empty());
}

TEST(PreemptionTest, VictimsNotNeededArePutBack) {
  // b is cheaper and goes first, but p needs two whole nodes: a alone
  // frees them, so b keeps running.
  Cluster c(3);
  c.Run("a", {0, 1}, 8, 0, absl::Hours(1));
  c.Run("b", {2}, 8, 0, absl::Minutes(10));
  Decisions d = Schedule(c.snap, {Job("p", 2, 8, 5, 1)});
  EXPECT_EQ(Victims(d), std::vector<std::string>{"a"});
  ASSERT_EQ(d.reservations.size(), 1u);
  std::vector<std::string> nodes = d.reservations[0].nodes;
  std::sort(nodes.begin(), nodes.end());
  EXPECT_EQ(nodes, (std::vector<std::string>{"n0", "n1"}));
}

TEST(PreemptionTest, NeverEqualOrHigherPriorityNorProtectedGangs) {
  Cluster c(2);
  c.Run("same", {0}, 8, 5, absl::Hours(1));
  c.Run("protected", {1}, 8, 0, absl::Hours(1), /*preemptible=*/false);
  Decisions d = Schedule(c.snap, {Job("p", 1, 8, 5, 1)});
  EXPECT_TRUE(d.preemptions.empty());
  // Nothing to gain: the job waits as any other.
  ASSERT_EQ(d.waiting.size(), 1u);
}

TEST(PreemptionTest, AJobWaitingForItsVictimsDoesNotPreemptMore) {
  Cluster c(2);
  c.Run("a", {0}, 8, 0, absl::Hours(1));
  c.Run("b", {1}, 8, 0, absl::Hours(1));
  JobRequest p = Job("p", 1, 8, 5, 1);
  p.may_preempt = false;
  Decisions d = Schedule(c.snap, {p});
  EXPECT_TRUE(d.preemptions.empty());
  // Two blocked jobs each take their own victim, never the same one.
  d = Schedule(c.snap, {Job("p", 1, 8, 5, 1), Job("q", 1, 8, 5, 2)});
  std::vector<std::string> victims = Victims(d);
  std::sort(victims.begin(), victims.end());
  EXPECT_EQ(victims, (std::vector<std::string>{"a", "b"}));
  // Off: nothing is preempted.
  c.snap.preemption = false;
  d = Schedule(c.snap, {Job("p", 1, 8, 5, 1)});
  EXPECT_TRUE(d.preemptions.empty());
}

TEST(PreemptionTest, AJobWithoutVictimsInItsQueueDoesNotStopAnotherQueuesTry) {
  // Equal requests and priorities from two queues: queue x's only victim
  // does not make room, queue y's does; y's job must still be tried after
  // x's failed.
  Cluster c(2);
  c.Run("pinned", {0}, 7, 0, absl::Hours(1), /*preemptible=*/false).queue =
      "x";
  c.Run("small", {0}, 1, 0, absl::Hours(1)).queue = "x";
  RunningGang& g = c.Run("victim", {1}, 8, 0, absl::Hours(1));
  g.queue = "y";
  JobRequest x = Job("px", 1, 8, 5, 1);
  x.queue = "x";
  JobRequest y = Job("py", 1, 8, 5, 2);
  y.queue = "y";
  y.resources = x.resources;  // one class, as the controller shares it
  Decisions d = Schedule(c.snap, {x, y});
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].for_job, "py");
}

TEST(PreemptionTest, ALowerJobCannotTakeWhatWasFreedForThePreemptor) {
  Cluster c(2);
  c.Run("a", {0}, 8, 0, absl::Hours(1));
  c.Run("b", {1}, 4, 0, absl::Hours(1));
  // p preempts b (the cheaper: 4 GPUs for an hour); r (priority 0, ranked
  // after p) fits on n1's free half, but that node is held for p now.
  Decisions d = Schedule(c.snap, {Job("p", 1, 8, 5, 1), Job("r", 1, 4, 0, 2)});
  ASSERT_EQ(Victims(d), std::vector<std::string>{"b"});
  const std::string held = d.reservations[0].nodes[0];
  EXPECT_EQ(held, "n1");
  for (const auto& [id, placement] : d.starts) {
    for (const auto& share : placement.shares) {
      EXPECT_NE(share.node, held) << id << " took the preemptor's node";
    }
  }
}

// A queue whose nominal quota its cohort lent takes it back from the
// borrowers, whatever their priority; queues that do not borrow keep their
// jobs.
TEST(PreemptionTest, ALenderReclaimsItsQuotaFromBorrowers) {
  Cluster c(3);
  auto policy = [](const std::string& name, int64_t nominal) {
    QueuePolicy p;
    p.name = name;
    p.cohort = "lab";
    p.quotas["*"] = {nominal, -1, -1};
    p.reclaim = true;
    return p;
  };
  c.snap.policies["a"] = policy("a", 8);
  c.snap.policies["b"] = policy("b", 8);
  c.snap.policies["c"] = policy("c", 8);
  // b holds 16 (8 borrowed from a); c holds its own 8.
  for (auto [id, node, queue, ran] :
       {std::make_tuple("g1", 0, "b", 60), std::make_tuple("g2", 1, "b", 10),
        std::make_tuple("g3", 2, "c", 1)}) {
    RunningGang& g = c.Run(id, {node}, 8, /*prio=*/5, absl::Minutes(ran));
    g.queue = queue;
    c.snap.queues[queue].gpus_by_model["NVIDIA H100 80GB HBM3"] += 8;
  }
  JobRequest job = Job("p", 1, 8, /*prio=*/0, 1);
  job.queue = "a";
  Decisions d = Schedule(c.snap, {job});
  // The borrower's cheaper gang goes; c, within its own quota, keeps its
  // job though it ran the least.
  ASSERT_EQ(Victims(d), std::vector<std::string>{"g2"});
  EXPECT_NE(d.preemptions[0].reason.find(
                "reclaiming the nominal quota queue a lent"),
            std::string::npos)
      << d.preemptions[0].reason;
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].nodes, std::vector<std::string>{"n1"});

  // A queue that does not reclaim waits for the borrowers' jobs to end.
  c.snap.policies["a"].reclaim = false;
  EXPECT_TRUE(Schedule(c.snap, {job}).preemptions.empty());
  c.snap.policies["a"].reclaim = true;
  // Borrowers' gangs that may not be preempted are not taken: the job
  // waits, saying its quota was lent.
  for (auto& g : c.snap.running) g.preemptible = g.job_id == "g3";
  d = Schedule(c.snap, {job});
  EXPECT_TRUE(d.preemptions.empty());
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_NE(d.waiting[0].second->find("borrowed that part"),
            std::string::npos)
      << *d.waiting[0].second;
}

// Random fleets and running gangs, random blocked jobs: every preemption
// stops a whole, preemptible gang of a lower priority than its preemptor,
// no gang twice, and releasing the victims lets the preemptor start on the
// nodes it holds.
TEST(PreemptionTest, RandomClustersKeepTheRules) {
  int preemptions = 0;
  for (int seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int n) {
      return std::uniform_int_distribution<int>(0, n - 1)(rng);
    };
    Cluster c(4 + pick(12));
    std::map<std::string, const RunningGang*> by_id;
    for (int g = 0; g < 20; ++g) {
      // A gang on 1-3 nodes with room for it.
      const int gpus = 1 << pick(4);
      const int want = 1 + pick(3);
      std::vector<int> nodes;
      for (size_t n = 0; n < c.snap.nodes.size() &&
                         static_cast<int>(nodes.size()) < want;
           ++n) {
        if (__builtin_popcountll(c.snap.nodes[n].gpu_free) >= gpus &&
            pick(2) == 0) {
          nodes.push_back(static_cast<int>(n));
        }
      }
      if (static_cast<int>(nodes.size()) < want) continue;
      c.Run("g" + std::to_string(g), nodes, gpus, pick(4),
            absl::Minutes(pick(600)), pick(5) != 0);
    }
    for (const auto& g : c.snap.running) by_id[g.job_id] = &g;
    std::vector<JobRequest> queue;
    for (int j = 0; j < 6; ++j) {
      queue.push_back(Job("j" + std::to_string(j), 1 + pick(3),
                          1 << pick(4), pick(6), j));
    }
    std::map<std::string, int> prio;
    for (const auto& j : queue) prio[j.job_id] = j.priority;
    Decisions d = Schedule(c.snap, queue);
    std::set<std::string> seen;
    std::map<std::string, std::vector<std::string>> victims_of;
    for (const auto& p : d.preemptions) {
      ++preemptions;
      ASSERT_TRUE(seen.insert(p.victim).second) << "preempted twice";
      const RunningGang* g = by_id.at(p.victim);
      EXPECT_TRUE(g->preemptible);
      EXPECT_LT(g->priority, prio.at(p.for_job));
      victims_of[p.for_job].push_back(p.victim);
    }
    for (const auto& r : d.reservations) {
      auto v = victims_of.find(r.job_id);
      if (v == victims_of.end()) continue;
      // The nodes as they will be once the victims have stopped (and what
      // this pass started elsewhere is taken).
      std::vector<NodeCapacity> after = c.snap.nodes;
      auto node = [&](const std::string& name) -> NodeCapacity& {
        for (auto& n : after) {
          if (n.name() == name) return n;
        }
        return after[0];
      };
      for (const auto& [id, placement] : d.starts) {
        for (const auto& share : placement.shares) {
          EXPECT_TRUE(Consume(&node(share.node), share));
        }
      }
      for (const std::string& victim : v->second) {
        for (const auto& share : by_id.at(victim)->shares) {
          Release(&node(share.node), share);
        }
      }
      std::vector<NodeCapacity> held;
      for (const std::string& name : r.nodes) held.push_back(node(name));
      const JobRequest* job = nullptr;
      for (const auto& j : queue) {
        if (j.job_id == r.job_id) job = &j;
      }
      Placement placement;
      std::string why;
      EXPECT_TRUE(PlaceGang(held, *job->resources, &placement, &why))
          << "seed " << seed << " job " << r.job_id << ": " << why;
      // No victim is there for nothing: each one holds something on the
      // nodes the preemptor holds.
      for (const std::string& victim : v->second) {
        bool there = false;
        for (const auto& share : by_id.at(victim)->shares) {
          there |= std::find(r.nodes.begin(), r.nodes.end(), share.node) !=
                   r.nodes.end();
        }
        EXPECT_TRUE(there) << "seed " << seed << ": victim " << victim
                           << " holds nothing where " << r.job_id << " goes";
      }
    }
  }
  EXPECT_GT(preemptions, 50);
  printf("%d preemptions checked\n", preemptions);
}

}  // namespace
}  // namespace xl::scheduler
