// Sizing a job from what it trains: the planner's plan over the live
// fleet's GPUs, the resources derived from it where the job gave none, and
// a checkpoint-sized grace period (PlanResources, SizeFromModel).
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "common/train_spec.h"
#include "common/planner/planner.h"
#include "common/status.h"
#include "server/control/controller.h"

namespace xl::control {

namespace {

std::vector<planner::FleetGpu> FleetOf(
    const std::vector<const v1::NodeInventory*>& inventories) {
  std::vector<planner::FleetGpu> fleet;
  for (const auto* inv : inventories) {
    std::map<std::string, planner::FleetGpu> by_model;
    for (const auto& g : inv->gpus()) {
      planner::FleetGpu& f = by_model[g.model()];
      f.model = g.model();
      f.memory_bytes = std::max<uint64_t>(f.memory_bytes, g.memory_bytes());
      ++f.count;
    }
    for (auto& [model, f] : by_model) {
      f.gpus_per_node = f.count;
      fleet.push_back(f);
    }
  }
  return fleet;
}

}  // namespace

absl::StatusOr<v1::Plan> Controller::PlanResources(const v1::ModelSpec& model) {
  RETURN_IF_ERROR(planner::ValidateModelSpec(model));
  std::vector<planner::FleetGpu> fleet;
  {
    absl::MutexLock lock(&mu_);
    std::vector<const v1::NodeInventory*> inventories;
    for (const auto& [name, node] : model_.nodes.all()) {
      if (!node.lost) inventories.push_back(&node.inventory);
    }
    fleet = FleetOf(inventories);
  }
  return planner::MakePlan(model, fleet);
}

absl::Status Controller::SizeFromModel(v1::JobSpec* spec, v1::Plan* plan) {
  v1::ModelSpec model;
  bool derive_all = false;
  if (spec->has_model()) {
    model = spec->model();
    derive_all = true;
  } else if (spec->has_train()) {
    // xl-train's MLP, with xl-train's defaults (common/train_spec.h).
    const v1::TrainSpec t = train_spec::WithDefaults(spec->train());
    v1::MlpShape* mlp = model.mutable_mlp();
    mlp->set_input_dim(t.input_dim());
    mlp->set_hidden_dim(t.hidden_dim());
    mlp->set_hidden_layers(t.hidden_layers());
    mlp->set_classes(t.classes());
    model.set_micro_batch_size(t.batch_per_rank() > 0
                                   ? t.batch_per_rank()
                                   : train_spec::kDefaultBatchPerRank);
    const bool cpu = t.device() == "cpu" ||
                     (t.device().empty() && spec->resources().gpus_per_node() == 0);
    if (cpu) {
      model.set_gpu_model(planner::kCpuDevice);
      model.set_precision(v1::FP32);
    } else {
      model.set_precision(t.precision());
    }
    if (!planner::ValidateModelSpec(model).ok()) return absl::OkStatus();
    *spec->mutable_model() = model;
  } else {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*plan, PlanResources(model));
  // A training job that gives no grace gets the time to write its
  // checkpoint on SIGTERM: 10 s + twice the checkpoint at 1 GB/s (a
  // node's share of a parallel file system, or one NVMe drive, with
  // room), at most 10 min (a longer grace delays preemption and requeues;
  // a job may ask for up to 1 h).
  if (!spec->has_grace_period() && plan->checkpoint_bytes() > 0) {
    constexpr double kWriteBytesPerSecond = 1e9;
    const int64_t seconds = std::min<int64_t>(
        600, 10 + static_cast<int64_t>(std::ceil(
                       2 * static_cast<double>(plan->checkpoint_bytes()) /
                       kWriteBytesPerSecond)));
    spec->mutable_grace_period()->set_seconds(seconds);
    plan->add_arithmetic(absl::StrCat(
        "grace period (SIGTERM to SIGKILL, to checkpoint) = 10 s + 2 x ",
        HumanBytes(plan->checkpoint_bytes()), " / 1 GB/s = ", seconds,
        " s", seconds == 600 ? " (at most 10 min by default; give "
                               "grace_period for longer)"
                             : ""));
  }
  auto* r = spec->mutable_resources();
  const uint64_t per_rank = plan->memory_per_gpu().total_bytes();
  if (model.gpu_model() == planner::kCpuDevice) {
    // batch_per_rank: auto is sized from the memory asked for; a figure
    // derived here from the default batch would size it to that batch.
    const bool auto_batch =
        spec->has_train() && spec->train().batch_per_rank_auto();
    if (r->memory_bytes_per_node() == 0 && !auto_batch) {
      const int ranks = r->ranks_per_node() > 0 ? r->ranks_per_node() : 1;
      r->set_memory_bytes_per_node(per_rank * static_cast<uint64_t>(ranks));
    }
    return absl::OkStatus();
  }
  bool fits_fleet = false, any_fleet = false;
  for (const auto& g : plan->gpus_that_fit()) {
    if (g.in_fleet() > 0) any_fleet = true;
    if (g.in_fleet() > 0 && g.fits()) fits_fleet = true;
  }
  if (any_fleet && !fits_fleet) {
    std::string why = absl::StrCat(
        "model: needs ", HumanBytes(per_rank), " per GPU (",
        plan->model().micro_batch_size(), " per micro-batch), and no GPU of the "
        "fleet has that much");
    for (const auto& w : plan->warnings()) absl::StrAppend(&why, "; ", w);
    absl::StrAppend(&why, "; shard with model.sharding (ZERO_3), use tensor or "
                          "pipeline parallelism, or lower micro_batch_size "
                          "(xlctl plan shows the arithmetic)");
    return absl::InvalidArgumentError(why);
  }
  if (r->min_gpu_memory_bytes() == 0) r->set_min_gpu_memory_bytes(per_rank);
  if (derive_all) {
    if (r->gpus_per_node() == 0) {
      r->set_gpus_per_node(std::max(1, std::min(plan->gpus(),
                                                plan->model().gpus_per_node())));
    }
    if (r->nodes() == 0) r->set_nodes(std::max(1, plan->nodes()));
    if (r->nvme_bytes_per_node() == 0) {
      r->set_nvme_bytes_per_node(plan->nvme_bytes_per_node());
    }
  }
  return absl::OkStatus();
}

}  // namespace xl::control
