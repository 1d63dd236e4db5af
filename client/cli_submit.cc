// `xlctl submit`: its flags, and how the ones given override the job file.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "client/cli_subcommands.h"
#include "client/job_file.h"

namespace xl::client::cli {
namespace {

constexpr char kSubmitFooter[] =
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
    "'xlctl --help'.";

// What to run: the job file, or a Slurm batch script instead.
void AddJobSource(CLI::App* submit, Invocation* inv) {
  CLI::Option* job_file_opt =
      submit->add_option("JOB_FILE", inv->submit.job_file,
                         "YAML or JSON job file (optional with -- COMMAND)");
  submit
      ->add_option("--sbatch", inv->submit.sbatch_file,
                   "a Slurm batch script instead of a job file: its #SBATCH "
                   "lines (nodes, ntasks[-per-node], gres=gpu:N, time, "
                   "job-name, partition as queue, mem, cpus-per-task, "
                   "dependency=afterok, export) make the job, flags given "
                   "here win, arguments after -- go to the script; it runs "
                   "once per rank with SLURM_* set and srun running its "
                   "command in place; what xl cannot honour is refused with "
                   "the line named")
      ->excludes(job_file_opt);
}

// The flags that override one field of the job each, when given.
void AddFieldOverrides(CLI::App* submit, SubmitFlags* f) {
  AddGivenOption(submit, "--name", &f->name, "job name");
  AddGivenOption(submit, "--queue", &f->queue, "queue (project)");
  AddGivenOption(submit, "--priority", &f->priority,
                 "priority; higher runs first");
  AddGivenOption(submit, "--nodes", &f->nodes,
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
  AddGivenOption(submit, "--ranks-per-node", &f->ranks_per_node,
                 "processes per node (default: GPUs per node, or 1)")
      ->check(CLI::NonNegativeNumber);
  AddGivenOption(submit, "--gpus-per-node", &f->gpus_per_node, "GPUs per node")
      ->check(CLI::NonNegativeNumber);
  AddGivenOption(submit, "--max-retries", &f->max_retries,
                 "requeues allowed after a failure")
      ->check(CLI::NonNegativeNumber);
  AddGivenOption(
      submit, "--time-limit", &f->time_limit,
      "running time limit, like 600s, 90m or 2h (a plain number is seconds)");
}

// The flags that add to the job (env, dependencies, excluded nodes), and
// those about the submission itself.
void AddAdditions(CLI::App* submit, Invocation* inv) {
  JobOverrides& o = inv->submit.overrides;
  submit
      ->add_option("--env", o.env,
                   "KEY=VALUE set in every rank's environment (repeatable)")
      ->allow_extra_args(false);
  submit
      ->add_option("--after-ok", o.after_ok,
                   "start only after this job has SUCCEEDED; fail if it "
                   "ends otherwise (repeatable, or comma-separated)")
      ->delimiter(',')
      ->allow_extra_args(false);
  submit->add_option("--working-dir", o.working_dir,
                     "directory the ranks start in (default: the job file's "
                     "working_dir, else the current directory, as sbatch "
                     "does)");
  submit
      ->add_option("--exclude", o.exclude_nodes,
                   "a node the job must not run on (repeatable, or "
                   "comma-separated), as sbatch --exclude")
      ->delimiter(',')
      ->allow_extra_args(false);
  submit->add_flag("--dry-run", inv->submit.dry_run,
                   "show what the job would get now (nodes, GPUs and rank "
                   "order, or why it would wait and when it would start, "
                   "its place in the queue, jobs it would preempt); queue "
                   "nothing");
  submit->add_option("--idempotency-key", inv->submit.idempotency_key,
                     "key that makes a repeated submit return the first job "
                     "(default: random per invocation)");
}

}  // namespace

void AddSubmitCommand(Subcommands* commands, Invocation* inv,
                      SubmitFlags* flags) {
  CLI::App* submit = commands->Add(
      "submit",
      "Submit a job and print its id:  xlctl submit [flags] JOB.yaml  |  "
      "xlctl submit [flags] [JOB.yaml] -- COMMAND [ARGS...]");
  submit->footer(kSubmitFooter);
  AddJobSource(submit, inv);
  AddFieldOverrides(submit, flags);
  AddAdditions(submit, inv);
}

void SubmitFlags::ApplyTo(JobOverrides* o) const {
  name.ApplyTo(&o->name);
  queue.ApplyTo(&o->queue);
  priority.ApplyTo(&o->priority);
  if (nodes.given()) {
    int32_t lo = 0, hi = 0;
    ParseNodeRange(nodes.value, &lo, &hi);
    o->nodes = hi;
    o->min_nodes = lo == hi ? 0 : lo;
  }
  ranks_per_node.ApplyTo(&o->ranks_per_node);
  gpus_per_node.ApplyTo(&o->gpus_per_node);
  max_retries.ApplyTo(&o->max_retries);
  time_limit.ApplyTo(&o->time_limit);
}

}  // namespace xl::client::cli
