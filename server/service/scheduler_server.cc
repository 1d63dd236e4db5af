#include "server/service/scheduler_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status.h"

namespace xl::service {

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
  auto store = store::SqliteStore::Open(opts.db);
  if (!store.ok()) return Annotate(store.status(), "--db");
  s->store_ = std::move(*store);

  size_t colon = opts.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen: '", opts.listen, "' is not HOST:PORT, e.g. 127.0.0.1:7070"));
  }
  const std::string host = opts.listen.substr(0, colon);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(opts.listen, grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);

  // The controller needs the final address for XL_SCHEDULER, known only
  // after binding; build the services first, start the loop after.
  control::ControllerOptions copts = opts.controller;
  s->controller_ = std::make_unique<Controller>(s->store_.get(),
                                                RealClock::Get(), copts);
  auto recovered = s->controller_->Recover();
  if (!recovered.ok()) return Annotate(recovered, "recovering from --db");
  s->jobs_ = std::make_unique<JobServiceImpl>(s->controller_.get());
  s->nodes_ = std::make_unique<NodeServiceImpl>(s->controller_.get());
  s->agents_ = std::make_unique<AgentServiceImpl>(s->controller_.get());
  builder.RegisterService(s->jobs_.get());
  builder.RegisterService(s->nodes_.get());
  builder.RegisterService(s->agents_.get());
  s->rendezvous_ = std::make_unique<RendezvousServiceImpl>(s->controller_.get());
  builder.RegisterService(s->rendezvous_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "--listen: cannot listen on ", opts.listen,
        "; is another xl-scheduler running there? pick another port"));
  }
  s->address_ = absl::StrCat(host, ":", s->port_);
  s->controller_->SetAdvertiseAddressIfEmpty(s->address_);
  s->controller_->Start();
  return s;
}

void SchedulerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
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
