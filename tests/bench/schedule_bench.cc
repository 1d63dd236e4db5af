// Benchmark driver: one full scheduling pass (scheduler::Schedule) at fleet
// size, and beside it, on the same inputs, the algorithm it replaced (the
// placement.cc of commit 88d4f31, copied below as `baseline`). Fleets of
// 1,000 / 5,000 / 10,000 nodes of 8 GPUs (80 GiB, half the GPUs busy, 1%
// drained, 32 nodes per switch, 4 switches per rack), queues of 10,000 and
// 100,000 pending jobs of mixed gang shapes (1x1 to 64x8), three
// priorities and three GPU memory floors. Prints the medians of several
// passes (wall and CPU time; the ratio and starts/s use CPU time, since the
// machine may be shared), and whether both decided the same (starts, nodes,
// GPUs and every reason, word for word).
//
// A third pass adds reservations, and a fourth every queue policy too
// (quotas with cohorts, per-user limits, fair-share effective priorities).
//
//   schedule_bench [--max-nodes 10000] [--max-pending 100000]
//                  [--baseline-limit-s 30]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "server/scheduler/placement.h"
#include "server/scheduler/schedule.h"

namespace baseline {

// The old core, as it was: every node's inventory copied into each pass,
// a reason string per misfitting node, the fleet scanned per job.
using xl::v1::NodeInventory;
using xl::v1::ResourceRequest;

struct NodeCapacity {
  std::string name;
  NodeInventory inventory;
  std::string unavailable;
  std::vector<bool> gpu_free;
  int64_t cpus_free = 0;
  uint64_t memory_free = 0;
  uint64_t nvme_free = 0;
  double nic_gbps_free = 0;

  static NodeCapacity Empty(std::string name, const NodeInventory& inv);
};

struct JobRequest {
  std::string job_id;
  int32_t priority = 0;
  int64_t submit_seq = 0;
  ResourceRequest resources;
};

using xl::scheduler::NodeShare;
using xl::scheduler::Placement;

struct Decisions {
  std::vector<std::pair<std::string, Placement>> starts;
  std::map<std::string, std::string> waiting;
};

using ::xl::HumanBytes;

std::string Label(const NodeInventory& inv, const std::string& key) {
  auto it = inv.labels().find(key);
  return it == inv.labels().end() ? std::string() : it->second;
}

double FastestNic(const NodeInventory& inv) {
  double best = 0;
  for (const auto& nic : inv.nics()) best = std::max(best, nic.gbps());
  return best;
}

bool GpuMatches(const xl::v1::Gpu& gpu, const ResourceRequest& req) {
  if (gpu.memory_bytes() < req.min_gpu_memory_bytes()) return false;
  if (req.gpu_models_size() == 0) return true;
  for (const auto& m : req.gpu_models()) {
    if (m == gpu.model()) return true;
  }
  return false;
}

NodeCapacity NodeCapacity::Empty(std::string name, const NodeInventory& inv) {
  NodeCapacity n;
  n.name = std::move(name);
  n.inventory = inv;
  n.gpu_free.assign(inv.gpus_size(), true);
  n.cpus_free = inv.cpus();
  n.memory_free = inv.memory_bytes();
  for (const auto& d : inv.nvme()) n.nvme_free += d.free_bytes();
  n.nic_gbps_free = FastestNic(inv);
  return n;
}

std::string FitOnNode(const NodeCapacity& node, const ResourceRequest& req,
                      NodeShare* share) {
  if (!node.unavailable.empty()) return node.unavailable;
  const auto& inv = node.inventory;
  std::vector<int32_t> gpus;
  if (req.gpus_per_node() > 0) {
    int matching = 0;
    for (int i = 0; i < inv.gpus_size(); ++i) {
      if (!GpuMatches(inv.gpus(i), req)) continue;
      ++matching;
      if (node.gpu_free[i] &&
          static_cast<int>(gpus.size()) < req.gpus_per_node()) {
        gpus.push_back(inv.gpus(i).index());
      }
    }
    if (static_cast<int>(gpus.size()) < req.gpus_per_node()) {
      if (matching < req.gpus_per_node()) {
        std::string what = "GPUs";
        if (req.min_gpu_memory_bytes() > 0 || req.gpu_models_size() > 0) {
          what = "matching GPUs";
        }
        return absl::StrFormat("has %d %s, needs %d", matching, what,
                               req.gpus_per_node());
      }
      return absl::StrFormat("%d of %d matching GPUs free, needs %d",
                             gpus.size(), matching, req.gpus_per_node());
    }
  }
  if (req.cpus_per_node() > node.cpus_free) {
    return absl::StrFormat("%d CPUs free, needs %d", node.cpus_free,
                           req.cpus_per_node());
  }
  if (req.memory_bytes_per_node() > node.memory_free) {
    return absl::StrCat(HumanBytes(node.memory_free), " memory free, needs ",
                        HumanBytes(req.memory_bytes_per_node()));
  }
  if (req.nvme_bytes_per_node() > node.nvme_free) {
    return absl::StrCat(HumanBytes(node.nvme_free), " NVMe free, needs ",
                        HumanBytes(req.nvme_bytes_per_node()));
  }
  if (req.nic_gbps_per_node() > node.nic_gbps_free + 1e-9) {
    return absl::StrFormat("%g Gbit/s NIC free, needs %g", node.nic_gbps_free,
                           req.nic_gbps_per_node());
  }
  if (share != nullptr) {
    share->node = node.name;
    share->gpu_indices = std::move(gpus);
    share->cpus = req.cpus_per_node();
    share->memory_bytes = req.memory_bytes_per_node();
    share->nvme_bytes = req.nvme_bytes_per_node();
    share->nic_gbps = req.nic_gbps_per_node();
  }
  return "";
}

void Consume(NodeCapacity* node, const NodeShare& share) {
  for (int32_t idx : share.gpu_indices) {
    for (int i = 0; i < node->inventory.gpus_size(); ++i) {
      if (node->inventory.gpus(i).index() == idx) node->gpu_free[i] = false;
    }
  }
  node->cpus_free -= share.cpus;
  node->memory_free -= std::min(node->memory_free, share.memory_bytes);
  node->nvme_free -= std::min(node->nvme_free, share.nvme_bytes);
  node->nic_gbps_free -= share.nic_gbps;
}

bool PlaceGang(const std::vector<NodeCapacity>& nodes,
               const ResourceRequest& req, Placement* placement,
               std::string* reason) {
  struct Candidate {
    const NodeCapacity* node;
    NodeShare share;
  };
  std::vector<Candidate> fits;
  std::map<std::string, std::vector<std::string>> misfits;
  for (const auto& node : nodes) {
    Candidate c{&node, {}};
    std::string why = FitOnNode(node, req, &c.share);
    if (why.empty()) {
      fits.push_back(std::move(c));
    } else {
      misfits[why].push_back(node.name);
    }
  }
  const size_t want = static_cast<size_t>(req.nodes());
  if (fits.size() < want) {
    if (reason != nullptr) {
      int could = 0;
      for (const auto& node : nodes) {
        if (FitOnNode(NodeCapacity::Empty(node.name, node.inventory), req,
                      nullptr)
                .empty()) {
          ++could;
        }
      }
      std::string text =
          absl::StrCat("needs ", xl::scheduler::DescribeRequest(req), "; ");
      if (static_cast<size_t>(could) < want) {
        absl::StrAppend(&text, "the fleet has only ", could, " such node",
                        could == 1 ? "" : "s", " of ", nodes.size(),
                        " even when idle, so it cannot start until nodes are "
                        "added (or shrink the request); ");
      }
      absl::StrAppend(&text, fits.size(), " fit", fits.size() == 1 ? "s" : "",
                      " now");
      std::vector<std::string> groups;
      for (const auto& [why, names] : misfits) {
        std::vector<std::string> shown(
            names.begin(), names.begin() + std::min<size_t>(names.size(), 4));
        std::string who = absl::StrJoin(shown, ", ");
        if (names.size() > shown.size()) {
          absl::StrAppend(&who, " and ", names.size() - shown.size(), " more");
        }
        groups.push_back(absl::StrCat(who, ": ", why));
      }
      if (!groups.empty()) {
        absl::StrAppend(&text, "; ", absl::StrJoin(groups, "; "));
      }
      if (nodes.empty()) absl::StrAppend(&text, "; no node is registered");
      *reason = text;
    }
    return false;
  }
  std::map<std::string, std::vector<Candidate*>> by_switch;
  for (auto& c : fits)
    by_switch[Label(c.node->inventory, "switch")].push_back(&c);
  std::vector<Candidate*> chosen;
  size_t best_size = SIZE_MAX;
  for (auto& [sw, group] : by_switch) {
    if (sw.empty()) continue;
    if (group.size() >= want && group.size() < best_size) {
      best_size = group.size();
      chosen = group;
    }
  }
  auto ring_order = [](Candidate* a, Candidate* b) {
    auto key = [](Candidate* c) {
      return std::make_tuple(Label(c->node->inventory, "switch"),
                             Label(c->node->inventory, "rack"),
                             -FastestNic(c->node->inventory), c->node->name);
    };
    return key(a) < key(b);
  };
  if (chosen.empty()) {
    for (auto& c : fits) chosen.push_back(&c);
  }
  std::sort(chosen.begin(), chosen.end(), ring_order);
  chosen.resize(want);
  placement->shares.clear();
  for (Candidate* c : chosen) placement->shares.push_back(c->share);
  return true;
}

Decisions Schedule(std::vector<NodeCapacity> nodes,
                   std::vector<JobRequest> queue) {
  std::sort(queue.begin(), queue.end(),
            [](const JobRequest& a, const JobRequest& b) {
              if (a.priority != b.priority) return a.priority > b.priority;
              return a.submit_seq < b.submit_seq;
            });
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i].name] = i;
  Decisions out;
  std::map<std::string, std::string> failed;
  for (const auto& job : queue) {
    std::string key = job.resources.SerializeAsString();
    auto memo = failed.find(key);
    if (memo != failed.end()) {
      out.waiting[job.job_id] = memo->second;
      continue;
    }
    Placement placement;
    std::string reason;
    if (!PlaceGang(nodes, job.resources, &placement, &reason)) {
      failed[key] = reason;
      out.waiting[job.job_id] = reason;
      continue;
    }
    for (const auto& share : placement.shares) {
      Consume(&nodes[index[share.node]], share);
    }
    out.starts.emplace_back(job.job_id, std::move(placement));
  }
  return out;
}

}  // namespace baseline

namespace {

namespace sched = xl::scheduler;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kGiB = 1ull << 30;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// CPU time of this thread: the machine is shared, and wall time counts the
// time other processes had the core.
double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Medians of wall and CPU milliseconds.
struct Timing {
  std::vector<double> wall, cpu;
  template <typename F>
  void Run(F&& f) {
    Clock::time_point t0 = Clock::now();
    double c0 = CpuMs();
    f();
    cpu.push_back(CpuMs() - c0);
    wall.push_back(Ms(Clock::now() - t0));
  }
  static double Median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double wall_ms() const { return Median(wall); }
  double cpu_ms() const { return Median(cpu); }
};

const absl::Time kBenchNow = absl::FromUnixSeconds(1800000000);

// One fleet and one queue, in both forms.
struct Inputs {
  std::vector<sched::NodeCapacity> nodes;
  // One running job per busy node, ending within a day (for reservations).
  std::vector<sched::RunningGang> running;
  std::vector<sched::JobRequest> queue;
  std::vector<baseline::NodeCapacity> old_nodes;
  std::vector<baseline::JobRequest> old_queue;
};

// 8 x 80 GiB GPUs, 128 CPUs, 2 TiB, 8 TiB NVMe, 400 Gbit/s; 32 nodes per
// switch, 4 switches per rack. About half the GPUs are busy: 35% of the
// nodes full, 30% half full, the rest idle; 1% drained.
void BuildFleet(int count, bool with_baseline, Inputs* in) {
  std::mt19937 rng(7);
  for (int i = 0; i < count; ++i) {
    xl::v1::NodeInventory inv;
    std::string name = absl::StrFormat("node%05d", i);
    inv.set_hostname(name);
    inv.set_cpus(128);
    inv.set_memory_bytes(2048 * kGiB);
    (*inv.mutable_labels())["switch"] = absl::StrFormat("sw%04d", i / 32);
    (*inv.mutable_labels())["rack"] = absl::StrFormat("rack%03d", i / 128);
    for (int g = 0; g < 8; ++g) {
      auto* gpu = inv.add_gpus();
      gpu->set_index(g);
      gpu->set_model("NVIDIA H100 80GB HBM3");
      gpu->set_memory_bytes(80 * kGiB);
    }
    inv.add_nvme()->set_free_bytes(8192 * kGiB);
    inv.add_nics()->set_gbps(400);

    sched::NodeCapacity cap =
        sched::NodeCapacity::Empty(sched::NodeInfo::FromInventory(name, inv));
    int busy = 0;
    const int r = rng() % 100;
    if (r < 35) {
      busy = 8;
    } else if (r < 65) {
      busy = 4;
    }
    uint64_t busy_mask = 0;
    std::vector<int> order = {0, 1, 2, 3, 4, 5, 6, 7};
    std::shuffle(order.begin(), order.end(), rng);
    for (int k = 0; k < busy; ++k) busy_mask |= uint64_t{1} << order[k];
    cap.gpu_free &= ~busy_mask;
    cap.cpus_free -= 12 * busy;
    cap.memory_free -= 64 * kGiB * busy;
    if (busy > 0) {
      sched::RunningGang gang;
      gang.job_id = absl::StrCat("r", i);
      gang.nodes = {name};
      gang.gpus = busy;
      gang.expected_end = kBenchNow + absl::Minutes(1 + rng() % 1440);
      sched::NodeShare& share = gang.shares.emplace_back();
      share.node = name;
      for (int g = 0; g < 8; ++g) {
        if (busy_mask >> g & 1) share.gpu_indices.push_back(g);
      }
      share.cpus = 12 * busy;
      share.memory_bytes = 64 * kGiB * busy;
      in->running.push_back(std::move(gang));
    }
    if (rng() % 100 == 0) cap.unavailable = "drained (maintenance)";
    if (with_baseline) {
      baseline::NodeCapacity old = baseline::NodeCapacity::Empty(name, inv);
      for (int g = 0; g < 8; ++g) old.gpu_free[g] = (busy_mask >> g & 1) == 0;
      old.cpus_free = cap.cpus_free;
      old.memory_free = cap.memory_free;
      old.unavailable = cap.unavailable;
      in->old_nodes.push_back(std::move(old));
    }
    in->nodes.push_back(std::move(cap));
  }
}

// Gang shapes (nodes x GPUs) with weights out of 100, a few memory floors and
// priorities. Equal requests share one object, as the control layer does.
void BuildQueue(int count, bool with_baseline, Inputs* in) {
  struct Shape {
    int nodes, gpus, weight;
  };
  const Shape kShapes[] = {{1, 1, 30}, {1, 2, 10}, {1, 4, 10}, {1, 8, 20},
                           {2, 8, 10}, {4, 8, 8},  {8, 8, 6},  {16, 8, 3},
                           {32, 8, 2}, {64, 8, 1}};
  const uint64_t kFloors[] = {0, 40 * kGiB, 80 * kGiB};
  std::vector<std::shared_ptr<const xl::v1::ResourceRequest>> requests;
  std::vector<int> weights;
  for (const Shape& s : kShapes) {
    for (uint64_t floor : kFloors) {
      auto r = std::make_shared<xl::v1::ResourceRequest>();
      r->set_nodes(s.nodes);
      r->set_gpus_per_node(s.gpus);
      r->set_ranks_per_node(s.gpus);
      r->set_min_gpu_memory_bytes(floor);
      r->set_cpus_per_node(12 * s.gpus);
      r->set_memory_bytes_per_node(64 * kGiB * s.gpus);
      requests.push_back(r);
      weights.push_back(s.weight);
    }
  }
  std::mt19937 rng(11);
  // Time limits (10 min to a day) from a stream of their own: the queue
  // without reservations stays the one the table above was measured on.
  std::mt19937 limits(13);
  std::discrete_distribution<int> shape(weights.begin(), weights.end());
  for (int i = 0; i < count; ++i) {
    sched::JobRequest job;
    job.job_id = absl::StrCat("job-", i);
    const int p = rng() % 100;
    job.priority = p < 70 ? 0 : p < 90 ? 1 : 5;
    job.submit_seq = i;
    job.resources = requests[shape(rng)];
    job.queue = "default";
    job.time_limit = absl::Minutes(10 + limits() % 1430);
    if (with_baseline) {
      in->old_queue.push_back(
          {job.job_id, job.priority, job.submit_seq, *job.resources});
    }
    in->queue.push_back(std::move(job));
  }
}

bool SameDecisions(const sched::Decisions& a, const baseline::Decisions& b) {
  if (a.starts.size() != b.starts.size()) return false;
  if (a.waiting.size() != b.waiting.size()) return false;
  for (size_t i = 0; i < a.starts.size(); ++i) {
    if (a.starts[i].first != b.starts[i].first) return false;
    const auto& x = a.starts[i].second.shares;
    const auto& y = b.starts[i].second.shares;
    if (x.size() != y.size()) return false;
    for (size_t k = 0; k < x.size(); ++k) {
      if (x[k].node != y[k].node || x[k].gpu_indices != y[k].gpu_indices) {
        return false;
      }
    }
  }
  for (const auto& [id, reason] : a.waiting) {
    auto it = b.waiting.find(id);
    if (it == b.waiting.end() || it->second != *reason) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int max_nodes = 10000, max_pending = 100000;
  double baseline_limit_s = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--max-nodes"))
      max_nodes = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max-pending"))
      max_pending = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--baseline-limit-s")) {
      baseline_limit_s = std::atof(argv[i + 1]);
    }
  }
  std::printf("%6s %8s | %8s %8s %6s %6s %9s | %11s %11s %6s %4s | %11s %6s %5s"
              " | %11s %6s %6s %7s | %10s %5s\n",
              "nodes", "pending", "new ms", "cpu ms", "starts", "shares",
              "starts/s", "baseline ms", "cpu ms", "ratio", "same",
              "+8 resv ms", "starts", "resv", "+policy ms", "starts",
              "held", "preempt", "est ms", "est");
  // Seconds of the last baseline pass per queue size, to predict the next:
  // the old pass costs about nodes x (starts + classes), and starts grow
  // with nodes, so it grows with the square of the fleet.
  std::map<int, std::pair<int, double>> last_baseline;
  // A pass whose decisions differ from the algorithm it replaced fails the
  // run (ctest runs the smallest size: schedule_bench_same_decisions).
  int mismatches = 0;
  for (int pending : {10000, 100000}) {
    if (pending > max_pending) continue;
    for (int nodes : {1000, 5000, 10000}) {
      if (nodes > max_nodes) continue;
      double predicted_s = 0;
      if (last_baseline.count(pending) > 0) {
        auto [n, s] = last_baseline[pending];
        predicted_s = s * (double(nodes) / n) * (double(nodes) / n);
      }
      const bool run_baseline = predicted_s <= baseline_limit_s;
      Inputs in;
      BuildFleet(nodes, run_baseline, &in);
      BuildQueue(pending, run_baseline, &in);

      Timing now;
      sched::Decisions d;
      for (int r = 0; r < 9; ++r) {
        sched::ClusterSnapshot snap;
        snap.nodes = in.nodes;
        std::vector<sched::JobRequest> queue = in.queue;
        now.Run(
            [&] { d = sched::Schedule(std::move(snap), std::move(queue)); });
      }
      size_t shares = 0;
      for (const auto& [id, p] : d.starts) shares += p.shares.size();

      // The same pass with reservations for the first 8 blocked jobs (EASY
      // backfill), against the running jobs' ends.
      Timing reserving;
      sched::Decisions rd;
      for (int r = 0; r < 9; ++r) {
        sched::ClusterSnapshot snap;
        snap.nodes = in.nodes;
        snap.running = in.running;
        snap.now = kBenchNow;
        snap.max_reservations = 8;
        std::vector<sched::JobRequest> queue = in.queue;
        reserving.Run(
            [&] { rd = sched::Schedule(std::move(snap), std::move(queue)); });
      }

      // The estimator's pass (xl-scheduler runs it every minute on a thread
      // of its own): a reservation for each of the first 1,000 blocked
      // jobs, nothing preempted.
      Timing estimating;
      sched::Decisions ed;
      for (int r = 0; r < 3; ++r) {
        sched::ClusterSnapshot snap;
        snap.nodes = in.nodes;
        snap.running = in.running;
        snap.now = kBenchNow;
        snap.max_reservations = 1000;
        std::vector<sched::JobRequest> queue = in.queue;
        estimating.Run(
            [&] { ed = sched::Schedule(std::move(snap), std::move(queue)); });
      }

      // And with every policy on: the jobs in 8 queues of 50 users, four
      // queues with GPU quotas (two cohorts, borrowing and lending limits),
      // two with per-user GPU limits, effective priorities from fair share
      // (as the controller sets them), running jobs charged to queues and
      // preemptible, preemption on.
      Timing policing;
      sched::Decisions pd;
      {
        std::map<std::string, sched::QueuePolicy> policies;
        for (int q = 0; q < 8; ++q) {
          sched::QueuePolicy p;
          p.name = absl::StrCat("q", q);
          if (q < 4) {
            p.cohort = q < 2 ? "c0" : "c1";
            p.quotas["*"] = {int64_t{nodes} * 8 / 8, q % 2 == 0 ? -1 : 800,
                             q % 2 == 0 ? 400 : -1};
          }
          if (q == 4 || q == 5) p.max_running_gpus_per_user = 64;
          if (q < 6) policies[p.name] = p;
        }
        std::map<std::string, sched::QueueUsage> usage;
        std::mt19937 qrng(17);
        for (const auto& g : in.running) {
          sched::QueueUsage& u = usage[absl::StrCat("q", qrng() % 8)];
          u.gpus_by_model["NVIDIA H100 80GB HBM3"] += g.gpus;
          u.user_gpus[absl::StrCat("u", qrng() % 50)] += g.gpus;
          ++u.running_jobs;
        }
        std::vector<sched::JobRequest> queue = in.queue;
        std::vector<double> factor(400);
        for (double& f : factor) f = (qrng() % 1000) / 1000.0;
        for (auto& job : queue) {
          const int q = qrng() % 8, u = qrng() % 50;
          job.queue = absl::StrCat("q", q);
          job.user = absl::StrCat("u", u);
          job.effective_priority = job.priority + 100 * factor[q * 50 + u];
        }
        // The running jobs may be preempted by the queue's higher
        // priorities (up to 4 preemptors a pass, as the scheduler runs).
        std::vector<sched::RunningGang> running = in.running;
        for (auto& g : running) {
          g.queue = absl::StrCat("q", qrng() % 8);
          g.user = absl::StrCat("u", qrng() % 50);
          g.preemptible = true;
          g.ran = absl::Minutes(qrng() % 600);
        }
        for (int r = 0; r < 9; ++r) {
          sched::ClusterSnapshot snap;
          snap.nodes = in.nodes;
          snap.running = running;
          snap.now = kBenchNow;
          snap.max_reservations = 8;
          snap.preemption = true;
          snap.policies = policies;
          snap.queues = usage;
          std::vector<sched::JobRequest> copy = queue;
          policing.Run(
              [&] { pd = sched::Schedule(std::move(snap), std::move(copy)); });
        }
      }

      std::string base = "-", base_cpu = "-", ratio = "-", same = "-";
      if (!run_baseline) {
        base = absl::StrFormat("skip ~%.0fs", predicted_s);
      } else {
        Timing old;
        baseline::Decisions od;
        for (int r = 0; r < 3; ++r) {
          std::vector<baseline::NodeCapacity> nodes_copy = in.old_nodes;
          std::vector<baseline::JobRequest> queue_copy = in.old_queue;
          old.Run([&] {
            od = baseline::Schedule(std::move(nodes_copy),
                                    std::move(queue_copy));
          });
          if (old.wall.back() > 2000) break;  // one long run is enough
        }
        last_baseline[pending] = {nodes, old.wall_ms() / 1000};
        base = absl::StrFormat("%.1f", old.wall_ms());
        base_cpu = absl::StrFormat("%.1f", old.cpu_ms());
        ratio = absl::StrFormat("%.0fx", old.cpu_ms() / now.cpu_ms());
        same = SameDecisions(d, od) ? "yes" : "NO";
        if (!SameDecisions(d, od)) ++mismatches;
      }
      std::printf(
          "%6d %8d | %8.2f %8.2f %6zu %6zu %9.0f | %11s %11s %6s %4s | %11.2f "
          "%6zu %5zu | %11.2f %6zu %6zu %7zu | %10.1f %5zu\n",
          nodes, pending, now.wall_ms(), now.cpu_ms(), d.starts.size(), shares,
          d.starts.size() / (now.cpu_ms() / 1000), base.c_str(),
          base_cpu.c_str(), ratio.c_str(), same.c_str(), reserving.cpu_ms(),
          rd.starts.size(), rd.reservations.size(), policing.cpu_ms(),
          pd.starts.size(), pd.job_reasons.size(), pd.preemptions.size(),
          estimating.cpu_ms(), ed.reservations.size());
      std::fflush(stdout);
    }
  }
  if (mismatches > 0) {
    std::printf("\n%d of the sizes above decided otherwise than the baseline "
                "(same: NO)\n", mismatches);
    return 1;
  }
  return 0;
}
