// What the agent asks xl-rank-shim to run for one rank (shim::Spec): its
// environment, argv, working directory, the directories the shim makes, its
// user, cgroup and limits, and the record a later agent adopts it by, all
// computed from the StartRanks, the node's settings and the attempt's place.
// Pure: no I/O, no clock and no getenv (what the agent passes on from its own
// environment is an argument), so it is tested without forking. Free
// functions over values; safe from any thread.
#ifndef XL_AGENT_SUPERVISOR_LAUNCH_SPEC_H_
#define XL_AGENT_SUPERVISOR_LAUNCH_SPEC_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/isolation/user.h"
#include "agent/shim/rank_shim.h"
#include "xl/v1/agent.pb.h"

namespace xl::agent {

// The node's side of every launch (from SupervisorOptions and the agent's
// state directory).
struct LaunchSettings {
  // The agent's --work-dir: default working directories and TMPDIRs.
  std::string work_dir;
  // The default XL_CHECKPOINT_DIR is <scratch_dir>/checkpoints/<job_id>.
  std::string scratch_dir;
  // The built-in worker run for argv[0] "xl-train"; empty: PATH's.
  std::string train_binary;
  RunAs run_as = RunAs::kSubmitter;
  // RLIMIT_NOFILE's soft limit for ranks; 0: the shim's.
  uint64_t rank_open_files = 0;
  // Grace of a StartRanks that gives none (or <= 0).
  absl::Duration default_grace = absl::Seconds(10);
  // Limits of an attempt whose StartRanks gives none (0: none).
  uint64_t default_memory_bytes = 0;
  int64_t default_max_processes = 0;
  // Where the ranks' state directories and the lease file live.
  std::string state_dir;
  // This boot's id (shim::BootId()): a later agent after a reboot drops
  // the records of this one.
  std::string boot_id;
};

// The attempt's cgroup (a JobCgroup), as a launch names it; its name is
// AttemptName().
struct CgroupPlace {
  std::vector<std::string> procs_files;
  std::string dir;  // for messages
  uint64_t memory_limit = 0;
};

// Where and as whom an attempt's ranks run, as the agent prepared it (or
// adopted it from an earlier agent's record).
struct AttemptPlace {
  RankUser user;
  std::string tmp_dir;  // TMPDIR, private to the attempt
  bool has_cgroup = false;
  CgroupPlace cgroup;  // meaningful when has_cgroup
};

// The names a rank takes from the agent's own environment when the
// StartRanks does not set them.
inline constexpr const char* kInheritedEnv[] = {"PATH", "HOME", "LANG"};

// OK when `request` can be launched at all: its job id names a directory
// (SafePathComponent) and its argv[0] is not empty. INVALID_ARGUMENT with
// the message every rank of it fails with otherwise.
absl::Status CheckStartRanks(const v1::StartRanks& request);

// True when `s` can be one component of a path: not empty, ".", "..", no
// '/' and no control characters. Job ids become directory names.
bool SafePathComponent(const std::string& s);

// "<job_id>-<attempt>": the attempt's cgroup and TMPDIR names.
std::string AttemptName(const std::string& job_id, int attempt);
// <work_dir>/tmp/<AttemptName>.
std::string AttemptTmpDir(const std::string& work_dir,
                          const v1::StartRanks& request);

// The grace between SIGTERM and SIGKILL of the request's ranks: its
// grace_period, or `default_grace` when unset or <= 0.
absl::Duration RankGrace(const v1::StartRanks& request,
                         absl::Duration default_grace);

// The attempt's cgroup limits: the request's, with the node's defaults for
// memory_bytes and max_processes where it says 0 (every job is bounded,
// also one that asked for no memory). The GPUs (gpu_indices) and cpus are
// the request's.
v1::ResourceLimits AttemptLimits(const v1::StartRanks& request,
                                 const LaunchSettings& settings);

// The spec of rank `launch` of `request` (which passed CheckStartRanks).
// `agent_env`: the agent's own environment; only kInheritedEnv are read.
//
// The environment is request.env with launch.env over it, then:
// XL_CHECKPOINT_DIR (<scratch>/checkpoints/<job>, both made by the shim)
// unless given; XL_METRICS_FD always the agent's (kMetricsFd), whatever was
// given; TMPDIR the attempt's unless given; with RunAs::kSubmitter HOME,
// USER and LOGNAME the user's unless given; then PATH, HOME and LANG from
// `agent_env` unless set by now. Nothing else of the agent's goes to the
// rank. The env list is sorted by name, one NAME=value each.
//
// The program is argv[0] (LaunchSettings::train_binary for "xl-train"),
// looked up in the rank's PATH (/usr/bin:/bin without one). Without a
// working_dir the rank runs in <work_dir>/jobs/<job>/<attempt>, made by the
// shim with its parents (jobs/ 0711, the rest 0700 and the user's).
shim::Spec BuildRankSpec(const v1::StartRanks& request,
                         const v1::RankLaunch& launch,
                         const LaunchSettings& settings,
                         const AttemptPlace& attempt,
                         const std::map<std::string, std::string>& agent_env);

}  // namespace xl::agent

#endif  // XL_AGENT_SUPERVISOR_LAUNCH_SPEC_H_
