#include "common/train_spec.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "common/duration.h"

namespace xl::train_spec {
namespace {

absl::Status Bad(const char* field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("train.", field, ": ", what));
}

// lo..hi once the default is in (0 stays valid: it is the default).
absl::Status Range(const char* field, int64_t given, int64_t lo, int64_t hi) {
  if (given != 0 && (given < lo || given > hi)) {
    return Bad(field, absl::StrCat("must be between ", lo, " and ", hi,
                                   " (0 or unset: the default), got ", given));
  }
  return absl::OkStatus();
}

}  // namespace

v1::TrainSpec WithDefaults(const v1::TrainSpec& spec) {
  v1::TrainSpec t = spec;
  if (t.input_dim() == 0) t.set_input_dim(kDefaultInputDim);
  if (t.hidden_dim() == 0) t.set_hidden_dim(kDefaultHiddenDim);
  if (t.hidden_layers() == 0) t.set_hidden_layers(kDefaultHiddenLayers);
  if (t.classes() == 0) t.set_classes(kDefaultClasses);
  if (t.steps() == 0) t.set_steps(static_cast<int32_t>(kDefaultSteps));
  if (t.learning_rate() == 0) t.set_learning_rate(kDefaultLearningRate);
  if (t.weight_decay() == 0) t.set_weight_decay(kDefaultWeightDecay);
  if (t.seed() == 0) t.set_seed(kDefaultSeed);
  if (t.metrics_every() == 0) t.set_metrics_every(kDefaultMetricsEvery);
  if (t.bucket_bytes() == 0) t.set_bucket_bytes(kDefaultBucketBytes);
  return t;
}

absl::Status Check(const v1::TrainSpec& t, bool on_cpu) {
  struct Bound {
    const char* field;
    int64_t value, lo, hi;
  };
  for (const Bound& b : {Bound{"input_dim", t.input_dim(), 1, 1 << 16},
                         Bound{"hidden_dim", t.hidden_dim(), 1, 1 << 16},
                         Bound{"hidden_layers", t.hidden_layers(), 1, 256},
                         Bound{"classes", t.classes(), 2, 1 << 20},
                         Bound{"batch_per_rank", t.batch_per_rank(), 1, 1 << 20},
                         Bound{"global_batch", t.global_batch(), 1, 1 << 30},
                         Bound{"steps", t.steps(), 1, INT32_MAX},
                         Bound{"checkpoint_every", t.checkpoint_every(), 1,
                               INT32_MAX},
                         Bound{"metrics_every", t.metrics_every(), 1,
                               INT32_MAX}}) {
    absl::Status st = Range(b.field, b.value, b.lo, b.hi);
    if (!st.ok()) return st;
  }
  // Doubles: NaN fails every comparison, so each test is written to pass
  // only for a number in range.
  if (t.learning_rate() != 0 &&
      !(t.learning_rate() > 0 && t.learning_rate() < 10)) {
    return Bad("learning_rate",
               absl::StrCat("must be in (0, 10) (0 or unset: ",
                            kDefaultLearningRate, "), got ", t.learning_rate()));
  }
  if (t.weight_decay() != 0 &&
      !(t.weight_decay() > 0 && t.weight_decay() < 1)) {
    return Bad("weight_decay",
               absl::StrCat("must be in [0, 1) (0 or unset: ",
                            kDefaultWeightDecay,
                            "; a tiny value such as 1e-12 for none), got ",
                            t.weight_decay()));
  }
  if (t.bucket_bytes() != 0 && t.bucket_bytes() < 4096) {
    return Bad("bucket_bytes", absl::StrCat("must be at least 4096 (unset: ",
                                            kDefaultBucketBytes, "), got ",
                                            t.bucket_bytes()));
  }
  if (t.has_collective_timeout()) {
    const absl::Duration d = FromProto(t.collective_timeout());
    if (d < absl::Seconds(1) || d > absl::Hours(24)) {
      return Bad("collective_timeout",
                 "must be between 1s and 24h (unset: 120s on CPU, 300s on "
                 "CUDA)");
    }
  }
  if (t.data().synthetic() && !t.data().shards().empty()) {
    return Bad("data", "set either synthetic or shards, not both");
  }
  if (!t.device().empty() && t.device() != "cpu" && t.device() != "cuda") {
    return Bad("device", "must be \"cpu\" or \"cuda\" (unset: cuda where the "
                         "job has GPUs)");
  }
  if (!v1::Precision_IsValid(t.precision())) {
    return Bad("precision",
               absl::StrCat("unknown value ", static_cast<int>(t.precision()),
                            "; use FP32, BF16 or FP16"));
  }
  if (on_cpu && (t.precision() == v1::BF16 || t.precision() == v1::FP16)) {
    return Bad("precision",
               absl::StrCat(v1::Precision_Name(t.precision()),
                            " is not supported on CPU: the CPU worker trains "
                            "in fp32; use FP32, or device cuda with GPUs"));
  }
  if (t.batch_per_rank_auto() && t.batch_per_rank() != 0) {
    return Bad("batch_per_rank",
               "give a number or auto, not both (batch_per_rank_auto is set)");
  }
  return absl::OkStatus();
}

}  // namespace xl::train_spec
