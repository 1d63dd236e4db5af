// The elastic plugin of a pass: fixed sizes of elastic requests and the
// grow phase.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "server/scheduler/pass/elastic.h"
#include "tests/server/pass/fleet.h"

namespace xl::scheduler {
namespace {

using testing::Fleet;
using testing::Gang;
using testing::Job;
using testing::kNow;
using testing::Request;

TEST(ElasticSizesTest, OneObjectPerSizeWithoutAMinimum) {
  ElasticSizes sizes;
  auto base = Request(4, 8, 2);
  auto three = sizes.Of(base, 3);
  EXPECT_EQ(three->nodes(), 3);
  EXPECT_EQ(three->min_nodes(), 0);
  EXPECT_EQ(three->gpus_per_node(), 8);
  EXPECT_EQ(sizes.Of(base, 3).get(), three.get());
  EXPECT_NE(sizes.Of(base, 2).get(), three.get());
  EXPECT_EQ(MinNodes(Job("e", base)), 2);
  EXPECT_EQ(MinNodes(Job("fixed", Request(4, 8))), 0);
  EXPECT_EQ(MinNodes(Job("none", nullptr)), 0);
}

class GrowTest : public ::testing::Test {
 protected:
  // Five 8-GPU nodes; an elastic gang of 1 to 4 nodes runs on n0.
  void SetUp() override {
    s_.now = kNow;
    s_.max_grows = 4;
    std::vector<NodeCapacity> nodes = Fleet(5, 8);
    RunningGang g = Gang("e", nodes, {0}, 0);
    g.request = Request(4, 8, 1);
    g.min_nodes = 1;
    g.may_grow = true;
    g.rank = 3;
    g.grace = absl::Seconds(20);
    s_.running = {g};
    nodes[4].unavailable = "drained";
    s_.nodes = testing::Busy(nodes, s_.running);
  }
  Decisions Grow(std::optional<double> first_waiting_rank,
                 std::unordered_set<std::string> preempted = {}) {
    FleetIndex fleet(s_.nodes);
    PolicyGate policy(s_, fleet);
    Decisions out;
    GrowElastic(s_, preempted, first_waiting_rank, &fleet, &policy, &out);
    return out;
  }
  ClusterSnapshot s_;
};

TEST_F(GrowTest, AGangGrowsOntoWhatIsFreeUpToItsMost) {
  Decisions d = Grow(std::nullopt);
  ASSERT_EQ(d.grows.size(), 1u);
  EXPECT_EQ(d.grows[0].job_id, "e");
  EXPECT_EQ(d.grows[0].from, 1);
  // Its own node and three free ones; never the drained one.
  EXPECT_EQ(d.grows[0].nodes,
            (std::vector<std::string>{"n0", "n1", "n2", "n3"}));
  EXPECT_TRUE(absl::StrContains(d.grows[0].reason, "from 1 to 4 of 4"))
      << d.grows[0].reason;
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].start, kNow + absl::Seconds(20));
  EXPECT_EQ(d.reservations[0].gpus_by_model.at("H100"), 32);
}

TEST_F(GrowTest, NotWhileAJobThatOutranksItWaitsNorWhenPreempted) {
  EXPECT_TRUE(Grow(5.0).grows.empty());
  EXPECT_EQ(Grow(2.0).grows.size(), 1u);
  EXPECT_TRUE(Grow(std::nullopt, {"e"}).grows.empty());
  s_.max_grows = 0;
  EXPECT_TRUE(Grow(std::nullopt).grows.empty());
}

TEST_F(GrowTest, AGangGrowsByWhatFitsWhenNotAllItWantsIsFree) {
  // Only n1 is free besides its own.
  s_.nodes[2].gpu_free = 0;
  s_.nodes[3].gpu_free = 0b1;
  Decisions d = Grow(std::nullopt);
  ASSERT_EQ(d.grows.size(), 1u);
  EXPECT_EQ(d.grows[0].nodes, (std::vector<std::string>{"n0", "n1"}));
}

}  // namespace
}  // namespace xl::scheduler
