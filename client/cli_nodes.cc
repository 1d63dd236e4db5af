// The subcommands about nodes: nodes, node, drain and resume.
#include <CLI/CLI.hpp>

#include "client/cli_subcommands.h"

namespace xl::client::cli {

void AddNodesCommand(Subcommands* commands) {
  commands->Add("nodes",
                "List the nodes: state, GPUs used/total, GPU model, CPUs, "
                "memory, free NVMe, fastest NIC, labels and jobs.");
}

void AddServersCommand(Subcommands* commands) {
  commands->Add("servers",
                "List the scheduler's replicas (every address of --server): "
                "which leads, the Raft term, commit and apply indexes, pid "
                "and release.");
}

void AddNodeCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* node =
      commands->Add("node", "Show one node: inventory, usage and state.");
  AddNodeArgument(node, inv);
}

void AddDrainCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* drain = commands->Add("drain",
                                  "Drain a node: it keeps its running jobs "
                                  "but takes no new ones.");
  AddNodeArgument(drain, inv);
  drain->add_option("--reason", inv->reason, "why (shown with the node)");
}

void AddResumeCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* resume =
      commands->Add("resume", "Let a drained node take new jobs again.");
  AddNodeArgument(resume, inv);
}

}  // namespace xl::client::cli
