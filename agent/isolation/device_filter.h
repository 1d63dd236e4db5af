// Device confinement on cgroup v2: a BPF_PROG_TYPE_CGROUP_DEVICE program,
// attached to the attempt's cgroup, that lets its processes open (and mknod)
// only the devices of an allow list, as runc and systemd's DeviceAllow= do.
// v2 has no devices.allow file; the kernel asks the program instead.
// Thread-safe: no state.
#ifndef XL_AGENT_ISOLATION_DEVICE_FILTER_H_
#define XL_AGENT_ISOLATION_DEVICE_FILTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace xl::agent {

// One rule of cgroup v1's devices.allow syntax: "c 195:0 rwm",
// "c 136:* rwm", "b 8:0 r", "a *:* rwm".
struct DeviceRule {
  char type = 'c';     // 'c', 'b' or 'a' (any)
  int64_t major = -1;  // -1: any
  int64_t minor = -1;  // -1: any
  bool read = true;
  bool write = true;
  bool mknod = true;
};

// Parses a devices.allow line; INVALID_ARGUMENT naming the part that is
// wrong.
absl::StatusOr<DeviceRule> ParseDeviceRule(const std::string& line);

// The program's instructions (struct bpf_insn, 8 bytes each): it returns 1
// (allow) for an access some rule allows and 0 for every other. Exposed for
// tests.
std::vector<uint64_t> DeviceFilterProgram(const std::vector<DeviceRule>& rules);

// Loads the program for `rules` and attaches it to the cgroup directory
// open as `cgroup_fd` (it stays attached after the call, until the cgroup
// is removed). FAILED_PRECONDITION with the kernel's reason (and the
// verifier's log) when the kernel refuses.
absl::Status AttachDeviceFilter(int cgroup_fd,
                                const std::vector<DeviceRule>& rules);

// Whether this process may load device programs (CAP_BPF or CAP_SYS_ADMIN,
// a kernel with CONFIG_CGROUP_BPF): OK, or why not.
absl::Status ProbeDeviceFilter();

}  // namespace xl::agent

#endif  // XL_AGENT_ISOLATION_DEVICE_FILTER_H_
