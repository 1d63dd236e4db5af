// xl-train's TrainSpec in one place: its defaults and the bounds of every
// field. The scheduler checks a job's spec with CheckTrainSpec at submit,
// sizes it with the defaults, and xl-train resolves it with both, so a spec
// the scheduler accepts is one every rank runs (before this file the three
// disagreed: weight_decay 2 was accepted at submit and failed on every rank
// of every attempt). Pure; thread-safe.
#ifndef XL_COMMON_TRAIN_SPEC_H_
#define XL_COMMON_TRAIN_SPEC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "xl/v1/job.pb.h"

namespace xl::train_spec {

// What a field left 0 (unset, in proto3) means.
inline constexpr int kDefaultInputDim = 256;
inline constexpr int kDefaultHiddenDim = 1024;
inline constexpr int kDefaultHiddenLayers = 2;
inline constexpr int kDefaultClasses = 16;
inline constexpr int kDefaultBatchPerRank = 64;
inline constexpr int64_t kDefaultSteps = 100;
inline constexpr double kDefaultLearningRate = 1e-3;
// weight_decay 0 is unset: the default applies (give a tiny value for none).
inline constexpr double kDefaultWeightDecay = 0.01;
inline constexpr uint64_t kDefaultSeed = 1;
inline constexpr int kDefaultMetricsEvery = 10;
inline constexpr uint64_t kDefaultBucketBytes = 25ull << 20;

// The spec with every unset field given its default (device, precision and
// the batch stay as given: they depend on the node and the job).
v1::TrainSpec WithDefaults(const v1::TrainSpec& spec);

// Every field on its own and with the others, the node aside:
// INVALID_ARGUMENT "train.<field>: must be ..., got ..." for the first
// wrong one. `on_cpu`: the job runs on CPU (device "cpu", or unset without
// GPUs), where only fp32 exists.
absl::Status Check(const v1::TrainSpec& spec, bool on_cpu);

}  // namespace xl::train_spec

#endif  // XL_COMMON_TRAIN_SPEC_H_
