#include "agent/supervisor.h"

#include <google/protobuf/util/json_util.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/exec_child.h"
#include "agent/log.h"
#include "agent/monotonic_wait.h"
#include "common/duration.h"
#include "common/status.h"

namespace xl::agent {

// A rank's stdout or stderr: the read end of its pipe and the bytes not yet
// sent because their line is incomplete.
struct Supervisor::Output {
  v1::LogStream stream = v1::LOG_STREAM_UNSPECIFIED;
  int fd = -1;
  std::string pending;
  absl::Time pending_since = absl::InfiniteFuture();
  int64_t offset = 0;  // bytes emitted so far (LogChunk.end_offset)
};

// One started rank. pgid == pid: the leader is the process execve'd.
struct Supervisor::Process {
  RankKey key;
  pid_t pid = 0;
  bool leader_alive = true;
  // Some process of the group may remain after the leader exits.
  bool group_alive = true;
  bool stopping = false;
  // Why the agent stopped it on its own (its lease ran out, it is shutting
  // down); empty when the scheduler asked or nobody did.
  std::string stopped_by_agent;
  bool sigkill_sent = false;
  absl::Time kill_deadline = absl::InfiniteFuture();
  absl::Duration grace;
  // The RANK_EXITED status sent at the leader's exit, sent again without
  // processes_remaining once the group is gone.
  v1::RankStatus exit_status;
  Output out;
  Output err;
  // XL_METRICS_FD: one TrainMetrics JSON object per line.
  Output metrics;
};

struct Supervisor::Command {
  enum Kind { kStart, kStop, kStopRanks, kStopAll } kind = kStart;
  v1::StartRanks start;
  v1::StopJob stop;
  absl::Duration grace;
  std::string reason;  // kStopRanks
};

namespace {

// One Supervisor per process: it owns SIGCHLD and waitpid(-1).
std::atomic<bool> g_running{false};
// The SIGCHLD self-pipe; created once and never closed, so the handler never
// writes into a reused descriptor.
std::atomic<int> g_sigchld_write{-1};
int g_sigchld_read = -1;

void OnSigchld(int) {
  int saved = errno;
  int fd = g_sigchld_write.load(std::memory_order_relaxed);
  if (fd >= 0) {
    char c = 'c';
    ssize_t ignored = ::write(fd, &c, 1);
    (void)ignored;
  }
  errno = saved;
}

absl::Status InstallSigchld() {
  static absl::Status* status = [] {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return new absl::Status(absl::InternalError(
          absl::StrCat("cannot create SIGCHLD pipe: ", ErrnoString(errno))));
    }
    g_sigchld_read = fds[0];
    g_sigchld_write.store(fds[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnSigchld;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, nullptr) != 0) {
      return new absl::Status(absl::InternalError(absl::StrCat(
          "cannot install SIGCHLD handler: ", ErrnoString(errno))));
    }
    return new absl::Status();
  }();
  return *status;
}

void Drain(int fd) {
  char buf[256];
  while (::read(fd, buf, sizeof(buf)) > 0) {
  }
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// True while any process of the group exists (zombies included).
bool GroupAlive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno == EPERM; }

std::string SignalName(int sig) {
  const char* name = sigdescr_np(sig);  // Thread-safe, unlike strsignal().
  return name ? name : absl::StrCat("signal ", sig);
}

// Job ids become path components.
bool SafePathComponent(const std::string& s) {
  return !s.empty() && s != "." && s != ".." &&
         s.find('/') == std::string::npos && s.find('\0') == std::string::npos;
}

absl::Status MakeDirs(const std::string& path, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", what, " ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

// Makes `path` (and missing parents) a directory of `user`'s only: owner
// `user`, mode 0700.
absl::Status MakePrivateDir(const std::string& path, const RankUser& user,
                            const std::string& what) {
  RETURN_IF_ERROR(MakeDirs(path, what));
  if (::chown(path.c_str(), user.uid, user.gid) != 0 ||
      ::chmod(path.c_str(), 0700) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot give ", what, " ", path, " to user ", user.name,
                     ": ", ErrnoString(errno)));
  }
  return absl::OkStatus();
}

// A directory holding users' private directories: others may pass through
// it to their own, not list it.
absl::Status MakeTraversableDir(const std::string& path,
                                const std::string& what) {
  RETURN_IF_ERROR(MakeDirs(path, what));
  if (::chmod(path.c_str(), 0711) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot set the mode of ", what, " ", path, ": ", ErrnoString(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

Supervisor::Supervisor(SupervisorOptions options, RankEventSink* sink)
    : options_(std::move(options)), sink_(sink) {}

Supervisor::~Supervisor() {
  if (!started_) return;
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
  }
  Wake();
  thread_.join();
  CloseFd(wake_read_);
  CloseFd(wake_write_);
  g_running.store(false);
}

absl::Status Supervisor::Start() {
  bool expected = false;
  if (!g_running.compare_exchange_strong(expected, true)) {
    return absl::FailedPreconditionError(
        "another Supervisor runs in this process; stop it first");
  }
  absl::Status status = InstallSigchld();
  int fds[2];
  if (status.ok() && pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    status = absl::InternalError(
        absl::StrCat("cannot create wake-up pipe: ", ErrnoString(errno)));
  }
  if (!status.ok()) {
    g_running.store(false);
    return status;
  }
  wake_read_ = fds[0];
  wake_write_ = fds[1];
  if (options_.subreaper && prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    LogLine(absl::StrCat("cannot become a child subreaper (",
                         ErrnoString(errno),
                         "); processes ranks leave behind go to init"));
  }
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Supervisor::Wake() {
  char c = 'w';
  ssize_t ignored = ::write(wake_write_, &c, 1);
  (void)ignored;  // A full pipe already wakes the loop.
}

void Supervisor::Enqueue(Command command) {
  {
    absl::MutexLock lock(&mu_);
    commands_.push_back(std::move(command));
  }
  Wake();
}

void Supervisor::StartRanks(const v1::StartRanks& request) {
  {
    // Counted before the command is queued, so that the loop never settles
    // a start not yet counted.
    absl::MutexLock lock(&mu_);
    for (const v1::RankLaunch& launch : request.ranks()) {
      ++starting_[RankKey(request.job_id(), request.attempt(), launch.rank())];
    }
  }
  Command c;
  c.kind = Command::kStart;
  c.start = request;
  Enqueue(std::move(c));
}

void Supervisor::StopJob(const v1::StopJob& request) {
  Command c;
  c.kind = Command::kStop;
  c.stop = request;
  Enqueue(std::move(c));
}

void Supervisor::StopAllRanks(const std::string& reason) {
  Command c;
  c.kind = Command::kStopRanks;
  c.reason = reason;
  Enqueue(std::move(c));
}

absl::Status Supervisor::StopAll(absl::Duration grace) {
  if (!started_) return absl::OkStatus();
  int ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = ++stop_all_requested_;
  }
  Command c;
  c.kind = Command::kStopAll;
  c.grace = grace;
  Enqueue(std::move(c));
  absl::MutexLock lock(&mu_);
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_all_done_ >= ticket && idle_;
  };
  // Real time: this waits on processes, whatever clock the timers use. The
  // loop's passes (a relative poll() timeout, at most a second) tick it.
  const Clock& real = *RealClock::Get();
  if (!AwaitUntil(&mu_, absl::Condition(&done), &passes_, real,
                  real.MonotonicNow() + grace + absl::Seconds(5))) {
    return absl::DeadlineExceededError(
        "some rank processes survived SIGKILL (stuck in the kernel?); "
        "check with ps -eo pid,pgid,stat,cmd");
  }
  return absl::OkStatus();
}

std::vector<v1::RankStatus> Supervisor::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::RankStatus> out;
  out.reserve(statuses_.size() + starting_.size());
  auto status = statuses_.begin();
  auto starting = starting_.begin();
  // Both maps are ordered by (job, attempt, rank): merged, a rank with a
  // status is reported by that status only.
  while (status != statuses_.end() || starting != starting_.end()) {
    if (starting == starting_.end() ||
        (status != statuses_.end() && status->first <= starting->first)) {
      if (starting != starting_.end() && status->first == starting->first) {
        ++starting;
      }
      out.push_back(status->second.status);
      ++status;
      continue;
    }
    // Accepted, not yet run: the scheduler must go on holding its
    // resources, or it may place another job on them while it starts.
    v1::RankStatus& placeholder = out.emplace_back();
    placeholder.set_job_id(std::get<0>(starting->first));
    placeholder.set_attempt(std::get<1>(starting->first));
    placeholder.set_rank(std::get<2>(starting->first));
    placeholder.set_state(v1::RANK_RUNNING);
    placeholder.set_message("starting");
    ++starting;
  }
  return out;
}

void Supervisor::Settle(const v1::StartRanks& request) {
  absl::MutexLock lock(&mu_);
  for (const v1::RankLaunch& launch : request.ranks()) {
    auto it = starting_.find(
        RankKey(request.job_id(), request.attempt(), launch.rank()));
    if (it != starting_.end() && --it->second <= 0) starting_.erase(it);
  }
}

void Supervisor::SetStatus(const v1::RankStatus& status) {
  {
    absl::MutexLock lock(&mu_);
    StatusEntry& entry =
        statuses_[RankKey(status.job_id(), status.attempt(), status.rank())];
    entry.status = status;
    // Retention starts once nothing of the rank runs any more.
    entry.end_time =
        status.state() == v1::RANK_RUNNING || status.processes_remaining()
            ? absl::InfiniteFuture()
            : options_.clock->MonotonicNow();
  }
  sink_->OnRankStatus(status);
}

void Supervisor::FailToStart(const v1::StartRanks& request, int rank,
                             const std::string& message, bool node_fault) {
  LogLine(absl::StrCat("job ", request.job_id(), " attempt ", request.attempt(),
                       " rank ", rank, " failed to start: ", message));
  v1::RankStatus status;
  status.set_job_id(request.job_id());
  status.set_attempt(request.attempt());
  status.set_rank(rank);
  status.set_state(v1::RANK_FAILED_TO_START);
  status.set_message(message);
  status.set_node_fault(node_fault);
  SetStatus(status);
}

void Supervisor::Loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Process*, Output*>> owners;
  while (true) {
    fds.clear();
    owners.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({g_sigchld_read, POLLIN, 0});
    for (auto& [key, process] : processes_) {
      for (Output* output : {&process->out, &process->err, &process->metrics}) {
        if (output->fd < 0) continue;
        fds.push_back({output->fd, POLLIN, 0});
        owners.emplace_back(process.get(), output);
      }
    }
    absl::Duration timeout = NextTimeout();
    int timeout_ms = static_cast<int>(std::max<int64_t>(
        0,
        absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)))));
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      LogLine(absl::StrCat("poll: ", ErrnoString(errno)));
    }
    Drain(wake_read_);
    Drain(g_sigchld_read);

    std::deque<Command> commands;
    bool quit;
    {
      absl::MutexLock lock(&mu_);
      commands.swap(commands_);
      quit = quit_;
    }
    if (quit) break;
    if (n > 0) {
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0)
          ReadOutput(*owners[i - 2].first, *owners[i - 2].second);
      }
    }
    // Reap before commands so a StartRanks sees old attempts that just died.
    Reap();
    for (Command& command : commands) {
      HandleCommand(command);
      // Hundreds of starts queued at once take a while; each one done is
      // progress, not a stall (Stalled()).
      MarkProgress();
    }
    Reap();
    RunTimers();
    UpdateLiveness();
  }
  // Destruction: nothing may outlive the supervisor.
  for (auto& [key, process] : processes_) {
    if (process->leader_alive || process->group_alive) {
      ::kill(-process->pid, SIGKILL);
    }
    CloseFd(process->out.fd);
    CloseFd(process->err.fd);
    CloseFd(process->metrics.fd);
  }
  for (auto& [key, attempt] : attempts_) {
    if (attempt->cgroup != nullptr) attempt->cgroup->KillAll();
  }
  // Reap the leaders and whatever they left behind (orphans come to this
  // process as the subreaper), so no zombie keeps a group alive.
  const Clock& real = *RealClock::Get();
  const absl::Time deadline = real.MonotonicNow() + absl::Seconds(2);
  for (auto& [key, process] : processes_) {
    while (GroupAlive(process->pid) && real.MonotonicNow() < deadline) {
      int st;
      if (::waitpid(-1, &st, WNOHANG) <= 0)
        absl::SleepFor(absl::Milliseconds(1));
    }
  }
  processes_.clear();
  for (int i = 0; i < 200 && !attempts_.empty(); ++i) {
    int st;
    while (::waitpid(-1, &st, WNOHANG) > 0) {
    }
    CleanUpAttempts();
    if (!attempts_.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
}

void Supervisor::HandleCommand(Command& command) {
  switch (command.kind) {
    case Command::kStart:
      HandleStartRanks(command.start);
      break;
    case Command::kStop: {
      absl::Duration grace = FromProto(command.stop.grace_period());
      if (grace <= absl::ZeroDuration()) grace = options_.default_grace;
      HandleStop(command.stop.job_id(), command.stop.attempt(), grace,
                 /*all=*/false);
      // Deferred starts of the stopped attempts never run.
      DropDeferred(
          command.stop.job_id(), command.stop.attempt(), /*all=*/false,
          absl::StrCat("stopped before it started: ", command.stop.reason()));
      break;
    }
    case Command::kStopRanks:
      HandleStop("", 0, std::nullopt, /*all=*/true, &command.reason);
      DropDeferred("", 0, /*all=*/true,
                   absl::StrCat("stopped before it started: ", command.reason));
      break;
    case Command::kStopAll: {
      refuse_starts_ = true;
      static const std::string kShutdown = "the agent is shutting down";
      HandleStop("", 0, command.grace, /*all=*/true, &kShutdown);
      DropDeferred("", 0, /*all=*/true, "the agent is shutting down");
      // Published with idle_ in UpdateLiveness(), so StopAll() never sees
      // this count with a stale idle_.
      ++stop_all_handled_;
      break;
    }
  }
}

void Supervisor::DropDeferred(const std::string& job_id, int attempt, bool all,
                              const std::string& message) {
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    if (!all &&
        (it->request.job_id() != job_id || it->request.attempt() > attempt)) {
      ++it;
      continue;
    }
    for (const v1::RankLaunch& launch : it->request.ranks()) {
      FailToStart(it->request, launch.rank(), message);
    }
    Settle(it->request);
    it = deferred_.erase(it);
  }
}

void Supervisor::HandleStartRanks(const v1::StartRanks& request) {
  auto fail_all = [&](const std::string& message) {
    for (const v1::RankLaunch& launch : request.ranks()) {
      FailToStart(request, launch.rank(), message);
    }
    Settle(request);
  };
  if (refuse_starts_) return fail_all("the agent is shutting down");
  if (!SafePathComponent(request.job_id())) {
    return fail_all(absl::StrCat("job id \"", request.job_id(),
                                 "\" cannot name a directory; the scheduler "
                                 "must send a plain id"));
  }
  if (request.argv_size() == 0 || request.argv(0).empty()) {
    return fail_all("empty command; set command in the job spec");
  }
  // A stale assignment (an older attempt than one already seen) never runs.
  for (const auto& [key, process] : processes_) {
    if (std::get<0>(key) == request.job_id() &&
        std::get<1>(key) > request.attempt()) {
      return fail_all(absl::StrCat("attempt ", request.attempt(),
                                   " is stale: attempt ", std::get<1>(key),
                                   " of the job already ran here"));
    }
  }
  if (TryStart(request, /*force=*/false)) {
    Settle(request);
  } else {
    // Still "starting" in Snapshot() until it runs or is dropped.
    deferred_.push_back(
        {request, options_.clock->MonotonicNow() + absl::Seconds(10)});
  }
}

bool Supervisor::TryStart(const v1::StartRanks& request, bool force) {
  bool old_alive = false;
  for (auto& [key, process] : processes_) {
    if (std::get<0>(key) != request.job_id() ||
        std::get<1>(key) >= request.attempt()) {
      continue;
    }
    if (!process->leader_alive && !process->group_alive) continue;
    old_alive = true;
    if (!process->sigkill_sent) {
      LogLine(absl::StrCat("job ", request.job_id(), " attempt ",
                           request.attempt(), " replaces attempt ",
                           std::get<1>(key), ": killing rank ",
                           std::get<2>(key), " (pid ", process->pid, ")"));
      ::kill(-process->pid, SIGKILL);
      process->stopping = true;
      process->sigkill_sent = true;
    }
  }
  if (old_alive && !force) return false;
  for (const v1::RankLaunch& launch : request.ranks()) {
    RankKey key(request.job_id(), request.attempt(), launch.rank());
    v1::RankStatus known;
    bool is_known = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = statuses_.find(key);
      if (it != statuses_.end()) {
        known = it->second.status;
        is_known = true;
      }
    }
    if (is_known) {
      sink_->OnRankStatus(known);  // A replay: tell the scheduler again.
      continue;
    }
    Launch(request, launch);
  }
  return true;
}

void Supervisor::Launch(const v1::StartRanks& request,
                        const v1::RankLaunch& launch) {
  const std::string& job_id = request.job_id();
  absl::StatusOr<Attempt*> prepared = PrepareAttempt(request);
  if (!prepared.ok()) {
    return FailToStart(request, launch.rank(),
                       std::string(prepared.status().message()));
  }
  const Attempt& attempt = **prepared;
  const RankUser& user = attempt.user;
  std::string dir = request.working_dir();
  if (dir.empty()) {
    // jobs/ lets every user through to their own job's directory only.
    const std::string job_dir = absl::StrCat(options_.work_dir, "/jobs/", job_id);
    dir = absl::StrCat(job_dir, "/", request.attempt());
    absl::Status made =
        MakeTraversableDir(options_.work_dir + "/jobs", "jobs directory");
    if (made.ok()) made = MakePrivateDir(job_dir, user, "job directory");
    if (made.ok()) made = MakePrivateDir(dir, user, "working directory");
    if (!made.ok()) {
      return FailToStart(
          request, launch.rank(),
          absl::StrCat(made.message(), "; check the agent's --work-dir"),
          /*node_fault=*/true);
    }
  }

  // The job's shared part first; the rank's own entries win.
  std::map<std::string, std::string> env(request.env().begin(),
                                         request.env().end());
  for (const auto& [name, value] : launch.env()) env[name] = value;
  if (env.find("XL_CHECKPOINT_DIR") == env.end()) {
    const std::string all = absl::StrCat(options_.scratch_dir, "/checkpoints");
    std::string checkpoints = absl::StrCat(all, "/", job_id);
    absl::Status made = MakeTraversableDir(all, "checkpoint directory");
    if (made.ok()) made = MakePrivateDir(checkpoints, user, "checkpoint directory");
    if (!made.ok()) {
      return FailToStart(
          request, launch.rank(),
          absl::StrCat(made.message(),
                       "; fix the scratch path in the node's inventory"),
          /*node_fault=*/true);
    }
    env["XL_CHECKPOINT_DIR"] = checkpoints;
  }
  env["XL_METRICS_FD"] = absl::StrCat(kMetricsFd);
  env.emplace("TMPDIR", attempt.tmp_dir);
  if (options_.run_as == RunAs::kSubmitter) {
    env.emplace("HOME", user.home);
    env.emplace("USER", user.name);
    env.emplace("LOGNAME", user.name);
  }
  for (const char* name : {"PATH", "HOME", "LANG"}) {
    const char* value = getenv(name);  // NOLINT(concurrency-mt-unsafe)
    if (value != nullptr && env.find(name) == env.end()) env[name] = value;
  }

  std::string path = request.argv(0);
  if (path == "xl-train" && !options_.train_binary.empty()) {
    path = options_.train_binary;
  }
  if (path.find('/') == std::string::npos) {
    auto it = env.find("PATH");
    std::string search = it == env.end() ? "/usr/bin:/bin" : it->second;
    std::string found;
    for (absl::string_view entry : absl::StrSplit(search, ':')) {
      std::string candidate =
          absl::StrCat(entry.empty() ? "." : entry, "/", path);
      if (IsExecutableFile(candidate)) {
        found = candidate;
        break;
      }
    }
    if (found.empty()) {
      return FailToStart(
          request, launch.rank(),
          absl::StrCat("cannot execute ", path, ": not found in PATH=", search,
                       "; fix command[0] in the job spec (an absolute path, "
                       "or a program in PATH)"));
    }
    path = found;
  }

  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (const auto& [k, v] : env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings(request.argv().begin(),
                                        request.argv().end());
  std::vector<char*> argv;
  argv.reserve(argv_strings.size() + 1);
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int error_pipe[2] = {-1, -1};
  int metrics[2] = {-1, -1};
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  bool piped = devnull >= 0 && pipe2(out, O_CLOEXEC) == 0 &&
               pipe2(err, O_CLOEXEC) == 0 &&
               pipe2(error_pipe, O_CLOEXEC) == 0 &&
               pipe2(metrics, O_CLOEXEC) == 0;
  if (piped) {
    for (int* fd : {&error_pipe[1], &metrics[1]}) {
      int high = fcntl(*fd, F_DUPFD_CLOEXEC, kHighFd);
      if (high < 0) {
        piped = false;
        break;
      }
      CloseFd(*fd);
      *fd = high;
    }
  }
  if (!piped) {
    std::string message =
        absl::StrCat("cannot create pipes: ", ErrnoString(errno),
                     "; the agent may be out of file descriptors (ulimit -n)");
    for (int* fds : {out, err, error_pipe, metrics}) {
      CloseFd(fds[0]);
      CloseFd(fds[1]);
    }
    CloseFd(devnull);
    return FailToStart(request, launch.rank(), message, /*node_fault=*/true);
  }

  std::vector<int> cgroup_fds;
  if (attempt.cgroup != nullptr) {
    absl::StatusOr<std::vector<int>> fds = attempt.cgroup->OpenProcsFiles();
    if (!fds.ok()) {
      for (int* fds : {out, err, error_pipe, metrics}) {
        CloseFd(fds[0]);
        CloseFd(fds[1]);
      }
      CloseFd(devnull);
      return FailToStart(request, launch.rank(),
                         absl::StrCat("cannot put the rank in its cgroup: ",
                                      fds.status().message()),
                         /*node_fault=*/true);
    }
    cgroup_fds = *std::move(fds);
  }
  ChildIdentity identity;
  identity.cgroup_fds = cgroup_fds.data();
  identity.cgroup_fd_count = cgroup_fds.size();
  identity.change_user = options_.run_as == RunAs::kSubmitter;
  identity.uid = user.uid;
  identity.gid = user.gid;
  identity.groups = user.groups.data();
  identity.group_count = user.groups.size();
  std::string checkpoint_dir = request.checkpoint_dir();
  if (!checkpoint_dir.empty()) identity.checkpoint_dir = checkpoint_dir.data();

  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    ExecChild(parent, devnull, out[1], err[1], metrics[1], error_pipe[1],
              dir.c_str(), path.c_str(), argv.data(), envp.data(), identity);
  }
  int fork_errno = errno;
  for (int& fd : cgroup_fds) CloseFd(fd);
  CloseFd(out[1]);
  CloseFd(err[1]);
  CloseFd(metrics[1]);
  CloseFd(error_pipe[1]);
  CloseFd(devnull);
  if (pid < 0) {
    CloseFd(out[0]);
    CloseFd(err[0]);
    CloseFd(metrics[0]);
    CloseFd(error_pipe[0]);
    return FailToStart(request, launch.rank(),
                       absl::StrCat("fork: ", ErrnoString(fork_errno),
                                    "; the node is out of processes or "
                                    "memory"),
                       /*node_fault=*/true);
  }
  setpgid(pid, pid);  // Also in the child; whichever runs first wins.

  // Blocks until execve succeeds (the pipe closes) or the child reports.
  ChildError child_error{0, 0};
  ssize_t got;
  do {
    got = ::read(error_pipe[0], &child_error, sizeof(child_error));
  } while (got < 0 && errno == EINTR);
  CloseFd(error_pipe[0]);
  if (got > 0) {
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    CloseFd(out[0]);
    CloseFd(err[0]);
    CloseFd(metrics[0]);
    std::string message;
    switch (child_error.stage) {
      case kStageChdir:
        message = absl::StrCat("cannot change to working directory ", dir, ": ",
                               ErrnoString(child_error.err),
                               "; fix working_dir in the job spec");
        break;
      case kStageExec:
        message = absl::StrCat("cannot execute ", path, ": ",
                               ErrnoString(child_error.err),
                               "; fix command[0] in the job spec");
        break;
      case kStageCgroup:
        message = absl::StrCat("cannot move the rank into its cgroup ",
                               attempt.cgroup->main_dir(), ": ",
                               ErrnoString(child_error.err));
        break;
      case kStageCheckpointDir:
        message = absl::StrCat(
            "cannot make checkpoint_dir ", request.checkpoint_dir(),
            " as user ", user.name, ": ", ErrnoString(child_error.err),
            "; give a checkpoint_dir on a filesystem this node mounts whose "
            "parent the user may write to (or create it for them)");
        break;
      case kStageCheckpointOwner:
        message = absl::StrCat(
            "checkpoint_dir ", request.checkpoint_dir(), " is not a directory "
            "of user ", user.name, "'s that only they may write to (another "
            "user made it, or its mode lets others write); give the job "
            "another checkpoint_dir, or have its owner fix it");
        break;
      case kStageUser:
        message = absl::StrCat("cannot switch to user ", user.name, " (uid ",
                               user.uid, ", gid ", user.gid, "): ",
                               ErrnoString(child_error.err),
                               "; run xl-agent as root, or with --run-as "
                               "agent");
        break;
      default:
        message = absl::StrCat("cannot set up the rank process: ",
                               ErrnoString(child_error.err));
    }
    return FailToStart(request, launch.rank(), message);
  }

  auto process = std::make_unique<Process>();
  process->key = RankKey(job_id, request.attempt(), launch.rank());
  process->pid = pid;
  process->grace = FromProto(request.grace_period());
  if (process->grace <= absl::ZeroDuration()) {
    process->grace = options_.default_grace;
  }
  process->out.stream = v1::STDOUT;
  process->out.fd = out[0];
  process->err.stream = v1::STDERR;
  process->err.fd = err[0];
  process->metrics.stream = v1::LOG_STREAM_UNSPECIFIED;
  process->metrics.fd = metrics[0];
  for (int fd : {out[0], err[0], metrics[0]}) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  leaders_[pid] = process.get();
  processes_[process->key] = std::move(process);

  v1::RankStatus status;
  status.set_job_id(job_id);
  status.set_attempt(request.attempt());
  status.set_rank(launch.rank());
  status.set_state(v1::RANK_RUNNING);
  status.set_pid(pid);
  SetStatus(status);
}

absl::StatusOr<Supervisor::Attempt*> Supervisor::PrepareAttempt(
    const v1::StartRanks& request) {
  const AttemptKey key(request.job_id(), request.attempt());
  auto found = attempts_.find(key);
  if (found != attempts_.end()) return found->second.get();

  auto attempt = std::make_unique<Attempt>();
  absl::StatusOr<RankUser> user = options_.run_as == RunAs::kAgent
                                      ? AgentUser()
                                      : LookUpUser(request.user());
  if (!user.ok()) return user.status();
  attempt->user = *std::move(user);
  if (attempt->user.uid == 0 && !options_.allow_root_jobs) {
    return absl::PermissionDeniedError(
        options_.run_as == RunAs::kAgent
            ? "the job would run as root (uid 0): --run-as agent runs jobs "
              "as the agent's user, and this agent runs as root; start "
              "xl-agent with --allow-root-jobs, or with --run-as submitter"
            : absl::StrCat("the job's user ", attempt->user.name,
                           " is root (uid 0) on this node, and this agent "
                           "refuses jobs as root; submit as an unprivileged "
                           "user, or start xl-agent with --allow-root-jobs"));
  }
  const std::string name =
      absl::StrCat(request.job_id(), "-", request.attempt());
  attempt->tmp_dir = absl::StrCat(options_.work_dir, "/tmp/", name);
  // Whatever an agent that died left there belongs to no one now.
  std::error_code ec;
  std::filesystem::remove_all(attempt->tmp_dir, ec);
  absl::Status made =
      MakeTraversableDir(options_.work_dir + "/tmp", "TMPDIR parent");
  if (made.ok()) {
    made = MakePrivateDir(attempt->tmp_dir, attempt->user, "TMPDIR");
  }
  if (!made.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(made.message(), "; check the agent's --work-dir"));
  }
  if (options_.cgroups.version != CgroupVersion::kNone) {
    absl::StatusOr<std::unique_ptr<JobCgroup>> cgroup =
        JobCgroup::Create(options_.cgroups, name, request.limits());
    if (!cgroup.ok()) {
      std::filesystem::remove_all(attempt->tmp_dir, ec);
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create the job's cgroup: ", cgroup.status().message(),
          "; check the agent's cgroup setup (xl-agent --print-inventory)"));
    }
    attempt->cgroup = *std::move(cgroup);
  }
  Attempt* raw = attempt.get();
  attempts_[key] = std::move(attempt);
  return raw;
}

void Supervisor::CleanUpAttempts() {
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    const AttemptKey& key = it->first;
    bool ranks_left = false;
    for (const auto& [rank_key, process] : processes_) {
      if (std::get<0>(rank_key) == key.first &&
          std::get<1>(rank_key) == key.second) {
        ranks_left = true;
        break;
      }
    }
    if (ranks_left) {
      ++it;
      continue;
    }
    Attempt& attempt = *it->second;
    if (attempt.cgroup != nullptr) {
      // What is left escaped its rank's process group (setsid()).
      if (!attempt.cgroup->Pids().empty()) attempt.cgroup->KillAll();
      absl::Status removed = attempt.cgroup->Remove();
      if (absl::IsUnavailable(removed)) {
        if (!attempt.busy_logged) {
          LogLine(absl::StrCat("job ", key.first, " attempt ", key.second,
                               ": killing what is left in its cgroup"));
          attempt.busy_logged = true;
        }
        ++it;  // Dying; the next pass removes it.
        continue;
      }
      if (!removed.ok()) LogLine(std::string(removed.message()));
    }
    std::error_code ec;
    std::filesystem::remove_all(attempt.tmp_dir, ec);
    if (ec) {
      LogLine(absl::StrCat("cannot remove TMPDIR ", attempt.tmp_dir, ": ",
                           ec.message()));
    }
    it = attempts_.erase(it);
  }
}

void Supervisor::HandleStop(const std::string& job_id, int attempt,
                            std::optional<absl::Duration> grace_or_own,
                            bool all, const std::string* agent_reason) {
  const absl::Time now = options_.clock->MonotonicNow();
  for (auto& [key, process] : processes_) {
    if (!all && (std::get<0>(key) != job_id || std::get<1>(key) > attempt)) {
      continue;
    }
    if (!process->leader_alive && !process->group_alive) continue;
    if (agent_reason != nullptr && process->leader_alive &&
        !process->stopping) {
      process->stopped_by_agent = *agent_reason;
    }
    if (process->sigkill_sent) continue;
    const absl::Duration grace = grace_or_own.value_or(process->grace);
    if (grace <= absl::ZeroDuration()) {
      ::kill(-process->pid, SIGKILL);
      process->sigkill_sent = true;
      process->stopping = true;
      continue;
    }
    if (!process->stopping) {
      ::kill(-process->pid, SIGTERM);
      process->stopping = true;
    }
    process->kill_deadline = std::min(process->kill_deadline, now + grace);
  }
}

void Supervisor::ReadOutput(Process& process, Output& output) {
  char buf[64 * 1024];
  // Bounded so one chatty rank cannot starve the others.
  for (int i = 0; i < 16 && output.fd >= 0; ++i) {
    ssize_t n = ::read(output.fd, buf, sizeof(buf));
    if (n > 0) {
      AppendOutput(process, output, buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    CloseOutput(process, output);  // EOF or a read error.
    return;
  }
}

void Supervisor::AppendOutput(Process& process, Output& output,
                              const char* data, size_t size) {
  if (&output == &process.metrics) {
    output.pending.append(data, size);
    size_t start = 0, nl;
    while ((nl = output.pending.find('\n', start)) != std::string::npos) {
      EmitMetrics(process, output.pending.substr(start, nl - start));
      start = nl + 1;
    }
    output.pending.erase(0, start);
    if (output.pending.size() > (1u << 20)) output.pending.clear();
    return;
  }
  const bool had_pending = !output.pending.empty();
  output.pending.append(data, size);
  bool emitted = false;
  const size_t max = std::max<size_t>(1, options_.max_chunk_bytes);
  while (output.pending.size() >= max) {
    size_t nl = output.pending.rfind('\n', max - 1);
    size_t cut = nl == std::string::npos ? max : nl + 1;
    EmitChunk(process, output, output.pending.substr(0, cut));
    output.pending.erase(0, cut);
    emitted = true;
  }
  size_t nl = output.pending.rfind('\n');
  if (nl != std::string::npos) {
    EmitChunk(process, output, output.pending.substr(0, nl + 1));
    output.pending.erase(0, nl + 1);
    emitted = true;
  }
  if (output.pending.empty()) {
    output.pending_since = absl::InfiniteFuture();
  } else if (emitted || !had_pending) {
    output.pending_since = options_.clock->MonotonicNow();
  }
}

void Supervisor::EmitChunk(const Process& process, Output& output,
                           std::string data) {
  v1::LogChunk chunk;
  output.offset += static_cast<int64_t>(data.size());
  chunk.set_end_offset(output.offset);
  chunk.set_job_id(std::get<0>(process.key));
  chunk.set_attempt(std::get<1>(process.key));
  chunk.set_rank(std::get<2>(process.key));
  chunk.set_stream(output.stream);
  chunk.set_data(std::move(data));
  *chunk.mutable_time() = ToProtoTime(options_.clock->Now());
  sink_->OnLogChunk(std::move(chunk));
}

void Supervisor::EmitMetrics(const Process& process, const std::string& line) {
  if (line.empty()) return;
  v1::TrainMetrics metrics;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(line, &metrics, options)
           .ok()) {
    return;  // Not ours to judge a rank's output; drop what does not parse.
  }
  metrics.set_job_id(std::get<0>(process.key));
  metrics.set_attempt(std::get<1>(process.key));
  metrics.set_rank(std::get<2>(process.key));
  if (!metrics.has_time()) {
    *metrics.mutable_time() = ToProtoTime(options_.clock->Now());
  }
  sink_->OnMetrics(std::move(metrics));
}

void Supervisor::FlushPartial(Process& process, Output& output) {
  if (&output == &process.metrics) {
    output.pending_since = absl::InfiniteFuture();
    return;  // A partial metrics line is never a whole report.
  }
  if (!output.pending.empty()) {
    EmitChunk(process, output, std::move(output.pending));
  }
  output.pending.clear();
  output.pending_since = absl::InfiniteFuture();
}

void Supervisor::CloseOutput(Process& process, Output& output) {
  FlushPartial(process, output);
  CloseFd(output.fd);
}

void Supervisor::Reap() {
  while (true) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    auto it = leaders_.find(pid);
    if (it == leaders_.end()) continue;  // Left behind by a rank; reaped.
    Process* process = it->second;
    leaders_.erase(it);
    OnLeaderExit(*process, st);
  }
}

void Supervisor::OnLeaderExit(Process& process, int wait_status) {
  process.leader_alive = false;
  // Output and metrics written before the exit go before the exit status.
  for (Output* output : {&process.out, &process.err, &process.metrics}) {
    if (output->fd >= 0) ReadOutput(process, *output);
    FlushPartial(process, *output);
  }
  v1::RankStatus status;
  status.set_job_id(std::get<0>(process.key));
  status.set_attempt(std::get<1>(process.key));
  status.set_rank(std::get<2>(process.key));
  status.set_state(v1::RANK_EXITED);
  status.set_pid(process.pid);
  // What the output above reached: the scheduler waits for it to be stored.
  status.set_stdout_bytes(process.out.offset);
  status.set_stderr_bytes(process.err.offset);
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    status.set_signal(sig);
    // As a shell reports it, so that "exit_code == 0" never means success
    // for a killed rank.
    status.set_exit_code(128 + sig);
    status.set_message(
        absl::StrCat("killed by signal ", sig, " (", SignalName(sig), ")"));
  } else {
    status.set_exit_code(WEXITSTATUS(wait_status));
    status.set_message(
        absl::StrCat("exited with code ", WEXITSTATUS(wait_status)));
  }
  if (!process.stopped_by_agent.empty()) {
    status.set_stopped_by_agent(true);
    status.set_message(absl::StrCat(status.message(), " after its agent "
                                    "stopped it: ", process.stopped_by_agent));
  }
  auto attempt = attempts_.find(
      AttemptKey(std::get<0>(process.key), std::get<1>(process.key)));
  if (attempt != attempts_.end() && attempt->second->cgroup != nullptr) {
    const JobCgroup& cgroup = *attempt->second->cgroup;
    status.set_peak_memory_bytes(cgroup.PeakMemoryBytes());
    // The rank failed, and the kernel ended some process of the job for
    // memory: that is most likely why.
    if ((status.signal() != 0 || status.exit_code() != 0) &&
        cgroup.OomKills() > 0) {
      // Said first: the scheduler quotes a signalled rank's message only
      // when it says more than the signal.
      status.set_message(absl::StrCat(
          "the job exceeded its memory limit of ", cgroup.memory_limit(),
          " bytes (", HumanBytes(cgroup.memory_limit()),
          ") on this node and the OOM killer ended a process of it (peak ",
          HumanBytes(status.peak_memory_bytes()),
          "); raise resources.memory_bytes_per_node or use less memory (",
          status.message(), ")"));
    }
  }
  // The job's outcome need not wait for the rest of the group; the
  // resources do (OnGroupGone says when).
  process.group_alive = GroupAlive(process.pid);
  status.set_processes_remaining(process.group_alive);
  process.exit_status = status;
  SetStatus(status);

  if (process.group_alive && !process.stopping) {
    // A rank's processes live as long as the rank: stop what it left.
    ::kill(-process.pid, SIGTERM);
    process.stopping = true;
    process.kill_deadline = options_.clock->MonotonicNow() + process.grace;
  }
}

void Supervisor::OnGroupGone(Process& process) {
  v1::RankStatus status = process.exit_status;
  status.set_processes_remaining(false);
  SetStatus(status);
}

void Supervisor::RunTimers() {
  const absl::Time now = options_.clock->MonotonicNow();
  for (auto& [key, process] : processes_) {
    if (process->stopping && !process->sigkill_sent &&
        now >= process->kill_deadline) {
      if (process->leader_alive || process->group_alive) {
        ::kill(-process->pid, SIGKILL);
      }
      process->sigkill_sent = true;
    }
    for (Output* output : {&process->out, &process->err, &process->metrics}) {
      if (output->fd >= 0 &&
          now >= output->pending_since + options_.partial_line_delay) {
        FlushPartial(*process, *output);
      }
    }
    bool group_gone_now = false;
    if (!process->leader_alive && process->group_alive) {
      process->group_alive = GroupAlive(process->pid);
      group_gone_now = !process->group_alive;
    }
    if (!process->leader_alive && !process->group_alive) {
      // No writer is left in the group; a process that escaped it with
      // setsid() does not keep the rank's pipes open here.
      for (Output* output : {&process->out, &process->err, &process->metrics}) {
        if (output->fd >= 0) {
          ReadOutput(*process, *output);
          CloseOutput(*process, *output);
        }
      }
    }
    // After the leftovers' last output, as the first status came after the
    // leader's.
    if (group_gone_now) OnGroupGone(*process);
  }
  for (auto it = processes_.begin(); it != processes_.end();) {
    const Process& p = *it->second;
    if (!p.leader_alive && !p.group_alive && p.out.fd < 0 && p.err.fd < 0 &&
        p.metrics.fd < 0) {
      it = processes_.erase(it);
    } else {
      ++it;
    }
  }
  CleanUpAttempts();
  // Deferred starts run once the older attempt is gone, or anyway after
  // their deadline (a process stuck in the kernel must not block the job).
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    bool force = now >= it->give_up;
    if (force) {
      LogLine(absl::StrCat("job ", it->request.job_id(),
                           ": older attempt still alive after SIGKILL; "
                           "starting attempt ",
                           it->request.attempt(), " anyway"));
    }
    if (TryStart(it->request, force)) {
      Settle(it->request);
      it = deferred_.erase(it);
    } else {
      ++it;
    }
  }
  absl::MutexLock lock(&mu_);
  for (auto it = statuses_.begin(); it != statuses_.end();) {
    if (it->second.end_time + options_.exited_retention <= now) {
      it = statuses_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Duration Supervisor::NextTimeout() {
  const absl::Time now = options_.clock->MonotonicNow();
  absl::Time next = now + absl::Seconds(1);
  for (const auto& [key, process] : processes_) {
    if (process->stopping && !process->sigkill_sent) {
      next = std::min(next, process->kill_deadline);
    }
    for (const Output* output : {&process->out, &process->err, &process->metrics}) {
      if (output->fd >= 0 && !output->pending.empty()) {
        next =
            std::min(next, output->pending_since + options_.partial_line_delay);
      }
    }
    // Without SIGCHLD for processes init reaps, poll the group.
    if (!process->leader_alive && process->group_alive) {
      next = std::min(next, now + absl::Milliseconds(20));
    }
  }
  if (!deferred_.empty()) next = std::min(next, now + absl::Milliseconds(20));
  for (const auto& [key, attempt] : attempts_) {
    // Its processes are being killed; CleanUpAttempts() retries soon.
    if (attempt->busy_logged) next = std::min(next, now + absl::Milliseconds(20));
  }
  return std::max(absl::ZeroDuration(), next - now);
}

void Supervisor::UpdateLiveness() {
  bool idle = !AnyAlive() && deferred_.empty() && attempts_.empty();
  const absl::Time now = options_.clock->MonotonicNow();
  absl::MutexLock lock(&mu_);
  idle_ = idle;
  stop_all_done_ = stop_all_handled_;
  ++passes_;
  last_pass_ = now;
}

void Supervisor::MarkProgress() {
  const absl::Time now = options_.clock->MonotonicNow();
  absl::MutexLock lock(&mu_);
  last_pass_ = now;
}

absl::Duration Supervisor::Stalled() const {
  const absl::Time now = options_.clock->MonotonicNow();
  absl::MutexLock lock(&mu_);
  if (!started_ || last_pass_ == absl::InfinitePast()) {
    return absl::ZeroDuration();
  }
  return std::max(absl::ZeroDuration(), now - last_pass_);
}

bool Supervisor::AnyAlive() const {
  for (const auto& [key, process] : processes_) {
    if (process->leader_alive || process->group_alive) return true;
  }
  return false;
}

}  // namespace xl::agent
