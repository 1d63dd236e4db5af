// DetectCgroups on fake mount tables: cgroup v2 when it has the memory
// controller, else the v1 controllers under the agent's own cgroup, else
// none with the reason. Needs no root: the "mounts" are temporary
// directories.
#include "agent/isolation/cgroup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace xl::agent {
namespace {

using ::testing::HasSubstr;

class DetectCgroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xl-cgroup-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ + "/v2");
    std::filesystem::create_directories(dir_ + "/memory/agent.service");
    std::filesystem::create_directories(dir_ + "/cpu,cpuacct/agent.service");
    Write("own", "5:cpu,cpuacct:/agent.service\n4:memory:/agent.service\n0::/\n");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  void Mounts(bool v2, bool v1) {
    std::string text;
    if (v1) {
      text += "35 31 0:32 / " + dir_ +
              "/memory rw,relatime - cgroup cgroup rw,memory\n"
              "32 31 0:29 / " + dir_ +
              "/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n";
    }
    if (v2) {
      text += "41 31 0:38 / " + dir_ + "/v2 rw,relatime - cgroup2 cgroup2 rw\n";
    }
    text += "22 1 0:21 / /proc rw - proc proc rw\n";
    Write("mountinfo", text);
  }
  CgroupHierarchy Detect() {
    return DetectCgroups("node-1", dir_ + "/mountinfo", dir_ + "/own");
  }

  std::string dir_;
};

TEST_F(DetectCgroupsTest, PrefersV2WithTheMemoryController) {
  Mounts(/*v2=*/true, /*v1=*/true);
  Write("v2/cgroup.controllers", "cpuset cpu io memory pids\n");
  CgroupHierarchy h = Detect();
  EXPECT_EQ(h.version, CgroupVersion::kV2);
  EXPECT_EQ(h.v2_dir, dir_ + "/v2/xl/node-1");
  EXPECT_TRUE(h.memory);
  EXPECT_TRUE(h.cpu);
  EXPECT_FALSE(h.devices);
}

TEST_F(DetectCgroupsTest, FallsBackToV1WhenV2HasNoMemoryController) {
  Mounts(/*v2=*/true, /*v1=*/true);
  Write("v2/cgroup.controllers", "");
  CgroupHierarchy h = Detect();
  ASSERT_EQ(h.version, CgroupVersion::kV1);
  // Under the agent's own cgroup of each controller, named after the node.
  EXPECT_EQ(h.v1_dirs.at("memory"), dir_ + "/memory/agent.service/xl/node-1");
  EXPECT_EQ(h.v1_dirs.at("cpu"), dir_ + "/cpu,cpuacct/agent.service/xl/node-1");
  EXPECT_TRUE(h.cpu);
  EXPECT_FALSE(h.devices);
  EXPECT_THAT(h.note, HasSubstr("devices, freezer"));
}

TEST_F(DetectCgroupsTest, NoneWithTheReasonWhenNothingHasMemory) {
  Mounts(/*v2=*/true, /*v1=*/false);
  Write("v2/cgroup.controllers", "cpu pids\n");
  CgroupHierarchy h = Detect();
  EXPECT_EQ(h.version, CgroupVersion::kNone);
  EXPECT_THAT(h.note, HasSubstr("has no memory controller"));
  EXPECT_THAT(DescribeCgroups(h).front(), HasSubstr("not enforced"));
}

}  // namespace
}  // namespace xl::agent
