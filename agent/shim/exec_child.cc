#include "agent/shim/exec_child.h"

#include <dirent.h>
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

namespace {

// How far the entries of directory `fd` can be trusted to stay what the
// walk finds: kTrusted when root or this user owns it and nobody else may
// write it; kSticky when others may add entries but, the sticky bit set,
// only an entry's owner may rename or remove it (/tmp, a shared 1777
// parent); kUntrusted otherwise (another user's, or writable by others
// without the sticky bit: they could swap an entry for their own). The
// rule of OpenSSH's StrictModes.
enum Trust { kTrusted, kSticky, kUntrusted };
Trust DirTrust(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return kUntrusted;
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) return kUntrusted;
  if ((st.st_mode & 022) == 0) return kTrusted;
  return (st.st_mode & S_ISVTX) != 0 ? kSticky : kUntrusted;
}

}  // namespace

// mkdir -p as whoever calls it, one component at a time from "/" with
// openat(O_NOFOLLOW | O_DIRECTORY). Every directory on the way must be
// root's or this user's and writable by nobody else unless sticky (else
// kStageCheckpointParent, errno = the number of components walked to it):
// a directory another user made in a shared parent (/shared/ckpt/alice,
// made first by mallory) would let them swap the checkpoints for their
// own. A symlink is followed only where it lies in a directory nobody else
// may write (the operator's /shared -> /lustre/x); one in a directory
// others may write (planted, to send the checkpoints elsewhere) is
// kStageCheckpointSymlink. Parents it makes get mode 0755, the directory
// itself 0700; an existing leaf must be this user's and writable by no one
// else (kStageCheckpointOwner). Returns 0 or the stage that failed with
// errno set. Async-signal-safe (no allocation: `path` is edited in place
// and restored).
int MakeDirsInChild(char* path) {
  if (path[0] != '/') {
    errno = EINVAL;
    return kStageCheckpointDir;
  }
  int dir = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return kStageCheckpointDir;
  int stage = 0;
  int depth = 0;  // components walked into
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
      const Trust trust = DirTrust(dir);
      struct stat lst;
      const bool link = ::fstatat(dir, name, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
                        S_ISLNK(lst.st_mode);
      int next = -1;
      if (link && trust != kTrusted) {
        // Others may write where it lies: it may be theirs.
        errno = ELOOP;
        stage = kStageCheckpointSymlink;
      } else if (trust == kUntrusted) {
        errno = depth;
        stage = kStageCheckpointParent;
      } else if (!link && ::mkdirat(dir, name, leaf ? 0700 : 0755) != 0 &&
                 errno != EEXIST) {
        stage = kStageCheckpointDir;
      } else {
        // A link here is root's or the user's own: followed. Anything else
        // is opened without following, so an entry swapped for a link
        // since (in a sticky parent, by its owner) is refused.
        next = ::openat(dir, name,
                        O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                            (link ? 0 : O_NOFOLLOW));
        if (next < 0) {
          stage = errno == ELOOP ? kStageCheckpointSymlink : kStageCheckpointDir;
        }
      }
      if (stage != 0) {
        if (next >= 0) ::close(next);
      } else {
        ::close(dir);
        dir = next;
        ++depth;
        struct stat st;
        if (leaf && (::fstat(dir, &st) != 0 || st.st_uid != ::geteuid() ||
                     (st.st_mode & 022) != 0)) {
          errno = EPERM;
          stage = kStageCheckpointOwner;
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
    // Kernels before 5.11: each open descriptor, as listed by
    // getdents64 on /proc/self/fd (no allocation), else one by one up to
    // the hard descriptor limit (no descriptor can be above it).
    const int fds = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fds >= 0) {
      char buf[4096];
      long n;
      while ((n = syscall(SYS_getdents64, fds, buf, sizeof(buf))) > 0) {
        for (long off = 0; off < n;) {
          const auto* d = reinterpret_cast<const struct dirent64*>(
              buf + off);
          int fd = 0;
          bool number = d->d_name[0] != '\0';
          for (const char* c = d->d_name; *c != '\0'; ++c) {
            if (*c < '0' || *c > '9') number = false;
            fd = fd * 10 + (*c - '0');
          }
          if (number && fd > kMetricsFd && fd != fds) {
            fcntl(fd, F_SETFD, FD_CLOEXEC);
          }
          off += d->d_reclen;
        }
      }
      ::close(fds);
    } else {
      struct rlimit limit;
      rlim_t last = 1 << 20;
      if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
          limit.rlim_max != RLIM_INFINITY) {
        last = limit.rlim_max;
      }
      for (rlim_t fd = kMetricsFd + 1; fd < last; ++fd) {
        fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
      }
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
