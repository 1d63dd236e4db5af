#include "client/cli.h"
#include "client/completion.h"

#include <pwd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/credentials.h"
#include "client/exit_code.h"
#include "client/output.h"
#include "common/argv.h"
#include "common/crypto/openssl.h"
#include "common/identity.h"
#include "common/status.h"

#ifndef XL_VERSION
#define XL_VERSION "dev"
#endif

namespace xl::client {
namespace {

constexpr char kDescription[] =
    "xlctl: the command-line client of xl, which runs deep-learning training "
    "jobs on GPU machines.\nSubmit jobs, follow them, and look at the queue "
    "and the nodes of an xl-scheduler.";

constexpr char kEnvironmentHelp[] =
    "Environment:\n"
    "  XL_SERVER  HOST:PORT of xl-scheduler when --server is not given "
    "(default 127.0.0.1:7070)\n"
    "  XL_USER    user name sent to the scheduler when --user is not given; "
    "then USER, then \"anonymous\" (a scheduler with TLS ignores it: it "
    "knows you by your token)\n"
    "  XL_TOKEN   your token when --token is not given; then the one 'xlctl "
    "login' stored in $XDG_CONFIG_HOME/xl/token (~/.config/xl/token)\n"
    "  XL_TLS_CA  the CA certificate (PEM file) to verify a TLS scheduler "
    "with when --tls-ca is not given; then the one 'xlctl login --tls-ca' "
    "stored; without one xlctl talks plaintext\n";

constexpr char kOutputHelp[] =
    "Output (-o): table (readable, aligned), json (the API message in "
    "protobuf's JSON mapping), yaml (the same as YAML).\n";

std::string Footer() {
  return absl::StrCat(kOutputHelp, "\n", kEnvironmentHelp, "\n", kExitCodeHelp);
}

std::string ResolveUser(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* user = std::getenv("USER");
  if (user != nullptr && *user != '\0') return user;
  if (const struct passwd* pw = getpwuid(getuid()); pw != nullptr) {
    return pw->pw_name;
  }
  return xl::kAnonymousUser;
}

}  // namespace

// The targets of flags whose presence matters.
struct CommandLine::Flags {
  std::string name, queue, time_limit;
  // --nodes: "4", or "2-8" for an elastic job (as sbatch -N).
  std::string nodes;
  int32_t priority = 0, ranks_per_node = 0, gpus_per_node = 0,
          max_retries = 0, rank = 0;
  std::string wait_timeout, top_interval;
  CLI::Option* name_opt = nullptr;
  CLI::Option* queue_opt = nullptr;
  CLI::Option* time_limit_opt = nullptr;
  CLI::Option* priority_opt = nullptr;
  CLI::Option* nodes_opt = nullptr;
  CLI::Option* ranks_per_node_opt = nullptr;
  CLI::Option* gpus_per_node_opt = nullptr;
  CLI::Option* max_retries_opt = nullptr;
  CLI::Option* rank_opt = nullptr;
  CLI::Option* wait_timeout_opt = nullptr;
  CLI::Option* top_interval_opt = nullptr;
  CLI::App* token_cmd = nullptr;
  CLI::App* queue_cmd = nullptr;
  double queue_weight = 0;
  std::string queue_cohort, queue_default_time, queue_max_time,
      queue_checkpoint_dir;
  int64_t queue_user_gpus = 0, queue_user_pending = 0, queue_processes = 0;
  int32_t queue_max_priority = 0;
  std::string queue_min_runtime;
  bool queue_allow_np = false, queue_reclaim = false;
  CLI::Option* queue_reclaim_opt = nullptr;
  CLI::Option* queue_min_runtime_opt = nullptr;
  CLI::Option* queue_allow_np_opt = nullptr;
  CLI::Option* queue_weight_opt = nullptr;
  CLI::Option* queue_cohort_opt = nullptr;
  CLI::Option* queue_default_time_opt = nullptr;
  CLI::Option* queue_max_time_opt = nullptr;
  CLI::Option* queue_checkpoint_dir_opt = nullptr;
  CLI::Option* queue_user_gpus_opt = nullptr;
  CLI::Option* queue_user_pending_opt = nullptr;
  CLI::Option* queue_processes_opt = nullptr;
  CLI::Option* queue_max_priority_opt = nullptr;
  // The argv after `--` (submit only).
  std::vector<std::string> after_dashes;
  bool saw_dashes = false;
  std::vector<std::pair<std::string, CLI::App*>> subcommands;
  // plan's count flags (--params, --layers, ...) and the options of each.
  std::map<std::string, std::string> plan_counts;
  std::map<std::string, CLI::Option*> plan_count_opts;
  double plan_mfu = 0, plan_comm_share = 0;
  int plan_zero = 0;
  CLI::Option* plan_mfu_opt = nullptr;
  CLI::Option* plan_comm_share_opt = nullptr;
  CLI::Option* plan_zero_opt = nullptr;
};

CommandLine::CommandLine()
    : app_(std::make_unique<CLI::App>(kDescription, "xlctl")),
      flags_(std::make_unique<Flags>()) {
  CLI::App& app = *app_;
  Invocation& inv = invocation_;
  Flags& f = *flags_;
  app.footer(Footer());
  app.require_subcommand(1);
  // Global flags may also follow the subcommand (xlctl get 42 -o json).
  app.fallthrough();
  app.set_version_flag("--version", std::string("xlctl ") + XL_VERSION);

  inv.server = kDefaultServer;
  app.add_option("--server", inv.server, "HOST:PORT of xl-scheduler")
      ->envname("XL_SERVER")
      ->capture_default_str();
  app.add_option("--user", inv.user,
                 "user name sent to the scheduler (default: $XL_USER, then "
                 "$USER, then anonymous)")
      ->envname("XL_USER");
  app.add_option("--token", inv.token,
                 "your token for a scheduler with TLS (default: $XL_TOKEN, "
                 "then the one 'xlctl login' stored); prefer those: an "
                 "argument shows in ps until xlctl has started")
      ->envname("XL_TOKEN");
  app.add_option("--tls-ca", inv.tls_ca,
                 "CA certificate (PEM file) that signed the scheduler's "
                 "certificate; turns on TLS (default: $XL_TLS_CA, then the "
                 "one 'xlctl login' stored)")
      ->envname("XL_TLS_CA");
  app.add_option("--timeout", inv.timeout,
                 "deadline of each call to the scheduler, like 10s or 1m "
                 "(`wait --timeout` is different: how long to wait)")
      ->capture_default_str();
  app.add_option("-o,--output", inv.output,
                 "output format: table, json or yaml (csv: `xlctl metrics` "
                 "only)")
      ->check(CLI::IsMember({"table", "json", "yaml", "csv"}, CLI::ignore_case))
      ->capture_default_str();

  auto add = [&](const std::string& name, const std::string& help) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->footer(
        "Global flags (--server, --user, --timeout, -o) are listed by "
        "'xlctl --help'; exit codes too.");
    f.subcommands.emplace_back(name, sub);
    return sub;
  };
  auto job_arg = [&](CLI::App* sub) {
    sub->add_option("ID", inv.job_id, "job id")->required();
  };
  auto node_arg = [&](CLI::App* sub) {
    sub->add_option("NAME", inv.node, "node name")->required();
  };

  // submit
  CLI::App* submit =
      add("submit",
          "Submit a job and print its id:  xlctl submit [flags] JOB.yaml  |  "
          "xlctl submit [flags] [JOB.yaml] -- COMMAND [ARGS...]");
  submit->footer(
      "JOB.yaml maps onto xl.v1.JobSpec through protobuf's JSON mapping: "
      "name, queue, priority, command (a list), env (a map), resources "
      "{nodes, ranks_per_node, gpus_per_node, min_gpu_memory_bytes, "
      "gpu_models, nvme_bytes_per_node, nic_gbps_per_node, cpus_per_node, "
      "memory_bytes_per_node}, max_retries, time_limit (\"600s\"), "
      "grace_period, working_dir. A wrong field name or type is an error "
      "that names the field (exit 2), found before the scheduler is "
      "contacted.\n"
      "Flags override the file; a command after -- replaces the file's "
      "command.\n"
      "With -o table only the id is printed, so ID=$(xlctl submit job.yaml) "
      "works; -o json|yaml print the SubmitJobResponse.\n"
      "A call that finds the scheduler unavailable is retried 3 times with "
      "the same idempotency key, so the job is created at most once.\n"
      "Global flags (--server, --user, --timeout, -o) and exit codes: "
      "'xlctl --help'.");
  CLI::Option* job_file_opt = submit->add_option(
      "JOB_FILE", inv.submit.job_file,
      "YAML or JSON job file (optional with -- COMMAND)");
  submit
      ->add_option("--sbatch", inv.submit.sbatch_file,
                   "a Slurm batch script instead of a job file: its #SBATCH "
                   "lines (nodes, ntasks[-per-node], gres=gpu:N, time, "
                   "job-name, partition as queue, mem, cpus-per-task, "
                   "dependency=afterok, export) make the job, flags given "
                   "here win, arguments after -- go to the script; it runs "
                   "once per rank with SLURM_* set and srun running its "
                   "command in place; what xl cannot honour is refused with "
                   "the line named")
      ->excludes(job_file_opt);
  f.name_opt = submit->add_option("--name", f.name, "job name");
  f.queue_opt = submit->add_option("--queue", f.queue, "queue (project)");
  f.priority_opt = submit->add_option("--priority", f.priority,
                                      "priority; higher runs first");
  f.nodes_opt =
      submit
          ->add_option("--nodes", f.nodes,
                       "number of nodes, or MIN-MAX for an elastic job (it "
                       "starts on as many as fit, at least MIN, and grows "
                       "to MAX; README \"Elastic jobs\")")
          ->check(CLI::Validator(
              [](std::string& text) -> std::string {
                int32_t lo = 0, hi = 0;
                return ParseNodeRange(text, &lo, &hi)
                           ? std::string()
                           : "give a number of nodes such as 4, or a range "
                             "MIN-MAX such as 2-8";
              },
              "N|MIN-MAX"));
  f.ranks_per_node_opt =
      submit
          ->add_option("--ranks-per-node", f.ranks_per_node,
                       "processes per node (default: GPUs per node, or 1)")
          ->check(CLI::NonNegativeNumber);
  f.gpus_per_node_opt =
      submit->add_option("--gpus-per-node", f.gpus_per_node, "GPUs per node")
          ->check(CLI::NonNegativeNumber);
  f.max_retries_opt = submit
                          ->add_option("--max-retries", f.max_retries,
                                       "requeues allowed after a failure")
                          ->check(CLI::NonNegativeNumber);
  f.time_limit_opt = submit->add_option(
      "--time-limit", f.time_limit,
      "running time limit, like 600s, 90m or 2h (a plain number is seconds)");
  submit
      ->add_option("--env", inv.submit.overrides.env,
                   "KEY=VALUE set in every rank's environment (repeatable)")
      ->allow_extra_args(false);
  submit
      ->add_option("--after-ok", inv.submit.overrides.after_ok,
                   "start only after this job has SUCCEEDED; fail if it "
                   "ends otherwise (repeatable, or comma-separated)")
      ->delimiter(',')
      ->allow_extra_args(false);
  submit->add_option("--working-dir", inv.submit.overrides.working_dir,
                     "directory the ranks start in (default: the job file's "
                     "working_dir, else the current directory, as sbatch "
                     "does)");
  submit->add_option("--exclude", inv.submit.overrides.exclude_nodes,
                     "a node the job must not run on (repeatable, or "
                     "comma-separated), as sbatch --exclude")
      ->delimiter(',')
      ->allow_extra_args(false);
  submit->add_flag("--dry-run", inv.submit.dry_run,
                   "show what the job would get now (nodes, GPUs and rank "
                   "order, or why it would wait and when it would start, "
                   "its place in the queue, jobs it would preempt); queue "
                   "nothing");
  submit->add_option("--idempotency-key", inv.submit.idempotency_key,
                     "key that makes a repeated submit return the first job "
                     "(default: random per invocation)");

  CLI::App* get = add("get",
                      "Show one job: spec (for xl-train jobs the train "
                      "settings), state, allocations, the full reason and, "
                      "for a training job, its latest metrics.");
  get->footer(
      "A job that reports training metrics gets a Training: section: step "
      "of total (and the step it resumed from), loss, samples/s, step time "
      "split into compute, all-reduce and data wait, all-reduce bus "
      "bandwidth in Gbit/s, peak memory, and when it was reported. The "
      "history is 'xlctl metrics ID'.\n"
      "Global flags (--server, --user, --timeout, -o) are listed by "
      "'xlctl --help'; exit codes too.");
  job_arg(get);

  CLI::App* explain = add(
      "explain",
      "Why a job waits and when it may start: its reason (the resources "
      "missing, in numbers), its reservation and estimated start, its place "
      "in the queue, the jobs ahead of it (those holding reservations "
      "first) and how its rank is made.");
  job_arg(explain);

  CLI::App* list = add("list", "List jobs, newest first.");
  list->add_option("--state", inv.list.states,
                   "only jobs in this state (repeatable, or comma-separated): "
                   "PENDING, SCHEDULED, RUNNING, SUCCEEDED, FAILED, CANCELLED")
      ->delimiter(',')
      ->allow_extra_args(false);
  list->add_option("--user", inv.list.user,
                   "only jobs of this user (to set who you are, put the "
                   "global --user before 'list')");
  list->add_option("--queue", inv.list.queue, "only jobs of this queue");
  list->add_option("--limit", inv.list.limit,
                   "jobs per page (default 100, at most 1000)")
      ->check(CLI::NonNegativeNumber);
  list->add_flag("--all-pages", inv.list.all_pages,
                 "fetch every page, not only the first");

  CLI::App* queue = add(
      "queue",
      "Without a subcommand: every queue's pending and running jobs and "
      "GPUs, and the cluster's totals. With one: the queues as objects "
      "(weight, quotas, limits); set, apply and delete are for admins.");
  queue->require_subcommand(0, 1);
  queue->add_subcommand("list",
                        "Every queue: weight, cohort, GPUs in use against "
                        "its quotas, borrowed GPUs, jobs, limits.");
  CLI::App* queue_show =
      queue->add_subcommand("show", "One queue's spec and what it uses.");
  queue_show->add_option("NAME", inv.queue.name, "the queue")->required();
  CLI::App* queue_set = queue->add_subcommand(
      "set",
      "Create a queue, or change the flags given of an existing one (the "
      "others keep their values). Admins.");
  queue_set->add_option("NAME", inv.queue.name, "the queue")->required();
  f.queue_weight_opt = queue_set->add_option(
      "--weight", f.queue_weight,
      "fair share against other queues (default 1)");
  f.queue_cohort_opt = queue_set->add_option(
      "--cohort", f.queue_cohort,
      "queues of one cohort lend each other unused quota (\"\" for none)");
  queue_set->add_option(
      "--quota", inv.queue.quotas,
      "MODEL=GPUS[,borrow=N][,lend=N] (repeatable; replaces all quotas): "
      "GPUS guaranteed, at most N borrowed from the cohort, at most N "
      "lent; MODEL as xlctl nodes shows it, or * for any other model");
  queue_set->add_flag("--no-quotas", inv.queue.no_quotas,
                      "drop every quota: the queue may use any GPU");
  f.queue_default_time_opt = queue_set->add_option(
      "--default-time-limit", f.queue_default_time,
      "time limit of jobs that give none, like 4h or 2d (0: none)");
  f.queue_max_time_opt = queue_set->add_option(
      "--max-time-limit", f.queue_max_time,
      "longer jobs are refused at submit, like 3d (0: no maximum)");
  f.queue_checkpoint_dir_opt = queue_set->add_option(
      "--default-checkpoint-dir", f.queue_checkpoint_dir,
      "checkpoint_dir of jobs that give none: a path every node mounts, "
      "{user}, {job} and {attempt} expand, like /shared/ckpt/{user}/{job} "
      "(\"\": none)");
  f.queue_user_gpus_opt = queue_set->add_option(
      "--max-running-gpus-per-user", f.queue_user_gpus,
      "GPUs one user's running jobs may hold in the queue (0: no limit)");
  f.queue_user_pending_opt = queue_set->add_option(
      "--max-pending-per-user", f.queue_user_pending,
      "pending jobs one user may have in the queue (0: no limit)");
  f.queue_processes_opt = queue_set->add_option(
      "--max-processes-per-node", f.queue_processes,
      "processes and threads one job may have on each node, its cgroup's "
      "pids.max (0: the node's default, xl-agent --default-max-processes)");
  f.queue_max_priority_opt = queue_set->add_option(
      "--max-priority", f.queue_max_priority,
      "the highest priority users who are not admins may ask for (where "
      "unset: 0)");
  queue_set->add_flag("--no-max-priority", inv.queue.no_max_priority,
                      "drop the cap set (users may then ask for 0 at most)");
  queue_set->add_option("--admit-user", inv.queue.admit_users,
                        "a user who may submit to the queue (repeat; the "
                        "given ones replace the queue's list; * for "
                        "everyone)");
  queue_set->add_option("--admit-group", inv.queue.admit_groups,
                        "a group whose members (as their tokens say) may "
                        "submit (repeat; replaces the queue's list)");
  queue_set->add_flag("--admit-everyone", inv.queue.admit_everyone,
                      "drop both lists: everyone may submit");
  f.queue_min_runtime_opt = queue_set->add_option(
      "--min-runtime", f.queue_min_runtime,
      "a job of the queue is never preempted before it ran this long, like "
      "30m");
  f.queue_allow_np_opt = queue_set->add_option(
      "--allow-non-preemptible", f.queue_allow_np,
      "true: jobs may say preemptible: false");
  f.queue_reclaim_opt = queue_set->add_option(
      "--reclaim-lent-quota", f.queue_reclaim,
      "true: take quota lent to the cohort back by preempting borrowers");
  CLI::App* queue_apply = queue->add_subcommand(
      "apply",
      "Create or update the queues of a YAML file ({queues: [{name, weight, "
      "cohort, quotas: [{gpu_model, nominal_gpus, borrowing_limit_gpus, "
      "lending_limit_gpus}], ...}]}; see README \"Queues and fair share\"). Admins.");
  queue_apply->add_option("FILE", inv.queue.file, "the queues file")
      ->required()
      ->check(CLI::ExistingFile);
  CLI::App* queue_delete = queue->add_subcommand(
      "delete", "Delete a queue without pending or running jobs. Admins.");
  queue_delete->add_option("NAME", inv.queue.name, "the queue")->required();
  CLI::App* queue_history = queue->add_subcommand(
      "history", "Recorded changes to queues, newest first.");
  queue_history->add_option("NAME", inv.queue.name,
                            "only this queue's changes");
  f.queue_cmd = queue;

  add("share",
      "Fair share, as Slurm's sshare: every queue's and user's share, "
      "decayed GPU-hours, part of all usage, and fair-share factor, with "
      "how they make a pending job's effective priority.");

  CLI::App* cancel = add("cancel",
                         "Cancel a job: its ranks get SIGTERM, then "
                         "SIGKILL after the grace period.");
  job_arg(cancel);
  cancel->add_option("--reason", inv.reason, "why (recorded with the job)");

  CLI::App* set_priority = add(
      "set-priority",
      "Admins: give a job that has not ended another priority (users may "
      "ask at submit for at most their queue's max_priority).");
  job_arg(set_priority);
  set_priority->add_option("PRIORITY", inv.priority, "the new priority")
      ->required();
  set_priority->add_option("--reason", inv.reason,
                           "why (recorded with the job's events)");

  CLI::App* logs = add("logs",
                       "Print a job's output (stdout and stderr of its "
                       "ranks). With several ranks each line starts "
                       "with \"[rank N] \".");
  job_arg(logs);
  f.rank_opt = logs->add_option("--rank", f.rank, "only this rank")
                   ->check(CLI::NonNegativeNumber);
  logs->add_flag("-f,--follow", inv.logs.follow,
                 "keep printing new output until the job ends");
  logs->add_flag("--raw", inv.logs.raw,
                 "on a terminal, print the output's control characters as "
                 "they are (colours, progress bars) instead of escaped; "
                 "only for output you trust: it can clear your screen or "
                 "set your clipboard");

  CLI::App* watch = add("watch",
                        "Print a job's state changes as they happen, "
                        "one line each: TIME  FROM -> TO  attempt N  "
                        "reason; ends when the job does.");
  job_arg(watch);

  CLI::App* wait = add("wait",
                       "Wait until a job ends. Exit 0 if it SUCCEEDED, "
                       "1 if it FAILED or was CANCELLED, 5 if "
                       "--timeout expires first.");
  job_arg(wait);
  f.wait_timeout_opt = wait->add_option(
      "--timeout", f.wait_timeout,
      "give up after this long, like 30m (default: wait as long as it takes)");

  CLI::App* top = add("top",
                      "Live table of the scheduled and running jobs with "
                      "their latest training metrics: step, loss, samples/s, "
                      "step and all-reduce time, bus bandwidth, memory.");
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
  top->add_flag("--once", inv.top.once, "print one table and exit");
  f.top_interval_opt = top->add_option(
      "--interval", f.top_interval,
      "time between refreshes, like 2s or 500ms (default 2s, at least "
      "100ms)");
  top->add_option("--queue", inv.top.queue, "only jobs of this queue");
  top->add_option("--user", inv.top.user,
                  "only jobs of this user (to set who you are, put the "
                  "global --user before 'top')");

  CLI::App* metrics = add("metrics",
                          "Show a training job's metrics over time "
                          "(downsampled, oldest first, across attempts).");
  metrics->footer(
      "Columns: TIME, ATTEMPT, STEP (step/total), LOSS, SAMPLES/S, STEP MS, "
      "ALLREDUCE MS, DATA WAIT MS, BUS GBIT/S (all-reduce bus bandwidth), "
      "MEM (peak). -o json|yaml print the GetJobMetricsResponse; -o csv "
      "prints every field of every point, for spreadsheets and plots.\n"
      "Global flags (--server, --user, --timeout, -o) are listed by "
      "'xlctl --help'; exit codes too.");
  job_arg(metrics);

  CLI::App* completion =
      add("completion",
          "Print a shell completion script: source <(xlctl completion "
          "bash) in ~/.bashrc, or source <(xlctl completion zsh) in "
          "~/.zshrc.");
  completion->add_option("SHELL", inv.completion_shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));

  add("nodes",
      "List the nodes: state, GPUs used/total, GPU model, CPUs, "
      "memory, free NVMe, fastest NIC, labels and jobs.");
  CLI::App* node = add("node", "Show one node: inventory, usage and state.");
  node_arg(node);
  CLI::App* drain = add("drain",
                        "Drain a node: it keeps its running jobs but "
                        "takes no new ones.");
  node_arg(drain);
  drain->add_option("--reason", inv.reason, "why (shown with the node)");
  CLI::App* resume = add("resume", "Let a drained node take new jobs again.");
  node_arg(resume);

  add("whoami", "Who the scheduler takes you for, and whether it checks.");
  CLI::App* login = add(
      "login",
      "Check a token with the scheduler and keep it (and --tls-ca) in "
      "$XDG_CONFIG_HOME/xl (~/.config/xl), mode 0600, for later commands.");
  login->footer(
      "The token comes from --token, $XL_TOKEN or standard input (so it "
      "stays out of the shell's history: xlctl login --tls-ca ca.crt < "
      "token-file). Ask an admin for one: xlctl token create --user NAME.\n"
      "Global flags (--server, --user, --timeout, -o) and exit codes: "
      "'xlctl --help'.");
  CLI::App* token = add("token",
                        "Admins: make, list and revoke users' tokens and "
                        "agents' join tokens.");
  token->require_subcommand(1);
  CLI::App* token_create = token->add_subcommand(
      "create",
      "Make a token, printed once on stdout: a user's (--user U [--admin]) "
      "or, with --join, a single-use join token an agent exchanges for its "
      "node certificate.");
  token_create->add_option("--user", inv.token_cmd.user,
                           "the user the token stands for");
  token_create->add_flag("--admin", inv.token_cmd.admin,
                         "the user may cancel any job, set any priority, "
                         "drain nodes and manage tokens");
  token_create->add_option("--group", inv.token_cmd.groups,
                           "a group of the user's, for queues that admit "
                           "groups (repeat for more)");
  token_create->add_option("--ttl", inv.token_cmd.ttl,
                           "lifetime: 1h, 30d or never (default: user 90d, "
                           "join 1h)");
  token_create->add_flag("--join", inv.token_cmd.join,
                         "a join token for an agent (xl-agent --join-token)");
  token_create->add_option("--node", inv.token_cmd.node,
                           "with --join: the only node name it may join as "
                           "(needed to re-issue a known node's certificate)");
  token->add_subcommand("list", "Every token: id, user, expiry and state; "
                                "never the secret.");
  CLI::App* token_revoke =
      token->add_subcommand("revoke", "Revoke a token: it stops working now.");
  token_revoke->add_option("ID", inv.token_cmd.id,
                           "the token's id (the part after xl_)")
      ->required();
  f.token_cmd = token;

  AddPlanCommand(add("plan",
                     "What configuration a training needs: memory per GPU, "
                     "GPUs and nodes, checkpoint and NVMe, read rate, "
                     "all-reduce and NIC bandwidth, step time and time to "
                     "train, with the arithmetic shown."));
}

void CommandLine::AddPlanCommand(CLI::App* plan) {
  Invocation& inv = invocation_;
  Flags& f = *flags_;
  plan->footer(
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
      "'xlctl --help'.");
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
    f.plan_count_opts[name] =
        plan->add_option(name, f.plan_counts[name], help.at(name));
  }
  plan->add_option("--precision", inv.plan.precision,
                   "fp32, bf16 (default; fp32 master weights) or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}, CLI::ignore_case));
  plan->add_option("--optimizer", inv.plan.optimizer,
                   "adamw (default), sgd (with momentum) or adafactor")
      ->check(CLI::IsMember({"adamw", "sgd", "adafactor"}, CLI::ignore_case));
  f.plan_zero_opt =
      plan->add_option("--zero", f.plan_zero,
                       "ZeRO stage: 0 none (default), 1 optimizer states, 2 "
                       "+ gradients, 3 + weights")
          ->check(CLI::Range(0, 3));
  plan->add_flag("--fsdp", inv.plan.fsdp, "FSDP full shard (= --zero 3)")
      ->excludes(f.plan_zero_opt);
  plan->add_option("--recompute", inv.plan.recompute,
                   "activation recomputation: none (default), selective, "
                   "full")
      ->check(CLI::IsMember({"none", "selective", "full"}, CLI::ignore_case));
  plan->add_flag("--sequence-parallel", inv.plan.sequence_parallel,
                 "Megatron sequence parallelism (with --tp > 1)");
  plan->add_option("--gpu", inv.plan.gpu,
                   "plan for this GPU model: H100-80GB, H100-PCIe-80GB, "
                   "A100-80GB, A100-40GB, H200, L40S, A40, A30, L4, "
                   "V100-32GB, or an NVML name (default: every model)");
  f.plan_mfu_opt = plan->add_option(
      "--mfu", f.plan_mfu, "model FLOPs utilization, in (0, 1] (default 0.4)");
  f.plan_comm_share_opt = plan->add_option(
      "--comm-share", f.plan_comm_share,
      "share of the step the all-reduce may take (default 0.25)");
  plan->add_flag("--offline", inv.plan.offline,
                 "do not ask the scheduler; use the built-in GPU catalogue");
}

CommandLine::~CommandLine() = default;

void CommandLine::Resolve() {
  Invocation& inv = invocation_;
  Flags& f = *flags_;
  for (const auto& [name, sub] : f.subcommands) {
    if (sub->parsed()) inv.command = name;
  }
  if (inv.server.empty()) inv.server = kDefaultServer;  // XL_SERVER=""
  if (inv.command == "token") {
    for (CLI::App* sub : f.token_cmd->get_subcommands()) {
      if (sub->parsed()) inv.token_cmd.verb = sub->get_name();
    }
  }
  if (inv.command == "queue") {
    for (CLI::App* sub : f.queue_cmd->get_subcommands()) {
      if (sub->parsed()) inv.queue.verb = sub->get_name();
    }
    QueueOptions& q = inv.queue;
    if (f.queue_weight_opt->count() > 0) q.weight = f.queue_weight;
    if (f.queue_cohort_opt->count() > 0) q.cohort = f.queue_cohort;
    if (f.queue_default_time_opt->count() > 0) {
      q.default_time_limit = f.queue_default_time;
    }
    if (f.queue_max_time_opt->count() > 0) q.max_time_limit = f.queue_max_time;
    if (f.queue_checkpoint_dir_opt->count() > 0) {
      q.default_checkpoint_dir = f.queue_checkpoint_dir;
    }
    if (f.queue_user_gpus_opt->count() > 0) {
      q.max_running_gpus_per_user = f.queue_user_gpus;
    }
    if (f.queue_user_pending_opt->count() > 0) {
      q.max_pending_jobs_per_user = f.queue_user_pending;
    }
    if (f.queue_processes_opt->count() > 0) {
      q.max_processes_per_node = f.queue_processes;
    }
    if (f.queue_max_priority_opt->count() > 0) {
      q.max_priority = f.queue_max_priority;
    }
    if (f.queue_min_runtime_opt->count() > 0) {
      q.min_runtime = f.queue_min_runtime;
    }
    if (f.queue_allow_np_opt->count() > 0) {
      q.allow_non_preemptible = f.queue_allow_np;
    }
    if (f.queue_reclaim_opt->count() > 0) {
      q.reclaim_lent_quota = f.queue_reclaim;
    }
  }
  inv.user = ResolveUser(inv.user);
  JobOverrides& o = inv.submit.overrides;
  if (f.name_opt->count() > 0) o.name = f.name;
  if (f.queue_opt->count() > 0) o.queue = f.queue;
  if (f.priority_opt->count() > 0) o.priority = f.priority;
  if (f.nodes_opt->count() > 0) {
    int32_t lo = 0, hi = 0;
    ParseNodeRange(f.nodes, &lo, &hi);
    o.nodes = hi;
    o.min_nodes = lo == hi ? 0 : lo;
  }
  if (f.ranks_per_node_opt->count() > 0) o.ranks_per_node = f.ranks_per_node;
  if (f.gpus_per_node_opt->count() > 0) o.gpus_per_node = f.gpus_per_node;
  if (f.max_retries_opt->count() > 0) o.max_retries = f.max_retries;
  if (f.time_limit_opt->count() > 0) o.time_limit = f.time_limit;
  o.command = f.after_dashes;
  if (f.rank_opt->count() > 0) inv.logs.rank = f.rank;
  if (f.wait_timeout_opt->count() > 0) inv.wait_timeout = f.wait_timeout;
  if (f.top_interval_opt->count() > 0) inv.top_interval = f.top_interval;
  for (const auto& [name, opt] : f.plan_count_opts) {
    if (opt->count() > 0) inv.plan.counts[name] = f.plan_counts[name];
  }
  if (f.plan_zero_opt->count() > 0) inv.plan.zero = f.plan_zero;
  if (f.plan_mfu_opt->count() > 0) inv.plan.mfu = f.plan_mfu;
  if (f.plan_comm_share_opt->count() > 0) {
    inv.plan.comm_share = f.plan_comm_share;
  }
}

std::optional<int> CommandLine::Parse(std::vector<std::string> args,
                                      std::ostream& out, std::ostream& err) {
  // Everything after the first "--" is the command of `submit`; CLI11 never
  // sees it, so an argument such as "--steps" cannot be taken for a flag.
  auto dashes = std::find(args.begin(), args.end(), "--");
  if (dashes != args.end()) {
    flags_->saw_dashes = true;
    flags_->after_dashes.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them reversed.
  try {
    app_->parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --help-all, --version
      app_->exit(e, out, err);
      return 0;
    }
    std::string where = "xlctl";
    for (const auto& [name, sub] : flags_->subcommands) {
      if (sub->parsed()) where = absl::StrCat("xlctl ", name);
    }
    err << "xlctl: " << e.what() << "; run '" << where
        << " --help' for usage\n";
    return kExitUsage;
  }
  Resolve();
  if (invocation_.command == "completion") {
    out << CompletionScript(*app_, invocation_.completion_shell);
    return 0;
  }
  if (flags_->saw_dashes) {
    if (invocation_.command != "submit") {
      err << "xlctl: a command after -- is only taken by 'xlctl submit'; "
             "run 'xlctl --help' for usage\n";
      return kExitUsage;
    }
    if (flags_->after_dashes.empty()) {
      err << "xlctl: no command after --; write it like 'xlctl submit "
             "--nodes 2 -- /usr/bin/python3 train.py'\n";
      return kExitUsage;
    }
  }
  return std::nullopt;
}

namespace {

absl::Status Dispatch(const Invocation& inv, Commands& commands) {
  const std::string& c = inv.command;
  if (c == "submit") return commands.Submit(inv.submit);
  if (c == "get") return commands.Get(inv.job_id);
  if (c == "explain") return commands.Explain(inv.job_id);
  if (c == "list") return commands.List(inv.list);
  if (c == "queue") return commands.QueueCommand(inv.queue);
  if (c == "share") return commands.Share();
  if (c == "cancel") return commands.Cancel(inv.job_id, inv.reason);
  if (c == "set-priority") {
    return commands.SetPriority(inv.job_id, inv.priority, inv.reason);
  }
  if (c == "logs") return commands.Logs(inv.job_id, inv.logs);
  if (c == "watch") return commands.Watch(inv.job_id);
  if (c == "wait") {
    std::optional<absl::Duration> timeout;
    if (inv.wait_timeout) {
      ASSIGN_OR_RETURN(timeout,
                       ParseDurationFlag("wait --timeout", *inv.wait_timeout));
    }
    return commands.Wait(inv.job_id, timeout);
  }
  if (c == "top") {
    TopOptions options = inv.top;
    if (inv.top_interval) {
      ASSIGN_OR_RETURN(options.interval,
                       ParseDurationFlag("top --interval", *inv.top_interval));
      options.interval_given = true;
    }
    return commands.Top(options);
  }
  if (c == "metrics") return commands.Metrics(inv.job_id);
  if (c == "nodes") return commands.Nodes();
  if (c == "node") return commands.Node(inv.node);
  if (c == "drain") return commands.Drain(inv.node, inv.reason);
  if (c == "resume") return commands.Resume(inv.node);
  if (c == "whoami") return commands.WhoAmI();
  if (c == "login") return commands.Login(inv.token, inv.tls_ca_pem);
  if (c == "token") {
    const TokenFlags& t = inv.token_cmd;
    if (t.verb == "create") {
      return commands.TokenCreate(t.user, t.admin, t.ttl, t.join, t.node,
                                  t.groups);
    }
    if (t.verb == "revoke") return commands.TokenRevoke(t.id);
    return commands.TokenList();
  }
  if (c == "plan") {
    ASSIGN_OR_RETURN(PlanOptions options, BuildPlanOptions(inv.plan));
    return commands.Plan(options);
  }
  return UsageError(absl::StrCat("unknown command \"", c,
                                 "\"; run 'xlctl --help' for the commands"));
}

// Fills in the token and the CA: flags and environment first, then what
// 'xlctl login' stored. `login` reads its token from stdin when none is
// given, and never falls back to the stored one.
absl::Status ResolveCredentials(Invocation* inv) {
  if (inv->command == "login") {
    if (inv->token.empty() && isatty(STDIN_FILENO) != 1) {
      std::string line;
      std::getline(std::cin, line);
      inv->token = std::string(absl::StripAsciiWhitespace(line));
    }
  } else if (inv->token.empty()) {
    auto stored = ReadStoredToken();
    if (!stored.ok()) {
      return absl::Status(stored.status().code(),
                          absl::StrCat("reading the stored token: ",
                                       stored.status().message(),
                                       "; fix its mode or log in again"));
    }
    inv->token = *stored;
  }
  std::string ca_path = inv->tls_ca;
  if (ca_path.empty() && inv->command != "login") {
    if (access(StoredCaPath().c_str(), F_OK) == 0) ca_path = StoredCaPath();
  }
  if (!ca_path.empty()) {
    auto pem = crypto::ReadFile(ca_path);
    if (!pem.ok()) {
      return absl::Status(
          pem.status().code(),
          absl::StrCat("--tls-ca: ", pem.status().message(),
                       "; give the CA certificate file of the scheduler"));
    }
    inv->tls_ca_pem = *pem;
  }
  return absl::OkStatus();
}

absl::Status RunStatus(const Invocation& inv, std::ostream& out,
                       std::ostream& err) {
  ASSIGN_OR_RETURN(OutputFormat format, ParseOutputFormat(inv.output));
  if (format == OutputFormat::kCsv && inv.command != "metrics") {
    return UsageError(absl::StrCat(
        "-o csv: only `xlctl metrics` prints CSV; use -o json or -o yaml "
        "for `xlctl ", inv.command, "`"));
  }
  ASSIGN_OR_RETURN(absl::Duration timeout,
                   ParseDurationFlag("--timeout", inv.timeout));
  if (timeout <= absl::ZeroDuration()) {
    return UsageError("--timeout: must be more than 0, like 10s");
  }
  Invocation resolved = inv;
  RETURN_IF_ERROR(ResolveCredentials(&resolved));
  ConnectionOptions options;
  options.server = resolved.server;
  options.user = resolved.user;
  options.token = resolved.token;
  options.tls_ca_pem = resolved.tls_ca_pem;
  options.timeout = timeout;
  SchedulerConnection connection(options);
  Commands commands(&connection, format, &out, &err);
  commands.set_terminal(&out == &std::cout && isatty(STDOUT_FILENO) == 1);
  return Dispatch(resolved, commands);
}

}  // namespace

int RunInvocation(const Invocation& invocation, std::ostream& out,
                  std::ostream& err) {
  absl::Status status = RunStatus(invocation, out, err);
  out.flush();
  if (!status.ok()) {
    // Errors echo values other users chose (a job's reason, a node's):
    // escaped, line by line, like every table.
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
      lines.push_back(Printable(line));
    }
    err << "xlctl: " << absl::StrJoin(lines, "\n") << "\n";
  }
  return ExitCodeFor(status);
}

int XlctlMain(int argc, char** argv) {
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  // Copied: the token leaves what ps shows (common/argv.h).
  HideArgumentValues(argc, argv, {"--token"});
  CommandLine command_line;
  if (std::optional<int> code =
          command_line.Parse(args, std::cout, std::cerr)) {
    return *code;
  }
  return RunInvocation(command_line.invocation(), std::cout, std::cerr);
}

}  // namespace xl::client
