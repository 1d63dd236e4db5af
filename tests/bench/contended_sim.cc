// contended_sim: the scheduling policies on a contended trace, through the
// real xl-scheduler process and a simulated fleet (the fleet_sim library):
// queues with weights and quotas, jobs from 1 GPU to 64 nodes with real time
// limits (most end well before them), offered at twice the fleet. Time is
// compressed: --hour real seconds stand for an hour. The same trace runs
// twice in one process, with the scheduler's policies (backfill with
// reservations, preemption) and without (--reservations 0 --preemption
// false), and one table compares them: GPU utilisation, mean and p95 wait by
// job size, each queue's share of the GPU time against its weight,
// preemptions and the GPU time they lost, and how well the estimated starts
// the scheduler showed predicted the actual ones.
//
//   contended_sim [--nodes 1000] [--span 180] [--hour 10] [--load 2]
//                 [--build-dir build] [--seed 1]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "tests/bench/fleet_sim_lib.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl::bench {
namespace {

struct Options {
  int nodes = 1000;
  double span_s = 180;  // arrivals over this long
  double hour_s = 10;   // real seconds that stand for an hour
  double load = 2.0;    // offered GPU time / the fleet's over the span
  std::string build_dir = "build";
  uint64_t seed = 1;
};

constexpr char kUsage[] =
    "usage: contended_sim [--nodes N] [--span S] [--hour S] [--load X]\n"
    "                     [--build-dir DIR] [--seed N]\n"
    "\n"
    "Runs DIR/server/xl-scheduler twice against N simulated 8-GPU agents, "
    "with\n"
    "its policies and without, on one contended trace: queues research, "
    "product,\n"
    "interns (one cohort, nominal quotas 40/20/10 % of the GPUs) and batch, "
    "weights\n"
    "4/2/1/1; jobs of 1 GPU (40 %), 1 node (30 %), 8 nodes (20 %), 64 nodes "
    "(10 %),\n"
    "runtimes 10 min to 12 h log-uniform, time limits 1x to 3x the runtime, "
    "5 %\n"
    "priority 5; arrivals over --span seconds at --load times the fleet; "
    "--hour\n"
    "real seconds stand for an hour. Prints one table.\n"
    "\n"
    "defaults: --nodes 1000 --span 180 --hour 10 --load 2 --build-dir build "
    "--seed 1\n";

const char* const kQueues[] = {"research", "product", "interns", "batch"};
constexpr double kWeights[] = {4, 2, 1, 1};
constexpr double kNominal[] = {0.4, 0.2, 0.1, 0};  // share of the GPUs
const char* const kSizes[] = {"1 GPU", "1 node", "8 nodes", "64 nodes"};

struct TraceJob {
  double at_s = 0;  // arrival, from the start
  int size = 0;     // index into kSizes
  int nodes = 1, gpus_per_node = 1;
  int queue = 0;
  int priority = 0;
  int runtime_ms = 0;
  int time_limit_s = 0;
};

std::vector<TraceJob> MakeTrace(const Options& o) {
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::discrete_distribution<int> size({40, 30, 20, 10});
  std::discrete_distribution<int> queue({4, 2, 1, 1});
  const double lo = std::log(10.0 / 60), hi = std::log(12.0);  // hours
  std::vector<TraceJob> jobs;
  double offered = 0;
  const double capacity = o.load * o.nodes * 8 * o.span_s;
  while (offered < capacity) {
    TraceJob j;
    j.size = size(rng);
    const int shapes[4][2] = {{1, 1}, {1, 8}, {8, 8}, {64, 8}};
    j.nodes = std::min(shapes[j.size][0], o.nodes);
    j.gpus_per_node = shapes[j.size][1];
    j.queue = queue(rng);
    j.priority = u(rng) < 0.05 ? 5 : 0;
    const double hours = std::exp(lo + (hi - lo) * u(rng));
    j.runtime_ms = static_cast<int>(hours * o.hour_s * 1000);
    j.time_limit_s = std::max(
        1, static_cast<int>(std::ceil(j.runtime_ms / 1000.0 * (1 + 2 * u(rng)))));
    offered += j.nodes * j.gpus_per_node * j.runtime_ms / 1000.0;
    jobs.push_back(j);
  }
  // Arrivals spread evenly at random over the span, in time order.
  for (auto& j : jobs) j.at_s = u(rng) * o.span_s;
  std::sort(jobs.begin(), jobs.end(),
            [](const TraceJob& a, const TraceJob& b) { return a.at_s < b.at_s; });
  return jobs;
}

// What the agents saw, by job: when each attempt ran on how many GPUs.
class Observer : public FleetObserver {
 public:
  void OnStartRanks(const std::string& job_id, int attempt, int, int gpus,
                    SteadyClock::time_point at) override {
    absl::MutexLock lock(&mu_);
    Seen& s = jobs_[job_id];
    Attempt& a = s.attempts[attempt];
    if (a.nodes_started++ == 0) a.first = at;
    a.last = std::max(a.last, at);
    a.gpus += gpus;
  }
  void OnRanksEnded(const std::string& job_id, int attempt, int, int gpus,
                    bool stopped, SteadyClock::time_point at) override {
    absl::MutexLock lock(&mu_);
    Attempt& a = jobs_[job_id].attempts[attempt];
    a.gpu_s += gpus * Ms(at - a.first) / 1000;
    a.stopped |= stopped;
  }
  struct Attempt {
    int nodes_started = 0;
    int gpus = 0;
    SteadyClock::time_point first, last;
    double gpu_s = 0;  // ended shares only
    bool stopped = false;
  };
  struct Seen {
    std::map<int, Attempt> attempts;
  };
  std::unordered_map<std::string, Seen> Snapshot() const {
    absl::MutexLock lock(&mu_);
    return jobs_;
  }

 private:
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Seen> jobs_ ABSL_GUARDED_BY(mu_);
};

struct Result {
  double utilisation = 0;
  // Per size: waits in minutes of simulated time (unstarted jobs count to
  // the end of the window) and how many never started.
  std::vector<double> waits[4];
  int unstarted[4] = {0, 0, 0, 0};
  double queue_gpu_s[4] = {0, 0, 0, 0};
  int64_t preemptions = 0;
  double lost_gpu_s = 0;
  // Estimated start - actual start (simulated minutes), for jobs that had
  // an estimate while pending.
  std::vector<double> estimate_error;
  int64_t with_estimate = 0, started = 0;
  // Jobs pending when polled, and of them with an estimated start.
  int64_t pending_polled = 0, pending_estimated = 0;
  double scheduler_cpu_s = 0;
};

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

absl::StatusOr<Result> RunOnce(const Options& o,
                               const std::vector<TraceJob>& trace,
                               bool policies) {
  auto dir = MakeTempDir("contended-sim");
  if (!dir.ok()) return dir.status();
  // The queues, as an admin writes them.
  const int64_t gpus = int64_t{o.nodes} * 8;
  {
    std::ofstream f(*dir + "/queues.yaml");
    f << "queues:\n";
    for (int q = 0; q < 4; ++q) {
      f << "  - name: " << kQueues[q] << "\n    weight: " << kWeights[q]
        << "\n";
      if (kNominal[q] > 0) {
        f << "    cohort: lab\n    quotas:\n      - {gpu_model: \"*\", "
             "nominal_gpus: "
          << static_cast<int64_t>(kNominal[q] * gpus) << "}\n";
      }
    }
  }
  const int half_life_s = static_cast<int>(12 * o.hour_s);
  std::vector<std::string> args = {
      "--heartbeat-timeout", "10", "--queues", *dir + "/queues.yaml",
      "--fair-share-half-life", absl::StrCat(half_life_s, "s"),
      "--max-age", absl::StrCat(static_cast<int>(48 * o.hour_s), "s"),
      // Every 10 simulated minutes, as every minute would be at an hour of
      // an hour.
      "--estimate-interval",
      absl::StrCat(std::max(1, static_cast<int>(o.hour_s / 6)), "s")};
  if (!policies) {
    for (const char* a : {"--reservations", "0", "--preemption", "false"}) {
      args.push_back(a);
    }
  }
  auto sched = SchedulerProcess::Start(o.build_dir + "/server/xl-scheduler",
                                       *dir, args);
  if (!sched.ok()) return sched.status();
  Observer observer;
  FleetOptions fo;
  fo.target = (*sched)->address();
  fo.nodes = o.nodes;
  fo.seed = o.seed;
  auto fleet = std::make_unique<SimulatedFleet>(fo, &observer);
  fleet->Start();
  if (!fleet->WaitRegistered(std::chrono::seconds(120))) {
    return absl::DeadlineExceededError("the fleet did not register");
  }
  auto channel = ControlChannel(fo.target);
  auto stub = v1::JobService::NewStub(channel);

  // Submit at the arrival times; note each pending job's estimate a few
  // simulated minutes after its submit (a poller thread).
  struct Submitted {
    std::string id;
    const TraceJob* job;
    SteadyClock::time_point at;
    std::chrono::system_clock::time_point wall;
    std::optional<std::chrono::system_clock::time_point> estimate;
  };
  std::vector<Submitted> submitted;
  absl::Mutex mu;
  bool done = false;
  std::atomic<int64_t> pending_polled{0}, pending_estimated{0};
  std::thread poller([&] {
    size_t next = 0;
    auto stub2 = v1::JobService::NewStub(channel);
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::vector<std::pair<size_t, std::string>> due;
      {
        absl::MutexLock lock(&mu);
        if (done) return;
        const auto now = SteadyClock::now();
        while (next < submitted.size() &&
               Ms(now - submitted[next].at) > o.hour_s * 1000 / 2) {
          due.emplace_back(next, submitted[next].id);
          ++next;
        }
      }
      for (const auto& [i, id] : due) {
        grpc::ClientContext ctx;
        ctx.AddMetadata("x-xl-user", "sim");
        v1::GetJobRequest req;
        req.set_job_id(id);
        v1::Job job;
        if (!stub2->GetJob(&ctx, req, &job).ok()) continue;
        if (job.state() != v1::PENDING) continue;
        ++pending_polled;
        if (!job.has_estimated_start_time()) continue;
        ++pending_estimated;
        const auto t = std::chrono::system_clock::time_point(
            std::chrono::seconds(job.estimated_start_time().seconds()) +
            std::chrono::nanoseconds(job.estimated_start_time().nanos()));
        absl::MutexLock lock(&mu);
        submitted[i].estimate = t;
      }
    }
  });
  const double cpu0 = (*sched)->CpuSeconds();
  const auto t0 = SteadyClock::now();
  fleet->StartBusyWindow(t0);
  for (const TraceJob& j : trace) {
    std::this_thread::sleep_until(
        t0 + std::chrono::microseconds(static_cast<int64_t>(j.at_s * 1e6)));
    v1::SubmitJobRequest req;
    v1::JobSpec* spec = req.mutable_spec();
    spec->add_command("/bin/true");
    spec->set_queue(kQueues[j.queue]);
    spec->set_priority(j.priority);
    spec->mutable_resources()->set_nodes(j.nodes);
    spec->mutable_resources()->set_gpus_per_node(j.gpus_per_node);
    spec->mutable_time_limit()->set_seconds(j.time_limit_s);
    spec->mutable_grace_period()->set_seconds(1);
    (*spec->mutable_env())[kRuntimeEnv] = absl::StrCat(j.runtime_ms);
    grpc::ClientContext ctx;
    // Five users a queue.
    ctx.AddMetadata("x-xl-user", absl::StrCat(kQueues[j.queue], "-u",
                                              (&j - trace.data()) % 5));
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::SubmitJobResponse resp;
    grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
    if (!s.ok()) {
      fprintf(stderr, "contended_sim: submit refused: %s\n",
              s.error_message().c_str());
      continue;
    }
    absl::MutexLock lock(&mu);
    submitted.push_back({resp.job_id(), &j, SteadyClock::now(),
                         std::chrono::system_clock::now(), std::nullopt});
  }
  std::this_thread::sleep_until(
      t0 + std::chrono::microseconds(static_cast<int64_t>(o.span_s * 1e6)));
  const auto t_end = SteadyClock::now();
  const double window_s = Ms(t_end - t0) / 1000;
  Result r;
  r.utilisation = fleet->BusyGpuSeconds() / (fleet->total_gpus() * window_s);
  r.scheduler_cpu_s = (*sched)->CpuSeconds() - cpu0;
  {
    absl::MutexLock lock(&mu);
    done = true;
  }
  poller.join();
  r.pending_polled = pending_polled.load();
  r.pending_estimated = pending_estimated.load();
  const auto seen = observer.Snapshot();
  const double minute_s = o.hour_s / 60;
  for (const Submitted& s : submitted) {
    const TraceJob& j = *s.job;
    auto it = seen.find(s.id);
    std::optional<SteadyClock::time_point> start;
    if (it != seen.end()) {
      for (const auto& [n, a] : it->second.attempts) {
        if (a.last > t_end) continue;
        if (a.nodes_started >= j.nodes && !start) start = a.last;
        r.queue_gpu_s[j.queue] +=
            a.gpu_s + (a.gpu_s == 0 && a.nodes_started >= j.nodes
                           ? a.gpus * Ms(t_end - a.first) / 1000
                           : 0);
        if (a.stopped) {
          ++r.preemptions;
          r.lost_gpu_s += a.gpu_s;
        }
      }
    }
    const auto until = start.value_or(t_end);
    r.waits[j.size].push_back(Ms(until - s.at) / 1000 / minute_s);
    if (!start) {
      ++r.unstarted[j.size];
      continue;
    }
    ++r.started;
    if (s.estimate) {
      ++r.with_estimate;
      const auto actual_wall = s.wall + std::chrono::duration_cast<
                                            std::chrono::system_clock::duration>(
                                            *start - s.at);
      r.estimate_error.push_back(
          std::chrono::duration<double>(actual_wall - *s.estimate).count() /
          minute_s);
    }
  }
  fleet->Stop();
  (*sched)->Stop();
  std::filesystem::remove_all(*dir);
  return r;
}

}  // namespace
}  // namespace xl::bench

int main(int argc, char** argv) {
  using namespace xl::bench;
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      printf("%s", kUsage);
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "contended_sim: %s needs a value; see --help\n",
              a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--nodes") o.nodes = atoi(v);
    else if (a == "--span") o.span_s = atof(v);
    else if (a == "--hour") o.hour_s = atof(v);
    else if (a == "--load") o.load = atof(v);
    else if (a == "--build-dir") o.build_dir = v;
    else if (a == "--seed") o.seed = strtoull(v, nullptr, 10);
    else {
      fprintf(stderr, "contended_sim: unknown argument %s; see --help\n",
              a.c_str());
      return 2;
    }
  }
  if (o.nodes < 64 || o.span_s <= 0 || o.hour_s <= 0 || o.load <= 0) {
    fprintf(stderr,
            "contended_sim: --nodes must be at least 64 (the largest jobs); "
            "--span, --hour and --load positive\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  InstallSchedulerReaper();
  const std::vector<TraceJob> trace = MakeTrace(o);
  fprintf(stderr, "contended_sim: %zu jobs over %.0f s (%.1f simulated h)\n",
          trace.size(), o.span_s, o.span_s / o.hour_s);
  Result res[2];
  for (int k = 0; k < 2; ++k) {
    auto r = RunOnce(o, trace, /*policies=*/k == 0);
    if (!r.ok()) {
      fprintf(stderr, "contended_sim: %s\n",
              std::string(r.status().message()).c_str());
      return 1;
    }
    res[k] = *r;
  }
  printf("\ncontended_sim: %d nodes x 8 GPUs, %zu jobs over %.1f simulated "
         "hours (%.0f s), load %.1f\n\n",
         o.nodes, trace.size(), o.span_s / o.hour_s, o.span_s, o.load);
  printf("| | all policies | no backfill, no preemption |\n|---|---|---|\n");
  printf("| GPU utilisation | %.1f %% | %.1f %% |\n", 100 * res[0].utilisation,
         100 * res[1].utilisation);
  for (int s = 0; s < 4; ++s) {
    printf("| wait mean / p95 (min), %s | %.0f / %.0f (%d never started) | "
           "%.0f / %.0f (%d never started) |\n",
           kSizes[s],
           res[0].waits[s].empty()
               ? 0
               : std::accumulate(res[0].waits[s].begin(), res[0].waits[s].end(),
                                 0.0) / res[0].waits[s].size(),
           Quantile(res[0].waits[s], 0.95), res[0].unstarted[s],
           res[1].waits[s].empty()
               ? 0
               : std::accumulate(res[1].waits[s].begin(), res[1].waits[s].end(),
                                 0.0) / res[1].waits[s].size(),
           Quantile(res[1].waits[s], 0.95), res[1].unstarted[s]);
  }
  for (int k = 0; k < 2; ++k) {
    double all = 0;
    for (double g : res[k].queue_gpu_s) all += g;
    if (all <= 0) all = 1;
    if (k == 0) printf("| GPU time research / product / interns / batch (weights 0.50 / 0.25 / 0.125 / 0.125) |");
    printf(" %.3f / %.3f / %.3f / %.3f |", res[k].queue_gpu_s[0] / all,
           res[k].queue_gpu_s[1] / all, res[k].queue_gpu_s[2] / all,
           res[k].queue_gpu_s[3] / all);
  }
  printf("\n");
  const double gpu_h = o.hour_s;
  printf("| preemptions (GPU-hours lost) | %ld (%.0f) | %ld (%.0f) |\n",
         static_cast<long>(res[0].preemptions), res[0].lost_gpu_s / gpu_h,
         static_cast<long>(res[1].preemptions), res[1].lost_gpu_s / gpu_h);
  for (int k = 0; k < 2; ++k) {
    if (k == 0) printf("| started jobs with an estimate; actual - estimate p50 / p90 (min) |");
    const auto& e = res[k].estimate_error;
    int64_t on_time = 0;
    for (double d : e) on_time += d <= 1;
    printf(" %ld of %ld; %.0f / %.0f; %.0f %% by their estimate |",
           static_cast<long>(res[k].with_estimate),
           static_cast<long>(res[k].started), Quantile(e, 0.5),
           Quantile(e, 0.9), e.empty() ? 0.0 : 100.0 * on_time / e.size());
  }
  printf("\n| jobs pending 30 simulated min after submit, of them with an "
         "estimated start | %ld, %ld | %ld, %ld |",
         static_cast<long>(res[0].pending_polled),
         static_cast<long>(res[0].pending_estimated),
         static_cast<long>(res[1].pending_polled),
         static_cast<long>(res[1].pending_estimated));
  printf("\n| scheduler CPU over the span | %.1f s | %.1f s |\n",
         res[0].scheduler_cpu_s, res[1].scheduler_cpu_s);
  return 0;
}
