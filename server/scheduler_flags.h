// xl-scheduler's flags: every option with its help text, and the checks
// that turn their text into the server's options. Used by main.cc only.
#ifndef XL_SERVER_SCHEDULER_FLAGS_H_
#define XL_SERVER_SCHEDULER_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/service/scheduler_server.h"

namespace xl::server {

// `xl-scheduler token ...`: credentials managed on the database file, for
// when no scheduler runs on it (the first admin token, or recovery).
struct TokenCommand {
  std::string db, user, ttl, id, node, token_file;
  std::vector<std::string> groups;
  bool admin = false, join = false;
};

// Every flag's value as given, before it is checked.
struct Flags {
  xl::service::ServerOptions opts;
  bool dev = false, keep = false;
  int agents = 2;
  std::vector<std::string> inventories;
  std::string agent_binary, port_file, metrics_port_file, dev_env;
  double hb_interval_s = 1.0, hb_timeout_s = 10.0, lease_s = 0;
  std::string retention = "30d";
  uint64_t retention_log_bytes = opts.controller.retention.max_log_bytes;
  std::string half_life = "7d", max_age = "7d", grow_after = "10m",
              estimate_interval = "1m", log_settle = "10s", brake_max = "5m";
  TokenCommand token;
  // Replication: --peers as given, --election-timeout; with --dev,
  // --replicas.
  std::string peers, election_timeout = "1s";
  int replicas = 1;
};

// The `token` subcommands.
struct TokenCommands {
  CLI::App* token = nullptr;
  CLI::App* create = nullptr;
  CLI::App* revoke = nullptr;
};

// Adds every option of xl-scheduler to `app`, bound to `f`, in the order
// --help lists them.
void AddOptions(CLI::App* app, Flags* f);

// Adds `xl-scheduler token create|revoke|list`, bound to f->token.
TokenCommands AddTokenCommands(CLI::App* app, Flags* f);

// Checks the flags and turns their text into f->opts (durations, the
// heartbeat and the lease). INVALID_ARGUMENT names the flag and the fix.
absl::Status ResolveFlags(Flags* f);

// The replication flags into f->opts.replica (called by ResolveFlags).
absl::Status ResolveReplicaFlags(Flags* f);
// --peers' text into r->raft and r->api; a replica's API port defaults to
// `listen`'s.
absl::Status ParsePeers(const std::string& text, const std::string& listen,
                        xl::service::ReplicaOptions* r);

}  // namespace xl::server

#endif  // XL_SERVER_SCHEDULER_FLAGS_H_
