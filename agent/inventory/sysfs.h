// Discovery of the non-GPU resources of a machine from sysfs and procfs:
// NVMe devices and their scratch directories, NICs (Ethernet and
// InfiniBand), CPUs and memory. Every function takes the file system root
// ("/" in production) so tests point it at a fake tree in a temp directory.
// Stateless; safe from any thread.
#ifndef XL_AGENT_INVENTORY_SYSFS_H_
#define XL_AGENT_INVENTORY_SYSFS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "xl/v1/node.pb.h"

namespace xl::agent {

// Lists <root>/sys/block/nvme* (hidden multipath paths skipped), capacity =
// size * 512. The scratch path is "<mount point>/xl-scratch" for the first
// mount of the device (or a partition of it) in <root>/proc/mounts, and
// <work_dir>/scratch when the device holds "/"; free_bytes comes from
// statvfs of the mount point. An unmounted device has an empty path and 0
// free bytes. Returns OK with an empty list when there is no NVMe.
absl::StatusOr<std::vector<v1::Nvme>> DiscoverNvme(const std::string& root,
                                                   const std::string& work_dir);

// Lists NICs: <root>/sys/class/net/* except lo and IPoIB interfaces (kind
// ETHERNET, gbps from the "speed" file in Mb/s; -1 or unreadable gives 0),
// and <root>/sys/class/infiniband/* (kind INFINIBAND, gbps = the fastest of
// ports/*/rate, "200 Gb/sec (4X HDR)").
absl::StatusOr<std::vector<v1::Nic>> DiscoverNics(const std::string& root);

// CPUs this process may run on (sched_getaffinity, else
// std::thread::hardware_concurrency).
int DiscoverCpus();

// MemTotal of <root>/proc/meminfo in bytes. INTERNAL when it is missing.
absl::StatusOr<uint64_t> DiscoverMemoryBytes(const std::string& root);

// Free bytes of the file system holding `path` (statvfs f_bavail * f_frsize).
absl::StatusOr<uint64_t> FreeBytes(const std::string& path);

}  // namespace xl::agent

#endif  // XL_AGENT_INVENTORY_SYSFS_H_
