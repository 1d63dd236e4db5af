// Over 600 lines because the loop, stops, reaping, exits and attempts share
// processes_ and attempts_: the next cut is into types with state of their
// own (review 2026-12 §4.4), not Supervisor:: methods spread over files.
#include "agent/supervisor/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
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
#include "agent/log.h"
#include "agent/monotonic_wait.h"
#include "agent/shim/exec_child.h"
#include "agent/shim/rank_shim.h"
#include "agent/supervisor/launch_spec.h"
#include "agent/supervisor/supervisor_internal.h"
#include "common/duration.h"
#include "common/status.h"

namespace xl::agent {

struct Supervisor::Command {
  enum Kind { kStart, kStop, kStopRanks, kStopAll } kind = kStart;
  v1::StartRanks start;
  v1::StopJob stop;
  absl::Duration grace;
  bool own_grace = false;  // kStopAll: each rank's own grace
  std::string reason;      // kStopRanks
};

using internal::CloseFd;
using internal::GroupAlive;
using internal::ShimGone;

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

std::string SignalName(int sig) {
  const char* name = sigdescr_np(sig);  // Thread-safe, unlike strsignal().
  return name ? name : absl::StrCat("signal ", sig);
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

// What a rank may take of the agent's environment (kInheritedEnv), as it
// is at this launch.
std::map<std::string, std::string> InheritedAgentEnv() {
  std::map<std::string, std::string> env;
  for (const char* name : kInheritedEnv) {
    const char* value = getenv(name);  // NOLINT(concurrency-mt-unsafe)
    if (value != nullptr) env[name] = value;
  }
  return env;
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
  if (thread_.joinable()) thread_.join();
  CloseFd(wake_read_);
  CloseFd(wake_write_);
  CloseFd(inotify_);
  CloseFd(agent_lock_);
  g_running.store(false);
}

void Supervisor::Detach() {
  if (!started_) return;
  {
    absl::MutexLock lock(&mu_);
    detach_ = true;
    quit_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
}

absl::Status Supervisor::Start() {
  if (options_.shim_binary.empty() ||
      ::access(options_.shim_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run the rank shim \"", options_.shim_binary,
        "\"; install xl-rank-shim next to xl-agent (it is built with it)"));
  }
  if (options_.state_dir.empty() && options_.work_dir.empty()) {
    return absl::FailedPreconditionError(
        "no --work-dir: the supervisor keeps the ranks' state under it");
  }
  state_dir_ = options_.state_dir.empty() ? options_.work_dir + "/state"
                                          : options_.state_dir;
  std::error_code ec;
  std::filesystem::create_directories(state_dir_ + "/ranks", ec);
  if (ec || ::chmod(state_dir_.c_str(), 0700) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the state directory ", state_dir_, "/ranks: ",
        ec ? ec.message() : ErrnoString(errno),
        "; check the agent's --work-dir"));
  }
  bool expected = false;
  if (!g_running.compare_exchange_strong(expected, true)) {
    return absl::FailedPreconditionError(
        "another Supervisor runs in this process; stop it first");
  }
  // One agent per state directory; held for the process's life, it also
  // tells the shims that an agent runs (rank_shim.h, LeaseExpired).
  agent_lock_ = ::open((state_dir_ + "/agent.lock").c_str(),
                       O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (agent_lock_ < 0 || ::flock(agent_lock_, LOCK_EX | LOCK_NB) != 0) {
    CloseFd(agent_lock_);
    g_running.store(false);
    return absl::FailedPreconditionError(absl::StrCat(
        "another xl-agent uses ", state_dir_,
        "; give each agent its own --work-dir, or stop the other one"));
  }
  absl::Status status = InstallSigchld();
  int fds[2];
  if (status.ok() && pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    status = absl::InternalError(
        absl::StrCat("cannot create wake-up pipe: ", ErrnoString(errno)));
  }
  if (status.ok()) {
    inotify_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_ < 0) {
      status = absl::InternalError(absl::StrCat(
          "cannot watch rank state directories (inotify): ",
          ErrnoString(errno), "; raise fs.inotify.max_user_instances"));
      ::close(fds[0]);
      ::close(fds[1]);
    }
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
  boot_id_ = shim::BootId();
  launch_settings_.work_dir = options_.work_dir;
  launch_settings_.scratch_dir = options_.scratch_dir;
  launch_settings_.train_binary = options_.train_binary;
  launch_settings_.run_as = options_.run_as;
  launch_settings_.rank_open_files = options_.rank_open_files;
  launch_settings_.default_grace = options_.default_grace;
  launch_settings_.default_memory_bytes = options_.default_memory_bytes;
  launch_settings_.default_max_processes = options_.default_max_processes;
  launch_settings_.state_dir = state_dir_;
  launch_settings_.boot_id = boot_id_;
  Adopt();
  UpdateLiveness();
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

absl::Status Supervisor::StopAll(std::optional<absl::Duration> grace) {
  if (!started_) return absl::OkStatus();
  int ticket;
  absl::Duration longest;
  {
    absl::MutexLock lock(&mu_);
    ticket = ++stop_all_requested_;
    longest = longest_grace_;
  }
  Command c;
  c.kind = Command::kStopAll;
  c.own_grace = !grace.has_value();
  c.grace = grace.value_or(longest);
  if (c.own_grace) grace = longest;
  Enqueue(std::move(c));
  absl::MutexLock lock(&mu_);
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_all_done_ >= ticket && idle_;
  };
  // Real time: this waits on processes, whatever clock the timers use. The
  // loop's passes (a relative poll() timeout, at most a second) tick it.
  const Clock& real = *RealClock::Get();
  if (!AwaitUntil(&mu_, absl::Condition(&done), &passes_, real,
                  real.MonotonicNow() + *grace + absl::Seconds(5))) {
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

void Supervisor::LogStored(const v1::LogChunk& chunk) {
  if (chunk.end_offset() <= 0) return;
  absl::MutexLock lock(&mu_);
  int64_t& end = stored_[{chunk.job_id(), chunk.attempt(), chunk.rank(),
                          static_cast<int>(chunk.stream())}];
  end = std::max(end, chunk.end_offset());
}

void Supervisor::SetLease(absl::Time until) {
  {
    absl::MutexLock lock(&mu_);
    if (until == lease_until_ && !lease_changed_) return;
    lease_until_ = until;
    lease_changed_ = true;
  }
  Wake();
}

void Supervisor::LogRoomFreed() {
  {
    absl::MutexLock lock(&mu_);
    room_freed_ = true;
  }
  Wake();
}

void Supervisor::SetStatus(const v1::RankStatus& status, bool notify) {
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
  if (notify) sink_->OnRankStatus(status);
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
  absl::Time next_sweep = absl::InfinitePast();
  while (true) {
    pollfd fds[3] = {{wake_read_, POLLIN, 0},
                     {g_sigchld_read, POLLIN, 0},
                     {inotify_, POLLIN, 0}};
    absl::Duration timeout = NextTimeout();
    int timeout_ms = static_cast<int>(std::max<int64_t>(
        0,
        absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)))));
    int n = ::poll(fds, 3, timeout_ms);
    if (n < 0 && errno != EINTR) {
      LogLine(absl::StrCat("poll: ", ErrnoString(errno)));
    }
    Drain(wake_read_);
    Drain(g_sigchld_read);
    // Which rank directories changed.
    alignas(inotify_event) char events[16 * 1024];
    ssize_t got;
    while ((got = ::read(inotify_, events, sizeof(events))) > 0) {
      for (char* p = events; p < events + got;) {
        const auto* event = reinterpret_cast<const inotify_event*>(p);
        if (event->mask & IN_Q_OVERFLOW) next_sweep = absl::InfinitePast();
        // Only what the shim writes matters; the agent's own writes there
        // (acked, chunk ends, their .tmp files) must not wake it again.
        const std::string name = event->len > 0 ? event->name : "";
        const bool shims = name.empty() || name == shim::kStatus ||
                           name == shim::kStdout || name == shim::kStderr ||
                           name == shim::kMetrics;
        auto it = watches_.find(event->wd);
        if (shims && it != watches_.end()) it->second->dirty = true;
        p += sizeof(inotify_event) + event->len;
      }
    }

    std::deque<Command> commands;
    std::map<std::tuple<std::string, int, int, int>, int64_t> stored;
    bool quit, detach, lease_changed, room_freed;
    absl::Time lease_until;
    {
      absl::MutexLock lock(&mu_);
      commands.swap(commands_);
      stored.swap(stored_);
      room_freed = room_freed_;
      room_freed_ = false;
      quit = quit_;
      detach = detach_;
      lease_changed = lease_changed_;
      lease_changed_ = false;
      lease_until = lease_until_;
    }
    if (lease_changed) {
      // The shims read it to stop their ranks if no agent renews it.
      const int64_t deadline = lease_until == absl::InfiniteFuture()
                                   ? -1
                                   : absl::ToUnixNanos(lease_until);
      if (!shim::WriteFileAtomically(state_dir_ + "/lease",
                                     shim::EncodeLease(deadline))) {
        LogLine(absl::StrCat("cannot write the lease file ", state_dir_,
                             "/lease: ", ErrnoString(errno)));
      }
    }
    for (const auto& [key, end] : stored) {
      auto it = processes_.find(
          RankKey(std::get<0>(key), std::get<1>(key), std::get<2>(key)));
      if (it == processes_.end()) {
        // The rank is over and forgotten, its last output acknowledged
        // late: its directory still says how far, or a restarted agent
        // would send all of it again.
        PersistLateAck(key, end);
        continue;
      }
      Output& output = std::get<3>(key) == v1::STDERR ? it->second->err
                                                      : it->second->out;
      if (end > output.stored) {
        output.stored = end;
        it->second->dirty = true;
        PersistAcked(*it->second);
      }
    }
    if (quit) {
      if (detach) {
        LogLine(absl::StrCat("leaving ", processes_.size(),
                             " rank(s) running under their shims for the "
                             "next xl-agent"));
        for (auto& [key, process] : processes_) {
          PersistAcked(*process);
          for (Output* o : {&process->out, &process->err, &process->metrics}) {
            CloseFd(o->fd);
            CloseFd(o->chunks_fd);
          }
        }
        processes_.clear();
        return;
      }
      break;
    }
    // Reap before commands so a StartRanks sees old attempts that just died.
    Reap();
    const absl::Time now = options_.clock->MonotonicNow();
    const bool sweep = now >= next_sweep;
    if (sweep) next_sweep = now + absl::Seconds(1);
    std::vector<Process*> due;
    for (auto& [key, process] : processes_) {
      // Room in the session: the ranks with output waiting for it.
      if (room_freed && Starved(*process)) process->dirty = true;
      if (sweep) process->dirty = true;
      if (!process->dirty) continue;
      process->dirty = false;
      due.push_back(process.get());
    }
    // Each round starts one rank further on, so that ranks with much output
    // waiting share the session's room.
    if (!due.empty()) {
      std::rotate(due.begin(), due.begin() + (poll_turn_++ % due.size()),
                  due.end());
    }
    for (Process* process : due) Poll(*process);
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
    if (process->pid > 0 && (process->leader_alive || process->group_alive)) {
      ::kill(-process->pid, SIGKILL);
    }
    // A shim still starting its rank: the rank dies with it (its parent-death
    // signal). The lock says the pid is still that shim's.
    if (process->shim_pid > 0 && !ShimGone(process->dir)) {
      ::kill(process->shim_pid, SIGKILL);
    }
  }
  for (auto& [key, attempt] : attempts_) {
    if (attempt->cgroup != nullptr) attempt->cgroup->KillAll();
  }
  // Reap the shims (they exit once their rank's group is gone) and whatever
  // ranks left behind, so no zombie keeps a group alive.
  const Clock& real = *RealClock::Get();
  const absl::Time deadline = real.MonotonicNow() + absl::Seconds(2);
  for (auto& [key, process] : processes_) {
    while (((process->pid > 0 && GroupAlive(process->pid)) ||
            !ShimGone(process->dir)) &&
           real.MonotonicNow() < deadline) {
      int st;
      if (::waitpid(-1, &st, WNOHANG) <= 0)
        absl::SleepFor(absl::Milliseconds(1));
    }
    for (Output* o : {&process->out, &process->err, &process->metrics}) {
      CloseFd(o->fd);
      CloseFd(o->chunks_fd);
    }
    std::error_code ec;
    std::filesystem::remove_all(process->dir, ec);
  }
  processes_.clear();
  // Stopped for good: what ranks that ended left here (kept for their
  // retention) would be reported again by the next agent.
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(state_dir_ + "/ranks", ec)) {
    if (ShimGone(entry.path().string())) {
      std::error_code ignored;
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }
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
      HandleStop("", 0,
                 command.own_grace ? std::nullopt
                                   : std::optional<absl::Duration>(command.grace),
                 /*all=*/true, &kShutdown);
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
  if (absl::Status launchable = CheckStartRanks(request); !launchable.ok()) {
    return fail_all(std::string(launchable.message()));
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
      Signal(*process, SIGKILL);
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
      // A replay: tell the scheduler again (a rank still starting says so
      // itself once its shim has started it).
      if (known.pid() != 0 || known.state() != v1::RANK_RUNNING) {
        sink_->OnRankStatus(known);
      }
      continue;
    }
    if (processes_.count(key)) continue;  // Followed already (adopted).
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
  AttemptPlace place;
  place.user = attempt.user;
  place.tmp_dir = attempt.tmp_dir;
  if (attempt.cgroup != nullptr) {
    place.has_cgroup = true;
    place.cgroup.procs_files = attempt.cgroup->ProcsFiles();
    place.cgroup.dir = attempt.cgroup->main_dir();
    place.cgroup.memory_limit = attempt.cgroup->memory_limit();
  }
  // What may wait on a filesystem (directories, the PATH lookup, exec) is
  // the shim's to do: a hung mount stops one rank's start, not the agent.
  const shim::Spec spec = BuildRankSpec(request, launch, launch_settings_,
                                        place, InheritedAgentEnv());
  const std::string encoded = shim::EncodeSpec(spec);
  if (encoded.size() > shim::kMaxSpecBytes) {
    // The shim would refuse it; the job can fix it, the node cannot.
    return FailToStart(
        request, launch.rank(),
        absl::StrCat("the rank's command and environment come to ",
                     encoded.size(), " bytes; at most ", shim::kMaxSpecBytes,
                     " go to a rank; put large data in a file the job reads"));
  }

  auto node_fault = [&](const std::string& what) {
    FailToStart(request, launch.rank(),
                absl::StrCat(what, ": ", ErrnoString(errno),
                             "; check the agent's --work-dir"),
                /*node_fault=*/true);
  };
  const std::string dir =
      shim::RankDir(state_dir_, job_id, request.attempt(), launch.rank());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // An earlier life's, never adopted.
  if (::mkdir(dir.c_str(), 0700) != 0) {
    return node_fault(absl::StrCat("cannot create the rank's state directory ",
                                   dir));
  }
  // The record first: a successor finds every rank whose shim may have
  // started (the shim adds its pid to it).
  if (!shim::WriteFileAtomically(dir + "/" + shim::kRecord, spec.record) ||
      !shim::WriteFileAtomically(dir + "/" + shim::kSpec, encoded)) {
    return node_fault(absl::StrCat("cannot write ", dir));
  }
  // Held by the shim as long as it lives (rank_shim.h).
  int lock = ::open((dir + "/" + shim::kLock).c_str(),
                    O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    CloseFd(lock);
    return node_fault(absl::StrCat("cannot lock ", dir, "/", shim::kLock));
  }
  const std::string shim_binary = options_.shim_binary;
  char* const argv[] = {const_cast<char*>("xl-rank-shim"),
                        const_cast<char*>(dir.c_str()), nullptr};
  char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    // Async-signal-safe only: the agent is multithreaded.
    if (lock == 3 ? fcntl(3, F_SETFD, 0) != 0 : dup2(lock, 3) < 0) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(shim_binary.c_str(), argv, envp);
    _exit(127);
  }
  const int fork_errno = errno;
  CloseFd(lock);
  if (pid < 0) {
    errno = fork_errno;
    return node_fault("cannot start xl-rank-shim (fork)");
  }
  auto process = std::make_unique<Process>();
  process->key = RankKey(job_id, request.attempt(), launch.rank());
  process->dir = dir;
  process->shim_pid = pid;
  process->grace = RankGrace(request, options_.default_grace);
  shims_[pid] = process.get();
  Process& raw = *process;
  processes_[process->key] = std::move(process);
  WatchRank(raw);

  // Starting until the shim says it runs: the scheduler keeps holding its
  // resources meanwhile.
  v1::RankStatus status;
  status.set_job_id(job_id);
  status.set_attempt(request.attempt());
  status.set_rank(launch.rank());
  status.set_state(v1::RANK_RUNNING);
  status.set_message("starting");
  SetStatus(status, /*notify=*/false);
}

absl::StatusOr<RankUser> Supervisor::LookUpRankUser(
    const std::string& name) const {
  return options_.run_as == RunAs::kAgent ? AgentUser() : LookUpUser(name);
}

absl::StatusOr<Supervisor::Attempt*> Supervisor::PrepareAttempt(
    const v1::StartRanks& request) {
  const AttemptKey key(request.job_id(), request.attempt());
  auto found = attempts_.find(key);
  if (found != attempts_.end()) return found->second.get();

  auto attempt = std::make_unique<Attempt>();
  absl::StatusOr<RankUser> user = LookUpRankUser(request.user());
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
  attempt->tmp_dir = AttemptTmpDir(options_.work_dir, request);
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
    absl::StatusOr<std::unique_ptr<JobCgroup>> cgroup = JobCgroup::Create(
        options_.cgroups, AttemptName(request.job_id(), request.attempt()),
        AttemptLimits(request, launch_settings_));
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
      Signal(*process, SIGKILL);
      process->sigkill_sent = true;
      process->stopping = true;
      continue;
    }
    if (!process->stopping) {
      Signal(*process, SIGTERM);
      process->stopping = true;
    }
    process->kill_deadline = std::min(process->kill_deadline, now + grace);
  }
}

void Supervisor::Signal(Process& process, int sig) {
  if (process.pid > 0) {
    if (process.leader_alive || process.group_alive) ::kill(-process.pid, sig);
    return;
  }
  // Not running yet: sent once the shim says it runs.
  if (process.pending_signal != SIGKILL) process.pending_signal = sig;
  // A shim that does not get the rank going (a hung mount) is killed at the
  // end of the grace: what it started dies with it (parent-death signal).
  // Its lock says the pid is still that shim's.
  if (sig == SIGKILL && process.shim_pid > 0 && !process.shim_gone &&
      !ShimGone(process.dir)) {
    ::kill(process.shim_pid, SIGKILL);
  }
}

void Supervisor::Reap() {
  while (true) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    auto it = shims_.find(pid);
    if (it == shims_.end()) continue;  // Not a shim of ours; reaped.
    Process* process = it->second;
    shims_.erase(it);
    process->shim_gone = true;
    process->dirty = true;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      LogLine(absl::StrCat("xl-rank-shim of job ", std::get<0>(process->key),
                           " rank ", std::get<2>(process->key), " (pid ", pid,
                           ") ended with status ", st));
    }
  }
}

void Supervisor::OnLeaderExit(Process& process, int wait_status,
                              bool lease_stop, const std::string& how,
                              bool group_alive, int64_t out_end,
                              int64_t err_end) {
  process.leader_alive = false;
  process.group_alive = group_alive;
  process.pending_exit =
      Process::PendingExit{wait_status, lease_stop,
                           how,         out_end,
                           err_end,     options_.clock->MonotonicNow()};
  if (group_alive && !process.stopping) {
    // A rank's processes live as long as the rank: stop what it left.
    ::kill(-process.pid, SIGTERM);
    process.stopping = true;
    process.kill_deadline = options_.clock->MonotonicNow() + process.grace;
  }
}

bool Supervisor::SayExit(Process& process) {
  // A session that takes output slowly (a scheduler far behind) holds an
  // exit this long at most; the scheduler then waits --log-settle for the
  // rest. A shutting-down agent says its exits at once.
  constexpr absl::Duration kExitHold = absl::Minutes(2);
  const Process::PendingExit exit = *process.pending_exit;
  // Output and metrics written before the exit go before the exit status;
  // what the rest of its group writes after it, after.
  const bool out =
      ReadOutput(process, process.out, /*all=*/true, exit.out_end);
  const bool err =
      ReadOutput(process, process.err, /*all=*/true, exit.err_end);
  ReadOutput(process, process.metrics, /*all=*/true);
  if (!out || !err) {
    const bool forced = refuse_starts_ ||
                        options_.clock->MonotonicNow() - exit.since >= kExitHold;
    if (!forced) return false;
    LogLine(absl::StrCat(
        "job ", std::get<0>(process.key), " attempt ",
        std::get<1>(process.key), " rank ", std::get<2>(process.key),
        ": saying its exit before all of its output is handed to the "
        "session (",
        refuse_starts_ ? "the agent is shutting down"
                       : "the scheduler has taken it slowly for 2m",
        "); the rest follows"));
  } else {
    for (Output* output : {&process.out, &process.err, &process.metrics}) {
      FlushPartial(process, *output);
    }
  }
  // The last point held back by metrics_interval goes before the exit
  // (after it the scheduler drops it), forced or not.
  SendHeldMetrics(process, process.metrics);
  process.pending_exit.reset();
  const int wait_status = exit.wait_status;
  const bool lease_stop = exit.lease_stop;
  const std::string& how = exit.how;
  v1::RankStatus status;
  status.set_job_id(std::get<0>(process.key));
  status.set_attempt(std::get<1>(process.key));
  status.set_rank(std::get<2>(process.key));
  status.set_state(v1::RANK_EXITED);
  status.set_pid(process.pid);
  // How far the output reached at the exit: the scheduler waits for that
  // to be stored.
  status.set_stdout_bytes(exit.out_end >= 0 ? exit.out_end
                                            : process.out.offset);
  status.set_stderr_bytes(exit.err_end >= 0 ? exit.err_end
                                            : process.err.offset);
  if (!how.empty()) {
    status.set_signal(SIGKILL);
    status.set_exit_code(128 + SIGKILL);
    status.set_node_fault(true);
    status.set_message(how);
  } else if (WIFSIGNALED(wait_status)) {
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
  if (lease_stop && process.stopped_by_agent.empty()) {
    process.stopped_by_agent =
        "its lease ran out while no xl-agent ran on the node";
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
    } else if ((status.signal() != 0 || status.exit_code() != 0) &&
               cgroup.ProcessLimitHits() > 0) {
      status.set_message(absl::StrCat(
          "the job reached its limit of ", cgroup.ProcessLimit(),
          " processes and threads on this node (pids.max) and ",
          cgroup.ProcessLimitHits(),
          " fork or thread creations failed; start fewer, or ask for a queue "
          "with a higher max_processes_per_node (",
          status.message(), ")"));
    }
  }
  // The job's outcome need not wait for the rest of the group; the
  // resources do (OnGroupGone says when).
  status.set_processes_remaining(process.group_alive);
  process.exit_status = status;
  SetStatus(status);
  return true;
}

bool Supervisor::Starved(const Process& process) {
  return process.pending_exit.has_value() || process.out.starved ||
         process.err.starved;
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
      Signal(*process, SIGKILL);
      process->sigkill_sent = true;
    }
    for (Output* output : {&process->out, &process->err, &process->metrics}) {
      // A read that stopped short holds a piece of a line, not a partial
      // line of the rank's.
      if (!output->closed && !output->starved &&
          now >= output->pending_since + options_.partial_line_delay) {
        FlushPartial(*process, *output);
      }
    }
    if (now >= process->metrics.sent_at + options_.metrics_interval) {
      SendHeldMetrics(*process, process->metrics);
    }
    // A shim gone with the group still there: polled by the kernel's word.
    if (!process->leader_alive && process->group_alive && process->shim_gone) {
      Poll(*process);
    }
  }
  for (auto it = processes_.begin(); it != processes_.end();) {
    const Process& p = *it->second;
    const bool done = p.finished || (!p.leader_alive && !p.group_alive &&
                                     p.out.closed && p.err.closed &&
                                     p.metrics.closed);
    // A shim is reaped before its process is forgotten.
    if (done && !shims_.count(p.shim_pid)) {
      if (p.watch >= 0) {
        inotify_rm_watch(inotify_, p.watch);
        watches_.erase(p.watch);
      }
      PersistAcked(*it->second);
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
  std::vector<RankKey> expired;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = statuses_.begin(); it != statuses_.end();) {
      if (it->second.end_time + options_.exited_retention <= now) {
        expired.push_back(it->first);
        it = statuses_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Its state directory goes with its status (a restarted agent reports
  // what it finds there).
  for (const auto& [job_id, attempt, rank] : expired) {
    if (processes_.count(RankKey(job_id, attempt, rank))) continue;
    std::error_code ec;
    std::filesystem::remove_all(shim::RankDir(state_dir_, job_id, attempt, rank),
                                ec);
  }
}

absl::Duration Supervisor::NextTimeout() {
  const absl::Time now = options_.clock->MonotonicNow();
  absl::Time next = now + absl::Seconds(1);
  for (const auto& [key, process] : processes_) {
    // Not looked at since it changed (or since it was made: its shim may
    // have written before the watch was in place).
    if (process->dirty) return absl::ZeroDuration();
    if (process->stopping && !process->sigkill_sent) {
      next = std::min(next, process->kill_deadline);
    }
    for (const Output* output : {&process->out, &process->err, &process->metrics}) {
      if (!output->closed && !output->pending.empty()) {
        next =
            std::min(next, output->pending_since + options_.partial_line_delay);
      }
    }
    if (!process->metrics.held.empty()) {
      next = std::min(next,
                      process->metrics.sent_at + options_.metrics_interval);
    }
    // Without a shim to say when the group is gone, poll it.
    if (!process->leader_alive && process->group_alive && process->shim_gone) {
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
  absl::Duration longest = options_.default_grace;
  for (const auto& [key, process] : processes_) {
    longest = std::max(longest, process->grace);
  }
  absl::MutexLock lock(&mu_);
  longest_grace_ = longest;
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
