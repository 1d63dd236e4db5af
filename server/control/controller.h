// Over 600 lines: the declaration of the one class whose methods are
// spread over control/*.cc by concern (job_api, job_reads, queue_api,
// fair_share, agent_sessions, exits, pass, dry_run, ...); its durable state
// is state::Model and every change goes through Apply (effects.h).
//
// Controller: the scheduler's control loop. It owns the in-memory model
// (server/state: jobs, nodes, the resource ledger, ports), rebuilt from the
// Store at start; turns API calls and agent messages into transitions of
// that model; runs the pure scheduling core (server/scheduler) on a snapshot
// taken under the lock but computed outside it; and applies every effect
// (StartRanks, StopJob, answers, notifications) only after the write that
// records it has committed.
//
// Fences:
//   - A failed write puts the controller in degraded mode: nothing written
//     after it takes effect, writes are refused with UNAVAILABLE naming the
//     cause, and a probe write runs every second; once the disk takes writes
//     again the model is rebuilt from the store (as after a restart) and
//     every agent re-registers.
//   - Liveness, leases and time limits run on the monotonic clock.
//   - Resources stay held until the agent reports a rank's whole process
//     group gone, also across node loss, requeue and restarts (holds are
//     stored).
//   - Agents speak only for ranks their node holds; the attempt is checked
//     on every rank message.
//   - A requeued job whose node was lost waits until that node's lease and
//     the job's grace have run out, so two attempts never run at once.
//
// Threading: every public method is thread-safe. One mutex guards the model;
// the scheduling pass runs without it. No callback into a connection or a
// listener runs while it is held, except AgentConnection::Send, which never
// blocks and never calls back. The rendezvous has its own lock.
#ifndef XL_SERVER_CONTROL_CONTROLLER_H_
#define XL_SERVER_CONTROL_CONTROLLER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/control/effects.h"
#include "server/control/rendezvous.h"
#include "server/control/retention.h"
#include "server/scheduler/placement.h"
#include "server/scheduler/queue_access.h"
#include "server/state/agent_connection.h"
#include "server/state/job_table.h"
#include "server/state/submit_quota.h"
#include "server/state/ledger.h"
#include "server/state/lifecycle.h"
#include "server/state/model.h"
#include "server/state/node_table.h"
#include "server/state/ports.h"
#include "server/store/store.h"
#include "xl/v1/agent.pb.h"
#include "xl/v1/queue.pb.h"
#include "xl/v1/rendezvous.pb.h"
#include "xl/v1/scheduler.pb.h"

namespace xl::control {

using state::AgentConnection;
class SchedulerTelemetry;

struct ControllerOptions {
  // Agents send a heartbeat this often.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A node silent this long is lost and its jobs are requeued.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // The agents' lease: an agent that got no heartbeat acknowledged for this
  // long stops its ranks itself. At least heartbeat_timeout; a longer lease
  // lets ranks outlive a longer scheduler outage, and makes a lost node's
  // jobs wait that much longer before they run elsewhere.
  absl::Duration lease = absl::Seconds(10);
  // XL_SCHEDULER given to ranks.
  std::string advertise_address;
  // MASTER_PORT is taken from [base, base + count) per master address.
  int master_port_base = 29500;
  int master_port_count = 1000;
  // How often the event loop checks liveness and time limits.
  absl::Duration tick = absl::Milliseconds(50);
  // Finished jobs and their output are forgotten by this policy.
  RetentionPolicy retention;
  absl::Duration retention_interval = absl::Minutes(1);
  // What a job's stored output (logs and metrics) may weigh, so that no job
  // can fill the scheduler's disk: past it the oldest goes as new output
  // comes (its events say so once).
  int64_t max_output_bytes_per_job = int64_t{1} << 30;
  // A rank's exit is acted on once the output the agent says the rank wrote
  // before it (RankStatus.stdout_bytes, stderr_bytes) is stored, or after
  // waiting this long for it (the output was lost: an agent that dropped
  // it, a crash).
  absl::Duration log_settle = absl::Seconds(10);
  // After the scheduler starts, its nodes have this long on top of the
  // heartbeat timeout to reconnect before any is counted lost: an agent
  // retries with a backoff of up to 5 s (jittered), so a restart of the
  // scheduler alone loses no node.
  absl::Duration reconnect_grace = absl::Seconds(10);
  // When more than this part of the fleet's nodes (two at least) is silent
  // past the heartbeat timeout at once, the scheduler's own network is the
  // likelier cause: none of them is counted lost (their jobs are not
  // requeued) for up to lost_brake_max, and `xlctl nodes` says why.
  // 1: never.
  double lost_brake_fraction = 0.5;
  absl::Duration lost_brake_max = absl::Minutes(5);
  // In degraded mode, how often a probe write tries the disk.
  absl::Duration probe_interval = absl::Seconds(1);
  // When the loop itself did not run for this long (the process was
  // stopped, starved or swapped out), that silence is the scheduler's, not
  // the nodes': their heartbeat clocks move on by the gap. Tests that step
  // a fake clock without ticking turn it off (InfiniteDuration).
  absl::Duration self_pause = absl::Seconds(3);
  // Per-user limits on pending jobs and on the submit rate.
  state::SubmitLimits submit_limits;
  // How many blocked jobs get reservations (backfill); 0: none.
  int reservations = 8;
  // A node where ranks of this many different jobs failed to start for
  // reasons of the node (RankStatus.node_fault) within bad_node_window is
  // drained by itself (0: never).
  int bad_node_jobs = 3;
  absl::Duration bad_node_window = absl::Hours(1);
  // A job whose attempt failed on a node (or lost it) prefers other nodes
  // for this long.
  absl::Duration avoid_failed_node = absl::Minutes(10);
  // Blocked jobs may preempt running gangs of a lower priority: of their
  // own queue, or of any queue with preempt_across_queues.
  bool preemption = true;
  bool preempt_across_queues = false;
  // An elastic job on fewer nodes than it asked for grows (a new attempt on
  // more nodes) once its attempt has run this long, at most max_grows jobs
  // a full pass.
  absl::Duration elastic_grow_after = absl::Minutes(10);
  int max_grows = 4;
  // Every this often (in a thread of its own, started by Start), the first
  // estimate_jobs pending jobs in rank order get an estimated start (0:
  // none beyond the pass's reservations).
  absl::Duration estimate_interval = absl::Minutes(1);
  int estimate_jobs = 1000;
  // A full pass runs at least this often while jobs are pending, even when
  // nothing changed: fair share and age move, minimum runtimes run out
  // (Slurm's sched_interval).
  absl::Duration periodic_pass = absl::Seconds(30);
  // Fair share and age in a pending job's effective priority, and the
  // half-life of usage.
  scheduler::PriorityWeights priority_weights;
  // How often running jobs' GPU time is counted, and how often the counts
  // are stored (a crash loses at most this much usage).
  absl::Duration usage_interval = absl::Seconds(1);
  absl::Duration usage_store_interval = absl::Minutes(1);
  // Where submits, passes and job ends are counted for /metrics (outlives
  // the controller); nullptr: nowhere.
  SchedulerTelemetry* telemetry = nullptr;
};

// The model as /metrics shows it (CollectMetrics), read under the lock in
// one walk over jobs and nodes.
struct ModelMetrics {
  // (state, queue) -> jobs the scheduler keeps (finished ones until
  // retention forgets them).
  std::map<std::pair<std::string, std::string>, int64_t> jobs;
  // (queue, reason class) -> pending jobs. Classes: resources (no fit yet),
  // quota (a queue's quota or per-user limit), dependency (after_ok),
  // fenced (waiting out a lost node's lease), reserved (holds a
  // reservation: starts when running jobs end), preempting (waits for
  // the jobs it preempted), unplaced (no pass has looked at it yet).
  std::map<std::pair<std::string, std::string>, int64_t> pending;
  // Node state name -> nodes.
  std::map<std::string, int64_t> nodes;
  struct Gpus {
    int64_t capacity = 0;   // on nodes not lost
    int64_t allocated = 0;  // held by jobs' ranks
    int64_t free = 0;       // on READY nodes, not held
  };
  std::map<std::string, Gpus> gpus;  // by model
  // Seconds since each connected, not-lost node's last heartbeat.
  std::vector<std::pair<std::string, double>> heartbeat_age;
  // The latest metrics of each RUNNING job that reported some.
  struct Training {
    std::string job, queue, user;
    v1::TrainMetrics metrics;
  };
  std::vector<Training> training;
};

class Controller {
 public:
  Controller(store::Store* store, const Clock* clock, ControllerOptions opts);
  ~Controller();

  // Rebuilds the model from the store. Call once, before Start.
  absl::Status Recover();
  // Sets XL_SCHEDULER for ranks when no advertise address was configured.
  void SetAdvertiseAddressIfEmpty(const std::string& address);
  // Starts / stops the event loop thread (liveness, time limits, passes).
  void Start();
  void Stop();
  // Runs one round of the event loop now (for tests with a fake clock).
  void Tick();
  // Estimates when the pending jobs start (the estimator thread calls it
  // every estimate_interval; tests call it directly). The pass is computed
  // without the lock: API calls and passes go on meanwhile.
  void EstimateStarts();

  // OK, or UNAVAILABLE saying why the scheduler takes no writes now.
  absl::Status Writable();

  // --- JobService ---
  // `who` names the job's user; what they may ask of a queue depends on
  // their groups and whether they are an admin (queue_access.h).
  void Submit(const scheduler::Submitter& who, v1::SubmitJobRequest request,
              std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done);
  // Admins only (the service checks): sets the priority of a job that has
  // not ended; NOT_FOUND, FAILED_PRECONDITION for one that has ended.
  void SetPriority(const std::string& admin,
                   const v1::SetJobPriorityRequest& request,
                   std::function<void(absl::StatusOr<v1::Job>)> done);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  
  // The job, its place in the queue and what is ahead of it (O(pending)).
  absl::StatusOr<v1::ExplainJobResponse> ExplainJob(const std::string& job_id);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest& request);
  void Cancel(const std::string& user, const v1::CancelJobRequest& request,
              std::function<void(absl::StatusOr<v1::Job>)> done);
  v1::GetQueueResponse GetQueue();
  // What /metrics shows of the model (metrics.cc): O(jobs + nodes) under
  // the lock.
  ModelMetrics CollectMetrics();
  // Committed events of the job with seq > after_seq; `finished` when the
  // job has ended and every event is in `out`.
  absl::Status ReadEvents(const std::string& job_id, int64_t after_seq,
                          std::vector<v1::JobEvent>* out, bool* finished);
  // NOT_FOUND for an unknown job; `finished` when it has ended.
  absl::Status JobFinished(const std::string& job_id, bool* finished);
  // Calls `wake` (from any thread, without locks held) whenever the job has
  // new committed events or logs. Returns an id for RemoveListener.
  int64_t AddListener(const std::string& job_id, std::function<void()> wake);
  void RemoveListener(const std::string& job_id, int64_t id);
  store::Store* store() { return store_; }
  absl::StatusOr<v1::GetJobMetricsResponse> GetJobMetrics(
      const v1::GetJobMetricsRequest& request);
  // What the model needs, against the GPUs of the nodes not lost.
  absl::StatusOr<v1::Plan> PlanResources(const v1::ModelSpec& model);

  // --- QueueService (queue_api.cc) ---
  absl::StatusOr<v1::ListQueuesResponse> ListQueues();
  absl::StatusOr<v1::Queue> GetQueueSpec(const std::string& name);
  // Creates or replaces a queue as `user`; answers once stored.
  void PutQueue(const std::string& user, v1::PutQueueRequest request,
                std::function<void(absl::StatusOr<v1::Queue>)> done);
  void DeleteQueue(const std::string& user, const std::string& name,
                   std::function<void(absl::Status)> done);
  absl::StatusOr<v1::ListQueueChangesResponse> ListQueueChanges(
      const v1::ListQueueChangesRequest& request);
  v1::GetSharesResponse GetShares();
  // Applies a queues file (xl-scheduler --queues) before serving: creates
  // or updates each queue whose spec differs, recorded as by `by`.
  absl::Status ApplyQueueFile(const v1::QueueFile& file,
                              const std::string& by);

  // --- RendezvousService ---
  Rendezvous* rendezvous() { return &rendezvous_; }

  // --- NodeService ---
  absl::StatusOr<v1::ListNodesResponse> ListNodes(
      const v1::ListNodesRequest& request);
  absl::StatusOr<v1::Node> GetNode(const std::string& name);
  void SetDrained(const std::string& name, bool drained,
                  const std::string& reason,
                  std::function<void(absl::StatusOr<v1::Node>)> done);

  // --- AgentService ---
  // Handles the first message of a session; returns the node's name.
  absl::StatusOr<std::string> AgentRegister(
      const v1::Register& reg, std::shared_ptr<AgentConnection> conn);
  void AgentMessage(const std::string& node, const AgentConnection* conn,
                    const v1::AgentMessage& msg);
  // The stream of `conn` ended. Never blocks.
  void AgentDisconnected(const std::string& node,
                         std::shared_ptr<AgentConnection> conn);

 private:
  using JobRecord = state::JobRecord;
  using NodeRecord = state::NodeRecord;

  // --- the loop (controller.cc; the pass's snapshot and decisions in
  // pass.cc) ---
  void RunLoop();
  // Everything of one tick that needs the lock; returns true and fills the
  // snapshot when a pass is due.
  bool TickLocked(scheduler::ClusterSnapshot* snapshot,
                  std::vector<scheduler::JobRequest>* queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyDecisions(scheduler::Decisions decisions, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // False when there is nothing to decide (no job to place, no elastic
  // job to grow).
  bool BuildSnapshot(scheduler::ClusterSnapshot* snapshot,
                     std::vector<scheduler::JobRequest>* queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pending jobs a full pass sees (not fenced, not waiting for their
  // after_ok), as it sees them; and the cluster with its preemptors' holds.
  void FullPassQueue(const scheduler::FairShare& fs,
                     std::vector<scheduler::JobRequest>* queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FullPassSnapshot(const scheduler::FairShare& fs,
                        const std::vector<scheduler::JobRequest>& queue,
                        scheduler::ClusterSnapshot* snapshot,
                        bool shares = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a running elastic job has fewer nodes than it asked for (full
  // passes then run periodically even with nothing pending, to grow it).
  bool AnyElasticShort() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cluster side of a snapshot: nodes, running gangs, usage, policies
  // and options (no queue, no holds). Changes nothing. The gangs' shares
  // (what reservations replay) are filled when a policy reads them, or with
  // `shares`.
  void SnapshotCluster(const scheduler::FairShare& fs,
                       scheduler::ClusterSnapshot* snapshot,
                       bool shares = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckLiveness() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckTimeLimits() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProcessDisconnects() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunRetention() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds the model from `state`; agents' connections are kept in
  // `conns` (the caller closes them when this is a reload).
  void LoadModel(store::StoredState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- commits and degraded mode (controller.cc) ---
  // The one door for state changes (effects.h): queues the effects'
  // changes; once they commit, runs `then` and sends `sends` (lock not
  // held) unless a write failed in between (the model is then rebuilt from
  // the store, which has these changes in it). A failure enters degraded
  // mode. `answer` runs in every case: OK once committed, else the error.
  // The only caller of store_->Write.
  void Apply(Effects effects) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Effects that store the job's working state and `events` (the caller
  // adds more changes), then mark them committed and notify the job's
  // watchers before the caller's `then`.
  Effects JobEffects(JobRecord* rec, std::vector<v1::JobEvent> events,
                     std::function<void()> then = nullptr,
                     std::function<void(absl::Status)> answer = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnterDegraded(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  void Probe() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reload() ABSL_LOCKS_EXCLUDED(mu_);
  void NotifyListeners(const std::string& job_id)
      ABSL_LOCKS_EXCLUDED(listeners_mu_);
  void NotifyAllListeners() ABSL_LOCKS_EXCLUDED(listeners_mu_);

  // --- job transitions (attempts.cc) ---
  // A job's life is state/lifecycle.h: functions of the model that say
  // what to record and whom to tell. These run them and record the result.
  // Records the transition in the model; the caller commits it.
  absl::StatusOr<v1::JobEvent> Transition(JobRecord* rec, v1::JobState to,
                                          const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a lifecycle step through Apply: the job's row and events, the
  // step's other changes, its stops; `then` and `answer` as for
  // JobEffects. A refused step is logged and `answer` told; its status is
  // returned.
  absl::Status Recorded(JobRecord* rec, absl::StatusOr<state::Step>* step,
                        std::function<void()> then = nullptr,
                        std::function<void(absl::Status)> answer = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ObserveEvents(const std::vector<v1::JobEvent>& events);
  state::Now Now() const {
    return state::Now{clock_->Now(), clock_->MonotonicNow()};
  }
  void StartJob(JobRecord* rec, scheduler::Placement placement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the attempt: requeue (spending a retry when `spend_retry`) while
  // retries allow, else FAILED; `fence` delays the next start.
  // `preempted`: the attempt ends PREEMPTED (an event of its own) before
  // the job goes back to PENDING.
  void FailAttempt(JobRecord* rec, const std::string& why, bool spend_retry,
                   absl::Duration fence = absl::ZeroDuration(),
                   bool preempted = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the job in a final state, stopping its ranks after the commit;
  // `answer` as for Apply.
  void EndJob(JobRecord* rec, v1::JobState to, const std::string& reason,
              std::function<void(absl::Status)> answer = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long a job whose node was lost waits before it runs elsewhere: the
  // rest of the lost node's lease, the job's grace, and a heartbeat.
  absl::Duration LostNodeFence(const JobRecord& rec) const;
  // The time its ranks get between SIGTERM and SIGKILL (10 s when unset).
  static absl::Duration GraceOf(const JobRecord& rec);
  // Sends once every write queued so far has committed (a stop must not
  // act on a change that may still fail to be recorded).
  void SendAfterCommits(Sends sends) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);


  // --- agents (agent_sessions.cc, ingest.cc) ---
  // `settled`: the exit already waited for its output (SettleExits).
  void HandleRankStatus(NodeRecord* node, const v1::RankStatus& st,
                        bool settled = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acts on the job's parked exits in arrival order while the first one's
  // output is stored, its wait is over, its attempt is no longer current,
  // an exit of `lost_node` is still parked (its output never comes), or
  // `now` (the job is about to be decided otherwise: its time limit): what
  // the ranks did counts first. An exit acted on without its output is
  // logged.
  void SettleExits(int64_t job_id, bool now = false,
                   const std::string& lost_node = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SettleExits for every job with an exit parked from `node`, lost.
  void SettleExitsOfLostNode(const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parked exits past their wait are acted on (Tick).
  void CheckParkedExits() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the job's stored output weighs against its budget: logs, metrics
  // and events, less trims on their way.
  int64_t OutputBytes(const JobRecord& rec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes of the job's oldest output to delete with a write of `adding`
  // more (0 within its budget); the first time, an event says so.
  int64_t TrimFor(JobRecord* rec, int64_t adding)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A trim of `asked` bytes committed, freeing `trimmed`.
  void Trimmed(int64_t id, int64_t asked, const store::Tx::Trimmed& trimmed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores the job's latest metrics point not stored yet.
  void StoreMetrics(JobRecord* rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StoreMetrics for jobs whose second is up (Tick).
  void StoreDueMetrics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank of `rec` failed on `node`: the next attempt avoids the node for
  // a while; a failure to start the agent puts down to the node counts
  // against it, and the node is drained once enough different jobs failed
  // so there.
  void NoteRankFailure(NodeRecord* node, JobRecord* rec, bool node_fault)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's next attempt prefers other nodes than `node` for a while.
  void AvoidNode(JobRecord* rec, const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank's processes are gone: give back what it held (and store it).
  void ReleaseRank(NodeRecord* node, int64_t job_id, int32_t attempt,
                   int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NodeLost(NodeRecord* node, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reconciles what the agent reports running with what its node holds.
  void Reconcile(NodeRecord* node, const v1::Register& reg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleLog(NodeRecord* node, const v1::AgentMessage& msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleMetrics(NodeRecord* node, const v1::TrainMetrics& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the node's row; `answer` as for Apply.
  void PersistNode(const NodeRecord& node,
                   std::function<void(absl::Status)> answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Node NodeToProto(const NodeRecord& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A dry run of a submit: the pass as it would be with the job in the
  // queue; stores nothing.
  void DryRunJob(const scheduler::Submitter& who, v1::JobSpec spec,
                 std::function<void(absl::StatusOr<v1::SubmitJobResponse>)>
                     done) ABSL_LOCKS_EXCLUDED(mu_);
  // Sizes a job from its model (or an xl-train job from its MLP): fills the
  // resources left at 0 and records the plan; INVALID_ARGUMENT with the
  // numbers when it fits on no GPU of the fleet.
  absl::Status SizeFromModel(v1::JobSpec* spec, v1::Plan* plan)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The job as readers see it: committed, with the live reason and metrics.
  // The job named by an API call: INVALID_ARGUMENT when the id is empty,
  // NOT_FOUND when there is no such job.
  absl::StatusOr<const JobRecord*> FindJob(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records that `rec` waits for the jobs in its after_ok (reverse index).
  void NoteDependencies(const JobRecord& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `rec` ended: its dependents that still wait are failed now (a failure
  // goes down the chain at once, not one pass per link) or, if it
  // SUCCEEDED, looked at by the next pass.
  void WakeDependents(const JobRecord& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // INVALID_ARGUMENT naming after_ok[i] when a job it waits for does not
  // exist or can never succeed.
  absl::Status CheckDependencies(const v1::JobSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a job with after_ok cannot start yet ("waits for job 12 (RUNNING)
  // to succeed"), or "" when every job it waits for succeeded; "" too when
  // one never will, with *failed (if given) saying so.
  std::string DependencyWait(const JobRecord& rec, std::string* failed) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Job Visible(const JobRecord& rec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- queues and fair share (queue_api.cc) ---
  // The spec of a queue jobs may name: a defined one, or the implicit
  // "default"; nullptr when there is no such queue.
  const v1::QueueSpec* QueueSpecOf(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At submit: the queue exists and admits `who` at the job's priority
  // (queue_access.h), the time limit is within its limits (a missing time
  // limit gets the queue's default), the user has room for another pending
  // job there.
  absl::Status ApplyQueueToSpec(const scheduler::Submitter& who,
                                v1::JobSpec* spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts running jobs' GPU time since the last call into usage, and
  // stores usage when due.
  void AccrueUsage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StoreUsage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fair-share inputs as of now (weights, decayed usage, active users).
  struct ShareInputs {
    std::map<std::string, double> weights;
    std::map<std::string, double> queue_usage;
    std::map<std::pair<std::string, std::string>, double> user_usage;
    std::map<std::string, int64_t> active_users;
    std::map<std::string, int64_t> running_gpus;  // queue
    std::map<std::pair<std::string, std::string>, int64_t> user_running_gpus;
    std::map<std::pair<std::string, std::string>, int64_t> user_pending;
  };
  ShareInputs CollectShares() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CollectShares() at most usage_interval old (a pass over new jobs every
  // few milliseconds does not walk every job again).
  const ShareInputs& Shares() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's effective priority from its fair-share factor, and its age
  // factor: pending since it last became PENDING (a requeue starts over).
  // Whether the job has waited out its max_switches_wait: it is then
  // placed by its request without the limit (JobRecord::relaxed).
  bool SwitchLimitRelaxed(const JobRecord& rec, absl::Time wall_now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job as a pass sees it: its effective priority, whether it may
  // preempt, the request it is placed by and the one it prefers.
  scheduler::JobRequest QueueEntry(const JobRecord& rec,
                                   double fair_share_factor,
                                   absl::Time wall_now,
                                   absl::Time mono_now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When it last became PENDING (its submit, or its last requeue).
  absl::Time PendingSince(const JobRecord& rec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double EffectiveOf(const JobRecord& rec, double fair_share_factor,
                     absl::Time wall_now, double* age_factor = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the queue change; the model takes it once it is on disk.
  void ChangeQueue(const std::string& by, const std::string& action,
                   v1::Queue queue, std::function<void(absl::Status)> answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // While a change to queue `name` is being written: keeps `retry` to run
  // after it (OK), or refuses when too many wait already.
  absl::Status WaitForQueueWrite(const std::string& name,
                                 std::function<void()> retry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kMaxQueueChangesWaiting = 64;
  // Queues being created (written, not yet in the model).
  size_t CreatesInFlight() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetPolicy(const v1::QueueSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  store::Store* const store_;
  const Clock* const clock_;
  ControllerOptions opts_;  // advertise_address is set before Start
  Rendezvous rendezvous_;

  absl::Mutex mu_;
  // Everything the store persists, in memory (state/model.h).
  state::Model model_ ABSL_GUARDED_BY(mu_);
  // Submits whose write has not committed yet.
  std::set<int64_t> uncommitted_ ABSL_GUARDED_BY(mu_);
  // Jobs with exits waiting for their output (JobRecord::parked_exits).
  std::set<int64_t> parked_jobs_ ABSL_GUARDED_BY(mu_);
  // Since when (monotonic) too much of the fleet is silent to count any
  // node lost (InfinitePast: it is not), and what `xlctl nodes` says.
  absl::Time brake_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string brake_reason_ ABSL_GUARDED_BY(mu_);
  // Per-user submit limits, and each user's accepted submits not yet
  // committed (they count as pending).
  state::SubmitQuota quota_ ABSL_GUARDED_BY(mu_);
  // Jobs with a metrics point waiting for its second (StoreDueMetrics).
  std::set<int64_t> metrics_due_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> submitting_ ABSL_GUARDED_BY(mu_);
  // ... and their specs' bytes.
  std::map<std::string, int64_t> submitting_bytes_ ABSL_GUARDED_BY(mu_);
  int64_t SubmittingOf(const std::string& user) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t SubmittingBytesOf(const std::string& user) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DoneSubmitting(const std::string& user, const std::string& queue,
                      int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // (queue, user) -> accepted submits not yet committed.
  std::map<std::pair<std::string, std::string>, int64_t> submitting_queue_
      ABSL_GUARDED_BY(mu_);
  // Jobs submitted since the last pass (a pass over only these suffices
  // when no capacity was freed).
  std::vector<int64_t> new_pending_ ABSL_GUARDED_BY(mu_);
  bool capacity_freed_ ABSL_GUARDED_BY(mu_) = true;
  // The pass being computed covers every pending job (not only new ones).
  bool full_pass_ ABSL_GUARDED_BY(mu_) = false;
  // A full pass runs no sooner than this: at least twice its last duration
  // apart, so passes take at most half of a core however long the queue.
  absl::Time next_full_pass_mono_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Why the jobs of each class wait, from the last pass that saw them.
  std::map<const v1::ResourceRequest*,
           std::pair<std::shared_ptr<const v1::ResourceRequest>,
                     std::shared_ptr<const std::string>>>
      class_reasons_ ABSL_GUARDED_BY(mu_);
  // The reservations of pending jobs, from the last full pass (and passes
  // over new jobs since): held in the next passes, shown by GetJob.
  struct Reserved {
    scheduler::Reservation reservation;
    std::shared_ptr<const std::string> reason;
  };
  std::map<std::string, Reserved> reservations_ ABSL_GUARDED_BY(mu_);
  // Why jobs wait whose reason is their own rather than their class's (a
  // queue's quota or per-user limit), from the last full pass and passes
  // over new jobs since.
  std::map<std::string, std::shared_ptr<const std::string>> job_reasons_
      ABSL_GUARDED_BY(mu_);
  // Jobs that preempted others -> until when (monotonic) they wait for the
  // victims to stop rather than preempt more.
  std::map<int64_t, absl::Time> preempting_ ABSL_GUARDED_BY(mu_);
  // Their claims on the nodes the victims free, held in every pass (full
  // ones too) until they start or the wait above ends.
  std::map<int64_t, Reserved> preempt_holds_ ABSL_GUARDED_BY(mu_);
  // Estimated starts of pending jobs (wall clock), from the last
  // EstimateStarts.
  std::map<int64_t, absl::Time> estimates_ ABSL_GUARDED_BY(mu_);
  // A dry run's pass is being computed (one at a time).
  bool dry_run_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // Numbers drains and resumes (NodeRecord::drain_writing).
  uint64_t drain_writes_ ABSL_GUARDED_BY(mu_) = 0;
  // Decisions::fragmented_gpus of the last full pass (0 when none waited).
  int64_t fragmented_gpus_ ABSL_GUARDED_BY(mu_) = 0;
  // Job id -> the ids of jobs whose after_ok names it; pruned by retention
  // once none of them can look at it again, and when it fails.
  std::map<int64_t, std::vector<int64_t>> dependents_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> wake_work_ ABSL_GUARDED_BY(mu_);
  bool waking_ ABSL_GUARDED_BY(mu_) = false;
  // Queues with a change being written, with the spec it writes (none: a
  // delete): admission (QueueSpecOf) takes that latest word at once, readers
  // see the change once it is on disk. And the changes waiting for it.
  std::map<std::string, std::optional<v1::QueueSpec>> queue_writing_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::function<void()>>> queue_waiting_
      ABSL_GUARDED_BY(mu_);
  // The policies the core checks (of queues with quotas or per-user
  // limits), derived from model_.queues.
  std::map<std::string, scheduler::QueuePolicy> policies_ ABSL_GUARDED_BY(mu_);
  absl::Time last_accrual_mono_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  ShareInputs shares_cache_ ABSL_GUARDED_BY(mu_);
  absl::Time shares_cache_mono_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time next_usage_store_mono_ ABSL_GUARDED_BY(mu_) =
      absl::InfinitePast();
  bool pass_needed_ ABSL_GUARDED_BY(mu_) = true;
  // The earliest time a fenced pending job may start, or a short elastic
  // job may grow: a full pass then.
  absl::Time next_eligible_mono_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time next_retention_mono_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time next_periodic_pass_mono_ ABSL_GUARDED_BY(mu_) =
      absl::InfinitePast();
  absl::Time last_tick_mono_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;

  // Bumped by every failed write and every reload: effects of writes queued
  // under an older generation do not run.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool degraded_ ABSL_GUARDED_BY(mu_) = false;
  std::string degraded_reason_ ABSL_GUARDED_BY(mu_);
  absl::Time next_probe_mono_ ABSL_GUARDED_BY(mu_);
  bool probe_in_flight_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex disconnect_mu_;
  std::vector<std::pair<std::string, std::shared_ptr<AgentConnection>>>
      disconnects_ ABSL_GUARDED_BY(disconnect_mu_);

  absl::Mutex listeners_mu_;
  int64_t next_listener_ ABSL_GUARDED_BY(listeners_mu_) = 1;
  std::map<std::string, std::map<int64_t, std::function<void()>>> listeners_
      ABSL_GUARDED_BY(listeners_mu_);

  std::thread loop_;
  // Runs EstimateStarts every estimate_interval, off the loop.
  std::thread estimator_;
  // Wakes the loop every tick with a relative sleep: Abseil's timed waits
  // end at a wall-clock deadline, which a backward step would push out.
  std::thread ticker_;
};

}  // namespace xl::control

#endif  // XL_SERVER_CONTROL_CONTROLLER_H_
