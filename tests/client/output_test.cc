// Tests of xlctl's output: tables and key: value blocks for people, and JSON
// and YAML that parse back into the same API message.
#include "client/output.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "common/duration.h"
#include "common/proto_text.h"

namespace xl::client {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

RenderContext Utc() {
  RenderContext context;
  context.now = kNow;
  context.zone = absl::UTCTimeZone();
  return context;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The cells of a table line: text between runs of two or more spaces.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  for (absl::string_view cell : absl::StrSplit(line, "  ", absl::SkipEmpty())) {
    cells.emplace_back(absl::StripAsciiWhitespace(cell));
  }
  return cells;
}

v1::Job RunningJob() {
  v1::Job job;
  job.set_id("42");
  job.set_user("alice");
  job.set_state(v1::RUNNING);
  job.set_attempt(2);
  job.set_world_size(4);
  job.set_master_addr("10.0.0.1");
  job.set_master_port(29500);
  job.set_idempotency_key("xlctl-abc");
  v1::JobSpec* spec = job.mutable_spec();
  spec->set_name("ddp-demo");
  spec->set_queue("research");
  spec->set_priority(3);
  spec->set_max_retries(1);
  for (const char* arg : {"/usr/bin/python3", "train.py", "--steps", "50"}) {
    spec->add_command(arg);
  }
  (*spec->mutable_env())["PYTHONUNBUFFERED"] = "1";
  spec->mutable_resources()->set_nodes(2);
  spec->mutable_resources()->set_ranks_per_node(2);
  spec->mutable_resources()->set_gpus_per_node(2);
  spec->mutable_resources()->set_min_gpu_memory_bytes(80ull << 30);
  *spec->mutable_time_limit() = xl::ToProtoDuration(absl::Minutes(10));
  *job.mutable_create_time() = xl::ToProtoTime(kNow - absl::Minutes(5));
  *job.mutable_start_time() = xl::ToProtoTime(kNow - absl::Minutes(3));
  job.set_reason(
      "requeued after node-2 was lost; resumed from the checkpoint of step "
      "1200 written to the node's NVMe scratch");
  for (int n = 0; n < 2; ++n) {
    v1::Allocation* a = job.add_allocations();
    a->set_node(absl::StrCat("node-", n + 1));
    a->set_group_rank(n);
    a->add_gpu_indices(0);
    a->add_gpu_indices(1);
    a->add_ranks(2 * n);
    a->add_ranks(2 * n + 1);
    a->set_address(absl::StrCat("10.0.0.", n + 1));
    a->set_memory_bytes(64ull << 30);
  }
  return job;
}

v1::Node GpuNode(const std::string& name) {
  v1::Node node;
  node.set_name(name);
  node.set_state(v1::READY);
  node.set_agent_version("0.1.0");
  v1::NodeInventory* inv = node.mutable_inventory();
  inv->set_hostname(name);
  inv->set_address("10.0.0.1");
  (*inv->mutable_labels())["zone"] = "a";
  (*inv->mutable_labels())["rack"] = "r1";
  inv->set_cpus(64);
  inv->set_memory_bytes(512ull << 30);
  for (int i = 0; i < 8; ++i) {
    v1::Gpu* gpu = inv->add_gpus();
    gpu->set_index(i);
    gpu->set_model("NVIDIA H100 80GB HBM3");
    gpu->set_memory_bytes(80ull << 30);
    gpu->set_compute_capability("9.0");
  }
  v1::Nvme* nvme = inv->add_nvme();
  nvme->set_device("nvme0n1");
  nvme->set_path("/scratch");
  nvme->set_capacity_bytes(4ull << 40);
  nvme->set_free_bytes(3ull << 40);
  v1::Nic* eth = inv->add_nics();
  eth->set_name("eth0");
  eth->set_kind(v1::ETHERNET);
  eth->set_gbps(25);
  v1::Nic* ib = inv->add_nics();
  ib->set_name("ib0");
  ib->set_kind(v1::INFINIBAND);
  ib->set_gbps(400);
  node.mutable_usage()->add_gpus_in_use(0);
  node.mutable_usage()->add_gpus_in_use(1);
  node.mutable_usage()->set_cpus_in_use(16);
  node.mutable_usage()->set_memory_bytes_in_use(64ull << 30);
  node.mutable_usage()->add_job_ids("42");
  *node.mutable_last_heartbeat_time() =
      xl::ToProtoTime(kNow - absl::Seconds(3));
  return node;
}

TEST(OutputTest, ParseOutputFormat) {
  EXPECT_EQ(*ParseOutputFormat("table"), OutputFormat::kTable);
  EXPECT_EQ(*ParseOutputFormat("JSON"), OutputFormat::kJson);
  EXPECT_EQ(*ParseOutputFormat("yaml"), OutputFormat::kYaml);
  EXPECT_EQ(ParseOutputFormat("xml").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OutputTest, JobTableHasTheColumnsAligned) {
  v1::ListJobsResponse list;
  *list.add_jobs() = RunningJob();
  v1::Job pending;
  pending.set_id("43");
  pending.set_state(v1::PENDING);
  pending.set_user("bob");
  pending.set_attempt(1);
  pending.mutable_spec()->set_queue("default");
  pending.mutable_spec()->mutable_resources()->set_nodes(4);
  pending.mutable_spec()->mutable_resources()->set_gpus_per_node(8);
  *pending.mutable_create_time() = xl::ToProtoTime(kNow - absl::Hours(50));
  pending.set_reason("needs 4 nodes with 8 GPUs; 3 are free");
  *list.add_jobs() = pending;

  std::string table = JobTable(list.jobs(), Utc());
  std::vector<std::string> lines = Lines(table);
  ASSERT_EQ(lines.size(), 3u) << table;
  EXPECT_THAT(lines[0], StartsWith("ID  NAME      USER   QUEUE     STATE    "
                                   "NODES  GPUS  ATTEMPT  AGE  REASON"));
  EXPECT_THAT(lines[1],
              StartsWith("42  ddp-demo  alice  research  RUNNING  "
                         "2      4     2        5m   requeued after"));
  EXPECT_THAT(lines[2], StartsWith("43  -         bob    default   PENDING  "
                                   "4      32    1        2d   needs 4 nodes"));
  // The long reason is cut; the short one is whole.
  EXPECT_THAT(lines[1], HasSubstr("..."));
  EXPECT_THAT(lines[1], Not(HasSubstr("NVMe scratch")));
  EXPECT_THAT(lines[2], HasSubstr("needs 4 nodes with 8 GPUs; 3 are free"));
  // Every column starts at the same place on every line.
  EXPECT_EQ(lines[0].find("STATE"), lines[1].find("RUNNING"));
  EXPECT_EQ(lines[0].find("REASON"), lines[2].find("needs"));
}

TEST(OutputTest, EmptyJobTableIsTheHeader) {
  v1::ListJobsResponse empty;
  EXPECT_EQ(Lines(JobTable(empty.jobs(), Utc())).size(), 1u);
}

TEST(OutputTest, JobDetailsShowEveryFieldAndTheFullReason) {
  std::string text = JobDetails(RunningJob(), Utc());
  for (const char* want :
       {"ID:", "42", "ddp-demo", "alice", "research", "RUNNING",
        "2 (max retries 1)", "/usr/bin/python3 train.py --steps 50",
        "PYTHONUNBUFFERED=1", "80 GiB", "10.0.0.1:29500", "10m0s",
        "2023-11-14 22:08:20 (5m ago)", "written to the node's NVMe scratch",
        "NODE", "GPUS", "RANKS", "node-1", "node-2"}) {
    EXPECT_THAT(text, HasSubstr(want)) << text;
  }
  // Allocations: node, GPUs, ranks on one line.
  std::vector<std::string> lines = Lines(text);
  bool found = false;
  for (const std::string& line : lines) {
    if (line.rfind("  node-2", 0) == 0) {
      EXPECT_THAT(line, HasSubstr("0,1"));
      EXPECT_THAT(line, HasSubstr("2,3"));
      found = true;
    }
  }
  EXPECT_TRUE(found) << text;
  // Values are aligned.
  EXPECT_EQ(lines[0].find("42"), lines[1].find("ddp-demo")) << text;
}

TEST(OutputTest, PrintableEscapesTerminalControls) {
  EXPECT_EQ(Printable("plain text, caf\xc3\xa9 \xf0\x9f\x98\x80"),
            "plain text, caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(Printable("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(Printable("\x1b]52;c;dG91Y2g=\x07"), "\\e]52;c;dG91Y2g=\\x07");
  EXPECT_EQ(Printable(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  EXPECT_EQ(Printable("csi \xc2\x9b" "6n"), "csi \\u009b6n");  // C1 CSI
  // Right-to-left override and a zero-width space: text that reads as
  // something else.
  EXPECT_EQ(Printable("evil\xe2\x80\xaetxt.exe \xe2\x80\x8b"),
            "evil\\u202etxt.exe \\u200b");
  EXPECT_EQ(Printable(Printable("\x1b[2J\xe2\x80\xae")),
            Printable("\x1b[2J\xe2\x80\xae"));
  // Not UTF-8: a lone continuation byte, a cut sequence, an overlong form,
  // a surrogate.
  EXPECT_EQ(Printable("\x80 \xe2\x82 \xc0\xaf \xed\xa0\x80"),
            "\\x80 \\xe2\\x82 \\xc0\\xaf \\xed\\xa0\\x80");
}

// Another user's job must not drive the terminal of whoever lists it: every
// cell and value is escaped, and a newline cannot make a fake row.
TEST(OutputTest, TablesAndDetailsEscapeWhatJobsCarry) {
  v1::ListJobsResponse list;
  v1::Job* job = list.add_jobs();
  *job = RunningJob();
  job->mutable_spec()->set_name("evil\n999  fake-job  root");
  job->set_reason("\x1b[2J\x1b]0;owned\x07");
  job->mutable_spec()->set_working_dir("/tmp/\x1b[31mred");
  (*job->mutable_spec()->mutable_env())["HOSTILE"] = "\x1b]52;c;eA==\x07";
  job->mutable_spec()->add_command("arg\x1b[1A");
  for (const std::string& text :
       {JobTable(list.jobs(), Utc()), JobDetails(*job, Utc())}) {
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
    EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
    for (const std::string& line : Lines(text)) {
      EXPECT_THAT(line, Not(StartsWith("999"))) << text;
    }
  }
  EXPECT_THAT(JobDetails(*job, Utc()), HasSubstr("HOSTILE=\\e]52;c;eA==\\x07"));
  EXPECT_EQ(Lines(JobTable(list.jobs(), Utc())).size(), 2u);
}

TEST(OutputTest, ExplainSaysWhyWhenAndWhatIsAhead) {
  v1::ExplainJobResponse e;
  v1::Job* job = e.mutable_job();
  job->set_id("6");
  job->set_user("bob");
  job->mutable_spec()->set_queue("default");
  job->set_state(v1::PENDING);
  job->set_reason("needs 1 node x (8 GPUs); 0 fit now");
  e.set_position(2);
  e.set_pending(7);
  e.set_gpus_ahead(16);
  e.mutable_priority()->set_priority(3);
  e.mutable_priority()->set_submit_order(6);
  e.mutable_priority()->set_effective(78.25);
  e.mutable_priority()->set_fair_share_factor(0.75);
  e.mutable_priority()->set_fair_share_weight(100);
  e.mutable_priority()->set_age_factor(0.025);
  e.mutable_priority()->set_age_weight(10);
  v1::QueuedJob* q = e.add_ahead();
  q->set_job_id("5");
  q->set_user("alice");
  q->set_queue("research");
  q->set_priority(5);
  q->set_effective_priority(102.5);
  q->set_nodes(2);
  q->set_gpus_per_node(8);
  *q->mutable_estimated_start_time() = xl::ToProtoTime(kNow + absl::Hours(2));
  std::string text = ExplainText(e, Utc());
  for (const char* want :
       {"Job 6 (bob, queue default) is PENDING: number 2 of 7 pending jobs",
        "needs 1 node x (8 GPUs); 0 fit now", "no estimate",
        "1 jobs asking for 16 GPUs", "Priority:",
        "78.25 effective = 3 priority + 0.750 fair share x 100 + 0.025 age x "
        "10 (submit order 6)",
        "AHEAD", "alice", "research", "102.50", "(in 2h)"}) {
    EXPECT_THAT(text, HasSubstr(want)) << text;
  }
  *job->mutable_estimated_start_time() = xl::ToProtoTime(kNow + absl::Minutes(30));
  EXPECT_THAT(ExplainText(e, Utc()), HasSubstr("(in 30m)"));
}

TEST(OutputTest, DryRunSaysWhereInRankOrderOrWhyItWouldWait) {
  v1::DryRun d;
  d.mutable_spec()->set_queue("research");
  d.set_position(3);
  d.set_pending(9);
  d.set_effective_priority(42.5);
  d.set_starts_now(true);
  for (int g = 0; g < 2; ++g) {
    v1::Allocation* a = d.add_allocations();
    a->set_node(g == 0 ? "n7" : "n2");
    a->set_group_rank(g);
    a->add_gpu_indices(0);
    a->add_gpu_indices(1);
    a->add_ranks(2 * g);
    a->add_ranks(2 * g + 1);
  }
  std::string text = DryRunText(d, Utc());
  for (const char* want : {"nothing was submitted", "number 3 of 9",
                           "effective 42.50", "start now", "n7", "0,1",
                           "2-3"}) {
    EXPECT_THAT(text, HasSubstr(want)) << text;
  }
  EXPECT_LT(text.find("n7"), text.find("n2")) << "rank order";
  d.set_starts_now(false);
  d.clear_allocations();
  d.set_reason("needs 2 nodes x (8 GPUs); 1 fits now");
  d.add_would_preempt("12");
  text = DryRunText(d, Utc());
  for (const char* want : {"wait", "needs 2 nodes", "no estimate",
                           "Would preempt:", "12"}) {
    EXPECT_THAT(text, HasSubstr(want)) << text;
  }
}

TEST(OutputTest, ShellJoinQuotesWhatNeedsIt) {
  v1::JobSpec spec;
  for (const char* arg : {"python3", "-c", "print('hi there')", ""}) {
    spec.add_command(arg);
  }
  EXPECT_EQ(ShellJoin(spec.command()),
            R"(python3 -c 'print('\''hi there'\'')' '')");
}

TEST(OutputTest, JobJsonRoundTrips) {
  v1::Job job = RunningJob();
  std::string json = RenderMessage(job, OutputFormat::kJson);
  EXPECT_THAT(json, HasSubstr("\"state\": \"RUNNING\""));
  EXPECT_THAT(json, HasSubstr("\"ranks_per_node\": 2"));
  v1::Job back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(job, back)) << back.DebugString();
}

TEST(OutputTest, JobYamlRoundTrips) {
  v1::Job job = RunningJob();
  std::string yaml = RenderMessage(job, OutputFormat::kYaml);
  EXPECT_THAT(yaml, HasSubstr("state: RUNNING"));
  v1::Job back;
  absl::Status status = xl::ParseYamlToMessage(yaml, "output", &back);
  ASSERT_TRUE(status.ok()) << status << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(job, back)) << back.DebugString();
}

TEST(OutputTest, NodesJsonAndYamlRoundTrip) {
  v1::ListNodesResponse nodes;
  *nodes.add_nodes() = GpuNode("node-1");
  *nodes.add_nodes() = GpuNode("node-2");
  v1::ListNodesResponse from_json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  RenderMessage(nodes, OutputFormat::kJson), &from_json)
                  .ok());
  EXPECT_TRUE(MessageDifferencer::Equals(nodes, from_json));
  v1::ListNodesResponse from_yaml;
  ASSERT_TRUE(xl::ParseYamlToMessage(RenderMessage(nodes, OutputFormat::kYaml),
                                     "output", &from_yaml)
                  .ok());
  EXPECT_TRUE(MessageDifferencer::Equals(nodes, from_yaml));
}

TEST(OutputTest, NodeTable) {
  v1::ListNodesResponse nodes;
  *nodes.add_nodes() = GpuNode("node-1");
  v1::Node lost;
  lost.set_name("cpu-9");
  lost.set_state(v1::LOST);
  lost.mutable_inventory()->set_cpus(8);
  lost.mutable_inventory()->set_memory_bytes(16ull << 30);
  *nodes.add_nodes() = lost;
  std::string table = NodeTable(nodes.nodes());
  std::vector<std::string> lines = Lines(table);
  ASSERT_EQ(lines.size(), 3u) << table;
  EXPECT_THAT(lines[0], StartsWith("NAME    STATE  GPUS  GPU MODEL"));
  for (const char* col :
       {"CPUS", "MEMORY", "NVME FREE", "NIC GBIT/S", "LABELS", "JOBS"}) {
    EXPECT_THAT(lines[0], HasSubstr(col));
  }
  EXPECT_THAT(lines[1],
              StartsWith("node-1  READY  2/8   NVIDIA H100 80GB HBM3"));
  for (const char* cell :
       {"16/64", "64 GiB/512 GiB", "3 TiB", "400", "rack=r1,zone=a", "42"}) {
    EXPECT_THAT(lines[1], HasSubstr(cell)) << table;
  }
  EXPECT_THAT(lines[2], StartsWith("cpu-9   LOST   0/0   -"));
  EXPECT_EQ(lines[0].find("LABELS"), lines[1].find("rack=r1"));
}

TEST(OutputTest, NodeDetails) {
  std::string text = NodeDetails(GpuNode("node-1"), Utc());
  for (const char* want :
       {"READY", "rack=r1,zone=a", "2 of 8 (0,1)", "16 of 64",
        "64 GiB of 512 GiB", "3s ago", "nvme0n1", "/scratch", "4 TiB",
        "INFINIBAND", "ib0", "400", "NVIDIA H100 80GB HBM3", "9.0"}) {
    EXPECT_THAT(text, HasSubstr(want)) << text;
  }
}

TEST(OutputTest, QueueTableHasTotals) {
  v1::GetQueueResponse queue;
  v1::QueueSummary* a = queue.add_queues();
  a->set_queue("default");
  a->set_pending_jobs(3);
  a->set_running_jobs(1);
  a->set_gpus_in_use(8);
  a->set_gpus_requested_pending(24);
  v1::QueueSummary* b = queue.add_queues();
  b->set_queue("research");
  b->set_pending_jobs(1);
  b->set_running_jobs(2);
  b->set_gpus_in_use(4);
  b->set_gpus_requested_pending(8);
  queue.set_total_gpus(16);
  queue.set_gpus_in_use(12);
  queue.set_gpus_free(4);
  queue.set_nodes_ready(2);
  queue.set_nodes_drained(1);
  std::string text = QueueTable(queue);
  std::vector<std::string> lines = Lines(text);
  ASSERT_GE(lines.size(), 6u) << text;
  EXPECT_THAT(lines[0], StartsWith("QUEUE     PENDING  RUNNING  GPUS IN USE"));
  EXPECT_THAT(lines[1], StartsWith("default   3        1        8"));
  EXPECT_THAT(lines[3],
              StartsWith("TOTAL     4        3        12           32"));
  EXPECT_THAT(text, HasSubstr("12 in use, 4 free, 16 in all"));
  EXPECT_THAT(text, HasSubstr("2 ready, 1 drained, 0 lost"));
  EXPECT_THAT(text, Not(HasSubstr("fragmentation")));
  queue.set_gpus_fragmented(3);
  EXPECT_THAT(QueueTable(queue),
              HasSubstr("3 of the free GPUs are on nodes where no pending "
                        "job fits (fragmentation)"));
}

TEST(OutputTest, EventLine) {
  v1::JobEvent event;
  event.set_job_id("42");
  event.set_seq(3);
  *event.mutable_time() = xl::ToProtoTime(kNow);
  event.set_from_state(v1::SCHEDULED);
  event.set_to_state(v1::RUNNING);
  event.set_attempt(1);
  event.set_reason("all 4 ranks started");
  EXPECT_EQ(EventLine(event, Utc()),
            "2023-11-14 22:13:20  SCHEDULED -> RUNNING  attempt 1  all 4 ranks "
            "started\n");
  event.set_from_state(v1::JOB_STATE_UNSPECIFIED);
  event.set_to_state(v1::PENDING);
  event.clear_reason();
  EXPECT_EQ(EventLine(event, Utc()),
            "2023-11-14 22:13:20  - -> PENDING  attempt 1\n");
}

TEST(OutputTest, StreamItemsAreOneJsonLineEach) {
  v1::JobEvent event;
  event.set_job_id("42");
  event.set_to_state(v1::RUNNING);
  std::string line = RenderStreamItem(event, OutputFormat::kJson);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_THAT(RenderStreamItem(event, OutputFormat::kYaml),
              StartsWith("---\n"));
}

TEST(OutputTest, LogPrinterWithoutPrefixPassesBytesThrough) {
  LogPrinter printer(/*prefix_ranks=*/false);
  v1::LogChunk chunk;
  chunk.set_data("step 1 loss 2.3\nstep");
  EXPECT_EQ(printer.Add(chunk), "step 1 loss 2.3\nstep");
  EXPECT_EQ(printer.Flush(), "");
}

// Security review F9: a job's output must not drive the terminal of whoever
// reads it (an admin included): on a terminal its control characters are
// escaped, lines, tabs and UTF-8 kept, also when a character is split
// across chunks.
TEST(OutputTest, LogPrinterOnATerminalEscapesControlCharacters) {
  for (bool prefix : {false, true}) {
    LogPrinter printer(prefix, /*escape=*/true);
    xl::v1::LogChunk a;
    a.set_data("\x1b]52;c;Y3VybCBldmlsfHNo\a\x1b[2J\tok \xc3");
    xl::v1::LogChunk b;
    b.set_data("\xa9t\xc3\xa9\n");
    std::string out = printer.Add(a);
    out += printer.Add(b);
    out += printer.Flush();
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
    EXPECT_EQ(out.find('\a'), std::string::npos) << out;
    EXPECT_NE(out.find("\\e]52;c;"), std::string::npos) << out;
    EXPECT_NE(out.find("\tok \xc3\xa9t\xc3\xa9\n"), std::string::npos) << out;
  }
  // Without escape (a pipe, or --raw): the bytes.
  LogPrinter raw(false, /*escape=*/false);
  xl::v1::LogChunk c;
  c.set_data("\x1b[31mred\n");
  EXPECT_EQ(raw.Add(c), "\x1b[31mred\n");
}

TEST(OutputTest, LogPrinterPrefixesWholeLinesPerRank) {
  LogPrinter printer(/*prefix_ranks=*/true);
  v1::LogChunk a;
  a.set_rank(0);
  a.set_stream(v1::STDOUT);
  v1::LogChunk b = a;
  b.set_rank(1);
  std::string out;
  a.set_data("hello from 0\nhalf");
  out += printer.Add(a);
  b.set_data("hello from 1\n");
  out += printer.Add(b);
  a.set_data(" a line\n");
  out += printer.Add(a);
  b.set_data("no newline at the end");
  out += printer.Add(b);
  out += printer.Flush();
  EXPECT_EQ(out,
            "[rank 0] hello from 0\n"
            "[rank 1] hello from 1\n"
            "[rank 0] half a line\n"
            "[rank 1] no newline at the end\n");
}

// Metrics of step 1200 of 5000 of a run resumed at 1000, on 4 ranks.
v1::TrainMetrics Step1200() {
  v1::TrainMetrics m;
  m.set_job_id("42");
  m.set_attempt(2);
  m.set_step(1200);
  m.set_total_steps(5000);
  m.set_resumed_from_step(1000);
  m.set_loss(0.43216);
  m.set_samples_per_second(12345.67);
  m.set_step_seconds(0.08530);
  m.set_compute_seconds(0.06010);
  m.set_allreduce_seconds(0.02025);
  m.set_data_wait_seconds(0.005);
  m.set_allreduce_bus_gbps(123.456);
  m.set_peak_memory_bytes(12ull << 30);
  *m.mutable_time() = xl::ToProtoTime(kNow - absl::Seconds(10));
  return m;
}

v1::Job TrainingJob() {
  v1::Job job = RunningJob();
  v1::JobSpec* spec = job.mutable_spec();
  spec->clear_command();
  for (const char* arg :
       {"xl-train", "--spec-json", R"({"hidden_dim":2048,"steps":5000})"}) {
    spec->add_command(arg);
  }
  v1::TrainSpec* train = spec->mutable_train();
  train->set_hidden_dim(2048);
  train->set_hidden_layers(4);
  train->set_steps(5000);
  train->set_learning_rate(3e-4);
  train->set_precision(v1::BF16);
  train->set_device("cuda");
  train->set_checkpoint_every(200);
  *job.mutable_metrics() = Step1200();
  return job;
}

// The value of "  Key:  value" in the Training section.
std::string TrainingValue(const std::string& text, const std::string& key) {
  size_t section = text.find("\nTraining:\n");
  if (section == std::string::npos) return "<no Training section>";
  size_t at = text.find("\n  " + key + ":", section);
  if (at == std::string::npos) return "<no " + key + ">";
  size_t start = text.find_first_not_of(' ', at + 4 + key.size());
  return text.substr(start, text.find('\n', start) - start);
}

TEST(OutputTest, JobDetailsTrainingSection) {
  std::string text = JobDetails(TrainingJob(), Utc());
  EXPECT_EQ(TrainingValue(text, "Step"),
            "1200/5000 (24%), resumed from step 1000")
      << text;
  EXPECT_EQ(TrainingValue(text, "Loss"), "0.4322");
  EXPECT_EQ(TrainingValue(text, "Samples/s"), "12345.7");
  EXPECT_EQ(TrainingValue(text, "Step time"),
            "85.30 ms (compute 60.10 ms, all-reduce 20.25 ms, data wait "
            "5.00 ms)");
  EXPECT_EQ(TrainingValue(text, "All-reduce bus"), "123.46 Gbit/s");
  EXPECT_EQ(TrainingValue(text, "Peak memory"), "12 GiB");
  EXPECT_EQ(TrainingValue(text, "Updated"), "2023-11-14 22:13:10 (10s ago)");
  // The section sits between the job's fields and its allocations.
  EXPECT_LT(text.find("Reason:"), text.find("Training:"));
  EXPECT_LT(text.find("Training:"), text.find("Allocations:"));
}

TEST(OutputTest, JobDetailsTrainingOfAFreshOneRankRun) {
  v1::Job job = TrainingJob();
  v1::TrainMetrics* m = job.mutable_metrics();
  m->set_resumed_from_step(0);
  m->set_allreduce_bus_gbps(0);
  m->set_attempt(1);  // the job is on attempt 2: these are older
  m->set_loss(2.5e-5);
  std::string text = JobDetails(job, Utc());
  EXPECT_EQ(TrainingValue(text, "Step"), "1200/5000 (24%)") << text;
  EXPECT_EQ(TrainingValue(text, "Loss"), "2.500e-05");
  EXPECT_EQ(TrainingValue(text, "All-reduce bus"), "- (one rank)");
  EXPECT_EQ(TrainingValue(text, "Updated"),
            "2023-11-14 22:13:10 (10s ago), from attempt 1");
}

TEST(OutputTest, JobDetailsWithoutMetricsHasNoTrainingSection) {
  EXPECT_THAT(JobDetails(RunningJob(), Utc()), Not(HasSubstr("Training:")));
}

TEST(OutputTest, JobDetailsShowTrainSettingsNotTheSpecJson) {
  std::string text = JobDetails(TrainingJob(), Utc());
  EXPECT_THAT(text, HasSubstr("Train:"));
  EXPECT_THAT(text,
              HasSubstr("MLP 256->2048x4->16, batch 64/rank, 5000 steps, lr "
                        "0.0003, precision bf16, device cuda, checkpoint "
                        "every 200 steps"))
      << text;
  EXPECT_THAT(text, Not(HasSubstr("--spec-json")));
  EXPECT_THAT(text, Not(HasSubstr("Command:")));
}

TEST(OutputTest, TrainSpecSummaryFillsTheDefaults) {
  v1::TrainSpec train;
  EXPECT_EQ(TrainSpecSummary(train),
            "MLP 256->1024x2->16, batch 64/rank, 100 steps, lr 0.001, "
            "precision auto, device auto, checkpoint on stop only");
  train.mutable_data()->set_shards("/mnt/nvme0/data/shard-*.xls");
  EXPECT_THAT(TrainSpecSummary(train),
              HasSubstr(", data /mnt/nvme0/data/shard-*.xls"));
}

TEST(OutputTest, TopTableWithAndWithoutMetrics) {
  v1::ListJobsResponse list;
  *list.add_jobs() = TrainingJob();
  v1::Job plain = RunningJob();
  plain.set_id("43");
  plain.set_state(v1::SCHEDULED);
  plain.clear_world_size();  // not placed yet: 2 nodes x 2 ranks
  *list.add_jobs() = plain;
  std::string table = TopTable(list.jobs(), Utc());
  std::vector<std::string> lines = Lines(table);
  ASSERT_EQ(lines.size(), 3u) << table;
  std::vector<std::string> header = Cells(lines[0]);
  EXPECT_THAT(header, ::testing::ElementsAre(
                          "ID", "NAME", "USER", "STATE", "NODES", "RANKS",
                          "STEP", "LOSS", "SAMPLES/S", "STEP MS",
                          "ALLREDUCE MS", "BUS GBIT/S", "MEM", "AGE"));
  std::vector<std::string> training = Cells(lines[1]);
  EXPECT_THAT(training, ::testing::ElementsAre(
                            "42", "ddp-demo", "alice", "RUNNING", "2", "4",
                            "1200/5000", "0.4322", "12345.7", "85.30", "20.25",
                            "123.46", "12 GiB", "5m"))
      << table;
  std::vector<std::string> without = Cells(lines[2]);
  EXPECT_THAT(without, ::testing::ElementsAre("43", "ddp-demo", "alice",
                                              "SCHEDULED", "2", "4", "-", "-",
                                              "-", "-", "-", "-", "-", "5m"))
      << table;
  // Every column starts at the same place on every line.
  EXPECT_EQ(lines[0].find("LOSS"), lines[1].find("0.4322"));
  EXPECT_EQ(lines[0].find("BUS GBIT/S"), lines[1].find("123.46"));
}

TEST(OutputTest, MetricsTable) {
  v1::GetJobMetricsResponse response;
  v1::TrainMetrics first = Step1200();
  first.set_attempt(1);
  first.set_step(10);
  first.set_loss(2.7726);
  first.set_allreduce_bus_gbps(0);
  *first.mutable_time() = xl::ToProtoTime(kNow - absl::Minutes(2));
  *response.add_points() = first;
  *response.add_points() = Step1200();
  std::string table = MetricsTable(response.points(), Utc());
  std::vector<std::string> lines = Lines(table);
  ASSERT_EQ(lines.size(), 3u) << table;
  std::vector<std::string> header = Cells(lines[0]);
  EXPECT_THAT(header,
              ::testing::ElementsAre("TIME", "ATTEMPT", "STEP", "LOSS",
                                     "SAMPLES/S", "STEP MS", "ALLREDUCE MS",
                                     "DATA WAIT MS", "BUS GBIT/S", "MEM"));
  EXPECT_THAT(Cells(lines[1]),
              ::testing::ElementsAre("2023-11-14 22:11:20", "1", "10/5000",
                                     "2.7726", "12345.7", "85.30", "20.25",
                                     "5.00", "-", "12 GiB"))
      << table;
  std::vector<std::string> last = Cells(lines[2]);
  EXPECT_THAT(last,
              ::testing::ElementsAre("2023-11-14 22:13:10", "2", "1200/5000",
                                     "0.4322", "12345.7", "85.30", "20.25",
                                     "5.00", "123.46", "12 GiB"))
      << table;
}

TEST(OutputTest, MetricsJsonAndYamlRoundTrip) {
  v1::GetJobMetricsResponse response;
  *response.add_points() = Step1200();
  *response.add_points() = Step1200();
  response.mutable_points(1)->set_step(1300);
  std::string json = RenderMessage(response, OutputFormat::kJson);
  EXPECT_THAT(json, HasSubstr("\"allreduce_bus_gbps\": 123.456"));
  v1::GetJobMetricsResponse from_json;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(json, &from_json).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(response, from_json))
      << from_json.DebugString();
  v1::GetJobMetricsResponse from_yaml;
  ASSERT_TRUE(
      xl::ParseYamlToMessage(RenderMessage(response, OutputFormat::kYaml),
                             "output", &from_yaml)
          .ok());
  EXPECT_TRUE(MessageDifferencer::Equals(response, from_yaml));

  // A job with metrics and a train spec survives too (get -o json).
  v1::Job job = TrainingJob();
  v1::Job back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  RenderMessage(job, OutputFormat::kJson), &back)
                  .ok());
  EXPECT_TRUE(MessageDifferencer::Equals(job, back)) << back.DebugString();
}

TEST(OutputTest, FormatAge) {
  EXPECT_EQ(FormatAge(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatAge(absl::Minutes(12)), "12m");
  EXPECT_EQ(FormatAge(absl::Hours(5)), "5h");
  EXPECT_EQ(FormatAge(absl::Hours(72)), "3d");
  EXPECT_EQ(FormatAge(-absl::Seconds(3)), "0s");
}

}  // namespace
}  // namespace xl::client
