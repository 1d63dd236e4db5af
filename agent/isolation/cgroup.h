// Job cgroups: each job attempt's ranks on a node share one cgroup that
// limits memory, CPU and processes (pids.max), accounts peak memory,
// confines devices (v1's devices controller; on v2 a BPF device program)
// and lets the agent kill every process of the attempt, including those that
// left the rank's process group with setsid(). Cgroup v2 is used when its
// hierarchy has the memory controller, else the v1 controllers (unless the
// agent is told which). Paths hold the agent's node name, so agents sharing
// a machine never collide.
// Not thread-safe: the supervisor thread owns every JobCgroup.
#ifndef XL_AGENT_ISOLATION_CGROUP_H_
#define XL_AGENT_ISOLATION_CGROUP_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xl/v1/agent.pb.h"

namespace xl::agent {

enum class CgroupVersion { kNone, kV1, kV2 };

// Which hierarchy to use (xl-agent --cgroup): kAuto takes v2 when it has
// the memory controller, else v1; kV1 and kV2 take only that one, v2 with
// whatever controllers it has (a hybrid host's unified mount, for devices
// and kill only).
enum class CgroupChoice { kAuto, kV1, kV2 };

// The hierarchy the agent uses, found once at start by DetectCgroups().
struct CgroupHierarchy {
  CgroupVersion version = CgroupVersion::kNone;
  // v2: <mount>/xl/<node>.
  std::string v2_dir;
  // v1: per controller ("memory", "cpu", "devices", "freezer", "pids"),
  // <mount><the agent's own cgroup>/xl/<node>; jobs stay inside whatever
  // contains the agent.
  std::map<std::string, std::string> v1_dirs;
  // What is enforced.
  bool memory = false;
  bool cpu = false;
  bool devices = false;
  bool pids = false;
  // Every process of an attempt can be killed at once (v2 cgroup.kill or
  // freezer, v1 freezer); without it they are SIGKILLed one by one.
  bool freeze_or_kill = false;
  // Why version is kNone, or what is missing; for the log and
  // --print-inventory.
  std::string note;
};

// Finds a usable hierarchy from `mountinfo` and `own_cgroup` (the files of
// /proc/self) and checks that the agent may write it (no directory is made:
// see PrepareCgroups). Version kNone, with a note saying why, when there is
// none.
CgroupHierarchy DetectCgroups(const std::string& node_name,
                              CgroupChoice choice = CgroupChoice::kAuto,
                              const std::string& mountinfo =
                                  "/proc/self/mountinfo",
                              const std::string& own_cgroup =
                                  "/proc/self/cgroup");

// Creates the node's directories of `hierarchy` (and, on v2, enables the
// memory, cpu and pids controllers down to them). On failure the agent runs
// without cgroups: the caller logs the error.
absl::Status PrepareCgroups(const CgroupHierarchy& hierarchy);

// Removes the node's directories made by PrepareCgroups (at agent exit,
// once no job cgroup is left under them). Best effort: a directory still in
// use stays.
void RemoveNodeCgroups(const CgroupHierarchy& hierarchy);

// One line per setting, "hierarchy: cgroup v1 (...)", "memory: limit and
// peak", ... for the log and --print-inventory.
std::vector<std::string> DescribeCgroups(const CgroupHierarchy& hierarchy);

// One attempt's cgroup. Create() makes it with its limits; a rank joins it by
// writing "0" to each of ProcsFiles() before execve. Remove() when no
// process of the attempt is left.
class JobCgroup {
 public:
  // Makes <dir>/<name> in every controller used, with `limits` (0: none)
  // and, where devices are controlled, access only to the usual character
  // devices and the allocated GPUs (v1 devices.allow; v2 a BPF program
  // attached to the cgroup). A cgroup of that name left by an
  // earlier agent is killed and reused. FAILED_PRECONDITION naming the file
  // when a setting cannot be written.
  static absl::StatusOr<std::unique_ptr<JobCgroup>> Create(
      const CgroupHierarchy& hierarchy, const std::string& name,
      const v1::ResourceLimits& limits);

  // The cgroup `name` an earlier agent made (its ranks still run in it):
  // nothing is created, killed or written.
  static std::unique_ptr<JobCgroup> Adopt(const CgroupHierarchy& hierarchy,
                                          const std::string& name,
                                          uint64_t memory_limit);

  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  // Opens the cgroup.procs file of every controller (O_WRONLY, O_CLOEXEC);
  // the caller closes them.
  absl::StatusOr<std::vector<int>> OpenProcsFiles() const;
  // Their paths, for a process that opens them itself (xl-rank-shim).
  std::vector<std::string> ProcsFiles() const;

  // The most memory the cgroup used so far (memory.peak or
  // memory.max_usage_in_bytes); 0 when not known.
  uint64_t PeakMemoryBytes() const;
  // How many processes the OOM killer ended in the cgroup.
  int64_t OomKills() const;
  // pids.max (0: none or not controlled), and how often a fork or clone
  // failed at it (pids.events "max").
  int64_t ProcessLimit() const;
  int64_t ProcessLimitHits() const;
  uint64_t memory_limit() const { return memory_limit_; }

  // The processes in the cgroup now.
  std::vector<pid_t> Pids() const;
  // SIGKILLs every process in the cgroup (cgroup.kill on v2; on v1 frozen
  // first, so none forks while being killed, then thawed).
  void KillAll();
  // Removes the directories. UNAVAILABLE while processes remain.
  absl::Status Remove();

  const std::string& main_dir() const { return dirs_.front(); }

 private:
  JobCgroup(CgroupVersion version, std::vector<std::string> dirs)
      : version_(version), dirs_(std::move(dirs)) {}

  CgroupVersion version_;
  // The first one holds memory (its procs are the attempt's processes).
  std::vector<std::string> dirs_;
  std::string freezer_dir_;  // v1, when the freezer is mounted
  std::string pids_dir_;     // where pids.max is, when controlled
  uint64_t memory_limit_ = 0;
};

}  // namespace xl::agent

#endif  // XL_AGENT_ISOLATION_CGROUP_H_
