#include "agent/inventory/inventory.h"

#include <limits.h>
#include <unistd.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "agent/inventory/sysfs.h"
#include "common/proto_text.h"
#include "common/status.h"

namespace xl::agent {

std::string LocalHostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') {
    return "localhost";
  }
  return buf;
}

absl::StatusOr<v1::NodeInventory> DiscoverInventory(
    const DiscoveryOptions& options) {
  v1::NodeInventory inventory;
  inventory.set_hostname(options.hostname.empty() ? LocalHostname()
                                                  : options.hostname);
  inventory.set_cpus(DiscoverCpus());
  ASSIGN_OR_RETURN(uint64_t memory, DiscoverMemoryBytes(options.root));
  inventory.set_memory_bytes(memory);

  ASSIGN_OR_RETURN(std::vector<v1::Gpu> gpus,
                   DiscoverGpus(options.nvml_library));
  for (v1::Gpu& gpu : gpus) *inventory.add_gpus() = std::move(gpu);

  ASSIGN_OR_RETURN(std::vector<v1::Nvme> nvme,
                   DiscoverNvme(options.root, options.work_dir));
  for (v1::Nvme& n : nvme) *inventory.add_nvme() = std::move(n);

  ASSIGN_OR_RETURN(std::vector<v1::Nic> nics, DiscoverNics(options.root));
  for (v1::Nic& nic : nics) *inventory.add_nics() = std::move(nic);
  return inventory;
}

absl::StatusOr<v1::NodeInventory> LoadInventoryFile(const std::string& path) {
  v1::NodeInventory inventory;
  RETURN_IF_ERROR(ReadYamlFileToMessage(path, &inventory));
  const std::string what = absl::StrCat("inventory file ", path);
  if (inventory.hostname().empty()) inventory.set_hostname(LocalHostname());
  if (inventory.cpus() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cpus: must be >= 0, got ", inventory.cpus()));
  }
  std::set<int> indices;
  for (int i = 0; i < inventory.gpus_size(); ++i) {
    v1::Gpu* gpu = inventory.mutable_gpus(i);
    if (gpu->index() < 0 || !indices.insert(gpu->index()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": gpus[", i, "].index: ", gpu->index(),
          " is negative or used twice; give each GPU its own index"));
    }
    if (gpu->uuid().empty()) {
      gpu->set_uuid(
          absl::StrCat("GPU-", inventory.hostname(), "-", gpu->index()));
    }
  }
  for (int i = 0; i < inventory.nics_size(); ++i) {
    if (inventory.nics(i).gbps() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": nics[", i, "].gbps: must be >= 0"));
    }
  }
  return inventory;
}

std::string ScratchDir(const v1::NodeInventory& inventory,
                       const std::string& work_dir) {
  for (const v1::Nvme& nvme : inventory.nvme()) {
    if (!nvme.path().empty()) return nvme.path();
  }
  return work_dir + "/scratch";
}

}  // namespace xl::agent
