// A simulated fleet of xl agents inside one process, for benchmarks: N
// AgentService/Connect streams over a few channels, driven by gRPC's callback
// API and a few timer threads (no thread per agent). Each simulated agent
// registers, heartbeats, and answers StartRanks and StopJob with the rank
// statuses a real agent would send, without running anything. Also the
// xl-scheduler child process the benchmarks run it against.
// Threading: every public method is thread-safe unless its comment says not.
#ifndef XL_TESTS_BENCH_FLEET_SIM_LIB_H_
#define XL_TESTS_BENCH_FLEET_SIM_LIB_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl::bench {

// Benchmarks measure real elapsed time, so they read the monotonic clock
// directly instead of taking an injected xl::Clock.
using SteadyClock = std::chrono::steady_clock;

double Ms(SteadyClock::duration d);

// Latency samples in milliseconds.
class LatencySamples {
 public:
  void Add(double ms) ABSL_LOCKS_EXCLUDED(mu_);
  size_t count() const ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the q-quantile (q in [0, 1]), or -1 when there are no samples.
  double Quantile(double q) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::vector<double> ms_ ABSL_GUARDED_BY(mu_);
};

// Job environment through which a submitter tells the simulated agents how
// the job behaves: how long its ranks run, and the exit code they end with.
inline constexpr char kRuntimeEnv[] = "FLEET_SIM_RUNTIME_MS";
inline constexpr char kExitCodeEnv[] = "FLEET_SIM_EXIT_CODE";

struct FleetOptions {
  // The scheduler, host:port.
  std::string target;
  int nodes = 1000;
  // Channels (HTTP/2 connections) the streams share, round robin.
  int channels = 32;
  int gpus_per_node = 8;
  uint64_t gpu_memory_bytes = 80ull << 30;
  // Labels: switch = node / nodes_per_switch, rack = switch /
  // switches_per_rack.
  int nodes_per_switch = 32;
  int switches_per_rack = 4;
  std::string name_prefix = "sim-";
  int timer_threads = 2;
  // Runtime of ranks whose StartRanks carries no FLEET_SIM_RUNTIME_MS.
  std::chrono::milliseconds default_runtime{10000};
  uint64_t seed = 1;
};

// Told of what the agents see. Called from gRPC and timer threads with one
// agent's lock held: implementations are thread-safe and quick, and never
// call into the fleet.
class FleetObserver {
 public:
  virtual ~FleetObserver() = default;
  // StartRanks of `job_id`/`attempt` reached node `node` (its index), for
  // `gpus` GPUs.
  virtual void OnStartRanks(const std::string& job_id, int attempt, int node,
                            int gpus, SteadyClock::time_point at) = 0;
  // The node's ranks of the attempt ended: exited on their own, or stopped
  // (StopJob, or the lease ran out).
  virtual void OnRanksEnded(const std::string& job_id, int attempt, int node,
                            int gpus, bool stopped,
                            SteadyClock::time_point at) = 0;
  // Whether jobs wait for GPUs now. GPUs freed while none wait start no
  // free_to_start clock (an idle fleet is not the scheduler being slow).
  virtual bool JobsWaiting() const { return true; }
};

struct FleetCounters {
  // Nodes that got a RegisterAck at least once.
  int64_t nodes_registered = 0;
  // RegisterAcks in all (more than nodes_registered after reconnects).
  int64_t register_acks = 0;
  // Streams the scheduler ended (not this process), after a RegisterAck,
  // and how many distinct nodes that happened to.
  int64_t sessions_closed_by_scheduler = 0;
  int64_t nodes_closed_by_scheduler = 0;
  // Streams that ended before their RegisterAck (refused, unreachable).
  int64_t sessions_failed_before_ack = 0;
  int64_t start_ranks = 0;
  int64_t stop_jobs = 0;
  int64_t rank_statuses_sent = 0;
  int64_t heartbeats_sent = 0;
  int64_t heartbeat_acks = 0;
  int64_t log_acks = 0;
  // Times an agent stopped its ranks because no HeartbeatAck renewed the
  // lease in time.
  int64_t lease_expiries = 0;
  int64_t other_messages = 0;
  // Right now: node shares running, and the GPUs they hold.
  int64_t running_shares = 0;
  int64_t gpus_busy = 0;
};

// N simulated agents: name_prefix + 5-digit index, `gpus_per_node` GPUs of
// `gpu_memory_bytes`, one 400 Gbit/s InfiniBand NIC, rack/switch labels and a
// distinct 10.x.y.z address each. They register with shared_env and
// honours_lease set, heartbeat every RegisterAck.heartbeat_interval (seq
// increasing), answer StartRanks with RANK_RUNNING for each rank and later
// RANK_EXITED (FLEET_SIM_EXIT_CODE, default 0, after FLEET_SIM_RUNTIME_MS), and
// StopJob with RANK_EXITED by signal 15. A stream the scheduler ends is
// opened again after a backoff (200 ms doubling to 5 s), registering the
// ranks still running and the exits not yet reported.
class SimulatedFleet {
 public:
  // `observer` (may be null) outlives the fleet.
  SimulatedFleet(FleetOptions options, FleetObserver* observer);
  // Stops the fleet.
  ~SimulatedFleet();
  SimulatedFleet(const SimulatedFleet&) = delete;
  SimulatedFleet& operator=(const SimulatedFleet&) = delete;

  // Opens every agent's stream and returns; registration goes on
  // asynchronously. Call once.
  void Start();
  // Waits until every agent got a RegisterAck; false after `timeout`.
  bool WaitRegistered(SteadyClock::duration timeout);
  // Ends every stream (cancelled by this side, so not counted as a loss) and
  // waits up to 20 s for them to finish. Idempotent.
  void Stop();

  // Starts counting busy GPU-seconds from `from` (call once).
  void StartBusyWindow(SteadyClock::time_point from);
  // GPU-seconds the agents' ranks held GPUs between StartBusyWindow's time
  // and now.
  double BusyGpuSeconds() const;

  FleetCounters Counters() const;
  // Heartbeat -> HeartbeatAck with the same seq.
  const LatencySamples& heartbeat_rtt() const;
  // Register -> RegisterAck.
  const LatencySamples& register_rtt() const;
  // A node's ranks ended (GPUs freed) while jobs waited -> its next
  // StartRanks: how quickly the scheduler reuses capacity.
  const LatencySamples& free_to_start() const;

  const std::string& target() const;
  std::string NodeName(int index) const;
  int nodes() const;
  int total_gpus() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// An xl-scheduler child process in its own process group. It dies with this
// process (PR_SET_PDEATHSIG), with InstallSchedulerReaper's handlers (exit,
// SIGINT, SIGTERM, SIGHUP), or by Stop() or the destructor, whichever comes
// first. Not thread-safe.
class SchedulerProcess {
 public:
  // Starts `binary --listen 127.0.0.1:0 --port-file DIR/port --db DIR/xl.db`
  // plus `extra_args`, output to DIR/scheduler.log, and waits up to 30 s for
  // the port. FAILED_PRECONDITION with the log's tail when it exits or never
  // listens; NOT_FOUND when `binary` is not an executable.
  // `listen`: --listen's value (a fixed port for a replica of a replicated
  // scheduler).
  static absl::StatusOr<std::unique_ptr<SchedulerProcess>> Start(
      const std::string& binary, const std::string& dir,
      const std::vector<std::string>& extra_args,
      const std::string& listen = "127.0.0.1:0");
  ~SchedulerProcess();
  SchedulerProcess(const SchedulerProcess&) = delete;
  SchedulerProcess& operator=(const SchedulerProcess&) = delete;

  // "127.0.0.1:PORT".
  std::string address() const;
  pid_t pid() const { return pid_; }
  const std::string& db_path() const { return db_; }
  const std::string& log_path() const { return log_; }

  struct Memory {
    uint64_t peak_bytes = 0;  // VmHWM
    uint64_t rss_bytes = 0;   // VmRSS
  };
  // Reads /proc/PID/status; zeros when the process is gone.
  Memory ReadMemory() const;
  // False once the process has exited (it is then reaped, and the wait
  // status kept for exit_status()).
  bool Running();
  int exit_status() const { return exit_status_; }
  // User + system CPU seconds the process has used; -1 when it is gone.
  double CpuSeconds() const;
  // The database and its -wal file, in bytes.
  uint64_t DatabaseBytes() const;
  // The last `bytes` of the log.
  std::string LogTail(size_t bytes) const;
  // SIGTERM to the process group, SIGKILL after `grace`; reaps it.
  // Idempotent.
  void Stop(SteadyClock::duration grace = std::chrono::seconds(5));

 private:
  SchedulerProcess() = default;
  pid_t pid_ = 0;
  int port_ = 0;
  int exit_status_ = 0;
  std::string db_, log_;
};

// Installs, once, an atexit hook and SIGINT/SIGTERM/SIGHUP handlers that
// SIGKILL every scheduler SchedulerProcess started (the handlers then exit
// with 128 + signal). Call early in main.
void InstallSchedulerReaper();

// Every node, following next_page_token (a scheduler that does not page
// answers everything in one page with an empty token). Bounded: at most
// 10,000 pages, each call with a 30 s deadline.
absl::StatusOr<std::vector<v1::Node>> ListAllNodes(v1::NodeService::Stub* stub);

// A channel to a benchmark's scheduler for the unary APIs: large enough
// messages for a whole fleet's ListNodes.
std::shared_ptr<grpc::Channel> ControlChannel(const std::string& target);

// A fresh directory under the system temp directory ("xl-<tag>-XXXXXX").
absl::StatusOr<std::string> MakeTempDir(const std::string& tag);

// A job of one node with `gpus` GPUs whose simulated ranks run
// `runtime_ms`, with idempotency key `key`.
v1::SubmitJobRequest GpuSubmitRequest(const std::string& key, int gpus,
                                      int64_t runtime_ms);

// Submits requests 0..count-1 (`make(n)`), 32 in flight; false when one
// fails or they take longer than 120 s (the reason is on stderr).
bool SubmitAll(v1::JobService::Stub* stub, int count,
               const std::function<v1::SubmitJobRequest(int)>& make);

}  // namespace xl::bench

#endif  // XL_TESTS_BENCH_FLEET_SIM_LIB_H_
