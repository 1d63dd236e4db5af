// Test helper: runs N ranks of xl-train's CPU loop as threads of the test
// process, connected by GlooCollective over loopback through one
// InMemoryRendezvous. Each call uses fresh rendezvous keys.
#ifndef XL_TESTS_WORKER_RANK_THREADS_H_
#define XL_TESTS_WORKER_RANK_THREADS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/worker/comm/gloo_collective.h"
#include "agent/worker/loop/trainer.h"

namespace xl::worker::testing {

// Calls body(rank, collective) on `world` threads; returns each status.
// segment_bytes: GlooOptions::segment_bytes (0: the default).
inline std::vector<absl::Status> OnRanks(
    int world, const std::function<absl::Status(int, Collective*)>& body,
    size_t segment_bytes = 0) {
  static std::atomic<int> group{0};
  auto rdv = std::make_shared<InMemoryRendezvous>();
  GlooOptions opts;
  opts.hostname = "127.0.0.1";
  opts.timeout = absl::Seconds(20);
  opts.key_prefix = absl::StrCat("gloo/", group++, "/");
  opts.segment_bytes = segment_bytes;
  std::vector<absl::Status> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto c = GlooCollective::Create(r, world, rdv.get(), opts);
      if (!c.ok()) {
        out[r] = c.status();
        return;
      }
      out[r] = body(r, c->get());
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

struct RunResult {
  std::vector<absl::Status> status;
  std::vector<std::vector<float>> params;  // per rank
  std::vector<v1::TrainMetrics> reports;   // rank 0's
};

inline RunResult Train(const TrainConfig& config, int world,
                       const std::string& checkpoint_dir,
                       TrainOptions options = {}) {
  RunResult res;
  res.params.resize(world);
  RecordingMetricsSink sink;
  res.status = OnRanks(world, [&](int rank, Collective* c) {
    RankInfo info;
    info.rank = rank;
    info.world = world;
    info.job_id = "test";
    TrainOptions o = options;
    o.final_params = &res.params[rank];
    return RunTraining(config, info, c, &sink, checkpoint_dir, o);
  });
  res.reports = sink.reports();
  return res;
}

}  // namespace xl::worker::testing

#endif  // XL_TESTS_WORKER_RANK_THREADS_H_
