#include "server/scheduler_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/duration.h"
#include "common/leader.h"

namespace xl::server {
namespace {

// Adds the options of the API's address and the database.
void AddStoreOptions(CLI::App* app, Flags* f) {
  app->add_option("--listen", f->opts.listen,
                  "HOST:PORT to serve the API on (port 0: any free port)")
      ->capture_default_str();
  app->add_option("--db", f->opts.db,
                  "SQLite file holding jobs and nodes (created if missing)");
}

// Adds the options of the one-machine cluster of --dev.
void AddDevOptions(CLI::App* app, Flags* f) {
  app->add_flag("--dev", f->dev,
                "one-machine mode: a throw-away database and --agents local "
                "xl-agent processes");
  app->add_option("--agents", f->agents, "with --dev: how many agents to start")
      ->capture_default_str();
  app->add_option("--agent-inventory", f->inventories,
                  "with --dev: inventory file for the i-th agent (repeat)");
  app->add_option("--agent-binary", f->agent_binary,
                  "with --dev: the xl-agent to start (default: next to this "
                  "binary, or in PATH)");
  app->add_flag("--keep-dev-dir", f->keep, "with --dev: keep the directory");
}

// Adds the options of how ranks reach the scheduler and how long agents may be
// silent.
void AddAgentOptions(CLI::App* app, Flags* f) {
  app->add_option("--advertise", f->opts.controller.advertise_address,
                  "address ranks use to reach the scheduler (XL_SCHEDULER); "
                  "default: the listen address");
  app->add_option("--heartbeat-interval", f->hb_interval_s,
                  "seconds between agent heartbeats")
      ->capture_default_str();
  app->add_option("--heartbeat-timeout", f->hb_timeout_s,
                  "seconds of silence after which a node is lost and its jobs "
                  "requeued")
      ->capture_default_str();
  app->add_option("--lease", f->lease_s,
                  "seconds an agent keeps its ranks running without hearing "
                  "from the scheduler (default: the heartbeat timeout); "
                  "longer rides out longer scheduler outages and makes a "
                  "lost node's jobs wait as long before running elsewhere");
  app->add_option("--master-port-base", f->opts.controller.master_port_base,
                  "first port of the range MASTER_PORT is drawn from at "
                  "random (1000 ports per master address)")
      ->capture_default_str();
}

// Adds the options of how long finished jobs and their output are kept.
void AddRetentionOptions(CLI::App* app, Flags* f) {
  app->add_option("--retention", f->retention,
                  "forget finished jobs (with their events, logs and metrics) "
                  "this long after they end: 90m, 12h, 30d")
      ->capture_default_str();
  app->add_option("--retention-log-bytes", f->retention_log_bytes,
                  "keep at most this many bytes of finished jobs' output; the "
                  "oldest go first")
      ->capture_default_str();
  app->add_option("--max-output-bytes-per-job",
                  f->opts.controller.max_output_bytes_per_job,
                  "what one job's stored logs, metrics and events may weigh; "
                  "past it the oldest are dropped as new output comes (the "
                  "job's events say so)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1} << 16, int64_t{1} << 50));
}

// Adds the options of backfill, preemption and queues.
void AddPlacementOptions(CLI::App* app, Flags* f) {
  app->add_option("--reservations", f->opts.controller.reservations,
                  "how many blocked jobs get reservations (backfill): the "
                  "nodes and time each could start on, from running jobs' "
                  "time limits, held so smaller jobs cannot starve it (0: "
                  "none, place greedily)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app->add_option("--preemption", f->opts.controller.preemption,
                  "blocked jobs may preempt running jobs of a lower priority "
                  "(whole gangs, requeued without spending a retry)")
      ->capture_default_str();
  app->add_option("--preempt-across-queues",
                  f->opts.controller.preempt_across_queues,
                  "priority preemption may stop jobs of other queues too "
                  "(by default only of the preemptor's queue; reclaiming lent "
                  "quota crosses queues of a cohort either way)")
      ->capture_default_str();
  app->add_option("--queues", f->opts.queues_file,
                  "a YAML file of queues ({queues: [{name, weight, cohort, "
                  "quotas, ...}]}, see README \"Queues and fair share\") "
                  "created or updated "
                  "at start; queues it does not name are left as they are")
      ->check(CLI::ExistingFile);
}

// Adds the options of when silent nodes count as lost and exits are acted on.
void AddLostNodeOptions(CLI::App* app, Flags* f) {
  app->add_option("--lost-brake-fraction",
                  f->opts.controller.lost_brake_fraction,
                  "when more than this part of the nodes (two at least) is "
                  "silent past the heartbeat timeout at once, none is counted "
                  "lost and no job is requeued (the scheduler's own network is "
                  "the likelier cause) for up to --lost-brake-max; 1: never")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--lost-brake-max", f->brake_max,
                  "how long --lost-brake-fraction holds before the silent "
                  "nodes are counted lost after all")
      ->capture_default_str();
  app->add_option("--log-settle", f->log_settle,
                  "a rank's exit is acted on once the output its agent says "
                  "it wrote before exiting is stored, or after waiting this "
                  "long for it (so `xlctl logs` after `xlctl wait` shows "
                  "everything)")
      ->capture_default_str();
}

// Adds the options of estimated starts and elastic growth.
void AddEstimateOptions(CLI::App* app, Flags* f) {
  app->add_option("--estimate-interval", f->estimate_interval,
                  "how often the estimated starts of pending jobs are made "
                  "(see --estimate-jobs)")
      ->capture_default_str();
  app->add_option("--elastic-grow-after", f->grow_after,
                  "an elastic job (resources.min_nodes) running on fewer nodes "
                  "than it asked for grows onto free nodes once its attempt "
                  "has run this long (each resize restarts it from its "
                  "checkpoint, so not too often; never: elastic jobs do not "
                  "grow)")
      ->capture_default_str();
  app->add_option("--estimate-jobs", f->opts.controller.estimate_jobs,
                  "every minute, on a thread of its own, estimate when the "
                  "first N pending jobs start (xlctl get: Estimated start); "
                  "0: only jobs with a reservation have one")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
}

// Adds the options of fair share and age in the effective priority.
void AddPriorityOptions(CLI::App* app, Flags* f) {
  app->add_option("--fair-share-half-life", f->half_life,
                  "GPU usage counts half after this long (Slurm's "
                  "PriorityDecayHalfLife)")
      ->capture_default_str();
  app->add_option("--fair-share-weight",
                  f->opts.controller.priority_weights.fair_share,
                  "effective priority = priority + this x fair-share factor "
                  "(0..1) + --age-weight x age factor (0..1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  app->add_option("--age-weight", f->opts.controller.priority_weights.age,
                  "weight of time pending in the effective priority")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  app->add_option("--max-age", f->max_age,
                  "time pending after which the age factor is 1")
      ->capture_default_str();
}

// Adds the options of per-user submit and stream limits.
void AddLimitOptions(CLI::App* app, Flags* f) {
  app->add_option("--max-pending-per-user",
                  f->opts.controller.submit_limits.max_pending,
                  "PENDING jobs one user may have; more submits get "
                  "RESOURCE_EXHAUSTED (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-pending-bytes-per-user",
                  f->opts.controller.submit_limits.max_pending_bytes,
                  "bytes the specs of one user's PENDING jobs may hold (their "
                  "env and command mostly); more get RESOURCE_EXHAUSTED (0: "
                  "no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--submit-rate-per-user",
                  f->opts.controller.submit_limits.rate,
                  "submits per second one user may sustain (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--submit-burst-per-user",
                  f->opts.controller.submit_limits.burst,
                  "submits one user may make at once before the rate applies")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e9));
  app->add_option("--max-streams", f->opts.max_streams,
                  "open watch and log streams the scheduler serves at once; "
                  "more get RESOURCE_EXHAUSTED (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-streams-per-user", f->opts.max_streams_per_user,
                  "open watch and log streams one user may hold (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

// Adds the options of port files, /metrics and the dashboard, the config file.
void AddEndpointOptions(CLI::App* app, Flags* f) {
  app->add_option("--port-file", f->port_file,
                  "write the bound port to this file once listening");
  app->add_option("--metrics-listen", f->opts.metrics_listen,
                  "HOST:PORT of an HTTP port (HTTPS when the scheduler has "
                  "TLS) serving Prometheus /metrics, the web dashboard at / "
                  "and its JSON API at /api/ (behind the API's tokens); "
                  "e.g. 0.0.0.0:9400 (port 0: any free one)");
  app->add_flag("--metrics-without-token", f->opts.metrics_without_token,
                "with TLS and tokens on: serve /metrics without a token "
                "(its per-job series name jobs, users and their progress; "
                "by default Prometheus sends a user token)");
  app->add_option("--dashboard-host", f->opts.dashboard_hosts,
                  "without TLS: a host name the dashboard and /metrics may be "
                  "reached by besides IP addresses, localhost and this "
                  "machine's hostname (requests naming another Host are "
                  "refused, against DNS rebinding); repeat for more");
  app->add_option("--metrics-port-file", f->metrics_port_file,
                  "write the --metrics-listen port to this file once "
                  "listening");
  app->set_config("--config", "",
                  "read options from this file first (TOML: one `name = "
                  "value` line per long option, e.g. listen = "
                  "\"0.0.0.0:7070\"); flags given on the command line win");
  // A misspelt key in the file is an error, as a misspelt flag is.
  app->allow_config_extras(CLI::config_extras_mode::error);
}

// Adds the options of a replicated scheduler.
void AddReplicaOptions(CLI::App* app, Flags* f) {
  app->add_option("--replica-id", f->opts.replica.id,
                  "run as replica N of a scheduler replicated on Raft (1, 2, "
                  "3, ...; with --peers): every replica keeps its own --db, "
                  "one leads and acts, the others follow and take over "
                  "within seconds when it goes; see README, Running on many "
                  "machines");
  app->add_option("--peers", f->peers,
                  "with --replica-id: every replica as ID=HOST:RAFT_PORT, "
                  "comma-separated, the same on all of them (this one "
                  "included), e.g. 1=s1:7071,2=s2:7071,3=s3:7071; the Raft "
                  "port is apart from the API's; a replica's API address is "
                  "HOST and --listen's port, or give it after a slash: "
                  "1=s1:7071/s1:7070");
  app->add_option("--raft-dir", f->opts.replica.raft_dir,
                  "with --replica-id: the directory of the Raft log "
                  "(default: --db's path + .raft); never shared");
  app->add_option("--election-timeout", f->election_timeout,
                  "with --replica-id: a follower that hears nothing from the "
                  "leader this long starts an election (default 1s; "
                  "failover takes about twice this; 100ms to 4s)");
  app->add_option("--snapshot-every", f->opts.replica.snapshot_every,
                  "with --replica-id: snapshot the database into the Raft "
                  "log's directory every this many log entries (default "
                  "16384), dropping the entries before it but the last "
                  "quarter (at most 4096); "
                  "a replica further behind is sent the leader's snapshot")
      ->check(CLI::Range(64u, 1u << 30));
  app->add_option("--replicas", f->replicas,
                  "with --dev: run this many scheduler replicas (1 or 3) on "
                  "this machine; try failover by killing the leader");
}

// Adds the options of TLS, the CA for join tokens, and their opt-outs.
void AddSecurityOptions(CLI::App* app, Flags* f) {
  app->add_option("--tls-cert", f->opts.tls_cert_file,
                  "the server's TLS certificate (PEM); with --tls-key and "
                  "--tls-ca it turns on TLS and auth: users need a token, "
                  "agents a node certificate");
  app->add_option("--tls-key", f->opts.tls_key_file, "the key of --tls-cert");
  app->add_option("--tls-ca", f->opts.tls_ca_file,
                  "the CA (PEM) that agents' node certificates must chain to");
  app->add_option(
      "--ca-cert", f->opts.ca_cert_file,
      "CA certificate that signs node certificates for join tokens");
  app->add_option("--ca-key", f->opts.ca_key_file, "the key of --ca-cert");
  app->add_flag("--insecure", f->opts.insecure,
                "serve a non-loopback --listen address without TLS or tokens: "
                "anyone who can reach the port can act as anyone");
  app->add_flag("--accept-unmarked-node-certificates",
                f->opts.accept_unmarked_node_certificates,
                "take any clientAuth-only certificate from the CA as the node "
                "its common name says, without the subjectAltName URI "
                "xl-node:<name> (for node certificates made before the mark; "
                "a person's client certificate from that CA then passes as a "
                "node too): reissue them and drop this");
  app->add_option("--dev-env", f->dev_env,
                  "with --dev: also write the shell lines that point xlctl at "
                  "the cluster (XL_SERVER, XL_TLS_CA, XL_TOKEN) to this file");
}

}  // namespace

void AddOptions(CLI::App* app, Flags* f) {
  for (auto add : {AddStoreOptions, AddDevOptions, AddAgentOptions,
                   AddRetentionOptions, AddPlacementOptions, AddLostNodeOptions,
                   AddEstimateOptions, AddPriorityOptions, AddLimitOptions,
                   AddEndpointOptions, AddSecurityOptions,
                   AddReplicaOptions}) {
    add(app, f);
  }
}

// Adds `xl-scheduler token create|revoke|list`.
TokenCommands AddTokenCommands(CLI::App* app, Flags* f) {
  CLI::App* token_cmd = app->add_subcommand(
      "token",
      "manage credentials on the database file while no scheduler runs on "
      "it (while one runs: xlctl token, as an admin)");
  token_cmd->require_subcommand(1);
  CLI::App* token_create = token_cmd->add_subcommand(
      "create",
      "make a user token (printed once) or, with --join, a "
      "single-use join token for an agent");
  token_create->add_option("--db", f->token.db, "the scheduler's SQLite file")
      ->required();
  token_create->add_option("--user", f->token.user,
                           "the user the token is for");
  token_create->add_flag("--admin", f->token.admin,
                         "the user may drain nodes, cancel any job, set any "
                         "priority and manage tokens");
  token_create->add_option("--group", f->token.groups,
                           "a group of the user's, for queues that admit "
                           "groups (repeat for more)");
  token_create->add_option("--ttl", f->token.ttl,
                           "lifetime: 1h, 30d or never (default: user 90d, "
                           "join 1h)");
  token_create->add_flag("--join", f->token.join,
                         "a join token: an agent exchanges it once for its "
                         "node certificate");
  token_create->add_option(
      "--token-file", f->token.token_file,
      "the same token on every replica of a replicated scheduler: when FILE "
      "exists, store the token it holds (as an earlier create wrote it; "
      "again on the same database changes nothing), else make one and "
      "write it to FILE (mode 0600)");
  token_create->add_option("--node", f->token.node,
                           "with --join: the only node name it may join as "
                           "(needed to re-join a known node)");
  CLI::App* token_revoke =
      token_cmd->add_subcommand("revoke", "revoke a token by its id");
  token_revoke->add_option("--db", f->token.db, "the scheduler's SQLite file")
      ->required();
  token_revoke->add_option("ID", f->token.id, "the token's id")->required();
  CLI::App* token_list = token_cmd->add_subcommand(
      "list", "every token: id, user, expiry, state (never the secret)");
  token_list->add_option("--db", f->token.db, "the scheduler's SQLite file")
      ->required();
  return {token_cmd, token_create, token_revoke};
}

// Checks the flags and turns their text into the controller's options.
// The error names the flag and the fix.
absl::Status ResolveFlags(Flags* f) {
  xl::control::ControllerOptions& c = f->opts.controller;
  if (f->hb_interval_s <= 0 || f->hb_timeout_s <= f->hb_interval_s) {
    return absl::InvalidArgumentError(
        "--heartbeat-timeout must be larger than --heartbeat-interval > 0");
  }
  // "7d", "12h", "90m" (absl's durations stop at hours).
  auto days_or_duration = [](const std::string& text, absl::Duration* out) {
    return xl::ParseLifetime(text, out) && *out != absl::InfiniteDuration();
  };
  xl::scheduler::PriorityWeights& weights = c.priority_weights;
  if (!std::isfinite(weights.fair_share) || !std::isfinite(weights.age)) {
    return absl::InvalidArgumentError(
        "--fair-share-weight and --age-weight take numbers from 0 to 1e9");
  }
  for (auto [flag, text, out] :
       {std::make_tuple("--fair-share-half-life", &f->half_life,
                        &weights.half_life),
        std::make_tuple("--max-age", &f->max_age, &weights.max_age),
        std::make_tuple("--elastic-grow-after", &f->grow_after,
                        &c.elastic_grow_after),
        std::make_tuple("--estimate-interval", &f->estimate_interval,
                        &c.estimate_interval),
        std::make_tuple("--log-settle", &f->log_settle, &c.log_settle),
        std::make_tuple("--lost-brake-max", &f->brake_max,
                        &c.lost_brake_max)}) {
    if (out == &c.elastic_grow_after && *text == "never") {
      *out = absl::InfiniteDuration();
      continue;
    }
    if (!days_or_duration(*text, out)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", *text,
                       "' is not a positive duration; give one such as 7d, "
                       "12h or 90m"));
    }
  }
  absl::Duration age;
  if (!days_or_duration(f->retention, &age)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retention: '", f->retention,
                     "' is not a positive duration; give one such as 30d, "
                     "12h or 90m"));
  }
  c.retention.max_age = age;
  c.retention.max_log_bytes = static_cast<int64_t>(f->retention_log_bytes);
  c.heartbeat_interval = absl::Seconds(f->hb_interval_s);
  c.heartbeat_timeout = absl::Seconds(f->hb_timeout_s);
  if (f->lease_s != 0 && f->lease_s < f->hb_timeout_s) {
    return absl::InvalidArgumentError(
        "--lease must be at least --heartbeat-timeout: an agent must not "
        "stop its ranks before the scheduler gives up on its node");
  }
  c.lease = absl::Seconds(f->lease_s != 0 ? f->lease_s : f->hb_timeout_s);
  return ResolveReplicaFlags(f);
}

absl::Status ParsePeers(const std::string& text, const std::string& listen,
                        xl::service::ReplicaOptions* r) {
  const std::string listen_port = listen.substr(listen.rfind(':') + 1);
  auto bad = [&](absl::string_view part, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peers: '", part, "' ", why,
        "; give every replica as ID=HOST:RAFT_PORT[/HOST:API_PORT], "
        "comma-separated, e.g. 1=s1:7071,2=s2:7071,3=s3:7071"));
  };
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    part = absl::StripAsciiWhitespace(part);
    std::pair<absl::string_view, absl::string_view> id_rest =
        absl::StrSplit(part, absl::MaxSplits('=', 1));
    uint64_t id = 0;
    if (!absl::SimpleAtoi(id_rest.first, &id) || id == 0) {
      return bad(part, "does not start with a replica id (1, 2, ...) and =");
    }
    std::pair<absl::string_view, absl::string_view> addrs =
        absl::StrSplit(id_rest.second, absl::MaxSplits('/', 1));
    auto raft = xl::SplitServerList(addrs.first, "--peers");
    if (!raft.ok() || raft->size() != 1) {
      return bad(part, "has no Raft address HOST:PORT");
    }
    std::string api;
    if (!addrs.second.empty()) {
      auto given = xl::SplitServerList(addrs.second, "--peers");
      if (!given.ok() || given->size() != 1) {
        return bad(part, "has an API address that is not HOST:PORT");
      }
      api = (*given)[0];
    } else {
      const std::string& ra = (*raft)[0];
      api = absl::StrCat(ra.substr(0, ra.rfind(':')), ":", listen_port);
    }
    if (r->raft.count(id) != 0) return bad(part, "repeats an id");
    for (const auto& [other, address] : r->raft) {
      if (address == (*raft)[0]) return bad(part, "repeats a Raft address");
    }
    r->raft[id] = (*raft)[0];
    r->api[id] = api;
  }
  return absl::OkStatus();
}

absl::Status ResolveReplicaFlags(Flags* f) {
  xl::service::ReplicaOptions& r = f->opts.replica;
  absl::Duration election;
  // At most 4 s: a leader cut off from the others steps down within two
  // election timeouts, and until then it may renew its agents' leases; a
  // new leader counts none of their nodes lost before the heartbeat
  // timeout plus its 10 s reconnect window, which must cover that.
  if (!xl::ParseLifetime(f->election_timeout, &election) ||
      election < absl::Milliseconds(100) || election > absl::Seconds(4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--election-timeout: '", f->election_timeout,
                     "' is not a duration from 100ms to 4s; give one such as "
                     "1s"));
  }
  r.election_timeout = election;
  r.heartbeat = std::max(absl::Milliseconds(20), election / 10);
  r.snapshot_trailing = std::min(4096u, std::max(16u, r.snapshot_every / 4));
  if (f->replicas != 1 && (!f->dev || f->replicas < 1 || f->replicas > 7 ||
                           f->replicas % 2 == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas ", f->replicas,
        ": give 3 or 5 (an odd number up to 7), with --dev; on many "
        "machines start each replica with --replica-id and --peers"));
  }
  if (r.id == 0) {
    if (!f->peers.empty() || !r.raft_dir.empty()) {
      return absl::InvalidArgumentError(
          "--peers and --raft-dir go with --replica-id: give this replica's "
          "id, or drop them to run one scheduler");
    }
    return absl::OkStatus();
  }
  if (f->dev) {
    return absl::InvalidArgumentError(
        "--replica-id: with --dev, use --replicas 3 instead");
  }
  absl::Status st = ParsePeers(f->peers, f->opts.listen, &r);
  if (!st.ok()) return st;
  if (r.raft.count(r.id) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peers: this replica's id ", r.id,
        " is not among them; list every replica, this one included"));
  }
  if (r.raft.size() % 2 == 0) {
    fprintf(stderr,
            "xl-scheduler: WARNING: %zu replicas: an even number survives no "
            "more failures than one fewer; run 3 or 5\n",
            r.raft.size());
  }
  return absl::OkStatus();
}

}  // namespace xl::server
