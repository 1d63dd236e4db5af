// The planner's input: ValidateModelSpec (every error names its field and
// the fix) and WithDefaults.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/planner/gpu_catalogue.h"
#include "common/planner/planner.h"
#include "common/planner/planner_internal.h"

namespace xl::planner {

// This file and planner.cc define and use the internal parts.
using namespace internal;  // NOLINT(build/namespaces)

// ---- validation and defaults ------------------------------------------------

absl::Status ValidateModelSpec(const v1::ModelSpec& m) {
  const v1::TransformerShape& t = m.transformer();
  const bool shape = HasShape(t);
  const bool mlp = HasMlp(m.mlp());
  const bool params = m.parameters() != 0;
  if (!std::isfinite(m.parameters()) || m.parameters() < 0) {
    return Invalid("parameters", "must be a positive count, like 7.5e9");
  }
  if (params + shape + mlp == 0) {
    return Invalid("parameters",
                   "required: give parameters (like 7.5e9), a transformer "
                   "shape or an mlp shape");
  }
  if (params + shape + mlp > 1) {
    return Invalid("parameters",
                   "give one of parameters, transformer and mlp, not several "
                   "(with parameters, only transformer.sequence_length may be "
                   "set)");
  }
  if (!v1::Precision_IsValid(m.precision())) {
    return Invalid("precision", "unknown value; use FP32, BF16 or FP16");
  }
  if (!v1::Optimizer_IsValid(m.optimizer())) {
    return Invalid("optimizer",
                   "unknown value; use ADAMW, SGD_MOMENTUM or ADAFACTOR");
  }
  if (!v1::Sharding_IsValid(m.sharding())) {
    return Invalid("sharding",
                   "unknown value; use NO_SHARDING, ZERO_1, ZERO_2 or ZERO_3");
  }
  if (!v1::Recompute_IsValid(m.recompute())) {
    return Invalid("recompute",
                   "unknown value; use NO_RECOMPUTE, SELECTIVE or FULL");
  }
  if (t.sequence_length() < 0) {
    return Invalid("transformer.sequence_length", "must be positive");
  }
  if (shape) {
    struct {
      const char* name;
      int32_t value;
    } fields[] = {{"layers", t.layers()},
                  {"hidden_size", t.hidden_size()},
                  {"heads", t.heads()},
                  {"vocab_size", t.vocab_size()},
                  {"sequence_length", t.sequence_length()}};
    for (const auto& f : fields) {
      if (f.value <= 0) {
        return Invalid(absl::StrCat("transformer.", f.name),
                       "required and positive in a transformer shape");
      }
    }
    if (t.ffn_hidden_size() < 0) {
      return Invalid("transformer.ffn_hidden_size",
                     "must be positive (0: 4 x hidden_size)");
    }
    if (t.hidden_size() % t.heads() != 0) {
      return Invalid("transformer.heads",
                     absl::StrCat("must divide hidden_size ", t.hidden_size(),
                                  " (", t.heads(), " does not)"));
    }
  }
  if (mlp) {
    const v1::MlpShape& s = m.mlp();
    if (s.input_dim() <= 0) return Invalid("mlp.input_dim", "must be positive");
    if (s.hidden_layers() < 0) {
      return Invalid("mlp.hidden_layers", "must be 0 or more");
    }
    if (s.hidden_layers() > 0 && s.hidden_dim() <= 0) {
      return Invalid("mlp.hidden_dim", "must be positive");
    }
    if (s.classes() < 2) return Invalid("mlp.classes", "must be at least 2");
    if (m.tensor_parallel() > 1 || m.pipeline_parallel() > 1) {
      return Invalid(
          m.tensor_parallel() > 1 ? "tensor_parallel" : "pipeline_parallel",
          "xl-train's MLP is data-parallel only; leave it at 1");
    }
    if (ZeroStage(m.sharding()) > 0) {
      return Invalid(
          "sharding",
          "xl-train's MLP does not shard its states; leave it unset");
    }
    if (m.optimizer() != v1::OPTIMIZER_UNSPECIFIED &&
        m.optimizer() != v1::ADAMW) {
      return Invalid("optimizer", "xl-train's MLP trains with AdamW only");
    }
  }
  if (IsCpu(m)) {
    if (!mlp) {
      return Invalid("gpu_model",
                     "\"cpu\" plans xl-train's MLP on the CPU; give mlp, or a "
                     "GPU model");
    }
    if (Mixed(m.precision())) {
      return Invalid("precision",
                     "xl-train's CPU path trains in fp32; use "
                     "FP32 with gpu_model \"cpu\"");
    }
  }
  if (m.tensor_parallel() < 0) {
    return Invalid("tensor_parallel", "must be 1 or more (0: 1)");
  }
  if (m.pipeline_parallel() < 0) {
    return Invalid("pipeline_parallel", "must be 1 or more (0: 1)");
  }
  if (shape && m.tensor_parallel() > 1 &&
      t.heads() % m.tensor_parallel() != 0) {
    return Invalid("tensor_parallel",
                   absl::StrCat("must divide transformer.heads ", t.heads(),
                                " (", m.tensor_parallel(), " does not)"));
  }
  if (shape && m.pipeline_parallel() > 1 &&
      t.layers() % m.pipeline_parallel() != 0) {
    return Invalid("pipeline_parallel",
                   absl::StrCat("must divide transformer.layers ", t.layers(),
                                " (", m.pipeline_parallel(), " does not)"));
  }
  if (m.micro_batch_size() < 0) {
    return Invalid("micro_batch_size", "must be 1 or more (0: the default)");
  }
  if (m.global_batch_size() < 0) {
    return Invalid("global_batch_size", "must be positive (0: micro x Nd)");
  }
  if (!(m.mfu() >= 0 && m.mfu() <= 1)) {
    return Invalid("mfu", "must be in (0, 1], like 0.4 (0: the default)");
  }
  if (!(m.comm_share() >= 0 && m.comm_share() <= 1)) {
    return Invalid("comm_share",
                   "must be in (0, 1], like 0.25 (0: the default)");
  }
  if (m.gpus() < 0) return Invalid("gpus", "must be 0 (the fewest) or more");
  const int tp =
      std::max(1, m.tensor_parallel()) * std::max(1, m.pipeline_parallel());
  if (m.gpus() > 0 && m.gpus() % tp != 0) {
    return Invalid("gpus",
                   absl::StrCat("must be a multiple of tensor_parallel x "
                                "pipeline_parallel = ",
                                tp, " (", m.gpus(), " is not)"));
  }
  if (m.gpus_per_node() < 0) {
    return Invalid("gpus_per_node", "must be 1 or more (0: 8)");
  }
  if (m.checkpoints_kept() < 0) {
    return Invalid("checkpoints_kept", "must be 0 or more");
  }
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"dataset_tokens", m.dataset_tokens()},
        {"dataset_bytes", m.dataset_bytes()},
        {"train_tokens", m.train_tokens()}}) {
    if (!std::isfinite(value) || value < 0) {
      return Invalid(name, "must be 0 or more");
    }
  }
  return absl::OkStatus();
}

v1::ModelSpec WithDefaults(const v1::ModelSpec& in) {
  v1::ModelSpec m = in;
  const bool mlp = HasMlp(m.mlp());
  if (m.precision() == v1::PRECISION_UNSPECIFIED) {
    m.set_precision(IsCpu(m) ? v1::FP32 : v1::BF16);
  }
  if (m.optimizer() == v1::OPTIMIZER_UNSPECIFIED) m.set_optimizer(v1::ADAMW);
  if (m.sharding() == v1::SHARDING_UNSPECIFIED) {
    m.set_sharding(v1::NO_SHARDING);
  }
  if (m.recompute() == v1::RECOMPUTE_UNSPECIFIED) {
    m.set_recompute(v1::NO_RECOMPUTE);
  }
  if (m.tensor_parallel() == 0) m.set_tensor_parallel(1);
  if (m.pipeline_parallel() == 0) m.set_pipeline_parallel(1);
  if (m.micro_batch_size() == 0) {
    m.set_micro_batch_size(mlp ? kMlpDefaultBatch : 1);
  }
  if (m.mfu() == 0) m.set_mfu(0.4);
  if (m.gpus_per_node() == 0) m.set_gpus_per_node(8);
  if (m.checkpoints_kept() == 0 && in.checkpoints_kept() == 0) {
    m.set_checkpoints_kept(2);
  }
  if (m.comm_share() == 0) m.set_comm_share(0.25);
  if (m.train_tokens() == 0) m.set_train_tokens(m.dataset_tokens());
  if (HasShape(m.transformer()) && m.transformer().ffn_hidden_size() == 0) {
    m.mutable_transformer()->set_ffn_hidden_size(4 *
                                                 m.transformer().hidden_size());
  }
  return m;
}

}  // namespace xl::planner
