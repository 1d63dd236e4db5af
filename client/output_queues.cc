// The renderers of queues: `xlctl queue` and its list, show and history,
// and `xlctl share`.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/output.h"
#include "client/output_text.h"
#include "common/duration.h"

namespace xl::client {
namespace {

std::string QuotaText(const xl::v1::GpuQuota& q) {
  std::string text = absl::StrCat(q.gpu_model(), "=", q.nominal_gpus());
  if (q.has_borrowing_limit_gpus()) {
    absl::StrAppend(&text, ",borrow=", q.borrowing_limit_gpus().value());
  }
  if (q.has_lending_limit_gpus()) {
    absl::StrAppend(&text, ",lend=", q.lending_limit_gpus().value());
  }
  return text;
}

std::string LimitText(const google::protobuf::Duration& d) {
  return d.seconds() > 0 || d.nanos() > 0 ? HumanDuration(FromProto(d))
                                          : std::string("-");
}

// Who may submit to a queue, as its users and groups say.
std::string QueueAdmits(const xl::v1::QueueSpec& s) {
  const auto star = [](const auto& list) {
    return std::find(list.begin(), list.end(), "*") != list.end();
  };
  if ((s.users().empty() && s.groups().empty()) || star(s.users()) ||
      star(s.groups())) {
    return "everyone";
  }
  std::vector<std::string> parts;
  if (!s.users().empty()) {
    parts.push_back(absl::StrCat("users ", absl::StrJoin(s.users(), ", ")));
  }
  if (!s.groups().empty()) {
    parts.push_back(absl::StrCat("groups ", absl::StrJoin(s.groups(), ", ")));
  }
  return absl::StrCat(absl::StrJoin(parts, "; "), " (and admins)");
}

}  // namespace

std::string QueueTable(const xl::v1::GetQueueResponse& queue) {
  TextTable table({"QUEUE", "PENDING", "RUNNING", "GPUS IN USE",
                   "GPUS REQUESTED (PENDING)"});
  int64_t pending = 0, running = 0, in_use = 0, requested = 0;
  for (const xl::v1::QueueSummary& q : queue.queues()) {
    table.AddRow({q.queue(), absl::StrCat(q.pending_jobs()),
                  absl::StrCat(q.running_jobs()), absl::StrCat(q.gpus_in_use()),
                  absl::StrCat(q.gpus_requested_pending())});
    pending += q.pending_jobs();
    running += q.running_jobs();
    in_use += q.gpus_in_use();
    requested += q.gpus_requested_pending();
  }
  table.AddRow({"TOTAL", absl::StrCat(pending), absl::StrCat(running),
                absl::StrCat(in_use), absl::StrCat(requested)});
  return absl::StrCat(
      table.Render(), "\n",
      absl::StrFormat("GPUs:   %d in use, %d free, %d in all\n",
                      queue.gpus_in_use(), queue.gpus_free(),
                      queue.total_gpus()),
      queue.gpus_fragmented() > 0
          ? absl::StrFormat("        %d of the free GPUs are on nodes where "
                            "no pending job fits (fragmentation)\n",
                            queue.gpus_fragmented())
          : std::string(),
      absl::StrFormat("Nodes:  %d ready, %d drained, %d lost\n",
                      queue.nodes_ready(), queue.nodes_drained(),
                      queue.nodes_lost()));
}

std::string QueueListTable(const xl::v1::ListQueuesResponse& queues) {
  TextTable table({"QUEUE", "WEIGHT", "COHORT", "GPUS (IN USE/NOMINAL)",
                   "BORROWED", "PENDING", "RUNNING", "TIME LIMIT", "PER USER"});
  for (const xl::v1::Queue& q : queues.queues()) {
    const xl::v1::QueueSpec& s = q.spec();
    std::vector<std::string> gpus;
    if (s.quotas_size() == 0) {
      int64_t n = 0;
      for (const auto& [model, used] : q.gpus_in_use()) n += used;
      gpus.push_back(absl::StrCat(n, "/no quota"));
    }
    for (const xl::v1::GpuQuota& quota : s.quotas()) {
      auto used = q.gpus_in_use().find(quota.gpu_model());
      gpus.push_back(
          absl::StrCat(quota.gpu_model(), " ",
                       used == q.gpus_in_use().end() ? 0 : used->second, "/",
                       quota.nominal_gpus()));
    }
    std::vector<std::string> per_user;
    if (s.max_running_gpus_per_user() > 0) {
      per_user.push_back(absl::StrCat(s.max_running_gpus_per_user(), " GPUs"));
    }
    if (s.max_pending_jobs_per_user() > 0) {
      per_user.push_back(
          absl::StrCat(s.max_pending_jobs_per_user(), " pending"));
    }
    table.AddRow({s.name() + (q.defined() ? "" : " (implicit)"),
                  absl::StrFormat("%g", s.weight()), OrDash(s.cohort()),
                  absl::StrJoin(gpus, ", "), absl::StrCat(q.gpus_borrowed()),
                  absl::StrCat(q.pending_jobs()),
                  absl::StrCat(q.running_jobs()),
                  absl::StrCat(LimitText(s.default_time_limit()), "/",
                               LimitText(s.max_time_limit())),
                  per_user.empty() ? "-" : absl::StrJoin(per_user, ", ")});
  }
  return table.Render();
}

std::string QueueDetails(const xl::v1::Queue& q, const RenderContext& context) {
  const xl::v1::QueueSpec& s = q.spec();
  KeyValueBlock block;
  block.Add("Queue", s.name());
  block.Add("Version",
            q.defined()
                ? absl::StrCat(q.version(), ", changed ",
                               TimeWithAge(q.update_time(), context), " by ",
                               q.updated_by())
                : "not defined: the implicit default queue (weight 1, no "
                  "quota)");
  block.Add("Weight", absl::StrFormat("%g", s.weight()));
  block.Add("Cohort", OrDash(s.cohort()));
  if (s.quotas_size() == 0) block.Add("Quotas", "none: any GPU");
  for (const xl::v1::GpuQuota& quota : s.quotas()) {
    auto used = q.gpus_in_use().find(quota.gpu_model());
    block.Add(
        "Quota",
        absl::StrCat(
            quota.gpu_model(), ": ",
            used == q.gpus_in_use().end() ? 0 : used->second,
            " in use of nominal ", quota.nominal_gpus(), "; borrows ",
            quota.has_borrowing_limit_gpus()
                ? absl::StrCat("up to ", quota.borrowing_limit_gpus().value())
                : std::string(s.cohort().empty() ? "none (no cohort)"
                                                 : "without limit"),
            "; lends ",
            quota.has_lending_limit_gpus()
                ? absl::StrCat("up to ", quota.lending_limit_gpus().value())
                : std::string("all it does not use")));
  }
  block.Add("Borrowed now", absl::StrCat(q.gpus_borrowed(), " GPUs"));
  block.Add("Time limit",
            absl::StrCat("default ", LimitText(s.default_time_limit()),
                         ", max ", LimitText(s.max_time_limit())));
  if (!s.default_checkpoint_dir().empty()) {
    block.Add("Checkpoints", absl::StrCat(s.default_checkpoint_dir(),
                                          " (jobs that name none)"));
  }
  block.Add(
      "Per user",
      absl::StrCat(
          s.max_running_gpus_per_user() > 0
              ? absl::StrCat(s.max_running_gpus_per_user(), " running GPUs")
              : std::string("no GPU limit"),
          ", ",
          s.max_pending_jobs_per_user() > 0
              ? absl::StrCat(s.max_pending_jobs_per_user(), " pending jobs")
              : std::string("no pending limit")));
  block.Add("Processes", s.max_processes_per_node() > 0
                             ? absl::StrCat(s.max_processes_per_node(),
                                            " per job on each node")
                             : std::string("the node's default per job"));
  block.Add("Admits", QueueAdmits(s));
  block.Add("Max priority", s.has_max_priority()
                                ? absl::StrCat(s.max_priority().value(),
                                               " (for users; admins any)")
                                : std::string("0 (the default; admins any)"));
  block.Add("Preemption",
            absl::StrCat(
                "its jobs run at least ",
                LimitText(s.min_runtime()) == "-" ? std::string("0s")
                                                  : LimitText(s.min_runtime()),
                " before they may be preempted; preemptible: false ",
                s.allow_non_preemptible() ? "allowed" : "refused",
                s.reclaim_lent_quota() ? "; takes lent quota back by preemption"
                                       : "; waits for borrowers to end"));
  block.Add("Jobs", absl::StrCat(q.pending_jobs(), " pending, ",
                                 q.running_jobs(), " running"));
  return block.Render();
}

std::string QueueChangesTable(const xl::v1::ListQueueChangesResponse& changes,
                              const RenderContext& context) {
  TextTable table({"SEQ", "TIME", "QUEUE", "ACTION", "VERSION", "BY", "SPEC"});
  for (const xl::v1::QueueChange& c : changes.changes()) {
    std::vector<std::string> quotas;
    for (const auto& q : c.spec().quotas()) quotas.push_back(QuotaText(q));
    table.AddRow(
        {absl::StrCat(c.seq()), FormatTimestamp(c.time(), context), c.queue(),
         c.action(), absl::StrCat(c.version()), c.by(),
         absl::StrCat(
             "weight ", absl::StrFormat("%g", c.spec().weight()),
             c.spec().cohort().empty()
                 ? ""
                 : absl::StrCat(", cohort ", c.spec().cohort()),
             quotas.empty()
                 ? ""
                 : absl::StrCat(", quotas ", absl::StrJoin(quotas, "; ")))});
  }
  return table.Render();
}

std::string ShareTable(const xl::v1::GetSharesResponse& shares) {
  TextTable table({"QUEUE", "USER", "WEIGHT", "SHARE", "GPU-HOURS", "USAGE",
                   "FAIR-SHARE", "RUNNING GPUS", "PENDING"});
  for (const xl::v1::ShareRow& r : shares.rows()) {
    table.AddRow({r.user().empty() ? r.queue() : "", OrDash(r.user()),
                  r.user().empty() ? absl::StrFormat("%g", r.weight()) : "",
                  absl::StrFormat("%.3f", r.share()),
                  absl::StrFormat("%.2f", r.gpu_hours()),
                  absl::StrFormat("%.3f", r.usage()),
                  absl::StrFormat("%.3f", r.fair_share_factor()),
                  absl::StrCat(r.running_gpus()),
                  absl::StrCat(r.pending_jobs())});
  }
  return absl::StrCat(
      table.Render(), "\n",
      absl::StrFormat(
          "Usage halves every %s. Effective priority = priority + %g x "
          "fair share + %g x age (age reaches 1 after %s pending). Fair "
          "share = 2^-(usage/share): 1 unused, 0.5 at its share.\n",
          HumanDuration(FromProto(shares.half_life())),
          shares.fair_share_weight(), shares.age_weight(),
          HumanDuration(FromProto(shares.max_age()))));
}

}  // namespace xl::client
