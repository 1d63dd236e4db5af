// xl-scheduler: the gRPC service that keeps jobs and nodes in SQLite and
// places each job, all or nothing, on agents.
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/duration.h"
#include "server/auth/token_store.h"
#include "server/dev_cluster.h"
#include "server/service/scheduler_server.h"
#include "server/store/db_lock.h"

#ifndef XL_VERSION
#define XL_VERSION "dev"
#endif

namespace {

int Fail(const std::string& msg) {
  fprintf(stderr, "xl-scheduler: %s\n", msg.c_str());
  return 1;
}

std::string LocalUser() {
  const char* user = getenv("USER");
  if (user != nullptr && *user != '\0') return user;
  if (const struct passwd* pw = getpwuid(getuid()); pw != nullptr) {
    return pw->pw_name;
  }
  return "admin";
}

std::string TimeText(absl::Time t) {
  if (t == absl::InfiniteFuture()) return "never";
  if (t == absl::InfinitePast()) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", t, absl::LocalTimeZone());
}

// `xl-scheduler token ...`: credentials managed on the database file, for
// when no scheduler runs on it (the first admin token, or recovery).
struct TokenCommand {
  std::string db, user, ttl, id, node;
  std::vector<std::string> groups;
  bool admin = false, join = false;
};

int RunTokenCommand(const std::string& verb, const TokenCommand& c) {
  if (c.db.empty()) return Fail("token: --db is required: the scheduler's SQLite file");
  // A running scheduler holds the database; it manages tokens itself.
  auto lock = xl::store::DbLock::Acquire(c.db);
  if (!lock.ok()) {
    return Fail(absl::StrCat(
        "token ", verb, ": ", lock.status().message(),
        "; while it runs, manage tokens through it as an admin: xlctl "
        "token ", verb, verb == "create" ? " --user U [--admin]" : "",
        verb == "revoke" ? " ID" : ""));
  }
  umask(077);  // a database made here is private, as the scheduler's is
  auto tokens = xl::auth::TokenStore::Open(c.db);
  if (!tokens.ok()) return Fail(std::string(tokens.status().message()));
  const absl::Time now = absl::Now();
  if (verb == "create") {
    absl::Duration ttl;
    const std::string ttl_text = c.ttl.empty() ? (c.join ? "1h" : "90d") : c.ttl;
    if (!xl::ParseLifetime(ttl_text, &ttl)) {
      return Fail(absl::StrCat("--ttl: '", ttl_text,
                               "' is not a duration; give one such as 1h, "
                               "30d or never"));
    }
    if (c.join && !c.user.empty()) {
      return Fail("--user: a join token is for a node; use --node NAME");
    }
    auto made = (*tokens)->Create(
        c.join ? xl::auth::kJoinToken : xl::auth::kUserToken,
        c.join ? c.node : c.user, c.admin, ttl, now, c.groups);
    if (!made.ok()) return Fail(std::string(made.status().message()));
    printf("%s\n", made->second.c_str());
    fprintf(stderr,
            "xl-scheduler: token %s (%s%s%s) expires %s; it is shown only "
            "this once\n",
            made->first.id.c_str(), c.join ? "join" : "user ",
            c.join ? "" : c.user.c_str(), c.admin ? ", admin" : "",
            TimeText(made->first.expires).c_str());
    return 0;
  }
  if (verb == "revoke") {
    auto info = (*tokens)->Revoke(c.id, now);
    if (!info.ok()) return Fail(std::string(info.status().message()));
    printf("token %s revoked\n", c.id.c_str());
    return 0;
  }
  auto list = (*tokens)->List();
  if (!list.ok()) return Fail(std::string(list.status().message()));
  printf("%-16s  %-4s  %-20s  %-5s  %-25s  %s\n", "ID", "KIND", "USER/NODE",
         "ADMIN", "EXPIRES", "STATE");
  for (const auto& t : *list) {
    std::string state = "valid";
    if (t.revoked != absl::InfinitePast()) {
      state = t.used_by.empty() ? "revoked" : "used by " + t.used_by;
    } else if (now >= t.expires) {
      state = "expired";
    }
    printf("%-16s  %-4s  %-20s  %-5s  %-25s  %s\n", t.id.c_str(),
           t.kind.c_str(), t.user.c_str(), t.admin ? "yes" : "no",
           TimeText(t.expires).c_str(), state.c_str());
  }
  return 0;
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
                 "first port of the range MASTER_PORT is drawn from at "
                 "random (1000 ports per master address)")
      ->capture_default_str();
  app.add_option("--retention", retention,
                 "forget finished jobs (with their events, logs and metrics) "
                 "this long after they end: 90m, 12h, 30d")
      ->capture_default_str();
  app.add_option("--retention-log-bytes", retention_log_bytes,
                 "keep at most this many bytes of finished jobs' output; the "
                 "oldest go first")
      ->capture_default_str();
  app.add_option("--max-output-bytes-per-job",
                 opts.controller.max_output_bytes_per_job,
                 "what one job's stored logs, metrics and events may weigh; "
                 "past it the oldest are dropped as new output comes (the "
                 "job's events say so)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1} << 16, int64_t{1} << 50));
  app.add_option("--reservations", opts.controller.reservations,
                 "how many blocked jobs get reservations (backfill): the "
                 "nodes and time each could start on, from running jobs' "
                 "time limits, held so smaller jobs cannot starve it (0: "
                 "none, place greedily)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app.add_option("--preemption", opts.controller.preemption,
                 "blocked jobs may preempt running jobs of a lower priority "
                 "(whole gangs, requeued without spending a retry)")
      ->capture_default_str();
  app.add_option("--preempt-across-queues", opts.controller.preempt_across_queues,
                 "priority preemption may stop jobs of other queues too "
                 "(by default only of the preemptor's queue; reclaiming lent "
                 "quota crosses queues of a cohort either way)")
      ->capture_default_str();
  app.add_option("--queues", opts.queues_file,
                 "a YAML file of queues ({queues: [{name, weight, cohort, "
                 "quotas, ...}]}, see README \"Queues and fair share\") created or updated "
                 "at start; queues it does not name are left as they are")
      ->check(CLI::ExistingFile);
  std::string half_life = "7d", max_age = "7d", grow_after = "10m",
              estimate_interval = "1m", log_settle = "10s",
              brake_max = "5m";
  app.add_option("--lost-brake-fraction",
                 opts.controller.lost_brake_fraction,
                 "when more than this part of the nodes (two at least) is "
                 "silent past the heartbeat timeout at once, none is counted "
                 "lost and no job is requeued (the scheduler's own network is "
                 "the likelier cause) for up to --lost-brake-max; 1: never")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--lost-brake-max", brake_max,
                 "how long --lost-brake-fraction holds before the silent "
                 "nodes are counted lost after all")
      ->capture_default_str();
  app.add_option("--log-settle", log_settle,
                 "a rank's exit is acted on once the output its agent says "
                 "it wrote before exiting is stored, or after waiting this "
                 "long for it (so `xlctl logs` after `xlctl wait` shows "
                 "everything)")
      ->capture_default_str();
  app.add_option("--estimate-interval", estimate_interval,
                 "how often the estimated starts of pending jobs are made "
                 "(see --estimate-jobs)")
      ->capture_default_str();
  app.add_option("--elastic-grow-after", grow_after,
                 "an elastic job (resources.min_nodes) running on fewer nodes "
                 "than it asked for grows onto free nodes once its attempt "
                 "has run this long (each resize restarts it from its "
                 "checkpoint, so not too often; never: elastic jobs do not "
                 "grow)")
      ->capture_default_str();
  app.add_option("--estimate-jobs", opts.controller.estimate_jobs,
                 "every minute, on a thread of its own, estimate when the "
                 "first N pending jobs start (xlctl get: Estimated start); "
                 "0: only jobs with a reservation have one")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  xl::scheduler::PriorityWeights& weights = opts.controller.priority_weights;
  app.add_option("--fair-share-half-life", half_life,
                 "GPU usage counts half after this long (Slurm's "
                 "PriorityDecayHalfLife)")
      ->capture_default_str();
  app.add_option("--fair-share-weight", weights.fair_share,
                 "effective priority = priority + this x fair-share factor "
                 "(0..1) + --age-weight x age factor (0..1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--age-weight", weights.age,
                 "weight of time pending in the effective priority")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--max-age", max_age,
                 "time pending after which the age factor is 1")
      ->capture_default_str();
  xl::state::SubmitLimits& limits = opts.controller.submit_limits;
  app.add_option("--max-pending-per-user", limits.max_pending,
                 "PENDING jobs one user may have; more submits get "
                 "RESOURCE_EXHAUSTED (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-pending-bytes-per-user", limits.max_pending_bytes,
                 "bytes the specs of one user's PENDING jobs may hold (their "
                 "env and command mostly); more get RESOURCE_EXHAUSTED (0: "
                 "no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--submit-rate-per-user", limits.rate,
                 "submits per second one user may sustain (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--submit-burst-per-user", limits.burst,
                 "submits one user may make at once before the rate applies")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e9));
  app.add_option("--max-streams", opts.max_streams,
                 "open watch and log streams the scheduler serves at once; "
                 "more get RESOURCE_EXHAUSTED (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-streams-per-user", opts.max_streams_per_user,
                 "open watch and log streams one user may hold (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--port-file", port_file,
                 "write the bound port to this file once listening");
  std::string metrics_port_file;
  app.add_option("--metrics-listen", opts.metrics_listen,
                 "HOST:PORT of an HTTP port (HTTPS when the scheduler has "
                 "TLS) serving Prometheus /metrics, the web dashboard at / "
                 "and its JSON API at /api/ (behind the API's tokens); "
                 "e.g. 0.0.0.0:9400 (port 0: any free one)");
  app.add_flag("--metrics-without-token", opts.metrics_without_token,
               "with TLS and tokens on: serve /metrics without a token "
               "(its per-job series name jobs, users and their progress; "
               "by default Prometheus sends a user token)");
  app.add_option("--dashboard-host", opts.dashboard_hosts,
                 "without TLS: a host name the dashboard and /metrics may be "
                 "reached by besides IP addresses, localhost and this "
                 "machine's hostname (requests naming another Host are "
                 "refused, against DNS rebinding); repeat for more");
  app.add_option("--metrics-port-file", metrics_port_file,
                 "write the --metrics-listen port to this file once "
                 "listening");
  app.set_config("--config", "",
                 "read options from this file first (TOML: one `name = "
                 "value` line per long option, e.g. listen = "
                 "\"0.0.0.0:7070\"); flags given on the command line win");
  // A misspelt key in the file is an error, as a misspelt flag is.
  app.allow_config_extras(CLI::config_extras_mode::error);
  std::string dev_env;
  app.add_option("--tls-cert", opts.tls_cert_file,
                 "the server's TLS certificate (PEM); with --tls-key and "
                 "--tls-ca it turns on TLS and auth: users need a token, "
                 "agents a node certificate");
  app.add_option("--tls-key", opts.tls_key_file, "the key of --tls-cert");
  app.add_option("--tls-ca", opts.tls_ca_file,
                 "the CA (PEM) that agents' node certificates must chain to");
  app.add_option("--ca-cert", opts.ca_cert_file,
                 "CA certificate that signs node certificates for join tokens");
  app.add_option("--ca-key", opts.ca_key_file, "the key of --ca-cert");
  app.add_flag("--insecure", opts.insecure,
               "serve a non-loopback --listen address without TLS or tokens: "
               "anyone who can reach the port can act as anyone");
  app.add_flag("--accept-unmarked-node-certificates",
               opts.accept_unmarked_node_certificates,
               "take any clientAuth-only certificate from the CA as the node "
               "its common name says, without the subjectAltName URI "
               "xl-node:<name> (for node certificates made before the mark; "
               "a person's client certificate from that CA then passes as a "
               "node too): reissue them and drop this");
  app.add_option("--dev-env", dev_env,
                 "with --dev: also write the shell lines that point xlctl at "
                 "the cluster (XL_SERVER, XL_TLS_CA, XL_TOKEN) to this file");
  TokenCommand token;
  CLI::App* token_cmd = app.add_subcommand(
      "token",
      "manage credentials on the database file while no scheduler runs on "
      "it (while one runs: xlctl token, as an admin)");
  token_cmd->require_subcommand(1);
  CLI::App* token_create = token_cmd->add_subcommand(
      "create", "make a user token (printed once) or, with --join, a "
                "single-use join token for an agent");
  token_create->add_option("--db", token.db, "the scheduler's SQLite file")
      ->required();
  token_create->add_option("--user", token.user, "the user the token is for");
  token_create->add_flag("--admin", token.admin,
                         "the user may drain nodes, cancel any job, set any "
                         "priority and manage tokens");
  token_create->add_option("--group", token.groups,
                           "a group of the user's, for queues that admit "
                           "groups (repeat for more)");
  token_create->add_option("--ttl", token.ttl,
                           "lifetime: 1h, 30d or never (default: user 90d, "
                           "join 1h)");
  token_create->add_flag("--join", token.join,
                         "a join token: an agent exchanges it once for its "
                         "node certificate");
  token_create->add_option("--node", token.node,
                           "with --join: the only node name it may join as "
                           "(needed to re-join a known node)");
  CLI::App* token_revoke =
      token_cmd->add_subcommand("revoke", "revoke a token by its id");
  token_revoke->add_option("--db", token.db, "the scheduler's SQLite file")
      ->required();
  token_revoke->add_option("ID", token.id, "the token's id")->required();
  CLI::App* token_list = token_cmd->add_subcommand(
      "list", "every token: id, user, expiry, state (never the secret)");
  token_list->add_option("--db", token.db, "the scheduler's SQLite file")
      ->required();
  app.footer(
      "Stops cleanly on SIGINT or SIGTERM. Exit status: 0 after a clean stop, "
      "1 when it cannot start (the message says why).");
  opts.version = XL_VERSION;
  CLI11_PARSE(app, argc, argv);
  if (token_cmd->parsed()) {
    if (token_create->parsed()) {
      if (!token.join && token.user.empty()) {
        return Fail("token create: --user is required (or --join)");
      }
      return RunTokenCommand("create", token);
    }
    return RunTokenCommand(token_revoke->parsed() ? "revoke" : "list", token);
  }
  if (hb_interval_s <= 0 || hb_timeout_s <= hb_interval_s) {
    return Fail(
        "--heartbeat-timeout must be larger than --heartbeat-interval > 0");
  }
  // "7d", "12h", "90m" (absl's durations stop at hours).
  auto days_or_duration = [](const std::string& text, absl::Duration* out) {
    return xl::ParseLifetime(text, out) && *out != absl::InfiniteDuration();
  };
  if (!std::isfinite(weights.fair_share) || !std::isfinite(weights.age)) {
    return Fail("--fair-share-weight and --age-weight take numbers from 0 "
                "to 1e9");
  }
  for (auto [flag, text, out] :
       {std::make_tuple("--fair-share-half-life", &half_life,
                        &weights.half_life),
        std::make_tuple("--max-age", &max_age, &weights.max_age),
        std::make_tuple("--elastic-grow-after", &grow_after,
                        &opts.controller.elastic_grow_after),
        std::make_tuple("--estimate-interval", &estimate_interval,
                        &opts.controller.estimate_interval),
        std::make_tuple("--log-settle", &log_settle,
                        &opts.controller.log_settle),
        std::make_tuple("--lost-brake-max", &brake_max,
                        &opts.controller.lost_brake_max)}) {
    if (out == &opts.controller.elastic_grow_after && *text == "never") {
      *out = absl::InfiniteDuration();
      continue;
    }
    if (!days_or_duration(*text, out)) {
      return Fail(absl::StrCat(flag, ": '", *text,
                               "' is not a positive duration; give one such "
                               "as 7d, 12h or 90m"));
    }
  }
  {
    absl::Duration age;
    if (!days_or_duration(retention, &age)) {
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
  std::string dev_token;
  if (dev) {
    if (!opts.db.empty()) return Fail("--dev makes its own database; drop --db");
    auto c = xl::server::DevCluster::Create(keep);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    cluster.emplace(std::move(*c));
    opts.db = cluster->db_path();
    // The dev cluster is secure too: TLS, node certificates and an admin
    // token for whoever started it.
    if (!opts.tls_cert_file.empty() || opts.insecure) {
      return Fail("--dev makes its own certificates; drop --tls-* and --insecure");
    }
    auto made = cluster->MakeCredentials(agents, LocalUser());
    if (!made.ok()) return Fail(std::string(made.status().message()));
    dev_token = *made;
    opts.tls_cert_file = cluster->server_cert();
    opts.tls_key_file = cluster->server_key();
    opts.tls_ca_file = cluster->ca_cert();
    opts.ca_cert_file = cluster->ca_cert();
    opts.ca_key_file = cluster->ca_key();
  } else if (opts.db.empty()) {
    return Fail(
        "--db is required: give the SQLite file to keep jobs in (for example "
        "--db /var/lib/xl/xl.db), or use --dev to try xl on one machine");
  }
  // The database holds every job's environment and the tokens' hashes:
  // readable by this user only (SQLite gives its -wal and -shm files the
  // database's mode).
  const mode_t old_umask = umask(077);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string f = opts.db + suffix;
    if (access(f.c_str(), F_OK) == 0 && chmod(f.c_str(), 0600) != 0) {
      fprintf(stderr, "xl-scheduler: WARNING: cannot make %s private: %s\n",
              f.c_str(), strerror(errno));
    }
  }
  auto server = xl::service::SchedulerServer::Start(opts);
  umask(old_umask);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  printf("xl-scheduler: listening on %s (db %s; %s)\n",
         (*server)->address().c_str(), opts.db.c_str(),
         (*server)->auth_enabled() ? "TLS, tokens and node certificates"
                                   : "no TLS: callers name themselves");
  if (!(*server)->security_warning().empty()) {
    fprintf(stderr, "xl-scheduler: WARNING: %s\n",
            (*server)->security_warning().c_str());
  }
  if (!(*server)->metrics_url().empty()) {
    printf("xl-scheduler: metrics on %s/metrics, dashboard on %s/\n",
           (*server)->metrics_url().c_str(), (*server)->metrics_url().c_str());
  }
  fflush(stdout);
  if (dev) {
    const std::string env_file = cluster->dir() + "/xlctl.env";
    for (const std::string& f : {env_file, dev_env}) {
      if (f.empty()) continue;
      auto st = cluster->WriteClientEnv(f, (*server)->address(), dev_token);
      if (!st.ok()) return Fail(std::string(st.message()));
    }
  }
  for (const auto& [file, port] :
       {std::make_pair(port_file, (*server)->port()),
        std::make_pair(metrics_port_file, (*server)->metrics_port())}) {
    if (file.empty()) continue;
    std::ofstream out(file + ".tmp");
    out << port << "\n";
    out.close();
    rename((file + ".tmp").c_str(), file.c_str());
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
    printf("xl-scheduler: dev cluster in %s with %d agents; an admin token "
           "for you is in %s/tls/token; try: . %s/xlctl.env && xlctl nodes\n",
           cluster->dir().c_str(), agents, cluster->dir().c_str(),
           cluster->dir().c_str());
    fflush(stdout);
  }
  int sig = 0;
  sigwait(&signals, &sig);
  fprintf(stderr, "xl-scheduler: stopping (signal %d)\n", sig);
  if (cluster) cluster->StopAgents(10);
  (*server)->Shutdown();
  return 0;
}
