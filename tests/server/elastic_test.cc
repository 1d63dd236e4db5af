// Elastic jobs (resources.min_nodes) in the scheduling core: they start on
// the most nodes that fit when all of them do not, wait (and reserve, and
// preempt) for their minimum, are admitted at fewer nodes by a quota that
// does not take all of them, grow onto free nodes when nothing ranked above
// them waits, and shrink under preemption onto the nodes the preemptor
// leaves them. Hand-made clusters with the decisions spelled out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/scheduler/placement.h"
#include "server/scheduler/schedule.h"

namespace xl::scheduler {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1800000000);

v1::NodeInventory Inventory() {
  v1::NodeInventory inv;
  inv.set_cpus(64);
  inv.set_memory_bytes(uint64_t{512} << 30);
  for (int i = 0; i < 8; ++i) {
    auto* g = inv.add_gpus();
    g->set_index(i);
    g->set_model("NVIDIA H100 80GB HBM3");
    g->set_memory_bytes(uint64_t{80} << 30);
  }
  return inv;
}

// `min` of `max` nodes of 8 GPUs (min 0: not elastic).
JobRequest Job(const std::string& id, int min, int max, int prio, int64_t seq) {
  auto r = std::make_shared<v1::ResourceRequest>();
  r->set_nodes(max);
  r->set_min_nodes(min);
  r->set_gpus_per_node(8);
  r->set_ranks_per_node(8);
  JobRequest j;
  j.job_id = id;
  j.priority = prio;
  j.submit_seq = seq;
  j.resources = r;
  j.queue = "q";
  j.user = "u";
  j.time_limit = absl::Hours(1);
  return j;
}

struct Cluster {
  ClusterSnapshot snap;
  explicit Cluster(int count) {
    for (int i = 0; i < count; ++i) {
      snap.nodes.push_back(
          NodeCapacity::Empty("n" + std::to_string(i), Inventory()));
    }
    snap.now = kNow;
    snap.preemption = true;
    snap.max_reservations = 8;
    snap.max_grows = 4;
  }
  // A gang of whole nodes; elastic when `request` has min_nodes.
  RunningGang& Run(const JobRequest& job, std::vector<int> nodes,
                   absl::Duration ends_in = absl::Hours(2)) {
    RunningGang gang;
    gang.job_id = job.job_id;
    gang.priority = job.priority;
    gang.rank = job.priority;
    gang.queue = job.queue;
    gang.user = job.user;
    gang.preemptible = true;
    gang.ran = absl::Hours(1);
    gang.grace = absl::Seconds(30);
    gang.expected_end = kNow + ends_in;
    gang.request = job.resources;
    gang.min_nodes = job.resources->min_nodes();
    gang.may_grow = gang.min_nodes > 0;
    for (int n : nodes) {
      NodeCapacity& node = snap.nodes[n];
      NodeShare share;
      share.node = node.name();
      for (int g = 0; g < 8; ++g) share.gpu_indices.push_back(g);
      EXPECT_TRUE(Consume(&node, share));
      gang.nodes.push_back(share.node);
      gang.gpus += 8;
      gang.shares.push_back(share);
    }
    snap.running.push_back(gang);
    return snap.running.back();
  }
};

std::vector<std::string> Nodes(const Placement& p) {
  std::vector<std::string> out;
  for (const NodeShare& s : p.shares) out.push_back(s.node);
  return out;
}

const Reservation* ReservationOf(const Decisions& d, const std::string& id) {
  for (const Reservation& r : d.reservations) {
    if (r.job_id == id) return &r;
  }
  return nullptr;
}

TEST(ElasticTest, StartsOnTheMostNodesThatFitWhenAllDoNot) {
  Cluster c(5);
  c.Run(Job("busy", 0, 2, 0, 1), {0, 1});
  Decisions d = Schedule(c.snap, {Job("e", 2, 8, 0, 2)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "e");
  EXPECT_EQ(Nodes(d.starts[0].second),
            (std::vector<std::string>{"n2", "n3", "n4"}));
  EXPECT_TRUE(d.waiting.empty());
}

TEST(ElasticTest, AJobThatFitsWholeStartsWhole) {
  Cluster c(4);
  Decisions d = Schedule(c.snap, {Job("e", 1, 3, 0, 1)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].second.shares.size(), 3u);
}

TEST(ElasticTest, WaitsForItsMinimumAndReservesForIt) {
  Cluster c(4);
  c.snap.preemption = false;
  c.Run(Job("a", 0, 3, 0, 1), {0, 1, 2}, absl::Minutes(20));
  Decisions d = Schedule(c.snap, {Job("e", 2, 4, 0, 2)});
  EXPECT_TRUE(d.starts.empty());
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_NE(d.waiting[0].second->find(
                "elastic, 2 to 4 nodes; not even 2 fit now"),
            std::string::npos)
      << *d.waiting[0].second;
  // Reserved for its minimum, when a's end frees enough for that.
  const Reservation* r = ReservationOf(d, "e");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->nodes.size(), 2u);
  EXPECT_EQ(r->start, kNow + absl::Minutes(20));
}

TEST(ElasticTest, AQuotaAdmitsItAtTheNodesItCovers) {
  Cluster c(4);
  QueuePolicy q;
  q.name = "q";
  q.quotas[kAnyModel].nominal = 16;  // two nodes of 8 GPUs
  c.snap.policies["q"] = q;
  c.snap.queues["q"];
  Decisions d = Schedule(c.snap, {Job("e", 1, 4, 0, 1)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].second.shares.size(), 2u);
  // Not even its minimum within the quota: it waits, for the quota.
  Cluster full(4);
  full.snap.policies["q"] = q;
  full.Run(Job("held", 0, 2, 0, 1), {0, 1});
  full.snap.queues["q"].gpus_by_model["NVIDIA H100 80GB HBM3"] = 16;
  full.snap.queues["q"].user_gpus["u"] = 16;
  d = Schedule(full.snap, {Job("e", 1, 4, 0, 2)});
  EXPECT_TRUE(d.starts.empty());
  ASSERT_EQ(d.job_reasons.size(), 1u);
}

TEST(ElasticTest, GrowsOntoFreeNodesWithItsOwnKept) {
  Cluster c(5);
  c.Run(Job("e", 2, 4, 0, 1), {0, 1});
  c.Run(Job("other", 0, 1, 0, 2), {4});
  Decisions d = Schedule(c.snap, {});
  ASSERT_EQ(d.grows.size(), 1u);
  EXPECT_EQ(d.grows[0].job_id, "e");
  EXPECT_EQ(d.grows[0].from, 2);
  EXPECT_EQ(d.grows[0].nodes,
            (std::vector<std::string>{"n0", "n1", "n2", "n3"}));
  EXPECT_NE(d.grows[0].reason.find("growing from 2 to 4 of 4 nodes"),
            std::string::npos)
      << d.grows[0].reason;
  // The nodes it restarts on are held for it until its ranks stop.
  const Reservation* r = ReservationOf(d, "e");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->nodes, d.grows[0].nodes);
  EXPECT_EQ(r->waits_for, std::vector<std::string>{"e"});
  EXPECT_EQ(r->start, kNow + absl::Seconds(30));
}

TEST(ElasticTest, GrowsByWhatIsFreeEvenIfNotToItsMost) {
  Cluster c(4);
  c.Run(Job("e", 1, 8, 0, 1), {0});
  c.Run(Job("other", 0, 1, 0, 2), {3});
  Decisions d = Schedule(c.snap, {});
  ASSERT_EQ(d.grows.size(), 1u);
  EXPECT_EQ(d.grows[0].nodes, (std::vector<std::string>{"n0", "n1", "n2"}));
}

TEST(ElasticTest, DoesNotGrowWhileAJobRankedAboveItWaits) {
  Cluster c(5);
  c.snap.preemption = false;
  c.Run(Job("e", 2, 4, 0, 1), {0, 1});
  // p (priority 5) needs 4 nodes; 3 are free: it waits, and e must not
  // take what p is waiting for.
  Decisions d = Schedule(c.snap, {Job("p", 0, 4, 5, 2)});
  EXPECT_TRUE(d.grows.empty());
  // A job ranked below e that waits does not stop it.
  Cluster below(5);
  below.snap.preemption = false;
  below.Run(Job("e", 2, 4, 3, 1), {0, 1});
  d = Schedule(below.snap, {Job("low", 0, 4, 0, 2)});
  ASSERT_EQ(d.grows.size(), 1u);
  EXPECT_EQ(d.grows[0].job_id, "e");
}

TEST(ElasticTest, GrowsOnlyWhenAllowedAndNotOntoHeldNodes) {
  Cluster c(4);
  RunningGang& e = c.Run(Job("e", 1, 4, 0, 1), {0});
  e.may_grow = false;  // too soon since its last start
  EXPECT_TRUE(Schedule(c.snap, {}).grows.empty());
  c.snap.max_grows = 0;  // a pass over new jobs
  c.snap.running[0].may_grow = true;
  EXPECT_TRUE(Schedule(c.snap, {}).grows.empty());
  // A reservation an earlier pass made holds n1 and n2 for a job ranked
  // above e: e grows onto n3 only.
  c.snap.max_grows = 4;
  Reservation hold;
  hold.job_id = "r";
  hold.priority = 9;
  hold.start = kNow + absl::Minutes(5);
  hold.nodes = {"n1", "n2"};
  c.snap.holds.push_back(hold);
  Decisions d = Schedule(c.snap, {});
  ASSERT_EQ(d.grows.size(), 1u);
  EXPECT_EQ(d.grows[0].nodes, (std::vector<std::string>{"n0", "n3"}));
}

TEST(ElasticTest, ShrinksUnderPreemptionOntoWhatIsLeft) {
  Cluster c(4);
  c.Run(Job("e", 2, 4, 0, 1), {0, 1, 2, 3});
  Decisions d = Schedule(c.snap, {Job("p", 0, 1, 5, 2)});
  ASSERT_EQ(d.preemptions.size(), 1u);
  const Preemption& p = d.preemptions[0];
  EXPECT_EQ(p.victim, "e");
  EXPECT_EQ(p.keep_nodes.size(), 3u);
  EXPECT_NE(p.reason.find("elastic, it shrinks from 4 to 3 nodes"),
            std::string::npos)
      << p.reason;
  const Reservation* keep = ReservationOf(d, "e");
  ASSERT_NE(keep, nullptr);
  EXPECT_EQ(keep->nodes, p.keep_nodes);
  const Reservation* claim = ReservationOf(d, "p");
  ASSERT_NE(claim, nullptr);
  ASSERT_EQ(claim->nodes.size(), 1u);
  for (const std::string& n : keep->nodes) EXPECT_NE(n, claim->nodes[0]);
}

TEST(ElasticTest, APreemptionBelowItsMinimumStopsItWhole) {
  Cluster c(4);
  c.Run(Job("e", 3, 4, 0, 1), {0, 1, 2, 3});
  Decisions d = Schedule(c.snap, {Job("p", 0, 2, 5, 2)});
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_TRUE(d.preemptions[0].keep_nodes.empty());
  EXPECT_EQ(ReservationOf(d, "e"), nullptr);
}

TEST(ElasticTest, StartsSmallRatherThanPreempting) {
  Cluster c(4);
  c.Run(Job("low", 0, 2, 0, 1), {0, 1});
  Decisions d = Schedule(c.snap, {Job("e", 1, 4, 5, 2)});
  EXPECT_TRUE(d.preemptions.empty());
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].second.shares.size(), 2u);
}

TEST(ElasticTest, AdmittedAtItsMinimumItStillReserves) {
  Cluster c(2);
  QueuePolicy q;
  q.name = "q";
  q.quotas[kAnyModel].nominal = 8;  // one node of 8 GPUs
  c.snap.policies["q"] = q;
  JobRequest busy = Job("busy", 0, 2, 0, 1);
  busy.queue = "other";
  c.Run(busy, {0, 1}, absl::Minutes(30));
  c.snap.queues["q"];
  Decisions d = Schedule(c.snap, {Job("e", 1, 4, 0, 2)});
  EXPECT_TRUE(d.starts.empty());
  const Reservation* r = ReservationOf(d, "e");
  ASSERT_NE(r, nullptr) << "no reservation: backfill could starve it";
  EXPECT_EQ(r->nodes.size(), 1u);
  EXPECT_EQ(r->start, kNow + absl::Minutes(30));
  // Without a reservation, its own reason says what its quota takes.
  c.snap.max_reservations = 0;
  d = Schedule(c.snap, {Job("e", 1, 4, 0, 2)});
  ASSERT_EQ(d.job_reasons.size(), 1u);
  EXPECT_NE(d.job_reasons[0].second->find("its queue's quota takes 1 of its"),
            std::string::npos)
      << *d.job_reasons[0].second;
}

// Reservations line up on a node (the second after the first's time
// limit), and a later pass over new jobs keeps both.
TEST(ElasticTest, ReservationsLineUpAndStandInTheNextPass) {
  Cluster c(1);
  c.snap.preemption = false;
  c.snap.max_grows = 0;
  c.Run(Job("busy", 0, 1, 0, 1), {0}, absl::Minutes(30));
  Decisions d = Schedule(c.snap, {Job("a", 0, 1, 0, 2), Job("b", 0, 1, 0, 3)});
  const Reservation* a = ReservationOf(d, "a");
  const Reservation* b = ReservationOf(d, "b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->start, kNow + absl::Minutes(30));
  EXPECT_EQ(b->start, kNow + absl::Minutes(90));  // a's hour after
  EXPECT_EQ(b->waits_for, std::vector<std::string>({"busy", "a"}));
  c.snap.holds = d.reservations;
  Decisions next = Schedule(c.snap, {Job("late", 0, 1, 0, 4)});
  EXPECT_TRUE(next.dropped_holds.empty());
  EXPECT_TRUE(next.starts.empty());
}

}  // namespace
}  // namespace xl::scheduler
