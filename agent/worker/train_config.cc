// TrainConfig resolution: TrainSpec -> TrainConfig with defaults and range
// checks. Stateless; safe from any thread.
#include "agent/worker/train_config.h"

#include "absl/strings/str_cat.h"
#include "common/duration.h"

namespace xl::worker {

std::vector<int> TrainConfig::Widths() const {
  std::vector<int> w;
  w.push_back(input_dim);
  for (int i = 0; i < hidden_layers; ++i) w.push_back(hidden_dim);
  w.push_back(classes);
  return w;
}

int64_t TrainConfig::ParamCount() const {
  std::vector<int> w = Widths();
  int64_t n = 0;
  for (size_t l = 1; l < w.size(); ++l) {
    n += static_cast<int64_t>(w[l]) * w[l - 1] + w[l];
  }
  return n;
}

namespace {

absl::Status Range(const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.", field, ": must be between ", lo, " and ", hi, ", got ", v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainConfig> ResolveTrainSpec(const v1::TrainSpec& spec,
                                             bool node_has_gpus) {
  TrainConfig c;
  if (spec.input_dim() != 0) c.input_dim = spec.input_dim();
  if (spec.hidden_dim() != 0) c.hidden_dim = spec.hidden_dim();
  if (spec.hidden_layers() != 0) c.hidden_layers = spec.hidden_layers();
  if (spec.classes() != 0) c.classes = spec.classes();
  if (spec.batch_per_rank() != 0) c.batch_per_rank = spec.batch_per_rank();
  if (spec.batch_per_rank_auto()) {
    if (spec.batch_per_rank() != 0) {
      return absl::InvalidArgumentError(
          "train.batch_per_rank: give a number or auto, not both "
          "(batch_per_rank_auto is set)");
    }
    c.batch_auto = true;
  }
  c.global_batch = spec.global_batch();
  if (spec.steps() != 0) c.steps = spec.steps();
  if (spec.learning_rate() != 0) c.learning_rate = spec.learning_rate();
  // weight_decay 0 is a legitimate choice but indistinguishable from "unset"
  // in proto3; unset means the default 0.01. Use a tiny value to disable.
  if (spec.weight_decay() != 0) c.weight_decay = spec.weight_decay();
  c.checkpoint_every = spec.checkpoint_every();
  if (spec.seed() != 0) c.seed = spec.seed();
  if (spec.metrics_every() != 0) c.metrics_every = spec.metrics_every();
  if (spec.bucket_bytes() != 0) c.bucket_bytes = spec.bucket_bytes();
  c.shards = spec.data().shards();
  if (spec.has_collective_timeout()) {
    c.collective_timeout = FromProto(spec.collective_timeout());
    if (c.collective_timeout < absl::Seconds(1) ||
        c.collective_timeout > absl::Hours(24)) {
      return absl::InvalidArgumentError(
          "train.collective_timeout: must be between 1s and 24h (unset: "
          "120s on CPU, 300s on CUDA)");
    }
  }

  absl::Status st;
  if (!(st = Range("input_dim", c.input_dim, 1, 1 << 20)).ok()) return st;
  if (!(st = Range("hidden_dim", c.hidden_dim, 1, 65536)).ok()) return st;
  if (!(st = Range("hidden_layers", c.hidden_layers, 0, 1024)).ok()) return st;
  if (!(st = Range("classes", c.classes, 2, 1 << 20)).ok()) return st;
  if (!(st = Range("batch_per_rank", c.batch_per_rank, 1, 1 << 20)).ok()) {
    return st;
  }
  if (!(st = Range("global_batch", c.global_batch, 0, 1 << 30)).ok()) {
    return st;
  }
  if (!(st = Range("steps", c.steps, 1, INT32_MAX)).ok()) return st;
  if (!(st = Range("checkpoint_every", c.checkpoint_every, 0, INT32_MAX))
           .ok()) {
    return st;
  }
  if (!(st = Range("metrics_every", c.metrics_every, 1, INT32_MAX)).ok()) {
    return st;
  }
  if (!(c.learning_rate > 0 && c.learning_rate < 10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.learning_rate: must be in (0, 10), got ", c.learning_rate));
  }
  if (!(c.weight_decay >= 0 && c.weight_decay < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.weight_decay: must be in [0, 1), got ", c.weight_decay));
  }
  if (c.bucket_bytes < 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.bucket_bytes: must be at least 4096, got ", c.bucket_bytes));
  }
  if (spec.data().synthetic() && !c.shards.empty()) {
    return absl::InvalidArgumentError(
        "train.data: set either synthetic or shards, not both");
  }

  c.device = spec.device();
  if (c.device.empty()) c.device = node_has_gpus ? "cuda" : "cpu";
  if (c.device != "cpu" && c.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.device: must be \"cpu\" or \"cuda\", got \"", c.device, "\""));
  }

  switch (spec.precision()) {
    case v1::PRECISION_UNSPECIFIED:
      c.precision = c.device == "cuda" ? v1::BF16 : v1::FP32;
      break;
    case v1::FP32:
    case v1::BF16:
    case v1::FP16:
      c.precision = spec.precision();
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("train.precision: unknown value ",
                       static_cast<int>(spec.precision())));
  }
  if (c.device == "cpu" && c.precision != v1::FP32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.precision: ", v1::Precision_Name(c.precision),
        " is not supported on device cpu; the CPU path is fp32 (use FP32 or "
        "device cuda)"));
  }
  return c;
}

}  // namespace xl::worker
