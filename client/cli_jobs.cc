// The subcommands that look at and act on jobs that exist: get, explain,
// list, cancel, set-priority, logs, watch, wait, top and metrics.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "client/cli_subcommands.h"

namespace xl::client::cli {

void AddGetCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* get = commands->Add("get",
                                "Show one job: spec (for xl-train jobs the "
                                "train settings), state, allocations, the "
                                "full reason and, for a training job, its "
                                "latest metrics.");
  get->footer(
      "A job that reports training metrics gets a Training: section: step "
      "of total (and the step it resumed from), loss, samples/s, step time "
      "split into compute, all-reduce and data wait, all-reduce bus "
      "bandwidth in Gbit/s, peak memory, and when it was reported. The "
      "history is 'xlctl metrics ID'.\n"
      "Global flags (--server, --user, --timeout, -o) are listed by "
      "'xlctl --help'; exit codes too.");
  AddJobArgument(get, inv);
}

void AddExplainCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* explain = commands->Add(
      "explain",
      "Why a job waits and when it may start: its reason (the resources "
      "missing, in numbers), its reservation and estimated start, its place "
      "in the queue, the jobs ahead of it (those holding reservations "
      "first) and how its rank is made.");
  AddJobArgument(explain, inv);
}

void AddListCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* list = commands->Add("list", "List jobs, newest first.");
  list->add_option("--state", inv->list.states,
                   "only jobs in this state (repeatable, or comma-separated): "
                   "PENDING, SCHEDULED, RUNNING, SUCCEEDED, FAILED, CANCELLED")
      ->delimiter(',')
      ->allow_extra_args(false);
  list->add_option("--user", inv->list.user,
                   "only jobs of this user (to set who you are, put the "
                   "global --user before 'list')");
  list->add_option("--queue", inv->list.queue, "only jobs of this queue");
  list->add_option("--limit", inv->list.limit,
                   "jobs per page (default 100, at most 1000)")
      ->check(CLI::NonNegativeNumber);
  list->add_flag("--all-pages", inv->list.all_pages,
                 "fetch every page, not only the first");
}

void AddCancelCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* cancel = commands->Add("cancel",
                                   "Cancel a job: its ranks get SIGTERM, then "
                                   "SIGKILL after the grace period.");
  AddJobArgument(cancel, inv);
  cancel->add_option("--reason", inv->reason, "why (recorded with the job)");
}

void AddSetPriorityCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* set_priority = commands->Add(
      "set-priority",
      "Admins: give a job that has not ended another priority (users may "
      "ask at submit for at most their queue's max_priority).");
  AddJobArgument(set_priority, inv);
  set_priority->add_option("PRIORITY", inv->priority, "the new priority")
      ->required();
  set_priority->add_option("--reason", inv->reason,
                           "why (recorded with the job's events)");
}

void AddLogsCommand(Subcommands* commands, Invocation* inv,
                    GivenFlag<int32_t>* rank) {
  CLI::App* logs = commands->Add("logs",
                                 "Print a job's output (stdout and stderr of "
                                 "its ranks). With several ranks each line "
                                 "starts with \"[rank N] \".");
  AddJobArgument(logs, inv);
  AddGivenOption(logs, "--rank", rank, "only this rank")
      ->check(CLI::NonNegativeNumber);
  logs->add_flag("-f,--follow", inv->logs.follow,
                 "keep printing new output until the job ends");
  logs->add_flag("--raw", inv->logs.raw,
                 "on a terminal, print the output's control characters as "
                 "they are (colours, progress bars) instead of escaped; "
                 "only for output you trust: it can clear your screen or "
                 "set your clipboard");
}

void AddWatchCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* watch = commands->Add("watch",
                                  "Print a job's state changes as they "
                                  "happen, one line each: TIME  FROM -> TO  "
                                  "attempt N  reason; ends when the job "
                                  "does.");
  AddJobArgument(watch, inv);
}

void AddWaitCommand(Subcommands* commands, Invocation* inv,
                    GivenFlag<std::string>* timeout) {
  CLI::App* wait = commands->Add("wait",
                                 "Wait until a job ends. Exit 0 if it "
                                 "SUCCEEDED, 1 if it FAILED or was CANCELLED, "
                                 "5 if --timeout expires first.");
  AddJobArgument(wait, inv);
  AddGivenOption(
      wait, "--timeout", timeout,
      "give up after this long, like 30m (default: wait as long as it takes)");
}

void AddTopCommand(Subcommands* commands, Invocation* inv,
                   GivenFlag<std::string>* interval) {
  CLI::App* top = commands->Add("top",
                                "Live table of the scheduled and running jobs "
                                "with their latest training metrics: step, "
                                "loss, samples/s, step and all-reduce time, "
                                "bus bandwidth, memory.");
  top->footer(
      "Columns: ID, NAME, USER, STATE, NODES, RANKS (world size), STEP "
      "(step/total), LOSS, SAMPLES/S, STEP MS, ALLREDUCE MS, BUS GBIT/S "
      "(all-reduce bus bandwidth), MEM (peak), AGE; \"-\" for a job without "
      "metrics.\n"
      "On a terminal the screen is redrawn every --interval until Ctrl-C "
      "(exit 0). With --once, or when stdout is not a terminal (a pipe, a "
      "file), one table is printed and top exits, so scripts never hang; "
      "give --interval as well to keep appending a table (with a timestamped "
      "header) every interval instead. -o json|yaml print the "
      "ListJobsResponse once.\n"
      "Global flags (--server, --user, --timeout, -o) are listed by "
      "'xlctl --help'; exit codes too.");
  top->add_flag("--once", inv->top.once, "print one table and exit");
  AddGivenOption(top, "--interval", interval,
                 "time between refreshes, like 2s or 500ms (default 2s, at "
                 "least 100ms)");
  top->add_option("--queue", inv->top.queue, "only jobs of this queue");
  top->add_option("--user", inv->top.user,
                  "only jobs of this user (to set who you are, put the "
                  "global --user before 'top')");
}

void AddMetricsCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* metrics = commands->Add("metrics",
                                    "Show a training job's metrics over time "
                                    "(downsampled, oldest first, across "
                                    "attempts).");
  metrics->footer(
      "Columns: TIME, ATTEMPT, STEP (step/total), LOSS, SAMPLES/S, STEP MS, "
      "ALLREDUCE MS, DATA WAIT MS, BUS GBIT/S (all-reduce bus bandwidth), "
      "MEM (peak). -o json|yaml print the GetJobMetricsResponse; -o csv "
      "prints every field of every point, for spreadsheets and plots.\n"
      "Global flags (--server, --user, --timeout, -o) are listed by "
      "'xlctl --help'; exit codes too.");
  AddJobArgument(metrics, inv);
}

}  // namespace xl::client::cli
