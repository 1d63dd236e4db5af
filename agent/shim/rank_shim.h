// What xl-agent and xl-rank-shim share: a rank's state directory and the
// formats of the files in it.
//
// A rank runs under an xl-rank-shim process of its own, not under the agent,
// so that it outlives the agent (a crash, an upgrade). The agent makes the
// rank's directory <state>/ranks/<job>.<attempt>.<rank>, writes the launch
// there (`spec`), takes an exclusive flock on `lock` and execs the shim with
// that descriptor as fd 3: the shim holds the lock for as long as it lives,
// so a lock that can be taken means the shim is gone, whoever started it.
// The shim writes `record` (who the rank is, for an agent that did not start
// it), makes the rank's directories, forks and execs the rank, and then owns
// its pipes: stdout, stderr and the metrics fd go to the spool files of the
// same names, and every change of state to `status` (replaced atomically).
// It reaps the rank, stays while processes of the rank's group remain, stops
// the rank itself when the agent's lease (`<state>/lease`) runs out with no
// agent to renew it, and exits once the group is gone.
//
// The agent watches the directory (inotify), ships the spool from where the
// scheduler acknowledged it (`acked`), and remembers where it cut each chunk
// (`chunks.stdout`, `chunks.stderr`: the end offsets, 8 bytes each) so that
// chunks sent again after a restart are the same chunks, which the
// scheduler stores once.
//
// The files are plain text "key value" lines (the spool and chunk files
// aside), so that an operator can read them and an agent of one version can
// adopt the shims of another.
#ifndef XL_AGENT_SHIM_RANK_SHIM_H_
#define XL_AGENT_SHIM_RANK_SHIM_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/limits.h"

namespace xl::agent::shim {

inline constexpr char kLock[] = "lock";
inline constexpr char kSpec[] = "spec";
inline constexpr char kRecord[] = "record";
inline constexpr char kStatus[] = "status";
inline constexpr char kStdout[] = "stdout";
inline constexpr char kStderr[] = "stderr";
inline constexpr char kMetrics[] = "metrics";
inline constexpr char kAcked[] = "acked";
inline constexpr char kChunksStdout[] = "chunks.stdout";
inline constexpr char kChunksStderr[] = "chunks.stderr";

// A directory the shim makes (as root) before the rank starts.
struct DirStep {
  std::string path;
  int mode = 0700;
  // Given to the rank's user (uid, gid of the spec).
  bool give_to_user = false;
  std::string what;  // "working directory", ...
  std::string fix;   // "; check the agent's --work-dir"
};

// What the agent asks the shim to run.
struct Spec {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  // The agent's lease file: "<CLOCK_MONOTONIC ns>" or "none".
  std::string lease_file;
  int64_t grace_ms = 10000;
  std::vector<DirStep> dirs;
  // The rank's working directory.
  std::string dir;
  // command[0] (or the built-in worker); looked up in search_path when it
  // has no '/'.
  std::string program;
  std::string search_path;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  bool change_user = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  std::string user_name;
  // The attempt's cgroup.procs files, and its directory for messages.
  std::vector<std::string> cgroup_procs;
  std::string cgroup_dir;
  // JobSpec.checkpoint_dir: made by the rank's process as its user.
  std::string checkpoint_dir;
  // RLIMIT_NOFILE's soft limit for the rank (0: the shim's).
  uint64_t open_files = 0;
  // Lines the shim copies into `record` (the agent's, for its successor).
  std::string record;
};

// The most bytes a spec may have: twice what one StartRanks may weigh, room
// for the spec's field headers beside the message's own (a StartRanks made
// of millions of empty env entries could still come to more). The agent
// fails such a rank to start with the reason; the shim refuses to read it.
inline constexpr size_t kMaxSpecBytes = 2 * size_t{kMaxSchedulerToAgentBytes};

// Fields "<name> <length>\n<value>\n", ending with the field "end".
std::string EncodeSpec(const Spec& spec);
// False (and `error` set, in words with the bad bytes escaped) when `data`
// is not a whole spec: over kMaxSpecBytes, a field cut short or not ended by
// a newline, no "end", a number out of its field's range, a flag other than
// 0 or 1, a version other than 1, or no argv, program or working directory.
// Fields it does not know (a newer agent's) are skipped.
bool DecodeSpec(absl::string_view data, Spec* spec, std::string* error);

// The `status` file.
struct Status {
  enum Phase { kStarting, kRunning, kFailed, kExited, kDone };
  Phase phase = kStarting;
  pid_t pid = 0;  // the rank's, which leads its process group
  bool node_fault = false;
  int wait_status = 0;
  // The spool's size when the rank's leader exited.
  int64_t stdout_bytes = 0;
  int64_t stderr_bytes = 0;
  // Output the shim could not spool (a full disk): lost, and said so.
  int64_t stdout_dropped = 0;
  int64_t stderr_dropped = 0;
  // The shim stopped the rank: the agent's lease ran out.
  bool lease_stop = false;
  std::string message;  // kFailed: what to fix
};

// "key value" lines, the message C-escaped onto one line.
std::string EncodeStatus(const Status& status);
// False when `data` has no known phase, or a rank that ran (running,
// exited, done) has no pid > 1. Lenient otherwise, so that an agent reads
// the status of another version's shim: a missing or unreadable number is
// 0, a message that does not unescape is taken as it is, and unknown keys
// are skipped.
bool DecodeStatus(absl::string_view data, Status* status);

// "key value" lines (a value runs to the end of its line).
std::map<std::string, std::string> ParseLines(absl::string_view data);
int64_t Int(const std::map<std::string, std::string>& lines,
            const std::string& key, int64_t fallback = 0);

// Writes `path` by a temporary file and rename(2), mode 0600: a reader sees
// the old or the new whole. False with errno set.
bool WriteFileAtomically(const std::string& path, absl::string_view data);
// False with errno set.
bool ReadWholeFile(const std::string& path, std::string* data);

// The directory of a rank under `state_dir`.
std::string RankDir(const std::string& state_dir, const std::string& job_id,
                    int attempt, int rank);

// This boot's id (/proc/sys/kernel/random/boot_id): a rank directory from
// another boot names processes that no longer exist.
std::string BootId();

// When a shim stops its rank for the lease: no agent holds <state>/agent.lock
// and the lease file says a deadline on CLOCK_MONOTONIC that `now_ns` has
// passed. "none", a missing or an unreadable file: never.
bool LeaseExpired(const std::string& lease_file, int64_t now_ns);
std::string EncodeLease(int64_t deadline_ns);  // < 0: none

}  // namespace xl::agent::shim

#endif  // XL_AGENT_SHIM_RANK_SHIM_H_
