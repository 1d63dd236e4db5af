// How xlctl prints API messages: `-o json` is the message in protobuf's JSON
// mapping, `-o yaml` the same as YAML, `-o table` an aligned human table or a
// key: value block. Every function returns text and does no I/O, so tests
// compare strings. Stateless; safe from any thread.
#ifndef XL_CLIENT_OUTPUT_H_
#define XL_CLIENT_OUTPUT_H_

#include <google/protobuf/message.h>
#include <google/protobuf/repeated_ptr_field.h>
#include <google/protobuf/timestamp.pb.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/text.h"
#include "xl/v1/job.pb.h"
#include "xl/v1/node.pb.h"
#include "xl/v1/queue.pb.h"
#include "xl/v1/scheduler.pb.h"

namespace xl::client {

// kCsv: `xlctl metrics` only.
enum class OutputFormat { kTable, kJson, kYaml, kCsv };

// "table", "json", "yaml" or "csv"; INVALID_ARGUMENT naming -o otherwise.
absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text);

// What a table needs besides the message: the time ages are measured from,
// and the zone times are printed in.
struct RenderContext {
  absl::Time now = absl::Now();
  absl::TimeZone zone = absl::LocalTimeZone();
};

// The whole message as pretty JSON or block YAML, ending in a newline.
// `format` must be kJson or kYaml.
std::string RenderMessage(const google::protobuf::Message& message,
                          OutputFormat format);

// One message of a stream: a JSON line (kJson) or a YAML document that opens
// with "---" (kYaml). `format` must be kJson or kYaml.
std::string RenderStreamItem(const google::protobuf::Message& message,
                             OutputFormat format);


// "PENDING", ..., or "-" for JOB_STATE_UNSPECIFIED.
std::string JobStateName(xl::v1::JobState state);
// "READY", "DRAINED", "LOST", or "-".
std::string NodeStateName(xl::v1::NodeState state);

// "2024-05-01 14:05:09" in the context's zone, or "-" when unset.
std::string FormatTimestamp(const google::protobuf::Timestamp& t,
                            const RenderContext& context);
// A coarse age: "45s", "12m", "5h", "3d".
std::string FormatAge(absl::Duration age);

// The `xlctl list` table: ID, NAME, USER, QUEUE, STATE, NODES, GPUS (in all),
// ATTEMPT, AGE, REASON (cut to fit).
std::string JobTable(
    const google::protobuf::RepeatedPtrField<xl::v1::Job>& jobs,
    const RenderContext& context);

// The `xlctl get` block: every field as "Key: value", the full reason and a
// table of allocations (node, GPUs, ranks). A job with `train` shows its
// settings (TrainSpecSummary) in place of the generated xl-train command
// line; a job with metrics gets a "Training:" section: step of total,
// loss, samples/s, the step time split into compute, all-reduce and data
// wait, all-reduce bus bandwidth, peak memory and when it was reported.
std::string JobDetails(const xl::v1::Job& job, const RenderContext& context);

// The `xlctl explain` text: state and reason, estimated start, place in the
// queue, the jobs ahead (reserved ones marked) and the rank's parts.
std::string ExplainText(const xl::v1::ExplainJobResponse& explained,
                        const RenderContext& context);

// The settings of the built-in trainer on one line, with the defaults of
// job.proto filled in for unset fields: "MLP 256->1024x2->16, batch 64/rank,
// 100 steps, lr 0.001, precision bf16, device cuda, checkpoint every 50
// steps".
std::string TrainSpecSummary(const xl::v1::TrainSpec& train);

// The `xlctl top` table, one row per job: ID, NAME, USER, STATE, NODES,
// RANKS (world size), STEP (step/total), LOSS, SAMPLES/S, STEP MS,
// ALLREDUCE MS, BUS GBIT/S, MEM (peak), AGE (since created). The metric
// columns of a job without metrics are "-".
std::string TopTable(
    const google::protobuf::RepeatedPtrField<xl::v1::Job>& jobs,
    const RenderContext& context);

// The `xlctl metrics` table, one row per point: TIME, ATTEMPT, STEP, LOSS,
// SAMPLES/S, STEP MS, ALLREDUCE MS, DATA WAIT MS, BUS GBIT/S, MEM.
std::string MetricsTable(
    const google::protobuf::RepeatedPtrField<xl::v1::TrainMetrics>& points,
    const RenderContext& context);

// `xlctl metrics -o csv`: a header line, then one line per point with
// every field of TrainMetrics (time in RFC 3339 UTC, numbers in full).
std::string MetricsCsv(
    const google::protobuf::RepeatedPtrField<xl::v1::TrainMetrics>& points);

// The `xlctl nodes` table: NAME, STATE, GPUS used/total, GPU MODEL, CPUS
// used/total, MEMORY used/total, NVME FREE, NIC GBIT/S (fastest NIC), LABELS,
// JOBS.
std::string NodeTable(
    const google::protobuf::RepeatedPtrField<xl::v1::Node>& nodes);

// The `xlctl node` block: state, usage, and tables of GPUs, NVMe and NICs.
std::string NodeDetails(const xl::v1::Node& node, const RenderContext& context);

// The `xlctl queue` table: per queue pending and running jobs, GPUs in use
// and GPUs asked for by pending jobs, a TOTAL row, then the cluster's GPUs
// and nodes.
std::string QueueTable(const xl::v1::GetQueueResponse& queue);

// xlctl submit --dry-run: where the job would start now, in rank order, or
// why it would wait, when and behind how many.
std::string DryRunText(const xl::v1::DryRun& dry_run,
                       const RenderContext& context);

// xlctl queue list / show / history and xlctl share.
std::string QueueListTable(const xl::v1::ListQueuesResponse& queues);
std::string QueueDetails(const xl::v1::Queue& queue,
                         const RenderContext& context);
std::string QueueChangesTable(const xl::v1::ListQueueChangesResponse& changes,
                              const RenderContext& context);
std::string ShareTable(const xl::v1::GetSharesResponse& shares);

// One `xlctl watch` line: "TIME  FROM -> TO  attempt N  reason", with a
// newline.
std::string EventLine(const xl::v1::JobEvent& event,
                      const RenderContext& context);

// Turns the LogChunks of `xlctl logs` into the bytes it prints. Without
// prefixes the data passes through unchanged. With prefixes every line starts
// with "[rank N] ", and a chunk's unfinished last line waits (per rank and
// stream) for its rest, so lines of different ranks never mix.
// Not thread-safe; one per stream.
class LogPrinter {
 public:
  // `escape`: control characters but newline and tab print as visible
  // escapes (Printable), for a terminal.
  explicit LogPrinter(bool prefix_ranks, bool escape = false)
      : prefix_ranks_(prefix_ranks), escape_(escape) {}

  // Returns what to print for `chunk` now.
  std::string Add(const xl::v1::LogChunk& chunk);
  // Returns the unfinished lines left at the end of the stream, each ended
  // with a newline when prefixed.
  std::string Flush();

 private:
  bool prefix_ranks_;
  bool escape_;
  // (rank, stream) -> the unfinished line.
  std::map<std::pair<int32_t, int>, std::string> partial_;
};

// The argv as one line a shell would split back the same way.
std::string ShellJoin(
    const google::protobuf::RepeatedPtrField<std::string>& argv);

}  // namespace xl::client

#endif  // XL_CLIENT_OUTPUT_H_
