// The planner's parts shared by its two files: planner.cc (the model, its
// memory and validation) and plan.cc (MakePlan: choosing the GPU and
// writing the plan). Private to common/planner/.
#ifndef XL_COMMON_PLANNER_PLANNER_INTERNAL_H_
#define XL_COMMON_PLANNER_PLANNER_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/planner/planner.h"
#include "xl/v1/plan.pb.h"

namespace xl::planner::internal {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;
// Workspace: cuBLAS workspace, CUDA context, allocator fragmentation.
inline constexpr double kWorkspaceMinBytes = kGiB;
inline constexpr double kWorkspaceFraction = 0.05;
// Adafactor with only a parameter count: square matrices of this side.
inline constexpr double kAdafactorSide = 4096;
// NIC speed beyond which the plan warns (the fastest common NICs).
inline constexpr double kNicWarnGbps = 400;
// xl-train's default batch per rank, the MLP's default micro-batch.
inline constexpr int kMlpDefaultBatch = 64;

// Whole-model state bytes, before any parallelism divides them.
struct StateTotals {
  double weights = 0, gradients = 0, optimizer = 0, master = 0;
  double Sum() const { return weights + gradients + optimizer + master; }
};

// Per-GPU states: divided by t·p, then by Nd as the ZeRO stage says.
struct StateShare {
  double weights = 0, gradients = 0, optimizer = 0, master = 0;
  double Sum() const { return weights + gradients + optimizer + master; }
};

// The model being planned, resolved once: defaults filled, parameters,
// state totals, activations and FLOPs; and the plan's lines so far.
struct Model {
  v1::ModelSpec m;  // with defaults
  bool cpu = false;
  bool mlp = false;
  bool shape = false;  // a full transformer shape
  double params = 0;
  StateTotals totals;
  int stage = 0;
  int tp = 1;
  // Activation bytes per GPU per sample of micro-batch; 0: unknown.
  double act_per_sample = 0;
  double tokens_per_sample = 0;  // s (1 for the MLP); 0: unknown
  double flops_per_token = 0;
  double bytes_per_sample = 0;  // 0: unknown
  std::vector<std::string> lines;
  std::vector<std::string> warnings;
};

// A GPU model the plan considers.
struct Candidate {
  std::string name;  // catalogue or fleet name
  uint64_t memory = 0;
  double peak_tflops = 0;
  int in_fleet = 0;
  int gpus_per_node = 0;  // from the fleet; 0: unknown
  std::string note;
  // Why xl-train cannot run on this model; empty when it can or when the
  // model is not in the catalogue (its compute capability is unknown).
  std::string no_xl_train;
};

// How the model fits on one GPU model at one ZeRO stage.
struct Fit {
  bool fits = false;
  int nd = 1;
  int gpus = 0;
  int max_micro_batch = 0;
  double usable = 0;
  double states = 0;  // per GPU at nd
};

// ---- formatting: 7.5e9 -> "7.5e9", bytes as "12.3 GB" / "11.5 GiB",
// seconds as "8.1 min" ----
std::string Num(double x);
std::string GB(double bytes);
std::string GiB(double bytes);
std::string Duration(double seconds);
const char* PrecisionName(v1::Precision p);
// The ZeRO stage of a sharding (0 to 3).
int ZeroStage(v1::Sharding s);
// The catalogue's short name of a GPU model, else the name as given.
std::string ShortModelName(const std::string& name);

bool Mixed(v1::Precision p);
bool IsCpu(const v1::ModelSpec& m);
bool HasShape(const v1::TransformerShape& t);
bool HasMlp(const v1::MlpShape& m);
// INVALID_ARGUMENT naming `field`.
absl::Status Invalid(absl::string_view field, absl::string_view what);

// Per-GPU states: divided by t·p, then by Nd as the ZeRO stage says.
StateShare Share(const StateTotals& t, int stage, int tp, int nd);
// Rounded to whole bytes, clamped to uint64.
uint64_t Bytes(double x);

// Fills in everything derived from x->m (already defaulted and valid).
void ResolveModel(Model* x);
// How `x` fits on a GPU of `memory` bytes at ZeRO `stage`.
Fit Evaluate(const Model& x, double memory, int stage);
// The smallest ZeRO stage above the plan's that fits, with its Nd.
std::optional<std::pair<int, Fit>> BetterStage(const Model& x, double memory);

}  // namespace xl::planner::internal

#endif  // XL_COMMON_PLANNER_PLANNER_INTERNAL_H_
