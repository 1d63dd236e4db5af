#include "server/service/scheduler_server.h"

#include <arpa/inet.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <netinet/in.h>
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/notification.h"
#include "common/leader.h"
#include "server/replica/replicated_store.h"
#include "xl/v1/replica.grpc.pb.h"
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

// A replica that does not lead: every call (but the health service's) is
// answered UNAVAILABLE, naming the leader in the message and in the
// xl-leader trailing metadata (common/leader.h) when it is known.
class FollowerService : public grpc::CallbackGenericService {
 public:
  FollowerService(replica::ReplicatedStore* store, const ReplicaOptions& opts)
      : store_(store), opts_(opts) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* ctx) override {
    const replica::RaftLog::State st = store_->log_state();
    std::string leader;
    if (st.leader_id == opts_.id) {
      // Elected, and still applying the log before it acts: soon, here.
      ctx->AddTrailingMetadata(kTermMetadataKey, absl::StrCat(st.term));
      if (auto it = opts_.api.find(opts_.id); it != opts_.api.end()) {
        ctx->AddTrailingMetadata(kLeaderMetadataKey, it->second);
      }
      return new Refusal(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("scheduler replica ", opts_.id,
                       " was elected leader (term ", st.term,
                       ") and is loading its state; retry in a moment")));
    }
    if (st.leader_id != 0) {
      auto it = opts_.api.find(st.leader_id);
      if (it != opts_.api.end()) leader = it->second;
      // --peers gives two replicas one API address: naming it would send
      // callers round in a loop.
      auto own = opts_.api.find(opts_.id);
      if (own != opts_.api.end() && own->second == leader) leader.clear();
    }
    ctx->AddTrailingMetadata(kTermMetadataKey, absl::StrCat(st.term));
    std::string msg = absl::StrCat("scheduler replica ", opts_.id,
                                   " does not lead (term ", st.term, "); ");
    if (!leader.empty()) {
      ctx->AddTrailingMetadata(kLeaderMetadataKey, leader);
      absl::StrAppend(&msg, "the leader is replica ", st.leader_id, " at ",
                      leader,
                      "; call it there, or give every replica's address "
                      "(--server a:7070,b:7070,c:7070)");
    } else {
      absl::StrAppend(&msg,
                      "no leader is known yet (an election is under way, "
                      "or too few replicas are up); retry in a second");
    }
    return new Refusal(grpc::Status(grpc::StatusCode::UNAVAILABLE, msg));
  }

 private:
  class Refusal : public grpc::ServerGenericBidiReactor {
   public:
    explicit Refusal(const grpc::Status& status) { Finish(status); }
    void OnDone() override { delete this; }
  };

  replica::ReplicatedStore* const store_;
  const ReplicaOptions opts_;
};

// Writes `changes` through the replicated log and waits (at most `timeout`)
// for the answer.
absl::Status WriteAndWait(store::Store* store, store::Changes changes,
                          absl::Duration timeout) {
  struct Answer {
    absl::Notification done;
    absl::Status status;
  };
  auto answer = std::make_shared<Answer>();
  auto batch = std::make_shared<store::ChangeBatch>();
  batch->changes = std::move(changes);
  store->WriteChanges(std::move(batch), [answer](absl::Status st) {
    answer->status = std::move(st);
    answer->done.Notify();
  });
  if (!answer->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::UnavailableError(absl::StrCat(
        "the replicated log did not commit the write within ",
        absl::FormatDuration(timeout), "; retry (it may still commit)"));
  }
  return answer->status;
}

}  // namespace

// ReplicaService: answered by every replica (and by a scheduler that is not
// replicated, as the leader of itself).
class ReplicaServiceImpl : public v1::ReplicaService::CallbackService {
 public:
  // `serving`: this replica serves the API as the leader now (elected,
  // and its controller running).
  ReplicaServiceImpl(replica::ReplicatedStore* store, const ServerOptions& opts,
                     bool serving)
      : store_(store),
        opts_(opts.replica),
        version_(opts.version),
        serving_(serving) {}

  grpc::ServerUnaryReactor* GetReplicaStatus(
      grpc::CallbackServerContext* ctx, const v1::GetReplicaStatusRequest*,
      v1::ReplicaStatus* out) override {
    out->set_id(opts_.id);
    out->set_pid(getpid());
    out->set_version(version_);
    if (store_ == nullptr) {
      out->set_leader(true);  // addresses: the one the caller dialled
    } else {
      const replica::RaftLog::State st = store_->log_state();
      out->set_leader(serving_ && st.leader);
      out->set_term(st.term);
      out->set_leader_id(st.leader_id);
      if (auto it = opts_.api.find(st.leader_id); it != opts_.api.end()) {
        out->set_leader_address(it->second);
      }
      if (auto it = opts_.api.find(opts_.id); it != opts_.api.end()) {
        out->set_address(it->second);
      }
      out->set_commit_index(st.commit_index);
      out->set_applied_index(st.applied_index);
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  replica::ReplicatedStore* const store_;
  const ReplicaOptions opts_;
  const std::string version_;
  const bool serving_;
};

struct SchedulerServer::Term {
  bool lead = false;
  uint64_t number = 0;
  std::unique_ptr<AuthServiceImpl> auth;
  std::unique_ptr<Controller> controller;
  std::unique_ptr<JobServiceImpl> jobs;
  std::unique_ptr<NodeServiceImpl> nodes;
  std::unique_ptr<QueueServiceImpl> queues;
  std::unique_ptr<AgentServiceImpl> agents;
  std::unique_ptr<RendezvousServiceImpl> rendezvous;
  std::unique_ptr<FollowerService> follower;
  std::unique_ptr<ReplicaServiceImpl> replica;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<HttpGateway> gateway;
};

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
  size_t colon = opts.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen: '", opts.listen, "' is not HOST:PORT, e.g. 127.0.0.1:7070"));
  }
  s->host_ = opts.listen.substr(0, colon);
  if (!absl::SimpleAtoi(opts.listen.substr(colon + 1), &s->port_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen: '", opts.listen, "' is not HOST:PORT, e.g. 127.0.0.1:7070"));
  }
  if (opts.replica.id != 0) {
    replica::RaftLog::Options log;
    log.id = opts.replica.id;
    log.peers = opts.replica.raft;
    log.dir = opts.replica.raft_dir.empty() ? opts.db + ".raft"
                                            : opts.replica.raft_dir;
    log.election_timeout = opts.replica.election_timeout;
    log.heartbeat = opts.replica.heartbeat;
    log.snapshot_every = opts.replica.snapshot_every;
    log.snapshot_trailing = opts.replica.snapshot_trailing;
    auto store = replica::ReplicatedStore::Open(opts.db, std::move(log));
    if (!store.ok()) return Annotate(store.status(), "--db and --raft-dir");
    s->replicated_ = store->get();
    s->store_ = std::move(*store);
  } else {
    store::StoreOptions store_opts;
    store_opts.on_commit = [t = s->telemetry_.get()](size_t writes,
                                                     absl::Duration commit) {
      t->ObserveCommit(writes, commit);
    };
    auto store = store::SqliteStore::Open(opts.db, store_opts);
    if (!store.ok()) return Annotate(store.status(), "--db");
    s->store_ = std::move(*store);
  }

  auto tokens = auth::TokenStore::Open(opts.db);
  if (!tokens.ok()) return Annotate(tokens.status(), "--db (tokens)");
  s->tokens_ = std::move(*tokens);
  if (s->replicated_ != nullptr) {
    // Tokens go through the log, as jobs do: every replica knows them.
    s->tokens_->ReplicateWith(
        [store = s->store_.get()](const store::StoredAuthToken& row) {
          return WriteAndWait(store, {store::change::PutAuthToken{row}},
                              absl::Seconds(30));
        });
  }
  RETURN_IF_ERROR(SetUpSecurity(opts, s->host_, &s->creds_, s->tokens_.get(),
                                &s->authenticator_, &s->node_ca_));
  s->streams_ = std::make_unique<StreamLimits>(opts.max_streams,
                                               opts.max_streams_per_user);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  s->opts_ = std::move(opts);
  const bool replicated = s->replicated_ != nullptr;
  // Replicated, a replica starts as a follower; the watcher makes it the
  // leader once the log says so.
  RETURN_IF_ERROR(s->StartTerm(/*lead=*/!replicated, /*term=*/0));
  s->address_ = absl::StrCat(s->host_, ":", s->port_);
  if (replicated) {
    s->watcher_ = std::thread([raw = s.get()] { raw->WatchRole(); });
  }
  return s;
}

absl::Status SchedulerServer::StartTerm(bool lead, uint64_t number) {
  const ServerOptions& opts = opts_;
  auto t = std::make_unique<Term>();
  t->lead = lead;
  t->number = number;
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat(host_, ":", port_), creds_, &bound);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Message sizes: every request (a job spec, an agent's log chunk, a
  // rendezvous value) fits in 4 MiB; replies are paged below 16 MiB.
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(kMaxReplyBytes);
  t->replica = std::make_unique<ReplicaServiceImpl>(replicated_, opts, lead);
  builder.RegisterService(t->replica.get());
  if (!lead) {
    t->follower = std::make_unique<FollowerService>(replicated_, opts.replica);
    builder.RegisterCallbackGenericService(t->follower.get());
  } else {
    if (replicated_ != nullptr) {
      // The tokens the log applied while this replica followed; and what
      // this replica's database holds that others may not (a token made on
      // it while it was stopped) written through the log.
      RETURN_IF_ERROR(tokens_->Reload());
      ASSIGN_OR_RETURN(std::vector<store::StoredAuthToken> rows,
                       tokens_->Rows());
      if (!rows.empty()) {
        store::Changes puts;
        for (auto& row : rows) {
          puts.push_back(store::change::PutAuthToken{std::move(row)});
        }
        RETURN_IF_ERROR(
            WriteAndWait(store_.get(), std::move(puts), absl::Seconds(30)));
      }
    }
    // The controller needs the final address for XL_SCHEDULER, known only
    // after binding; build the services first, start the loop after.
    control::ControllerOptions copts = opts.controller;
    copts.telemetry = telemetry_.get();
    t->controller = std::make_unique<Controller>(store_.get(),
                                                 RealClock::Get(), copts);
    auto recovered = t->controller->Recover();
    if (!recovered.ok()) return Annotate(recovered, "recovering from --db");
    if (!opts.queues_file.empty()) {
      v1::QueueFile file;
      absl::Status read = ReadYamlFileToMessage(opts.queues_file, &file);
      if (read.ok()) {
        read = t->controller->ApplyQueueFile(
            file, absl::StrCat("queues file ", opts.queues_file));
      }
      if (!read.ok()) {
        return Annotate(read, absl::StrCat("--queues ", opts.queues_file));
      }
    }
    const auth::Authenticator* authn = authenticator_.get();
    Controller* c = t->controller.get();
    t->jobs = std::make_unique<JobServiceImpl>(c, authn, streams_.get());
    t->nodes = std::make_unique<NodeServiceImpl>(c, authn);
    t->agents = std::make_unique<AgentServiceImpl>(c, authn, number);
    t->queues = std::make_unique<QueueServiceImpl>(c, authn);
    t->auth = std::make_unique<AuthServiceImpl>(c, authn, node_ca_);
    t->rendezvous = std::make_unique<RendezvousServiceImpl>(c);
    builder.RegisterService(t->auth.get());
    builder.RegisterService(t->jobs.get());
    builder.RegisterService(t->nodes.get());
    builder.RegisterService(t->queues.get());
    builder.RegisterService(t->agents.get());
    builder.RegisterService(t->rendezvous.get());
  }
  if (!opts.metrics_listen.empty()) {
    // Every replica serves /metrics (its role, term and log indexes; a
    // follower has no model to report); the API of a follower's dashboard
    // answers with where the leader is. One gateway at a time holds the
    // port: the old term's stops first.
    HttpGateway* old = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (term_ != nullptr) old = term_->gateway.get();
    }
    if (old != nullptr) old->Stop();  // terms change on this thread only
    GatewayOptions gw;
    gw.listen = opts.metrics_listen;
    // The port bound first, again on every later term.
    if (const int port = metrics_port(); port != 0) {
      gw.listen = absl::StrCat(
          opts.metrics_listen.substr(0, opts.metrics_listen.rfind(':')), ":",
          port);
    }
    gw.auth_enabled = authenticator_->enabled();
    gw.version = opts.version;
    if (!opts.tls_cert_file.empty()) {
      gw.tls_cert_file = opts.tls_cert_file;
      gw.tls_key_file = opts.tls_key_file;
    }
    gw.metrics_without_token = opts.metrics_without_token;
    gw.allowed_hosts = opts.dashboard_hosts;
    auto gateway =
        HttpGateway::Start(gw, t->controller.get(), telemetry_.get());
    if (!gateway.ok()) {
      if (t->controller != nullptr) t->controller->Stop();
      return gateway.status();
    }
    t->gateway = std::move(*gateway);
    absl::MutexLock lock(&mu_);
    metrics_url_ = t->gateway->url();
    metrics_port_ = t->gateway->port();
  }
  t->server = builder.BuildAndStart();
  if (t->server == nullptr || bound == 0) {
    if (t->gateway != nullptr) t->gateway->Stop();
    if (t->controller != nullptr) t->controller->Stop();
    return absl::UnavailableError(absl::StrCat(
        "--listen: cannot listen on ", host_, ":", port_,
        "; is another xl-scheduler running there? pick another port"));
  }
  if (port_ == 0) port_ = bound;  // later terms bind where the first did
  // Readiness for load balancers and callers with a list: the API is
  // served here only by the leader.
  if (grpc::HealthCheckServiceInterface* health =
          t->server->GetHealthCheckService()) {
    health->SetServingStatus(kLeaderHealthService, lead);
  }
  if (t->gateway != nullptr) t->gateway->Attach(t->server.get());
  if (t->controller != nullptr) {
    t->controller->SetAdvertiseAddressIfEmpty(absl::StrCat(host_, ":", port_));
    t->controller->Start();
  }
  std::unique_ptr<Term> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::exchange(term_, std::move(t));
  }
  // A term still serving (a follower's, bound to the same port with
  // SO_REUSEPORT, which gRPC sets): stopped once the new one serves, so
  // that the port never refuses a connection in between.
  StopTerm(std::move(old), false);
  return absl::OkStatus();
}

std::unique_ptr<SchedulerServer::Term> SchedulerServer::StopTerm(
    bool shutting_down) {
  std::unique_ptr<Term> t;
  {
    absl::MutexLock lock(&mu_);
    t = std::move(term_);
  }
  return StopTerm(std::move(t), shutting_down);
}

std::unique_ptr<SchedulerServer::Term> SchedulerServer::StopTerm(
    std::unique_ptr<Term> t, bool shutting_down) {
  if (t == nullptr) return t;
  if (t->gateway != nullptr) t->gateway->Stop();
  t->server->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(500));
  t->server->Wait();
  if (t->controller != nullptr) {
    t->controller->Stop();
    // The controller's writes in flight answer into it: wait for them (a
    // deposed leader's are answered UNAVAILABLE by the log at once).
    // Shutting down, the log's close answers what is left (the store is
    // reset before the controller goes).
    if (replicated_ != nullptr && !shutting_down &&
        !replicated_->WaitAnswered(absl::Seconds(30))) {
      fprintf(stderr,
              "xl-scheduler: writes of the ended term still unanswered after "
              "30 s; stopping (a restart follows the log again)\n");
      std::abort();
    }
  }
  return t;
}

void SchedulerServer::WatchRole() {
  const ReplicaOptions& r = opts_.replica;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping),
                               absl::Milliseconds(20))) {
        return;
      }
    }
    const replica::RaftLog::State st = replicated_->log_state();
    bool lead = false;
    uint64_t number = 0;
    {
      absl::MutexLock lock(&mu_);
      if (term_ != nullptr) {
        lead = term_->lead;
        number = term_->number;
      }
    }
    telemetry_->SetReplica(lead, st.term, st.commit_index, st.applied_index);
    if (lead && (!st.leader || st.term != number)) {
      fprintf(stderr,
              "xl-scheduler: replica %llu no longer leads (term %llu, now "
              "%llu); stopping its controller and following\n",
              static_cast<unsigned long long>(r.id),
              static_cast<unsigned long long>(number),
              static_cast<unsigned long long>(st.term));
      StopTerm();
      if (absl::Status started = StartTerm(false, st.term); !started.ok()) {
        fprintf(stderr, "xl-scheduler: cannot serve as a follower: %s\n",
                std::string(started.message()).c_str());
        std::abort();
      }
      continue;
    }
    if (lead || !st.leader) continue;
    // Leading: once every entry of earlier terms is applied here (a
    // barrier of this term), load the model from the database and act.
    const absl::Time elected = absl::Now();
    struct Answer {
      absl::Notification applied;
      absl::Status status;
    };
    auto answer = std::make_shared<Answer>();
    replicated_->Barrier([answer](absl::Status status) {
      answer->status = std::move(status);
      answer->applied.Notify();
    });
    absl::Notification& applied = answer->applied;
    const absl::Status& barrier = answer->status;
    // No quorum: the barrier never commits; the log answers it
    // UNAVAILABLE once this replica steps down. Shutdown does not wait.
    bool stop = false;
    while (!stop && !applied.WaitForNotificationWithTimeout(
                        absl::Milliseconds(100))) {
      absl::MutexLock lock(&mu_);
      stop = stopping_;
    }
    if (stop) return;
    const replica::RaftLog::State now = replicated_->log_state();
    if (!barrier.ok() || !now.leader || now.term != st.term) continue;
    const absl::Time caught_up = absl::Now();
    // The follower's server answers ("elected, loading") until the
    // leader's listens beside it.
    absl::Status started = StartTerm(true, st.term);
    if (!started.ok()) {
      fprintf(stderr, "xl-scheduler: cannot take the lead: %s\n",
              std::string(started.message()).c_str());
      std::abort();
    }
    fprintf(stderr,
            "xl-scheduler: replica %llu leads (term %llu): log applied in "
            "%lld ms, state loaded and serving in %lld ms more\n",
            static_cast<unsigned long long>(r.id),
            static_cast<unsigned long long>(st.term),
            static_cast<long long>(absl::ToInt64Milliseconds(caught_up - elected)),
            static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - caught_up)));
    if (const std::string url = metrics_url(); !url.empty()) {
      fprintf(stderr, "xl-scheduler: metrics on %s/metrics, dashboard on %s/\n",
              url.c_str(), url.c_str());
    }
  }
}

bool SchedulerServer::leading() const {
  absl::MutexLock lock(&mu_);
  return term_ != nullptr && term_->lead;
}

uint64_t SchedulerServer::term() const {
  absl::MutexLock lock(&mu_);
  return term_ != nullptr ? term_->number : 0;
}

std::string SchedulerServer::metrics_url() const {
  absl::MutexLock lock(&mu_);
  return metrics_url_;
}

int SchedulerServer::metrics_port() const {
  absl::MutexLock lock(&mu_);
  return metrics_port_;
}

std::string SchedulerServer::ScrapeMetrics() {
  absl::MutexLock lock(&mu_);
  return term_ != nullptr && term_->gateway != nullptr
             ? term_->gateway->Scrape()
             : "";
}

void SchedulerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
  std::unique_ptr<Term> last = StopTerm(/*shutting_down=*/true);
  store_.reset();  // commits what is queued; callbacks reach the controller
}

SchedulerServer::~SchedulerServer() { Shutdown(); }

}  // namespace xl::service
