// Fuzzes the agent's inventory parsing. The first byte picks the path:
//   even: LoadInventoryFile, the rest being the inventory file (YAML/JSON);
//   odd:  discovery from sysfs/procfs text: the rest is split at lines
//         "%%" into the files of a fake tree (proc/mounts, proc/meminfo,
//         sys/block/nvme0n1/size, sys/block/nvme0n1/hidden,
//         sys/class/net/eth0/speed, sys/class/net/eth0/type,
//         sys/class/infiniband/mlx5_0/ports/1/rate), then DiscoverNvme,
//         DiscoverNics and DiscoverMemoryBytes read it.
// Properties: a loaded inventory has a hostname, cpus >= 0, distinct GPU
// indexes >= 0 with uuids, NIC speeds >= 0; errors are INVALID_ARGUMENT (a
// bad file) or INTERNAL (no MemTotal); discovered speeds are >= 0.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include "agent/inventory/inventory.h"
#include "agent/inventory/sysfs.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const char* const kTreeFiles[] = {
    "proc/mounts",
    "proc/meminfo",
    "sys/block/nvme0n1/size",
    "sys/block/nvme0n1/hidden",
    "sys/class/net/eth0/speed",
    "sys/class/net/eth0/type",
    "sys/class/infiniband/mlx5_0/ports/1/rate",
};

void LoadFile(absl::string_view text) {
  const std::string path = xl::fuzz::TempDir() + "/inventory.yaml";
  xl::fuzz::WriteFile(path, text);
  auto inv = xl::agent::LoadInventoryFile(path);
  if (!inv.ok()) {
    XL_FUZZ_CHECK(inv.status().code() == absl::StatusCode::kInvalidArgument,
                  inv.status().ToString());
    return;
  }
  XL_FUZZ_CHECK(!inv->hostname().empty(), inv->DebugString());
  XL_FUZZ_CHECK(inv->cpus() >= 0, inv->DebugString());
  std::set<int> indexes;
  for (const auto& gpu : inv->gpus()) {
    XL_FUZZ_CHECK(gpu.index() >= 0 && indexes.insert(gpu.index()).second,
                  inv->DebugString());
    XL_FUZZ_CHECK(!gpu.uuid().empty(), inv->DebugString());
  }
  for (const auto& nic : inv->nics()) {
    XL_FUZZ_CHECK(nic.gbps() >= 0, inv->DebugString());
  }
  (void)xl::agent::ScratchDir(*inv, "/work");
}

void Discover(absl::string_view text) {
  static const std::string* root = [] {
    auto* r = new std::string(xl::fuzz::TempDir() + "/root");
    for (const char* file : kTreeFiles) {
      std::filesystem::create_directories(
          std::filesystem::path(*r + "/" + file).parent_path());
    }
    return r;
  }();
  std::vector<std::string> parts = xl::fuzz::Split(text, "\n%%\n");
  for (size_t i = 0; i < std::size(kTreeFiles); ++i) {
    xl::fuzz::WriteFile(*root + "/" + kTreeFiles[i],
                        i < parts.size() ? parts[i] : "");
  }
  auto nvme = xl::agent::DiscoverNvme(*root, "/work");
  XL_FUZZ_CHECK(nvme.ok(), nvme.status().ToString());
  for (const auto& n : *nvme) XL_FUZZ_CHECK(n.device() == "nvme0n1", n.device());
  auto nics = xl::agent::DiscoverNics(*root);
  XL_FUZZ_CHECK(nics.ok(), nics.status().ToString());
  for (const auto& nic : *nics) {
    XL_FUZZ_CHECK(nic.gbps() >= 0, nic.DebugString());
  }
  auto memory = xl::agent::DiscoverMemoryBytes(*root);
  if (!memory.ok()) {
    XL_FUZZ_CHECK(memory.status().code() == absl::StatusCode::kInternal,
                  memory.status().ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view rest(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  if (data[0] & 1) {
    Discover(rest);
  } else {
    LoadFile(rest);
  }
  return 0;
}
