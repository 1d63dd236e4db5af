// policy_sim: the scheduling core's policies replayed over a contended trace
// on a simulated fleet, minute by minute, with every policy on (fair share
// between queues of different weights, quotas with a cohort, EASY backfill
// with reservations, gang preemption) and, on the same trace in the same
// run, with backfill and preemption off (greedy in effective-priority
// order) as the baseline. Jobs from 1 GPU to 64 nodes, real time limits,
// most jobs ending before theirs, a few urgent ones. Prints GPU
// utilisation, mean and p95 wait by job size, each queue's GPU time against
// its weight, preemptions and GPU-hours lost to them, and how good the
// estimated starts were (reserved jobs: predicted against actual).
//
// What it is not: the real scheduler process (tests/bench/fleet_sim is);
// here the pure core (server/scheduler) decides, and this driver plays the
// controller (usage, effective priorities, applying decisions).
//
//   policy_sim [--nodes 1000] [--days 2] [--load 1.3] [--seed 1]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/scheduler/placement.h"
#include "server/scheduler/queue_policy.h"
#include "server/scheduler/schedule.h"

namespace sched = xl::scheduler;

namespace {

constexpr char kModel[] = "NVIDIA H100 80GB HBM3";
const absl::Time kT0 = absl::FromUnixSeconds(1800000000);

struct TraceJob {
  int id;
  int arrive;       // minute
  int nodes, gpus;  // per node
  int runtime;      // minutes of work
  int limit;        // minutes
  int priority;
  std::string queue, user;
};

struct Options {
  int nodes = 1000;
  double days = 2;
  double load = 1.3;
  uint64_t seed = 1;
};

// Queues: weights 4, 2, 1, 1; the first three share a cohort with quotas
// (nominal in proportion to weight over 80 % of the fleet, borrowing
// allowed); the fourth has no quota.
struct QueueDef {
  std::string name;
  double weight;
  double nominal_share;  // of the fleet's GPUs; 0: no quota
};
const QueueDef kQueues[] = {{"research", 4, 0.40},
                            {"product", 2, 0.20},
                            {"interns", 1, 0.10},
                            {"batch", 1, 0}};

std::vector<TraceJob> MakeTrace(const Options& o) {
  std::mt19937_64 rng(o.seed);
  struct Shape {
    int nodes, gpus;
    double weight;
  };
  // Job count weights; GPU-time is dominated by the big ones.
  const Shape shapes[] = {{1, 1, 40}, {1, 8, 30}, {8, 8, 20}, {64, 8, 10}};
  std::discrete_distribution<int> shape({40, 30, 20, 10});
  std::discrete_distribution<int> queue({4, 2, 1, 1});
  std::uniform_real_distribution<double> u(0, 1);
  const double gpus_total = o.nodes * 8.0;
  const int minutes = static_cast<int>(o.days * 24 * 60);
  // Mean GPU-minutes of a job, to arrive at `load` x the fleet.
  double mean_gpu_min = 0, wsum = 0;
  const double mean_runtime = (720 - 10) / std::log(720.0 / 10);  // log-uniform
  for (const Shape& s : shapes) {
    mean_gpu_min += s.weight * s.nodes * s.gpus * mean_runtime;
    wsum += s.weight;
  }
  mean_gpu_min /= wsum;
  const double per_minute = o.load * gpus_total / mean_gpu_min;
  std::poisson_distribution<int> arrivals(per_minute);
  std::vector<TraceJob> trace;
  int id = 0;
  for (int m = 0; m < minutes * 3 / 4; ++m) {
    for (int k = arrivals(rng); k > 0; --k) {
      TraceJob j;
      j.id = ++id;
      j.arrive = m;
      const Shape& s = shapes[shape(rng)];
      j.nodes = s.nodes;
      j.gpus = s.gpus;
      j.runtime = static_cast<int>(10 * std::exp(u(rng) * std::log(72.0)));
      // Most jobs end before their limit (1x to 3x their runtime), some
      // at it.
      j.limit = u(rng) < 0.2 ? j.runtime
                             : static_cast<int>(j.runtime * (1 + 2 * u(rng)));
      j.priority = u(rng) < 0.05 ? 5 : 0;
      j.queue = kQueues[queue(rng)].name;
      j.user = absl::StrCat(j.queue, "-u", static_cast<int>(u(rng) * 5));
      trace.push_back(j);
    }
  }
  return trace;
}

struct Result {
  double utilisation = 0;
  std::map<std::string, std::vector<double>> waits;  // size class -> minutes
  std::map<std::string, double> gpu_minutes;         // queue
  int preemptions = 0;
  int reclaims = 0;
  double lost_gpu_hours = 0;
  std::vector<double> estimate_error;  // actual - predicted, minutes
  int started = 0, finished = 0, total = 0;
  double pass_ms = 0;
  int passes = 0;
};

std::string SizeClass(const TraceJob& j) {
  const int g = j.nodes * j.gpus;
  if (g == 1) return "1 GPU";
  if (j.nodes == 1) return "1 node";
  if (j.nodes <= 8) return "8 nodes";
  return "64 nodes";
}

Result Run(const Options& o, const std::vector<TraceJob>& trace, bool all_on,
           bool reclaim) {
  // The fleet: 32 nodes a switch.
  std::vector<sched::NodeCapacity> nodes;
  for (int i = 0; i < o.nodes; ++i) {
    xl::v1::NodeInventory inv;
    inv.set_cpus(128);
    inv.set_memory_bytes(uint64_t{2048} << 30);
    (*inv.mutable_labels())["switch"] = absl::StrFormat("sw%03d", i / 32);
    for (int g = 0; g < 8; ++g) {
      auto* gpu = inv.add_gpus();
      gpu->set_index(g);
      gpu->set_model(kModel);
      gpu->set_memory_bytes(uint64_t{80} << 30);
    }
    nodes.push_back(
        sched::NodeCapacity::Empty(absl::StrFormat("n%04d", i), inv));
  }
  std::map<std::string, sched::QueuePolicy> policies;
  std::map<std::string, double> weights;
  for (const QueueDef& q : kQueues) {
    weights[q.name] = q.weight;
    if (q.nominal_share == 0) continue;
    sched::QueuePolicy p;
    p.name = q.name;
    p.weight = q.weight;
    p.cohort = "lab";
    p.quotas["*"] = {static_cast<int64_t>(q.nominal_share * o.nodes * 8), -1,
                     -1};
    p.reclaim = reclaim;
    policies[q.name] = p;
  }
  sched::PriorityWeights pw;
  pw.half_life = absl::Hours(12);

  struct Running {
    const TraceJob* job;
    sched::Placement placement;
    int start, end;  // minute it ends (its remaining work or its limit)
    int64_t gpus;
    bool stopping = false;
  };
  struct Pending {
    const TraceJob* job;
    int remaining;       // minutes of work left
    int became_pending;  // minute
    int predicted = -1;  // first reservation's start, minute
    std::shared_ptr<const xl::v1::ResourceRequest> request;
    bool started_before = false;
  };
  // As the controller: a job that preempted waits for its victims (their
  // grace and a heartbeat timeout) without preempting more, and its claim
  // on their nodes is held in every pass meanwhile.
  std::map<int, int> preempting_until;
  std::map<int, sched::Reservation> preempt_holds;
  std::map<int, Running> running;
  std::map<int, Pending> pending;
  std::map<std::pair<int, int>, std::shared_ptr<const xl::v1::ResourceRequest>>
      requests;
  std::map<std::string, sched::DecayedUsage> queue_usage;
  std::map<std::pair<std::string, std::string>, sched::DecayedUsage>
      user_usage;
  Result res;
  res.total = static_cast<int>(trace.size());
  const int minutes = static_cast<int>(o.days * 24 * 60);
  size_t next = 0;
  double busy = 0;
  for (int m = 0; m < minutes; ++m) {
    const absl::Time now = kT0 + absl::Minutes(m);
    // Ends, and preempted gangs whose grace ran out (one minute).
    for (auto it = running.begin(); it != running.end();) {
      Running& r = it->second;
      if (!r.stopping && r.end > m) {
        ++it;
        continue;
      }
      for (const auto& share : r.placement.shares) {
        for (auto& n : nodes) {
          if (n.name() == share.node) sched::Release(&n, share);
        }
      }
      if (!r.stopping) ++res.finished;
      it = running.erase(it);
    }
    for (; next < trace.size() && trace[next].arrive == m; ++next) {
      const TraceJob& j = trace[next];
      auto& req = requests[{j.nodes, j.gpus}];
      if (req == nullptr) {
        auto r = std::make_shared<xl::v1::ResourceRequest>();
        r->set_nodes(j.nodes);
        r->set_gpus_per_node(j.gpus);
        r->set_ranks_per_node(j.gpus);
        req = r;
      }
      pending[j.id] = {&j, j.runtime, m, -1, req};
    }
    // Usage of the last minute, decayed.
    std::map<std::pair<std::string, std::string>, int64_t> gpus;
    for (const auto& [id, r] : running) {
      gpus[{r.job->queue, r.job->user}] += r.gpus;
      busy += r.gpus;
      res.gpu_minutes[r.job->queue] += r.gpus;
    }
    for (auto& [q, u] : queue_usage) u.Decay(absl::Minutes(1), pw.half_life, now);
    for (auto& [k, u] : user_usage) u.Decay(absl::Minutes(1), pw.half_life, now);
    for (const auto& [k, n] : gpus) {
      queue_usage[k.first].value += 60.0 * n;
      user_usage[k].value += 60.0 * n;
    }
    if (pending.empty()) continue;
    std::map<std::string, double> qu;
    std::map<std::pair<std::string, std::string>, double> uu;
    for (const auto& [q, u] : queue_usage) qu[q] = u.value;
    for (const auto& [k, u] : user_usage) uu[k] = u.value;
    std::map<std::string, int64_t> active;
    {
      std::map<std::pair<std::string, std::string>, bool> seen;
      for (const auto& [id, p] : pending) seen[{p.job->queue, p.job->user}];
      for (const auto& [id, r] : running) seen[{r.job->queue, r.job->user}];
      for (const auto& [k, v] : seen) ++active[k.first];
    }
    sched::FairShare fs(weights, qu, uu, active);
    sched::ClusterSnapshot snap;
    snap.nodes = nodes;
    snap.now = now;
    snap.policies = policies;
    snap.max_reservations = all_on ? 8 : 0;
    snap.preemption = all_on;
    for (const auto& [id, r] : running) {
      if (r.stopping) continue;
      sched::RunningGang g;
      g.job_id = std::to_string(id);
      g.priority = r.job->priority;
      g.queue = r.job->queue;
      g.user = r.job->user;
      g.gpus = r.gpus;
      g.shares = r.placement.shares;
      for (const auto& s : g.shares) g.nodes.push_back(s.node);
      g.expected_end = kT0 + absl::Minutes(r.start + r.job->limit);
      g.ran = absl::Minutes(m - r.start);
      g.preemptible = m - r.start >= 10;  // queues' min_runtime: 10 min
      g.grace = absl::Minutes(1);
      g.rank = sched::EffectivePriority(g.priority, fs.Factor(g.queue, g.user),
                                        absl::ZeroDuration(), pw);
      sched::QueueUsage& u = snap.queues[g.queue];
      u.gpus_by_model[kModel] += r.gpus;
      u.user_gpus[g.user] += r.gpus;
      snap.running.push_back(std::move(g));
    }
    for (const auto& [id, r] : running) {
      if (!r.stopping) continue;  // still holds its GPUs for its grace
      snap.queues[r.job->queue].gpus_by_model[kModel] += r.gpus;
    }
    for (auto it = preempting_until.begin(); it != preempting_until.end();) {
      if (it->second > m && pending.count(it->first) > 0) {
        snap.holds.push_back(preempt_holds[it->first]);
        ++it;
        continue;
      }
      preempt_holds.erase(it->first);
      it = preempting_until.erase(it);
    }
    std::vector<sched::JobRequest> queue;
    queue.reserve(pending.size());
    for (const auto& [id, p] : pending) {
      sched::JobRequest j;
      j.job_id = std::to_string(id);
      j.priority = p.job->priority;
      j.submit_seq = id;
      j.resources = p.request;
      j.queue = p.job->queue;
      j.user = p.job->user;
      j.time_limit = absl::Minutes(p.job->limit);
      j.effective_priority = sched::EffectivePriority(
          j.priority, fs.Factor(j.queue, j.user),
          absl::Minutes(m - p.became_pending), pw);
      j.may_preempt = preempting_until.count(id) == 0;
      queue.push_back(std::move(j));
    }
    const auto t0 = std::chrono::steady_clock::now();
    sched::Decisions d = sched::Schedule(std::move(snap), std::move(queue));
    res.pass_ms += std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
    ++res.passes;
    for (const auto& r : d.reservations) {
      Pending& p = pending[std::stoi(r.job_id)];
      if (p.predicted < 0) {
        p.predicted = static_cast<int>(
            std::ceil(absl::ToDoubleMinutes(r.start - kT0)));
      }
    }
    for (const auto& pre : d.preemptions) {
      const int for_job = std::stoi(pre.for_job);
      preempting_until[for_job] = m + 1 + 1;  // grace 1 min + a heartbeat
      for (const auto& r : d.reservations) {
        if (r.job_id == pre.for_job) preempt_holds[for_job] = r;
      }
      Running& r = running[std::stoi(pre.victim)];
      r.stopping = true;
      ++res.preemptions;
      if (pre.reason.find("reclaiming") != std::string::npos) ++res.reclaims;
      if (getenv("SIM_DEBUG") && res.preemptions < 30) {
        fprintf(stderr, "m=%d %s: victim %s (%s, %d nodes) for %s (%s)\n", m,
                pre.reason.c_str(), pre.victim.c_str(), r.job->queue.c_str(),
                r.job->nodes, pre.for_job.c_str(),
                pending[for_job].job->queue.c_str());
      }
      // Checkpoints every 30 minutes: the work since the last one is lost.
      const int ran = m - r.start;
      res.lost_gpu_hours += r.gpus * (ran % 30) / 60.0;
      const int done = ran - ran % 30;
      Pending back{r.job, std::max(1, r.end - r.start - done), m, -1,
                   requests[{r.job->nodes, r.job->gpus}], true};
      pending[r.job->id] = back;
    }
    for (const auto& [id_text, placement] : d.starts) {
      const int id = std::stoi(id_text);
      Pending p = pending[id];
      pending.erase(id);
      for (const auto& share : placement.shares) {
        for (auto& n : nodes) {
          if (n.name() == share.node) sched::Consume(&n, share);
        }
      }
      int64_t g = 0;
      for (const auto& share : placement.shares) g += share.gpu_indices.size();
      running[id] = {p.job, placement, m,
                     m + std::min(p.remaining, p.job->limit), g, false};
      ++res.started;
      // Waits and estimates count a job's first start only.
      if (!p.started_before) {
        res.waits[SizeClass(*p.job)].push_back(m - p.job->arrive);
        if (p.predicted >= 0) res.estimate_error.push_back(m - p.predicted);
      }
    }
  }
  res.utilisation = busy / (static_cast<double>(minutes) * o.nodes * 8);
  return res;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}
double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--nodes")) o.nodes = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--days")) o.days = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--load")) o.load = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed")) o.seed = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: policy_sim [--nodes 1000] [--days 2] [--load 1.3] "
                   "[--seed 1]\n");
      return 2;
    }
  }
  const std::vector<TraceJob> trace = MakeTrace(o);
  std::printf("policy_sim: %d nodes x 8 GPUs, %.1f days (jobs arrive in the "
              "first 3/4), %zu jobs, offered load %.2f x the fleet\n",
              o.nodes, o.days, trace.size(), o.load);
  const Result on = Run(o, trace, true, false);
  const Result re = Run(o, trace, true, true);
  const Result off = Run(o, trace, false, false);
  std::printf("\n%-34s %14s %14s %14s\n", "", "all policies", "+ reclaim",
              "no backfill/pre");
  auto row = [&](const std::string& name, auto&& f) {
    std::printf("%-34s %14s %14s %14s\n", name.c_str(), f(on).c_str(),
                f(re).c_str(), f(off).c_str());
  };
  row("GPU utilisation", [](const Result& r) {
    return absl::StrFormat("%.1f%%", 100 * r.utilisation);
  });
  row("jobs started / finished", [](const Result& r) {
    return absl::StrFormat("%d/%d", r.started, r.finished);
  });
  for (const char* size : {"1 GPU", "1 node", "8 nodes", "64 nodes"}) {
    row(absl::StrCat("wait min, mean / p95: ", size), [&](const Result& r) {
      auto it = r.waits.find(size);
      if (it == r.waits.end()) return std::string("-");
      return absl::StrFormat("%.0f / %.0f", Mean(it->second),
                             Percentile(it->second, 0.95));
    });
    row(absl::StrCat("  started (", size, ")"), [&](const Result& r) {
      auto it = r.waits.find(size);
      return it == r.waits.end() ? std::string("0")
                                 : absl::StrCat(it->second.size());
    });
  }
  double wsum = 0;
  for (const QueueDef& q : kQueues) wsum += q.weight;
  for (const QueueDef& q : kQueues) {
    row(absl::StrFormat("GPU time %s (weight %.3f)", q.name, q.weight / wsum),
        [&](const Result& r) {
          double total = 0;
          for (const auto& [name, g] : r.gpu_minutes) total += g;
          auto it = r.gpu_minutes.find(q.name);
          return absl::StrFormat(
              "%.3f", it == r.gpu_minutes.end() ? 0 : it->second / total);
        });
  }
  row("preemptions (to reclaim quota)", [](const Result& r) {
    return absl::StrFormat("%d (%d)", r.preemptions, r.reclaims);
  });
  row("GPU-hours lost to them", [](const Result& r) {
    return absl::StrFormat("%.0f", r.lost_gpu_hours);
  });
  row("started by the estimate", [](const Result& r) {
    if (r.estimate_error.empty()) return std::string("-");
    int n = 0;
    for (double e : r.estimate_error) n += e <= 0;
    return absl::StrFormat("%.0f%% of %zu", 100.0 * n / r.estimate_error.size(),
                           r.estimate_error.size());
  });
  for (double q : {0.5, 0.9}) {
    row(absl::StrFormat("actual - estimate min, p%.0f", 100 * q),
        [&](const Result& r) {
          if (r.estimate_error.empty()) return std::string("-");
          return absl::StrFormat("%.0f", Percentile(r.estimate_error, q));
        });
  }
  row("pass ms, mean", [](const Result& r) {
    return absl::StrFormat("%.2f", r.pass_ms / std::max(1, r.passes));
  });
  return 0;
}
