// `xlctl queue` and its subcommands (list, show, set, apply, delete,
// history), and `xlctl share`.
#include <CLI/CLI.hpp>
#include <string>

#include "client/cli_subcommands.h"

namespace xl::client::cli {
namespace {

// set's flags about the queue's share of the GPUs: weight, cohort, quotas.
void AddShareFlags(CLI::App* set, Invocation* inv, QueueSetFlags* f) {
  AddGivenOption(set, "--weight", &f->weight,
                 "fair share against other queues (default 1)");
  AddGivenOption(
      set, "--cohort", &f->cohort,
      "queues of one cohort lend each other unused quota (\"\" for none)");
  set->add_option(
      "--quota", inv->queue.quotas,
      "MODEL=GPUS[,borrow=N][,lend=N] (repeatable; replaces all quotas): "
      "GPUS guaranteed, at most N borrowed from the cohort, at most N "
      "lent; MODEL as xlctl nodes shows it, or * for any other model");
  set->add_flag("--no-quotas", inv->queue.no_quotas,
                "drop every quota: the queue may use any GPU");
}

// set's flags about the jobs of the queue: time limits, checkpoints, and
// per-user and per-node limits.
void AddJobLimitFlags(CLI::App* set, QueueSetFlags* f) {
  AddGivenOption(set, "--default-time-limit", &f->default_time,
                 "time limit of jobs that give none, like 4h or 2d (0: none)");
  AddGivenOption(set, "--max-time-limit", &f->max_time,
                 "longer jobs are refused at submit, like 3d (0: no maximum)");
  AddGivenOption(
      set, "--default-checkpoint-dir", &f->checkpoint_dir,
      "checkpoint_dir of jobs that give none: a path every node mounts, "
      "{user}, {job} and {attempt} expand, like /shared/ckpt/{user}/{job} "
      "(\"\": none)");
  AddGivenOption(
      set, "--max-running-gpus-per-user", &f->user_gpus,
      "GPUs one user's running jobs may hold in the queue (0: no limit)");
  AddGivenOption(set, "--max-pending-per-user", &f->user_pending,
                 "pending jobs one user may have in the queue (0: no limit)");
  AddGivenOption(
      set, "--max-processes-per-node", &f->processes,
      "processes and threads one job may have on each node, its cgroup's "
      "pids.max (0: the node's default, xl-agent --default-max-processes)");
}

// set's flags about who may submit, at what priority, and preemption.
void AddAdmissionFlags(CLI::App* set, Invocation* inv, QueueSetFlags* f) {
  AddGivenOption(set, "--max-priority", &f->max_priority,
                 "the highest priority users who are not admins may ask for "
                 "(where unset: 0)");
  set->add_flag("--no-max-priority", inv->queue.no_max_priority,
                "drop the cap set (users may then ask for 0 at most)");
  set->add_option("--admit-user", inv->queue.admit_users,
                  "a user who may submit to the queue (repeat; the "
                  "given ones replace the queue's list; * for "
                  "everyone)");
  set->add_option("--admit-group", inv->queue.admit_groups,
                  "a group whose members (as their tokens say) may "
                  "submit (repeat; replaces the queue's list)");
  set->add_flag("--admit-everyone", inv->queue.admit_everyone,
                "drop both lists: everyone may submit");
  AddGivenOption(set, "--min-runtime", &f->min_runtime,
                 "a job of the queue is never preempted before it ran this "
                 "long, like 30m");
  AddGivenOption(set, "--allow-non-preemptible", &f->allow_non_preemptible,
                 "true: jobs may say preemptible: false");
  AddGivenOption(
      set, "--reclaim-lent-quota", &f->reclaim_lent_quota,
      "true: take quota lent to the cohort back by preempting borrowers");
}

void AddQueueSet(CLI::App* queue, Invocation* inv, QueueSetFlags* flags) {
  CLI::App* set = queue->add_subcommand(
      "set",
      "Create a queue, or change the flags given of an existing one (the "
      "others keep their values). Admins.");
  set->add_option("NAME", inv->queue.name, "the queue")->required();
  AddShareFlags(set, inv, flags);
  AddJobLimitFlags(set, flags);
  AddAdmissionFlags(set, inv, flags);
}

// The subcommands of queue, in the order --help lists them.
void AddQueueVerbs(CLI::App* queue, Invocation* inv, QueueSetFlags* set_flags) {
  queue->add_subcommand("list",
                        "Every queue: weight, cohort, GPUs in use against "
                        "its quotas, borrowed GPUs, jobs, limits.");
  CLI::App* show =
      queue->add_subcommand("show", "One queue's spec and what it uses.");
  show->add_option("NAME", inv->queue.name, "the queue")->required();
  AddQueueSet(queue, inv, set_flags);
  CLI::App* apply = queue->add_subcommand(
      "apply",
      "Create or update the queues of a YAML file ({queues: [{name, weight, "
      "cohort, quotas: [{gpu_model, nominal_gpus, borrowing_limit_gpus, "
      "lending_limit_gpus}], ...}]}; see README \"Queues and fair share\"). "
      "Admins.");
  apply->add_option("FILE", inv->queue.file, "the queues file")
      ->required()
      ->check(CLI::ExistingFile);
  CLI::App* del = queue->add_subcommand(
      "delete", "Delete a queue without pending or running jobs. Admins.");
  del->add_option("NAME", inv->queue.name, "the queue")->required();
  CLI::App* history = queue->add_subcommand(
      "history", "Recorded changes to queues, newest first.");
  history->add_option("NAME", inv->queue.name, "only this queue's changes");
}

}  // namespace

CLI::App* AddQueueCommand(Subcommands* commands, Invocation* inv,
                          QueueSetFlags* set_flags) {
  CLI::App* queue = commands->Add(
      "queue",
      "Without a subcommand: every queue's pending and running jobs and "
      "GPUs, and the cluster's totals. With one: the queues as objects "
      "(weight, quotas, limits); set, apply and delete are for admins.");
  queue->require_subcommand(0, 1);
  AddQueueVerbs(queue, inv, set_flags);
  return queue;
}

void AddShareCommand(Subcommands* commands) {
  commands->Add("share",
                "Fair share, as Slurm's sshare: every queue's and user's "
                "share, decayed GPU-hours, part of all usage, and fair-share "
                "factor, with how they make a pending job's effective "
                "priority.");
}

void QueueSetFlags::ApplyTo(QueueOptions* q) const {
  weight.ApplyTo(&q->weight);
  cohort.ApplyTo(&q->cohort);
  default_time.ApplyTo(&q->default_time_limit);
  max_time.ApplyTo(&q->max_time_limit);
  checkpoint_dir.ApplyTo(&q->default_checkpoint_dir);
  user_gpus.ApplyTo(&q->max_running_gpus_per_user);
  user_pending.ApplyTo(&q->max_pending_jobs_per_user);
  processes.ApplyTo(&q->max_processes_per_node);
  max_priority.ApplyTo(&q->max_priority);
  min_runtime.ApplyTo(&q->min_runtime);
  allow_non_preemptible.ApplyTo(&q->allow_non_preemptible);
  reclaim_lent_quota.ApplyTo(&q->reclaim_lent_quota);
}

}  // namespace xl::client::cli
