// The last phase of a pass: free GPUs no waiting request can use.
#include "server/scheduler/pass/fragmentation.h"

#include <gtest/gtest.h>

#include "tests/server/pass/fleet.h"

namespace xl::scheduler {
namespace {

using testing::Fleet;
using testing::Request;

TEST(FragmentationTest, CountsFreeGpusWhereNoWaitingShareFits) {
  // n0 has 8 GPUs, n1 has 2 free of 8, n2 is drained with 8 free.
  std::vector<NodeCapacity> nodes = Fleet(3, 8);
  nodes[1].gpu_free = 0b11;
  nodes[2].unavailable = "drained";
  FleetIndex fleet(nodes);
  auto four = Request(1, 4);
  auto two = Request(1, 2);
  // A 4-GPU share fits n0 only: n1's 2 are stranded; n2 is not counted.
  EXPECT_EQ(FragmentedGpus(fleet, {four.get()}), 2);
  // A 2-GPU request uses n1 too: nothing is stranded.
  EXPECT_EQ(FragmentedGpus(fleet, {four.get(), two.get()}), 0);
  // CPU-only and missing requests use no GPU: all free GPUs are stranded.
  auto cpu = Request(1, 0);
  EXPECT_EQ(FragmentedGpus(fleet, {cpu.get(), nullptr}), 10);
}

TEST(FragmentationTest, NothingWaitingIsMinusOne) {
  std::vector<NodeCapacity> nodes = Fleet(2, 8);
  FleetIndex fleet(nodes);
  EXPECT_EQ(FragmentedGpus(fleet, {}), -1);
}

}  // namespace
}  // namespace xl::scheduler
