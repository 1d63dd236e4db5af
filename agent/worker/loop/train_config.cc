// TrainConfig resolution: TrainSpec -> TrainConfig with defaults and range
// checks. Stateless; safe from any thread.
#include "agent/worker/loop/train_config.h"

#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "common/train_spec.h"

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

absl::StatusOr<TrainConfig> ResolveTrainSpec(const v1::TrainSpec& spec,
                                             bool node_has_gpus) {
  TrainConfig c;
  c.device = spec.device();
  if (c.device.empty()) c.device = node_has_gpus ? "cuda" : "cpu";
  // The bounds the scheduler checked at submit (common/train_spec.h): a
  // spec it accepted passes here.
  absl::Status checked = train_spec::Check(spec, c.device == "cpu");
  if (!checked.ok()) return checked;
  const v1::TrainSpec t = train_spec::WithDefaults(spec);
  c.input_dim = t.input_dim();
  c.hidden_dim = t.hidden_dim();
  c.hidden_layers = t.hidden_layers();
  c.classes = t.classes();
  c.batch_per_rank = spec.batch_per_rank() != 0
                         ? spec.batch_per_rank()
                         : train_spec::kDefaultBatchPerRank;
  c.batch_auto = spec.batch_per_rank_auto();
  c.global_batch = t.global_batch();
  c.steps = t.steps();
  c.learning_rate = t.learning_rate();
  c.weight_decay = t.weight_decay();
  c.checkpoint_every = t.checkpoint_every();
  c.seed = t.seed();
  c.metrics_every = t.metrics_every();
  c.bucket_bytes = t.bucket_bytes();
  c.shards = t.data().shards();
  if (t.has_collective_timeout()) {
    c.collective_timeout = FromProto(t.collective_timeout());
  }
  c.precision = t.precision() != v1::PRECISION_UNSPECIFIED ? t.precision()
                : c.device == "cuda"                          ? v1::BF16
                                                              : v1::FP32;
  return c;
}

}  // namespace xl::worker
