// fleet_sim: a fleet of simulated 8-GPU agents (one process, a few HTTP/2
// connections) against a real xl-scheduler it starts, fed a trace of jobs
// through SubmitJob. Prints placements/s, submit -> all ranks running,
// heartbeat round trips, false node losses, the scheduler's memory and
// database size, and GPU utilisation, beside published anchors.
//
//   fleet_sim --nodes 1000 [--jobs 100000] [--duration 120] [--build-dir build]
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/bench/fleet_sim_lib.h"
#include "xl/v1/replica.grpc.pb.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl::bench {
namespace {

struct Options {
  int nodes = 1000;
  int64_t jobs = 100000;
  double duration_s = 120;
  std::string build_dir = "build";
  std::string scheduler_binary;  // default: <build_dir>/server/xl-scheduler
  int channels = 32;
  double heartbeat_timeout_s = 10;
  int concurrency = 32;
  double runtime_min_s = 1, runtime_max_s = 30;
  double fail_share = 0.02;
  uint64_t seed = 1;
  bool keep_dir = false;
  // Scheduler replicas on Raft (1: one scheduler); the fleet attaches to
  // the leader.
  int replicas = 1;
};

constexpr char kUsage[] =
    "usage: fleet_sim [--nodes N] [--jobs N] [--duration S] [--build-dir DIR]\n"
    "                 [--scheduler-binary FILE] [--channels N] "
    "[--heartbeat-timeout S]\n"
    "                 [--concurrency N] [--runtime-min S] [--runtime-max S]\n"
    "                 [--fail-share F] [--seed N] [--keep-dir] [--replicas N]\n"
    "\n"
    "Starts xl-scheduler (--scheduler-binary, default DIR/server/xl-scheduler) "
    "on\n"
    "127.0.0.1 with a fresh database, attaches N simulated 8-GPU agents (80 "
    "GB\n"
    "GPUs; 32 nodes a switch, 4 switches a rack) as AgentService/Connect "
    "streams\n"
    "over --channels connections, and submits a trace of --jobs jobs (1x1 to\n"
    "64x8 GPUs, mostly small; runtimes drawn from [--runtime-min, "
    "--runtime-max];\n"
    "--fail-share of them exit 1) through SubmitJob, --concurrency in flight.\n"
    "After --duration seconds of submitting (or when every job has ended) it\n"
    "prints one table and kills the scheduler. --replicas 3: three replicas "
    "on Raft,\nthe fleet attached to the leader (memory, CPU and database "
    "size are the leader's).\n"
    "\n"
    "defaults: --nodes 1000 --jobs 100000 --duration 120 --build-dir build\n"
    "          --channels 32 --heartbeat-timeout 10 --concurrency 32\n"
    "          --runtime-min 1 --runtime-max 30 --fail-share 0.02 --seed 1\n";

// --- the trace ---------------------------------------------------------------

struct TraceJob {
  int nodes = 1;
  int gpus_per_node = 1;
  int runtime_ms = 1000;
  int exit_code = 0;
};

struct Shape {
  int nodes;
  int gpus_per_node;
  double weight;
};

// Mostly small jobs, a tail of large gangs.
constexpr Shape kShapes[] = {
    {1, 1, 40}, {1, 2, 15}, {1, 4, 12},   {1, 8, 15},   {2, 8, 8},
    {4, 8, 5},  {8, 8, 3},  {16, 8, 1.2}, {32, 8, 0.5}, {64, 8, 0.3}};

std::vector<TraceJob> MakeTrace(const Options& o) {
  std::vector<Shape> shapes;
  std::vector<double> weights;
  for (const Shape& s : kShapes) {
    if (s.nodes > o.nodes) continue;
    shapes.push_back(s);
    weights.push_back(s.weight);
  }
  std::mt19937_64 rng(o.seed);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::uniform_int_distribution<int> runtime(
      static_cast<int>(o.runtime_min_s * 1000),
      static_cast<int>(o.runtime_max_s * 1000));
  std::bernoulli_distribution fails(o.fail_share);
  std::vector<TraceJob> trace(o.jobs);
  for (auto& job : trace) {
    const Shape& s = shapes[pick(rng)];
    job.nodes = s.nodes;
    job.gpus_per_node = s.gpus_per_node;
    job.runtime_ms = runtime(rng);
    job.exit_code = fails(rng) ? 1 : 0;
  }
  return trace;
}

// --- what happened to each job
// -------------------------------------------------

// Joins submit acknowledgements (job id -> shape, send time) with what the
// agents saw. A job is running once StartRanks of one attempt reached all of
// its nodes; StartRanks may arrive before the acknowledgement.
class JobTracker : public FleetObserver {
 public:
  void Acked(const std::string& job_id, int nodes,
             SteadyClock::time_point sent) {
    absl::MutexLock lock(&mu_);
    Track& t = jobs_[job_id];
    if (t.nodes != 0) return;  // a retry answered with the same job
    t.nodes = nodes;
    t.sent = sent;
    if (!frozen_) ++acked_;
    if (nodes == 1 && !t.running) ++waiting_single_;
    Check(&t);
  }

  void OnStartRanks(const std::string& job_id, int attempt, int, int,
                    SteadyClock::time_point at) override {
    absl::MutexLock lock(&mu_);
    Track& t = jobs_[job_id];
    if (attempt < t.attempt) return;
    if (attempt > t.attempt) {
      if (t.attempt > 0 && !frozen_) ++requeued_;
      if (t.running && t.nodes == 1) ++waiting_single_;
      t.attempt = attempt;
      t.started = t.ended = 0;
      t.running = t.done = false;
    }
    ++t.started;
    t.last_start = std::max(t.last_start, at);
    Check(&t);
  }

  void OnRanksEnded(const std::string& job_id, int attempt, int, int,
                    bool stopped, SteadyClock::time_point) override {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second.attempt != attempt) return;
    Track& t = it->second;
    ++t.ended;
    if (stopped) t.stopped = true;
    Check(&t);
  }

  // Single-node jobs acknowledged and not yet running: freed GPUs could go
  // to them at once.
  bool JobsWaiting() const override { return waiting_single_.load() > 0; }

  // Counts stop here; later events change nothing reported.
  void Freeze() {
    absl::MutexLock lock(&mu_);
    frozen_ = true;
  }

  struct Counts {
    int64_t acked = 0, placed = 0, ended = 0, stopped = 0, requeued = 0;
  };
  Counts counts() const {
    absl::MutexLock lock(&mu_);
    return {acked_, placed_, ended_, stopped_, requeued_};
  }
  const LatencySamples& submit_to_running() const { return submit_to_running_; }

 private:
  struct Track {
    int nodes = 0;  // 0 until acknowledged
    SteadyClock::time_point sent;
    int attempt = 0;
    int started = 0, ended = 0;
    SteadyClock::time_point last_start;
    bool running = false, done = false, stopped = false;
  };

  void Check(Track* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (t->nodes == 0 || frozen_) return;
    if (!t->running && t->started >= t->nodes) {
      t->running = true;
      if (t->nodes == 1) --waiting_single_;
      ++placed_;
      submit_to_running_.Add(Ms(t->last_start - t->sent));
    }
    if (t->running && !t->done && t->ended >= t->nodes) {
      t->done = true;
      ++ended_;
      if (t->stopped) ++stopped_;
    }
  }

  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Track> jobs_ ABSL_GUARDED_BY(mu_);
  bool frozen_ ABSL_GUARDED_BY(mu_) = false;
  int64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t placed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ended_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stopped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t requeued_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> waiting_single_{0};
  LatencySamples submit_to_running_;
};

// --- the submitter
// -------------------------------------------------------------

// Submits the trace in order, `concurrency` calls in flight (callback API),
// retrying UNAVAILABLE / DEADLINE_EXCEEDED with the same idempotency key.
class TraceSubmitter {
 public:
  TraceSubmitter(v1::JobService::Stub* stub, const std::vector<TraceJob>* trace,
                 JobTracker* tracker, int concurrency, std::string key_prefix)
      : stub_(stub),
        trace_(trace),
        tracker_(tracker),
        concurrency_(concurrency),
        key_prefix_(std::move(key_prefix)) {}

  void Start() {
    {
      absl::MutexLock lock(&mu_);
      in_flight_ = concurrency_;
    }
    for (int i = 0; i < concurrency_; ++i) Next();
  }

  // Issues nothing more and waits up to 30 s for the calls in flight. Returns
  // false when some are still in flight (then `this` must outlive them).
  bool Stop() {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return in_flight_ == 0;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(30));
  }

  // Every job of the trace was answered (acknowledged or failed).
  bool finished() const {
    absl::MutexLock lock(&mu_);
    return next_ >= trace_->size() && in_flight_ == 0;
  }
  int64_t failed() const { return failed_.load(); }
  SteadyClock::time_point last_ack() const {
    absl::MutexLock lock(&mu_);
    return last_ack_;
  }
  const LatencySamples& latency() const { return latency_; }

 private:
  struct Call {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    v1::SubmitJobResponse resp;
    size_t index = 0;
    int tries = 0;
    SteadyClock::time_point first, sent;
  };

  void Next() {
    size_t index;
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || next_ >= trace_->size()) {
        --in_flight_;
        return;
      }
      index = next_++;
    }
    Issue(index, 0, SteadyClock::now());
  }

  void Issue(size_t index, int tries, SteadyClock::time_point first) {
    const TraceJob& job = (*trace_)[index];
    auto* call = new Call();
    call->index = index;
    call->tries = tries;
    call->first = first;
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(30));
    call->ctx.AddMetadata("x-xl-user", "fleet-sim");
    call->req.set_idempotency_key(absl::StrCat(key_prefix_, index));
    v1::JobSpec* spec = call->req.mutable_spec();
    spec->set_name(absl::StrCat("sim-", index));
    spec->add_command("/bin/true");
    v1::ResourceRequest* r = spec->mutable_resources();
    r->set_nodes(job.nodes);
    r->set_gpus_per_node(job.gpus_per_node);
    r->set_ranks_per_node(job.gpus_per_node);
    (*spec->mutable_env())[kRuntimeEnv] = absl::StrCat(job.runtime_ms);
    if (job.exit_code != 0) {
      (*spec->mutable_env())[kExitCodeEnv] = absl::StrCat(job.exit_code);
    }
    call->sent = SteadyClock::now();
    stub_->async()->SubmitJob(&call->ctx, &call->req, &call->resp,
                              [this, call](grpc::Status s) { Done(call, s); });
  }

  void Done(Call* call, const grpc::Status& s) {
    const auto now = SteadyClock::now();
    const TraceJob& job = (*trace_)[call->index];
    if (s.ok()) {
      latency_.Add(Ms(now - call->sent));
      tracker_->Acked(call->resp.job_id(), job.nodes, call->first);
      absl::MutexLock lock(&mu_);
      last_ack_ = now;
    } else {
      const bool retry =
          (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
           s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) &&
          call->tries < 4;
      bool stopping;
      {
        absl::MutexLock lock(&mu_);
        stopping = stop_;
      }
      if (retry && !stopping) {
        const size_t index = call->index;
        const int tries = call->tries + 1;
        const auto first = call->first;
        delete call;
        Issue(index, tries, first);
        return;
      }
      if (failed_.fetch_add(1) < 5) {
        fprintf(stderr,
                "fleet_sim: SubmitJob of trace job %zu failed: code %d: %s\n",
                call->index, static_cast<int>(s.error_code()),
                s.error_message().c_str());
      }
    }
    delete call;
    Next();
  }

  v1::JobService::Stub* const stub_;
  const std::vector<TraceJob>* const trace_;
  JobTracker* const tracker_;
  const int concurrency_;
  const std::string key_prefix_;
  mutable absl::Mutex mu_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  SteadyClock::time_point last_ack_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> failed_{0};
  LatencySamples latency_;
};

// --- the run
// -------------------------------------------------------------------

bool ParseFlags(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        fprintf(stderr, "fleet_sim: %s needs a value; see --help\n", name);
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      printf("%s", kUsage);
      exit(0);
    } else if (a == "--nodes") {
      o->nodes = atoi(value("--nodes"));
    } else if (a == "--jobs") {
      o->jobs = atoll(value("--jobs"));
    } else if (a == "--duration") {
      o->duration_s = atof(value("--duration"));
    } else if (a == "--build-dir") {
      o->build_dir = value("--build-dir");
    } else if (a == "--scheduler-binary") {
      o->scheduler_binary = value("--scheduler-binary");
    } else if (a == "--channels") {
      o->channels = atoi(value("--channels"));
    } else if (a == "--heartbeat-timeout") {
      o->heartbeat_timeout_s = atof(value("--heartbeat-timeout"));
    } else if (a == "--concurrency") {
      o->concurrency = atoi(value("--concurrency"));
    } else if (a == "--runtime-min") {
      o->runtime_min_s = atof(value("--runtime-min"));
    } else if (a == "--runtime-max") {
      o->runtime_max_s = atof(value("--runtime-max"));
    } else if (a == "--fail-share") {
      o->fail_share = atof(value("--fail-share"));
    } else if (a == "--seed") {
      o->seed = strtoull(value("--seed"), nullptr, 10);
    } else if (a == "--replicas") {
      o->replicas = atoi(value("--replicas"));
    } else if (a == "--keep-dir") {
      o->keep_dir = true;
    } else {
      fprintf(stderr, "fleet_sim: unknown argument %s; see --help\n",
              a.c_str());
      return false;
    }
  }
  std::string bad;
  if (o->nodes < 1)
    bad = "--nodes must be at least 1";
  else if (o->jobs < 1)
    bad = "--jobs must be at least 1";
  else if (o->duration_s <= 0)
    bad = "--duration must be positive";
  else if (o->channels < 1)
    bad = "--channels must be at least 1";
  else if (o->heartbeat_timeout_s <= 1)
    bad = "--heartbeat-timeout must exceed the 1 s heartbeat interval";
  else if (o->replicas < 1 || o->replicas % 2 == 0)
    bad = "--replicas must be 1, 3 or 5";
  else if (o->concurrency < 1)
    bad = "--concurrency must be at least 1";
  else if (o->runtime_min_s <= 0 || o->runtime_max_s < o->runtime_min_s)
    bad = "--runtime-min must be positive and at most --runtime-max";
  else if (o->fail_share < 0 || o->fail_share > 1)
    bad = "--fail-share must be in [0, 1]";
  if (!bad.empty()) {
    fprintf(stderr, "fleet_sim: %s\n", bad.c_str());
    return false;
  }
  if (o->scheduler_binary.empty())
    o->scheduler_binary = o->build_dir + "/server/xl-scheduler";
  return true;
}

double SelfCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string Pair(const LatencySamples& s, double scale, const char* unit) {
  if (s.count() == 0) return "n/a (no samples)";
  return absl::StrFormat("%.1f / %.1f %s (%zu)", s.Quantile(0.5) * scale,
                         s.Quantile(0.99) * scale, unit, s.count());
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Starts o.replicas replicas (each in its own directory under `dir`) and
// returns the one that leads once one does; the others go to `others`.
absl::StatusOr<std::unique_ptr<SchedulerProcess>> StartReplicas(
    const Options& o, const std::string& dir,
    std::vector<std::unique_ptr<SchedulerProcess>>* others) {
  std::vector<std::string> api;
  std::string peers;
  for (int i = 1; i <= o.replicas; ++i) {
    api.push_back(absl::StrCat("127.0.0.1:", FreePort()));
    absl::StrAppend(&peers, peers.empty() ? "" : ",", i, "=127.0.0.1:",
                    FreePort(), "/", api.back());
  }
  std::vector<std::unique_ptr<SchedulerProcess>> all;
  for (int i = 1; i <= o.replicas; ++i) {
    const std::string sub = absl::StrCat(dir, "/replica-", i);
    std::filesystem::create_directories(sub);
    auto p = SchedulerProcess::Start(
        o.scheduler_binary, sub,
        {"--heartbeat-timeout", absl::StrCat(o.heartbeat_timeout_s),
         "--replica-id", absl::StrCat(i), "--peers", peers},
        api[i - 1]);
    if (!p.ok()) return p.status();
    all.push_back(*std::move(p));
  }
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (absl::Now() < until) {
    for (size_t i = 0; i < all.size(); ++i) {
      auto stub = v1::ReplicaService::NewStub(grpc::CreateChannel(
          api[i], grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(1));
      v1::ReplicaStatus status;
      if (stub->GetReplicaStatus(&ctx, v1::GetReplicaStatusRequest(), &status)
              .ok() &&
          status.leader()) {
        auto leader = std::move(all[i]);
        for (auto& p : all) {
          if (p != nullptr) others->push_back(std::move(p));
        }
        return leader;
      }
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError("no replica led within 30 s");
}

int Run(const Options& o) {
  auto dir = MakeTempDir("fleet-sim");
  if (!dir.ok()) {
    fprintf(stderr, "fleet_sim: %s\n",
            std::string(dir.status().message()).c_str());
    return 1;
  }
  // With replicas: every one started, the leader is `sched`.
  std::vector<std::unique_ptr<SchedulerProcess>> others;
  auto sched = o.replicas > 1
                   ? StartReplicas(o, *dir, &others)
                   : SchedulerProcess::Start(
                         o.scheduler_binary, *dir,
                         {"--heartbeat-timeout",
                          absl::StrCat(o.heartbeat_timeout_s)});
  if (!sched.ok()) {
    fprintf(stderr, "fleet_sim: %s\n",
            std::string(sched.status().message()).c_str());
    std::filesystem::remove_all(*dir);
    return 1;
  }
  const std::string target = (*sched)->address();
  fprintf(stderr, "fleet_sim: scheduler pid %d on %s (log %s)\n",
          (*sched)->pid(), target.c_str(), (*sched)->log_path().c_str());

  const std::vector<TraceJob> trace = MakeTrace(o);
  double gpu_seconds = 0;
  for (const auto& j : trace)
    gpu_seconds += j.nodes * j.gpus_per_node * j.runtime_ms / 1000.0;

  JobTracker tracker;
  FleetOptions fo;
  fo.target = target;
  fo.nodes = o.nodes;
  fo.channels = o.channels;
  fo.seed = o.seed;
  auto fleet = std::make_unique<SimulatedFleet>(fo, &tracker);
  const auto reg_start = SteadyClock::now();
  fleet->Start();
  const auto reg_timeout = std::chrono::seconds(60 + o.nodes / 100);
  if (!fleet->WaitRegistered(reg_timeout)) {
    fprintf(stderr,
            "fleet_sim: only %ld of %d nodes registered within %ld s; the "
            "scheduler's log is in %s\n",
            static_cast<long>(fleet->Counters().nodes_registered), o.nodes,
            static_cast<long>(reg_timeout.count()),
            (*sched)->log_path().c_str());
    fleet->Stop();
    (*sched)->Stop();
    return 1;
  }
  const double reg_s = Ms(SteadyClock::now() - reg_start) / 1000;

  auto control = ControlChannel(target);
  auto jobs = v1::JobService::NewStub(control);
  auto node_stub = v1::NodeService::NewStub(control);
  // Heap-held: left alive if a call outlives Stop's wait.
  auto* submitter =
      new TraceSubmitter(jobs.get(), &trace, &tracker, o.concurrency,
                         absl::StrCat("fleet-sim-", getpid(), "-"));
  const double sched_cpu0 = (*sched)->CpuSeconds();
  const double self_cpu0 = SelfCpuSeconds();
  const auto t0 = SteadyClock::now();
  fleet->StartBusyWindow(t0);
  submitter->Start();
  const auto deadline = t0 + std::chrono::duration_cast<SteadyClock::duration>(
                                 std::chrono::duration<double>(o.duration_s));
  auto next_progress = t0 + std::chrono::seconds(10);
  bool all_ended = false, scheduler_died = false;
  while (SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto now = SteadyClock::now();
    if (!(*sched)->Running()) {
      scheduler_died = true;
      break;
    }
    const auto c = tracker.counts();
    if (submitter->finished() && c.ended == c.acked) {
      all_ended = true;
      break;
    }
    if (now >= next_progress) {
      next_progress += std::chrono::seconds(10);
      const FleetCounters f = fleet->Counters();
      fprintf(
          stderr,
          "fleet_sim: %3.0f s: %ld submitted, %ld placed, %ld ended; GPUs busy "
          "%ld/%d; %ld streams closed by the scheduler\n",
          Ms(now - t0) / 1000, static_cast<long>(c.acked),
          static_cast<long>(c.placed), static_cast<long>(c.ended),
          static_cast<long>(f.gpus_busy), fleet->total_gpus(),
          static_cast<long>(f.sessions_closed_by_scheduler));
    }
  }
  // The measured window ends here.
  const auto t_end = SteadyClock::now();
  tracker.Freeze();
  const double window_s = Ms(t_end - t0) / 1000;
  const double busy = fleet->BusyGpuSeconds();
  const FleetCounters fc = fleet->Counters();
  const auto counts = tracker.counts();
  const double sched_cpu = (*sched)->CpuSeconds() - sched_cpu0;
  const double self_cpu = SelfCpuSeconds() - self_cpu0;
  const bool submitter_idle = submitter->Stop();
  const bool submitted_all = submitter->finished();
  const double submit_s = Ms(submitter->last_ack() - t0) / 1000;

  // The scheduler's view, while every agent is still attached.
  v1::GetQueueResponse queue;
  grpc::Status queue_status;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    queue_status = jobs->GetQueue(&ctx, {}, &queue);
  }
  auto nodes = ListAllNodes(node_stub.get());
  int lost = 0, not_ready = 0, listed = 0;
  if (nodes.ok()) {
    for (const auto& n : *nodes) {
      if (n.name().rfind(fo.name_prefix, 0) != 0) continue;
      ++listed;
      if (n.state() == v1::LOST) ++lost;
      if (n.state() != v1::READY) ++not_ready;
    }
  }
  const SchedulerProcess::Memory mem = (*sched)->ReadMemory();
  const uint64_t db_bytes = (*sched)->DatabaseBytes();
  fleet->Stop();
  (*sched)->Stop();

  // --- the table ---
  const double mib = 1 << 20;
  std::vector<std::array<std::string, 3>> rows;
  auto row = [&](std::string m, std::string v, std::string a = "") {
    rows.push_back({std::move(m), std::move(v), std::move(a)});
  };
  row("nodes (GPUs)", absl::StrFormat("%d (%d)", o.nodes, fleet->total_gpus()));
  row("registration (all nodes)",
      absl::StrFormat("%.2f s; Register -> RegisterAck p50/p99 %.1f / %.1f ms",
                      reg_s, fleet->register_rtt().Quantile(0.5),
                      fleet->register_rtt().Quantile(0.99)));
  row("jobs submitted (acked / trace)",
      absl::StrFormat(
          "%ld / %ld%s%s", static_cast<long>(counts.acked),
          static_cast<long>(o.jobs),
          !submitted_all ? std::string(", stopped at the duration")
          : counts.acked > 0
              ? absl::StrFormat(", all answered in %.1f s", submit_s)
              : std::string(),
          submitter->failed() > 0
              ? absl::StrFormat("; %ld refused (see stderr)",
                                static_cast<long>(submitter->failed()))
              : std::string()));
  row("SubmitJob p50 / p99 (concurrency " + std::to_string(o.concurrency) + ")",
      Pair(submitter->latency(), 1, "ms") +
          absl::StrFormat(
              "; %.0f submits/s",
              counts.acked / (submitted_all ? submit_s : window_s)));
  row("placements/s (all ranks running)",
      absl::StrFormat("%.1f (%ld in %.1f s)", counts.placed / window_s,
                      static_cast<long>(counts.placed), window_s),
      "kube-scheduler CI floors: 680-1,100 pods/s at 5,000-15,000 nodes; "
      "Slurm high-throughput guide: ~500 jobs/s");
  row("  what the fleet sustains for the trace's mix (GPUs / mean GPU-s of a "
      "trace job)",
      absl::StrFormat("%.1f/s",
                      fleet->total_gpus() / (gpu_seconds / trace.size())));
  row("submit -> all ranks running p50 / p99",
      Pair(tracker.submit_to_running(), 0.001, "s"),
      "(includes waiting for free GPUs)");
  row("GPUs freed -> next StartRanks on the node p50 / p99",
      Pair(fleet->free_to_start(), 1, "ms") +
          " (clock starts only while 1-node jobs wait)",
      "Borg: a pass over the pending queue < 0.5 s at ~10,000 machines");
  row("heartbeat handling p50 / p99",
      fc.heartbeat_acks == 0
          ? std::string("n/a (scheduler sends no HeartbeatAck)")
          : Pair(fleet->heartbeat_rtt(), 1, "ms"));
  row("false node losses",
      absl::StrFormat("%ld (streams closed by the scheduler: %ld on %ld nodes; "
                      "LOST in ListNodes: %s)",
                      static_cast<long>(std::max<int64_t>(
                          fc.nodes_closed_by_scheduler, lost)),
                      static_cast<long>(fc.sessions_closed_by_scheduler),
                      static_cast<long>(fc.nodes_closed_by_scheduler),
                      nodes.ok()
                          ? absl::StrFormat("%d of %d listed, %d not READY",
                                            lost, listed, not_ready)
                          : std::string(nodes.status().message())),
      "goal 0");
  row("scheduler RSS (VmHWM / VmRSS)",
      absl::StrFormat("%.0f / %.0f MiB", mem.peak_bytes / mib,
                      mem.rss_bytes / mib));
  row("database size (db + wal)", absl::StrFormat("%.1f MiB", db_bytes / mib));
  row("GPU utilisation (busy / available GPU-s)",
      absl::StrFormat("%.1f %% (%.0f / %.0f)",
                      100 * busy / (fleet->total_gpus() * window_s), busy,
                      fleet->total_gpus() * window_s));
  row("CPU over the window (cores busy)",
      absl::StrFormat(
          "scheduler %.0f s (%.2f), fleet_sim %.0f s (%.2f); %ld cores here",
          sched_cpu, sched_cpu / window_s, self_cpu, self_cpu / window_s,
          sysconf(_SC_NPROCESSORS_ONLN)));
  row("jobs ended / of them stopped / requeued",
      absl::StrFormat("%ld / %ld / %ld", static_cast<long>(counts.ended),
                      static_cast<long>(counts.stopped),
                      static_cast<long>(counts.requeued)));
  if (queue_status.ok()) {
    int64_t pending = 0, running = 0;
    for (const auto& q : queue.queues()) {
      pending += q.pending_jobs();
      running += q.running_jobs();
    }
    row("scheduler's queue at the end (GetQueue)",
        absl::StrFormat("%ld pending, %ld running, GPUs in use %d/%d; nodes "
                        "ready %d, lost %d",
                        static_cast<long>(pending), static_cast<long>(running),
                        queue.gpus_in_use(), queue.total_gpus(),
                        queue.nodes_ready(), queue.nodes_lost()));
  }
  row("agent traffic",
      absl::StrFormat(
          "%ld heartbeats, %ld rank statuses up; %ld StartRanks, %ld StopJob, "
          "%ld HeartbeatAck, %ld other down; %ld lease expiries",
          static_cast<long>(fc.heartbeats_sent),
          static_cast<long>(fc.rank_statuses_sent),
          static_cast<long>(fc.start_ranks), static_cast<long>(fc.stop_jobs),
          static_cast<long>(fc.heartbeat_acks),
          static_cast<long>(fc.log_acks + fc.other_messages),
          static_cast<long>(fc.lease_expiries)));

  size_t w0 = 0, w1 = 0;
  for (const auto& r : rows) {
    w0 = std::max(w0, r[0].size());
    w1 = std::max(w1, r[1].size());
  }
  printf("\nfleet_sim: %d simulated agents on %d channels against %s\n",
         o.nodes, std::min(o.channels, o.nodes), o.scheduler_binary.c_str());
  printf(
      "window %.1f s from the first submit%s; trace %ld jobs, runtimes %g-%g "
      "s, "
      "%.0f%% exit 1\n\n",
      window_s, all_ended ? " (every job ended before --duration)" : "",
      static_cast<long>(o.jobs), o.runtime_min_s, o.runtime_max_s,
      100 * o.fail_share);
  printf("| %-*s | %-*s | %s\n", static_cast<int>(w0), "measure",
         static_cast<int>(w1), "value", "anchor");
  printf("|%s|%s|\n", std::string(w0 + 2, '-').c_str(),
         std::string(w1 + 2, '-').c_str());
  for (const auto& r : rows) {
    printf("| %-*s | %-*s | %s\n", static_cast<int>(w0), r[0].c_str(),
           static_cast<int>(w1), r[1].c_str(), r[2].c_str());
  }
  fflush(stdout);

  if (scheduler_died) {
    fprintf(
        stderr,
        "fleet_sim: the scheduler exited during the run (wait status %d); the "
        "numbers above stop there. Its log ends:\n%s\n",
        (*sched)->exit_status(), (*sched)->LogTail(3000).c_str());
  }
  if (!submitter_idle) {
    fprintf(stderr, "fleet_sim: SubmitJob calls still in flight after 30 s\n");
  } else {
    delete submitter;
  }
  if (o.keep_dir) {
    fprintf(stderr, "fleet_sim: kept %s\n", dir->c_str());
  } else {
    std::filesystem::remove_all(*dir);
  }
  return scheduler_died ? 1 : 0;
}

}  // namespace
}  // namespace xl::bench

int main(int argc, char** argv) {
  xl::bench::Options o;
  if (!xl::bench::ParseFlags(argc, argv, &o)) return 2;
  signal(SIGPIPE, SIG_IGN);
  xl::bench::InstallSchedulerReaper();
  return xl::bench::Run(o);
}
