// xl-scheduler: the gRPC service that keeps jobs and nodes in SQLite and
// places each job, all or nothing, on agents.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/dev_cluster.h"
#include "server/service/scheduler_server.h"

namespace {

int Fail(const std::string& msg) {
  fprintf(stderr, "xl-scheduler: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Lock-order checks run in tests; in the server they cost a graph lookup
  // on every lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{
      "xl-scheduler: keeps jobs and node inventories in SQLite and places "
      "each job, all or nothing, on xl-agent nodes.\n\n"
      "  xl-scheduler --listen 127.0.0.1:7070 --db /var/lib/xl/xl.db\n"
      "  xl-scheduler --dev --agents 2      # one-machine cluster for trying xl"};
  xl::service::ServerOptions opts;
  bool dev = false, keep = false;
  int agents = 2;
  std::vector<std::string> inventories;
  std::string agent_binary, port_file;
  double hb_interval_s = 1.0, hb_timeout_s = 10.0, lease_s = 0;
  std::string retention = "30d";
  uint64_t retention_log_bytes = opts.controller.retention.max_log_bytes;
  app.add_option("--listen", opts.listen,
                 "HOST:PORT to serve the API on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--db", opts.db,
                 "SQLite file holding jobs and nodes (created if missing)");
  app.add_flag("--dev", dev,
               "one-machine mode: a throw-away database and --agents local "
               "xl-agent processes");
  app.add_option("--agents", agents, "with --dev: how many agents to start")
      ->capture_default_str();
  app.add_option("--agent-inventory", inventories,
                 "with --dev: inventory file for the i-th agent (repeat)");
  app.add_option("--agent-binary", agent_binary,
                 "with --dev: the xl-agent to start (default: next to this "
                 "binary, or in PATH)");
  app.add_flag("--keep-dev-dir", keep, "with --dev: keep the directory");
  app.add_option("--advertise", opts.controller.advertise_address,
                 "address ranks use to reach the scheduler (XL_SCHEDULER); "
                 "default: the listen address");
  app.add_option("--heartbeat-interval", hb_interval_s,
                 "seconds between agent heartbeats")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout", hb_timeout_s,
                 "seconds of silence after which a node is lost and its jobs "
                 "requeued")
      ->capture_default_str();
  app.add_option("--lease", lease_s,
                 "seconds an agent keeps its ranks running without hearing "
                 "from the scheduler (default: the heartbeat timeout); "
                 "longer rides out longer scheduler outages and makes a "
                 "lost node's jobs wait as long before running elsewhere");
  app.add_option("--master-port-base", opts.controller.master_port_base,
                 "first port handed out as MASTER_PORT")
      ->capture_default_str();
  app.add_option("--retention", retention,
                 "forget finished jobs (with their events, logs and metrics) "
                 "this long after they end: 90m, 12h, 30d")
      ->capture_default_str();
  app.add_option("--retention-log-bytes", retention_log_bytes,
                 "keep at most this many bytes of finished jobs' output; the "
                 "oldest go first")
      ->capture_default_str();
  app.add_option("--port-file", port_file,
                 "write the bound port to this file once listening");
  app.footer(
      "Stops cleanly on SIGINT or SIGTERM. Exit status: 0 after a clean stop, "
      "1 when it cannot start (the message says why).");
  CLI11_PARSE(app, argc, argv);
  if (hb_interval_s <= 0 || hb_timeout_s <= hb_interval_s) {
    return Fail(
        "--heartbeat-timeout must be larger than --heartbeat-interval > 0");
  }
  {
    // absl's durations stop at hours; days are what retention is counted in.
    absl::Duration age;
    int64_t days = 0;
    bool ok = !retention.empty() && retention.back() == 'd'
                  ? absl::SimpleAtoi(retention.substr(0, retention.size() - 1),
                                     &days) &&
                        (age = absl::Hours(24 * days), true)
                  : absl::ParseDuration(retention, &age);
    if (!ok || age <= absl::ZeroDuration() || age == absl::InfiniteDuration()) {
      return Fail(absl::StrCat("--retention: '", retention,
                               "' is not a positive duration; give one such "
                               "as 30d, 12h or 90m"));
    }
    opts.controller.retention.max_age = age;
    opts.controller.retention.max_log_bytes =
        static_cast<int64_t>(retention_log_bytes);
  }
  opts.controller.heartbeat_interval = absl::Seconds(hb_interval_s);
  opts.controller.heartbeat_timeout = absl::Seconds(hb_timeout_s);
  if (lease_s != 0 && lease_s < hb_timeout_s) {
    return Fail("--lease must be at least --heartbeat-timeout: an agent "
                "must not stop its ranks before the scheduler gives up on "
                "its node");
  }
  opts.controller.lease = absl::Seconds(lease_s != 0 ? lease_s : hb_timeout_s);

  // Signals are taken by sigwait below; every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::optional<xl::server::DevCluster> cluster;
  if (dev) {
    if (!opts.db.empty()) return Fail("--dev makes its own database; drop --db");
    auto c = xl::server::DevCluster::Create(keep);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    cluster.emplace(std::move(*c));
    opts.db = cluster->db_path();
  } else if (opts.db.empty()) {
    return Fail(
        "--db is required: give the SQLite file to keep jobs in (for example "
        "--db /var/lib/xl/xl.db), or use --dev to try xl on one machine");
  }
  auto server = xl::service::SchedulerServer::Start(opts);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  printf("xl-scheduler: listening on %s (db %s)\n", (*server)->address().c_str(),
         opts.db.c_str());
  fflush(stdout);
  if (!port_file.empty()) {
    std::ofstream out(port_file + ".tmp");
    out << (*server)->port() << "\n";
    out.close();
    rename((port_file + ".tmp").c_str(), port_file.c_str());
  }
  if (dev) {
    if (agent_binary.empty()) {
      auto found = xl::server::FindAgentBinary();
      if (!found.ok()) return Fail(std::string(found.status().message()));
      agent_binary = *found;
    }
    auto st = cluster->StartAgents(agent_binary, (*server)->address(), agents,
                                   inventories);
    if (!st.ok()) return Fail(std::string(st.message()));
    printf("xl-scheduler: dev cluster in %s with %d agents; try: "
           "XL_SERVER=%s xlctl nodes\n",
           cluster->dir().c_str(), agents, (*server)->address().c_str());
    fflush(stdout);
  }
  int sig = 0;
  sigwait(&signals, &sig);
  fprintf(stderr, "xl-scheduler: stopping (signal %d)\n", sig);
  if (cluster) cluster->StopAgents(10);
  (*server)->Shutdown();
  return 0;
}
