// The renderers of jobs: `xlctl list`, `get` (with its Training: section),
// `explain`, `submit --dry-run` and `watch`.
#include <cstdint>
#include <map>
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

using google::protobuf::RepeatedField;
using google::protobuf::RepeatedPtrField;

// REASON is the last column of `xlctl list`; longer reasons end in "...".
constexpr size_t kListReasonWidth = 48;

// Ranks on a node are usually consecutive: print "0-3" rather than "0,1,2,3".
std::string RankRange(const RepeatedField<int32_t>& ranks) {
  if (ranks.size() > 2) {
    bool consecutive = true;
    for (int i = 1; i < ranks.size(); ++i) {
      if (ranks[i] != ranks[i - 1] + 1) consecutive = false;
    }
    if (consecutive)
      return absl::StrCat(ranks[0], "-", ranks[ranks.size() - 1]);
  }
  return JoinInts(ranks);
}

// The "Training:" section of `xlctl get`, keys indented under the heading.
std::string TrainingSection(const xl::v1::Job& job,
                            const RenderContext& context) {
  const xl::v1::TrainMetrics& m = job.metrics();
  KeyValueBlock block;
  std::string step = StepOfTotal(m);
  if (m.total_steps() > 0) {
    absl::StrAppend(&step, " (", m.step() * 100 / m.total_steps(), "%)");
  }
  if (m.resumed_from_step() > 0) {
    absl::StrAppend(&step, ", resumed from step ", m.resumed_from_step());
  }
  block.Add("  Step", step);
  block.Add("  Loss", Loss(m.loss()));
  block.Add("  Samples/s", SamplesPerSecond(m.samples_per_second()));
  block.Add("  Step time",
            absl::StrCat(Milliseconds(m.step_seconds()), " ms (compute ",
                         Milliseconds(m.compute_seconds()), " ms, all-reduce ",
                         Milliseconds(m.allreduce_seconds()), " ms, data wait ",
                         Milliseconds(m.data_wait_seconds()), " ms)"));
  block.Add("  All-reduce bus",
            m.allreduce_bus_gbps() > 0
                ? absl::StrCat(BusGbps(m.allreduce_bus_gbps()), " Gbit/s")
                : "- (one rank)");
  block.Add("  Peak memory", xl::HumanBytes(m.peak_memory_bytes()));
  std::string updated = TimeWithAge(m.time(), context);
  // Metrics of an earlier attempt stay until the new one reports.
  if (m.attempt() > 0 && m.attempt() != job.attempt()) {
    absl::StrAppend(&updated, ", from attempt ", m.attempt());
  }
  block.Add("  Updated", updated);
  return absl::StrCat("Training:\n", block.Render());
}

// The lines of `get` about what the job is and runs: ID to Env.
void AddSpecLines(const xl::v1::Job& job, KeyValueBlock* block) {
  const xl::v1::JobSpec& spec = job.spec();
  block->Add("ID", job.id());
  block->Add("Name", spec.name());
  block->Add("User", job.user());
  block->Add("Queue", spec.queue());
  block->Add("Priority", absl::StrCat(spec.priority()));
  if (!spec.after_ok().empty()) {
    block->Add("After OK", absl::StrJoin(spec.after_ok(), ", "));
  }
  block->Add("State", JobStateName(job.state()));
  block->Add("Attempt",
             absl::StrCat(
                 job.attempt(), " (max retries ", spec.max_retries(),
                 job.preemptions() > 0
                     ? absl::StrCat("; preempted ", job.preemptions(),
                                    job.preemptions() == 1 ? " time" : " times")
                     : std::string(),
                 ")"));
  if (spec.has_preemptible() && !spec.preemptible().value()) {
    block->Add("Preemptible", "no");
  }
  if (spec.has_train()) {
    // The command is xl-train with the spec as JSON: show the spec instead.
    block->Add("Train", TrainSpecSummary(spec.train()));
  } else {
    block->Add("Command", ShellJoin(spec.command()));
  }
  if (!spec.working_dir().empty())
    block->Add("Working dir", spec.working_dir());
  if (!spec.checkpoint_dir().empty()) {
    block->Add("Checkpoints", spec.checkpoint_dir());
  }
  std::map<std::string, std::string> env(spec.env().begin(), spec.env().end());
  block->Add("Env", absl::StrJoin(env, " ", absl::PairFormatter("=")));
}

// The lines of `get` about the job's nodes and what it asks of each.
void AddResourceLines(const xl::v1::Job& job, KeyValueBlock* block) {
  const xl::v1::ResourceRequest& r = job.spec().resources();
  if (r.min_nodes() > 0 && r.min_nodes() < r.nodes()) {
    block->Add(
        "Nodes",
        absl::StrCat(r.min_nodes(), "-", r.nodes(), " (elastic",
                     job.allocations_size() > 0
                         ? absl::StrCat(", running on ", job.allocations_size())
                         : std::string(),
                     job.resizes() > 0
                         ? absl::StrCat(", grown ", job.resizes(),
                                        job.resizes() == 1 ? " time" : " times")
                         : std::string(),
                     ")"));
  } else {
    block->Add("Nodes", absl::StrCat(r.nodes()));
  }
  block->Add("Ranks per node", absl::StrCat(RanksPerNode(r)));
  block->Add("GPUs per node", absl::StrCat(r.gpus_per_node()));
  if (r.min_gpu_memory_bytes() > 0) {
    block->Add("Min GPU memory", xl::HumanBytes(r.min_gpu_memory_bytes()));
  }
  if (!r.gpu_models().empty()) {
    block->Add("GPU models", absl::StrJoin(r.gpu_models(), ", "));
  }
  if (r.nvme_bytes_per_node() > 0) {
    block->Add("NVMe per node", xl::HumanBytes(r.nvme_bytes_per_node()));
  }
  if (r.nic_gbps_per_node() > 0) {
    block->Add("NIC per node", Gbps(r.nic_gbps_per_node()) + " Gbit/s");
  }
  if (r.cpus_per_node() > 0) {
    block->Add("CPUs per node", absl::StrCat(r.cpus_per_node()));
  }
  if (r.memory_bytes_per_node() > 0) {
    block->Add("Memory per node", xl::HumanBytes(r.memory_bytes_per_node()));
  }
  if (job.world_size() > 0)
    block->Add("World size", absl::StrCat(job.world_size()));
  if (!job.master_addr().empty()) {
    // The port is shown to the job's owner and admins only.
    block->Add("Master",
               job.master_port() > 0
                   ? absl::StrCat(job.master_addr(), ":", job.master_port())
                   : job.master_addr());
  }
}

// The lines of `get` about when the job runs and how it ended.
void AddTimeLines(const xl::v1::Job& job, const RenderContext& context,
                  KeyValueBlock* block) {
  const xl::v1::JobSpec& spec = job.spec();
  block->Add("Time limit",
             spec.has_time_limit()
                 ? xl::HumanDuration(xl::FromProto(spec.time_limit()))
                 : "none");
  block->Add("Created", TimeWithAge(job.create_time(), context));
  if (job.has_estimated_start_time()) {
    block->Add("Estimated start",
               TimeWithAge(job.estimated_start_time(), context));
  }
  block->Add("Started", TimeWithAge(job.start_time(), context));
  block->Add("Ended", TimeWithAge(job.end_time(), context));
  if (job.state() == xl::v1::FAILED || job.exit_code() != 0) {
    block->Add("Exit code", absl::StrCat(job.exit_code()));
  }
  block->Add("Reason", job.reason());
}

// The Allocations: section of `get`: where the job's ranks run.
std::string AllocationsSection(const xl::v1::Job& job) {
  if (job.allocations().empty()) return "Allocations:  -\n";
  std::string out = "Allocations:\n";
  TextTable table({"  NODE", "GROUP RANK", "GPUS", "RANKS", "ADDRESS", "CPUS",
                   "MEMORY", "NVME", "NIC GBIT/S"});
  for (const xl::v1::Allocation& a : job.allocations()) {
    table.AddRow({absl::StrCat("  ", a.node()), absl::StrCat(a.group_rank()),
                  JoinInts(a.gpu_indices()), RankRange(a.ranks()),
                  OrDash(a.address()), absl::StrCat(a.cpus()),
                  xl::HumanBytes(a.memory_bytes()),
                  xl::HumanBytes(a.nvme_bytes()), Gbps(a.nic_gbps())});
  }
  absl::StrAppend(&out, table.Render());
  return out;
}

}  // namespace

std::string JobTable(const RepeatedPtrField<xl::v1::Job>& jobs,
                     const RenderContext& context) {
  TextTable table({"ID", "NAME", "USER", "QUEUE", "STATE", "NODES", "GPUS",
                   "ATTEMPT", "AGE", "REASON"});
  for (const xl::v1::Job& job : jobs) {
    const auto& r = job.spec().resources();
    std::string age =
        IsSet(job.create_time())
            ? FormatAge(context.now - xl::FromProto(job.create_time()))
            : "-";
    table.AddRow(
        {job.id(), OrDash(job.spec().name()), OrDash(job.user()),
         OrDash(job.spec().queue()), JobStateName(job.state()),
         absl::StrCat(r.nodes()),
         absl::StrCat(static_cast<int64_t>(r.nodes()) * r.gpus_per_node()),
         absl::StrCat(job.attempt()), age,
         Truncate(job.reason(), kListReasonWidth)});
  }
  return table.Render();
}

std::string JobDetails(const xl::v1::Job& job, const RenderContext& context) {
  KeyValueBlock block;
  AddSpecLines(job, &block);
  AddResourceLines(job, &block);
  AddTimeLines(job, context, &block);
  std::string out = block.Render();
  if (job.has_metrics()) absl::StrAppend(&out, TrainingSection(job, context));
  absl::StrAppend(&out, AllocationsSection(job));
  return out;
}

std::string ExplainText(const xl::v1::ExplainJobResponse& e,
                        const RenderContext& context) {
  const xl::v1::Job& job = e.job();
  std::string out = absl::StrCat(
      "Job ", Printable(job.id()), " (", Printable(job.user()), ", queue ",
      Printable(job.spec().queue()), ") is ", JobStateName(job.state()));
  if (e.position() > 0) {
    absl::StrAppend(&out, ": number ", e.position(), " of ", e.pending(),
                    " pending jobs in the queue");
  }
  absl::StrAppend(&out, "\n");
  KeyValueBlock block;
  block.Add("Why", job.reason());
  if (job.state() == xl::v1::PENDING && e.position() == 0) {
    block.Add("Estimated start",
              "none: it is not in the queue yet (see Why: it waits for a "
              "job it depends on, or for its retry's back-off)");
  } else if (job.state() == xl::v1::PENDING) {
    block.Add("Estimated start",
              job.has_estimated_start_time()
                  ? TimeWithAge(job.estimated_start_time(), context)
                  : "no estimate: it holds no reservation (only the first "
                    "blocked jobs get one; give running jobs time limits)");
    block.Add("Ahead of it", absl::StrCat(e.position() - 1, " jobs asking for ",
                                          e.gpus_ahead(), " GPUs"));
  }
  const xl::v1::PriorityBreakdown& p = e.priority();
  block.Add("Priority",
            absl::StrFormat("%.2f effective = %d priority + %.3f fair share "
                            "x %g + %.3f age x %g (submit order %d)",
                            p.effective(), p.priority(), p.fair_share_factor(),
                            p.fair_share_weight(), p.age_factor(),
                            p.age_weight(), p.submit_order()));
  if (!p.note().empty()) block.Add("Rank", p.note());
  absl::StrAppend(&out, block.Render());
  if (e.ahead_size() > 0) {
    TextTable table({"  AHEAD", "USER", "QUEUE", "PRIORITY", "EFFECTIVE",
                     "NODES", "GPUS", "RESERVED FOR"});
    for (const xl::v1::QueuedJob& q : e.ahead()) {
      table.AddRow(
          {absl::StrCat("  ", q.job_id()), OrDash(q.user()), OrDash(q.queue()),
           absl::StrCat(q.priority()),
           absl::StrFormat("%.2f", q.effective_priority()),
           absl::StrCat(q.nodes()),
           absl::StrCat(static_cast<int64_t>(q.nodes()) * q.gpus_per_node()),
           q.has_estimated_start_time()
               ? TimeWithAge(q.estimated_start_time(), context)
               : "-"});
    }
    absl::StrAppend(&out, table.Render());
  }
  return out;
}

std::string DryRunText(const xl::v1::DryRun& d, const RenderContext& context) {
  std::string out = absl::StrCat(
      "Dry run: nothing was submitted. The job (queue ",
      Printable(d.spec().queue()), ", priority ", d.spec().priority(),
      ", effective ", absl::StrFormat("%.2f", d.effective_priority()),
      ") would be number ", d.position(), " of ", d.pending(),
      " in the queue and ");
  if (d.starts_now()) {
    absl::StrAppend(&out, "start now on:\n");
    TextTable table({"  GROUP RANK", "NODE", "GPUS", "RANKS"});
    for (const xl::v1::Allocation& a : d.allocations()) {
      std::string ranks =
          a.ranks_size() == 0 ? std::string("-")
          : a.ranks_size() == 1
              ? absl::StrCat(a.ranks(0))
              : absl::StrCat(a.ranks(0), "-", a.ranks(a.ranks_size() - 1));
      table.AddRow({absl::StrCat("  ", a.group_rank()), a.node(),
                    a.gpu_indices_size() == 0
                        ? std::string("-")
                        : absl::StrJoin(a.gpu_indices(), ","),
                    ranks});
    }
    absl::StrAppend(&out, table.Render());
    return out;
  }
  absl::StrAppend(&out, "wait.\n");
  KeyValueBlock block;
  block.Add("Why", d.reason());
  block.Add("Estimated start",
            d.has_estimated_start_time()
                ? TimeWithAge(d.estimated_start_time(), context)
                : "no estimate: it would hold no reservation (only the "
                  "first blocked jobs get one; give jobs time limits)");
  if (d.would_preempt_size() > 0) {
    block.Add("Would preempt", absl::StrJoin(d.would_preempt(), ", "));
  }
  absl::StrAppend(&out, block.Render());
  return out;
}

std::string EventLine(const xl::v1::JobEvent& event,
                      const RenderContext& context) {
  // An event that changes no state (a new priority, dropped output) shows
  // the state once.
  const std::string states =
      event.from_state() == event.to_state()
          ? JobStateName(event.to_state())
          : absl::StrCat(JobStateName(event.from_state()), " -> ",
                         JobStateName(event.to_state()));
  std::string line = absl::StrCat(FormatTimestamp(event.time(), context), "  ",
                                  states, "  attempt ", event.attempt());
  if (!event.reason().empty()) {
    absl::StrAppend(&line, "  ", Printable(event.reason()));
  }
  return line + "\n";
}

}  // namespace xl::client
