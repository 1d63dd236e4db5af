// The per-pass memo of the filter and score phases.
#include "server/scheduler/pass/class_table.h"

#include <gtest/gtest.h>

#include <memory>

#include "tests/server/pass/fleet.h"

namespace xl::scheduler {
namespace {

using testing::Request;

TEST(ClassTableTest, EqualRequestsShareOneEntryWhateverTheirObject) {
  ClassTable table;
  auto a = Request(2, 4);
  auto same = Request(2, 4);
  auto other = Request(2, 8);
  ClassTable::Entry& first = table.Find(a);
  first.reason = std::make_shared<const std::string>("no room");
  EXPECT_EQ(&table.Find(a), &first);
  EXPECT_EQ(&table.Find(same), &first);
  ClassTable::Entry& second = table.Find(other);
  EXPECT_NE(&second, &first);
  EXPECT_EQ(second.reason, nullptr);
  // Entries stay where they are as more are added.
  for (int n = 1; n < 100; ++n) table.Find(Request(n, 1));
  EXPECT_EQ(&table.Find(a), &first);
  EXPECT_EQ(*table.Find(same).reason, "no room");
}

TEST(ClassTableTest, AJobWithoutARequestFailsWithAReason) {
  ClassTable table;
  ClassTable::Entry& e = table.Find(nullptr);
  ASSERT_NE(e.reason, nullptr);
  EXPECT_EQ(*e.reason, "the job has no resource request");
}

}  // namespace
}  // namespace xl::scheduler
