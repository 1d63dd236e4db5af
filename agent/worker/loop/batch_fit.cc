// FitBatch; see batch_fit.h. The model is the planner's (MlpMemory), so
// `xlctl plan` and the worker agree on what fits.
#include "agent/worker/loop/batch_fit.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/worker/data/batch_producer.h"
#include "common/planner/planner.h"

namespace xl::worker {
namespace {

constexpr int kMaxBatch = 1 << 20;

// Bytes of `config` at micro-batch b with k micro-batches per step.
double Need(const TrainConfig& c, bool cpu, int b, int k) {
  double total = static_cast<double>(
      planner::MlpMemory(MlpShapeOf(c), b, c.precision, cpu).total_bytes());
  if (!cpu) {
    // The device's two input slots hold one micro-batch each (the pinned
    // host slots hold whole steps: PinnedStepBatchCap bounds those).
    total += 2.0 * b * (4.0 * c.input_dim + 4.0);
  } else if (k > 1) {
    // MlpMemory counts two batches of b; the producer's slots hold b * k.
    total += 2.0 * b * (k - 1) * (4.0 * c.input_dim + 4.0);
  }
  return total;
}

// XL_MEMORY_BYTES_PER_NODE (the job's resources.memory_bytes_per_node, set
// by the scheduler); 0 when unset or not a number.
uint64_t MemoryBytesPerNodeFromEnv() {
  uint64_t node = 0;
  const char* s = std::getenv("XL_MEMORY_BYTES_PER_NODE");
  if (s == nullptr || !absl::SimpleAtoi(s, &node)) return 0;
  return node;
}

std::string GiB(double bytes) {
  return absl::StrFormat("%.2f GiB", bytes / (1ull << 30));
}

}  // namespace

v1::MlpShape MlpShapeOf(const TrainConfig& c) {
  v1::MlpShape s;
  s.set_input_dim(c.input_dim);
  s.set_hidden_dim(c.hidden_dim);
  s.set_hidden_layers(c.hidden_layers);
  s.set_classes(c.classes);
  return s;
}

int MaxBatchPerRank(const TrainConfig& config, bool cpu, double budget_bytes,
                    int accumulation_steps) {
  const double usable =
      cpu ? budget_bytes / 1.1 : planner::GpuUsableBytes(budget_bytes);
  const int k = std::max(1, accumulation_steps);
  if (!(usable > 0) || Need(config, cpu, 1, k) > usable) return 0;
  // Need() is affine in b: solve, then step down past rounding.
  const double fixed = Need(config, cpu, 0, k);
  const double per = Need(config, cpu, 1, k) - fixed;
  double b = per > 0 ? std::floor((usable - fixed) / per) : kMaxBatch;
  int batch = static_cast<int>(std::clamp(b, 1.0, double{kMaxBatch}));
  while (batch > 1 && Need(config, cpu, batch, k) > usable) --batch;
  // A multiple of 8 (whole tensor-core tiles) when there is room for one.
  if (!cpu && batch >= 16) batch -= batch % 8;
  return batch;
}

int PinnedStepBatchCap(const TrainConfig& c, int slots) {
  const double per_sample = slots * (4.0 * c.input_dim + 4);
  return static_cast<int>(std::clamp(0.25 * HostMemoryPerRank() / per_sample,
                                     1.0, double{kMaxBatch}));
}

absl::Status FitBatch(TrainConfig* c, int world, bool cpu, double budget_bytes,
                      std::string* explain, int max_step_batch) {
  const int64_t g = c->global_batch;
  // A step's samples per rank over what the input slots may hold.
  auto over_cap = [&](int64_t per_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.global_batch: ", g, " is ", per_rank,
        " samples per rank per step, over ",
        std::min(kMaxBatch, max_step_batch),
        max_step_batch < kMaxBatch
            ? " (the pinned host slots of a step's inputs may take a "
              "quarter of this rank's share of host memory)"
            : "",
        "; use a smaller global_batch or more ranks"));
  };
  const std::string where =
      cpu ? absl::StrCat(GiB(budget_bytes), " for this rank (its share of "
                         "resources.memory_bytes_per_node, less ",
                         kCpuRankOverheadBytes >> 20, " MiB)")
          : absl::StrCat(GiB(budget_bytes), " free on the GPU");
  if (c->batch_auto) {
    const int memory_b = MaxBatchPerRank(*c, cpu, budget_bytes);
    // The caller's cap on a step's inputs (pinned host slots); a multiple
    // of 8 on a GPU, as the memory fit is.
    int max_b = std::min(memory_b, std::max(1, max_step_batch));
    if (max_b < memory_b && !cpu && max_b >= 16) max_b -= max_b % 8;
    if (memory_b == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "train.batch_per_rank: auto: not even one sample fits: the model "
          "needs ", GiB(Need(*c, cpu, 1, 1)), " at batch 1 and ",
          GiB(cpu ? budget_bytes / 1.1
                  : planner::GpuUsableBytes(budget_bytes)),
          " of ", where, " may hold model and batch (the rest is margin)",
          cpu ? "; raise resources.memory_bytes_per_node or shrink the model"
              : "; use a GPU with more memory or shrink the model"));
    }
    c->batch_per_rank = max_b;
    c->accumulation_steps = 1;
    if (g > 0) {
      if (g % world != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "train.global_batch: ", g, " is not divisible by the ", world,
            " ranks; use a multiple of ", world));
      }
      const int64_t per_rank = g / world;
      if (per_rank > std::min(kMaxBatch, max_step_batch)) {
        return over_cap(per_rank);
      }
      // The fewest micro-batches that fit and divide the rank's share (on
      // CPU a step's input batch is held whole, so each k is checked again).
      int64_t k = (per_rank + max_b - 1) / max_b;
      for (; k <= per_rank; ++k) {
        if (per_rank % k != 0) continue;
        if (MaxBatchPerRank(*c, cpu, budget_bytes, static_cast<int>(k)) >=
            per_rank / k) {
          break;
        }
      }
      if (k > per_rank) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "train.global_batch: ", g, " samples per step do not fit in ",
            where, " in any split into micro-batches (",
            cpu ? "the step's inputs are held whole"
                : "the model alone does not fit",
            "); use a smaller global_batch or more ranks"));
      }
      const int b = static_cast<int>(per_rank / k);
      // A share with no divisor near the fit (a prime) would run tiny
      // micro-batches; say so rather than run at a fraction of the speed.
      if (k > 1 && b * 8 < max_b && b < 8) {
        return absl::InvalidArgumentError(absl::StrCat(
            "train.global_batch: ", g, " over ", world, " ranks is ",
            per_rank, " samples per rank, which splits only into ", k,
            " micro-batches of ", b, " (up to ", max_b,
            " fit); use a global_batch whose share per rank has a divisor "
            "near ", max_b, ", e.g. ",
            int64_t{world} * max_b * ((per_rank + max_b - 1) / max_b)));
      }
      c->batch_per_rank = b;
      c->accumulation_steps = static_cast<int>(k);
    }
    absl::StrAppend(
        explain, "batch_per_rank auto: ", c->batch_per_rank,
        c->accumulation_steps > 1
            ? absl::StrCat(" x ", c->accumulation_steps, " micro-batches")
            : "",
        " (largest that fits: ", max_b,
        max_b < memory_b
            ? absl::StrCat(", lowered from ", memory_b,
                           " so that the pinned input slots take at most a "
                           "quarter of this rank's share of host memory")
            : "",
        ", model needs ",
        GiB(Need(*c, cpu, c->batch_per_rank, c->accumulation_steps)), " of ",
        where, ")");
  } else if (g > 0) {
    const int64_t per_step = static_cast<int64_t>(world) * c->batch_per_rank;
    if (g % per_step != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train.global_batch: ", g, " is not a multiple of ", world,
          " ranks x batch_per_rank ", c->batch_per_rank, " = ", per_step,
          "; use a multiple of ", per_step, ", or batch_per_rank: auto"));
    }
    const int64_t per_rank = g / world;
    if (per_rank > std::min(kMaxBatch, max_step_batch)) {
      return over_cap(per_rank);
    }
    c->accumulation_steps = static_cast<int>(g / per_step);
    // On a GPU the budget is what it has free: a fixed batch that cannot
    // fit is refused here, with the numbers, rather than at an allocation.
    if (!cpu && budget_bytes > 0 &&
        Need(*c, false, c->batch_per_rank, c->accumulation_steps) >
            planner::GpuUsableBytes(budget_bytes)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "train.batch_per_rank: ", c->batch_per_rank, " needs ",
          GiB(Need(*c, false, c->batch_per_rank, c->accumulation_steps)),
          " and ", GiB(planner::GpuUsableBytes(budget_bytes)), " of ", where,
          " may hold model and batch; use batch_per_rank: auto (global_batch "
          "is kept by more micro-batches) or a smaller batch_per_rank"));
    }
    absl::StrAppend(explain, "batch_per_rank ", c->batch_per_rank, " x ",
                    c->accumulation_steps, " micro-batches");
  }
  if (static_cast<int64_t>(c->batch_per_rank) * c->accumulation_steps >
      kMaxBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.global_batch: ", c->batch_per_rank, " x ",
        c->accumulation_steps, " samples per rank per step is over ",
        kMaxBatch, "; use a smaller global_batch or more ranks"));
  }
  if (g > 0 || c->batch_auto) {
    absl::StrAppend(explain, "; global batch ",
                    static_cast<int64_t>(world) * c->StepBatch());
  }
  return absl::OkStatus();
}

absl::Status FitBatchForRun(TrainConfig* c, int world, bool cpu,
                            double budget_bytes, int resumed_batch,
                            std::string* explain, int max_step_batch) {
  if (c->batch_auto && resumed_batch > 0) {
    TrainConfig kept = *c;
    kept.batch_auto = false;
    kept.batch_per_rank = resumed_batch;
    kept.accumulation_steps = 1;
    std::string line;
    if (FitBatch(&kept, world, cpu, budget_bytes, &line, max_step_batch)
            .ok() &&
        MaxBatchPerRank(kept, cpu, budget_bytes, kept.accumulation_steps) >=
            resumed_batch &&
        kept.StepBatch() <= max_step_batch) {
      *c = kept;
      absl::StrAppend(explain, "batch_per_rank auto: ", resumed_batch,
                      ", kept from the checkpoint",
                      line.empty() ? "" : absl::StrCat(" (", line, ")"));
      return absl::OkStatus();
    }
    absl::StrAppend(explain, "warning: the checkpoint's batch per rank ",
                    resumed_batch,
                    " no longer fits here; fitted anew, so the samples of "
                    "the steps to come are not those the run would have "
                    "seen; ");
  }
  return FitBatch(c, world, cpu, budget_bytes, explain, max_step_batch);
}

double HostMemoryPerRank() {
  uint64_t node = MemoryBytesPerNodeFromEnv();
  if (node == 0) {
    node = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
           static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
  }
  return static_cast<double>(node) / LocalWorldSize();
}

absl::StatusOr<double> CpuRankBudgetFromEnv() {
  const uint64_t node = MemoryBytesPerNodeFromEnv();
  if (node == 0) {
    return absl::FailedPreconditionError(
        "train.batch_per_rank: auto on CPU sizes the batch from the job's "
        "memory, and this job has none: set resources.memory_bytes_per_node "
        "(outside xl, set XL_MEMORY_BYTES_PER_NODE), or give batch_per_rank "
        "a number");
  }
  return static_cast<double>(node) / LocalWorldSize() -
         static_cast<double>(kCpuRankOverheadBytes);
}

}  // namespace xl::worker
