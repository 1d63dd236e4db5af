// MASTER_PORT allocation (security review F5): drawn at random among the
// free ports of the master's address, never one in use twice.
#include "server/state/ports.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace xl::state {
namespace {

TEST(MasterPortsTest, PortsAreRandomUniqueAndInRange) {
  MasterPorts ports(29500, 1000);
  std::vector<int> order;
  std::set<int> seen;
  for (int i = 0; i < 1000; ++i) {
    const int p = ports.Allocate("10.0.0.1");
    ASSERT_GE(p, 29500);
    ASSERT_LT(p, 30500);
    ASSERT_TRUE(seen.insert(p).second) << p << " handed out twice";
    order.push_back(p);
  }
  // Not the next one after the last: a co-tenant cannot guess it.
  int sequential = 0;
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i] == order[i - 1] + 1) ++sequential;
  }
  EXPECT_LT(sequential, 50);
  // Another address has all of its own.
  EXPECT_GE(ports.Allocate("10.0.0.2"), 29500);
}

TEST(MasterPortsTest, AReleasedPortIsFreeAgainAndAReservedOneIsNot) {
  MasterPorts ports(29500, 2, /*seed=*/7);
  ports.Reserve("a", 29500);
  EXPECT_EQ(ports.Allocate("a"), 29501);
  ports.Release("a", 29500);
  EXPECT_EQ(ports.Allocate("a"), 29500);
}

}  // namespace
}  // namespace xl::state
