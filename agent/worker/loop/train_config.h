// TrainConfig: xl-train's settings, resolved from xl.v1.TrainSpec with the
// defaults filled in, and the model's math that every backend (CPU/Gloo and
// CUDA/NCCL) must follow exactly, so their results can be compared.
//
// The model. L = hidden_layers + 1 linear layers; widths d_0 = input_dim,
// d_1..d_{L-1} = hidden_dim, d_L = classes. Layer l maps d_{l-1} -> d_l with
// W_l [d_l x d_{l-1}] (row-major) and b_l [d_l]; ReLU after every layer but
// the last; the last feeds a softmax cross-entropy against integer labels,
// averaged over the rank's batch. The gradient all-reduce averages over
// ranks, so the update equals the one for the global batch.
//
// Parameters live in one flat fp32 buffer: W_1, b_1, W_2, b_2, ... Init:
// W_l[i] ~ Uniform(-1/sqrt(d_{l-1}), +1/sqrt(d_{l-1})) from the counter RNG
// keyed (seed, kInitStream + l, i); b_l = 0. Same on every rank.
//
// AdamW: beta1 0.9, beta2 0.999, eps 1e-8, bias-corrected, constant
// learning rate; decoupled weight decay (w -= lr * wd * w) on W only.
//
// Data (synthetic): sample n of the run (n = step * world * batch + rank *
// batch + i, so N ranks of batch b see what one rank of batch N*b sees;
// batch = StepBatch(), so k micro-batches of b see what one batch of k*b
// sees) has
// x[j] ~ Normal(0,1) from the counter RNG keyed (seed, kDataStream + n, j)
// and label argmax of a fixed teacher: input_dim -> 64 tanh -> classes, its
// weights Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) keyed (seed,
// kTeacherStream + layer, i), biases 0.
#ifndef XL_AGENT_WORKER_LOOP_TRAIN_CONFIG_H_
#define XL_AGENT_WORKER_LOOP_TRAIN_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/train_spec.h"
#include "xl/v1/job.pb.h"

namespace xl::worker {

inline constexpr uint64_t kInitStream = 1ull << 40;
inline constexpr uint64_t kTeacherStream = 2ull << 40;
inline constexpr uint64_t kDataStream = 3ull << 40;
inline constexpr int kTeacherHidden = 64;

// Defaults: common/train_spec.h, the one definition the scheduler uses too.
struct TrainConfig {
  int input_dim = train_spec::kDefaultInputDim;
  int hidden_dim = train_spec::kDefaultHiddenDim;
  int hidden_layers = train_spec::kDefaultHiddenLayers;
  int classes = train_spec::kDefaultClasses;
  // The batch each rank runs at once (a micro-batch when accumulating).
  int batch_per_rank = train_spec::kDefaultBatchPerRank;
  // TrainSpec.batch_per_rank_auto: FitBatch sets batch_per_rank at start.
  bool batch_auto = false;
  // TrainSpec.global_batch (0: none); FitBatch derives accumulation_steps.
  int global_batch = 0;
  // Micro-batches per optimizer step per rank.
  int accumulation_steps = 1;
  int64_t steps = train_spec::kDefaultSteps;
  double learning_rate = train_spec::kDefaultLearningRate;
  double weight_decay = train_spec::kDefaultWeightDecay;
  v1::Precision precision = v1::FP32;
  int checkpoint_every = 0;
  uint64_t seed = train_spec::kDefaultSeed;
  std::string device = "cpu";      // "cpu" or "cuda"
  std::string shards;              // empty: synthetic teacher data
  int metrics_every = train_spec::kDefaultMetricsEvery;
  uint64_t bucket_bytes = train_spec::kDefaultBucketBytes;
  // TrainSpec.collective_timeout; zero: the collective's own default.
  absl::Duration collective_timeout = absl::ZeroDuration();

  // Samples per rank per optimizer step: what the data's sample numbering
  // (data.h) calls the batch.
  int StepBatch() const { return batch_per_rank * accumulation_steps; }
  // Widths d_0..d_L.
  std::vector<int> Widths() const;
  // Total parameters (weights and biases).
  int64_t ParamCount() const;
};

// Fills defaults and checks ranges; INVALID_ARGUMENT names the TrainSpec
// field ("train.hidden_dim: must be between 1 and 65536").
absl::StatusOr<TrainConfig> ResolveTrainSpec(const v1::TrainSpec& spec,
                                             bool node_has_gpus);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_LOOP_TRAIN_CONFIG_H_
