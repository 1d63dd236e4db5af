// The xlctl commands: each one makes its calls to xl-scheduler through a
// SchedulerConnection and prints the result to the given streams in the
// chosen output format. Every method returns the error to report (whose
// code maps onto an exit code, see exit_code.h) after printing what it could.
// Not thread-safe: one Commands per invocation.
#ifndef XL_CLIENT_COMMANDS_H_
#define XL_CLIENT_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/connection.h"
#include "client/job_file.h"
#include "client/output.h"
#include "client/plan_command.h"
#include "common/clock.h"
#include "xl/v1/job.pb.h"
#include "xl/v1/queue.pb.h"

namespace xl::client {

struct SubmitOptions {
  // Empty: no job file; the command comes from overrides.command.
  std::string job_file;
  JobOverrides overrides;
  // Empty: a random key is made for this invocation.
  std::string idempotency_key;
  // Show the placement it would get now; queue nothing.
  bool dry_run = false;
  // --sbatch: a Slurm batch script instead of a job file.
  std::string sbatch_file;
};

struct ListOptions {
  // State names, any case ("running"); empty lists every state.
  std::vector<std::string> states;
  std::string user;
  std::string queue;
  // Page size; 0 lets the scheduler choose (100).
  int32_t limit = 0;
  // Fetch every page, not only the first.
  bool all_pages = false;
};

struct LogsOptions {
  // Only this rank; every rank when unset.
  std::optional<int32_t> rank;
  bool follow = false;
  // On a terminal, print control characters as they came (else escaped).
  bool raw = false;
};

struct TopOptions {
  std::string user;
  std::string queue;
  // Time between refreshes.
  absl::Duration interval = absl::Seconds(2);
  // Print one table and return. When stdout is not a terminal top also
  // prints once, unless `interval_given`: then it keeps appending a table
  // every interval (for a log), never clearing the screen.
  bool once = false;
  bool interval_given = false;
};

// xlctl queue [list|show|set|apply|delete|history] and its flags.
struct QueueOptions {
  // "" (the summary of pending and running work), "list", "show", "set",
  // "apply", "delete" or "history".
  std::string verb;
  std::string name;
  // apply: a YAML file {queues: [...]}.
  std::string file;
  // set: only the flags given change the queue.
  std::optional<double> weight;
  std::optional<std::string> cohort;
  // MODEL=GPUS[,borrow=N][,lend=N], each; given ones replace all quotas.
  std::vector<std::string> quotas;
  bool no_quotas = false;
  std::optional<std::string> default_time_limit, max_time_limit;
  std::optional<std::string> default_checkpoint_dir;
  std::optional<int64_t> max_running_gpus_per_user, max_pending_jobs_per_user;
  std::optional<int64_t> max_processes_per_node;
  std::optional<int32_t> max_priority;
  bool no_max_priority = false;
  // Who may submit: given lists replace the queue's; admit_everyone empties
  // both.
  std::vector<std::string> admit_users, admit_groups;
  bool admit_everyone = false;
  std::optional<std::string> min_runtime;
  std::optional<bool> allow_non_preemptible;
  std::optional<bool> reclaim_lent_quota;
};

// Parses --quota "MODEL=GPUS[,borrow=N][,lend=N]".
absl::StatusOr<xl::v1::GpuQuota> ParseQuotaFlag(const std::string& text);

// How many times `submit` retries an UNAVAILABLE call (with the same key).
inline constexpr int kSubmitRetries = 3;

class Commands {
 public:
  // `connection`, `out`, `err` and `clock` must outlive this object.
  Commands(SchedulerConnection* connection, OutputFormat format,
           std::ostream* out, std::ostream* err,
           const xl::Clock* clock = xl::RealClock::Get());

  // Replaces the pause between retries and polls (tests pass a no-op).
  void set_sleep(std::function<void(absl::Duration)> sleep) {
    sleep_ = std::move(sleep);
  }
  // Replaces the zone times are printed in (tests use UTC).
  void set_zone(absl::TimeZone zone) { zone_ = zone; }
  // Says whether `out` is a terminal: `top` then redraws the screen.
  void set_terminal(bool terminal) { terminal_ = terminal; }

  absl::Status Submit(const SubmitOptions& options);
  absl::Status Get(const std::string& job_id);
  absl::Status Explain(const std::string& job_id);
  absl::Status List(const ListOptions& options);
  absl::Status Queue();
  // The queue objects (queue_commands.cc).
  absl::Status QueueCommand(const QueueOptions& options);
  // Fair share: every queue's and user's share, usage and factor.
  absl::Status Share();
  absl::Status Cancel(const std::string& job_id, const std::string& reason);
  // Admins: the job's new priority.
  absl::Status SetPriority(const std::string& job_id, int32_t priority,
                           const std::string& reason);
  absl::Status Logs(const std::string& job_id, const LogsOptions& options);
  absl::Status Watch(const std::string& job_id);
  // OK only when the job ends SUCCEEDED; FAILED or CANCELLED give an error
  // with exit code 1; running past `timeout` gives exit code 5.
  absl::Status Wait(const std::string& job_id,
                    std::optional<absl::Duration> timeout);
  // The SCHEDULED and RUNNING jobs with their latest training metrics,
  // refreshed every options.interval until SIGINT (which returns OK) or, with
  // options.once, printed once. -o json|yaml print one ListJobsResponse.
  // While it runs, SIGINT only ends the loop; a second SIGINT kills.
  absl::Status Top(const TopOptions& options);
  // A training job's metrics history (GetJobMetrics).
  absl::Status Metrics(const std::string& job_id);
  absl::Status Nodes();
  // Every replica of --server's list: its role, term and log indexes.
  absl::Status Servers();
  absl::Status Node(const std::string& name);
  absl::Status Drain(const std::string& name, const std::string& reason);
  absl::Status Resume(const std::string& name);
  // What a training needs (PlanResources against the live fleet). When the
  // scheduler is unreachable or has no PlanResources, says so on `err` and
  // plans offline with the built-in GPU catalogue; options.offline skips the
  // call. -o json|yaml print the Plan. Defined in plan_command.cc.
  absl::Status Plan(const PlanOptions& options);

  // --- identity and credentials (auth_commands.cc) ---
  // Who the scheduler takes the caller for, and whether auth is on.
  absl::Status WhoAmI();
  // Checks `token` with the scheduler (WhoAmI) and stores it for later
  // calls (credentials.h); with `tls_ca_pem`, stores that CA too.
  absl::Status Login(const std::string& token, const std::string& tls_ca_pem);
  // Admin: a new user token with the user's `groups` (or, with `join`, a
  // join token for a node).
  absl::Status TokenCreate(const std::string& user, bool admin,
                           const std::string& ttl, bool join,
                           const std::string& node,
                           const std::vector<std::string>& groups = {});
  absl::Status TokenList();
  absl::Status TokenRevoke(const std::string& id);

 private:
  RenderContext Context() const;
  absl::StatusOr<xl::v1::Job> GetJob(const std::string& job_id);
  // Calls ListJobs for `request`: the first page, or every page.
  absl::StatusOr<xl::v1::ListJobsResponse> ListJobs(
      xl::v1::ListJobsRequest request, bool all_pages);
  // One frame of `top`: the header and the table, or the error.
  void PrintTopFrame(const TopOptions& options,
                     const absl::StatusOr<xl::v1::ListJobsResponse>& jobs,
                     bool redraw);
  absl::Status FinishWait(const xl::v1::Job& job);
  void PrintNode(const xl::v1::Node& node, const char* verb);

  SchedulerConnection* connection_;
  OutputFormat format_;
  std::ostream* out_;
  std::ostream* err_;
  const xl::Clock* clock_;
  absl::TimeZone zone_ = absl::LocalTimeZone();
  bool terminal_ = false;
  std::function<void(absl::Duration)> sleep_;
};

// Returns a fresh random idempotency key ("xlctl-" and 32 hex digits).
std::string NewIdempotencyKey();

// Parses a state name, any case. INVALID_ARGUMENT listing the states.
absl::StatusOr<xl::v1::JobState> ParseJobState(const std::string& name);

}  // namespace xl::client

#endif  // XL_CLIENT_COMMANDS_H_
