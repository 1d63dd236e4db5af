// Tests of the node inventory: the inventory file format, discovery from a
// fake sysfs/procfs tree, and NVML being absent.
#include "agent/inventory/inventory.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/inventory/nvml.h"
#include "agent/inventory/sysfs.h"
#include "common/proto_text.h"

namespace xl::agent {
namespace {

using ::testing::HasSubstr;

// A temporary directory removed with the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "xl-agent-test-XXXXXX")
            .string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

  // Writes `content` to path()/rel, creating directories.
  void Write(const std::string& rel, const std::string& content) const {
    std::filesystem::path p = std::filesystem::path(path_) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << content;
  }

 private:
  std::string path_;
};

TEST(InventoryFileTest, NodeAParsesToExactlyTheseValues) {
  absl::StatusOr<v1::NodeInventory> inv =
      LoadInventoryFile(std::string(XL_AGENT_TESTDATA) + "/node-a.yaml");
  ASSERT_TRUE(inv.ok()) << inv.status();

  v1::NodeInventory want;
  want.set_hostname("node-a");
  (*want.mutable_labels())["rack"] = "r1";
  (*want.mutable_labels())["switch"] = "s1";
  want.set_cpus(16);
  want.set_memory_bytes(68719476736ULL);
  for (int i = 0; i < 2; ++i) {
    v1::Gpu* gpu = want.add_gpus();
    gpu->set_index(i);
    gpu->set_uuid("GPU-node-a-" + std::to_string(i));  // Filled in.
    gpu->set_model("NVIDIA H100 80GB HBM3");
    gpu->set_memory_bytes(85899345920ULL);
  }
  v1::Nvme* nvme = want.add_nvme();
  nvme->set_device("nvme0n1");
  nvme->set_path("/mnt/nvme0/xl-scratch");
  nvme->set_capacity_bytes(1920383410176ULL);
  nvme->set_free_bytes(1800000000000ULL);
  v1::Nic* nic = want.add_nics();
  nic->set_name("eth0");
  nic->set_kind(v1::ETHERNET);
  nic->set_gbps(100);

  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(want, *inv)) << diff;
  EXPECT_EQ(inv->address(), "");
  EXPECT_EQ(ScratchDir(*inv, "/w"), "/mnt/nvme0/xl-scratch");
}

TEST(InventoryFileTest, KeepsGivenUuidsAndDefaultsHostname) {
  TempDir dir;
  dir.Write("inv.yaml",
            "gpus:\n"
            "  - {index: 0, uuid: GPU-1234, model: A100}\n"
            "  - {index: 3, model: A100}\n");
  absl::StatusOr<v1::NodeInventory> inv =
      LoadInventoryFile(dir.path() + "/inv.yaml");
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->hostname(), LocalHostname());
  EXPECT_EQ(inv->gpus(0).uuid(), "GPU-1234");
  EXPECT_EQ(inv->gpus(1).uuid(), "GPU-" + LocalHostname() + "-3");
  EXPECT_EQ(ScratchDir(*inv, "/w"), "/w/scratch");
}

TEST(InventoryFileTest, UnknownFieldIsInvalidArgumentNamingIt) {
  TempDir dir;
  dir.Write("bad.yaml", "hostname: n\ngpu_count: 8\n");
  absl::StatusOr<v1::NodeInventory> inv =
      LoadInventoryFile(dir.path() + "/bad.yaml");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(inv.status().message(), HasSubstr("gpu_count"));
}

TEST(InventoryFileTest, BadValueIsInvalidArgumentNamingTheField) {
  TempDir dir;
  dir.Write("bad.yaml", "hostname: n\ncpus: lots\n");
  absl::StatusOr<v1::NodeInventory> inv =
      LoadInventoryFile(dir.path() + "/bad.yaml");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(inv.status().message(), HasSubstr("cpus"));
}

TEST(InventoryFileTest, DuplicateGpuIndexIsInvalidArgument) {
  TempDir dir;
  dir.Write("bad.yaml", "gpus:\n  - {index: 1}\n  - {index: 1}\n");
  absl::StatusOr<v1::NodeInventory> inv =
      LoadInventoryFile(dir.path() + "/bad.yaml");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(inv.status().message(), HasSubstr("gpus[1].index"));
}

TEST(InventoryFileTest, MissingFileIsNotFound) {
  absl::StatusOr<v1::NodeInventory> inv =
      LoadInventoryFile("/nonexistent/xl/inventory.yaml");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kNotFound);
}

// A fake machine: two NVMe devices (one mounted through a partition, one
// not), a hidden multipath path, eth0 at 25 Gb/s, eth1 with speed -1, lo, an
// IPoIB interface, and an HDR HCA with two ports.
class FakeSysfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_ = scratch_.path();
    root_.Write("sys/block/nvme0n1/size", "3750748848\n");
    root_.Write("sys/block/nvme1n1/size", "1000\n");
    root_.Write("sys/block/nvme0c0n1/size", "3750748848\n");
    root_.Write("sys/block/nvme0c0n1/hidden", "1\n");
    root_.Write("sys/block/sda/size", "999\n");
    root_.Write("proc/mounts",
                "/dev/sda1 / ext4 rw 0 0\n"
                "/dev/nvme0n1p1 " +
                    mount_ + " xfs rw 0 0\n");
    root_.Write("proc/meminfo",
                "MemTotal:       263855468 kB\nMemFree: 1 kB\n");
    root_.Write("sys/class/net/lo/speed", "-1\n");
    root_.Write("sys/class/net/eth0/speed", "25000\n");
    root_.Write("sys/class/net/eth0/type", "1\n");
    root_.Write("sys/class/net/eth1/speed", "-1\n");
    root_.Write("sys/class/net/ib0/type", "32\n");
    root_.Write("sys/class/infiniband/mlx5_0/ports/1/rate",
                "200 Gb/sec (4X HDR)\n");
    root_.Write("sys/class/infiniband/mlx5_0/ports/2/rate",
                "100 Gb/sec (2X HDR)\n");
  }

  TempDir root_;
  TempDir scratch_;
  std::string mount_;
};

TEST_F(FakeSysfsTest, DiscoversNvme) {
  absl::StatusOr<std::vector<v1::Nvme>> nvme = DiscoverNvme(root_.path(), "/w");
  ASSERT_TRUE(nvme.ok()) << nvme.status();
  ASSERT_EQ(nvme->size(), 2u);
  EXPECT_EQ((*nvme)[0].device(), "nvme0n1");
  EXPECT_EQ((*nvme)[0].capacity_bytes(), 3750748848ULL * 512);
  EXPECT_EQ((*nvme)[0].path(), mount_ + "/xl-scratch");
  EXPECT_GT((*nvme)[0].free_bytes(), 0u);
  EXPECT_EQ((*nvme)[1].device(), "nvme1n1");
  EXPECT_EQ((*nvme)[1].capacity_bytes(), 1000u * 512);
  EXPECT_EQ((*nvme)[1].path(), "");
  EXPECT_EQ((*nvme)[1].free_bytes(), 0u);
}

TEST_F(FakeSysfsTest, NvmeHoldingRootUsesWorkDirScratch) {
  root_.Write("proc/mounts", "/dev/nvme1n1 / ext4 rw 0 0\n");
  absl::StatusOr<std::vector<v1::Nvme>> nvme = DiscoverNvme(root_.path(), "/w");
  ASSERT_TRUE(nvme.ok()) << nvme.status();
  EXPECT_EQ((*nvme)[1].path(), "/w/scratch");
}

TEST_F(FakeSysfsTest, DiscoversEthernetAndInfiniband) {
  absl::StatusOr<std::vector<v1::Nic>> nics = DiscoverNics(root_.path());
  ASSERT_TRUE(nics.ok()) << nics.status();
  ASSERT_EQ(nics->size(), 3u);
  EXPECT_EQ((*nics)[0].name(), "eth0");
  EXPECT_EQ((*nics)[0].kind(), v1::ETHERNET);
  EXPECT_DOUBLE_EQ((*nics)[0].gbps(), 25);
  EXPECT_EQ((*nics)[1].name(), "eth1");
  EXPECT_DOUBLE_EQ((*nics)[1].gbps(), 0);
  EXPECT_EQ((*nics)[2].name(), "mlx5_0");
  EXPECT_EQ((*nics)[2].kind(), v1::INFINIBAND);
  EXPECT_DOUBLE_EQ((*nics)[2].gbps(), 200);
}

// An 8-rail node: every HCA under /sys/class/infiniband is a NIC of its
// own (NCCL_IB_HCA lists them all), in name order, which is byte order
// (mlx5_10 sorts before mlx5_2); IPoIB faces are not counted again.
TEST_F(FakeSysfsTest, EveryHcaOfAnEightRailNodeIsItsOwnNic) {
  for (int i = 0; i < 8; ++i) {
    root_.Write(absl::StrCat("sys/class/infiniband/mlx5_", i, "/ports/1/rate"),
                "400 Gb/sec (4X NDR)\n");
    root_.Write(absl::StrCat("sys/class/net/ibp", i, "s0/type"), "32\n");
  }
  root_.Write("sys/class/infiniband/mlx5_10/ports/1/rate",
              "200 Gb/sec (4X HDR)\n");
  absl::StatusOr<std::vector<v1::Nic>> nics = DiscoverNics(root_.path());
  ASSERT_TRUE(nics.ok()) << nics.status();
  std::vector<std::string> hcas;
  int at_400 = 0;
  for (const v1::Nic& nic : *nics) {
    if (nic.kind() != v1::INFINIBAND) continue;
    hcas.push_back(nic.name());
    at_400 += nic.gbps() == 400;
  }
  EXPECT_EQ(hcas, (std::vector<std::string>{"mlx5_0", "mlx5_1", "mlx5_10",
                                            "mlx5_2", "mlx5_3", "mlx5_4",
                                            "mlx5_5", "mlx5_6", "mlx5_7"}));
  EXPECT_EQ(at_400, 8);
  EXPECT_EQ(nics->size(), 2u + 9u);  // eth0, eth1 and the HCAs
}

TEST_F(FakeSysfsTest, DiscoverInventoryWithoutNvmlHasZeroGpus) {
  DiscoveryOptions options;
  options.root = root_.path();
  options.work_dir = "/w";
  options.nvml_library = "libxl-no-such-nvml.so.1";
  options.hostname = "fake";
  absl::StatusOr<v1::NodeInventory> inv = DiscoverInventory(options);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->hostname(), "fake");
  EXPECT_EQ(inv->gpus_size(), 0);
  EXPECT_EQ(inv->memory_bytes(), 263855468ULL * 1024);
  EXPECT_GE(inv->cpus(), 1);
  EXPECT_EQ(inv->nvme_size(), 2);
  EXPECT_EQ(inv->nics_size(), 3);
  EXPECT_EQ(ScratchDir(*inv, "/w"), mount_ + "/xl-scratch");
}

TEST_F(FakeSysfsTest, MissingMeminfoIsAnError) {
  std::filesystem::remove(root_.path() + "/proc/meminfo");
  EXPECT_FALSE(DiscoverMemoryBytes(root_.path()).ok());
}

TEST(NvmlTest, AbsentLibraryGivesZeroGpusAndOk) {
  absl::StatusOr<std::vector<v1::Gpu>> gpus =
      DiscoverGpus("libxl-no-such-nvml.so.1");
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_TRUE(gpus->empty());
}

TEST(NvmlTest, ReturnCodesMapToStatus) {
  EXPECT_TRUE(NvmlStatus(0, "", "x").ok());
  EXPECT_EQ(NvmlStatus(4, "No permission", "nvmlInit_v2").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(NvmlStatus(15, "GPU is lost", "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(NvmlStatus(15, "GPU is lost", "nvmlDeviceGetName").message(),
              HasSubstr("nvmlDeviceGetName: GPU is lost"));
  EXPECT_EQ(NvmlStatus(999, "Unknown Error", "x").code(),
            absl::StatusCode::kUnknown);
}

// Real discovery must never fail or crash on whatever machine runs the tests
// (with or without a driver).
TEST(DiscoveryTest, RealMachineDoesNotFail) {
  DiscoveryOptions options;
  options.work_dir = "/tmp";
  absl::StatusOr<v1::NodeInventory> inv = DiscoverInventory(options);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_GE(inv->cpus(), 1);
  EXPECT_GT(inv->memory_bytes(), 0u);
}

}  // namespace
}  // namespace xl::agent
