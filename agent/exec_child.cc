#include "agent/exec_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace xl::agent {

// mkdir -p as whoever calls it: parents it makes get mode 0755 (others
// pass through to their own), the directory itself 0700. Returns 0, or the
// stage that failed with errno set: kStageCheckpointDir (cannot make it),
// kStageCheckpointOwner (it is not a directory of this user's that no one
// else may write to: another user made it first). Async-signal-safe (no
// allocation: `path` is edited in place and restored).
int MakeDirsInChild(char* path) {
  for (char* p = path + 1; *p != '\0'; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    const int made = ::mkdir(path, 0755);
    const int err = errno;
    *p = '/';
    if (made != 0 && err != EEXIST) {
      errno = err;
      return kStageCheckpointDir;
    }
  }
  if (::mkdir(path, 0700) != 0 && errno != EEXIST) return kStageCheckpointDir;
  struct stat st;
  if (::stat(path, &st) != 0) return kStageCheckpointDir;
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 022) != 0) {
    errno = EPERM;
    return kStageCheckpointOwner;
  }
  return 0;
}

// Runs in the child between fork and execve: async-signal-safe calls only.
// The credentials change through raw system calls: the child has one
// thread, and glibc's wrappers would signal the parent's other threads.
[[noreturn]] void ExecChild(pid_t parent, int devnull, int out_w, int err_w,
                            int metrics_w, int error_w, const char* dir,
                            const char* path, char* const* argv,
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
  if (chdir(dir) != 0) fail(kStageChdir);
  execve(path, argv, envp);
  fail(kStageExec);
  _exit(127);  // Not reached.
}

}  // namespace xl::agent
