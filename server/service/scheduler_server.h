// SchedulerServer: the assembled xl-scheduler: store, controller and the gRPC
// server (JobService, NodeService, AgentService, health checking and
// reflection). Start() returns once it listens; Shutdown() stops it in order
// (RPCs, event loop, store). Thread-safe.
#ifndef XL_SERVER_SERVICE_SCHEDULER_SERVER_H_
#define XL_SERVER_SERVICE_SCHEDULER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/limits.h"
#include "server/control/telemetry.h"
#include "server/service/http_gateway.h"
#include "server/service/services.h"
#include "server/store/db_lock.h"
#include "server/store/sqlite_store.h"

namespace xl::replica {
class ReplicatedStore;
}

namespace xl::service {

// A scheduler replicated on Raft (server/replica/): every replica keeps its
// own database, one leads. Without an id: one scheduler, as always.
struct ReplicaOptions {
  // This replica's id (1, 2, ...); 0: not replicated.
  uint64_t id = 0;
  // Every replica's Raft address (HOST:PORT, a port apart from the API's),
  // and its API address (for the xl-leader redirect), by id; the same on
  // every replica.
  std::map<uint64_t, std::string> raft;
  std::map<uint64_t, std::string> api;
  // Raft's log; empty: the database's path + ".raft".
  std::string raft_dir;
  absl::Duration election_timeout = absl::Seconds(1);
  absl::Duration heartbeat = absl::Milliseconds(100);
  // A snapshot (an image of the database) every this many log entries; the
  // log keeps `snapshot_trailing` entries before it for replicas a little
  // behind.
  unsigned snapshot_every = 16384;
  unsigned snapshot_trailing = 4096;
};

struct ServerOptions {
  // HOST:PORT; port 0 picks a free one.
  std::string listen = "127.0.0.1:7070";
  // The SQLite file.
  std::string db;
  control::ControllerOptions controller;
  // A YAML file of queues applied at start (see v1::QueueFile); empty: none.
  std::string queues_file;
  // TLS: the server's certificate and key, and the CA that client
  // certificates (agents') must chain to. All three, or none. With them,
  // auth is on: users need a token, agents a node certificate.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // The CA that signs node certificates for join tokens (optional).
  std::string ca_cert_file;
  std::string ca_key_file;
  // Serve without TLS on a non-loopback address (warned about).
  bool insecure = false;
  // Take clientAuth certificates without the xl-node:<name> URI as nodes.
  bool accept_unmarked_node_certificates = false;
  // Open WatchJob/StreamLogs streams, in all and per user (0: no limit).
  int max_streams = 20000;
  int max_streams_per_user = 256;
  // HOST:PORT of the HTTP side port: Prometheus /metrics, the dashboard
  // and its JSON API (HttpGateway); HTTPS with the TLS files. Empty: none.
  std::string metrics_listen;
  // With auth on, serve /metrics without a token (see GatewayOptions).
  bool metrics_without_token = false;
  // GatewayOptions.allowed_hosts.
  std::vector<std::string> dashboard_hosts;
  // Shown by /api/info.
  std::string version = "dev";
  ReplicaOptions replica;
};

// The largest message the scheduler takes, and the largest it sends.
inline constexpr int kMaxRequestBytes = 4 << 20;
inline constexpr int kMaxReplyBytes = kMaxSchedulerToAgentBytes;

// True for 127.0.0.0/8, ::1 and localhost.
bool IsLoopbackHost(const std::string& host);

class SchedulerServer {
 public:
  static absl::StatusOr<std::unique_ptr<SchedulerServer>> Start(
      ServerOptions opts);
  ~SchedulerServer();

  // The address clients and agents use, with the port actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // Auth is on (TLS, tokens and node certificates).
  bool auth_enabled() const { return authenticator_->enabled(); }
  // Non-empty when running with --insecure.
  // The side port's URL ("https://127.0.0.1:9400"), or "" without one.
  // Replicated, the side port is served while this replica leads.
  std::string metrics_url() const;
  int metrics_port() const;
  // For tests and benchmarks: what /metrics would answer now.
  std::string ScrapeMetrics();
  const std::string& security_warning() const {
    return authenticator_->warning();
  }
  // Replicated: this replica leads now, in the Raft term given.
  bool leading() const;
  uint64_t term() const;
  void Shutdown();

 private:
  // What serves the API while this replica leads (or always, when not
  // replicated): the controller, the services and the gRPC server. While it
  // follows, only `follower` (every call answered with where the leader
  // is) and the health service.
  struct Term;

  SchedulerServer() = default;
  // Builds and starts the services of a leader in `term` (0: not
  // replicated), or of a follower; binds port_ (any port when 0); then
  // stops the term that served before, if any.
  absl::Status StartTerm(bool lead, uint64_t term);
  // Stops the current term's server and controller and returns them
  // (replicated: once the controller's writes are answered).
  std::unique_ptr<Term> StopTerm(bool shutting_down = false);
  std::unique_ptr<Term> StopTerm(std::unique_ptr<Term> t, bool shutting_down);
  // Replicated: follows the log's role (the watcher thread).
  void WatchRole();

  ServerOptions opts_;
  std::string host_;
  std::shared_ptr<grpc::ServerCredentials> creds_;
  NodeCa node_ca_;
  std::unique_ptr<store::DbLock> lock_;
  // Before store_: the store's writer reports commits to it until the
  // store is gone.
  std::unique_ptr<control::SchedulerTelemetry> telemetry_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<auth::TokenStore> tokens_;
  std::unique_ptr<auth::Authenticator> authenticator_;
  std::unique_ptr<StreamLimits> streams_;
  // Null when not replicated; else store_'s.
  replica::ReplicatedStore* replicated_ = nullptr;
  mutable absl::Mutex mu_;
  std::unique_ptr<Term> term_ ABSL_GUARDED_BY(mu_);
  std::thread watcher_;
  std::string metrics_url_ ABSL_GUARDED_BY(mu_);
  int metrics_port_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string address_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace xl::service

#endif  // XL_SERVER_SERVICE_SCHEDULER_SERVER_H_
