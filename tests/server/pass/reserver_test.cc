// The reserve phase (EASY backfill), backfill onto held nodes, and the node
// side of preemption.
#include "server/scheduler/pass/reserver.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/match.h"
#include "tests/server/pass/fleet.h"

namespace xl::scheduler {
namespace {

using testing::Busy;
using testing::Fleet;
using testing::Gang;
using testing::Job;
using testing::kNow;
using testing::NodesOf;
using testing::Request;

// Four 8-GPU nodes: gang "a" on n0, n1 until now + 1h, "b" on n2, n3 until
// now + 2h.
ClusterSnapshot FullFleet() {
  ClusterSnapshot s;
  s.now = kNow;
  s.max_reservations = 8;
  std::vector<NodeCapacity> nodes = Fleet(4, 8);
  s.running = {Gang("a", nodes, {0, 1}, 0, kNow + absl::Hours(1)),
               Gang("b", nodes, {2, 3}, 0, kNow + absl::Hours(2))};
  s.nodes = Busy(nodes, s.running);
  return s;
}

TEST(ReserverTest, AReservationStartsWhenEnoughRunningGangsHaveEnded) {
  ClusterSnapshot s = FullFleet();
  FleetIndex fleet(s.nodes);
  Reserver reserver(s, &fleet);
  JobRequest two = Job("two", Request(2, 8));
  two.time_limit = absl::Hours(3);
  Reservation r;
  ASSERT_TRUE(reserver.Reserve(two, &r));
  EXPECT_EQ(r.start, kNow + absl::Hours(1));
  EXPECT_EQ(r.nodes, (std::vector<std::string>{"n0", "n1"}));
  EXPECT_EQ(r.waits_for, (std::vector<std::string>{"a"}));
  EXPECT_EQ(r.gpus_by_model.at("H100"), 16);
  // Its nodes are held from then on: the next gang of two gets the others,
  // later.
  Reservation next;
  ASSERT_TRUE(reserver.Reserve(Job("next", Request(2, 8)), &next));
  EXPECT_EQ(next.start, kNow + absl::Hours(2));
  EXPECT_EQ(next.nodes, (std::vector<std::string>{"n2", "n3"}));
  // Held nodes are gone from the fleet for the rest of the pass.
  EXPECT_NE(fleet.slot(fleet.slot_of_node(0)).held, nullptr);
  // A gang of four needs both reserved ones to end first (the first after
  // its time limit, the second never: no limit).
  Reservation four;
  EXPECT_FALSE(reserver.Reserve(Job("four", Request(4, 8)), &four));
  const std::string text = ReservationText(r, kNow);
  EXPECT_TRUE(absl::StrContains(text, "on n0, n1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "when job a ends")) << text;
}

TEST(ReserverTest, OnlyJobsThatEndBeforeAHoldBeginsBackfillOntoIt) {
  ClusterSnapshot s;
  s.now = kNow;
  s.max_reservations = 1;
  s.nodes = Fleet(1, 8);
  FleetIndex fleet(s.nodes);
  Reserver reserver(s, &fleet);
  Reservation hold;
  hold.job_id = "big";
  hold.start = kNow + absl::Hours(1);
  hold.nodes = {"n0"};
  ASSERT_TRUE(reserver.Hold(hold));
  JobRequest quick = Job("quick", Request(1, 8));
  quick.time_limit = absl::Minutes(30);
  JobRequest slow = Job("slow", Request(1, 8));
  slow.time_limit = absl::Hours(2);
  JobRequest unlimited = Job("unlimited", Request(1, 8));
  Placement p;
  EXPECT_FALSE(reserver.BackfillOnHeld(slow, &p));
  EXPECT_FALSE(reserver.BackfillOnHeld(unlimited, &p));
  ASSERT_TRUE(reserver.BackfillOnHeld(quick, &p));
  EXPECT_EQ(NodesOf(p), (std::vector<std::string>{"n0"}));
}

TEST(ReserverTest, AHoldOnANodeAJobStartedOnInThisPassNoLongerStands) {
  ClusterSnapshot s;
  s.now = kNow;
  s.nodes = Fleet(2, 8);
  FleetIndex fleet(s.nodes);
  Reserver reserver(s, &fleet);
  Placement p;
  p.shares = {testing::WholeNode(s.nodes[0])};
  reserver.Started(Job("first", Request(1, 8)), p);
  Reservation hold;
  hold.job_id = "held";
  hold.start = kNow;
  hold.nodes = {"n0", "n1"};
  EXPECT_FALSE(reserver.Hold(hold));
  Reservation gone = hold;
  gone.nodes = {"n1", "n9"};
  EXPECT_FALSE(reserver.Hold(gone));
  Reservation fine = hold;
  fine.nodes = {"n1"};
  EXPECT_TRUE(reserver.Hold(fine));
}

TEST(ReserverTest, PreemptionKeepsOnlyTheVictimsOnTheNodesItGets) {
  ClusterSnapshot s;
  s.now = kNow;
  s.preemption = true;
  std::vector<NodeCapacity> nodes = Fleet(2, 8);
  RunningGang half_a = Gang("half-a", nodes, {0});
  half_a.shares[0].gpu_indices = {0, 1, 2, 3};
  RunningGang half_b = Gang("half-b", nodes, {0});
  half_b.shares[0].gpu_indices = {4, 5, 6, 7};
  RunningGang whole = Gang("whole", nodes, {1});
  s.running = {half_a, half_b, whole};
  s.nodes = Busy(nodes, s.running);
  const std::vector<const RunningGang*> candidates = {
      &s.running[0], &s.running[2], &s.running[1]};
  JobRequest job = Job("job", Request(1, 8));
  {
    FleetIndex fleet(s.nodes);
    Reserver reserver(s, &fleet);
    std::vector<const RunningGang*> victims;
    Placement p;
    ASSERT_TRUE(reserver.PreemptFor(job, candidates, &victims, &p));
    ASSERT_EQ(victims.size(), 1u);
    EXPECT_EQ(victims[0]->job_id, "whole");
    EXPECT_EQ(NodesOf(p), (std::vector<std::string>{"n1"}));
    // The nodes it starts on are held for it.
    EXPECT_NE(fleet.slot(fleet.slot_of_node(1)).held, nullptr);
  }
  {
    // A reclaim keeps every victim up to the one that made room.
    FleetIndex fleet(s.nodes);
    Reserver reserver(s, &fleet);
    std::vector<const RunningGang*> victims;
    Placement p;
    ASSERT_TRUE(reserver.PreemptFor(job, candidates, &victims, &p,
                                    /*minimize=*/false));
    EXPECT_EQ(victims.size(), 2u);
  }
  {
    // Not enough even with every candidate.
    FleetIndex fleet(s.nodes);
    Reserver reserver(s, &fleet);
    std::vector<const RunningGang*> victims;
    Placement p;
    EXPECT_FALSE(reserver.PreemptFor(Job("big", Request(3, 8)), candidates,
                                     &victims, &p));
  }
}

}  // namespace
}  // namespace xl::scheduler
