// DetectCgroups on fake mount tables: cgroup v2 when it has the memory
// controller, else the v1 controllers under the agent's own cgroup, else
// none with the reason. Needs no root: the "mounts" are temporary
// directories.
#include "agent/isolation/cgroup.h"
#include "agent/isolation/device_filter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

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
    return DetectCgroups("node-1", CgroupChoice::kAuto, dir_ + "/mountinfo",
                         dir_ + "/own");
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
  EXPECT_TRUE(h.pids);
  // Confined by a BPF program where this process may load one.
  EXPECT_EQ(h.devices, ProbeDeviceFilter().ok());
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

TEST_F(DetectCgroupsTest, V2WhenToldSoSayingWhichControllersItLacks) {
  Mounts(/*v2=*/true, /*v1=*/true);
  // A hybrid host: the controllers are bound to v1, v2 has none of ours.
  Write("v2/cgroup.controllers", "hugetlb\n");
  CgroupHierarchy h = DetectCgroups("node-1", CgroupChoice::kV2,
                                    dir_ + "/mountinfo", dir_ + "/own");
  ASSERT_EQ(h.version, CgroupVersion::kV2);
  EXPECT_FALSE(h.memory);
  EXPECT_FALSE(h.pids);
  EXPECT_THAT(h.note, HasSubstr("lacks the memory, cpu, pids controllers"));
  EXPECT_TRUE(h.freeze_or_kill);
}

TEST_F(DetectCgroupsTest, V1WhenToldSoEvenWhereV2HasMemory) {
  Mounts(/*v2=*/true, /*v1=*/true);
  Write("v2/cgroup.controllers", "cpu memory pids\n");
  CgroupHierarchy h = DetectCgroups("node-1", CgroupChoice::kV1,
                                    dir_ + "/mountinfo", dir_ + "/own");
  EXPECT_EQ(h.version, CgroupVersion::kV1);
}

TEST(DeviceRuleTest, ParsesDevicesAllowLinesAndNamesWhatIsWrong) {
  absl::StatusOr<DeviceRule> r = ParseDeviceRule("c 136:* rw");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->type, 'c');
  EXPECT_EQ(r->major, 136);
  EXPECT_EQ(r->minor, -1);
  EXPECT_TRUE(r->read && r->write && !r->mknod);
  EXPECT_THAT(ParseDeviceRule("x 1:3 rwm").status().message(),
              HasSubstr("the type"));
  EXPECT_THAT(ParseDeviceRule("c 1 rwm").status().message(),
              HasSubstr("MAJOR:MINOR"));
  EXPECT_THAT(ParseDeviceRule("c 1:3 rwx").status().message(),
              HasSubstr("access"));
}

// The program on a real cgroup v2 directory: a child moved into it opens
// what the rules allow, in the modes they allow, and nothing else.
TEST(DeviceFilterTest, AllowsExactlyTheRulesAccesses) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a cgroup and a BPF program)";
  CgroupHierarchy h = DetectCgroups("device-filter-test", CgroupChoice::kV2);
  if (h.version != CgroupVersion::kV2 || !h.devices) {
    GTEST_SKIP() << "no cgroup v2 with BPF device programs here: " << h.note;
  }
  const std::string dir =
      std::filesystem::path(h.v2_dir).parent_path().string() +
      "/device-filter-test-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  std::vector<DeviceRule> rules = {*ParseDeviceRule("c 1:3 rwm"),
                                   *ParseDeviceRule("c 1:5 r")};
  ASSERT_TRUE(AttachDeviceFilter(fd, rules).ok());
  close(fd);
  const pid_t child = fork();
  if (child == 0) {
    std::ofstream(dir + "/cgroup.procs") << "0" << std::flush;
    int bits = 0;
    auto opens = [](const char* path, int mode) {
      int f = open(path, mode);
      if (f >= 0) close(f);
      return f >= 0;
    };
    if (opens("/dev/null", O_RDWR)) bits |= 1;     // c 1:3 rwm
    if (opens("/dev/zero", O_RDONLY)) bits |= 2;   // c 1:5 r
    if (!opens("/dev/zero", O_WRONLY)) bits |= 4;  // not w
    if (!opens("/dev/full", O_RDONLY)) bits |= 8;  // c 1:7: no rule
    _exit(bits);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  rmdir(dir.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 15);
}

}  // namespace
}  // namespace xl::agent
