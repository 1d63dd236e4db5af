// xlctl queue list/show/set/apply/delete/history and xlctl share.
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/exit_code.h"
#include "client/job_file.h"
#include "client/output.h"
#include "common/duration.h"
#include "common/proto_text.h"
#include "common/text.h"
#include "common/status.h"

namespace xl::client {
namespace {

constexpr char kQueueHint[] = "; xlctl queue list shows the queues";

}  // namespace

absl::StatusOr<xl::v1::GpuQuota> ParseQuotaFlag(const std::string& text) {
  auto bad = [&]() {
    return UsageError(absl::StrCat(
        "queue set --quota: '", text,
        "' is not MODEL=GPUS[,borrow=N][,lend=N]; for example --quota "
        "'NVIDIA H100 80GB HBM3=64,borrow=16' (the model as xlctl nodes "
        "shows it, or * for any other model)"));
  };
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  const size_t eq = parts[0].rfind('=');
  if (eq == std::string::npos || eq == 0) return bad();
  xl::v1::GpuQuota quota;
  quota.set_gpu_model(parts[0].substr(0, eq));
  int64_t n = 0;
  if (!absl::SimpleAtoi(parts[0].substr(eq + 1), &n) || n < 0) return bad();
  quota.set_nominal_gpus(n);
  for (size_t i = 1; i < parts.size(); ++i) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    if (!absl::SimpleAtoi(kv.second, &n) || n < 0) return bad();
    if (kv.first == "borrow") {
      quota.mutable_borrowing_limit_gpus()->set_value(n);
    } else if (kv.first == "lend") {
      quota.mutable_lending_limit_gpus()->set_value(n);
    } else {
      return bad();
    }
  }
  return quota;
}

absl::Status Commands::QueueCommand(const QueueOptions& o) {
  if (o.verb.empty()) return Queue();
  if (o.verb == "list") {
    xl::v1::ListQueuesResponse response;
    auto context = connection_->UnaryContext();
    grpc::Status status =
        connection_->queues().ListQueues(context.get(), {}, &response);
    if (!status.ok()) return connection_->CallError(status, "queue list");
    *out_ << (format_ == OutputFormat::kTable
                  ? QueueListTable(response)
                  : RenderMessage(response, format_));
    return absl::OkStatus();
  }
  if (o.verb == "show") {
    xl::v1::GetQueueSpecRequest request;
    request.set_name(o.name);
    xl::v1::Queue response;
    auto context = connection_->UnaryContext();
    grpc::Status status =
        connection_->queues().GetQueueSpec(context.get(), request, &response);
    if (!status.ok()) {
      return connection_->CallError(status, absl::StrCat("queue show ", o.name),
                                    kQueueHint);
    }
    *out_ << (format_ == OutputFormat::kTable
                  ? QueueDetails(response, Context())
                  : RenderMessage(response, format_));
    return absl::OkStatus();
  }
  if (o.verb == "history") {
    xl::v1::ListQueueChangesRequest request;
    request.set_queue(o.name);
    xl::v1::ListQueueChangesResponse response;
    auto context = connection_->UnaryContext();
    grpc::Status status = connection_->queues().ListQueueChanges(
        context.get(), request, &response);
    if (!status.ok()) return connection_->CallError(status, "queue history");
    *out_ << (format_ == OutputFormat::kTable
                  ? QueueChangesTable(response, Context())
                  : RenderMessage(response, format_));
    return absl::OkStatus();
  }
  if (o.verb == "delete") {
    xl::v1::DeleteQueueRequest request;
    request.set_name(o.name);
    xl::v1::DeleteQueueResponse response;
    auto context = connection_->UnaryContext();
    grpc::Status status =
        connection_->queues().DeleteQueue(context.get(), request, &response);
    if (!status.ok()) {
      return connection_->CallError(
          status, absl::StrCat("queue delete ", o.name), kQueueHint);
    }
    *out_ << "queue " << o.name << " deleted\n";
    return absl::OkStatus();
  }
  // set and apply: PutQueue, each with the version it read.
  std::vector<xl::v1::PutQueueRequest> puts;
  if (o.verb == "apply") {
    xl::v1::QueueFile file;
    absl::Status read = ReadYamlFileToMessage(o.file, &file);
    if (!read.ok()) {
      return UsageError(absl::StrCat("queue apply ", o.file, ": ",
                                     read.message()));
    }
    if (file.queues_size() == 0) {
      return UsageError(absl::StrCat(
          "queue apply ", o.file,
          ": no queues; write {queues: [{name: research, weight: 2}]}"));
    }
    for (const auto& spec : file.queues()) {
      xl::v1::PutQueueRequest& put = puts.emplace_back();
      *put.mutable_spec() = spec;
    }
  } else if (o.verb == "set") {
    xl::v1::GetQueueSpecRequest get;
    get.set_name(o.name);
    xl::v1::Queue current;
    auto context = connection_->UnaryContext();
    grpc::Status status =
        connection_->queues().GetQueueSpec(context.get(), get, &current);
    xl::v1::PutQueueRequest& put = puts.emplace_back();
    if (status.ok() && current.defined()) {
      *put.mutable_spec() = current.spec();
      put.set_expected_version(current.version());
    } else if (status.ok() || status.error_code() == grpc::NOT_FOUND) {
      // Made only if nobody made it meanwhile.
      put.mutable_spec()->set_name(o.name);
      put.set_expected_version(status.ok() ? 0 : -1);
    } else {
      return connection_->CallError(status, absl::StrCat("queue set ", o.name));
    }
    xl::v1::QueueSpec* spec = put.mutable_spec();
    if (o.weight) spec->set_weight(*o.weight);
    if (o.cohort) spec->set_cohort(*o.cohort);
    if (o.no_quotas || !o.quotas.empty()) spec->clear_quotas();
    for (const std::string& text : o.quotas) {
      ASSIGN_OR_RETURN(*spec->add_quotas(), ParseQuotaFlag(text));
    }
    if (o.default_time_limit) {
      ASSIGN_OR_RETURN(absl::Duration d,
                       ParseDurationFlag("queue set --default-time-limit",
                                         *o.default_time_limit));
      *spec->mutable_default_time_limit() = ToProtoDuration(d);
    }
    if (o.max_time_limit) {
      ASSIGN_OR_RETURN(absl::Duration d,
                       ParseDurationFlag("queue set --max-time-limit",
                                         *o.max_time_limit));
      *spec->mutable_max_time_limit() = ToProtoDuration(d);
    }
    if (o.default_checkpoint_dir) {
      spec->set_default_checkpoint_dir(*o.default_checkpoint_dir);
    }
    if (o.max_running_gpus_per_user) {
      spec->set_max_running_gpus_per_user(*o.max_running_gpus_per_user);
    }
    if (o.max_pending_jobs_per_user) {
      spec->set_max_pending_jobs_per_user(*o.max_pending_jobs_per_user);
    }
    if (o.max_processes_per_node) {
      spec->set_max_processes_per_node(*o.max_processes_per_node);
    }
    if (o.min_runtime) {
      ASSIGN_OR_RETURN(absl::Duration d, ParseDurationFlag(
                                             "queue set --min-runtime",
                                             *o.min_runtime));
      *spec->mutable_min_runtime() = ToProtoDuration(d);
    }
    if (o.allow_non_preemptible) {
      spec->set_allow_non_preemptible(*o.allow_non_preemptible);
    }
    if (o.reclaim_lent_quota) {
      spec->set_reclaim_lent_quota(*o.reclaim_lent_quota);
    }
    if (o.max_priority) spec->mutable_max_priority()->set_value(*o.max_priority);
    if (o.no_max_priority) spec->clear_max_priority();
    if (o.admit_everyone) {
      spec->clear_users();
      spec->clear_groups();
    }
    if (!o.admit_users.empty()) {
      spec->clear_users();
      for (const auto& u : o.admit_users) spec->add_users(u);
    }
    if (!o.admit_groups.empty()) {
      spec->clear_groups();
      for (const auto& g : o.admit_groups) spec->add_groups(g);
    }
  } else {
    return UsageError(absl::StrCat("queue: unknown command '", o.verb,
                                   "'; run 'xlctl queue --help'"));
  }
  for (const auto& put : puts) {
    xl::v1::Queue response;
    auto context = connection_->UnaryContext();
    grpc::Status status =
        connection_->queues().PutQueue(context.get(), put, &response);
    if (!status.ok()) {
      return connection_->CallError(
          status, absl::StrCat("queue ", o.verb, " ", put.spec().name()),
          kQueueHint);
    }
    if (format_ != OutputFormat::kTable) {
      *out_ << RenderMessage(response, format_);
    } else {
      *out_ << "queue " << Printable(response.spec().name()) << ": version "
            << response.version() << "\n";
    }
  }
  return absl::OkStatus();
}

absl::Status Commands::Share() {
  xl::v1::GetSharesResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->queues().GetShares(context.get(), {}, &response);
  if (!status.ok()) return connection_->CallError(status, "share");
  *out_ << (format_ == OutputFormat::kTable ? ShareTable(response)
                                            : RenderMessage(response, format_));
  return absl::OkStatus();
}

}  // namespace xl::client
