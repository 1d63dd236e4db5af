// The renderers of training: the built-in trainer's settings, `xlctl top`
// and `xlctl metrics` (table and CSV).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/output.h"
#include "client/output_text.h"
#include "common/duration.h"

namespace xl::client {
namespace {

using google::protobuf::RepeatedPtrField;

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

}  // namespace

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

std::string MetricsCsv(const RepeatedPtrField<xl::v1::TrainMetrics>& points) {
  std::string out =
      "time,attempt,rank,step,total_steps,loss,samples_per_second,"
      "step_seconds,compute_seconds,allreduce_seconds,data_wait_seconds,"
      "allreduce_bus_gbps,mfu,peak_memory_bytes,batch_per_rank,"
      "accumulation_steps,global_batch,precision,peak_tflops\n";
  for (const xl::v1::TrainMetrics& m : points) {
    // RFC 3339 in UTC, and every number in full: the file is for tools.
    const std::string time =
        m.has_time()
            ? absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", xl::FromProto(m.time()),
                               absl::UTCTimeZone())
            : "";
    absl::StrAppend(
        &out, time, ",", m.attempt(), ",", m.rank(), ",", m.step(), ",",
        m.total_steps(), ",",
        absl::StrFormat("%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g",
                        m.loss(), m.samples_per_second(), m.step_seconds(),
                        m.compute_seconds(), m.allreduce_seconds(),
                        m.data_wait_seconds(), m.allreduce_bus_gbps(), m.mfu()),
        ",", m.peak_memory_bytes(), ",", m.batch_per_rank(), ",",
        m.accumulation_steps(), ",", m.global_batch(), ",",
        m.precision() == xl::v1::PRECISION_UNSPECIFIED
            ? ""
            : xl::v1::Precision_Name(m.precision()),
        ",", absl::StrFormat("%.17g", m.peak_tflops()), "\n");
  }
  return out;
}

}  // namespace xl::client
