// The process supervisor: runs the ranks of jobs as child processes, one
// process group per rank, and reports their status and output as events.
//
// Each rank runs under an xl-rank-shim process of its own
// (agent/shim/rank_shim.h) that owns its pipes and spools its output into the
// rank's state directory, so that ranks outlive the agent: Start() adopts the
// shims an earlier agent left (their ranks keep running, their output is
// shipped from where the scheduler acknowledged it) and Detach() leaves them
// to the next agent.
//
// Threading: one long-lived supervisor thread (started by Start()) forks the
// shims, follows their state directories (inotify), reads the spools in a
// poll() loop, reaps and fires the SIGTERM->SIGKILL timers (the agent signals
// a rank's process group itself). Nothing on that thread waits on the rank's
// filesystems: directories, PATH lookup and exec are the shim's.
// StartRanks/StopJob/StopAllRanks/StopAll/Snapshot are safe from any thread;
// they queue a command and wake the loop. The sink is called on the
// supervisor thread only, never with an internal lock held.
//
// Only one Supervisor may run in a process at a time: it reaps every child of
// the process (waitpid(-1)) and, by default, makes the process a child
// subreaper.
#ifndef XL_AGENT_SUPERVISOR_SUPERVISOR_H_
#define XL_AGENT_SUPERVISOR_SUPERVISOR_H_

#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/isolation/cgroup.h"
#include "agent/isolation/user.h"
#include "agent/supervisor/launch_spec.h"
#include "common/clock.h"
#include "xl/v1/agent.pb.h"
#include "xl/v1/job.pb.h"

namespace xl::agent {

// Receives the supervisor's events. Implemented by the session. Called on the
// supervisor thread; an implementation must return quickly (queue, not send)
// and must not call back into the Supervisor's blocking StopAll().
class RankEventSink {
 public:
  virtual ~RankEventSink() = default;
  // A rank started (RANK_RUNNING with its pid), exited (RANK_EXITED) or could
  // not be started (RANK_FAILED_TO_START with a message saying what to fix).
  // A rank whose leader exited while other processes of its group still ran
  // is reported twice: RANK_EXITED with processes_remaining at the leader's
  // exit, then the same status without it once the group is gone.
  virtual void OnRankStatus(const v1::RankStatus& status) = 0;
  // A piece of a rank's stdout or stderr; within one (rank, stream) chunks
  // arrive in order.
  virtual void OnLogChunk(v1::LogChunk chunk) = 0;
  // Training metrics a rank wrote to XL_METRICS_FD (job, attempt and rank
  // filled in).
  virtual void OnMetrics(v1::TrainMetrics metrics) { (void)metrics; }
  // Bytes of output the sink takes now without dropping any. The supervisor
  // leaves the rest in the spools (on disk) until the controller's
  // LogRoomFreed(); any thread.
  virtual size_t LogRoom() const { return SIZE_MAX; }
};

// What the session asks of the supervisor (a fake in session tests).
// Implementations are safe to call from any thread and do not block.
class RankController {
 public:
  virtual ~RankController() = default;
  virtual void StartRanks(const v1::StartRanks& request) = 0;
  virtual void StopJob(const v1::StopJob& request) = 0;
  // Stops every rank of every job as StopJob does, each with the grace of
  // its own job, and drops starts still waiting for an older attempt to end
  // (RANK_FAILED_TO_START with `reason`). Later StartRanks run as usual.
  virtual void StopAllRanks(const std::string& reason) = 0;
  // The status of every rank known: running ones, those that exited in the
  // retention window, and those of every start accepted that has not
  // produced a status yet (RANK_RUNNING, pid 0, message "starting": the
  // scheduler must keep holding their resources).
  virtual std::vector<v1::RankStatus> Snapshot() const = 0;
  // How long the loop that reaps and stops ranks has not come round
  // (Heartbeat.supervisor_stalled_ms); zero where there is no such loop.
  virtual absl::Duration Stalled() const { return absl::ZeroDuration(); }
  // The scheduler stored a rank's output up to `end_offset` (a LogAck):
  // after a restart the agent ships it from there.
  virtual void LogStored(const v1::LogChunk& chunk) { (void)chunk; }
  // The agent's lease now runs until `until` on the monotonic clock
  // (InfiniteFuture: no lease). Ranks whose agent is gone stop themselves
  // when it runs out.
  virtual void SetLease(absl::Time until) { (void)until; }
  // The sink has room for output again after LogRoom() said it had little.
  virtual void LogRoomFreed() {}
};

struct SupervisorOptions {
  // The agent's --work-dir: default working directories are
  // <work_dir>/jobs/<job_id>/<attempt>.
  std::string work_dir;
  // Where the ranks' state directories, spools and the lease file live
  // (root's only); empty: <work_dir>/state.
  std::string state_dir;
  // The xl-rank-shim binary (next to xl-agent). Required.
  std::string shim_binary;
  // RLIMIT_NOFILE's soft limit for ranks (the agent raises its own); 0: as
  // the agent's.
  uint64_t rank_open_files = 0;
  // XL_CHECKPOINT_DIR of a rank is <scratch_dir>/checkpoints/<job_id>.
  std::string scratch_dir;
  // Now() for the timestamps of output and metrics; MonotonicNow() for the
  // grace and flush timers, the deferred starts' deadline and retention, so
  // that a wall-clock step moves none of them. Timers are checked at least
  // once a second and on every event.
  Clock* clock = RealClock::Get();
  // Exited ranks stay in Snapshot() this long.
  absl::Duration exited_retention = absl::Hours(1);
  // A partial output line is sent after this long without its newline.
  absl::Duration partial_line_delay = absl::Milliseconds(100);
  // A rank's metrics points are sent at most this often: of the lines that
  // come faster, the latest is kept and sent when its time comes (or at
  // the rank's end). A rank writing points flat out costs the agent and
  // the scheduler 10 a second, not millions (security review F2).
  absl::Duration metrics_interval = absl::Milliseconds(100);
  size_t max_chunk_bytes = 64 * 1024;
  // Grace used when a StopJob or StartRanks carries none.
  absl::Duration default_grace = absl::Seconds(10);
  // The built-in worker: a command whose argv[0] is "xl-train" runs this
  // binary (found next to xl-agent). Empty: looked up in PATH like others.
  std::string train_binary;
  // Make the process a child subreaper (PR_SET_CHILD_SUBREAPER).
  bool subreaper = true;
  // Whose account ranks run as: the submitter's (StartRanks.user, looked up
  // on this node; the agent must be root) or the agent's own.
  RunAs run_as = RunAs::kSubmitter;
  // Ranks may run as uid 0 (root submitters, or --run-as agent as root).
  bool allow_root_jobs = false;
  // Where each attempt's cgroup goes (PrepareCgroups() done by the caller);
  // version kNone: the ranks run without cgroups.
  CgroupHierarchy cgroups;
  // The limits of an attempt whose StartRanks gives none (0: none): every
  // job is bounded, also one that asked for no memory.
  uint64_t default_memory_bytes = 0;
  int64_t default_max_processes = 0;
};

class Supervisor : public RankController {
 public:
  // `sink` must outlive the Supervisor.
  Supervisor(SupervisorOptions options, RankEventSink* sink);
  // SIGKILLs the process group of every rank still alive (unless Detach()ed),
  // then joins the supervisor thread.
  ~Supervisor() override;

  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Adopts the ranks whose shims an earlier agent left in the state
  // directory (their statuses are in Snapshot() when it returns) and starts
  // the supervisor thread. FAILED_PRECONDITION when another Supervisor runs
  // in this process or the shim binary or state directory is unusable;
  // INTERNAL when a pipe cannot be made.
  absl::Status Start();

  // Leaves every rank running under its shim for the next agent to adopt
  // (an agent restart or upgrade) and stops the supervisor thread; the
  // destructor then kills nothing. Ranks stop themselves when the lease
  // runs out without an agent to renew it.
  void Detach();

  // Starts every rank of `request` (asynchronously; the outcome comes as
  // events). Running ranks of older attempts of the job are SIGKILLed first,
  // and the new ones start once they are gone. A (job, attempt, rank) the
  // supervisor already knows is not started again; its status is re-sent.
  // A rank's environment, program, directories and user are what
  // BuildRankSpec (launch_spec.h) says; its TMPDIR is private to the
  // attempt and removed after it. Ranks run as options.run_as says, in the
  // attempt's cgroup when there are cgroups; the default working and
  // checkpoint directories belong to the rank's user, mode 0700. A start
  // whose spec is over shim::kMaxSpecBytes fails to start.
  void StartRanks(const v1::StartRanks& request) override;

  // Sends SIGTERM to the process group of every rank of the job whose attempt
  // is <= request.attempt, and SIGKILL when grace_period has passed (default
  // when unset). Unknown jobs are ignored.
  void StopJob(const v1::StopJob& request) override;

  // Returns at once; the exits come as events. Used when the lease runs out.
  void StopAllRanks(const std::string& reason) override;

  // The latest status of each rank (RANK_EXITED keeps processes_remaining
  // while its group lives), and RANK_RUNNING pid 0 "starting" for each rank
  // of a StartRanks accepted (queued, or deferred behind an older attempt)
  // that has no status yet.
  absl::Duration Stalled() const override;
  std::vector<v1::RankStatus> Snapshot() const override;
  void LogStored(const v1::LogChunk& chunk) override;
  void SetLease(absl::Time until) override;
  void LogRoomFreed() override;

  // Stops every rank as StopJob does (`grace` unset: each with its own job's
  // grace), refuses later StartRanks, and blocks until no process of any
  // rank remains (agent shutdown). DEADLINE_EXCEEDED when some are still
  // there 5 s after the longest grace (processes stuck in the kernel).
  absl::Status StopAll(std::optional<absl::Duration> grace = std::nullopt);

 private:
  using RankKey = std::tuple<std::string, int, int>;  // job, attempt, rank
  using AttemptKey = std::pair<std::string, int>;     // job, attempt
  struct Output;
  // A job attempt with ranks here: its user, cgroup and TMPDIR. Made at its
  // first launch; removed once no process of it is left.
  struct Attempt {
    RankUser user;
    std::unique_ptr<JobCgroup> cgroup;
    std::string tmp_dir;
    bool busy_logged = false;
  };
  struct Process;
  struct Command;
  struct StatusEntry {
    v1::RankStatus status;
    absl::Time end_time = absl::InfiniteFuture();
  };

  // Adopts what an earlier agent left in the state directory.
  void Adopt();
  // Follows a rank's shim: its status file, its spools, its death.
  void Poll(Process& process);
  // Sends `sig` to the rank's process group (once it has one).
  void Signal(Process& process, int sig);
  void WatchRank(Process& process);
  void PersistAcked(Process& process);
  void Enqueue(Command command);
  void Wake();
  void Loop();
  void HandleCommand(Command& command);
  void HandleStartRanks(const v1::StartRanks& request);
  // Starts the ranks of `request` unless an older attempt is still alive.
  bool TryStart(const v1::StartRanks& request, bool force);
  void Launch(const v1::StartRanks& request, const v1::RankLaunch& launch);
  // The attempt of `request`, made (user looked up, cgroup and TMPDIR
  // created) at its first call. The error says what to fix.
  absl::StatusOr<Attempt*> PrepareAttempt(const v1::StartRanks& request);
  // The account a rank of `name` runs as (options.run_as).
  absl::StatusOr<RankUser> LookUpRankUser(const std::string& name) const;
  // Kills what is left in the cgroups of attempts none of whose ranks has a
  // process group any more (processes that escaped with setsid()), then
  // removes their cgroups and TMPDIRs.
  void CleanUpAttempts();
  // `grace` unset: each rank's own (its StartRanks' grace_period).
  // `agent_reason`: the agent stops them on its own (lease, shutdown); their
  // exits say so (RankStatus.stopped_by_agent).
  void HandleStop(const std::string& job_id, int attempt,
                  std::optional<absl::Duration> grace, bool all,
                  const std::string* agent_reason = nullptr);
  // Fails the deferred starts of `job_id` attempts <= `attempt` (every one
  // when `all`) with `message`.
  void DropDeferred(const std::string& job_id, int attempt, bool all,
                    const std::string& message);
  // `all`: to the end of the spool (before an exit status).
  // Records in a forgotten rank's directory that the scheduler stored its
  // output of `key` (job, attempt, rank, stream) up to `end`.
  void PersistLateAck(const std::tuple<std::string, int, int, int>& key,
                      int64_t end);
  // Reads what the spool holds beyond what was read, up to `limit` (-1:
  // its end), in 64 KiB pieces: 16 at most unless `all`, and never more
  // than the sink has room for (the rest stays in the spool, on disk,
  // until it has). True when nothing more is to be read now: the limit or
  // the spool's end was reached, or the spool cannot be read (said once in
  // the rank's log).
  bool ReadOutput(Process& process, Output& output, bool all = false,
                  int64_t limit = -1);
  // The spool of `output` cannot be opened or read (`err`): said once.
  void MarkUnreadable(Process& process, Output& output, int err);
  void AppendOutput(Process& process, Output& output, const char* data,
                    size_t size);
  void EmitChunk(Process& process, Output& output, std::string data,
                 bool remember = true);
  void EmitMetrics(const Process& process, const std::string& line);
  // Sends `text` in the rank's log as a line of xl's own (no spool offset:
  // what the rank wrote is not moved).
  void EmitNote(Process& process, Output& output, const std::string& text);
  void FlushPartial(Process& process, Output& output);
  // Sends the metrics line held back by metrics_interval, if any.
  void SendHeldMetrics(Process& process, Output& output);
  void CloseOutput(Process& process, Output& output);
  void Reap();
  // The leader exited: what it left of its group is stopped, and its exit
  // waits (Process::pending_exit) for the output it wrote before it.
  // `how`: said instead of the wait status (the shim died); `out_end`,
  // `err_end`: how far the spools reached at the exit (-1: read them to
  // their end).
  void OnLeaderExit(Process& process, int wait_status, bool lease_stop,
                    const std::string& how, bool group_alive,
                    int64_t out_end, int64_t err_end);
  // Reads the pending exit's output as far as the session takes it; once
  // all of it is handed over (or the hold has lasted kExitHold, or the
  // agent is shutting down), sends the exit. False while it waits.
  bool SayExit(Process& process);
  // The last process of an exited rank's group is gone.
  void OnGroupGone(Process& process);
  // Output of the rank waits in its spools for room in the session.
  static bool Starved(const Process& process);
  void RunTimers();
  absl::Duration NextTimeout();
  // `notify`: tell the sink (false: Snapshot() only, "starting").
  void SetStatus(const v1::RankStatus& status, bool notify = true);
  // The supervisor is done with `request`: each of its ranks has a status
  // (launched, failed, or known before). Ends their "starting" placeholders.
  void Settle(const v1::StartRanks& request);
  // `node_fault`: the node's doing (directories, descriptors, cgroups,
  // processes), not the job's (its command, its working directory).
  void FailToStart(const v1::StartRanks& request, int rank,
                   const std::string& message, bool node_fault = false);
  void UpdateLiveness();
  // The loop moved on (a command handled): what Stalled() measures from.
  void MarkProgress();
  bool AnyAlive() const;

  const SupervisorOptions options_;
  RankEventSink* const sink_;

  mutable absl::Mutex mu_;
  std::deque<Command> commands_ ABSL_GUARDED_BY(mu_);
  std::map<RankKey, StatusEntry> statuses_ ABSL_GUARDED_BY(mu_);
  // Per rank, the StartRanks accepted by StartRanks() and not yet settled:
  // Snapshot() reports such a rank as starting until it has a status.
  std::map<RankKey, int> starting_ ABSL_GUARDED_BY(mu_);
  // Loop passes; each ends StopAll()'s wait, which then reads the monotonic
  // clock again (see monotonic_wait.h).
  uint64_t passes_ ABSL_GUARDED_BY(mu_) = 0;
  // LogStored() since the loop last looked: (job, attempt, rank, stream) ->
  // end offset.
  std::map<std::tuple<std::string, int, int, int>, int64_t> stored_
      ABSL_GUARDED_BY(mu_);
  absl::Time lease_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool lease_changed_ ABSL_GUARDED_BY(mu_) = false;
  // The sink has room again: the spools left waiting are read on.
  bool room_freed_ ABSL_GUARDED_BY(mu_) = false;
  // Rotates the order ranks are polled in (supervisor thread only).
  size_t poll_turn_ = 0;
  bool detach_ ABSL_GUARDED_BY(mu_) = false;
  // The longest grace of the ranks here (StopAll's wait).
  absl::Duration longest_grace_ ABSL_GUARDED_BY(mu_) = absl::Seconds(10);
  // When (monotonic) the loop last came round; InfinitePast before Start.
  absl::Time last_pass_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  // Number of StopAll commands the loop has handled.
  int stop_all_done_ ABSL_GUARDED_BY(mu_) = 0;
  int stop_all_requested_ ABSL_GUARDED_BY(mu_) = 0;
  // True when no rank process (leader or left-behind group member) and no
  // deferred start remain.
  bool idle_ ABSL_GUARDED_BY(mu_) = true;

  // Wakes the loop: commands and quit write a byte here.
  int wake_read_ = -1;
  int wake_write_ = -1;
  bool started_ = false;
  std::thread thread_;

  std::string state_dir_;
  std::string boot_id_;
  // options_ and the two above, as every launch needs them (set by Start).
  LaunchSettings launch_settings_;
  // inotify on the ranks' state directories.
  int inotify_ = -1;
  // flock'd while this supervisor runs (<state>/agent.lock).
  int agent_lock_ = -1;

  // Owned by the supervisor thread.
  std::map<RankKey, std::unique_ptr<Process>> processes_;
  // The shims this process forked (its children), by pid.
  std::map<pid_t, Process*> shims_;
  std::map<int, Process*> watches_;
  struct Deferred {
    v1::StartRanks request;
    absl::Time give_up;
  };
  std::deque<Deferred> deferred_;
  std::map<AttemptKey, std::unique_ptr<Attempt>> attempts_;
  bool refuse_starts_ = false;
  int stop_all_handled_ = 0;
};

}  // namespace xl::agent

#endif  // XL_AGENT_SUPERVISOR_SUPERVISOR_H_
