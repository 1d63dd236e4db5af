// SchedulerServer: the assembled xl-scheduler: store, controller and the gRPC
// server (JobService, NodeService, AgentService, health checking and
// reflection). Start() returns once it listens; Shutdown() stops it in order
// (RPCs, event loop, store). Thread-safe.
#ifndef XL_SERVER_SERVICE_SCHEDULER_SERVER_H_
#define XL_SERVER_SERVICE_SCHEDULER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/limits.h"
#include "server/control/telemetry.h"
#include "server/service/http_gateway.h"
#include "server/service/services.h"
#include "server/store/db_lock.h"
#include "server/store/sqlite_store.h"

namespace xl::service {

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
  std::string metrics_url() const {
    return gateway_ != nullptr ? gateway_->url() : "";
  }
  int metrics_port() const {
    return gateway_ != nullptr ? gateway_->port() : 0;
  }
  // For tests and benchmarks: what /metrics would answer now.
  std::string ScrapeMetrics() { return gateway_ != nullptr ? gateway_->Scrape() : ""; }
  const std::string& security_warning() const {
    return authenticator_->warning();
  }
  void Shutdown();

 private:
  SchedulerServer() = default;
  std::unique_ptr<store::DbLock> lock_;
  // Before store_: the store's writer reports commits to it until the
  // store is gone.
  std::unique_ptr<control::SchedulerTelemetry> telemetry_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<auth::TokenStore> tokens_;
  std::unique_ptr<auth::Authenticator> authenticator_;
  std::unique_ptr<StreamLimits> streams_;
  std::unique_ptr<AuthServiceImpl> auth_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<NodeServiceImpl> nodes_;
  std::unique_ptr<QueueServiceImpl> queues_;
  std::unique_ptr<AgentServiceImpl> agents_;
  std::unique_ptr<RendezvousServiceImpl> rendezvous_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpGateway> gateway_;
  std::string address_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace xl::service

#endif  // XL_SERVER_SERVICE_SCHEDULER_SERVER_H_
