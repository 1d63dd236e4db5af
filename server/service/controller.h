// Controller: the scheduler's state machine. It owns the in-memory view of
// jobs and nodes (rebuilt from the Store at start), turns API calls and agent
// messages into durable transitions, runs the pure scheduling core
// (server/scheduler) on a snapshot, and pushes decisions to agents only
// after they are committed.
//
// Threading: every public method is thread-safe; one mutex guards the state.
// No callback into a connection or a listener runs while it is held, except
// AgentConnection::Send, which never blocks and never calls back.
#ifndef XL_SERVER_SERVICE_CONTROLLER_H_
#define XL_SERVER_SERVICE_CONTROLLER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/scheduler/placement.h"
#include "server/store/sqlite_store.h"
#include "xl/v1/agent.pb.h"
#include "xl/v1/rendezvous.pb.h"
#include "xl/v1/scheduler.pb.h"

namespace xl::service {

// The scheduler's side of one agent's stream. Implemented by the gRPC
// reactor; kept alive by shared_ptr so the controller may hold it past the
// stream's end (sends are then dropped).
class AgentConnection {
 public:
  virtual ~AgentConnection() = default;
  // Queues `msg`; never blocks.
  virtual void Send(const v1::SchedulerMessage& msg) = 0;
  // Ends the stream (the agent will reconnect).
  virtual void Close(const std::string& why) = 0;
  // The peer's IP address, for MASTER_ADDR when the agent gives none.
  virtual std::string PeerAddress() const = 0;
};

struct ControllerOptions {
  // Agents send a heartbeat this often.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A node silent this long is lost and its jobs are requeued.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // XL_SCHEDULER given to ranks.
  std::string advertise_address;
  // MASTER_PORT is taken from [base, base + count) per master address.
  int master_port_base = 29500;
  int master_port_count = 1000;
  // How often the event loop checks liveness and time limits.
  absl::Duration tick = absl::Milliseconds(50);
};

class Controller {
 public:
  using Done = std::function<void(absl::Status)>;

  Controller(store::Store* store, const Clock* clock, ControllerOptions opts);
  ~Controller();

  // Rebuilds the state from the store. Call once, before Start.
  absl::Status Recover();
  // Sets XL_SCHEDULER for ranks when no advertise address was configured.
  void SetAdvertiseAddressIfEmpty(const std::string& address);
  // Starts / stops the event loop thread (liveness, time limits, passes).
  void Start();
  void Stop();
  // Runs one round of the event loop now (for tests with a fake clock).
  void Tick();

  // --- JobService ---
  void Submit(const std::string& user, v1::SubmitJobRequest request,
              std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest& request);
  void Cancel(const std::string& user, const v1::CancelJobRequest& request,
              std::function<void(absl::StatusOr<v1::Job>)> done);
  v1::GetQueueResponse GetQueue();
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
      const std::string& job_id);

  // What the model needs, against the GPUs of the nodes not lost.
  absl::StatusOr<v1::Plan> PlanResources(const v1::ModelSpec& model);

  // --- RendezvousService ---
  // Both check that the scope names the running attempt of a job and carries
  // its token (PERMISSION_DENIED otherwise).
  absl::Status RendezvousPut(const v1::RendezvousPutRequest& request);
  // `done` runs once every key is set, or with DEADLINE_EXCEEDED naming the
  // missing keys, or ABORTED when the attempt ends first.
  void RendezvousGet(
      const v1::RendezvousGetRequest& request,
      std::function<void(absl::StatusOr<std::vector<std::string>>)> done);

  // --- NodeService ---
  v1::ListNodesResponse ListNodes();
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
  struct JobRecord {
    v1::Job job;
    int64_t seq = 0;
    std::vector<v1::JobEvent> events;
    int64_t committed_event_seq = 0;
    // Ranks of the current attempt: rank -> last status.
    std::map<int, v1::RankStatus> ranks;
    // The current attempt is being stopped; its rank exits change nothing.
    bool stopping = false;
    // XL_RENDEZVOUS_TOKEN of the current attempt, and its key-value store.
    std::string token;
    std::map<std::string, std::string> rendezvous;
    absl::Time metrics_stored = absl::InfinitePast();
  };
  struct RendezvousWaiter {
    int64_t job = 0;
    int attempt = 0;
    std::vector<std::string> keys;
    absl::Time deadline;
    std::function<void(absl::StatusOr<std::vector<std::string>>)> done;
  };
  // Resources an attempt of a job holds on a node until its ranks there
  // have exited (or the node is lost).
  struct Hold {
    std::string job_id;
    int attempt = 0;
    scheduler::NodeShare share;
    std::set<int> live_ranks;
  };
  struct NodeRecord {
    std::string name;
    v1::NodeInventory inventory;
    std::string address;
    bool drained = false;
    std::string drain_reason;
    bool lost = false;
    std::string lost_reason;
    std::shared_ptr<AgentConnection> conn;
    absl::Time last_heartbeat;
    absl::Time register_time;
    std::string agent_version;
    std::vector<Hold> holds;
  };
  // Work to do once the lock is released.
  struct After {
    std::vector<std::function<void()>> calls;
  };

  void RunLoop();
  void TickLocked(After* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunAfter(After* after);
  void SchedulePass(After* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJob(JobRecord* rec, const scheduler::Placement& placement,
                After* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a transition durably; `then` runs after the commit, with the
  // lock not held.
  void Transition(JobRecord* rec, v1::JobState to, const std::string& reason,
                  std::function<void()> then = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the node's row; `done` runs after the commit, lock not held.
  void PersistNode(const NodeRecord& node, store::Store::DoneFn done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends StopJob for the current attempt to every node of the job.
  void StopGang(JobRecord* rec, After* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The attempt failed: requeue within max_retries, else FAILED.
  void FailAttempt(JobRecord* rec, const std::string& why, After* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleRankStatus(NodeRecord* node, const v1::RankStatus& st,
                        After* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseRank(NodeRecord* node, const std::string& job_id, int attempt,
                   int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NodeLost(NodeRecord* node, const std::string& why, After* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyListeners(const std::string& job_id)
      ABSL_LOCKS_EXCLUDED(listeners_mu_);
  int AllocatePort(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Node NodeToProto(const NodeRecord& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<scheduler::NodeCapacity> Capacities() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobRecord* FindJob(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProcessDisconnects(After* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The running attempt a rendezvous scope names, or PERMISSION_DENIED.
  absl::StatusOr<JobRecord*> RendezvousScopeJob(const v1::RendezvousScope& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes waiters whose keys are all set, expired or orphaned.
  void ServeWaiters(After* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleMetrics(const v1::TrainMetrics& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sizes a job from its model (or an xl-train job from its MLP): fills the
  // resources left at 0 and records the plan; INVALID_ARGUMENT with the
  // numbers when it fits on no GPU of the fleet.
  absl::Status SizeFromModel(v1::JobSpec* spec, v1::Plan* plan)
      ABSL_LOCKS_EXCLUDED(mu_);

  store::Store* const store_;
  const Clock* const clock_;
  ControllerOptions opts_;  // advertise_address is set before Start

  absl::Mutex mu_;
  std::map<int64_t, JobRecord> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t next_job_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Idempotency key -> job id (including submits not yet committed).
  std::map<std::string, int64_t> keys_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> uncommitted_ ABSL_GUARDED_BY(mu_);
  // PENDING jobs, in policy order: (-priority, id).
  std::set<std::pair<int, int64_t>> pending_ ABSL_GUARDED_BY(mu_);
  // Jobs submitted since the last pass (a pass over only these suffices
  // when no capacity was freed).
  std::vector<int64_t> new_pending_ ABSL_GUARDED_BY(mu_);
  // SCHEDULED and RUNNING jobs (for time limits).
  std::set<int64_t> active_ ABSL_GUARDED_BY(mu_);
  bool capacity_freed_ ABSL_GUARDED_BY(mu_) = true;
  bool pass_needed_ ABSL_GUARDED_BY(mu_) = true;
  std::map<std::string, NodeRecord> nodes_ ABSL_GUARDED_BY(mu_);
  // Master address -> ports in use; and the next port to try.
  std::map<std::string, std::set<int>> ports_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> port_cursor_ ABSL_GUARDED_BY(mu_);
  std::vector<RendezvousWaiter> waiters_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex disconnect_mu_;
  std::vector<std::pair<std::string, std::shared_ptr<AgentConnection>>>
      disconnects_
      ABSL_GUARDED_BY(disconnect_mu_);

  absl::Mutex listeners_mu_;
  int64_t next_listener_ ABSL_GUARDED_BY(listeners_mu_) = 1;
  std::map<std::string, std::map<int64_t, std::function<void()>>> listeners_
      ABSL_GUARDED_BY(listeners_mu_);

  std::thread loop_;
};

}  // namespace xl::service

#endif  // XL_SERVER_SERVICE_CONTROLLER_H_
