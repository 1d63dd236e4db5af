// The ResourceRequest of an sbatch script, made once every #SBATCH line is
// read: Slurm's counts of nodes, tasks, GPUs and CPUs depend on each other,
// and those that contradict each other are refused here.
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/sbatch_request.h"

namespace xl::client::sbatch {
namespace {

// How many nodes, and tasks on each node.
struct TaskLayout {
  int64_t nodes = 1;
  int64_t per_node = 1;
};

// The tasks per node given --ntasks-per-node: with --ntasks and without
// --nodes the node count follows; with all three they must agree.
absl::Status TasksGivenPerNode(const std::string& path, const Request& req,
                               TaskLayout* layout) {
  const int64_t per_node = req.ntasks_per_node->value;
  layout->per_node = per_node;
  if (req.ntasks && !req.nodes) {
    // As Slurm: the node count follows from the other two.
    if (req.ntasks->value % per_node != 0) {
      return Refusal(
          path, req.ntasks->line,
          absl::StrCat("--ntasks=", req.ntasks->value,
                       " is not a multiple of --ntasks-per-node=", per_node,
                       "; xl runs as many tasks on every node: give a "
                       "multiple, or --nodes"));
    }
    layout->nodes = req.ntasks->value / per_node;
  } else if (req.ntasks && req.ntasks->value != layout->nodes * per_node) {
    const ScriptLine& later =
        req.ntasks->line.number >= req.ntasks_per_node->line.number
            ? req.ntasks->line
            : req.ntasks_per_node->line;
    return Refusal(
        path, later,
        absl::StrCat("--ntasks=", req.ntasks->value, " is not --nodes (",
                     layout->nodes, ") x --ntasks-per-node (", per_node,
                     "); give two of the three"));
  }
  return absl::OkStatus();
}

// Nodes and tasks per node from --nodes, --ntasks and --ntasks-per-node.
absl::Status ResolveTasks(const std::string& path, const Request& req,
                          TaskLayout* layout) {
  const bool elastic = req.min_nodes > 0;
  layout->nodes = req.nodes ? req.nodes->value : 1;
  // Slurm runs one task per node unless told otherwise; xl's own default
  // would be one rank per GPU. A Slurm script expects Slurm's (its srun or
  // torchrun starts the per-GPU processes), so it is set explicitly.
  layout->per_node = 1;
  if (req.ntasks && elastic) {
    return Refusal(
        path, req.ntasks->line,
        absl::StrCat("--ntasks fixes the number of tasks, but an elastic job "
                     "(--nodes=",
                     req.min_nodes, "-", layout->nodes,
                     ") runs as many tasks on every node it gets; give "
                     "--ntasks-per-node instead"));
  }
  if (req.ntasks_per_node) {
    if (absl::Status st = TasksGivenPerNode(path, req, layout); !st.ok()) {
      return st;
    }
  } else if (req.ntasks) {
    if (req.ntasks->value % layout->nodes != 0) {
      return Refusal(
          path, req.ntasks->line,
          absl::StrCat("--ntasks=", req.ntasks->value,
                       " does not divide evenly over ", layout->nodes,
                       " nodes; xl runs as many tasks on every node: give a "
                       "multiple of --nodes, or --ntasks-per-node"));
    }
    layout->per_node = req.ntasks->value / layout->nodes;
  }
  if (layout->nodes * layout->per_node > kMaxCount) {
    const ScriptLine& line = req.ntasks  ? req.ntasks->line
                             : req.nodes ? req.nodes->line
                                         : req.ntasks_per_node->line;
    return Refusal(path, line,
                   absl::StrCat("asks for ", layout->nodes * layout->per_node,
                                " tasks; at most ", kMaxCount));
  }
  return absl::OkStatus();
}

// GPUs per node, from whichever options gave them; they must agree.
class GpusPerNode {
 public:
  explicit GpusPerNode(const std::string& path) : path_(path) {}

  // Takes `n` GPUs per node, as `line` makes them. Refuses, naming the later
  // line, a count other than an earlier option's, and more than kMaxCount.
  absl::Status Agree(int64_t n, const ScriptLine& line) {
    if (gpn_ && gpn_->value != n) {
      const bool later = line.number >= gpn_->line.number;
      return Refusal(
          path_, later ? line : gpn_->line,
          absl::StrCat("makes ", later ? n : gpn_->value,
                       " GPUs per node, but line ",
                       (later ? gpn_->line : line).number, " makes ",
                       later ? gpn_->value : n, "; keep one of them"));
    }
    if (n > kMaxCount) {
      return Refusal(path_, line, absl::StrCat("makes ", n, " GPUs per node"));
    }
    gpn_ = Said<int>{static_cast<int>(n), line};
    return absl::OkStatus();
  }

  // The count agreed on; 0 when no option gave one.
  int value() const { return gpn_ ? gpn_->value : 0; }

 private:
  const std::string& path_;
  std::optional<Said<int>> gpn_;
};

// GPUs per node from --gres, --gpus-per-node, --gpus and --gpus-per-task.
absl::Status ResolveGpusPerNode(const std::string& path, const Request& req,
                                const TaskLayout& layout, GpusPerNode* gpn) {
  for (const std::optional<Said<int>>* given :
       {&req.gres_gpus, &req.gpus_per_node}) {
    if (!*given) continue;
    if (absl::Status st = gpn->Agree((*given)->value, (*given)->line);
        !st.ok()) {
      return st;
    }
  }
  if (req.gpus) {
    if (req.min_nodes > 0) {
      return Refusal(path, req.gpus->line,
                     "--gpus counts the whole job's GPUs, but an elastic job "
                     "(--nodes=MIN-MAX) gets the same GPUs on every node it "
                     "runs on; give --gpus-per-node instead");
    }
    if (req.gpus->value % layout.nodes != 0) {
      return Refusal(path, req.gpus->line,
                     absl::StrCat("--gpus=", req.gpus->value,
                                  " does not divide evenly over ", layout.nodes,
                                  " nodes; xl gives every node as many GPUs: "
                                  "give --gpus-per-node instead"));
    }
    if (absl::Status st =
            gpn->Agree(req.gpus->value / layout.nodes, req.gpus->line);
        !st.ok()) {
      return st;
    }
  }
  if (req.gpus_per_task) {
    return gpn->Agree(int64_t{req.gpus_per_task->value} * layout.per_node,
                      req.gpus_per_task->line);
  }
  return absl::OkStatus();
}

// GPUs per node and their model, and CPUs per node.
absl::Status ResolveGpusAndCpus(const std::string& path, const Request& req,
                                const TaskLayout& layout,
                                v1::ResourceRequest* res) {
  GpusPerNode gpn(path);
  if (absl::Status st = ResolveGpusPerNode(path, req, layout, &gpn); !st.ok()) {
    return st;
  }
  const int gpus = gpn.value();
  res->set_gpus_per_node(gpus);
  res->clear_gpu_models();
  if (req.gpu_model) {
    if (gpus == 0) {
      return Refusal(path, req.gpu_model->line,
                     "names a GPU type but asks for no GPU; give a count");
    }
    res->add_gpu_models(req.gpu_model->value);
  }
  // Without --cpus-per-task Slurm gives each task one CPU; xl then
  // reserves none, and the ranks share the node's CPUs.
  if (req.cpus_per_task) {
    const int64_t cpus = int64_t{req.cpus_per_task->value} * layout.per_node;
    if (cpus > kMaxCount) {
      return Refusal(path, req.cpus_per_task->line,
                     absl::StrCat("makes ", cpus, " CPUs per node"));
    }
    res->set_cpus_per_node(static_cast<int>(cpus));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveResources(const std::string& path, const Request& req,
                              v1::JobSpec* spec) {
  v1::ResourceRequest* res = spec->mutable_resources();
  TaskLayout layout;
  if (absl::Status st = ResolveTasks(path, req, &layout); !st.ok()) return st;
  res->set_nodes(static_cast<int>(layout.nodes));
  res->set_min_nodes(req.min_nodes);
  res->set_ranks_per_node(static_cast<int>(layout.per_node));
  if (req.min_nodes > 0 && req.switches) {
    return Refusal(path, req.switches->line,
                   "an elastic job (--nodes=MIN-MAX) cannot also limit its "
                   "switches; remove one of them");
  }
  return ResolveGpusAndCpus(path, req, layout, res);
}

}  // namespace xl::client::sbatch
