// `xlctl plan`: the model's shape, the parallelism and the hardware to plan
// for, as flags.
#include <CLI/CLI.hpp>
#include <map>
#include <string>

#include "client/cli_subcommands.h"
#include "client/plan_command.h"

namespace xl::client::cli {
namespace {

constexpr char kPlanFooter[] =
    "Give the model as --params N, or as a transformer shape --layers L "
    "--hidden H --heads A --vocab V --seq S [--ffn F] (which also counts "
    "the activations; --seq with --params gives the step time). Counts "
    "take 7.5e9, 7.5B, 70B, 2T, 1.5M.\n"
    "Memory model: mixed precision AdamW is 16 bytes per parameter "
    "(bf16 weights 2 + gradients 2 + fp32 master 4 + Adam m 4 + v 4; "
    "ZeRO, Rajbhandari et al. 2020), divided by --tp x --pp, then by the "
    "data-parallel degree as --zero says; activations per Korthikanti et "
    "al. 2022; workspace max(1 GiB, 5%). GB is 1e9 bytes, GiB 2^30.\n"
    "Online by default: the scheduler plans against its live GPUs "
    "(PlanResources); when it cannot be reached xlctl says so on stderr "
    "and plans with the built-in GPU catalogue, as --offline does.\n"
    "-o json|yaml print the xl.v1.Plan message.\n"
    "Global flags (--server, --user, --timeout, -o) and exit codes: "
    "'xlctl --help'.";

// The count flags (--params, --layers, ...), in the order of
// kPlanCountFlags.
void AddCountFlags(CLI::App* plan, PlanGivenFlags* f) {
  const std::map<std::string, std::string> help = {
      {"--params", "parameters, like 7.5B (or give the transformer shape)"},
      {"--layers", "transformer layers L"},
      {"--hidden", "hidden size h"},
      {"--heads", "attention heads a"},
      {"--vocab", "vocabulary size V"},
      {"--seq", "sequence length s (tokens per sample)"},
      {"--ffn", "feed-forward hidden size (default 4h)"},
      {"--tp", "tensor-parallel degree t (default 1)"},
      {"--pp", "pipeline-parallel degree p (default 1)"},
      {"--micro-batch", "sequences per GPU per micro-step (default 1)"},
      {"--global-batch",
       "sequences per optimizer step (default micro-batch x data-parallel)"},
      {"--dataset-tokens", "tokens in the dataset (one epoch is trained)"},
      {"--dataset-bytes", "bytes of the dataset on disk"},
      {"--train-tokens", "tokens to train for (default --dataset-tokens)"},
      {"--gpus", "total GPUs, when fixed (default: the fewest that fit)"},
      {"--gpus-per-node", "GPUs per node (default 8, or the fleet's)"},
      {"--checkpoints", "checkpoints kept on NVMe (default 2)"},
  };
  for (int i = 0; i < kPlanCountFlagCount; ++i) {
    const std::string name = kPlanCountFlags[i];
    AddGivenOption(plan, name, &f->counts[name], help.at(name));
  }
}

// How the model trains: precision, optimizer, ZeRO or FSDP, recomputation.
void AddTrainingFlags(CLI::App* plan, Invocation* inv, PlanGivenFlags* f) {
  plan->add_option("--precision", inv->plan.precision,
                   "fp32, bf16 (default; fp32 master weights) or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}, CLI::ignore_case));
  plan->add_option("--optimizer", inv->plan.optimizer,
                   "adamw (default), sgd (with momentum) or adafactor")
      ->check(CLI::IsMember({"adamw", "sgd", "adafactor"}, CLI::ignore_case));
  CLI::Option* zero =
      AddGivenOption(plan, "--zero", &f->zero,
                     "ZeRO stage: 0 none (default), 1 optimizer states, 2 "
                     "+ gradients, 3 + weights")
          ->check(CLI::Range(0, 3));
  plan->add_flag("--fsdp", inv->plan.fsdp, "FSDP full shard (= --zero 3)")
      ->excludes(zero);
  plan->add_option("--recompute", inv->plan.recompute,
                   "activation recomputation: none (default), selective, "
                   "full")
      ->check(CLI::IsMember({"none", "selective", "full"}, CLI::ignore_case));
  plan->add_flag("--sequence-parallel", inv->plan.sequence_parallel,
                 "Megatron sequence parallelism (with --tp > 1)");
}

// The hardware and how well it is used, and where its numbers come from.
void AddHardwareFlags(CLI::App* plan, Invocation* inv, PlanGivenFlags* f) {
  plan->add_option("--gpu", inv->plan.gpu,
                   "plan for this GPU model: H100-80GB, H100-PCIe-80GB, "
                   "A100-80GB, A100-40GB, H200, L40S, A40, A30, L4, "
                   "V100-32GB, or an NVML name (default: every model)");
  AddGivenOption(plan, "--mfu", &f->mfu,
                 "model FLOPs utilization, in (0, 1] (default 0.4)");
  AddGivenOption(plan, "--comm-share", &f->comm_share,
                 "share of the step the all-reduce may take (default 0.25)");
  plan->add_flag("--offline", inv->plan.offline,
                 "do not ask the scheduler; use the built-in GPU catalogue");
}

}  // namespace

void AddPlanCommand(Subcommands* commands, Invocation* inv,
                    PlanGivenFlags* flags) {
  CLI::App* plan = commands->Add(
      "plan",
      "What configuration a training needs: memory per GPU, GPUs and nodes, "
      "checkpoint and NVMe, read rate, all-reduce and NIC bandwidth, step "
      "time and time to train, with the arithmetic shown.");
  plan->footer(kPlanFooter);
  AddCountFlags(plan, flags);
  AddTrainingFlags(plan, inv, flags);
  AddHardwareFlags(plan, inv, flags);
}

void PlanGivenFlags::ApplyTo(PlanFlags* plan) const {
  for (const auto& [name, count] : counts) {
    if (count.given()) plan->counts[name] = count.value;
  }
  zero.ApplyTo(&plan->zero);
  mfu.ApplyTo(&plan->mfu);
  comm_share.ApplyTo(&plan->comm_share);
}

}  // namespace xl::client::cli
