#include "client/output.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/exit_code.h"
#include "common/duration.h"
#include "common/proto_text.h"

namespace xl::client {
namespace {

using google::protobuf::RepeatedField;
using google::protobuf::RepeatedPtrField;

// REASON is the last column of `xlctl list`; longer reasons end in "...".
constexpr size_t kListReasonWidth = 48;
constexpr size_t kListJobsWidth = 32;

// Columns separated by two spaces, each as wide as its widest cell; the last
// column is not padded so lines carry no trailing blanks.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) {
    rows_.push_back(std::move(header));
  }
  void AddRow(std::vector<std::string> row) {
    for (std::string& cell : row) cell = Printable(cell);
    rows_.push_back(std::move(row));
  }

  std::string Render() const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (row.size() > width.size()) width.resize(row.size(), 0);
      for (size_t i = 0; i < row.size(); ++i) {
        width[i] = std::max(width[i], row[i].size());
      }
    }
    // Cells are escaped as they are added (AddRow), so widths count what is
    // printed.
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        if (i + 1 == row.size()) {
          absl::StrAppend(&line, row[i]);
        } else {
          absl::StrAppend(&line, row[i],
                          std::string(width[i] - row[i].size() + 2, ' '));
        }
      }
      absl::StripTrailingAsciiWhitespace(&line);
      absl::StrAppend(&out, line, "\n");
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "Key:  value" lines with the values aligned.
class KeyValueBlock {
 public:
  void Add(std::string key, const std::string& value) {
    lines_.emplace_back(std::move(key), Printable(value));
  }
  std::string Render() const {
    size_t width = 0;
    for (const auto& [key, value] : lines_) width = std::max(width, key.size());
    std::string out;
    for (const auto& [key, value] : lines_) {
      absl::StrAppend(&out, key, ":", std::string(width - key.size() + 2, ' '),
                      value.empty() ? "-" : value, "\n");
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> lines_;
};

std::string Truncate(const std::string& s, size_t width) {
  // A reason may span lines; a table row must not. Escaped first, so the
  // cut counts what is printed, and never inside a UTF-8 sequence.
  std::string one_line = s;
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  one_line = Printable(one_line);
  if (one_line.size() <= width) return one_line;
  size_t cut = width - 3;
  while (cut > 0 && (static_cast<uint8_t>(one_line[cut]) & 0xC0) == 0x80) --cut;
  return one_line.substr(0, cut) + "...";
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }


bool IsSet(const google::protobuf::Timestamp& t) {
  return t.seconds() != 0 || t.nanos() != 0;
}

template <typename T>
std::string JoinInts(const RepeatedField<T>& values) {
  return OrDash(absl::StrJoin(values, ","));
}

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

int32_t RanksPerNode(const xl::v1::ResourceRequest& r) {
  if (r.ranks_per_node() > 0) return r.ranks_per_node();
  return r.gpus_per_node() > 0 ? r.gpus_per_node() : 1;
}

std::string Gbps(double gbps) { return absl::StrFormat("%g", gbps); }

std::string Labels(
    const google::protobuf::Map<std::string, std::string>& labels) {
  std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  return OrDash(absl::StrJoin(sorted, ",", absl::PairFormatter("=")));
}

std::string TimeWithAge(const google::protobuf::Timestamp& t,
                        const RenderContext& context) {
  if (!IsSet(t)) return "-";
  const absl::Duration age = context.now - xl::FromProto(t);
  if (age < absl::ZeroDuration()) {
    return absl::StrCat(FormatTimestamp(t, context), " (in ", FormatAge(-age),
                        ")");
  }
  return absl::StrCat(FormatTimestamp(t, context), " (", FormatAge(age),
                      " ago)");
}

// The TrainSpec defaults job.proto documents; a field left 0 means these.
constexpr int32_t kDefaultInputDim = 256;
constexpr int32_t kDefaultHiddenDim = 1024;
constexpr int32_t kDefaultHiddenLayers = 2;
constexpr int32_t kDefaultClasses = 16;
constexpr int32_t kDefaultBatchPerRank = 64;
constexpr int32_t kDefaultSteps = 100;
constexpr double kDefaultLearningRate = 1e-3;

template <typename T>
T OrDefault(T value, T fallback) {
  return value != 0 ? value : fallback;
}

// Metrics in the units and precision xl-train's own log line uses.
std::string Milliseconds(double seconds) {
  return absl::StrFormat("%.2f", seconds * 1e3);
}

std::string Loss(double loss) {
  // A converged loss must not print as 0.0000.
  if (loss != 0 && std::fabs(loss) < 1e-3) {
    return absl::StrFormat("%.3e", loss);
  }
  return absl::StrFormat("%.4f", loss);
}

std::string SamplesPerSecond(double rate) {
  return absl::StrFormat("%.1f", rate);
}

// A one-rank job does no all-reduce, so it has no bus bandwidth.
std::string BusGbps(double gbps) {
  return gbps > 0 ? absl::StrFormat("%.2f", gbps) : "-";
}

std::string StepOfTotal(const xl::v1::TrainMetrics& m) {
  if (m.total_steps() <= 0) return absl::StrCat(m.step());
  return absl::StrCat(m.step(), "/", m.total_steps());
}

std::string PrecisionName(xl::v1::Precision precision) {
  switch (precision) {
    case xl::v1::FP32:
      return "fp32";
    case xl::v1::BF16:
      return "bf16";
    case xl::v1::FP16:
      return "fp16";
    default:
      return "auto";
  }
}

int32_t WorldSizeOf(const xl::v1::Job& job) {
  if (job.world_size() > 0) return job.world_size();
  const xl::v1::ResourceRequest& r = job.spec().resources();
  return std::max(r.nodes(), 1) * RanksPerNode(r);
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

}  // namespace

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text) {
  std::string lower = absl::AsciiStrToLower(text);
  if (lower == "table") return OutputFormat::kTable;
  if (lower == "json") return OutputFormat::kJson;
  if (lower == "yaml") return OutputFormat::kYaml;
  if (lower == "csv") return OutputFormat::kCsv;
  return UsageError(absl::StrCat("-o: unknown output format \"", text,
                                 "\"; use table, json, yaml or csv"));
}

std::string RenderMessage(const google::protobuf::Message& message,
                          OutputFormat format) {
  if (format == OutputFormat::kYaml) return xl::MessageToYaml(message);
  return xl::MessageToJson(message, /*pretty=*/true) + "\n";
}

std::string RenderStreamItem(const google::protobuf::Message& message,
                             OutputFormat format) {
  if (format == OutputFormat::kYaml) {
    return absl::StrCat("---\n", xl::MessageToYaml(message));
  }
  return xl::MessageToJson(message, /*pretty=*/false) + "\n";
}


std::string JobStateName(xl::v1::JobState state) {
  if (state == xl::v1::JOB_STATE_UNSPECIFIED) return "-";
  std::string name = xl::v1::JobState_Name(state);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

std::string NodeStateName(xl::v1::NodeState state) {
  if (state == xl::v1::NODE_STATE_UNSPECIFIED) return "-";
  std::string name = xl::v1::NodeState_Name(state);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

std::string FormatTimestamp(const google::protobuf::Timestamp& t,
                            const RenderContext& context) {
  if (!IsSet(t)) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", xl::FromProto(t), context.zone);
}

std::string FormatAge(absl::Duration age) {
  if (age < absl::ZeroDuration()) age = absl::ZeroDuration();
  int64_t s = absl::ToInt64Seconds(age);
  if (s < 120) return absl::StrCat(s, "s");
  if (s < int64_t{2} * 3600) return absl::StrCat(s / 60, "m");
  if (s < int64_t{48} * 3600) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string ShellJoin(const RepeatedPtrField<std::string>& argv) {
  std::vector<std::string> words;
  for (const std::string& arg : argv) {
    bool plain = !arg.empty() &&
                 arg.find_first_not_of(
                     "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_-./=:,+@%") == std::string::npos;
    if (plain) {
      words.push_back(arg);
    } else {
      std::string quoted = "'";
      for (char c : arg) {
        if (c == '\'') {
          quoted += "'\\''";
        } else {
          quoted += c;
        }
      }
      words.push_back(quoted + "'");
    }
  }
  return absl::StrJoin(words, " ");
}

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
  const xl::v1::JobSpec& spec = job.spec();
  const xl::v1::ResourceRequest& r = spec.resources();
  KeyValueBlock block;
  block.Add("ID", job.id());
  block.Add("Name", spec.name());
  block.Add("User", job.user());
  block.Add("Queue", spec.queue());
  block.Add("Priority", absl::StrCat(spec.priority()));
  if (!spec.after_ok().empty()) {
    block.Add("After OK", absl::StrJoin(spec.after_ok(), ", "));
  }
  block.Add("State", JobStateName(job.state()));
  block.Add("Attempt",
            absl::StrCat(job.attempt(), " (max retries ", spec.max_retries(),
                         job.preemptions() > 0
                             ? absl::StrCat("; preempted ", job.preemptions(),
                                            job.preemptions() == 1 ? " time"
                                                                   : " times")
                             : std::string(),
                         ")"));
  if (spec.has_preemptible() && !spec.preemptible().value()) {
    block.Add("Preemptible", "no");
  }
  if (spec.has_train()) {
    // The command is xl-train with the spec as JSON: show the spec instead.
    block.Add("Train", TrainSpecSummary(spec.train()));
  } else {
    block.Add("Command", ShellJoin(spec.command()));
  }
  if (!spec.working_dir().empty()) block.Add("Working dir", spec.working_dir());
  if (!spec.checkpoint_dir().empty()) {
    block.Add("Checkpoints", spec.checkpoint_dir());
  }
  std::map<std::string, std::string> env(spec.env().begin(), spec.env().end());
  block.Add("Env", absl::StrJoin(env, " ", absl::PairFormatter("=")));
  if (r.min_nodes() > 0 && r.min_nodes() < r.nodes()) {
    block.Add("Nodes",
              absl::StrCat(r.min_nodes(), "-", r.nodes(), " (elastic",
                           job.allocations_size() > 0
                               ? absl::StrCat(", running on ",
                                              job.allocations_size())
                               : std::string(),
                           job.resizes() > 0
                               ? absl::StrCat(", grown ", job.resizes(),
                                              job.resizes() == 1 ? " time"
                                                                 : " times")
                               : std::string(),
                           ")"));
  } else {
    block.Add("Nodes", absl::StrCat(r.nodes()));
  }
  block.Add("Ranks per node", absl::StrCat(RanksPerNode(r)));
  block.Add("GPUs per node", absl::StrCat(r.gpus_per_node()));
  if (r.min_gpu_memory_bytes() > 0) {
    block.Add("Min GPU memory", xl::HumanBytes(r.min_gpu_memory_bytes()));
  }
  if (!r.gpu_models().empty()) {
    block.Add("GPU models", absl::StrJoin(r.gpu_models(), ", "));
  }
  if (r.nvme_bytes_per_node() > 0) {
    block.Add("NVMe per node", xl::HumanBytes(r.nvme_bytes_per_node()));
  }
  if (r.nic_gbps_per_node() > 0) {
    block.Add("NIC per node", Gbps(r.nic_gbps_per_node()) + " Gbit/s");
  }
  if (r.cpus_per_node() > 0) {
    block.Add("CPUs per node", absl::StrCat(r.cpus_per_node()));
  }
  if (r.memory_bytes_per_node() > 0) {
    block.Add("Memory per node", xl::HumanBytes(r.memory_bytes_per_node()));
  }
  if (job.world_size() > 0)
    block.Add("World size", absl::StrCat(job.world_size()));
  if (!job.master_addr().empty()) {
    // The port is shown to the job's owner and admins only.
    block.Add("Master", job.master_port() > 0
                            ? absl::StrCat(job.master_addr(), ":",
                                           job.master_port())
                            : job.master_addr());
  }
  block.Add("Time limit",
            spec.has_time_limit()
                ? xl::HumanDuration(xl::FromProto(spec.time_limit()))
                : "none");
  block.Add("Created", TimeWithAge(job.create_time(), context));
  if (job.has_estimated_start_time()) {
    block.Add("Estimated start", TimeWithAge(job.estimated_start_time(), context));
  }
  block.Add("Started", TimeWithAge(job.start_time(), context));
  block.Add("Ended", TimeWithAge(job.end_time(), context));
  if (job.state() == xl::v1::FAILED || job.exit_code() != 0) {
    block.Add("Exit code", absl::StrCat(job.exit_code()));
  }
  block.Add("Reason", job.reason());
  std::string out = block.Render();
  if (job.has_metrics()) absl::StrAppend(&out, TrainingSection(job, context));
  if (job.allocations().empty()) {
    absl::StrAppend(&out, "Allocations:  -\n");
    return out;
  }
  absl::StrAppend(&out, "Allocations:\n");
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

std::string TrainSpecSummary(const xl::v1::TrainSpec& t) {
  std::string text = absl::StrFormat(
      "MLP %d->%dx%d->%d, batch %d/rank, %d steps, lr %g, precision %s, "
      "device %s",
      OrDefault(t.input_dim(), kDefaultInputDim),
      OrDefault(t.hidden_dim(), kDefaultHiddenDim),
      OrDefault(t.hidden_layers(), kDefaultHiddenLayers),
      OrDefault(t.classes(), kDefaultClasses),
      OrDefault(t.batch_per_rank(), kDefaultBatchPerRank),
      OrDefault(t.steps(), kDefaultSteps),
      OrDefault(t.learning_rate(), kDefaultLearningRate),
      PrecisionName(t.precision()), t.device().empty() ? "auto" : t.device());
  if (t.checkpoint_every() > 0) {
    absl::StrAppend(&text, ", checkpoint every ", t.checkpoint_every(),
                    " steps");
  } else {
    absl::StrAppend(&text, ", checkpoint on stop only");
  }
  if (!t.data().shards().empty()) {
    absl::StrAppend(&text, ", data ", t.data().shards());
  }
  return text;
}

std::string TopTable(const RepeatedPtrField<xl::v1::Job>& jobs,
                     const RenderContext& context) {
  TextTable table({"ID", "NAME", "USER", "STATE", "NODES", "RANKS", "STEP",
                   "LOSS", "SAMPLES/S", "STEP MS", "ALLREDUCE MS", "BUS GBIT/S",
                   "MEM", "AGE"});
  for (const xl::v1::Job& job : jobs) {
    std::vector<std::string> row = {
        job.id(),
        OrDash(job.spec().name()),
        OrDash(job.user()),
        JobStateName(job.state()),
        absl::StrCat(job.spec().resources().nodes()),
        absl::StrCat(WorldSizeOf(job))};
    if (job.has_metrics()) {
      const xl::v1::TrainMetrics& m = job.metrics();
      for (std::string cell :
           {StepOfTotal(m), Loss(m.loss()),
            SamplesPerSecond(m.samples_per_second()),
            Milliseconds(m.step_seconds()), Milliseconds(m.allreduce_seconds()),
            BusGbps(m.allreduce_bus_gbps()),
            xl::HumanBytes(m.peak_memory_bytes())}) {
        row.push_back(std::move(cell));
      }
    } else {
      row.insert(row.end(), 7, "-");
    }
    row.push_back(
        IsSet(job.create_time())
            ? FormatAge(context.now - xl::FromProto(job.create_time()))
            : "-");
    table.AddRow(std::move(row));
  }
  return table.Render();
}

std::string MetricsTable(const RepeatedPtrField<xl::v1::TrainMetrics>& points,
                         const RenderContext& context) {
  TextTable table({"TIME", "ATTEMPT", "STEP", "LOSS", "SAMPLES/S", "STEP MS",
                   "ALLREDUCE MS", "DATA WAIT MS", "BUS GBIT/S", "MEM"});
  for (const xl::v1::TrainMetrics& m : points) {
    table.AddRow(
        {FormatTimestamp(m.time(), context), absl::StrCat(m.attempt()),
         StepOfTotal(m), Loss(m.loss()),
         SamplesPerSecond(m.samples_per_second()),
         Milliseconds(m.step_seconds()), Milliseconds(m.allreduce_seconds()),
         Milliseconds(m.data_wait_seconds()), BusGbps(m.allreduce_bus_gbps()),
         xl::HumanBytes(m.peak_memory_bytes())});
  }
  return table.Render();
}

std::string MetricsCsv(
    const RepeatedPtrField<xl::v1::TrainMetrics>& points) {
  std::string out =
      "time,attempt,rank,step,total_steps,loss,samples_per_second,"
      "step_seconds,compute_seconds,allreduce_seconds,data_wait_seconds,"
      "allreduce_bus_gbps,mfu,peak_memory_bytes,batch_per_rank,"
      "accumulation_steps,global_batch,precision,peak_tflops\n";
  for (const xl::v1::TrainMetrics& m : points) {
    // RFC 3339 in UTC, and every number in full: the file is for tools.
    const std::string time =
        m.has_time() ? absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ",
                                        xl::FromProto(m.time()),
                                        absl::UTCTimeZone())
                     : "";
    absl::StrAppend(
        &out, time, ",", m.attempt(), ",", m.rank(), ",", m.step(), ",",
        m.total_steps(), ",",
        absl::StrFormat("%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g", m.loss(),
                        m.samples_per_second(), m.step_seconds(),
                        m.compute_seconds(), m.allreduce_seconds(),
                        m.data_wait_seconds(), m.allreduce_bus_gbps(),
                        m.mfu()),
        ",", m.peak_memory_bytes(), ",", m.batch_per_rank(), ",",
        m.accumulation_steps(), ",", m.global_batch(), ",",
        m.precision() == xl::v1::PRECISION_UNSPECIFIED
            ? ""
            : xl::v1::Precision_Name(m.precision()),
        ",", absl::StrFormat("%.17g", m.peak_tflops()), "\n");
  }
  return out;
}

namespace {

std::string GpuModels(const xl::v1::NodeInventory& inv) {
  std::vector<std::string> models;
  for (const xl::v1::Gpu& gpu : inv.gpus()) {
    if (std::find(models.begin(), models.end(), gpu.model()) == models.end()) {
      models.push_back(gpu.model());
    }
  }
  return OrDash(absl::StrJoin(models, ","));
}

uint64_t NvmeFree(const xl::v1::NodeInventory& inv) {
  uint64_t free = 0;
  for (const xl::v1::Nvme& nvme : inv.nvme()) free += nvme.free_bytes();
  return free;
}

std::string FastestNic(const xl::v1::NodeInventory& inv) {
  double best = 0;
  for (const xl::v1::Nic& nic : inv.nics()) best = std::max(best, nic.gbps());
  return inv.nics().empty() ? "-" : Gbps(best);
}

}  // namespace

std::string NodeTable(const RepeatedPtrField<xl::v1::Node>& nodes) {
  TextTable table({"NAME", "STATE", "GPUS", "GPU MODEL", "CPUS", "MEMORY",
                   "NVME FREE", "NIC GBIT/S", "LABELS", "JOBS"});
  for (const xl::v1::Node& node : nodes) {
    const xl::v1::NodeInventory& inv = node.inventory();
    const xl::v1::NodeUsage& use = node.usage();
    table.AddRow(
        {node.name(), NodeStateName(node.state()),
         absl::StrCat(use.gpus_in_use_size(), "/", inv.gpus_size()),
         GpuModels(inv), absl::StrCat(use.cpus_in_use(), "/", inv.cpus()),
         absl::StrCat(xl::HumanBytes(use.memory_bytes_in_use()), "/",
                      xl::HumanBytes(inv.memory_bytes())),
         inv.nvme().empty() ? "-" : xl::HumanBytes(NvmeFree(inv)),
         FastestNic(inv), Labels(inv.labels()),
         Truncate(OrDash(absl::StrJoin(use.job_ids(), ",")), kListJobsWidth)});
  }
  return table.Render();
}

std::string NodeDetails(const xl::v1::Node& node,
                        const RenderContext& context) {
  const xl::v1::NodeInventory& inv = node.inventory();
  const xl::v1::NodeUsage& use = node.usage();
  KeyValueBlock block;
  block.Add("Name", node.name());
  block.Add("State", NodeStateName(node.state()));
  block.Add("State reason", node.state_reason());
  block.Add("Hostname", inv.hostname());
  block.Add("Address", inv.address());
  block.Add("Labels", Labels(inv.labels()));
  block.Add("Agent version", node.agent_version());
  block.Add("Registered", TimeWithAge(node.register_time(), context));
  block.Add("Last heartbeat", TimeWithAge(node.last_heartbeat_time(), context));
  std::string gpus =
      absl::StrCat(use.gpus_in_use_size(), " of ", inv.gpus_size());
  if (!use.gpus_in_use().empty()) {
    absl::StrAppend(&gpus, " (", JoinInts(use.gpus_in_use()), ")");
  }
  block.Add("GPUs in use", gpus);
  block.Add("CPUs in use", absl::StrCat(use.cpus_in_use(), " of ", inv.cpus()));
  block.Add("Memory in use",
            absl::StrCat(xl::HumanBytes(use.memory_bytes_in_use()), " of ",
                         xl::HumanBytes(inv.memory_bytes())));
  block.Add("NVMe reserved", xl::HumanBytes(use.nvme_bytes_in_use()));
  block.Add("NIC reserved", Gbps(use.nic_gbps_in_use()) + " Gbit/s");
  block.Add("Jobs", absl::StrJoin(use.job_ids(), ", "));
  std::string out = block.Render();
  if (!inv.gpus().empty()) {
    absl::StrAppend(&out, "GPUs:\n");
    TextTable table({"  INDEX", "MODEL", "MEMORY", "CC", "IN USE", "UUID"});
    for (const xl::v1::Gpu& gpu : inv.gpus()) {
      bool in_use =
          std::find(use.gpus_in_use().begin(), use.gpus_in_use().end(),
                    gpu.index()) != use.gpus_in_use().end();
      table.AddRow({absl::StrCat("  ", gpu.index()), OrDash(gpu.model()),
                    xl::HumanBytes(gpu.memory_bytes()),
                    OrDash(gpu.compute_capability()), in_use ? "yes" : "no",
                    OrDash(gpu.uuid())});
    }
    absl::StrAppend(&out, table.Render());
  }
  if (!inv.nvme().empty()) {
    absl::StrAppend(&out, "NVMe:\n");
    TextTable table({"  DEVICE", "PATH", "CAPACITY", "FREE"});
    for (const xl::v1::Nvme& nvme : inv.nvme()) {
      table.AddRow({absl::StrCat("  ", OrDash(nvme.device())),
                    OrDash(nvme.path()), xl::HumanBytes(nvme.capacity_bytes()),
                    xl::HumanBytes(nvme.free_bytes())});
    }
    absl::StrAppend(&out, table.Render());
  }
  if (!inv.nics().empty()) {
    absl::StrAppend(&out, "NICs:\n");
    TextTable table({"  NAME", "KIND", "GBIT/S"});
    for (const xl::v1::Nic& nic : inv.nics()) {
      std::string kind = nic.kind() == xl::v1::NIC_KIND_UNSPECIFIED
                             ? "-"
                             : xl::v1::NicKind_Name(nic.kind());
      table.AddRow({absl::StrCat("  ", nic.name()), kind, Gbps(nic.gbps())});
    }
    absl::StrAppend(&out, table.Render());
  }
  return out;
}

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

}  // namespace

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
          a.ranks_size() == 0
              ? std::string("-")
              : a.ranks_size() == 1
                    ? absl::StrCat(a.ranks(0))
                    : absl::StrCat(a.ranks(0), "-",
                                   a.ranks(a.ranks_size() - 1));
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

std::string QueueListTable(const xl::v1::ListQueuesResponse& queues) {
  TextTable table({"QUEUE", "WEIGHT", "COHORT", "GPUS (IN USE/NOMINAL)",
                   "BORROWED", "PENDING", "RUNNING", "TIME LIMIT",
                   "PER USER"});
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
      gpus.push_back(absl::StrCat(
          quota.gpu_model(), " ",
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
                  absl::StrCat(q.pending_jobs()), absl::StrCat(q.running_jobs()),
                  absl::StrCat(LimitText(s.default_time_limit()), "/",
                               LimitText(s.max_time_limit())),
                  per_user.empty() ? "-" : absl::StrJoin(per_user, ", ")});
  }
  return table.Render();
}

namespace {

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

std::string QueueDetails(const xl::v1::Queue& q,
                         const RenderContext& context) {
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
    block.Add("Quota",
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
  block.Add("Per user",
            absl::StrCat(s.max_running_gpus_per_user() > 0
                             ? absl::StrCat(s.max_running_gpus_per_user(),
                                            " running GPUs")
                             : std::string("no GPU limit"),
                         ", ",
                         s.max_pending_jobs_per_user() > 0
                             ? absl::StrCat(s.max_pending_jobs_per_user(),
                                            " pending jobs")
                             : std::string("no pending limit")));
  block.Add("Processes",
            s.max_processes_per_node() > 0
                ? absl::StrCat(s.max_processes_per_node(),
                               " per job on each node")
                : std::string("the node's default per job"));
  block.Add("Admits", QueueAdmits(s));
  block.Add("Max priority",
            s.has_max_priority()
                ? absl::StrCat(s.max_priority().value(), " (for users; admins any)")
                : std::string("0 (the default; admins any)"));
  block.Add("Preemption",
            absl::StrCat("its jobs run at least ",
                         LimitText(s.min_runtime()) == "-"
                             ? std::string("0s")
                             : LimitText(s.min_runtime()),
                         " before they may be preempted; preemptible: false ",
                         s.allow_non_preemptible() ? "allowed" : "refused",
                         s.reclaim_lent_quota()
                             ? "; takes lent quota back by preemption"
                             : "; waits for borrowers to end"));
  block.Add("Jobs", absl::StrCat(q.pending_jobs(), " pending, ",
                                 q.running_jobs(), " running"));
  return block.Render();
}

std::string QueueChangesTable(const xl::v1::ListQueueChangesResponse& changes,
                              const RenderContext& context) {
  TextTable table({"SEQ", "TIME", "QUEUE", "ACTION", "VERSION", "BY",
                   "SPEC"});
  for (const xl::v1::QueueChange& c : changes.changes()) {
    std::vector<std::string> quotas;
    for (const auto& q : c.spec().quotas()) quotas.push_back(QuotaText(q));
    table.AddRow({absl::StrCat(c.seq()), FormatTimestamp(c.time(), context),
                  c.queue(), c.action(), absl::StrCat(c.version()), c.by(),
                  absl::StrCat("weight ", absl::StrFormat("%g", c.spec().weight()),
                               c.spec().cohort().empty()
                                   ? ""
                                   : absl::StrCat(", cohort ", c.spec().cohort()),
                               quotas.empty() ? ""
                                              : absl::StrCat(", quotas ",
                                                             absl::StrJoin(quotas, "; ")))});
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
                  absl::StrCat(r.running_gpus()), absl::StrCat(r.pending_jobs())});
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

std::string EventLine(const xl::v1::JobEvent& event,
                      const RenderContext& context) {
  // An event that changes no state (a new priority, dropped output) shows
  // the state once.
  const std::string states =
      event.from_state() == event.to_state()
          ? JobStateName(event.to_state())
          : absl::StrCat(JobStateName(event.from_state()), " -> ",
                         JobStateName(event.to_state()));
  std::string line =
      absl::StrCat(FormatTimestamp(event.time(), context), "  ", states,
                   "  attempt ", event.attempt());
  if (!event.reason().empty()) {
    absl::StrAppend(&line, "  ", Printable(event.reason()));
  }
  return line + "\n";
}

namespace {

// `text` with its lines and tabs kept and every other control character
// escaped.
std::string EscapeLog(absl::string_view text) {
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '\n' && text[i] != '\t') continue;
    out += Printable(text.substr(start, i - start));
    if (i < text.size()) out += text[i];
    start = i + 1;
  }
  return out;
}

}  // namespace

std::string LogPrinter::Add(const xl::v1::LogChunk& chunk) {
  if (!prefix_ranks_) {
    if (!escape_) return chunk.data();
    // A UTF-8 character split across chunks waits for its rest, so that it
    // is not escaped as stray bytes.
    std::string& held =
        partial_[{chunk.rank(), static_cast<int>(chunk.stream())}];
    std::string text = held + chunk.data();
    held.clear();
    for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
      const unsigned char c =
          static_cast<unsigned char>(text[text.size() - back]);
      if ((c & 0xC0) == 0x80) continue;  // a continuation byte
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (need > back) {
        held = text.substr(text.size() - back);
        text.resize(text.size() - back);
      }
      break;
    }
    return EscapeLog(text);
  }
  std::string& pending =
      partial_[{chunk.rank(), static_cast<int>(chunk.stream())}];
  pending += chunk.data();
  std::string out;
  const std::string prefix = absl::StrCat("[rank ", chunk.rank(), "] ");
  size_t start = 0;
  for (size_t nl = pending.find('\n'); nl != std::string::npos;
       nl = pending.find('\n', start)) {
    absl::string_view line =
        absl::string_view(pending).substr(start, nl + 1 - start);
    absl::StrAppend(&out, prefix, escape_ ? EscapeLog(line) : line);
    start = nl + 1;
  }
  pending.erase(0, start);
  return out;
}

std::string LogPrinter::Flush() {
  std::string out;
  for (auto& [key, pending] : partial_) {
    if (pending.empty()) continue;
    if (prefix_ranks_) {
      absl::StrAppend(&out, "[rank ", key.first, "] ",
                      escape_ ? EscapeLog(pending) : pending, "\n");
    } else {
      out += EscapeLog(pending);  // an unfinished character: its bytes
    }
    pending.clear();
  }
  return out;
}

}  // namespace xl::client
