// A node's inventory: discovered from NVML and sysfs, or read from an
// inventory file (YAML or JSON in NodeInventory's protobuf JSON mapping) that
// replaces discovery, so one machine can host agents standing for 8-GPU
// nodes. Stateless; safe from any thread.
#ifndef XL_AGENT_INVENTORY_INVENTORY_H_
#define XL_AGENT_INVENTORY_INVENTORY_H_

#include <string>

#include "absl/status/statusor.h"
#include "agent/inventory/nvml.h"
#include "xl/v1/node.pb.h"

namespace xl::agent {

struct DiscoveryOptions {
  // Root of the sysfs/procfs tree ("/" in production; a fake tree in tests).
  std::string root = "/";
  // The agent's --work-dir; the fallback scratch directory lives under it.
  std::string work_dir;
  // The NVML library dlopen()ed for GPUs.
  std::string nvml_library = kNvmlLibrary;
  // Empty: gethostname().
  std::string hostname;
};

// Discovers this machine: GPUs through NVML (none when there is no driver),
// NVMe, NICs, CPUs and memory through sysfs/procfs. The address is left empty
// (the scheduler uses the peer address unless --address is given).
absl::StatusOr<v1::NodeInventory> DiscoverInventory(
    const DiscoveryOptions& options);

// Reads an inventory file. Fills what the file leaves out: the hostname
// (gethostname()) and GPU uuids ("GPU-<hostname>-<index>", stable across
// restarts). INVALID_ARGUMENT naming the field for a malformed file or
// inconsistent values (duplicate GPU index, negative cpus); NOT_FOUND when
// the file is missing.
absl::StatusOr<v1::NodeInventory> LoadInventoryFile(const std::string& path);

// The directory ranks write checkpoints under: the first NVMe scratch path,
// else <work_dir>/scratch.
std::string ScratchDir(const v1::NodeInventory& inventory,
                       const std::string& work_dir);

// gethostname(), or "localhost" when it fails.
std::string LocalHostname();

}  // namespace xl::agent

#endif  // XL_AGENT_INVENTORY_INVENTORY_H_
