// /metrics at fleet size: a real xl-scheduler with --metrics-listen, N
// simulated agents (default 10,000 nodes of 8 GPUs), the fleet full of
// one-node jobs and as many again pending. Measures one scrape (time and
// size), and what scraping costs everyone else: the health check's latency
// and the agents' heartbeat round trip, idle beside while /metrics is
// scraped back to back (a Prometheus scraping every second is far less).
//
//   metrics_bench --scheduler-binary build/server/xl-scheduler [--nodes N]
//
// Prints a table; exits 1 when the fleet cannot be set up.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "tests/bench/fleet_sim_lib.h"

namespace {

using Clock = std::chrono::steady_clock;
using xl::bench::LatencySamples;
using xl::bench::Ms;

// GET /metrics over plain HTTP; the body's size, or -1.
long Scrape(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: b\r\n\r\n";
  (void)!send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, n);
  close(fd);
  if (out.rfind("HTTP/1.1 200", 0) != 0) return -1;
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? -1 : static_cast<long>(out.size() - body - 4);
}

// Health checks one after another for `seconds`.
void HealthChecks(grpc::GenericStub* generic, double seconds,
                  LatencySamples* out) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice empty("", 0);
    grpc::ByteBuffer req(&empty, 1), resp;
    absl::Mutex mu;
    bool done = false;
    const auto t0 = Clock::now();
    generic->UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                       &req, &resp, [&](grpc::Status) {
                         absl::MutexLock lock(&mu);
                         done = true;
                       });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    out->Add(Ms(Clock::now() - t0));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = "build/server/xl-scheduler";
  int nodes = 10000;
  double seconds = 10;
  CLI::App app{"metrics_bench: the scheduler's /metrics at fleet size, and "
               "what scraping it costs the API and the agents"};
  app.add_option("--scheduler-binary", binary, "the xl-scheduler to run")
      ->capture_default_str();
  app.add_option("--nodes", nodes, "simulated nodes (8 GPUs each)")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "length of each measurement")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  char dir_template[] = "/tmp/xl-metrics-bench-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  xl::bench::InstallSchedulerReaper();
  auto sched = xl::bench::SchedulerProcess::Start(
      binary, dir,
      {"--metrics-listen", "127.0.0.1:0", "--metrics-port-file",
       dir + "/mport", "--estimate-jobs", "0"});
  if (!sched.ok()) {
    fprintf(stderr, "metrics_bench: %s\n",
            std::string(sched.status().message()).c_str());
    return 1;
  }
  int mport = 0;
  {
    std::ifstream in(dir + "/mport");
    in >> mport;
  }
  xl::bench::FleetOptions fo;
  fo.target = (*sched)->address();
  fo.nodes = nodes;
  xl::bench::SimulatedFleet fleet(fo, nullptr);
  fleet.Start();
  if (!fleet.WaitRegistered(std::chrono::seconds(60 + nodes / 100))) {
    fprintf(stderr, "metrics_bench: only %ld of %d nodes registered\n",
            static_cast<long>(fleet.Counters().nodes_registered), nodes);
    return 1;
  }
  // The fleet full of 1-node 8-GPU jobs, and as many again pending.
  auto channel =
      grpc::CreateChannel(fo.target, grpc::InsecureChannelCredentials());
  auto stub = xl::v1::JobService::NewStub(channel);
  const int jobs = 2 * nodes;
  const auto submit_start = Clock::now();
  if (!xl::bench::SubmitAll(stub.get(), jobs, [](int n) {
        return xl::bench::GpuSubmitRequest("m-" + std::to_string(n), 8,
                                           3600 * 1000);
      })) {
    return 1;
  }
  const auto fill_deadline = Clock::now() + std::chrono::seconds(180);
  while (fleet.Counters().gpus_busy < int64_t{nodes} * 8 &&
         Clock::now() < fill_deadline) {
    usleep(100000);
  }
  fprintf(stderr, "metrics_bench: %d nodes, %d jobs submitted in %.1f s, "
          "%ld GPUs busy\n", nodes, jobs,
          Ms(Clock::now() - submit_start) / 1000,
          static_cast<long>(fleet.Counters().gpus_busy));

  grpc::GenericStub generic(channel);
  // Idle: no scrapes.
  LatencySamples health_idle;
  const size_t rtt_before = fleet.heartbeat_rtt().count();
  const double rtt_idle_p99 = fleet.heartbeat_rtt().Quantile(0.99);
  HealthChecks(&generic, seconds, &health_idle);
  // Scraped back to back on another thread.
  std::atomic<bool> stop{false};
  LatencySamples scrape_ms;
  long body = 0;
  std::thread scraper([&] {
    while (!stop) {
      const auto t0 = Clock::now();
      const long n = Scrape(mport);
      if (n < 0) {
        fprintf(stderr, "metrics_bench: a scrape failed\n");
        break;
      }
      body = n;
      scrape_ms.Add(Ms(Clock::now() - t0));
    }
  });
  LatencySamples health_scraped;
  HealthChecks(&generic, seconds, &health_scraped);
  stop = true;
  scraper.join();
  const double rtt_all_p99 = fleet.heartbeat_rtt().Quantile(0.99);

  printf("\n/metrics at fleet size: %d nodes, %d GPUs, %d jobs (%ld GPUs "
         "busy)\n\n",
         nodes, nodes * 8, jobs, static_cast<long>(fleet.Counters().gpus_busy));
  printf("%-34s %14s %14s\n", "", "idle", "scraped");
  printf("%-34s %14s %14.2f\n", "scrape p50 (ms)", "-", scrape_ms.Quantile(0.5));
  printf("%-34s %14s %14.2f\n", "scrape p99 (ms)", "-", scrape_ms.Quantile(0.99));
  printf("%-34s %14s %14zu\n", "scrapes", "-", scrape_ms.count());
  printf("%-34s %14s %14.0f\n", "body (KiB)", "-", body / 1024.0);
  printf("%-34s %14.3f %14.3f\n", "health check p50 (ms)",
         health_idle.Quantile(0.5), health_scraped.Quantile(0.5));
  printf("%-34s %14.3f %14.3f\n", "health check p99 (ms)",
         health_idle.Quantile(0.99), health_scraped.Quantile(0.99));
  printf("%-34s %14.2f %14.2f\n", "heartbeat RTT p99, cumulative (ms)",
         rtt_idle_p99, rtt_all_p99);
  printf("%-34s %14zu %14zu\n", "heartbeats measured", rtt_before,
         fleet.heartbeat_rtt().count());
  fleet.Stop();
  (*sched)->Stop();
  return 0;
}
