// The planner's arithmetic. Every derived number is computed once, in double,
// and written to the Plan with the line of arithmetic that produced it.
#include "common/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/planner/gpu_catalogue.h"
#include "common/planner/xl_train_gpus.h"

namespace xl::planner {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
// Workspace: cuBLAS workspace, CUDA context, allocator fragmentation.
constexpr double kWorkspaceMinBytes = kGiB;
constexpr double kWorkspaceFraction = 0.05;
// Adafactor with only a parameter count: square matrices of this side.
constexpr double kAdafactorSide = 4096;
// NIC speed beyond which the plan warns (the fastest common NICs).
constexpr double kNicWarnGbps = 400;
// xl-train's default batch per rank, the MLP's default micro-batch.
constexpr int kMlpDefaultBatch = 64;

// ---- formatting ------------------------------------------------------------

// 7.5e9 -> "7.5e9", 174.6e9 -> "1.746e11", 2048 -> "2048".
std::string Num(double x) {
  if (x == 0) return "0";
  // A model whose numbers overflow (found by fuzz_controller: an
  // int cast of log10(inf)) prints as what it is.
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  const double ax = std::fabs(x);
  if (ax >= 1e4 && ax < 1e6) return absl::StrFormat("%.0f", x);
  if (ax >= 1e-3 && ax < 1e4) return absl::StrFormat("%.4g", x);
  int e = static_cast<int>(std::floor(std::log10(ax)));
  double m = x / std::pow(10.0, e);
  if (std::fabs(m) >= 9.99995) {
    m /= 10;
    ++e;
  }
  return absl::StrFormat("%.4ge%d", m, e);
}

// Bytes in GB (1e9), or MB/KB for small values.
std::string GB(double bytes) {
  if (bytes >= 10 * kGB || bytes == 0) {
    return absl::StrFormat("%.1f GB", bytes / kGB);
  }
  if (bytes >= 0.05 * kGB) return absl::StrFormat("%.2f GB", bytes / kGB);
  if (bytes >= 1e6) return absl::StrFormat("%.1f MB", bytes / 1e6);
  if (bytes >= 1e3) return absl::StrFormat("%.1f KB", bytes / 1e3);
  return absl::StrFormat("%.0f B", bytes);
}

std::string GiB(double bytes) {
  return absl::StrFormat("%.1f GiB", bytes / kGiB);
}

std::string Duration(double seconds) {
  if (seconds < 1) return absl::StrFormat("%.1f ms", seconds * 1e3);
  if (seconds < 120) return absl::StrFormat("%.2f s", seconds);
  if (seconds < 7200) return absl::StrFormat("%.1f min", seconds / 60);
  if (seconds < 3 * 86400) return absl::StrFormat("%.1f h", seconds / 3600);
  return absl::StrFormat("%.1f days", seconds / 86400);
}

const char* PrecisionName(v1::Precision p) {
  switch (p) {
    case v1::FP32:
      return "fp32";
    case v1::FP16:
      return "fp16";
    default:
      return "bf16";
  }
}

const char* OptimizerName(v1::Optimizer o) {
  switch (o) {
    case v1::SGD_MOMENTUM:
      return "SGD with momentum";
    case v1::ADAFACTOR:
      return "Adafactor";
    default:
      return "AdamW";
  }
}

int ZeroStage(v1::Sharding s) {
  switch (s) {
    case v1::ZERO_1:
      return 1;
    case v1::ZERO_2:
      return 2;
    case v1::ZERO_3:
      return 3;
    default:
      return 0;
  }
}

bool Mixed(v1::Precision p) { return p == v1::BF16 || p == v1::FP16; }

bool IsCpu(const v1::ModelSpec& m) {
  return absl::AsciiStrToLower(m.gpu_model()) == kCpuDevice;
}

bool HasShape(const v1::TransformerShape& t) {
  return t.layers() != 0 || t.hidden_size() != 0 || t.heads() != 0 ||
         t.vocab_size() != 0 || t.ffn_hidden_size() != 0;
}

bool HasMlp(const v1::MlpShape& m) {
  return m.input_dim() != 0 || m.hidden_dim() != 0 || m.hidden_layers() != 0 ||
         m.classes() != 0;
}

int64_t Ffn(const v1::TransformerShape& t) {
  return t.ffn_hidden_size() > 0 ? t.ffn_hidden_size()
                                 : 4 * static_cast<int64_t>(t.hidden_size());
}

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("model.", field, ": ", what));
}

// ---- model states ----------------------------------------------------------

// Whole-model state bytes, before any parallelism divides them.
struct StateTotals {
  double weights = 0, gradients = 0, optimizer = 0, master = 0;
  double Sum() const { return weights + gradients + optimizer + master; }
};

// `adafactor_second_moment` is the factored state in bytes (Adafactor only).
StateTotals Totals(double params, v1::Precision precision,
                   v1::Optimizer optimizer, double adafactor_second_moment) {
  StateTotals t;
  const bool mixed = Mixed(precision);
  t.weights = (mixed ? 2 : 4) * params;
  t.gradients = (mixed ? 2 : 4) * params;
  t.master = mixed ? 4 * params : 0;
  switch (optimizer) {
    case v1::SGD_MOMENTUM:
      t.optimizer = 4 * params;
      break;
    case v1::ADAFACTOR:
      t.optimizer = adafactor_second_moment;
      break;
    default:
      t.optimizer = 8 * params;
  }
  return t;
}

double SquareAdafactorBytes(double params) {
  return 4 * params * 2 / kAdafactorSide;
}

// Σ over matrices of (rows + cols), plus every vector element, times 4 B.
double TransformerAdafactorBytes(const v1::TransformerShape& s) {
  const double h = s.hidden_size(), f = static_cast<double>(Ffn(s));
  const double L = s.layers(), V = s.vocab_size(), S = s.sequence_length();
  const double matrices = L * (8 * h + 2 * f) + (V + h) + (S + h);
  const double vectors = L * (9 * h + f) + 2 * h;
  return 4 * (matrices + vectors);
}

// Per-GPU states: divided by t·p, then by Nd as the ZeRO stage says.
struct StateShare {
  double weights = 0, gradients = 0, optimizer = 0, master = 0;
  double Sum() const { return weights + gradients + optimizer + master; }
};

StateShare Share(const StateTotals& t, int stage, int tp, int nd) {
  StateShare s;
  s.weights = t.weights / tp / (stage >= 3 ? nd : 1);
  s.gradients = t.gradients / tp / (stage >= 2 ? nd : 1);
  s.optimizer = t.optimizer / tp / (stage >= 1 ? nd : 1);
  s.master = t.master / tp / (stage >= 1 ? nd : 1);
  return s;
}

uint64_t Bytes(double x) {
  if (!(x > 0)) return 0;
  if (x >= 1.8e19) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(std::llround(x));
}

// ---- the resolved model ----------------------------------------------------

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

std::string StatesPerParamText(const Model& x) {
  const v1::ModelSpec& m = x.m;
  const bool mixed = Mixed(m.precision());
  std::vector<std::string> parts;
  parts.push_back(absl::StrCat("weights ", mixed ? 2 : 4));
  parts.push_back(absl::StrCat("gradients ", mixed ? 2 : 4));
  if (mixed) parts.push_back("fp32 master 4");
  switch (m.optimizer()) {
    case v1::SGD_MOMENTUM:
      parts.push_back("momentum 4");
      break;
    case v1::ADAFACTOR:
      parts.push_back("factored second moment");
      break;
    default:
      parts.push_back("Adam m 4 + v 4");
  }
  return absl::StrJoin(parts, " + ");
}

void ResolveModel(Model* x) {
  v1::ModelSpec& m = x->m;
  const v1::TransformerShape& t = m.transformer();
  x->stage = ZeroStage(m.sharding());
  x->tp = m.tensor_parallel() * m.pipeline_parallel();
  const int b = m.micro_batch_size();

  if (x->mlp) {
    const v1::MlpShape& shape = m.mlp();
    x->params = static_cast<double>(MlpParameters(shape));
    v1::MemoryBreakdown one = MlpMemory(shape, 1, m.precision(), x->cpu);
    x->totals.weights = one.weights_bytes();
    x->totals.gradients = one.gradients_bytes();
    x->totals.optimizer = one.optimizer_bytes();
    x->totals.master = one.master_weights_bytes();
    x->act_per_sample = static_cast<double>(one.activations_bytes());
    x->tokens_per_sample = 1;
    x->flops_per_token = 6 * x->params;
    x->bytes_per_sample = 4.0 * shape.input_dim() + 4;
    std::vector<std::string> dims = {absl::StrCat(shape.input_dim())};
    for (int i = 0; i < shape.hidden_layers(); ++i) {
      dims.push_back(absl::StrCat(shape.hidden_dim()));
    }
    dims.push_back(absl::StrCat(shape.classes()));
    std::vector<std::string> terms;
    for (size_t i = 1; i < dims.size(); ++i) {
      terms.push_back(absl::StrCat(dims[i - 1], "·", dims[i], " + ", dims[i]));
    }
    x->lines.push_back(absl::StrCat(
        "parameters = Σ(d_{l-1}·d_l + d_l) = ", absl::StrJoin(terms, " + "),
        " = ", MlpParameters(shape)));
    const double p = x->params;
    if (x->cpu) {
      x->lines.push_back(absl::StrCat(
          "model states (xl-train CPU) = (params 4 + grads 4 + Adam m 4 + v 4 "
          "+ weight-decay mask 1) B/param x ",
          Num(p), " params = ", GB(x->totals.Sum())));
    } else {
      x->lines.push_back(absl::StrCat(
          "model states (xl-train CUDA) = (", StatesPerParamText(*x),
          ") B/param x ", Num(p), " params = ", GB(x->totals.Sum())));
    }
    x->lines.push_back(absl::StrCat(
        "activations per sample = ", GB(x->act_per_sample),
        x->cpu ? " (4 B x (Σ layer inputs incl. the input copy + 2·classes + "
                 "2·widest + 2·input) + 2 x 4 B label: the batch and the next "
                 "one, made ahead)"
               : " (element size x (Σ layer inputs + classes + 2·widest) + "
                 "4 B loss)"));
    return;
  }

  double adafactor = 0;
  if (x->shape) {
    x->params = TransformerParameters(t);
    const double L = t.layers(), h = t.hidden_size(), V = t.vocab_size(),
                 s = t.sequence_length(), f = static_cast<double>(Ffn(t));
    if (f == 4 * h) {
      x->lines.push_back(absl::StrCat(
          "parameters = L·(12h² + 13h) + V·h + s·h + 2h = ", Num(L), "·(12·",
          Num(h), "² + 13·", Num(h), ") + ", Num(V), "·", Num(h), " + ", Num(s),
          "·", Num(h), " + 2·", Num(h), " = ", Num(x->params)));
    } else {
      x->lines.push_back(absl::StrCat(
          "parameters = L·(4h² + 2h·f + 9h + f) + V·h + s·h + 2h = ", Num(L),
          "·(4·", Num(h), "² + 2·", Num(h), "·", Num(f), " + 9·", Num(h), " + ",
          Num(f), ") + ", Num(V), "·", Num(h), " + ", Num(s), "·", Num(h),
          " + 2·", Num(h), " = ", Num(x->params)));
    }
    adafactor = TransformerAdafactorBytes(t);
    x->flops_per_token = 6 * x->params + 12 * L * h * s;
    x->tokens_per_sample = s;
  } else {
    x->params = m.parameters();
    adafactor = SquareAdafactorBytes(x->params);
    x->flops_per_token = 6 * x->params;
    x->tokens_per_sample = t.sequence_length();
    x->lines.push_back(
        absl::StrCat("parameters = ", Num(x->params), " (given)"));
  }
  x->totals = Totals(x->params, m.precision(), m.optimizer(), adafactor);
  const double per_param = x->totals.Sum() / x->params;
  if (m.optimizer() == v1::ADAFACTOR) {
    x->lines.push_back(
        absl::StrCat("Adafactor second moment = 4 B x ",
                     x->shape ? "(Σ matrices (rows + cols) + vector elements)"
                              : absl::StrCat("Ψ·2/", Num(kAdafactorSide),
                                             " (square ", Num(kAdafactorSide),
                                             "² "
                                             "matrices assumed)"),
                     " = ", GB(adafactor)));
  }
  x->lines.push_back(absl::StrCat(
      "model states = ", absl::StrFormat("%.4g", per_param), " B/param x ",
      Num(x->params), " params = ", GB(x->totals.Sum()), " (",
      StatesPerParamText(*x), "; ", PrecisionName(m.precision()), ", ",
      OptimizerName(m.optimizer()), ")"));

  if (x->shape) {
    const double L = t.layers();
    const int tt = m.tensor_parallel();
    const double per_layer =
        LayerActivationBytes(t, b, tt, m.sequence_parallel(), m.recompute());
    const double s = t.sequence_length(), h = t.hidden_size(), a = t.heads(),
                 V = t.vocab_size();
    std::string formula;
    const bool sp = m.sequence_parallel() && tt > 1;
    std::string subst = absl::StrCat(Num(s), "·", b, "·", Num(h));
    if (m.recompute() == v1::FULL) {
      formula = sp ? absl::StrCat("2·s·b·h/t = 2·", subst, "/", tt)
                   : absl::StrCat("2·s·b·h = 2·", subst);
    } else if (m.recompute() == v1::SELECTIVE) {
      formula = sp ? absl::StrCat("s·b·h·34/t = ", subst, "·34/", tt)
                   : absl::StrCat("s·b·h·(10 + 24/t) = ", subst, "·(10 + 24/",
                                  tt, ")");
    } else if (tt == 1) {
      formula = absl::StrCat("s·b·h·(34 + 5·a·s/h) = ", subst, "·(34 + 5·",
                             Num(a), "·", Num(s), "/", Num(h), ")");
    } else if (sp) {
      formula =
          absl::StrCat("s·b·h/t·(34 + 5·a·s/h) = ", subst, "/", tt, "·(34 + 5·",
                       Num(a), "·", Num(s), "/", Num(h), ")");
    } else {
      formula = absl::StrCat("s·b·h·(10 + 24/t + 5·a·s/(h·t)) = ", subst,
                             "·(10 + 24/", tt, " + 5·", Num(a), "·", Num(s),
                             "/(", Num(h), "·", tt, "))");
    }
    if (Ffn(t) != 4 * t.hidden_size()) {
      formula +=
          absl::StrCat(" with 24 -> (8h + 4f)/h = ",
                       absl::StrFormat("%.4g", (8 * h + 4 * Ffn(t)) / h));
    }
    x->lines.push_back(absl::StrCat("activations per layer = ", formula, " = ",
                                    GB(per_layer),
                                    " (Korthikanti et al. 2022)"));
    const double logits = 4 * s * b * V / tt;
    const double total = L * per_layer + logits;
    x->lines.push_back(absl::StrCat(
        "activations = L x per layer + fp32 logits 4·s·b·V/t = ", Num(L), " x ",
        GB(per_layer), " + 4·", Num(s), "·", b, "·", Num(V), "/", tt, " = ",
        GB(total),
        m.pipeline_parallel() > 1
            ? absl::StrCat(" (1F1B: the first of ", m.pipeline_parallel(),
                           " stages holds ", m.pipeline_parallel(),
                           " micro-batches of L/p layers)")
            : ""));
    x->act_per_sample = total / b;
  } else {
    x->warnings.push_back(
        "activations are not included: give the transformer shape (--layers "
        "--hidden --heads --vocab --seq) to count them");
  }
  if (m.dataset_bytes() > 0 && m.dataset_tokens() > 0 &&
      x->tokens_per_sample > 0) {
    x->bytes_per_sample =
        m.dataset_bytes() / m.dataset_tokens() * x->tokens_per_sample;
  }
}

// ---- fitting on one GPU model -----------------------------------------------

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

struct Fit {
  bool fits = false;
  int nd = 1;
  int gpus = 0;
  int max_micro_batch = 0;
  double usable = 0;
  double states = 0;  // per GPU at nd
};

// States + activations may use this much of `memory` (workspace aside).
double Usable(double memory, bool cpu) {
  if (cpu) return std::numeric_limits<double>::infinity();
  return std::min(memory - kWorkspaceMinBytes,
                  memory / (1 + kWorkspaceFraction));
}

Fit Evaluate(const Model& x, double memory, int stage) {
  const v1::ModelSpec& m = x.m;
  Fit fit;
  fit.usable = Usable(memory, x.cpu);
  const double act = x.act_per_sample * m.micro_batch_size();
  auto states = [&](int nd) { return Share(x.totals, stage, x.tp, nd).Sum(); };
  if (m.gpus() > 0) {
    fit.nd = std::max(1, m.gpus() / x.tp);
  } else if (stage == 0) {
    fit.nd = 1;
  } else {
    const StateShare one = Share(x.totals, stage, x.tp, 1);
    const StateShare inf = Share(x.totals, stage, x.tp, 1 << 30);
    const double fixed = inf.Sum();
    const double sharded = one.Sum() - fixed;
    const double room = fit.usable - fixed - act;
    if (room > 0) {
      const double need = std::ceil(sharded / room - 1e-9);
      fit.nd = static_cast<int>(std::clamp(need, 1.0, 1e9));
      while (fit.nd < (1 << 30) && states(fit.nd) + act > fit.usable) {
        ++fit.nd;
      }
    }
    // A global batch wants Nd to divide its micro-batches.
    const int g = m.global_batch_size(), b = m.micro_batch_size();
    if (g > 0 && g % b == 0) {
      const int k = g / b;
      for (int nd = fit.nd; nd <= k; ++nd) {
        if (k % nd == 0) {
          fit.nd = nd;
          break;
        }
      }
    }
  }
  fit.states = states(fit.nd);
  fit.fits = fit.states + act <= fit.usable;
  fit.gpus = m.gpus() > 0 ? m.gpus() : fit.nd * x.tp;
  if (x.act_per_sample > 0 && std::isfinite(fit.usable)) {
    const double mb = std::floor((fit.usable - fit.states) / x.act_per_sample);
    fit.max_micro_batch = static_cast<int>(std::clamp(mb, 0.0, 2147483647.0));
  } else {
    fit.max_micro_batch = fit.fits ? m.micro_batch_size() : 0;
  }
  return fit;
}

// The smallest ZeRO stage above the plan's that fits, with its Nd.
std::optional<std::pair<int, Fit>> BetterStage(const Model& x, double memory) {
  if (x.mlp || x.cpu) return std::nullopt;
  for (int stage = x.stage + 1; stage <= 3; ++stage) {
    Fit f = Evaluate(x, memory, stage);
    if (f.fits) return std::make_pair(stage, f);
  }
  return std::nullopt;
}

std::string ShortModelName(const std::string& name) {
  std::optional<GpuSpec> spec = FindGpu(name);
  return spec ? spec->name : name;
}

}  // namespace

// ---- public building blocks -------------------------------------------------

double TransformerParameters(const v1::TransformerShape& shape) {
  const double L = shape.layers(), h = shape.hidden_size();
  const double V = shape.vocab_size(), s = shape.sequence_length();
  const double f = static_cast<double>(Ffn(shape));
  return L * (4 * h * h + 2 * h * f + 9 * h + f) + V * h + s * h + 2 * h;
}

int64_t MlpParameters(const v1::MlpShape& shape) {
  int64_t total = 0;
  int64_t prev = shape.input_dim();
  for (int i = 0; i <= shape.hidden_layers(); ++i) {
    const int64_t out =
        i == shape.hidden_layers() ? shape.classes() : shape.hidden_dim();
    total += prev * out + out;
    prev = out;
  }
  return total;
}

v1::MemoryBreakdown ModelStateBytes(double parameters, v1::Precision precision,
                                    v1::Optimizer optimizer,
                                    v1::Sharding sharding, int tensor_parallel,
                                    int pipeline_parallel, int data_parallel) {
  if (precision == v1::PRECISION_UNSPECIFIED) precision = v1::BF16;
  const StateTotals t = Totals(parameters, precision, optimizer,
                               SquareAdafactorBytes(parameters));
  const StateShare s =
      Share(t, ZeroStage(sharding),
            std::max(1, tensor_parallel) * std::max(1, pipeline_parallel),
            std::max(1, data_parallel));
  v1::MemoryBreakdown out;
  out.set_weights_bytes(Bytes(s.weights));
  out.set_gradients_bytes(Bytes(s.gradients));
  out.set_optimizer_bytes(Bytes(s.optimizer));
  out.set_master_weights_bytes(Bytes(s.master));
  out.set_total_bytes(out.weights_bytes() + out.gradients_bytes() +
                      out.optimizer_bytes() + out.master_weights_bytes());
  return out;
}

double LayerActivationBytes(const v1::TransformerShape& shape, int micro_batch,
                            int tensor_parallel, bool sequence_parallel,
                            v1::Recompute recompute) {
  const double s = shape.sequence_length(), b = micro_batch;
  const double h = shape.hidden_size(), a = shape.heads();
  const double f = static_cast<double>(Ffn(shape));
  const double t = std::max(1, tensor_parallel);
  // Sequence parallelism shards the parts tensor parallelism leaves whole.
  const double replicated_div = sequence_parallel ? t : 1;
  if (recompute == v1::FULL) return 2 * s * b * h / replicated_div;
  double per_token = 10 * h / replicated_div + (8 * h + 4 * f) / t;
  if (recompute != v1::SELECTIVE) per_token += 5 * a * s / t;
  return s * b * per_token;
}

double GpuUsableBytes(double memory) { return Usable(memory, false); }

v1::MemoryBreakdown MlpMemory(const v1::MlpShape& shape, int batch,
                              v1::Precision precision, bool cpu) {
  const double p = static_cast<double>(MlpParameters(shape));
  const double B = batch;
  std::vector<double> widths = {static_cast<double>(shape.input_dim())};
  for (int i = 0; i < shape.hidden_layers(); ++i) {
    widths.push_back(shape.hidden_dim());
  }
  widths.push_back(shape.classes());
  double sum_in = 0, max_in = 0, max_any = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    sum_in += widths[l];
    max_in = std::max(max_in, widths[l]);
    max_any = std::max({max_any, widths[l], widths[l + 1]});
  }
  const double C = shape.classes();
  v1::MemoryBreakdown out;
  double acts = 0;
  if (cpu) {
    out.set_weights_bytes(Bytes(4 * p));
    out.set_gradients_bytes(Bytes(4 * p));
    out.set_optimizer_bytes(Bytes(9 * p));  // m, v and the decay mask
    const double widest = std::max(C, max_in);
    // Two batches (x and labels): the one in use and the one the producer
    // thread makes ahead.
    acts = 4 * B * (sum_in + 2 * C + 2 * widest + 2.0 * shape.input_dim()) +
           8 * B;
  } else {
    if (precision == v1::PRECISION_UNSPECIFIED) precision = v1::BF16;
    const bool fp32 = precision == v1::FP32;
    const double es = fp32 ? 4 : 2;
    out.set_weights_bytes(Bytes(es * p));
    out.set_master_weights_bytes(Bytes(fp32 ? 0 : 4 * p));
    out.set_gradients_bytes(Bytes(4 * p));
    out.set_optimizer_bytes(Bytes(8 * p));
    const double inputs = sum_in - (fp32 ? widths[0] : 0);
    acts = es * B * (inputs + C + 2 * max_any) + 4 * B;
  }
  out.set_activations_bytes(Bytes(acts));
  out.set_total_bytes(out.weights_bytes() + out.gradients_bytes() +
                      out.optimizer_bytes() + out.master_weights_bytes() +
                      out.activations_bytes());
  return out;
}

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

// ---- the plan ---------------------------------------------------------------

absl::StatusOr<v1::Plan> MakePlan(const v1::ModelSpec& spec,
                                  const std::vector<FleetGpu>& fleet) {
  if (absl::Status st = ValidateModelSpec(spec); !st.ok()) return st;
  Model x;
  x.m = WithDefaults(spec);
  x.cpu = IsCpu(x.m);
  x.mlp = HasMlp(x.m.mlp());
  x.shape = HasShape(x.m.transformer());
  ResolveModel(&x);
  const v1::ModelSpec& m = x.m;
  const int b = m.micro_batch_size();

  // The GPU models to consider.
  std::vector<Candidate> candidates;
  auto from_catalogue = [&](const GpuSpec& g) {
    Candidate c;
    c.name = g.name;
    c.memory = g.memory_bytes;
    c.peak_tflops = g.PeakTflops(m.precision());
    if (c.peak_tflops == 0) {
      c.note = absl::StrCat("no ", PrecisionName(m.precision()),
                            " support: step time unknown");
      if (m.precision() == v1::BF16) c.note += "; use fp16";
    }
    (void)XlTrainSupportsComputeCapability(g.compute_major, g.compute_minor,
                                           &c.no_xl_train);
    return c;
  };
  // Fleet models, merged by name.
  std::vector<Candidate> fleet_models;
  for (const FleetGpu& g : fleet) {
    auto it =
        std::find_if(fleet_models.begin(), fleet_models.end(),
                     [&](const Candidate& c) { return c.name == g.model; });
    if (it == fleet_models.end()) {
      Candidate c;
      if (std::optional<GpuSpec> spec = FindGpu(g.model)) {
        c = from_catalogue(*spec);
      } else {
        c.note =
            "not in the catalogue: peak TFLOP/s unknown, memory from the "
            "fleet";
      }
      c.name = g.model;
      c.memory = g.memory_bytes > 0 ? g.memory_bytes : c.memory;
      fleet_models.push_back(c);
      it = fleet_models.end() - 1;
    }
    it->in_fleet += g.count;
    it->gpus_per_node = std::max(it->gpus_per_node, g.gpus_per_node);
    if (g.memory_bytes > 0) it->memory = std::min(it->memory, g.memory_bytes);
  }
  if (x.cpu) {
    Candidate c;
    c.name = kCpuDevice;
    c.note =
        "xl-train's CPU path: host memory, no workspace, step time not "
        "estimated";
    candidates.push_back(c);
  } else if (!m.gpu_model().empty()) {
    std::optional<GpuSpec> wanted = FindGpu(m.gpu_model());
    for (const Candidate& c : fleet_models) {
      std::optional<GpuSpec> spec = FindGpu(c.name);
      if (absl::AsciiStrToLower(c.name) ==
              absl::AsciiStrToLower(m.gpu_model()) ||
          (wanted && spec && std::string(spec->name) == wanted->name)) {
        candidates.push_back(c);
      }
    }
    if (candidates.empty()) {
      if (!wanted) {
        return Invalid("gpu_model",
                       absl::StrCat("unknown GPU \"", m.gpu_model(),
                                    "\"; use a catalogue name such as "
                                    "H100-80GB, A100-40GB, H200, L40S, or an "
                                    "NVML name of a fleet GPU"));
      }
      candidates.push_back(from_catalogue(*wanted));
      if (!fleet.empty()) {
        x.warnings.push_back(
            absl::StrCat("the fleet has no ", wanted->name, " GPUs"));
      }
    }
  } else if (!fleet_models.empty()) {
    candidates = fleet_models;
  } else {
    for (const GpuSpec& g : GpuCatalogue()) {
      candidates.push_back(from_catalogue(g));
    }
  }

  // Fit every candidate.
  struct Scored {
    Candidate c;
    Fit fit;
  };
  std::vector<Scored> scored;
  for (const Candidate& c : candidates) {
    scored.push_back({c, Evaluate(x, static_cast<double>(c.memory), x.stage)});
  }
  const bool online = !fleet.empty();
  auto enough = [&](const Scored& s) {
    return !online || s.c.in_fleet >= s.fit.gpus;
  };
  std::stable_sort(scored.begin(), scored.end(),
                   [&](const Scored& a, const Scored& b2) {
                     if (a.fit.fits != b2.fit.fits) return a.fit.fits;
                     if (enough(a) != enough(b2)) return enough(a);
                     if (a.fit.fits && a.fit.gpus != b2.fit.gpus) {
                       return a.fit.gpus < b2.fit.gpus;
                     }
                     if (!a.fit.fits && a.c.memory != b2.c.memory) {
                       return a.c.memory > b2.c.memory;
                     }
                     return a.c.peak_tflops > b2.c.peak_tflops;
                   });

  v1::Plan plan;
  for (const Scored& s : scored) {
    v1::GpuFit* g = plan.add_gpus_that_fit();
    g->set_model(s.c.name);
    g->set_memory_bytes(s.c.memory);
    g->set_peak_tflops(s.c.peak_tflops);
    g->set_fits(s.fit.fits);
    g->set_max_micro_batch(s.fit.max_micro_batch);
    g->set_in_fleet(s.c.in_fleet);
    std::vector<std::string> notes;
    if (!s.c.note.empty()) notes.push_back(s.c.note);
    if (x.cpu) {
      // Nothing to say about GPUs.
    } else if (s.fit.fits) {
      notes.push_back(absl::StrCat(s.fit.gpus,
                                   s.fit.gpus == 1 ? " GPU" : " GPUs", " (Nd ",
                                   s.fit.nd, ")"));
      if (online && s.c.in_fleet < s.fit.gpus) {
        notes.push_back(absl::StrCat("the fleet has ", s.c.in_fleet));
      }
    } else if (auto better = BetterStage(x, static_cast<double>(s.c.memory))) {
      notes.push_back(absl::StrCat("fits with ZeRO-", better->first, " over ",
                                   better->second.gpus, " GPUs"));
    } else {
      notes.push_back(
          "does not fit at any ZeRO stage; raise tensor or "
          "pipeline parallelism, recompute, or lower the "
          "micro-batch");
    }
    // Said for every plan, last: the numbers still hold for a program of
    // one's own, but the built-in worker cannot run there.
    if (!s.c.no_xl_train.empty()) {
      notes.push_back(
          absl::StrCat("xl-train cannot run on it: ", s.c.no_xl_train));
    }
    g->set_note(absl::StrJoin(notes, "; "));
  }

  const Scored& chosen = scored.front();
  const Candidate& gpu = chosen.c;
  const Fit& fit = chosen.fit;
  plan.set_gpu_model(gpu.name);
  const int nd = fit.nd;
  const int gpus = fit.gpus;
  int gpn =
      spec.gpus_per_node() > 0
          ? spec.gpus_per_node()
          : (gpu.gpus_per_node > 0 ? gpu.gpus_per_node : m.gpus_per_node());
  const int nodes = (gpus + gpn - 1) / gpn;
  const int gpus_on_node = std::min(gpn, gpus);
  int global = m.global_batch_size() > 0 ? m.global_batch_size() : b * nd;

  v1::ModelSpec filled = m;
  filled.set_gpus_per_node(gpn);
  filled.set_global_batch_size(global);
  *plan.mutable_model() = filled;
  plan.set_parameters(x.params);
  plan.set_gpus(gpus);
  plan.set_nodes(nodes);
  plan.set_data_parallel(nd);

  std::vector<std::string>& lines = x.lines;
  // Memory per GPU.
  const StateShare share = Share(x.totals, x.stage, x.tp, nd);
  const double acts = x.act_per_sample * b;
  const double workspace =
      x.cpu ? 0
            : std::max(kWorkspaceMinBytes,
                       kWorkspaceFraction * (share.Sum() + acts));
  v1::MemoryBreakdown* mem = plan.mutable_memory_per_gpu();
  mem->set_weights_bytes(Bytes(share.weights));
  mem->set_gradients_bytes(Bytes(share.gradients));
  mem->set_optimizer_bytes(Bytes(share.optimizer));
  mem->set_master_weights_bytes(Bytes(share.master));
  mem->set_activations_bytes(Bytes(acts));
  mem->set_workspace_bytes(Bytes(workspace));
  mem->set_total_bytes(mem->weights_bytes() + mem->gradients_bytes() +
                       mem->optimizer_bytes() + mem->master_weights_bytes() +
                       mem->activations_bytes() + mem->workspace_bytes());
  const char* stage_name[] = {"no sharding", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
  if (x.tp > 1 || x.stage > 0) {
    auto part = [&](const char* name, double total, bool sharded) {
      std::string s = absl::StrCat(name, " ", GB(total));
      if (x.tp > 1) absl::StrAppend(&s, "/", x.tp);
      if (sharded) absl::StrAppend(&s, "/", nd);
      return s;
    };
    lines.push_back(
        absl::StrCat("model states per GPU = ",
                     part("weights", x.totals.weights, x.stage >= 3), " + ",
                     part("gradients", x.totals.gradients, x.stage >= 2), " + ",
                     part("master", x.totals.master, x.stage >= 1), " + ",
                     part("optimizer", x.totals.optimizer, x.stage >= 1), " = ",
                     GB(share.Sum()), " (", stage_name[x.stage],
                     x.stage > 0 ? absl::StrCat(" over Nd = ", nd) : "",
                     x.tp > 1 ? absl::StrCat(", t·p = ", x.tp) : "", ")"));
  } else {
    lines.push_back(absl::StrCat("model states per GPU = ", GB(share.Sum()),
                                 " (no sharding: every GPU holds them all)"));
  }
  if (!x.mlp && x.shape) {
    // Already explained above; restate the micro-batch total only.
  } else if (x.mlp) {
    lines.push_back(absl::StrCat("activations = ", b, " samples x ",
                                 GB(x.act_per_sample), " = ", GB(acts)));
  }
  if (!x.cpu) {
    lines.push_back(absl::StrCat(
        "workspace = max(1 GiB, 5% x (states + activations)) = max(1 GiB, "
        "0.05 x ",
        GB(share.Sum() + acts), ") = ", GB(workspace),
        " (cuBLAS workspace, CUDA context, fragmentation)"));
  }
  lines.push_back(absl::StrCat(
      "memory per GPU = ", GB(share.Sum()), " states + ", GB(acts),
      " activations + ", GB(workspace), " workspace = ", GB(mem->total_bytes()),
      " = ", GiB(mem->total_bytes())));
  if (!x.cpu) {
    const double M = static_cast<double>(gpu.memory);
    lines.push_back(absl::StrCat(
        "fit on ", gpu.name, " (", GiB(M),
        "): states + activations <= min(M - 1 GiB, M/1.05) = ", GiB(fit.usable),
        "; ", fit.fits ? "fits" : "does NOT fit"));
    if (x.act_per_sample > 0) {
      lines.push_back(absl::StrCat("max micro-batch = floor((", GiB(fit.usable),
                                   " - ", GiB(fit.states), ") / ",
                                   GB(x.act_per_sample),
                                   " per sample) = ", fit.max_micro_batch));
    }
    lines.push_back(
        absl::StrCat("GPUs = Nd x t x p = ", nd, " x ", m.tensor_parallel(),
                     " x ", m.pipeline_parallel(), " = ", gpus,
                     m.gpus() > 0 ? " (fixed)" : " (the fewest that fit)",
                     "; nodes = ceil(", gpus, " / ", gpn, ") = ", nodes));
  }
  const int accum = global / std::max(1, b * nd);
  lines.push_back(absl::StrCat("global batch = ", global, " = micro-batch ", b,
                               " x Nd ", nd, " x accumulation ", accum));

  // Checkpoint and NVMe.
  const double ckpt = x.totals.weights + x.totals.master + x.totals.optimizer;
  plan.set_checkpoint_bytes(Bytes(ckpt));
  lines.push_back(absl::StrCat(
      "checkpoint = weights ", GB(x.totals.weights), " + master ",
      GB(x.totals.master), " + optimizer ", GB(x.totals.optimizer), " = ",
      GB(ckpt), " (", absl::StrFormat("%.4g", ckpt / x.params),
      " B/param; gradients are not saved)"));
  const bool sharded_ckpt = x.stage > 0 || x.tp > 1;
  const double ckpt_node =
      m.checkpoints_kept() * ckpt / (sharded_ckpt ? nodes : 1);
  const double nvme = m.dataset_bytes() + ckpt_node;
  plan.set_nvme_bytes_per_node(Bytes(nvme));
  lines.push_back(
      absl::StrCat("NVMe per node = dataset ", GB(m.dataset_bytes()),
                   " (a full copy per node) + ", m.checkpoints_kept(),
                   " checkpoints x ", GB(ckpt),
                   sharded_ckpt ? absl::StrCat(" / ", nodes, " nodes (sharded)")
                                : " (whole: rank 0 writes it)",
                   " = ", GB(nvme)));

  // Throughput.
  const double peak = gpu.peak_tflops * 1e12;
  const double tokens_per_step = global * x.tokens_per_sample;
  double tokens_per_s = 0, step = 0;
  if (peak > 0) {
    tokens_per_s = gpus * peak * m.mfu() / x.flops_per_token;
    lines.push_back(absl::StrCat(
        "FLOPs per token = ",
        x.shape ? absl::StrCat("6Ψ + 12·L·h·s = 6·", Num(x.params), " + 12·",
                               m.transformer().layers(), "·",
                               m.transformer().hidden_size(), "·",
                               m.transformer().sequence_length())
                : absl::StrCat("6Ψ = 6·", Num(x.params)),
        " = ", Num(x.flops_per_token), x.mlp ? " (a token is a sample)" : ""));
    lines.push_back(
        absl::StrCat("tokens/s = GPUs x peak x MFU / FLOPs per token = ", gpus,
                     " x ", Num(gpu.peak_tflops), "e12 x ", Num(m.mfu()), " / ",
                     Num(x.flops_per_token), " = ", Num(tokens_per_s)));
    if (tokens_per_step > 0) {
      step = tokens_per_step / tokens_per_s;
      lines.push_back(absl::StrCat(
          "step time = FLOPs/token x tokens/step / (GPUs x peak x MFU) = ",
          Num(x.flops_per_token), " x ", Num(tokens_per_step), " / (", gpus,
          " x ", Num(gpu.peak_tflops), "e12 x ", Num(m.mfu()),
          ") = ", Duration(step)));
    } else {
      x.warnings.push_back(
          "step time needs the tokens per sequence: give --seq with --params");
    }
  } else if (!x.cpu) {
    x.warnings.push_back(absl::StrCat(
        "peak TFLOP/s of ", gpu.name, " at ", PrecisionName(m.precision()),
        " unknown: no step time, tokens/s or time to train"));
  }
  plan.set_step_seconds(step);
  plan.set_tokens_per_second(tokens_per_s);
  if (tokens_per_s > 0 && m.train_tokens() > 0) {
    const double train = m.train_tokens() / tokens_per_s;
    plan.set_train_seconds(train);
    lines.push_back(absl::StrCat("time to train = ", Num(m.train_tokens()),
                                 " tokens / ", Num(tokens_per_s),
                                 " tokens/s = ", Duration(train)));
  } else if (tokens_per_s > 0) {
    x.warnings.push_back(
        "no dataset or train tokens given: time to train not computed");
  }

  // Storage read rate.
  if (x.bytes_per_sample > 0 && step > 0) {
    const double rate = x.bytes_per_sample * global / nodes / step;
    plan.set_read_bytes_per_second_per_node(rate);
    lines.push_back(absl::StrCat(
        "read rate per node = ", GB(x.bytes_per_sample), "/sample x ", global,
        " samples / ", nodes, " nodes / ", Duration(step), " = ",
        absl::StrFormat("%.3g MB/s", rate / 1e6)));
  }

  // Network.
  const double grad_elem = x.mlp ? 4 : (Mixed(m.precision()) ? 2 : 4);
  const double grad_bytes = grad_elem * x.params / x.tp;
  plan.set_allreduce_bytes_per_step(Bytes(grad_bytes));
  const double factor =
      nd > 1 ? (x.stage >= 3 ? 3.0 : 2.0) * (nd - 1) / nd : 0.0;
  const double per_gpu = factor * grad_bytes;
  lines.push_back(
      absl::StrCat("gradient bytes per replica = ", grad_elem, " B x ",
                   Num(x.params), x.tp > 1 ? absl::StrCat(" / ", x.tp) : "",
                   " = ", GB(grad_bytes), "; per GPU per step ",
                   x.stage >= 3 ? "3(Nd-1)/Nd (reduce-scatter + 2 all-gathers)"
                                : "2(Nd-1)/Nd (ring)",
                   " x that = ", GB(per_gpu)));
  double nic = 0;
  // Each data-parallel group (one per model-parallel rank) runs its ring in
  // node order, so its traffic crosses a node's NICs once: the node sends
  // per-GPU ring bytes once per group it holds.
  const int groups_on_node = std::min(gpus_on_node, x.tp);
  if (nodes > 1 && step > 0) {
    nic = per_gpu * groups_on_node * 8 / (m.comm_share() * step) / 1e9;
    lines.push_back(absl::StrCat(
        "NIC per node = ", GB(per_gpu), " x ", groups_on_node,
        " data-parallel group(s) on the node x 8 / (", Num(m.comm_share()),
        " x ", Duration(step), ") = ", absl::StrFormat("%.1f", nic),
        " Gbit/s (rings in node order: each group's traffic crosses the "
        "node's NICs once; the node's GPUs share them)"));
  } else if (nodes <= 1) {
    lines.push_back(
        "NIC per node = 0 (one node: the all-reduce stays on "
        "NVLink/PCIe)");
  }
  plan.set_nic_gbps_needed(nic);

  // Warnings.
  std::vector<std::string>& w = x.warnings;
  if (!fit.fits && !x.cpu) {
    std::string msg =
        absl::StrCat("does not fit on ", ShortModelName(gpu.name), " (",
                     GiB(static_cast<double>(gpu.memory)), ") GPUs");
    if (auto better = BetterStage(x, static_cast<double>(gpu.memory))) {
      absl::StrAppend(&msg, " without ZeRO-", better->first, " (ZeRO-",
                      better->first, " fits over ", better->second.gpus,
                      " GPUs)");
    } else if (m.gpus() > 0 && x.stage > 0) {
      absl::StrAppend(&msg, " with ", m.gpus(), " GPUs: use more GPUs");
    } else {
      absl::StrAppend(&msg, ": needs ", GiB(share.Sum() + acts),
                      " for states and activations; raise tensor/pipeline "
                      "parallelism, recompute activations or lower the "
                      "micro-batch");
    }
    w.push_back(msg);
  }
  if (online && gpu.in_fleet < gpus) {
    w.push_back(absl::StrCat("needs ", gpus, " GPUs but the fleet has ",
                             gpu.in_fleet, " (", gpu.name, ")"));
  }
  if (nic > kNicWarnGbps) {
    w.push_back(absl::StrCat(
        "NIC bandwidth needed (", absl::StrFormat("%.0f", nic),
        " Gbit/s per node) exceeds ", kNicWarnGbps,
        " Gbit/s: the all-reduce would take more than ",
        absl::StrFormat("%.0f%%", 100 * m.comm_share()),
        " of the step; use a larger global batch or ZeRO-1/2 over fewer "
        "nodes"));
  }
  if (m.global_batch_size() > 0 && m.global_batch_size() % (b * nd) != 0) {
    w.push_back(absl::StrCat("global batch ", m.global_batch_size(),
                             " is not divisible by micro-batch ", b,
                             " x data-parallel ", nd, " = ", b * nd));
  }
  if (m.pipeline_parallel() > 1 && accum < m.pipeline_parallel()) {
    w.push_back(absl::StrCat(
        "pipeline bubble: ", accum, " micro-batches per step for ",
        m.pipeline_parallel(), " stages; use a global batch of at least ",
        m.pipeline_parallel() * b * nd));
  }
  if (x.mlp && !x.cpu && !gpu.no_xl_train.empty()) {
    w.push_back(absl::StrCat("xl-train (the MLP's worker) cannot run on ",
                             ShortModelName(gpu.name), ": ", gpu.no_xl_train));
  }
  if (m.sequence_parallel() && m.tensor_parallel() == 1) {
    w.push_back("sequence parallelism needs tensor parallelism > 1; ignored");
  }
  for (const std::string& s : w) plan.add_warnings(s);
  for (const std::string& s : lines) plan.add_arithmetic(s);
  return plan;
}

}  // namespace xl::planner
