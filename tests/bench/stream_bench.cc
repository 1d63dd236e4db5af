// Many idle and slow client streams against a real xl-scheduler process:
// its memory and its health check's latency, beside the same server with
// no streams open, in one run.
//
//   stream_bench --scheduler-binary build/server/xl-scheduler [--streams 10000]
//
// Idle: WatchJob on a job that never changes (it waits for nodes that do
// not exist). Slow: StreamLogs --follow readers that never read, on a job
// whose output keeps growing (an agent of the bench sends 64 KiB chunks).
// Then one stream more than --max-streams, which must be refused
// (RESOURCE_EXHAUSTED). Prints a table; exits 1 when a goal is missed.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/bench/fleet_sim_lib.h"
#include "xl/v1/agent.grpc.pb.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

// A WatchJob or StreamLogs stream that reads its first item (or none, for a
// slow reader) and then sits until cancelled.
template <typename T>
class Sitter : public grpc::ClientReadReactor<T> {
 public:
  explicit Sitter(bool read) : read_(read) {}
  void Begin() {
    if (read_) this->StartRead(&item_);
    this->StartCall();
  }
  void OnReadDone(bool ok) override {
    if (ok) {
      absl::MutexLock lock(&mu_);
      got_first_ = true;
    }
    // An idle reader reads on: the next item never comes.
    if (ok) this->StartRead(&item_);
  }
  void OnDone(const grpc::Status& s) override {
    absl::MutexLock lock(&mu_);
    status_ = s;
    done_ = true;
  }
  bool WaitDone(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), d);
  }
  bool got_first() {
    absl::MutexLock lock(&mu_);
    return got_first_;
  }
  grpc::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  grpc::ClientContext ctx;

 private:
  const bool read_;
  T item_;
  absl::Mutex mu_;
  bool got_first_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

struct Latency {
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  int failed = 0;
};

// Sequential health checks, each timed.
Latency HealthChecks(const std::string& target, int n) {
  grpc::ChannelArguments args;
  args.SetInt("xl.bench.health", 1);  // a connection of its own
  auto channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub generic(channel);
  std::vector<double> ms;
  Latency out;
  for (int i = 0; i < n; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice empty("", 0);
    grpc::ByteBuffer req(&empty, 1), resp;
    absl::Mutex mu;
    bool done = false;
    grpc::Status status;
    auto t0 = Clock::now();
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                      &req, &resp, [&](grpc::Status s) {
                        absl::MutexLock lock(&mu);
                        status = s;
                        done = true;
                      });
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&done));
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0)
                     .count());
    if (!status.ok()) ++out.failed;
  }
  std::sort(ms.begin(), ms.end());
  out.p50_ms = ms[ms.size() / 2];
  out.p99_ms = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  out.max_ms = ms.back();
  return out;
}

std::string Submit(xl::v1::JobService::Stub* jobs, int nodes) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-xl-user", "bench");
  xl::v1::SubmitJobRequest req;
  req.mutable_spec()->add_command("/bin/sleep");
  req.mutable_spec()->add_command("3600");
  req.mutable_spec()->mutable_resources()->set_nodes(nodes);
  xl::v1::SubmitJobResponse resp;
  grpc::Status st = jobs->SubmitJob(&ctx, req, &resp);
  if (!st.ok()) {
    fprintf(stderr, "stream_bench: submit: %s\n", st.error_message().c_str());
    exit(1);
  }
  return resp.job_id();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "stream_bench: the scheduler's memory and health-check latency with "
      "many idle and slow streams open, beside none, in one run");
  std::string binary = "build/server/xl-scheduler";
  int streams = 10000;
  int per_channel = 500;
  int checks = 2000;
  app.add_option("--scheduler-binary", binary, "xl-scheduler to start")
      ->capture_default_str();
  app.add_option("--streams", streams, "idle streams, and as many slow ones")
      ->capture_default_str();
  app.add_option("--streams-per-channel", per_channel,
                 "streams multiplexed on one connection")
      ->capture_default_str();
  app.add_option("--checks", checks, "health checks timed per row")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  char tmpl[] = "/tmp/xl-stream-bench-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  const int limit = 2 * streams;
  auto sched = xl::bench::SchedulerProcess::Start(
      binary, dir,
      {"--max-streams", std::to_string(limit), "--max-streams-per-user", "0",
       "--heartbeat-timeout", "60", "--lease", "60"});
  if (!sched.ok()) {
    fprintf(stderr, "stream_bench: %s\n", sched.status().ToString().c_str());
    return 1;
  }
  const std::string target = (*sched)->address();
  auto main_channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto jobs = xl::v1::JobService::NewStub(main_channel);
  const std::string idle_job = Submit(jobs.get(), 2);  // never fits

  // A one-node job whose output grows, for the slow readers: a bench agent
  // registers, takes the job and sends output without end.
  auto agent_channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto agent_stub = xl::v1::AgentService::NewStub(agent_channel);
  grpc::ClientContext agent_ctx;
  auto agent = agent_stub->Connect(&agent_ctx);
  {
    xl::v1::AgentMessage reg;
    reg.mutable_register_()->set_name("bench-node");
    reg.mutable_register_()->set_instance_id("bench");
    reg.mutable_register_()->set_shared_env(true);
    reg.mutable_register_()->mutable_inventory()->set_hostname("bench-node");
    reg.mutable_register_()->mutable_inventory()->set_cpus(64);
    agent->Write(reg);
  }
  const std::string busy_job = Submit(jobs.get(), 1);
  int attempt = 0;
  for (xl::v1::SchedulerMessage m; agent->Read(&m);) {
    if (m.has_start_ranks() && m.start_ranks().job_id() == busy_job) {
      attempt = m.start_ranks().attempt();
      break;
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<long> chunks_sent{0};
  std::thread feeder([&] {
    xl::v1::AgentMessage running;
    auto* st = running.mutable_rank_status();
    st->set_job_id(busy_job);
    st->set_attempt(attempt);
    st->set_state(xl::v1::RANK_RUNNING);
    agent->Write(running);
    std::string text(64 << 10, 'x');
    text.back() = '\n';
    long n = 0;
    auto last_beat = Clock::now();
    while (!stop.load()) {
      xl::v1::AgentMessage log;
      log.mutable_log()->set_job_id(busy_job);
      log.mutable_log()->set_attempt(attempt);
      log.mutable_log()->set_data(text);
      if (!agent->Write(log)) break;
      ++n;
      chunks_sent = n;
      if (Clock::now() - last_beat > std::chrono::milliseconds(500)) {
        xl::v1::AgentMessage hb;
        hb.mutable_heartbeat()->set_seq(n);
        agent->Write(hb);
        last_beat = Clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::thread drain([&] {
    for (xl::v1::SchedulerMessage m; agent->Read(&m);) {
    }
  });

  struct Row {
    std::string what;
    int open = 0;
    uint64_t rss = 0;
    Latency health;
  };
  std::vector<Row> rows;
  auto measure = [&](const std::string& what, int open) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    Row r;
    r.what = what;
    r.open = open;
    r.health = HealthChecks(target, checks);
    r.rss = (*sched)->ReadMemory().rss_bytes;
    rows.push_back(r);
  };
  measure("no streams (baseline)", 0);

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  auto channel_for = [&](int i) {
    const int c = i / per_channel;
    while (static_cast<int>(channels.size()) <= c) {
      grpc::ChannelArguments args;
      args.SetInt("xl.bench.channel", static_cast<int>(channels.size()));
      // A reader that never reads holds what its window lets in: keep the
      // window at HTTP/2's 64 KiB (no BDP growth), or 10,000 slow readers
      // fill this process's memory (2 MiB each), not the scheduler's.
      args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
      args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 65535);
      channels.push_back(grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args));
    }
    return channels[c];
  };
  std::vector<std::unique_ptr<xl::v1::JobService::Stub>> stubs;
  std::vector<std::unique_ptr<Sitter<xl::v1::JobEvent>>> idle;
  xl::v1::WatchJobRequest watch;
  watch.set_job_id(idle_job);
  for (int i = 0; i < streams; ++i) {
    stubs.push_back(xl::v1::JobService::NewStub(channel_for(i)));
    auto s = std::make_unique<Sitter<xl::v1::JobEvent>>(/*read=*/true);
    s->ctx.AddMetadata("x-xl-user", "bench");
    stubs.back()->async()->WatchJob(&s->ctx, &watch, s.get());
    s->Begin();
    idle.push_back(std::move(s));
  }
  int established = 0;
  for (int wait = 0; wait < 600; ++wait) {
    established = 0;
    for (auto& s : idle) established += s->got_first();
    if (established == streams) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  measure(absl::StrCat(streams, " idle WatchJob streams"), established);

  std::vector<std::unique_ptr<Sitter<xl::v1::LogChunk>>> slow;
  xl::v1::StreamLogsRequest logs;
  logs.set_job_id(busy_job);
  logs.set_all_ranks(true);
  logs.set_follow(true);
  for (int i = 0; i < streams; ++i) {
    auto s = std::make_unique<Sitter<xl::v1::LogChunk>>(/*read=*/false);
    s->ctx.AddMetadata("x-xl-user", "bench");
    stubs[i]->async()->StreamLogs(&s->ctx, &logs, s.get());
    s->Begin();
    slow.push_back(std::move(s));
  }
  std::this_thread::sleep_for(std::chrono::seconds(5));
  measure(absl::StrCat("+ ", streams, " slow StreamLogs readers (never read)"),
          2 * streams);
  std::this_thread::sleep_for(std::chrono::seconds(10));
  measure("  the same, 10 s later (output still growing)", 2 * streams);

  // Past the limit: the stream is refused, not queued.
  int refused = 0;
  std::vector<std::unique_ptr<Sitter<xl::v1::JobEvent>>> extra;
  for (int i = 0; i < 20; ++i) {
    auto s = std::make_unique<Sitter<xl::v1::JobEvent>>(true);
    s->ctx.AddMetadata("x-xl-user", "bench");
    stubs[0]->async()->WatchJob(&s->ctx, &watch, s.get());
    s->Begin();
    extra.push_back(std::move(s));
  }
  for (auto& s : extra) {
    if (s->WaitDone(absl::Seconds(10)) &&
        s->status().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
    }
  }
  const long sent_mib = chunks_sent.load() * 64 / 1024;

  for (auto* v : {&idle}) {
    for (auto& s : *v) s->ctx.TryCancel();
    for (auto& s : *v) s->WaitDone(absl::Seconds(10));
  }
  for (auto& s : slow) s->ctx.TryCancel();
  for (auto& s : slow) s->WaitDone(absl::Seconds(10));
  for (auto& s : extra) s->ctx.TryCancel();
  stop = true;
  feeder.join();
  agent_ctx.TryCancel();
  drain.join();
  (*sched)->Stop();

  printf("\nxl-scheduler with many open streams (limit --max-streams %d); "
         "health check: %d sequential calls per row on a connection of its "
         "own\n\n",
         limit, checks);
  printf("%-52s %8s %10s %9s %9s %9s\n", "", "streams", "RSS MiB",
         "p50 ms", "p99 ms", "max ms");
  for (const Row& r : rows) {
    printf("%-52s %8d %10.1f %9.2f %9.2f %9.2f%s\n", r.what.c_str(), r.open,
           r.rss / 1048576.0, r.health.p50_ms, r.health.p99_ms,
           r.health.max_ms,
           r.health.failed ? absl::StrCat("  (", r.health.failed, " failed)").c_str()
                           : "");
  }
  const Row& base = rows.front();
  const Row& worst = rows.back();
  printf("\nper open stream: %.1f KiB of RSS; the job's output meanwhile: "
         "%ld MiB; streams past the limit refused: %d of 20\n",
         (worst.rss - base.rss) / 1024.0 / (2.0 * streams), sent_mib, refused);
  bool ok = true;
  for (const Row& r : rows) ok = ok && r.health.p99_ms < 100 && !r.health.failed;
  ok = ok && refused == 20 && rows[3].rss < rows[2].rss + (256ull << 20);
  printf("goal: health check p99 < 100 ms at every row, memory flat while "
         "the slow readers' job keeps writing, the limit enforced: %s\n",
         ok ? "met" : "MISSED");
  return ok ? 0 : 1;
}
