// `xlctl plan`: flags -> ModelSpec, and Commands::Plan (PlanResources on the
// scheduler, or the offline planner when it cannot be reached).
#include "client/plan_command.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/exit_code.h"
#include "client/plan_output.h"
#include "common/planner/planner.h"

namespace xl::client {
namespace {

struct FieldFlag {
  const char* field;  // after "model."
  const char* flag;
};

constexpr FieldFlag kFieldFlags[] = {
    {"parameters", "--params"},
    {"transformer.layers", "--layers"},
    {"transformer.hidden_size", "--hidden"},
    {"transformer.heads", "--heads"},
    {"transformer.vocab_size", "--vocab"},
    {"transformer.sequence_length", "--seq"},
    {"transformer.ffn_hidden_size", "--ffn"},
    {"precision", "--precision"},
    {"optimizer", "--optimizer"},
    {"sharding", "--zero"},
    {"tensor_parallel", "--tp"},
    {"pipeline_parallel", "--pp"},
    {"micro_batch_size", "--micro-batch"},
    {"global_batch_size", "--global-batch"},
    {"recompute", "--recompute"},
    {"sequence_parallel", "--sequence-parallel"},
    {"dataset_tokens", "--dataset-tokens"},
    {"dataset_bytes", "--dataset-bytes"},
    {"gpu_model", "--gpu"},
    {"mfu", "--mfu"},
    {"gpus", "--gpus"},
    {"gpus_per_node", "--gpus-per-node"},
    {"checkpoints_kept", "--checkpoints"},
    {"comm_share", "--comm-share"},
    {"train_tokens", "--train-tokens"},
};

// A count flag that must be a whole number in int32.
absl::StatusOr<int32_t> ParseInt(absl::string_view flag,
                                 absl::string_view text) {
  absl::StatusOr<double> v = ParseCount(flag, text);
  if (!v.ok()) return v.status();
  if (*v != std::floor(*v) || *v > 2147483647.0) {
    return UsageError(absl::StrCat(flag, ": \"", text,
                                   "\" is not a whole number up to 2^31"));
  }
  return static_cast<int32_t>(*v);
}

}  // namespace

const char* const kPlanCountFlags[] = {
    "--params",        "--layers",       "--hidden",
    "--heads",         "--vocab",        "--seq",
    "--ffn",           "--tp",           "--pp",
    "--micro-batch",   "--global-batch", "--dataset-tokens",
    "--dataset-bytes", "--train-tokens", "--gpus",
    "--gpus-per-node", "--checkpoints"};
const int kPlanCountFlagCount =
    sizeof(kPlanCountFlags) / sizeof(kPlanCountFlags[0]);

absl::StatusOr<double> ParseCount(absl::string_view flag,
                                  absl::string_view text) {
  std::string s(absl::StripAsciiWhitespace(text));
  double scale = 1;
  if (!s.empty() && absl::ascii_isalpha(s.back())) {
    switch (absl::ascii_toupper(s.back())) {
      case 'K':
        scale = 1e3;
        break;
      case 'M':
        scale = 1e6;
        break;
      case 'B':
      case 'G':
        scale = 1e9;
        break;
      case 'T':
        scale = 1e12;
        break;
      default:
        scale = 0;
    }
    s.pop_back();
  }
  double v = 0;
  if (scale == 0 || s.empty() || !absl::SimpleAtod(s, &v) ||
      !std::isfinite(v) || v < 0) {
    return UsageError(absl::StrCat(
        flag, ": \"", text,
        "\" is not a count; write it like 7.5e9, 7.5B, 70B, 2T or 1.5M"));
  }
  return v * scale;
}

std::string FlagMessage(absl::string_view message) {
  constexpr absl::string_view kPrefix = "model.";
  if (!absl::StartsWith(message, kPrefix)) return std::string(message);
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos) return std::string(message);
  const absl::string_view field =
      message.substr(kPrefix.size(), colon - kPrefix.size());
  for (const FieldFlag& f : kFieldFlags) {
    if (field == f.field) {
      return absl::StrCat(f.flag, ": ", message.substr(colon + 2), " (",
                          message.substr(0, colon), ")");
    }
  }
  return std::string(message);
}

absl::StatusOr<PlanOptions> BuildPlanOptions(const PlanFlags& flags) {
  PlanOptions options;
  options.offline = flags.offline;
  v1::ModelSpec& m = options.model;
  v1::TransformerShape* t = m.mutable_transformer();
  for (const auto& [flag, text] : flags.counts) {
    if (flag == "--params" || flag == "--dataset-tokens" ||
        flag == "--dataset-bytes" || flag == "--train-tokens") {
      absl::StatusOr<double> v = ParseCount(flag, text);
      if (!v.ok()) return v.status();
      if (flag == "--params") m.set_parameters(*v);
      if (flag == "--dataset-tokens") m.set_dataset_tokens(*v);
      if (flag == "--dataset-bytes") m.set_dataset_bytes(*v);
      if (flag == "--train-tokens") m.set_train_tokens(*v);
      continue;
    }
    absl::StatusOr<int32_t> v = ParseInt(flag, text);
    if (!v.ok()) return v.status();
    if (flag == "--layers") t->set_layers(*v);
    if (flag == "--hidden") t->set_hidden_size(*v);
    if (flag == "--heads") t->set_heads(*v);
    if (flag == "--vocab") t->set_vocab_size(*v);
    if (flag == "--seq") t->set_sequence_length(*v);
    if (flag == "--ffn") t->set_ffn_hidden_size(*v);
    if (flag == "--tp") m.set_tensor_parallel(*v);
    if (flag == "--pp") m.set_pipeline_parallel(*v);
    if (flag == "--micro-batch") m.set_micro_batch_size(*v);
    if (flag == "--global-batch") m.set_global_batch_size(*v);
    if (flag == "--gpus") m.set_gpus(*v);
    if (flag == "--gpus-per-node") m.set_gpus_per_node(*v);
    if (flag == "--checkpoints") m.set_checkpoints_kept(*v);
  }
  if (!t->ByteSizeLong()) m.clear_transformer();
  const std::string precision = absl::AsciiStrToLower(flags.precision);
  if (precision == "fp32") m.set_precision(v1::FP32);
  if (precision == "bf16") m.set_precision(v1::BF16);
  if (precision == "fp16") m.set_precision(v1::FP16);
  const std::string optimizer = absl::AsciiStrToLower(flags.optimizer);
  if (optimizer == "adamw") m.set_optimizer(v1::ADAMW);
  if (optimizer == "sgd") m.set_optimizer(v1::SGD_MOMENTUM);
  if (optimizer == "adafactor") m.set_optimizer(v1::ADAFACTOR);
  const std::string recompute = absl::AsciiStrToLower(flags.recompute);
  if (recompute == "none") m.set_recompute(v1::NO_RECOMPUTE);
  if (recompute == "selective") m.set_recompute(v1::SELECTIVE);
  if (recompute == "full") m.set_recompute(v1::FULL);
  if (flags.fsdp) m.set_sharding(v1::ZERO_3);
  if (flags.zero) {
    constexpr v1::Sharding kStages[] = {v1::NO_SHARDING, v1::ZERO_1, v1::ZERO_2,
                                        v1::ZERO_3};
    if (*flags.zero < 0 || *flags.zero > 3) {
      return UsageError("--zero: use 0, 1, 2 or 3");
    }
    m.set_sharding(kStages[*flags.zero]);
  }
  m.set_sequence_parallel(flags.sequence_parallel);
  m.set_gpu_model(flags.gpu);
  if (flags.mfu) {
    if (!(*flags.mfu > 0 && *flags.mfu <= 1)) {
      return UsageError("--mfu: must be in (0, 1], like 0.4");
    }
    m.set_mfu(*flags.mfu);
  }
  if (flags.comm_share) {
    if (!(*flags.comm_share > 0 && *flags.comm_share <= 1)) {
      return UsageError("--comm-share: must be in (0, 1], like 0.25");
    }
    m.set_comm_share(*flags.comm_share);
  }
  if (absl::Status st = planner::ValidateModelSpec(m); !st.ok()) {
    if (m.parameters() == 0 && !m.has_transformer() && !m.has_mlp()) {
      return UsageError(
          "give the model: --params N (like 7.5B), or a transformer shape "
          "--layers L --hidden H --heads A --vocab V --seq S");
    }
    return UsageError(FlagMessage(st.message()));
  }
  return options;
}

absl::Status Commands::Plan(const PlanOptions& options) {
  v1::Plan plan;
  std::string source = "the built-in GPU catalogue, offline";
  bool planned = false;
  if (!options.offline) {
    v1::PlanResourcesRequest request;
    *request.mutable_model() = options.model;
    auto context = connection_->UnaryContext();
    grpc::Status status =
        connection_->jobs().PlanResources(context.get(), request, &plan);
    if (status.ok()) {
      planned = true;
      source = "the live fleet of " + connection_->options().server;
    } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
               status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
               status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      *err_ << "xlctl: the scheduler at " << connection_->options().server
            << " could not plan ("
            << (status.error_code() == grpc::StatusCode::UNIMPLEMENTED
                    ? "it has no PlanResources"
                    : "unreachable")
            << "); planning offline with the built-in GPU catalogue\n";
    } else {
      absl::Status error = connection_->CallError(status, "plan");
      return absl::Status(error.code(), FlagMessage(error.message()));
    }
  }
  if (!planned) {
    absl::StatusOr<v1::Plan> offline = planner::MakePlan(options.model, {});
    if (!offline.ok())
      return UsageError(FlagMessage(offline.status().message()));
    plan = *std::move(offline);
  }
  *out_ << (format_ == OutputFormat::kTable ? PlanText(plan, source)
                                            : RenderMessage(plan, format_));
  return absl::OkStatus();
}

}  // namespace xl::client
