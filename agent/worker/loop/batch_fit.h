// FitBatch: train.batch_per_rank_auto and train.global_batch resolved at
// start, when the rank knows its world size and its memory: the largest
// batch per rank whose model states and activations (the planner's memory
// model, MlpMemory) fit the budget, and the micro-batches per step that
// reach the global batch. Stateless; safe from any thread.
#ifndef XL_AGENT_WORKER_LOOP_BATCH_FIT_H_
#define XL_AGENT_WORKER_LOOP_BATCH_FIT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/worker/loop/train_config.h"

namespace xl::worker {

// The planner's description of `config`'s model.
v1::MlpShape MlpShapeOf(const TrainConfig& config);

// Process overhead a CPU rank keeps out of its share of the job's memory
// (the binary, BLAS and Gloo buffers, the allocator's slack).
inline constexpr uint64_t kCpuRankOverheadBytes = 256ull << 20;

// The largest batch per rank (at most 1 << 20) for which the memory model
// of `config` on CPU (`cpu`) or on a GPU fits `budget_bytes` less a margin:
// on a GPU the budget is the device memory free at start and the margin the
// planner's workspace (GpuUsableBytes); on CPU the budget is what
// CpuRankBudgetFromEnv gives and the margin 10%. 0 when not even one sample
// fits.
// On CPU `accumulation_steps` micro-batches share one step's input batch
// (held whole, twice over, by the producer); on a GPU the device holds two
// micro-batches of inputs whatever the micro-batches per step (the pinned
// host copies of whole steps are bounded by PinnedStepBatchCap instead).
int MaxBatchPerRank(const TrainConfig& config, bool cpu, double budget_bytes,
                    int accumulation_steps = 1);

// Resolves config->batch_per_rank (when batch_auto) and
// config->accumulation_steps (from global_batch) for `world` ranks;
// appends what it chose and why to *explain (one line). A step's samples
// per rank are also kept to max_step_batch (what the caller's input slots
// may hold; PinnedStepBatchCap on a GPU). Errors name the TrainSpec field,
// the numbers and the fix: a model that does not fit (with a fixed batch,
// checked on a GPU only: a CPU budget may be unknown), a global batch
// world x batch does not divide, a step over max_step_batch.
absl::Status FitBatch(TrainConfig* config, int world, bool cpu,
                      double budget_bytes, std::string* explain,
                      int max_step_batch = 1 << 20);

// Samples per step whose `slots` pinned host copies of the inputs take at
// most a quarter of HostMemoryPerRank() (at least 1, at most 1 << 20).
int PinnedStepBatchCap(const TrainConfig& config, int slots);

// FitBatch for a run that resumes from a checkpoint trained with batch per
// rank `resumed_batch` (0: a fresh start, or a checkpoint that did not
// record it). With batch_auto the checkpoint's batch is kept when it still
// fits, so the sample numbering (step x world x batch) goes on where it
// stopped; when it no longer fits (another GPU, less free memory) the
// batch is fitted anew and *explain says the data order changes.
absl::Status FitBatchForRun(TrainConfig* config, int world, bool cpu,
                            double budget_bytes, int resumed_batch,
                            std::string* explain,
                            int max_step_batch = 1 << 20);

// This rank's share of the host's memory: XL_MEMORY_BYTES_PER_NODE (or
// the machine's physical memory) over LOCAL_WORLD_SIZE.
double HostMemoryPerRank();

// A CPU rank's memory budget: XL_MEMORY_BYTES_PER_NODE (the scheduler sets
// it from resources.memory_bytes_per_node) over LOCAL_WORLD_SIZE, less
// kCpuRankOverheadBytes. FAILED_PRECONDITION naming the field when unset.
absl::StatusOr<double> CpuRankBudgetFromEnv();

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_LOOP_BATCH_FIT_H_
