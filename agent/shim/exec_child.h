// What runs in a rank's process between fork() and execve(): joining its
// cgroup, becoming the job's user, making its checkpoint directory, the
// parent-death signal, default signal dispositions, its descriptors and
// working directory. Async-signal-safe only: the agent is multithreaded.
// A failure is written to the error pipe as a ChildError and the child
// _exits(127); the parent turns the stage into words (supervisor.cc).
#ifndef XL_AGENT_SHIM_EXEC_CHILD_H_
#define XL_AGENT_SHIM_EXEC_CHILD_H_

#include <sys/types.h>

#include <cstddef>

namespace xl::agent {

// What the child reports through the error pipe before it _exits.
struct ChildError {
  int stage;  // kStage*
  int err;
};
inline constexpr int kStageChdir = 1;
// The rank's metrics pipe is this fd (XL_METRICS_FD); the parent keeps its
// own copies above kHighFd so the dup2 calls in the child never clobber them.
inline constexpr int kMetricsFd = 3;
inline constexpr int kHighFd = 10;
inline constexpr int kStageExec = 2;
inline constexpr int kStageSetup = 3;
inline constexpr int kStageCgroup = 4;
inline constexpr int kStageUser = 5;
inline constexpr int kStageCheckpointDir = 6;
inline constexpr int kStageCheckpointOwner = 7;
inline constexpr int kStageCheckpointSymlink = 8;
// No candidate of the PATH lookup could be executed (err: ENOENT, or
// EACCES when one was there but not executable by the rank's user).
inline constexpr int kStageNotInPath = 9;
// A directory above checkpoint_dir is another user's, or writable by others
// without the sticky bit (err: how many components below "/" it is).
inline constexpr int kStageCheckpointParent = 10;

// What the child becomes before execve, prepared by the parent (no
// allocation after fork).
struct ChildIdentity {
  // The attempt's cgroup.procs files; the child writes "0" (itself) to each
  // while it still runs as the agent, so nothing of the rank ever runs
  // outside its cgroup.
  const int* cgroup_fds = nullptr;
  size_t cgroup_fd_count = 0;
  bool change_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
  const gid_t* groups = nullptr;
  size_t group_count = 0;
  // JobSpec.checkpoint_dir (writable, NUL-terminated; nullptr: none): made
  // with its missing parents as the rank's user.
  char* checkpoint_dir = nullptr;
};

// mkdir -p as whoever calls it: parents it makes get mode 0755, the
// directory itself 0700. Every directory on the way must be root's or this
// user's and writable by nobody else unless sticky; a symlink is followed
// only in a directory nobody else may write. Returns 0, or the stage that
// failed with errno set (kStageCheckpointDir; kStageCheckpointSymlink: a
// symlink where others may write; kStageCheckpointParent: a directory
// others could swap entries of, errno its depth; kStageCheckpointOwner:
// not a directory of this user's that no one else may write to). `path`
// (absolute) is edited in place and restored.
int MakeDirsInChild(char* path);

// Becomes the rank and execs the first of `paths` (nullptr-terminated)
// that it can; never returns. A program named without a slash is looked up
// in PATH this way, as the rank's user after its chdir, as execvp does: the
// agent (root) never answers whether a file exists where the user cannot
// look (security review F13). One candidate that fails otherwise than
// ENOENT, ENOTDIR or EACCES ends the lookup (kStageExec).
[[noreturn]] void ExecChild(pid_t parent, int devnull, int out_w, int err_w,
                            int metrics_w, int error_w, const char* dir,
                            char* const* paths, char* const* argv,
                            char* const* envp, const ChildIdentity& identity);

}  // namespace xl::agent

#endif  // XL_AGENT_SHIM_EXEC_CHILD_H_
