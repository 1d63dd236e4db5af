// The CPU data-parallel training loop of xl-train: resume, then per step
// batch -> forward/backward -> bucketed gradient all-reduce -> AdamW, with
// metrics from rank 0, periodic checkpoints, and a clean stop on SIGTERM.
// RunTraining runs on the calling thread (one per rank); the collective and
// sink are used from that thread only.
#ifndef XL_AGENT_WORKER_LOOP_TRAINER_H_
#define XL_AGENT_WORKER_LOOP_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "agent/worker/comm/collective.h"
#include "agent/worker/loop/metrics.h"
#include "agent/worker/loop/train_config.h"
#include "agent/worker/model/mlp.h"

namespace xl::worker {

struct RankInfo {
  int rank = 0;
  int world = 1;
  std::string job_id;
  int attempt = 0;
};

struct TrainOptions {
  // Set (by a SIGTERM handler) to stop: the current step finishes, every rank
  // agrees on the stop at the end of the step, rank 0 writes a checkpoint.
  const std::atomic<bool>* stop = nullptr;
  // For tests: after this many completed steps (and their checkpoint, if
  // due) return ABORTED without a final checkpoint, as a killed process
  // would. 0: never.
  int64_t crash_after_steps = 0;
  // When set, receives the parameters at the end.
  std::vector<float>* final_params = nullptr;
  int keep_checkpoints = 3;
  // For batch_per_rank_auto on CPU: this rank's memory budget in bytes;
  // 0: from the environment (CpuRankBudgetFromEnv).
  double memory_budget_bytes = 0;
};

// The process-wide stop flag that InstallSigtermHandler()'s handler sets
// (async-signal-safe store). Both the CPU and the CUDA trainer poll it.
std::atomic<bool>* SigtermFlag();
// Installs a SIGTERM (and SIGINT) handler that sets *SigtermFlag().
void InstallSigtermHandler();

// Contiguous, layer-aligned [offset, count) ranges of the flat gradient
// buffer, last layer first (the order backward produces them), each about
// bucket_bytes (a layer larger than that is a bucket of its own).
std::vector<std::pair<int64_t, int64_t>> GradientBuckets(
    const std::vector<LayerSpan>& layers, uint64_t bucket_bytes);

// What a run's metrics intervals share: the rank, the (resolved) batch, the
// gradient buckets' sizes, the steps; params, peak and precision are the
// caller's to add (the GPU path knows them).
MetricsInterval::Run MetricsRunFor(
    const RankInfo& info, const TrainConfig& config,
    const std::vector<std::pair<int64_t, int64_t>>& buckets, int64_t start);

// Trains `config` on this rank. `collective` (size == info.world) and `sink`
// are not owned; sink may be null and is used on rank 0 only.
// checkpoint_dir empty: no checkpoints (and no resume).
// Returns OK after config.steps steps; CANCELLED when stopped through
// options.stop (after the checkpoint is written; xl-train exits 143);
// UNAVAILABLE when a peer is lost; other errors from data and checkpoints.
absl::Status RunTraining(const TrainConfig& config, const RankInfo& info,
                         Collective* collective, MetricsSink* sink,
                         const std::string& checkpoint_dir,
                         const TrainOptions& options = {});

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_LOOP_TRAINER_H_
