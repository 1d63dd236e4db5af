// `xlctl plan`: the flags that describe a training (model size or transformer
// shape, precision, optimizer, parallelism, batch, data, GPUs) turned into an
// xl.v1.ModelSpec, with numbers such as 7.5e9, 7.5B, 70B, 2T or 1.5M, and
// errors that name the flag. Stateless; safe from any thread.
#ifndef XL_CLIENT_PLAN_COMMAND_H_
#define XL_CLIENT_PLAN_COMMAND_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xl/v1/plan.pb.h"

namespace xl::client {

// The flags of `xlctl plan` as given; empty strings and unset optionals were
// not given (the planner's defaults apply).
struct PlanFlags {
  // Count flags ("--params", "--layers", "--gpus", ...) -> their text.
  std::map<std::string, std::string> counts;
  std::string precision;  // fp32, bf16, fp16
  std::string optimizer;  // adamw, sgd, adafactor
  std::string recompute;  // none, selective, full
  std::optional<int> zero;
  bool fsdp = false;
  bool sequence_parallel = false;
  std::string gpu;
  std::optional<double> mfu;
  std::optional<double> comm_share;
  bool offline = false;
};

// What `xlctl plan` runs.
struct PlanOptions {
  xl::v1::ModelSpec model;
  // Skip PlanResources; plan with the built-in GPU catalogue.
  bool offline = false;
};

// The count flags, in the order --help lists them.
extern const char* const kPlanCountFlags[];
extern const int kPlanCountFlagCount;

// Parses a count: "7.5e9", "7.5B", "70B", "2T", "1.5M", "512K", "1G" (K
// 1e3, M 1e6, B and G 1e9, T 1e12, any case). INVALID_ARGUMENT naming
// `flag` for anything else or a negative number.
absl::StatusOr<double> ParseCount(absl::string_view flag,
                                  absl::string_view text);

// Builds the ModelSpec and checks it with the planner's validation;
// INVALID_ARGUMENT (exit 2) names the flag ("--heads: must divide
// hidden_size 4096 ... (model.transformer.heads)").
absl::StatusOr<PlanOptions> BuildPlanOptions(const PlanFlags& flags);

// Rewrites a planner error "model.<field>: ..." to name the xlctl flag.
std::string FlagMessage(absl::string_view message);

}  // namespace xl::client

#endif  // XL_CLIENT_PLAN_COMMAND_H_
