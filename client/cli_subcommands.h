// The subcommands of xlctl as CLI11 declarations, one function each, in
// files by the job they do: cli_submit.cc, cli_jobs.cc (jobs that exist),
// cli_queues.cc, cli_nodes.cc, cli_auth.cc and cli_plan.cc. Each binds its
// options to the Invocation, or, where only a given flag may override a
// default, to a GivenFlag that CommandLine::Resolve applies after the parse.
// Internal to CommandLine (cli.cc). Not thread-safe: one per CommandLine.
#ifndef XL_CLIENT_CLI_SUBCOMMANDS_H_
#define XL_CLIENT_CLI_SUBCOMMANDS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "client/cli.h"
#include "client/commands.h"
#include "client/job_file.h"
#include "client/plan_command.h"

namespace xl::client::cli {

// A flag applied only when it is given, so that what it overrides (the job
// file, a queue's current value, the planner's default) is kept otherwise.
template <typename T>
struct GivenFlag {
  T value{};
  CLI::Option* option = nullptr;

  bool given() const { return option->count() > 0; }
  // Sets `*target` to the value when the flag was given.
  template <typename Target>
  void ApplyTo(Target* target) const {
    if (given()) *target = value;
  }
};

// Adds the option `name` to `sub`, bound to `flag`, and returns it for
// further settings (checks, exclusions).
template <typename T>
CLI::Option* AddGivenOption(CLI::App* sub, const std::string& name,
                            GivenFlag<T>* flag, const std::string& help) {
  flag->option = sub->add_option(name, flag->value, help);
  return flag->option;
}

// The top-level subcommands, in the order `xlctl --help` lists them.
class Subcommands {
 public:
  explicit Subcommands(CLI::App* app) : app_(app) {}

  // Adds the subcommand `name`, with the footer every subcommand shares
  // unless it sets its own.
  CLI::App* Add(const std::string& name, const std::string& help);
  // The name of the subcommand that was parsed, or "" when none was.
  std::string Parsed() const;

 private:
  CLI::App* app_;
  std::vector<std::pair<std::string, CLI::App*>> added_;
};

// The name of the parsed subcommand of `parent` (queue's, token's) into
// `*verb`; `*verb` is left as it is when none was parsed.
void ParsedVerb(const CLI::App& parent, std::string* verb);

// The job argument (ID) of get, cancel, logs, ... and the node argument
// (NAME) of node, drain and resume.
void AddJobArgument(CLI::App* sub, Invocation* inv);
void AddNodeArgument(CLI::App* sub, Invocation* inv);

// submit's flags that override the job file only when given.
struct SubmitFlags {
  GivenFlag<std::string> name, queue, time_limit;
  // --nodes: "4", or "2-8" for an elastic job (as sbatch -N).
  GivenFlag<std::string> nodes;
  GivenFlag<int32_t> priority, ranks_per_node, gpus_per_node, max_retries;

  // Sets the overrides of the flags given.
  void ApplyTo(JobOverrides* overrides) const;
};

// `queue set`'s flags, which change a queue only where given.
struct QueueSetFlags {
  GivenFlag<double> weight;
  GivenFlag<std::string> cohort, default_time, max_time, checkpoint_dir,
      min_runtime;
  GivenFlag<int64_t> user_gpus, user_pending, processes;
  GivenFlag<int32_t> max_priority;
  GivenFlag<bool> allow_non_preemptible, reclaim_lent_quota;

  // Sets the fields of `options` whose flags were given.
  void ApplyTo(QueueOptions* options) const;
};

// plan's flags that replace the planner's defaults only when given.
struct PlanGivenFlags {
  // The count flags (--params, --layers, ...) by name.
  std::map<std::string, GivenFlag<std::string>> counts;
  GivenFlag<double> mfu, comm_share;
  GivenFlag<int> zero;

  // Sets the fields of `flags` whose flags were given.
  void ApplyTo(PlanFlags* flags) const;
};

// cli_submit.cc
void AddSubmitCommand(Subcommands* commands, Invocation* inv,
                      SubmitFlags* flags);

// cli_jobs.cc: looking at and acting on jobs that exist.
void AddGetCommand(Subcommands* commands, Invocation* inv);
void AddExplainCommand(Subcommands* commands, Invocation* inv);
void AddListCommand(Subcommands* commands, Invocation* inv);
void AddCancelCommand(Subcommands* commands, Invocation* inv);
void AddSetPriorityCommand(Subcommands* commands, Invocation* inv);
void AddLogsCommand(Subcommands* commands, Invocation* inv,
                    GivenFlag<int32_t>* rank);
void AddWatchCommand(Subcommands* commands, Invocation* inv);
void AddWaitCommand(Subcommands* commands, Invocation* inv,
                    GivenFlag<std::string>* timeout);
void AddTopCommand(Subcommands* commands, Invocation* inv,
                   GivenFlag<std::string>* interval);
void AddMetricsCommand(Subcommands* commands, Invocation* inv);

// cli_queues.cc. AddQueueCommand returns `queue`, whose subcommand is the
// verb.
CLI::App* AddQueueCommand(Subcommands* commands, Invocation* inv,
                          QueueSetFlags* set_flags);
void AddShareCommand(Subcommands* commands);

// cli_nodes.cc
void AddNodesCommand(Subcommands* commands);
void AddServersCommand(Subcommands* commands);
void AddNodeCommand(Subcommands* commands, Invocation* inv);
void AddDrainCommand(Subcommands* commands, Invocation* inv);
void AddResumeCommand(Subcommands* commands, Invocation* inv);

// cli_auth.cc. AddTokenCommand returns `token`, whose subcommand is the
// verb.
void AddWhoAmICommand(Subcommands* commands);
void AddLoginCommand(Subcommands* commands);
CLI::App* AddTokenCommand(Subcommands* commands, Invocation* inv);

// cli_plan.cc
void AddPlanCommand(Subcommands* commands, Invocation* inv,
                    PlanGivenFlags* flags);

}  // namespace xl::client::cli

#endif  // XL_CLIENT_CLI_SUBCOMMANDS_H_
