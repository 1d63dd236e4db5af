// xl-rank-shim: runs one rank for xl-agent and outlives the agent. See
// agent/shim/rank_shim.h for the state directory it shares with the agent.
//
//   xl-rank-shim <rank state directory>     (fd 3: the locked `lock` file)
//
// Single-threaded: it forks the rank directly (exec_child.h does the rest).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/shim/exec_child.h"
#include "agent/shim/rank_shim.h"

namespace xl::agent::shim {
namespace {

constexpr int kLockFd = 3;

std::string Errno(int err) {
  const char* d = strerrordesc_np(err);
  return d ? d : absl::StrCat("errno ", err);
}

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void Log(const std::string& dir, const std::string& line) {
  std::string s = absl::StrCat("xl-rank-shim ", dir, ": ", line, "\n");
  ssize_t ignored = ::write(STDERR_FILENO, s.data(), s.size());
  (void)ignored;
}

// A spool file: what came from one of the rank's pipes.
struct Spool {
  int pipe = -1;
  int file = -1;
  int64_t size = 0;
  int64_t dropped = 0;  // bytes that could not be written (disk full)
};

class Shim {
 public:
  explicit Shim(std::string dir) : dir_(std::move(dir)) {}

  int Run() {
    std::string data, error;
    if (!ReadWholeFile(dir_ + "/" + kSpec, &data) ||
        !DecodeSpec(data, &spec_, &error)) {
      Log(dir_, absl::StrCat("cannot read the spec: ",
                             error.empty() ? Errno(errno) : error));
      return Fail("xl-rank-shim could not read its spec; see the agent's log",
                  true);
    }
    ::unlink((dir_ + "/" + kSpec).c_str());  // It holds the job's env.
    // Without its record no later agent could adopt the rank: it must not
    // start (the agent's record, written before the fork, stays).
    if (!WriteFileAtomically(
            dir_ + "/" + kRecord,
            absl::StrCat(spec_.record, "shim_pid ", getpid(), "\n"))) {
      Log(dir_, absl::StrCat("cannot write the record: ", Errno(errno)));
      return Fail(absl::StrCat("cannot write ", dir_, "/", kRecord, ": ",
                               Errno(errno),
                               "; free space on the agent's --work-dir"),
                  true);
    }
    for (const DirStep& step : spec_.dirs) {
      std::string failed = MakeDir(step);
      if (!failed.empty()) return Fail(failed + step.fix, true);
    }
    // A program without a slash is looked up in PATH by the child, as the
    // rank's user (ExecChild): these are the candidates, in order.
    std::vector<std::string> paths;
    if (spec_.program.find('/') != std::string::npos) {
      paths.push_back(spec_.program);
    } else {
      for (absl::string_view entry : absl::StrSplit(spec_.search_path, ':')) {
        paths.push_back(
            absl::StrCat(entry.empty() ? "." : entry, "/", spec_.program));
      }
    }
    for (auto [spool, name] : {std::pair{&out_, kStdout}, {&err_, kStderr},
                               {&metrics_, kMetrics}}) {
      spool->file =
          ::open((dir_ + "/" + name).c_str(),
                 O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (spool->file < 0) {
        return Fail(absl::StrCat("cannot create the spool file ", dir_, "/",
                                 name, ": ", Errno(errno),
                                 "; check the agent's --work-dir"),
                    true);
      }
    }
    return Launch(paths) ? Supervise() : 0;
  }

 private:
  // Records that the rank never ran and exits.
  int Fail(const std::string& message, bool node_fault) {
    Status s;
    s.phase = Status::kFailed;
    s.node_fault = node_fault;
    s.message = message;
    WriteStatus(s);
    return 0;
  }

  // False when it could not be written (a full disk): Supervise() tries
  // again each pass.
  bool WriteStatus(const Status& s) {
    if (!WriteFileAtomically(dir_ + "/" + kStatus, EncodeStatus(s))) {
      if (!status_unwritten_) {
        Log(dir_, absl::StrCat("cannot write the status: ", Errno(errno)));
      }
      status_unwritten_ = true;
      return false;
    }
    status_unwritten_ = false;
    return true;
  }

  // Makes step.path's parents (root's) and then the directory itself
  // without following a symlink there: its parent may belong to the job's
  // user (jobs/<job>), who must not be able to point root's chown at
  // another file. A directory of some other user's is refused.
  std::string MakeDir(const DirStep& step) {
    const size_t slash = step.path.rfind('/');
    if (slash == std::string::npos || slash + 1 == step.path.size()) {
      return absl::StrCat("bad ", step.what, " ", step.path);
    }
    const std::string parent = slash == 0 ? "/" : step.path.substr(0, slash);
    const std::string leaf = step.path.substr(slash + 1);
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::StrCat("cannot create ", step.what, " ", step.path, ": ",
                          ec.message());
    }
    int dir_fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
      return absl::StrCat("cannot open ", parent, ": ", Errno(errno));
    }
    if (::mkdirat(dir_fd, leaf.c_str(), 0755) != 0 && errno != EEXIST) {
      const int err = errno;
      ::close(dir_fd);
      return absl::StrCat("cannot create ", step.what, " ", step.path, ": ",
                          Errno(err));
    }
    int fd = ::openat(dir_fd, leaf.c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int open_err = errno;
    ::close(dir_fd);
    if (fd < 0) {
      return absl::StrCat(step.what, " ", step.path,
                          " is not a directory (a symlink?): ",
                          Errno(open_err));
    }
    struct stat st;
    std::string failed;
    if (::fstat(fd, &st) != 0) {
      failed = absl::StrCat("cannot stat ", step.path, ": ", Errno(errno));
    } else if (st.st_uid != 0 && st.st_uid != spec_.uid) {
      failed = absl::StrCat(step.what, " ", step.path,
                            " belongs to another user (uid ", st.st_uid,
                            "); remove it");
    } else if (step.give_to_user &&
               ::fchown(fd, spec_.uid, spec_.gid) != 0) {
      failed = absl::StrCat("cannot give ", step.what, " ", step.path,
                            " to user ", spec_.user_name, ": ", Errno(errno));
    } else if (::fchmod(fd, step.mode) != 0) {
      failed = absl::StrCat("cannot set the mode of ", step.what, " ",
                            step.path, ": ", Errno(errno));
    }
    ::close(fd);
    return failed;
  }

  bool Launch(std::vector<std::string>& paths) {
    std::vector<char*> argv, envp, candidates;
    for (std::string& s : paths) candidates.push_back(s.data());
    candidates.push_back(nullptr);
    for (std::string& s : spec_.argv) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (std::string& s : spec_.env) envp.push_back(s.data());
    envp.push_back(nullptr);
    int out[2], err[2], metrics[2], error_pipe[2];
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    bool piped = devnull >= 0 && pipe2(out, O_CLOEXEC) == 0 &&
                 pipe2(err, O_CLOEXEC) == 0 &&
                 pipe2(metrics, O_CLOEXEC) == 0 &&
                 pipe2(error_pipe, O_CLOEXEC) == 0;
    if (piped) {
      for (int* fd : {&error_pipe[1], &metrics[1]}) {
        int high = fcntl(*fd, F_DUPFD_CLOEXEC, kHighFd);
        if (high < 0) {
          piped = false;
          break;
        }
        ::close(*fd);
        *fd = high;
      }
    }
    if (!piped) {
      Fail(absl::StrCat("cannot create pipes: ", Errno(errno),
                        "; the node may be out of file descriptors"),
           true);
      return false;
    }
    std::vector<int> cgroup_fds;
    for (const std::string& procs : spec_.cgroup_procs) {
      int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) {
        Fail(absl::StrCat("cannot put the rank in its cgroup: cannot open ",
                          procs, ": ", Errno(errno)),
             true);
        return false;
      }
      cgroup_fds.push_back(fd);
    }
    std::vector<gid_t> groups(spec_.groups.begin(), spec_.groups.end());
    ChildIdentity identity;
    identity.cgroup_fds = cgroup_fds.data();
    identity.cgroup_fd_count = cgroup_fds.size();
    identity.change_user = spec_.change_user;
    identity.uid = spec_.uid;
    identity.gid = spec_.gid;
    identity.groups = groups.data();
    identity.group_count = groups.size();
    std::string checkpoint_dir = spec_.checkpoint_dir;
    if (!checkpoint_dir.empty()) identity.checkpoint_dir = checkpoint_dir.data();

    // The agent raised its own; the rank gets what the node gives.
    struct rlimit files;
    if (spec_.open_files > 0 && getrlimit(RLIMIT_NOFILE, &files) == 0) {
      files.rlim_cur = std::min<rlim_t>(spec_.open_files, files.rlim_max);
      setrlimit(RLIMIT_NOFILE, &files);
    }
    const pid_t self = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      ExecChild(self, devnull, out[1], err[1], metrics[1], error_pipe[1],
                spec_.dir.c_str(), candidates.data(), argv.data(), envp.data(),
                identity);
    }
    const int fork_errno = errno;
    for (int fd : cgroup_fds) ::close(fd);
    for (int fd : {out[1], err[1], metrics[1], error_pipe[1], devnull}) {
      ::close(fd);
    }
    if (pid < 0) {
      Fail(absl::StrCat("fork: ", Errno(fork_errno),
                        "; the node is out of processes or memory"),
           true);
      return false;
    }
    setpgid(pid, pid);  // Also in the child; whichever runs first wins.
    ChildError child_error{0, 0};
    ssize_t got;
    do {
      got = ::read(error_pipe[0], &child_error, sizeof(child_error));
    } while (got < 0 && errno == EINTR);
    ::close(error_pipe[0]);
    if (got > 0) {
      int st;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      Fail(ChildErrorMessage(child_error),
           child_error.stage == kStageCgroup || child_error.stage == kStageSetup);
      return false;
    }
    pid_ = pid;
    out_.pipe = out[0];
    err_.pipe = err[0];
    metrics_.pipe = metrics[0];
    for (int fd : {out[0], err[0], metrics[0]}) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    Status s;
    s.phase = Status::kRunning;
    s.pid = pid_;
    if (!WriteStatus(s)) {
      // No agent could follow or stop it: it does not run.
      ::kill(-pid_, SIGKILL);
      int st;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
      _exit(1);
    }
    return true;
  }

  std::string ChildErrorMessage(const ChildError& e) {
    const std::string& path = spec_.program;
    switch (e.stage) {
      case kStageChdir:
        return absl::StrCat("cannot change to working directory ", spec_.dir,
                            ": ", Errno(e.err),
                            "; fix working_dir in the job spec");
      case kStageExec:
        return absl::StrCat("cannot execute ", path, ": ", Errno(e.err),
                            "; fix command[0] in the job spec");
      case kStageNotInPath:
        if (path.find('/') != std::string::npos) {
          return absl::StrCat("cannot execute ", path, ": ", Errno(e.err),
                              "; fix command[0] in the job spec");
        }
        if (e.err == EACCES) {
          return absl::StrCat(
              "cannot execute ", path, " from PATH=", spec_.search_path,
              " as user ", spec_.user_name,
              ": permission denied (a file's mode, or a directory the user "
              "may not search); fix command[0] in the job spec, or the "
              "permissions");
        }
        return absl::StrCat("cannot execute ", path, ": not found in PATH=",
                            spec_.search_path,
                            "; fix command[0] in the job spec (an absolute "
                            "path, or a program in PATH)");
      case kStageCgroup:
        return absl::StrCat("cannot move the rank into its cgroup ",
                            spec_.cgroup_dir, ": ", Errno(e.err));
      case kStageCheckpointDir:
        return absl::StrCat(
            "cannot make checkpoint_dir ", spec_.checkpoint_dir, " as user ",
            spec_.user_name, ": ", Errno(e.err),
            "; give a checkpoint_dir on a filesystem this node mounts whose "
            "parent the user may write to (or create it for them)");
      case kStageCheckpointSymlink:
        return absl::StrCat(
            "checkpoint_dir ", spec_.checkpoint_dir,
            " has a symbolic link in a directory others may write to, and "
            "the agent follows none there (one planted by another user would "
            "send the checkpoints to them); give the path with the links "
            "resolved (realpath)");
      case kStageCheckpointParent: {
        // e.err: how many components below "/" the directory is.
        std::string dir = "/";
        int depth = 0;
        for (absl::string_view part :
             absl::StrSplit(spec_.checkpoint_dir, '/', absl::SkipEmpty())) {
          if (part == ".") continue;  // not walked into
          if (depth++ == e.err) break;
          dir = absl::StrCat(dir == "/" ? "" : dir, "/", part);
        }
        return absl::StrCat(
            "checkpoint_dir ", spec_.checkpoint_dir, ": ", dir,
            " is another user's, or others may write to it without the "
            "sticky bit, so they could swap the checkpoints for their own; "
            "use a path whose directories are root's or ", spec_.user_name,
            "'s (a shared parent: mode 1777, with {user} below it), or have "
            "their owner fix them");
      }
      case kStageCheckpointOwner:
        return absl::StrCat(
            "checkpoint_dir ", spec_.checkpoint_dir,
            " is not a directory of user ", spec_.user_name,
            "'s that only they may write to (another user made it, or its "
            "mode lets others write); give the job another checkpoint_dir, "
            "or have its owner fix it");
      case kStageUser:
        return absl::StrCat("cannot switch to user ", spec_.user_name,
                            " (uid ", spec_.uid, ", gid ", spec_.gid, "): ",
                            Errno(e.err),
                            "; run xl-agent as root, or with --run-as agent");
      default:
        return absl::StrCat("cannot set up the rank process: ", Errno(e.err));
    }
  }

  // Reads what the pipe holds now into the spool; false at its end.
  void Pump(Spool& spool) {
    char buf[64 * 1024];
    while (spool.pipe >= 0) {
      ssize_t n = ::read(spool.pipe, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        ::close(spool.pipe);
        spool.pipe = -1;
        return;
      }
      size_t done = 0;
      while (done < static_cast<size_t>(n)) {
        ssize_t w = ::write(spool.file, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          // A full disk must not stop the rank: what does not fit is lost.
          if (spool.dropped == 0) {
            Log(dir_, absl::StrCat("cannot spool output: ", Errno(errno),
                                   "; dropping it"));
          }
          spool.dropped += n - done;
          break;
        }
        done += static_cast<size_t>(w);
        spool.size += w;
      }
    }
  }

  // Output lost to a full disk is said in the status (the agent shows it
  // in the rank's log): written again at once when the count grew.
  void NoteDropped(Status& s) {
    if (out_.dropped == s.stdout_dropped && err_.dropped == s.stderr_dropped) {
      return;
    }
    s.stdout_dropped = out_.dropped;
    s.stderr_dropped = err_.dropped;
    WriteStatus(s);
  }

  bool GroupAlive() const { return ::kill(-pid_, 0) == 0 || errno == EPERM; }

  int Supervise() {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    int sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    bool leader_alive = true;
    int64_t kill_at = -1;  // the lease ran out: SIGKILL at this time
    int64_t next_lease_check = 0;
    Status s;
    s.phase = Status::kRunning;
    s.pid = pid_;
    while (true) {
      pollfd fds[4];
      int n = 0;
      fds[n++] = {sigfd, POLLIN, 0};
      Spool* spools[3] = {&out_, &err_, &metrics_};
      Spool* polled[3];
      int np = 0;
      for (Spool* sp : spools) {
        if (sp->pipe < 0) continue;
        polled[np++] = sp;
        fds[n++] = {sp->pipe, POLLIN, 0};
      }
      // Processes of the group outside the shim's children (none are: it is
      // their subreaper) are noticed by polling once the leader is gone.
      const int timeout = leader_alive ? 1000 : 20;
      ::poll(fds, n, timeout);
      for (int i = 0; i < np; ++i) {
        if (fds[i + 1].revents != 0) Pump(*polled[i]);
      }
      NoteDropped(s);
      signalfd_siginfo info;
      while (::read(sigfd, &info, sizeof(info)) > 0) {
      }
      while (true) {
        int st = 0;
        pid_t reaped = ::waitpid(-1, &st, WNOHANG);
        if (reaped < 0 && errno == EINTR) continue;
        if (reaped <= 0) break;
        if (reaped != pid_ || !leader_alive) continue;
        leader_alive = false;
        // Output written before the exit goes before its status.
        for (Spool* sp : spools) Pump(*sp);
        s.stdout_dropped = out_.dropped;
        s.stderr_dropped = err_.dropped;
        s.phase = Status::kExited;
        s.wait_status = st;
        s.stdout_bytes = out_.size;
        s.stderr_bytes = err_.size;
        // Nothing left of the group: said at once, as one status.
        if (!GroupAlive()) break;
        WriteStatus(s);
      }
      const int64_t now = MonotonicNs();
      if (now >= next_lease_check) {
        next_lease_check = now + 1000000000;
        if (kill_at < 0 && LeaseExpired(spec_.lease_file, now) &&
            GroupAlive()) {
          // No agent renewed the lease: the scheduler counts this node lost
          // and may run the attempt elsewhere.
          Log(dir_, "the agent's lease ran out: stopping the rank");
          ::kill(-pid_, SIGTERM);
          kill_at = now + spec_.grace_ms * 1000000;
          s.lease_stop = true;
          if (!leader_alive) WriteStatus(s);
        }
      }
      if (kill_at >= 0 && now >= kill_at) {
        ::kill(-pid_, SIGKILL);
        kill_at = INT64_MAX;
      }
      if (status_unwritten_) WriteStatus(s);  // A full disk: again.
      if (!leader_alive && !GroupAlive()) {
        for (Spool* sp : spools) Pump(*sp);  // Leftovers' last words.
        s.stdout_dropped = out_.dropped;
        s.stderr_dropped = err_.dropped;
        s.phase = Status::kDone;
        // The agent learns of the end from it; a while to find space.
        for (int i = 0; i < 600 && !WriteStatus(s); ++i) {
          ::poll(nullptr, 0, 100);
        }
        return 0;
      }
    }
  }

  const std::string dir_;
  Spec spec_;
  pid_t pid_ = 0;
  Spool out_, err_, metrics_;
  bool status_unwritten_ = false;
};

}  // namespace
}  // namespace xl::agent::shim

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] != '/') {
    fprintf(stderr,
            "usage: xl-rank-shim <rank state directory>\n"
            "Runs one rank for xl-agent, which starts it (with the locked "
            "lock file as fd 3); not for use by hand.\n");
    return argc == 2 && (strcmp(argv[1], "--help") == 0 ||
                         strcmp(argv[1], "-h") == 0)
               ? 0
               : 2;
  }
  // Descriptors 0-2 exist (a spool must never land on 2, its log).
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) < 0) {
      int null = open("/dev/null", O_RDWR);
      if (null >= 0 && null != fd) {
        dup2(null, fd);
        close(null);
      }
    }
  }
  // Not the agent's: its session, its process group, its signals. The rank's
  // orphans come here, not to init.
  setsid();
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
  // The lock proves the shim alive; the rank must not inherit it.
  if (fcntl(xl::agent::shim::kLockFd, F_SETFD, FD_CLOEXEC) != 0 ||
      flock(xl::agent::shim::kLockFd, LOCK_EX | LOCK_NB) != 0) {
    fprintf(stderr, "xl-rank-shim %s: no lock on fd 3 (%s)\n", argv[1],
            strerror(errno));
    return 2;
  }
  return xl::agent::shim::Shim(argv[1]).Run();
}
