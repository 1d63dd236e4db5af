// Over 600 lines: one function per xlctl verb that calls the API, each a
// short request, call and print; output.cc formats.
#include "client/commands.h"

#include <signal.h>

#include <algorithm>
#include <csignal>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/exit_code.h"
#include "common/duration.h"
#include "common/leader.h"
#include "common/status.h"
#include "xl/v1/scheduler.pb.h"

namespace xl::client {
namespace {

// Calls `fetch` with each next_page_token until the server gives none,
// merging the pages into `*all`. Bounded, so a server that hands back the
// same token forever cannot keep xlctl looping.
template <typename Response, typename Fetch>
grpc::Status AllPages(Fetch fetch, Response* all) {
  std::string token;
  for (int pages = 0; pages < 100000; ++pages) {
    Response page;
    grpc::Status status = fetch(token, &page);
    if (!status.ok()) return status;
    std::string next = page.next_page_token();
    page.clear_next_page_token();
    all->MergeFrom(page);
    if (next.empty() || next == token) break;
    token = std::move(next);
  }
  return grpc::Status::OK;
}

constexpr char kJobHint[] = "; list your jobs with 'xlctl list'";
constexpr char kNodeHint[] = "; list the nodes with 'xlctl nodes'";

// Backoff before submit's retries: 0.5 s, 1 s, 2 s.
constexpr absl::Duration kSubmitBackoff = absl::Milliseconds(500);
// `wait` re-opens a broken watch after this pause, and polls GetJob this
// often when the scheduler has no WatchJob.
constexpr absl::Duration kWaitRetryPause = absl::Seconds(1);
constexpr absl::Duration kWaitPollInterval = absl::Seconds(2);
// `wait` gives up when the scheduler stays unreachable this long.
constexpr absl::Duration kWaitUnreachableLimit = absl::Seconds(30);

constexpr absl::Duration kTopMinInterval = absl::Milliseconds(100);
// `top` sleeps in slices this long, so SIGINT ends it at once.
constexpr absl::Duration kTopSleepSlice = absl::Milliseconds(100);
// Clears the screen and puts the cursor in its top left corner.
constexpr char kClearScreen[] = "\x1b[H\x1b[2J";

// Set by SIGINT while a ScopedInterruptFlag exists.
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void OnInterrupt(int /*signal*/) { g_interrupted = 1; }

// Turns SIGINT into a flag for its lifetime, so a live view can end
// cleanly (exit 0) instead of being killed mid-line. SA_RESETHAND puts the
// default back after the first SIGINT: a second one kills, should a call
// hang. Restores the previous action on destruction. One at a time.
class ScopedInterruptFlag {
 public:
  ScopedInterruptFlag() {
    g_interrupted = 0;
    struct sigaction action = {};
    action.sa_handler = OnInterrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &action, &previous_);
  }
  ~ScopedInterruptFlag() { sigaction(SIGINT, &previous_, nullptr); }
  ScopedInterruptFlag(const ScopedInterruptFlag&) = delete;
  ScopedInterruptFlag& operator=(const ScopedInterruptFlag&) = delete;

  bool interrupted() const { return g_interrupted != 0; }

 private:
  struct sigaction previous_ = {};
};

// Errors a live view rides out (the scheduler restarting, a slow answer).
bool IsTransient(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

bool IsFinished(xl::v1::JobState state) {
  return state == xl::v1::SUCCEEDED || state == xl::v1::FAILED ||
         state == xl::v1::CANCELLED;
}

int32_t WorldSize(const xl::v1::Job& job) {
  if (job.world_size() > 0) return job.world_size();
  const auto& r = job.spec().resources();
  int32_t per_node = r.ranks_per_node() > 0
                         ? r.ranks_per_node()
                         : (r.gpus_per_node() > 0 ? r.gpus_per_node() : 1);
  return std::max(r.nodes(), 1) * per_node;
}

}  // namespace

std::string NewIdempotencyKey() {
  std::random_device device;
  std::string key = "xlctl-";
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&key, absl::StrFormat("%08x", device()));
  }
  return key;
}

absl::StatusOr<xl::v1::JobState> ParseJobState(const std::string& name) {
  xl::v1::JobState state;
  if (xl::v1::JobState_Parse(absl::AsciiStrToUpper(name), &state) &&
      state != xl::v1::JOB_STATE_UNSPECIFIED) {
    return state;
  }
  return UsageError(absl::StrCat(
      "--state: unknown job state \"", name,
      "\"; use PENDING, SCHEDULED, RUNNING, SUCCEEDED, FAILED or CANCELLED"));
}

Commands::Commands(SchedulerConnection* connection, OutputFormat format,
                   std::ostream* out, std::ostream* err, const xl::Clock* clock)
    : connection_(connection),
      format_(format),
      out_(out),
      err_(err),
      clock_(clock),
      sleep_([](absl::Duration d) { absl::SleepFor(d); }) {}

RenderContext Commands::Context() const {
  RenderContext context;
  context.now = clock_->Now();
  context.zone = zone_;
  return context;
}

absl::StatusOr<xl::v1::Job> Commands::GetJob(const std::string& job_id) {
  xl::v1::GetJobRequest request;
  request.set_job_id(job_id);
  xl::v1::Job job;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->jobs().GetJob(context.get(), request, &job);
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("job ", job_id),
                                  kJobHint);
  }
  return job;
}

absl::Status Commands::Submit(const SubmitOptions& options) {
  ASSIGN_OR_RETURN(
      xl::v1::JobSpec spec,
      options.sbatch_file.empty()
          ? BuildJobSpec(options.job_file, options.overrides)
          : BuildSbatchJobSpec(options.sbatch_file, options.overrides));
  xl::v1::SubmitJobRequest request;
  *request.mutable_spec() = std::move(spec);
  request.set_idempotency_key(options.idempotency_key.empty()
                                  ? NewIdempotencyKey()
                                  : options.idempotency_key);
  request.set_dry_run(options.dry_run);
  xl::v1::SubmitJobResponse response;
  grpc::Status status;
  for (int attempt = 0;; ++attempt) {
    auto context = connection_->UnaryContext();
    status = connection_->jobs().SubmitJob(context.get(), request, &response);
    // The same key on every try: a submit that reached the store before the
    // connection broke is returned, not created twice.
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        attempt == kSubmitRetries) {
      break;
    }
    sleep_(kSubmitBackoff * (1 << attempt));
  }
  if (!status.ok()) return connection_->CallError(status, "submit");
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(response, format_);
    return absl::OkStatus();
  }
  if (options.dry_run) {
    *out_ << DryRunText(response.dry_run(), Context());
    return absl::OkStatus();
  }
  *out_ << response.job_id() << "\n";
  if (!response.created() && !options.idempotency_key.empty()) {
    *err_ << "xlctl: job " << response.job_id()
          << " already existed for idempotency key " << options.idempotency_key
          << "; nothing new was submitted\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::Get(const std::string& job_id) {
  ASSIGN_OR_RETURN(xl::v1::Job job, GetJob(job_id));
  if (format_ == OutputFormat::kTable) {
    *out_ << JobDetails(job, Context());
  } else {
    *out_ << RenderMessage(job, format_);
  }
  return absl::OkStatus();
}

absl::Status Commands::Explain(const std::string& job_id) {
  xl::v1::ExplainJobRequest request;
  request.set_job_id(job_id);
  xl::v1::ExplainJobResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->jobs().ExplainJob(context.get(), request, &response);
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("explain job ", job_id),
                                  kJobHint);
  }
  if (format_ == OutputFormat::kTable) {
    *out_ << ExplainText(response, Context());
  } else {
    *out_ << RenderMessage(response, format_);
  }
  return absl::OkStatus();
}

absl::Status Commands::List(const ListOptions& options) {
  xl::v1::ListJobsRequest request;
  for (const std::string& name : options.states) {
    ASSIGN_OR_RETURN(xl::v1::JobState state, ParseJobState(name));
    request.add_states(state);
  }
  if (options.limit < 0) {
    return UsageError("--limit: must be at least 1 (or 0 for the default)");
  }
  request.set_user(options.user);
  request.set_queue(options.queue);
  request.set_page_size(options.limit);
  ASSIGN_OR_RETURN(xl::v1::ListJobsResponse all,
                   ListJobs(std::move(request), options.all_pages));
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(all, format_);
    return absl::OkStatus();
  }
  *out_ << JobTable(all.jobs(), Context());
  if (!all.next_page_token().empty()) {
    *err_ << "xlctl: showing the first " << all.jobs_size()
          << " jobs; more match: use --all-pages or a larger --limit\n";
  }
  return absl::OkStatus();
}

absl::StatusOr<xl::v1::ListJobsResponse> Commands::ListJobs(
    xl::v1::ListJobsRequest request, bool all_pages) {
  xl::v1::ListJobsResponse all;
  while (true) {
    xl::v1::ListJobsResponse page;
    auto context = connection_->UnaryContext();
    grpc::Status status =
        connection_->jobs().ListJobs(context.get(), request, &page);
    if (!status.ok()) return connection_->CallError(status, "list jobs");
    for (auto& job : *page.mutable_jobs()) *all.add_jobs() = std::move(job);
    all.set_next_page_token(page.next_page_token());
    if (!all_pages || page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  return all;
}

void Commands::PrintTopFrame(
    const TopOptions& options,
    const absl::StatusOr<xl::v1::ListJobsResponse>& jobs, bool redraw) {
  if (redraw) *out_ << kClearScreen;
  RenderContext context = Context();
  std::string header = "xlctl top: ";
  if (jobs.ok()) {
    absl::StrAppend(&header, jobs->jobs_size(),
                    jobs->jobs_size() == 1 ? " job" : " jobs",
                    " scheduled or running");
  } else {
    absl::StrAppend(&header, "jobs scheduled or running");
  }
  if (!options.queue.empty()) {
    absl::StrAppend(&header, " in queue ", options.queue);
  }
  if (!options.user.empty()) {
    absl::StrAppend(&header, " of user ", options.user);
  }
  absl::StrAppend(
      &header, " at ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S", context.now, context.zone),
      ", every ", xl::HumanDuration(options.interval), "; Ctrl-C quits\n\n");
  *out_ << header;
  if (jobs.ok()) {
    *out_ << TopTable(jobs->jobs(), context);
  } else {
    *out_ << "xlctl: " << Printable(jobs.status().message())
          << " (trying again in "
          << xl::HumanDuration(options.interval) << ")\n";
  }
  out_->flush();
}

absl::Status Commands::Top(const TopOptions& options) {
  // Each refresh lists every page: a tiny interval would only load the
  // scheduler.
  if (options.interval < kTopMinInterval) {
    return UsageError(absl::StrCat("--interval: must be at least ",
                                   xl::HumanDuration(kTopMinInterval),
                                   ", like 2s"));
  }
  xl::v1::ListJobsRequest request;
  request.add_states(xl::v1::SCHEDULED);
  request.add_states(xl::v1::RUNNING);
  request.set_user(options.user);
  request.set_queue(options.queue);
  // A page cut would hide running jobs: top always reads every page.
  absl::StatusOr<xl::v1::ListJobsResponse> jobs =
      ListJobs(request, /*all_pages=*/true);
  if (!jobs.ok()) return jobs.status();
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(*jobs, format_);
    return absl::OkStatus();
  }
  // Redrawing needs a terminal; into a pipe or file top prints one table
  // (scripts never hang), unless --interval asks for a log of tables.
  const bool live = !options.once && (terminal_ || options.interval_given);
  if (!live) {
    *out_ << TopTable(jobs->jobs(), Context());
    return absl::OkStatus();
  }
  ScopedInterruptFlag interrupt;
  for (bool first = true;; first = false) {
    if (!terminal_ && !first) *out_ << "\n";
    PrintTopFrame(options, jobs, /*redraw=*/terminal_);
    for (absl::Duration left = options.interval;
         left > absl::ZeroDuration() && !interrupt.interrupted();
         left -= kTopSleepSlice) {
      sleep_(std::min(left, kTopSleepSlice));
    }
    if (interrupt.interrupted()) return absl::OkStatus();
    jobs = ListJobs(request, /*all_pages=*/true);
    if (interrupt.interrupted()) return absl::OkStatus();
    if (!jobs.ok() && !IsTransient(jobs.status())) return jobs.status();
  }
}

absl::Status Commands::Metrics(const std::string& job_id) {
  xl::v1::GetJobMetricsResponse response;
  grpc::Status status = AllPages(
      [&](const std::string& token, xl::v1::GetJobMetricsResponse* page) {
        xl::v1::GetJobMetricsRequest request;
        request.set_job_id(job_id);
        request.set_page_token(token);
        auto context = connection_->UnaryContext();
        return connection_->jobs().GetJobMetrics(context.get(), request, page);
      },
      &response);
  if (!status.ok()) {
    return connection_->CallError(
        status, absl::StrCat("metrics of job ", job_id), kJobHint);
  }
  if (format_ == OutputFormat::kCsv) {
    *out_ << MetricsCsv(response.points());
    return absl::OkStatus();
  }
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(response, format_);
    return absl::OkStatus();
  }
  *out_ << MetricsTable(response.points(), Context());
  if (response.points().empty()) {
    *err_ << "xlctl: job " << job_id
          << " has reported no training metrics (yet); xl-train jobs report "
             "them every train.metrics_every steps\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::Queue() {
  xl::v1::GetQueueResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status = connection_->jobs().GetQueue(
      context.get(), xl::v1::GetQueueRequest(), &response);
  if (!status.ok()) return connection_->CallError(status, "queue");
  *out_ << (format_ == OutputFormat::kTable ? QueueTable(response)
                                            : RenderMessage(response, format_));
  return absl::OkStatus();
}

absl::Status Commands::Cancel(const std::string& job_id,
                              const std::string& reason) {
  xl::v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  xl::v1::CancelJobResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->jobs().CancelJob(context.get(), request, &response);
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("cancel job ", job_id),
                                  kJobHint);
  }
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(response, format_);
  } else {
    *out_ << "job " << response.job().id() << " "
          << JobStateName(response.job().state()) << "\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::SetPriority(const std::string& job_id,
                                   int32_t priority,
                                   const std::string& reason) {
  xl::v1::SetJobPriorityRequest request;
  request.set_job_id(job_id);
  request.set_priority(priority);
  request.set_reason(reason);
  xl::v1::Job response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->jobs().SetJobPriority(context.get(), request, &response);
  if (!status.ok()) {
    return connection_->CallError(
        status, absl::StrCat("set the priority of job ", job_id), kJobHint);
  }
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(response, format_);
  } else {
    *out_ << "job " << response.id() << " priority "
          << response.spec().priority() << "\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::Logs(const std::string& job_id,
                            const LogsOptions& options) {
  // The job tells how many ranks there are (and NOT_FOUND comes as a clear
  // error before any stream is opened).
  ASSIGN_OR_RETURN(xl::v1::Job job, GetJob(job_id));
  xl::v1::StreamLogsRequest request;
  request.set_job_id(job_id);
  request.set_follow(options.follow);
  if (options.rank) {
    if (*options.rank < 0 || *options.rank >= WorldSize(job)) {
      return UsageError(absl::StrCat("--rank: job ", job_id, " has ranks 0 to ",
                                     WorldSize(job) - 1, "; got ",
                                     *options.rank));
    }
    request.set_rank(*options.rank);
  } else {
    request.set_rank(-1);
    request.set_all_ranks(true);
  }
  // A job's output is its user's text: on a terminal it must not drive it
  // (clear the screen, fake lines, write the clipboard with OSC 52), also
  // for an admin reading another user's job. Pipes get the bytes.
  LogPrinter printer(/*prefix_ranks=*/!options.rank && WorldSize(job) > 1,
                     /*escape=*/terminal_ && !options.raw);
  auto context = connection_->StreamContext();
  auto reader = connection_->jobs().StreamLogs(context.get(), request);
  xl::v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
    if (format_ == OutputFormat::kTable) {
      *out_ << printer.Add(chunk);
    } else {
      *out_ << RenderStreamItem(chunk, format_);
    }
    if (options.follow) out_->flush();
  }
  if (format_ == OutputFormat::kTable) *out_ << printer.Flush();
  out_->flush();
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("logs of job ", job_id),
                                  kJobHint);
  }
  return absl::OkStatus();
}

absl::Status Commands::Watch(const std::string& job_id) {
  xl::v1::WatchJobRequest request;
  request.set_job_id(job_id);
  auto context = connection_->StreamContext();
  auto reader = connection_->jobs().WatchJob(context.get(), request);
  xl::v1::JobEvent event;
  while (reader->Read(&event)) {
    if (format_ == OutputFormat::kTable) {
      *out_ << EventLine(event, Context());
    } else {
      *out_ << RenderStreamItem(event, format_);
    }
    out_->flush();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("watch job ", job_id),
                                  kJobHint);
  }
  return absl::OkStatus();
}

absl::Status Commands::FinishWait(const xl::v1::Job& job) {
  if (format_ == OutputFormat::kTable) {
    *out_ << "job " << job.id() << " " << JobStateName(job.state()) << "\n";
  } else {
    *out_ << RenderMessage(job, format_);
  }
  if (job.state() == xl::v1::SUCCEEDED) return absl::OkStatus();
  std::string text =
      absl::StrCat("job ", job.id(), " ended ", JobStateName(job.state()));
  if (job.exit_code() != 0)
    absl::StrAppend(&text, " (exit code ", job.exit_code(), ")");
  if (!job.reason().empty()) {
    absl::StrAppend(&text, ": ", Printable(job.reason()));
  }
  absl::StrAppend(&text, "; see its events with 'xlctl watch ", job.id(),
                  "' and its output with 'xlctl logs ", job.id(), "'");
  return WithExitCode(absl::AbortedError(text), kExitFailed);
}

absl::Status Commands::Wait(const std::string& job_id,
                            std::optional<absl::Duration> timeout) {
  const absl::Time deadline =
      timeout ? clock_->Now() + *timeout : absl::InfiniteFuture();
  auto timed_out = [&](const xl::v1::Job& job) {
    return WithExitCode(
        absl::DeadlineExceededError(absl::StrCat(
            "job ", job_id, " is still ", JobStateName(job.state()), " after ",
            xl::HumanDuration(*timeout),
            "; wait longer (--timeout) or look at it with 'xlctl get ", job_id,
            "'")),
        kExitWaitTimeout);
  };
  ASSIGN_OR_RETURN(xl::v1::Job job, GetJob(job_id));
  int64_t after_seq = 0;
  bool poll = false;
  absl::Time unreachable_since = absl::InfiniteFuture();
  while (!IsFinished(job.state())) {
    if (clock_->Now() >= deadline) return timed_out(job);
    grpc::Status status;
    if (!poll) {
      // Follow the events; the stream ends after the one that finishes the
      // job. Then GetJob gives the final state with its reason.
      xl::v1::WatchJobRequest request;
      request.set_job_id(job_id);
      request.set_after_seq(after_seq);
      auto context = connection_->StreamContext(deadline);
      auto reader = connection_->jobs().WatchJob(context.get(), request);
      xl::v1::JobEvent event;
      while (reader->Read(&event)) after_seq = event.seq();
      status = reader->Finish();
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) poll = true;
    } else {
      sleep_(std::min(kWaitPollInterval, deadline - clock_->Now()));
    }
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        clock_->Now() >= deadline) {
      return timed_out(job);
    }
    if (!status.ok() &&
        status.error_code() != grpc::StatusCode::UNIMPLEMENTED &&
        status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      return connection_->CallError(status, absl::StrCat("watch job ", job_id),
                                    kJobHint);
    }
    absl::StatusOr<xl::v1::Job> latest = GetJob(job_id);
    if (latest.ok()) {
      job = *std::move(latest);
      unreachable_since = absl::InfiniteFuture();
      // A watch that ended before the job did (the scheduler is shutting
      // down, say) is opened again, but not in a tight loop.
      if (!IsFinished(job.state()) && !poll) {
        sleep_(std::min(kWaitRetryPause, deadline - clock_->Now()));
      }
      continue;
    }
    if (latest.status().code() != absl::StatusCode::kUnavailable) {
      return latest.status();
    }
    // The scheduler may be restarting: keep trying for a while.
    unreachable_since = std::min(unreachable_since, clock_->Now());
    if (clock_->Now() - unreachable_since > kWaitUnreachableLimit) {
      return latest.status();
    }
    sleep_(kWaitRetryPause);
  }
  return FinishWait(job);
}

absl::Status Commands::Nodes() {
  xl::v1::ListNodesResponse response;
  grpc::Status status = AllPages(
      [&](const std::string& token, xl::v1::ListNodesResponse* page) {
        xl::v1::ListNodesRequest request;
        request.set_page_token(token);
        auto context = connection_->UnaryContext();
        return connection_->nodes().ListNodes(context.get(), request, page);
      },
      &response);
  if (!status.ok()) return connection_->CallError(status, "list nodes");
  *out_ << (format_ == OutputFormat::kTable ? NodeTable(response.nodes())
                                            : RenderMessage(response, format_));
  if (!response.security_warning().empty()) {
    *err_ << "xlctl: WARNING: " << Printable(response.security_warning())
          << "\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::Servers() {
  auto list = SplitServerList(connection_->options().server, "--server");
  if (!list.ok()) return UsageError(std::string(list.status().message()));
  const xl::v1::ReplicaStatusList all =
      AskReplicas(*list, connection_->options(),
                  absl::Now() + connection_->options().timeout);
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(all, format_);
    return absl::OkStatus();
  }
  *out_ << absl::StrFormat("%-22s %-3s %-9s %-6s %-8s %-8s %-8s %s\n",
                           "ADDRESS", "ID", "ROLE", "TERM", "COMMIT",
                           "APPLIED", "PID", "VERSION");
  int answered = 0;
  for (const xl::v1::ReplicaStatus& r : all.replicas()) {
    if (!r.unreachable().empty()) {
      *out_ << absl::StrFormat("%-22s %-3s %-9s %s\n", Printable(r.address()),
                               "-", "down", Printable(r.unreachable()));
      continue;
    }
    ++answered;
    *out_ << absl::StrFormat(
        "%-22s %-3d %-9s %-6d %-8d %-8d %-8d %s\n", Printable(r.address()),
        r.id(), r.leader() ? "leader" : "follower", r.term(),
        r.commit_index(), r.applied_index(), r.pid(), Printable(r.version()));
  }
  if (answered == 0) {
    return absl::UnavailableError(absl::StrCat(
        "no replica of ", connection_->options().server,
        " answered; is xl-scheduler running? set --server or XL_SERVER"));
  }
  return absl::OkStatus();
}

void Commands::PrintNode(const xl::v1::Node& node, const char* verb) {
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(node, format_);
    return;
  }
  *out_ << "node " << Printable(node.name()) << " " << verb << "; state "
        << NodeStateName(node.state());
  if (!node.state_reason().empty()) {
    *out_ << " (" << Printable(node.state_reason()) << ")";
  }
  *out_ << "\n";
}

absl::Status Commands::Node(const std::string& name) {
  xl::v1::GetNodeRequest request;
  request.set_name(name);
  xl::v1::Node node;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->nodes().GetNode(context.get(), request, &node);
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("node ", name),
                                  kNodeHint);
  }
  *out_ << (format_ == OutputFormat::kTable ? NodeDetails(node, Context())
                                            : RenderMessage(node, format_));
  return absl::OkStatus();
}

absl::Status Commands::Drain(const std::string& name,
                             const std::string& reason) {
  xl::v1::DrainNodeRequest request;
  request.set_name(name);
  request.set_reason(reason);
  xl::v1::Node node;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->nodes().DrainNode(context.get(), request, &node);
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("drain node ", name),
                                  kNodeHint);
  }
  PrintNode(node, "drained");
  return absl::OkStatus();
}

absl::Status Commands::Resume(const std::string& name) {
  xl::v1::ResumeNodeRequest request;
  request.set_name(name);
  xl::v1::Node node;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->nodes().ResumeNode(context.get(), request, &node);
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("resume node ", name),
                                  kNodeHint);
  }
  PrintNode(node, "resumed");
  return absl::OkStatus();
}

}  // namespace xl::client
