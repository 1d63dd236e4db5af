// The human form of a Plan. Sizes are shown in bytes, GB (1e9, as the ZeRO
// and Megatron papers count) and GiB (2^30, as GPU memory is sold and
// reported).
#include "client/plan_output.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/output.h"

namespace xl::client {
namespace {

std::string GB(double bytes) { return absl::StrFormat("%.1f GB", bytes / 1e9); }
std::string GiB(double bytes) {
  return absl::StrFormat("%.1f GiB", bytes / (1024.0 * 1024 * 1024));
}

std::string Count(double x) {
  if (x >= 1e12) return absl::StrFormat("%.3gT", x / 1e12);
  if (x >= 1e9) return absl::StrFormat("%.3gB", x / 1e9);
  if (x >= 1e6) return absl::StrFormat("%.3gM", x / 1e6);
  if (x >= 1e3) return absl::StrFormat("%.3gK", x / 1e3);
  return absl::StrFormat("%.3g", x);
}

std::string Seconds(double s) {
  if (s <= 0) return "-";
  if (s < 1) return absl::StrFormat("%.1f ms", s * 1e3);
  if (s < 120) return absl::StrFormat("%.2f s", s);
  if (s < 7200) return absl::StrFormat("%.1f min", s / 60);
  if (s < 3 * 86400) return absl::StrFormat("%.1f h", s / 3600);
  return absl::StrFormat("%.1f days", s / 86400);
}

std::string Lower(const std::string& enum_name) {
  return absl::AsciiStrToLower(enum_name);
}

// Columns separated by two spaces; numbers right-aligned where asked.
std::string Table(const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& right, const std::string& indent) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string pad(width[i] - row[i].size(), ' ');
      const bool r = i < right.size() && right[i];
      absl::StrAppend(&line, r ? pad : "", row[i],
                      i + 1 == row.size() ? "" : (r ? "  " : pad + "  "));
    }
    absl::StripTrailingAsciiWhitespace(&line);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string Inputs(const v1::Plan& plan) {
  const v1::ModelSpec& m = plan.model();
  std::vector<std::string> parts;
  if (m.has_mlp()) {
    parts.push_back(absl::StrFormat("xl-train MLP %d->%dx%d->%d (%s params)",
                                    m.mlp().input_dim(), m.mlp().hidden_dim(),
                                    m.mlp().hidden_layers(), m.mlp().classes(),
                                    Count(plan.parameters())));
  } else if (m.transformer().layers() > 0) {
    const v1::TransformerShape& t = m.transformer();
    parts.push_back(absl::StrFormat(
        "transformer L=%d h=%d a=%d V=%d s=%d ffn=%d (%s params)", t.layers(),
        t.hidden_size(), t.heads(), t.vocab_size(), t.sequence_length(),
        t.ffn_hidden_size(), Count(plan.parameters())));
  } else {
    parts.push_back(absl::StrCat(Count(plan.parameters()), " params"));
    if (m.transformer().sequence_length() > 0) {
      parts.push_back(absl::StrCat("s=", m.transformer().sequence_length()));
    }
  }
  parts.push_back(Lower(v1::Precision_Name(m.precision())));
  parts.push_back(m.optimizer() == v1::SGD_MOMENTUM
                      ? "sgd+momentum"
                      : Lower(v1::Optimizer_Name(m.optimizer())));
  switch (m.sharding()) {
    case v1::ZERO_1:
      parts.push_back("ZeRO-1");
      break;
    case v1::ZERO_2:
      parts.push_back("ZeRO-2");
      break;
    case v1::ZERO_3:
      parts.push_back("ZeRO-3");
      break;
    default:
      parts.push_back("no sharding");
  }
  parts.push_back(
      absl::StrFormat("t=%d p=%d", m.tensor_parallel(), m.pipeline_parallel()));
  if (m.recompute() == v1::SELECTIVE) parts.push_back("selective recompute");
  if (m.recompute() == v1::FULL) parts.push_back("full recompute");
  if (m.sequence_parallel()) parts.push_back("sequence parallel");
  parts.push_back(absl::StrFormat("micro-batch %d, global batch %d",
                                  m.micro_batch_size(), m.global_batch_size()));
  parts.push_back(absl::StrFormat("MFU %.2g", m.mfu()));
  return absl::StrJoin(parts, ", ");
}

}  // namespace

std::string PlanText(const v1::Plan& plan, const std::string& source) {
  const v1::ModelSpec& m = plan.model();
  const v1::MemoryBreakdown& mem = plan.memory_per_gpu();
  std::string out;
  absl::StrAppend(&out, "Plan for:      ", Inputs(plan), "\n");
  // Model names and notes come from agents' inventories: escaped.
  absl::StrAppend(&out, "GPU model:     ", Printable(plan.gpu_model()),
                  " (GPUs from ",
                  source, ")\n");

  // Whole-model states = the per-GPU states at Nd = t = p = 1; recover them
  // from the arithmetic-free fields: states per parameter.
  const double states_gpu =
      static_cast<double>(mem.weights_bytes() + mem.gradients_bytes() +
                          mem.optimizer_bytes() + mem.master_weights_bytes());
  double per_param = 0;
  for (const std::string& line : plan.arithmetic()) {
    // "model states = 16 B/param x ..." (transformers and parameter counts)
    if (absl::StartsWith(line, "model states = ")) {
      per_param = std::atof(line.c_str() + 15);
    }
  }
  if (per_param == 0 && plan.parameters() > 0 &&
      m.sharding() <= v1::NO_SHARDING &&
      m.tensor_parallel() * m.pipeline_parallel() <= 1) {
    per_param = states_gpu / plan.parameters();
  }
  if (per_param > 0) {
    absl::StrAppend(&out, "Model states:  ", GB(per_param * plan.parameters()),
                    " in all (", absl::StrFormat("%.4g", per_param),
                    " bytes per parameter), ", GB(states_gpu), " per GPU\n");
  } else {
    absl::StrAppend(&out, "Model states:  ", GB(states_gpu), " per GPU\n");
  }

  absl::StrAppend(&out, "\nMemory per GPU:\n");
  std::vector<std::vector<std::string>> rows = {{"", "BYTES", "GB", "GiB"}};
  auto row = [&](const char* name, uint64_t bytes) {
    rows.push_back({name, absl::StrCat(bytes),
                    absl::StrFormat("%.2f", bytes / 1e9),
                    absl::StrFormat("%.2f", bytes / (1024.0 * 1024 * 1024))});
  };
  row("weights", mem.weights_bytes());
  row("gradients", mem.gradients_bytes());
  row("optimizer states", mem.optimizer_bytes());
  row("master weights", mem.master_weights_bytes());
  row("activations", mem.activations_bytes());
  row("workspace", mem.workspace_bytes());
  row("total", mem.total_bytes());
  absl::StrAppend(&out, Table(rows, {false, true, true, true}, "  "));

  absl::StrAppend(&out, "\n");
  std::vector<std::pair<std::string, std::string>> kv;
  kv.emplace_back(
      "GPUs",
      absl::StrFormat("%d = data-parallel %d x tensor %d x pipeline "
                      "%d, on %d node%s of %d GPUs",
                      plan.gpus(), plan.data_parallel(), m.tensor_parallel(),
                      m.pipeline_parallel(), plan.nodes(),
                      plan.nodes() == 1 ? "" : "s", m.gpus_per_node()));
  kv.emplace_back("Checkpoint", absl::StrCat(GB(plan.checkpoint_bytes()), " (",
                                             m.checkpoints_kept(), " kept)"));
  kv.emplace_back("NVMe per node",
                  absl::StrCat(GB(plan.nvme_bytes_per_node()), " (",
                               GiB(plan.nvme_bytes_per_node()), ")"));
  kv.emplace_back(
      "Read per node",
      plan.read_bytes_per_second_per_node() > 0
          ? absl::StrFormat("%.3g MB/s",
                            plan.read_bytes_per_second_per_node() / 1e6)
          : "- (give --dataset-bytes and --dataset-tokens)");
  kv.emplace_back("All-reduce",
                  absl::StrCat(GB(plan.allreduce_bytes_per_step()),
                               " of gradients per replica per step"));
  kv.emplace_back(
      "NIC needed",
      plan.nodes() > 1 && plan.step_seconds() > 0
          ? absl::StrFormat(
                "%.1f Gbit/s per node (all-reduce within %.0f%% of the step)",
                plan.nic_gbps_needed(), 100 * m.comm_share())
          : (plan.nodes() <= 1 ? "0 (one node)" : "-"));
  kv.emplace_back("Step time", Seconds(plan.step_seconds()));
  kv.emplace_back("Tokens/s", plan.tokens_per_second() > 0
                                  ? Count(plan.tokens_per_second())
                                  : "-");
  kv.emplace_back("Time to train", Seconds(plan.train_seconds()));
  size_t width = 0;
  for (const auto& [k, v] : kv) width = std::max(width, k.size());
  for (const auto& [k, v] : kv) {
    absl::StrAppend(&out, k, ":", std::string(width - k.size() + 2, ' '), v,
                    "\n");
  }

  absl::StrAppend(&out, "\nGPU models:\n");
  std::vector<std::vector<std::string>> fits = {
      {"MODEL", "MEMORY", "PEAK TFLOP/S", "FITS", "MAX MICRO-BATCH", "IN FLEET",
       "NOTE"}};
  for (const v1::GpuFit& g : plan.gpus_that_fit()) {
    fits.push_back(
        {Printable(g.model()), g.memory_bytes() ? GiB(g.memory_bytes()) : "-",
         g.peak_tflops() > 0 ? absl::StrFormat("%g", g.peak_tflops()) : "-",
         g.fits() ? "yes" : "no", absl::StrCat(g.max_micro_batch()),
         absl::StrCat(g.in_fleet()), Printable(g.note())});
  }
  absl::StrAppend(&out,
                  Table(fits, {false, true, true, false, true, true}, "  "));

  if (plan.warnings_size() > 0) {
    absl::StrAppend(&out, "\nWarnings:\n");
    for (const std::string& w : plan.warnings()) {
      absl::StrAppend(&out, "  - ", Printable(w), "\n");
    }
  }
  absl::StrAppend(&out, "\nArithmetic (GB = 1e9 bytes, GiB = 2^30):\n");
  for (const std::string& line : plan.arithmetic()) {
    absl::StrAppend(&out, "  ", line, "\n");
  }
  return out;
}

}  // namespace xl::client
