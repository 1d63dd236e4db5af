// MakePlan: which GPU model, how many GPUs and nodes, and what the job needs
// of memory, NVMe, network and time, each number with the line of
// arithmetic that produced it. A short driver over named steps; the model
// and its memory are planner.cc's.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/planner/gpu_catalogue.h"
#include "common/planner/planner.h"
#include "common/planner/planner_internal.h"
#include "common/planner/xl_train_gpus.h"

namespace xl::planner {
namespace internal {
namespace {

// A candidate GPU model and how the model fits on it.
struct Scored {
  Candidate c;
  Fit fit;
};

// The chosen layout: data-parallel degree, GPUs, nodes and batch.
struct Layout {
  int b = 1;   // micro-batch
  int nd = 1;  // data-parallel
  int gpus = 1;
  int gpn = 1;  // GPUs per node
  int nodes = 1;
  int gpus_on_node = 1;
  int global = 1;  // global batch
  int accum = 1;   // gradient accumulation
};

Candidate FromCatalogue(const GpuSpec& g, v1::Precision precision) {
  Candidate c;
  c.name = g.name;
  c.memory = g.memory_bytes;
  c.peak_tflops = g.PeakTflops(precision);
  if (c.peak_tflops == 0) {
    c.note = absl::StrCat("no ", PrecisionName(precision),
                          " support: step time unknown");
    if (precision == v1::BF16) c.note += "; use fp16";
  }
  (void)XlTrainSupportsComputeCapability(g.compute_major, g.compute_minor,
                                         &c.no_xl_train);
  return c;
}

// The fleet's GPU models, merged by name: how many, the most per node and
// the least memory.
std::vector<Candidate> FleetModels(const std::vector<FleetGpu>& fleet,
                                   v1::Precision precision) {
  std::vector<Candidate> models;
  for (const FleetGpu& g : fleet) {
    auto it =
        std::find_if(models.begin(), models.end(),
                     [&](const Candidate& c) { return c.name == g.model; });
    if (it == models.end()) {
      Candidate c;
      if (std::optional<GpuSpec> spec = FindGpu(g.model)) {
        c = FromCatalogue(*spec, precision);
      } else {
        c.note =
            "not in the catalogue: peak TFLOP/s unknown, memory from the "
            "fleet";
      }
      c.name = g.model;
      c.memory = g.memory_bytes > 0 ? g.memory_bytes : c.memory;
      models.push_back(c);
      it = models.end() - 1;
    }
    it->in_fleet += g.count;
    it->gpus_per_node = std::max(it->gpus_per_node, g.gpus_per_node);
    if (g.memory_bytes > 0) it->memory = std::min(it->memory, g.memory_bytes);
  }
  return models;
}

// The GPU models to consider: the CPU for a CPU job; the one asked for (of
// the fleet, else the catalogue's); else the fleet's; else the catalogue.
absl::StatusOr<std::vector<Candidate>> Candidates(
    Model* x, const std::vector<FleetGpu>& fleet) {
  const v1::ModelSpec& m = x->m;
  std::vector<Candidate> fleet_models = FleetModels(fleet, m.precision());
  std::vector<Candidate> candidates;
  if (x->cpu) {
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
      candidates.push_back(FromCatalogue(*wanted, m.precision()));
      if (!fleet.empty()) {
        x->warnings.push_back(
            absl::StrCat("the fleet has no ", wanted->name, " GPUs"));
      }
    }
  } else if (!fleet_models.empty()) {
    candidates = fleet_models;
  } else {
    for (const GpuSpec& g : GpuCatalogue()) {
      candidates.push_back(FromCatalogue(g, m.precision()));
    }
  }
  return candidates;
}

// Fits every candidate, best first: those that fit, then those the fleet
// has enough of, the fewest GPUs, the most memory, the fastest.
std::vector<Scored> Rank(const Model& x,
                         const std::vector<Candidate>& candidates,
                         bool online) {
  std::vector<Scored> scored;
  for (const Candidate& c : candidates) {
    scored.push_back({c, Evaluate(x, static_cast<double>(c.memory), x.stage)});
  }
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
  return scored;
}

// One GpuFit per candidate, with its note.
void AddGpuFits(const Model& x, const std::vector<Scored>& scored, bool online,
                v1::Plan* plan) {
  for (const Scored& s : scored) {
    v1::GpuFit* g = plan->add_gpus_that_fit();
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
}

// The layout on the chosen GPU, and the plan's model, GPUs and nodes.
Layout ChooseLayout(const Model& x, const v1::ModelSpec& spec,
                    const Scored& chosen, v1::Plan* plan) {
  const v1::ModelSpec& m = x.m;
  Layout l;
  l.b = m.micro_batch_size();
  l.nd = chosen.fit.nd;
  l.gpus = chosen.fit.gpus;
  l.gpn = spec.gpus_per_node() > 0     ? spec.gpus_per_node()
          : chosen.c.gpus_per_node > 0 ? chosen.c.gpus_per_node
                                       : m.gpus_per_node();
  l.nodes = (l.gpus + l.gpn - 1) / l.gpn;
  l.gpus_on_node = std::min(l.gpn, l.gpus);
  l.global = m.global_batch_size() > 0 ? m.global_batch_size() : l.b * l.nd;
  l.accum = l.global / std::max(1, l.b * l.nd);
  plan->set_gpu_model(chosen.c.name);
  v1::ModelSpec filled = m;
  filled.set_gpus_per_node(l.gpn);
  filled.set_global_batch_size(l.global);
  *plan->mutable_model() = filled;
  plan->set_parameters(x.params);
  plan->set_gpus(l.gpus);
  plan->set_nodes(l.nodes);
  plan->set_data_parallel(l.nd);
  return l;
}

// Memory per GPU: states, activations and workspace, the fit and the GPUs.
// Returns what states and activations take.
double AddMemory(Model* x, const Layout& l, const Scored& chosen,
                 v1::Plan* plan) {
  const v1::ModelSpec& m = x->m;
  std::vector<std::string>& lines = x->lines;
  const StateShare share = Share(x->totals, x->stage, x->tp, l.nd);
  const double acts = x->act_per_sample * l.b;
  const double workspace =
      x->cpu ? 0
             : std::max(kWorkspaceMinBytes,
                        kWorkspaceFraction * (share.Sum() + acts));
  v1::MemoryBreakdown* mem = plan->mutable_memory_per_gpu();
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
  if (x->tp > 1 || x->stage > 0) {
    auto part = [&](const char* name, double total, bool sharded) {
      std::string s = absl::StrCat(name, " ", GB(total));
      if (x->tp > 1) absl::StrAppend(&s, "/", x->tp);
      if (sharded) absl::StrAppend(&s, "/", l.nd);
      return s;
    };
    lines.push_back(absl::StrCat(
        "model states per GPU = ",
        part("weights", x->totals.weights, x->stage >= 3), " + ",
        part("gradients", x->totals.gradients, x->stage >= 2), " + ",
        part("master", x->totals.master, x->stage >= 1), " + ",
        part("optimizer", x->totals.optimizer, x->stage >= 1), " = ",
        GB(share.Sum()), " (", stage_name[x->stage],
        x->stage > 0 ? absl::StrCat(" over Nd = ", l.nd) : "",
        x->tp > 1 ? absl::StrCat(", t·p = ", x->tp) : "", ")"));
  } else {
    lines.push_back(absl::StrCat("model states per GPU = ", GB(share.Sum()),
                                 " (no sharding: every GPU holds them all)"));
  }
  // A full transformer shape explained its activations already.
  if (x->mlp) {
    lines.push_back(absl::StrCat("activations = ", l.b, " samples x ",
                                 GB(x->act_per_sample), " = ", GB(acts)));
  }
  if (!x->cpu) {
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
  if (!x->cpu) {
    const Fit& fit = chosen.fit;
    const double M = static_cast<double>(chosen.c.memory);
    lines.push_back(absl::StrCat(
        "fit on ", chosen.c.name, " (", GiB(M),
        "): states + activations <= min(M - 1 GiB, M/1.05) = ", GiB(fit.usable),
        "; ", fit.fits ? "fits" : "does NOT fit"));
    if (x->act_per_sample > 0) {
      lines.push_back(absl::StrCat("max micro-batch = floor((", GiB(fit.usable),
                                   " - ", GiB(fit.states), ") / ",
                                   GB(x->act_per_sample),
                                   " per sample) = ", fit.max_micro_batch));
    }
    lines.push_back(
        absl::StrCat("GPUs = Nd x t x p = ", l.nd, " x ", m.tensor_parallel(),
                     " x ", m.pipeline_parallel(), " = ", l.gpus,
                     m.gpus() > 0 ? " (fixed)" : " (the fewest that fit)",
                     "; nodes = ceil(", l.gpus, " / ", l.gpn, ") = ", l.nodes));
  }
  lines.push_back(absl::StrCat("global batch = ", l.global, " = micro-batch ",
                               l.b, " x Nd ", l.nd, " x accumulation ",
                               l.accum));
  return share.Sum() + acts;
}

// The checkpoint's size and the NVMe each node needs.
void AddStorage(Model* x, const Layout& l, v1::Plan* plan) {
  const v1::ModelSpec& m = x->m;
  const double ckpt =
      x->totals.weights + x->totals.master + x->totals.optimizer;
  plan->set_checkpoint_bytes(Bytes(ckpt));
  x->lines.push_back(absl::StrCat(
      "checkpoint = weights ", GB(x->totals.weights), " + master ",
      GB(x->totals.master), " + optimizer ", GB(x->totals.optimizer), " = ",
      GB(ckpt), " (", absl::StrFormat("%.4g", ckpt / x->params),
      " B/param; gradients are not saved)"));
  const bool sharded_ckpt = x->stage > 0 || x->tp > 1;
  const double ckpt_node =
      m.checkpoints_kept() * ckpt / (sharded_ckpt ? l.nodes : 1);
  const double nvme = m.dataset_bytes() + ckpt_node;
  plan->set_nvme_bytes_per_node(Bytes(nvme));
  x->lines.push_back(absl::StrCat(
      "NVMe per node = dataset ", GB(m.dataset_bytes()),
      " (a full copy per node) + ", m.checkpoints_kept(), " checkpoints x ",
      GB(ckpt),
      sharded_ckpt ? absl::StrCat(" / ", l.nodes, " nodes (sharded)")
                   : " (whole: rank 0 writes it)",
      " = ", GB(nvme)));
}

// Tokens/s, step time, time to train and the storage read rate. Returns
// the step time in seconds (0: unknown).
double AddThroughput(Model* x, const Layout& l, const Candidate& gpu,
                     v1::Plan* plan) {
  const v1::ModelSpec& m = x->m;
  std::vector<std::string>& lines = x->lines;
  const double peak = gpu.peak_tflops * 1e12;
  const double tokens_per_step = l.global * x->tokens_per_sample;
  double tokens_per_s = 0, step = 0;
  if (peak > 0) {
    tokens_per_s = l.gpus * peak * m.mfu() / x->flops_per_token;
    lines.push_back(absl::StrCat(
        "FLOPs per token = ",
        x->shape ? absl::StrCat("6Ψ + 12·L·h·s = 6·", Num(x->params), " + 12·",
                                m.transformer().layers(), "·",
                                m.transformer().hidden_size(), "·",
                                m.transformer().sequence_length())
                 : absl::StrCat("6Ψ = 6·", Num(x->params)),
        " = ", Num(x->flops_per_token),
        x->mlp ? " (a token is a sample)" : ""));
    lines.push_back(absl::StrCat(
        "tokens/s = GPUs x peak x MFU / FLOPs per token = ", l.gpus, " x ",
        Num(gpu.peak_tflops), "e12 x ", Num(m.mfu()), " / ",
        Num(x->flops_per_token), " = ", Num(tokens_per_s)));
    if (tokens_per_step > 0) {
      step = tokens_per_step / tokens_per_s;
      lines.push_back(absl::StrCat(
          "step time = FLOPs/token x tokens/step / (GPUs x peak x MFU) = ",
          Num(x->flops_per_token), " x ", Num(tokens_per_step), " / (", l.gpus,
          " x ", Num(gpu.peak_tflops), "e12 x ", Num(m.mfu()),
          ") = ", Duration(step)));
    } else {
      x->warnings.push_back(
          "step time needs the tokens per sequence: give --seq with --params");
    }
  } else if (!x->cpu) {
    x->warnings.push_back(absl::StrCat(
        "peak TFLOP/s of ", gpu.name, " at ", PrecisionName(m.precision()),
        " unknown: no step time, tokens/s or time to train"));
  }
  plan->set_step_seconds(step);
  plan->set_tokens_per_second(tokens_per_s);
  if (tokens_per_s > 0 && m.train_tokens() > 0) {
    const double train = m.train_tokens() / tokens_per_s;
    plan->set_train_seconds(train);
    lines.push_back(absl::StrCat("time to train = ", Num(m.train_tokens()),
                                 " tokens / ", Num(tokens_per_s),
                                 " tokens/s = ", Duration(train)));
  } else if (tokens_per_s > 0) {
    x->warnings.push_back(
        "no dataset or train tokens given: time to train not computed");
  }
  if (x->bytes_per_sample > 0 && step > 0) {
    const double rate = x->bytes_per_sample * l.global / l.nodes / step;
    plan->set_read_bytes_per_second_per_node(rate);
    lines.push_back(absl::StrCat(
        "read rate per node = ", GB(x->bytes_per_sample), "/sample x ",
        l.global, " samples / ", l.nodes, " nodes / ", Duration(step), " = ",
        absl::StrFormat("%.3g MB/s", rate / 1e6)));
  }
  return step;
}

// The all-reduce's bytes and the NIC bandwidth per node. Returns the
// bandwidth in Gbit/s.
double AddNetwork(Model* x, const Layout& l, double step, v1::Plan* plan) {
  const v1::ModelSpec& m = x->m;
  const double grad_elem = x->mlp ? 4 : (Mixed(m.precision()) ? 2 : 4);
  const double grad_bytes = grad_elem * x->params / x->tp;
  plan->set_allreduce_bytes_per_step(Bytes(grad_bytes));
  const double factor =
      l.nd > 1 ? (x->stage >= 3 ? 3.0 : 2.0) * (l.nd - 1) / l.nd : 0.0;
  const double per_gpu = factor * grad_bytes;
  x->lines.push_back(
      absl::StrCat("gradient bytes per replica = ", grad_elem, " B x ",
                   Num(x->params), x->tp > 1 ? absl::StrCat(" / ", x->tp) : "",
                   " = ", GB(grad_bytes), "; per GPU per step ",
                   x->stage >= 3 ? "3(Nd-1)/Nd (reduce-scatter + 2 all-gathers)"
                                 : "2(Nd-1)/Nd (ring)",
                   " x that = ", GB(per_gpu)));
  double nic = 0;
  // Each data-parallel group (one per model-parallel rank) runs its ring in
  // node order, so its traffic crosses a node's NICs once: the node sends
  // per-GPU ring bytes once per group it holds.
  const int groups_on_node = std::min(l.gpus_on_node, x->tp);
  if (l.nodes > 1 && step > 0) {
    nic = per_gpu * groups_on_node * 8 / (m.comm_share() * step) / 1e9;
    x->lines.push_back(absl::StrCat(
        "NIC per node = ", GB(per_gpu), " x ", groups_on_node,
        " data-parallel group(s) on the node x 8 / (", Num(m.comm_share()),
        " x ", Duration(step), ") = ", absl::StrFormat("%.1f", nic),
        " Gbit/s (rings in node order: each group's traffic crosses the "
        "node's NICs once; the node's GPUs share them)"));
  } else if (l.nodes <= 1) {
    x->lines.push_back(
        "NIC per node = 0 (one node: the all-reduce stays on "
        "NVLink/PCIe)");
  }
  plan->set_nic_gbps_needed(nic);
  return nic;
}

// What the user should change, each with the fix.
void AddWarnings(Model* x, const Layout& l, const Scored& chosen, bool online,
                 double states_and_acts, double nic) {
  const v1::ModelSpec& m = x->m;
  const Candidate& gpu = chosen.c;
  std::vector<std::string>& w = x->warnings;
  if (!chosen.fit.fits && !x->cpu) {
    std::string msg =
        absl::StrCat("does not fit on ", ShortModelName(gpu.name), " (",
                     GiB(static_cast<double>(gpu.memory)), ") GPUs");
    if (auto better = BetterStage(*x, static_cast<double>(gpu.memory))) {
      absl::StrAppend(&msg, " without ZeRO-", better->first, " (ZeRO-",
                      better->first, " fits over ", better->second.gpus,
                      " GPUs)");
    } else if (m.gpus() > 0 && x->stage > 0) {
      absl::StrAppend(&msg, " with ", m.gpus(), " GPUs: use more GPUs");
    } else {
      absl::StrAppend(&msg, ": needs ", GiB(states_and_acts),
                      " for states and activations; raise tensor/pipeline "
                      "parallelism, recompute activations or lower the "
                      "micro-batch");
    }
    w.push_back(msg);
  }
  if (online && gpu.in_fleet < l.gpus) {
    w.push_back(absl::StrCat("needs ", l.gpus, " GPUs but the fleet has ",
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
  if (m.global_batch_size() > 0 && m.global_batch_size() % (l.b * l.nd) != 0) {
    w.push_back(absl::StrCat("global batch ", m.global_batch_size(),
                             " is not divisible by micro-batch ", l.b,
                             " x data-parallel ", l.nd, " = ", l.b * l.nd));
  }
  if (m.pipeline_parallel() > 1 && l.accum < m.pipeline_parallel()) {
    w.push_back(absl::StrCat(
        "pipeline bubble: ", l.accum, " micro-batches per step for ",
        m.pipeline_parallel(), " stages; use a global batch of at least ",
        m.pipeline_parallel() * l.b * l.nd));
  }
  if (x->mlp && !x->cpu && !gpu.no_xl_train.empty()) {
    w.push_back(absl::StrCat("xl-train (the MLP's worker) cannot run on ",
                             ShortModelName(gpu.name), ": ", gpu.no_xl_train));
  }
  if (m.sequence_parallel() && m.tensor_parallel() == 1) {
    w.push_back("sequence parallelism needs tensor parallelism > 1; ignored");
  }
}

}  // namespace
}  // namespace internal

absl::StatusOr<v1::Plan> MakePlan(const v1::ModelSpec& spec,
                                  const std::vector<FleetGpu>& fleet) {
  using namespace internal;  // NOLINT(build/namespaces)
  if (absl::Status st = ValidateModelSpec(spec); !st.ok()) return st;
  Model x;
  x.m = WithDefaults(spec);
  x.cpu = IsCpu(x.m);
  x.mlp = HasMlp(x.m.mlp());
  x.shape = HasShape(x.m.transformer());
  ResolveModel(&x);
  absl::StatusOr<std::vector<Candidate>> candidates = Candidates(&x, fleet);
  if (!candidates.ok()) return candidates.status();
  const bool online = !fleet.empty();
  const std::vector<Scored> scored = Rank(x, *candidates, online);
  v1::Plan plan;
  AddGpuFits(x, scored, online, &plan);
  const Scored& chosen = scored.front();
  const Layout layout = ChooseLayout(x, spec, chosen, &plan);
  const double states_and_acts = AddMemory(&x, layout, chosen, &plan);
  AddStorage(&x, layout, &plan);
  const double step = AddThroughput(&x, layout, chosen.c, &plan);
  const double nic = AddNetwork(&x, layout, step, &plan);
  AddWarnings(&x, layout, chosen, online, states_and_acts, nic);
  for (const std::string& s : x.warnings) plan.add_warnings(s);
  for (const std::string& s : x.lines) plan.add_arithmetic(s);
  return plan;
}

}  // namespace xl::planner
