#include "server/service/scheduler_server.h"

#include <arpa/inet.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <netinet/in.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crypto/openssl.h"
#include "common/proto_text.h"
#include "common/status.h"

namespace xl::service {

bool IsLoopbackHost(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  if (h == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  return inet_pton(AF_INET6, h.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

namespace {

// The listener's credentials and the authenticator that goes with them.
absl::Status SetUpSecurity(const ServerOptions& opts, const std::string& host,
                           std::shared_ptr<grpc::ServerCredentials>* creds,
                           auth::TokenStore* tokens,
                           std::unique_ptr<auth::Authenticator>* authn,
                           NodeCa* ca) {
  const int given = !opts.tls_cert_file.empty() + !opts.tls_key_file.empty() +
                    !opts.tls_ca_file.empty();
  if (given != 0 && given != 3) {
    return absl::InvalidArgumentError(
        "--tls-cert, --tls-key and --tls-ca go together: the server's "
        "certificate and key, and the CA that signs the agents' "
        "certificates; see README, Security");
  }
  if (!opts.ca_cert_file.empty() || !opts.ca_key_file.empty()) {
    if (opts.ca_cert_file.empty() || opts.ca_key_file.empty() || given == 0) {
      return absl::InvalidArgumentError(
          "--ca-cert and --ca-key go together, and with --tls-cert, "
          "--tls-key and --tls-ca");
    }
    ASSIGN_OR_RETURN(ca->cert_pem, crypto::ReadFile(opts.ca_cert_file));
    ASSIGN_OR_RETURN(ca->key_pem, crypto::ReadFile(opts.ca_key_file));
  }
  if (given == 3) {
    grpc::SslServerCredentialsOptions ssl(
        GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    ASSIGN_OR_RETURN(pair.cert_chain, crypto::ReadFile(opts.tls_cert_file));
    ASSIGN_OR_RETURN(pair.private_key, crypto::ReadFile(opts.tls_key_file));
    ASSIGN_OR_RETURN(ssl.pem_root_certs, crypto::ReadFile(opts.tls_ca_file));
    ssl.pem_key_cert_pairs.push_back(pair);
    *creds = grpc::SslServerCredentials(ssl);
    *authn = std::make_unique<auth::Authenticator>(
        auth::Authenticator::On(tokens, RealClock::Get()));
    (*authn)->set_accept_unmarked_node_certificates(
        opts.accept_unmarked_node_certificates);
    return absl::OkStatus();
  }
  *creds = grpc::InsecureServerCredentials();
  std::string warning;
  // The side port's API answers as the gRPC API does: without auth, to
  // anyone as anyone. The same rule holds for it.
  if (!opts.metrics_listen.empty() && !opts.insecure) {
    const size_t colon = opts.metrics_listen.rfind(':');
    std::string side = colon == std::string::npos
                           ? opts.metrics_listen
                           : opts.metrics_listen.substr(0, colon);
    if (side.size() >= 2 && side.front() == '[') {
      side = side.substr(1, side.size() - 2);
    }
    if (!IsLoopbackHost(side)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--metrics-listen ", opts.metrics_listen,
          ": refusing to serve the dashboard's API on a non-loopback "
          "address without TLS and tokens; give --tls-cert, --tls-key and "
          "--tls-ca, use 127.0.0.1, or pass --insecure on a network you "
          "trust"));
    }
  }
  if (!IsLoopbackHost(host)) {
    if (!opts.insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--listen ", opts.listen,
          ": refusing to serve a non-loopback address without TLS and "
          "tokens, since anyone who reaches the port could run code on "
          "every node; give --tls-cert, --tls-key and --tls-ca (see README, "
          "Security), listen on 127.0.0.1, or pass --insecure on a "
          "network you trust"));
    }
    warning = absl::StrCat(
        "insecure: this scheduler serves ", opts.listen,
        " without TLS or tokens (--insecure); anyone who can reach the port "
        "is anyone");
  }
  *authn = std::make_unique<auth::Authenticator>(
      auth::Authenticator::Off(std::move(warning)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    ServerOptions opts) {
  if (opts.db.empty()) {
    return absl::InvalidArgumentError(
        "--db: required; give the SQLite file to keep jobs in, or use --dev");
  }
  std::unique_ptr<SchedulerServer> s(new SchedulerServer());
  // One scheduler per database: a second one would overwrite the first's
  // jobs with its own view of them.
  auto lock = store::DbLock::Acquire(opts.db);
  if (!lock.ok()) return lock.status();
  s->lock_ = std::move(*lock);
  s->telemetry_ = std::make_unique<control::SchedulerTelemetry>();
  store::StoreOptions store_opts;
  store_opts.on_commit = [t = s->telemetry_.get()](size_t writes,
                                                   absl::Duration commit) {
    t->ObserveCommit(writes, commit);
  };
  auto store = store::SqliteStore::Open(opts.db, store_opts);
  if (!store.ok()) return Annotate(store.status(), "--db");
  s->store_ = std::move(*store);

  size_t colon = opts.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen: '", opts.listen, "' is not HOST:PORT, e.g. 127.0.0.1:7070"));
  }
  const std::string host = opts.listen.substr(0, colon);
  auto tokens = auth::TokenStore::Open(opts.db);
  if (!tokens.ok()) return Annotate(tokens.status(), "--db (tokens)");
  s->tokens_ = std::move(*tokens);
  std::shared_ptr<grpc::ServerCredentials> creds;
  NodeCa node_ca;
  RETURN_IF_ERROR(SetUpSecurity(opts, host, &creds, s->tokens_.get(),
                                &s->authenticator_, &node_ca));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(opts.listen, creds,
                           &s->port_);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Message sizes: every request (a job spec, an agent's log chunk, a
  // rendezvous value) fits in 4 MiB; replies are paged below 16 MiB.
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(kMaxReplyBytes);

  // The controller needs the final address for XL_SCHEDULER, known only
  // after binding; build the services first, start the loop after.
  control::ControllerOptions copts = opts.controller;
  copts.telemetry = s->telemetry_.get();
  s->controller_ = std::make_unique<Controller>(s->store_.get(),
                                                RealClock::Get(), copts);
  auto recovered = s->controller_->Recover();
  if (!recovered.ok()) return Annotate(recovered, "recovering from --db");
  if (!opts.queues_file.empty()) {
    v1::QueueFile file;
    absl::Status read = ReadYamlFileToMessage(opts.queues_file, &file);
    if (read.ok()) {
      read = s->controller_->ApplyQueueFile(
          file, absl::StrCat("queues file ", opts.queues_file));
    }
    if (!read.ok()) {
      return Annotate(read, absl::StrCat("--queues ", opts.queues_file));
    }
  }
  const auth::Authenticator* authn = s->authenticator_.get();
  s->streams_ = std::make_unique<StreamLimits>(opts.max_streams,
                                               opts.max_streams_per_user);
  s->jobs_ = std::make_unique<JobServiceImpl>(s->controller_.get(), authn,
                                              s->streams_.get());
  s->nodes_ = std::make_unique<NodeServiceImpl>(s->controller_.get(), authn);
  s->agents_ = std::make_unique<AgentServiceImpl>(s->controller_.get(), authn);
  s->queues_ = std::make_unique<QueueServiceImpl>(s->controller_.get(), authn);
  s->auth_ = std::make_unique<AuthServiceImpl>(s->controller_.get(), authn,
                                               std::move(node_ca));
  builder.RegisterService(s->auth_.get());
  builder.RegisterService(s->jobs_.get());
  builder.RegisterService(s->nodes_.get());
  builder.RegisterService(s->queues_.get());
  builder.RegisterService(s->agents_.get());
  s->rendezvous_ = std::make_unique<RendezvousServiceImpl>(s->controller_.get());
  builder.RegisterService(s->rendezvous_.get());
  if (!opts.metrics_listen.empty()) {
    GatewayOptions gw;
    gw.listen = opts.metrics_listen;
    gw.auth_enabled = s->authenticator_->enabled();
    gw.version = opts.version;
    if (!opts.tls_cert_file.empty()) {
      gw.tls_cert_file = opts.tls_cert_file;
      gw.tls_key_file = opts.tls_key_file;
    }
    gw.metrics_without_token = opts.metrics_without_token;
    gw.allowed_hosts = opts.dashboard_hosts;
    auto gateway =
        HttpGateway::Start(gw, s->controller_.get(), s->telemetry_.get());
    if (!gateway.ok()) return gateway.status();
    s->gateway_ = std::move(*gateway);
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "--listen: cannot listen on ", opts.listen,
        "; is another xl-scheduler running there? pick another port"));
  }
  s->address_ = absl::StrCat(host, ":", s->port_);
  s->controller_->SetAdvertiseAddressIfEmpty(s->address_);
  if (s->gateway_ != nullptr) s->gateway_->Attach(s->server_.get());
  s->controller_->Start();
  return s;
}

void SchedulerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (gateway_ != nullptr) gateway_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(500));
  server_->Wait();
  controller_->Stop();
  store_.reset();  // commits what is queued; callbacks reach the controller
}

SchedulerServer::~SchedulerServer() {
  if (server_ != nullptr) Shutdown();
}

}  // namespace xl::service
