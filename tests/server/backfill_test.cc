// Reservations in the scheduling core (EASY backfill): a blocked gang gets
// the earliest time and the nodes it could start on, from running jobs'
// time limits; those nodes are held, so jobs behind it start only
// elsewhere. Hand-made clusters with the decisions spelled out, and a
// simulation over random fleets and traces: the first reserved job never
// starts later than its reservation said, no node is ever overcommitted and
// no gang is ever partly placed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "server/scheduler/placement.h"
#include "server/scheduler/schedule.h"

namespace xl::scheduler {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1800000000);

v1::NodeInventory Inventory(int gpus, const std::string& sw) {
  v1::NodeInventory inv;
  inv.set_cpus(64);
  inv.set_memory_bytes(uint64_t{512} << 30);
  (*inv.mutable_labels())["switch"] = sw;
  for (int i = 0; i < gpus; ++i) {
    auto* g = inv.add_gpus();
    g->set_index(i);
    g->set_model("NVIDIA H100 80GB HBM3");
    g->set_memory_bytes(uint64_t{80} << 30);
  }
  return inv;
}

std::shared_ptr<const v1::ResourceRequest> Request(int nodes, int gpus) {
  auto r = std::make_shared<v1::ResourceRequest>();
  r->set_nodes(nodes);
  r->set_gpus_per_node(gpus);
  r->set_ranks_per_node(gpus);
  return r;
}

JobRequest Job(const std::string& id, int nodes, int gpus, int prio,
               int64_t seq, absl::Duration limit = absl::InfiniteDuration()) {
  JobRequest j;
  j.job_id = id;
  j.priority = prio;
  j.submit_seq = seq;
  j.resources = Request(nodes, gpus);
  j.time_limit = limit;
  return j;
}

// A cluster of 8-GPU nodes n0..n{count-1}; `busy` maps a node to the end of
// the job that holds all of its GPUs (InfiniteFuture: no time limit).
struct Cluster {
  ClusterSnapshot snap;
  explicit Cluster(int count, int reservations = 8) {
    for (int i = 0; i < count; ++i) {
      snap.nodes.push_back(
          NodeCapacity::Empty("n" + std::to_string(i), Inventory(8, "s1")));
    }
    snap.now = kNow;
    snap.max_reservations = reservations;
  }
  void Busy(int node, const std::string& job, absl::Time end) {
    NodeShare share;
    share.node = snap.nodes[node].name();
    for (int g = 0; g < 8; ++g) share.gpu_indices.push_back(g);
    ASSERT_TRUE(Consume(&snap.nodes[node], share));
    RunningGang gang;
    gang.job_id = job;
    gang.nodes = {share.node};
    gang.gpus = 8;
    gang.expected_end = end;
    gang.shares = {share};
    snap.running.push_back(gang);
  }
};

std::map<std::string, std::vector<std::string>> Starts(const Decisions& d) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [id, p] : d.starts) {
    for (const auto& s : p.shares) out[id].push_back(s.node);
  }
  return out;
}

// n0 busy for 1 h, n1 for 2 h, n2 and n3 free. A 4-node gang at priority 10
// and three 1-node jobs at priority 0 behind it.
TEST(BackfillTest, WithoutReservationsSmallJobsTakeEveryNodeThatFrees) {
  Cluster c(4, /*reservations=*/0);
  c.Busy(0, "r0", kNow + absl::Hours(1));
  c.Busy(1, "r1", kNow + absl::Hours(2));
  Decisions d = Schedule(c.snap, {Job("big", 4, 8, 10, 1), Job("s1", 1, 8, 0, 2),
                                  Job("s2", 1, 8, 0, 3), Job("s3", 1, 8, 0, 4)});
  // The gang waits while the small jobs take n2 and n3: starvation.
  EXPECT_EQ(Starts(d), (std::map<std::string, std::vector<std::string>>{
                           {"s1", {"n2"}}, {"s2", {"n3"}}}));
  EXPECT_TRUE(d.reservations.empty());
}

TEST(BackfillTest, ABlockedGangIsReservedAndItsNodesHeld) {
  Cluster c(4);
  c.Busy(0, "r0", kNow + absl::Hours(1));
  c.Busy(1, "r1", kNow + absl::Hours(2));
  Decisions d = Schedule(c.snap, {Job("big", 4, 8, 10, 1), Job("s1", 1, 8, 0, 2),
                                  Job("s2", 1, 8, 0, 3)});
  EXPECT_TRUE(d.starts.empty()) << "n2 and n3 are held for the gang";
  ASSERT_GE(d.reservations.size(), 1u);
  const Reservation& r = d.reservations[0];
  EXPECT_EQ(r.job_id, "big");
  EXPECT_EQ(r.start, kNow + absl::Hours(2));
  EXPECT_EQ(std::set<std::string>(r.nodes.begin(), r.nodes.end()),
            (std::set<std::string>{"n0", "n1", "n2", "n3"}));
  EXPECT_EQ(std::set<std::string>(r.waits_for.begin(), r.waits_for.end()),
            (std::set<std::string>{"r0", "r1"}));
  std::string reason;
  for (const auto& [id, why] : d.waiting) {
    if (id == "big") reason = *why;
  }
  EXPECT_NE(reason.find("reserved: expected to start by "), std::string::npos)
      << reason;
  EXPECT_NE(reason.find("(in 2h"), std::string::npos) << reason;
  EXPECT_NE(reason.find("r0, r1"), std::string::npos) << reason;
}

// Backfill: a job that does not need the reserved nodes starts now.
TEST(BackfillTest, JobsBehindAReservationStartOffItsNodes) {
  Cluster c(6);
  for (int i = 0; i < 3; ++i) {
    c.Busy(i, "r" + std::to_string(i), kNow + absl::Hours(1));
  }
  c.Busy(3, "r3", absl::InfiniteFuture());  // no time limit: never counted on
  Decisions d = Schedule(c.snap, {Job("big", 4, 8, 10, 1), Job("s1", 1, 8, 0, 2),
                                  Job("s2", 1, 8, 0, 3)});
  ASSERT_GE(d.reservations.size(), 1u);
  const Reservation& r = d.reservations[0];
  EXPECT_EQ(r.job_id, "big");
  // n0..n2 free at 1 h, plus one of the free n4, n5; never n3.
  EXPECT_EQ(r.start, kNow + absl::Hours(1));
  EXPECT_EQ(std::count(r.nodes.begin(), r.nodes.end(), "n3"), 0);
  std::set<std::string> held(r.nodes.begin(), r.nodes.end());
  auto starts = Starts(d);
  ASSERT_EQ(starts.count("s1"), 1u) << "the free node the gang does not need";
  EXPECT_EQ(held.count(starts["s1"][0]), 0u) << starts["s1"][0];
  EXPECT_EQ(starts.count("s2"), 0u);
}

// A job that ends before a reservation begins may run on its held nodes
// meanwhile (by its time limit); a longer one may not.
TEST(BackfillTest, AShortJobRunsOnHeldNodesUntilTheReservation) {
  Cluster c(4);
  c.Busy(0, "r0", kNow + absl::Hours(1));
  c.Busy(1, "r1", kNow + absl::Hours(2));
  Decisions d = Schedule(
      c.snap, {Job("big", 4, 8, 10, 1), Job("long", 1, 8, 0, 2, absl::Hours(3)),
               Job("short", 1, 8, 0, 3, absl::Minutes(30)),
               Job("short2", 1, 8, 0, 4, absl::Hours(2))});
  ASSERT_GE(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job_id, "big");
  EXPECT_EQ(d.reservations[0].start, kNow + absl::Hours(2));
  auto starts = Starts(d);
  EXPECT_EQ(starts.count("long"), 0u) << "it would delay the gang";
  ASSERT_EQ(starts.count("short"), 1u);
  ASSERT_EQ(starts.count("short2"), 1u) << "ending exactly at the start is fine";
  EXPECT_NE(starts["short"][0], starts["short2"][0]);
  for (const auto& [id, nodes] : starts) {
    EXPECT_TRUE(nodes[0] == "n2" || nodes[0] == "n3") << id << " " << nodes[0];
  }
}

// Nothing with a time limit frees enough: no reservation, no hold, and the
// small jobs run (the gang could not be promised anything).
TEST(BackfillTest, NoReservationWhereRunningJobsHaveNoLimit) {
  Cluster c(4);
  c.Busy(0, "r0", absl::InfiniteFuture());
  Decisions d = Schedule(c.snap, {Job("big", 4, 8, 10, 1), Job("s1", 1, 8, 0, 2)});
  EXPECT_TRUE(d.reservations.empty());
  EXPECT_EQ(Starts(d).count("s1"), 1u);
}

// A job this pass starts counts for reservations behind it by its limit.
TEST(BackfillTest, AJobStartedInThePassFreesItsNodeByItsLimit) {
  Cluster c(2);
  c.Busy(0, "r0", kNow + absl::Hours(3));
  Decisions d = Schedule(c.snap, {Job("a", 1, 8, 20, 1, absl::Minutes(30)),
                                  Job("big", 2, 8, 10, 2)});
  EXPECT_EQ(Starts(d).count("a"), 1u);
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].start, kNow + absl::Hours(3));
  EXPECT_EQ(std::set<std::string>(d.reservations[0].waits_for.begin(),
                                  d.reservations[0].waits_for.end()),
            (std::set<std::string>{"a", "r0"}));
}

// A pass over new jobs keeps the holds of the reservations made before.
TEST(BackfillTest, HoldsFromAnEarlierPassKeepNewJobsOff) {
  Cluster c(4);
  c.Busy(0, "r0", kNow + absl::Hours(1));
  Decisions first = Schedule(c.snap, {Job("big", 4, 8, 10, 1)});
  ASSERT_EQ(first.reservations.size(), 1u);
  Cluster again(4);
  again.Busy(0, "r0", kNow + absl::Hours(1));
  again.snap.holds = first.reservations;
  Decisions d = Schedule(again.snap, {Job("new", 1, 8, 0, 5)});
  EXPECT_TRUE(d.starts.empty());
  // And only max_reservations of them are made in all.
  Cluster one(4, /*reservations=*/1);
  one.Busy(0, "r0", kNow + absl::Hours(1));
  one.snap.holds = first.reservations;
  Decisions none = Schedule(one.snap, {Job("big2", 2, 8, 9, 6)});
  EXPECT_TRUE(none.reservations.empty());
}

// A new job that outranks a reserved one is placed before the hold applies;
// if it takes from a held node the reservation is dropped (to be decided
// again). A hold on a node that is gone is dropped too. Jobs ranked after
// a hold are told why they wait.
TEST(BackfillTest, HoldsApplyFromTheirRankOnAndNoLongerStandingOnesAreDropped) {
  Cluster c(4);
  c.Busy(0, "r0", kNow + absl::Hours(1));
  Decisions first = Schedule(c.snap, {Job("big", 4, 8, 5, 1)});
  ASSERT_EQ(first.reservations.size(), 1u);
  EXPECT_EQ(first.reservations[0].priority, 5);

  Cluster again(4);
  again.Busy(0, "r0", kNow + absl::Hours(1));
  again.snap.holds = first.reservations;
  Decisions d = Schedule(again.snap, {Job("urgent", 1, 8, 9, 7),
                                      Job("later", 1, 8, 0, 8)});
  EXPECT_EQ(Starts(d).count("urgent"), 1u) << "it outranks the reservation";
  // The rest of big's nodes stay held for jobs ranked after it.
  EXPECT_EQ(Starts(d).count("later"), 0u);
  EXPECT_EQ(d.dropped_holds, std::vector<std::string>{"big"});

  Cluster held(4);
  held.Busy(0, "r0", kNow + absl::Hours(1));
  held.snap.holds = first.reservations;
  Decisions waits = Schedule(held.snap, {Job("later", 1, 8, 0, 8)});
  EXPECT_TRUE(waits.starts.empty());
  EXPECT_TRUE(waits.dropped_holds.empty());
  ASSERT_EQ(waits.waiting.size(), 1u);
  EXPECT_NE(waits.waiting[0].second->find("held for job big's reservation"),
            std::string::npos)
      << *waits.waiting[0].second;

  Cluster gone(5);  // n3 is drained, n4 is new
  gone.Busy(0, "r0", kNow + absl::Hours(1));
  gone.snap.nodes[3].unavailable = "drained";
  gone.snap.holds = first.reservations;
  Decisions dropped = Schedule(gone.snap, {Job("later", 1, 8, 0, 8)});
  EXPECT_EQ(dropped.dropped_holds, std::vector<std::string>{"big"});
  EXPECT_EQ(Starts(dropped)["later"], std::vector<std::string>{"n4"});
}

// Random fleets and traces, every job submitted at time 0, each running
// for at most its time limit: the first reserved job always starts no
// later than it was first promised; no node is overcommitted; gangs are
// whole.
TEST(BackfillTest, TheFirstReservationIsNeverDelayed) {
  std::mt19937 rng(7);
  int checked = 0, held_promises = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int count = 6 + static_cast<int>(rng() % 10);
    std::vector<NodeCapacity> fleet;
    for (int i = 0; i < count; ++i) {
      fleet.push_back(NodeCapacity::Empty(
          "n" + std::to_string(i), Inventory(8, i % 2 == 0 ? "s1" : "s2")));
    }
    struct Pending {
      JobRequest req;
      absl::Duration runs;
    };
    std::vector<Pending> pending;
    for (int j = 0; j < 30; ++j) {
      const int nodes = 1 + static_cast<int>(rng() % std::min(count, 6));
      const int gpus = (rng() % 3 == 0) ? 8 : 1 + static_cast<int>(rng() % 8);
      const absl::Duration limit = absl::Minutes(1 + rng() % 20);
      const absl::Duration runs = limit * (0.3 + 0.7 * (rng() % 100) / 99.0);
      pending.push_back({Job("j" + std::to_string(j), nodes, gpus,
                             static_cast<int>(rng() % 4), j, limit),
                         runs});
    }
    struct Running {
      std::string id;
      Placement placement;
      absl::Time end, limit_end;
    };
    std::vector<Running> running;
    std::map<std::string, absl::Time> promised;
    std::string first_reserved;
    absl::Time now = kNow;
    for (int step = 0; step < 500 && !(pending.empty() && running.empty());
         ++step) {
      ClusterSnapshot snap;
      snap.nodes = fleet;
      snap.now = now;
      snap.max_reservations = 4;
      std::map<std::string, int> index;
      for (int i = 0; i < count; ++i) index[fleet[i].name()] = i;
      for (const Running& r : running) {
        RunningGang g;
        g.job_id = r.id;
        g.expected_end = r.limit_end;
        g.shares = r.placement.shares;
        for (const auto& s : r.placement.shares) {
          ASSERT_TRUE(Consume(&snap.nodes[index[s.node]], s)) << "overcommit";
        }
        snap.running.push_back(g);
      }
      std::vector<JobRequest> queue;
      std::map<std::string, absl::Duration> runs;
      for (const Pending& p : pending) {
        queue.push_back(p.req);
        runs[p.req.job_id] = p.runs;
      }
      std::vector<NodeCapacity> check = snap.nodes;
      Decisions d = Schedule(snap, queue);
      for (const auto& [id, placement] : d.starts) {
        const JobRequest* req = nullptr;
        for (const Pending& p : pending) {
          if (p.req.job_id == id) req = &p.req;
        }
        ASSERT_NE(req, nullptr);
        ASSERT_EQ(static_cast<int>(placement.shares.size()),
                  req->resources->nodes())
            << "a gang partly placed";
        for (const auto& s : placement.shares) {
          ASSERT_TRUE(Consume(&check[index[s.node]], s)) << "overcommit";
        }
        if (promised.count(id) > 0) {
          ++checked;
          EXPECT_LE(now, promised[id])
              << id << " started after its reservation, trial " << trial;
          held_promises += now <= promised[id];
        }
        running.push_back({id, placement, now + runs[id], now + req->time_limit});
        pending.erase(std::remove_if(pending.begin(), pending.end(),
                                     [&](const Pending& p) {
                                       return p.req.job_id == id;
                                     }),
                      pending.end());
      }
      if (!d.reservations.empty()) {
        const Reservation& top = d.reservations[0];
        // The first promise to the top blocked job is the one kept.
        if (promised.count(top.job_id) == 0) promised[top.job_id] = top.start;
      }
      // Next event: the earliest end.
      if (running.empty()) break;
      auto next = std::min_element(
          running.begin(), running.end(),
          [](const Running& a, const Running& b) { return a.end < b.end; });
      now = next->end;
      running.erase(std::remove_if(running.begin(), running.end(),
                                   [&](const Running& r) { return r.end <= now; }),
                    running.end());
    }
  }
  // The trace reaches the property often enough to mean something.
  EXPECT_GT(checked, 40);
  EXPECT_EQ(held_promises, checked);
}

}  // namespace
}  // namespace xl::scheduler
