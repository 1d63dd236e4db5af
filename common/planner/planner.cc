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
#include "common/planner/planner_internal.h"
#include "common/planner/xl_train_gpus.h"

namespace xl::planner {
namespace internal {

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

}  // namespace internal

// This file and plan.cc define and use the internal parts.
using namespace internal;  // NOLINT(build/namespaces)

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

}  // namespace xl::planner
