#include "agent/exec_child.h"

#include <fcntl.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace xl::agent {

// mkdir -p as whoever calls it, one component at a time from "/" with
// openat(O_NOFOLLOW | O_DIRECTORY), so no symlink is followed at any level
// (planted in a parent the user may write, it would send the checkpoints
// elsewhere): parents it makes get mode 0755 (others pass through to their
// own), the directory itself 0700. An existing leaf must be this user's
// and writable by no one else. Returns 0, or the stage that failed with
// errno set: kStageCheckpointDir (cannot make it), kStageCheckpointSymlink
// (a component is a symlink), kStageCheckpointOwner (another user made it
// first). Async-signal-safe (no allocation: `path` is edited in place and
// restored).
int MakeDirsInChild(char* path) {
  if (path[0] != '/') {
    errno = EINVAL;
    return kStageCheckpointDir;
  }
  int dir = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return kStageCheckpointDir;
  int stage = 0;
  char* name = path + 1;
  while (stage == 0 && *name != '\0') {
    char* end = name;
    while (*end != '\0' && *end != '/') ++end;
    const char saved = *end;
    *end = '\0';
    const bool leaf = saved == '\0' || end[1] == '\0';
    if (name[0] == '\0' || (name[0] == '.' && name[1] == '\0')) {
      // "//" or "/./": nothing to walk.
    } else {
      const bool made = ::mkdirat(dir, name, leaf ? 0700 : 0755) == 0;
      if (!made && errno != EEXIST) {
        stage = kStageCheckpointDir;
      } else {
        const int next =
            ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) {
          // A symlink: ELOOP; a symlink to a non-directory or a file:
          // ENOTDIR. Either way, not a directory to use.
          struct stat lst;
          stage = ::fstatat(dir, name, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
                          S_ISLNK(lst.st_mode)
                      ? kStageCheckpointSymlink
                      : kStageCheckpointDir;
          if (stage == kStageCheckpointSymlink) errno = ELOOP;
        } else {
          ::close(dir);
          dir = next;
          struct stat st;
          if (leaf && (::fstat(dir, &st) != 0 || st.st_uid != ::geteuid() ||
                       (st.st_mode & 022) != 0)) {
            errno = EPERM;
            stage = kStageCheckpointOwner;
          }
        }
      }
    }
    *end = saved;
    if (saved == '\0') break;
    name = end + 1;
  }
  const int err = errno;
  ::close(dir);
  errno = err;
  return stage;
}

// Runs in the child between fork and execve: async-signal-safe calls only.
// The credentials change through raw system calls: the child has one
// thread, and glibc's wrappers would signal the parent's other threads.
[[noreturn]] void ExecChild(pid_t parent, int devnull, int out_w, int err_w,
                            int metrics_w, int error_w, const char* dir,
                            char* const* paths, char* const* argv,
                            char* const* envp, const ChildIdentity& identity) {
  auto fail = [error_w](int stage) {
    ChildError e{stage, errno};
    ssize_t ignored = ::write(error_w, &e, sizeof(e));
    (void)ignored;
    _exit(127);
  };
  if (setpgid(0, 0) != 0) fail(kStageSetup);
  for (size_t i = 0; i < identity.cgroup_fd_count; ++i) {
    if (::write(identity.cgroup_fds[i], "0", 1) != 1) fail(kStageCgroup);
  }
  if (identity.change_user) {
    if (syscall(SYS_setgroups, identity.group_count, identity.groups) != 0 ||
        syscall(SYS_setresgid, identity.gid, identity.gid, identity.gid) !=
            0 ||
        syscall(SYS_setresuid, identity.uid, identity.uid, identity.uid) !=
            0) {
      fail(kStageUser);
    }
  }
  // As the job's user: it may write only where its user may.
  if (identity.checkpoint_dir != nullptr) {
    if (const int stage = MakeDirsInChild(identity.checkpoint_dir)) {
      fail(stage);
    }
  }
  // After the credentials: changing them clears the parent-death signal.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(kStageSetup);
  // The supervisor thread may have died between fork and prctl.
  if (getppid() != parent) _exit(127);
  // The agent blocks and handles signals; a rank starts with the defaults.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &dfl, nullptr);
  }
  if (dup2(devnull, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
      dup2(err_w, STDERR_FILENO) < 0 || dup2(metrics_w, kMetricsFd) < 0) {
    fail(kStageSetup);
  }
  // Only 0-3 reach the rank: every other descriptor the agent or the shim
  // holds closes at execve, marked or not (security review F13). Marked,
  // not closed: error_w reports a failed execve.
  if (syscall(SYS_close_range, kMetricsFd + 1, ~0U, CLOSE_RANGE_CLOEXEC) !=
      0) {
    // Kernels before 5.11: one by one, up to the descriptor limit.
    struct rlimit limit;
    int last = 65536;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
        limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < (1u << 20)) {
      last = static_cast<int>(limit.rlim_cur);
    }
    for (int fd = kMetricsFd + 1; fd < last; ++fd) {
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  if (chdir(dir) != 0) fail(kStageChdir);
  bool denied = false;
  for (char* const* path = paths; *path != nullptr; ++path) {
    execve(*path, argv, envp);
    if (errno == EACCES) {
      denied = true;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      fail(kStageExec);
    }
  }
  errno = denied ? EACCES : ENOENT;
  fail(kStageNotInPath);
  _exit(127);  // Not reached.
}

}  // namespace xl::agent
