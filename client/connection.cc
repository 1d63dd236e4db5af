#include "client/connection.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <utility>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/leader.h"
#include "xl/v1/replica.grpc.pb.h"
#include "common/duration.h"
#include "common/identity.h"

namespace xl::client {

namespace {

std::shared_ptr<grpc::ChannelCredentials> Credentials(
    const ConnectionOptions& options) {
  if (options.tls_ca_pem.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.tls_ca_pem;
  return grpc::SslCredentials(ssl);
}

// The replica of `servers` that leads: asked in parallel, again until
// `timeout` passes (an election takes about a second). The first address
// when none says so in time (its calls then say why).
std::string FindLeader(const std::vector<std::string>& servers,
                       const ConnectionOptions& options) {
  const absl::Time until = absl::Now() + options.timeout;
  while (true) {
    const v1::ReplicaStatusList all = AskReplicas(
        servers, options, std::min(until, absl::Now() + absl::Seconds(1)));
    // A deposed leader may not know yet: the newest term wins.
    int best = -1;
    for (int i = 0; i < all.replicas_size(); ++i) {
      const v1::ReplicaStatus& r = all.replicas(i);
      if (r.unreachable().empty() && r.leader() &&
          (best < 0 || r.term() > all.replicas(best).term())) {
        best = i;
      }
    }
    if (best >= 0) return servers[best];
    if (absl::Now() >= until) return servers[0];
    absl::SleepFor(absl::Milliseconds(200));
  }
}

}  // namespace

v1::ReplicaStatusList AskReplicas(const std::vector<std::string>& addresses,
                                  const ConnectionOptions& options,
                                  absl::Time deadline) {
  v1::ReplicaStatusList all;
  for (size_t i = 0; i < addresses.size(); ++i) all.add_replicas();
  std::vector<std::thread> asks;
  for (size_t i = 0; i < addresses.size(); ++i) {
    asks.emplace_back([&, i] {
      v1::ReplicaStatus* r = all.mutable_replicas(static_cast<int>(i));
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      const grpc::Status st =
          v1::ReplicaService::NewStub(
              grpc::CreateChannel(addresses[i], Credentials(options)))
              ->GetReplicaStatus(&ctx, v1::GetReplicaStatusRequest(), r);
      if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        r->Clear();
        r->set_leader(true);  // a scheduler from before replication
      } else if (!st.ok()) {
        r->Clear();
        r->set_unreachable(st.error_message());
      }
      r->set_address(addresses[i]);  // as given, which the caller can reach
    });
  }
  for (std::thread& t : asks) t.join();
  return all;
}

SchedulerConnection::SchedulerConnection(const ConnectionOptions& options)
    : SchedulerConnection(options, nullptr) {}

SchedulerConnection::SchedulerConnection(ConnectionOptions options,
                                         std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)), address_(options_.server) {
  if (channel == nullptr) {
    auto list = SplitServerList(options_.server, "--server");
    if (list.ok() && list->size() > 1) address_ = FindLeader(*list, options_);
    channel = ChannelTo(address_);
  }
  channel_ = std::move(channel);
  jobs_ = xl::v1::JobService::NewStub(channel_);
  nodes_ = xl::v1::NodeService::NewStub(channel_);
  auth_ = xl::v1::AuthService::NewStub(channel_);
  queues_ = xl::v1::QueueService::NewStub(channel_);
}

std::shared_ptr<grpc::Channel> SchedulerConnection::ChannelTo(
    const std::string& address) const {
  return grpc::CreateChannel(address, Credentials(options_));
}

std::unique_ptr<grpc::ClientContext> SchedulerConnection::UnaryContext() const {
  auto context = StreamContext();
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  return context;
}

std::unique_ptr<grpc::ClientContext> SchedulerConnection::StreamContext(
    absl::Time deadline) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata(xl::kUserMetadataKey, options_.user);
  // A token travels only over TLS: sent in plaintext it could be read, or
  // collected by whatever listens on the address.
  if (!options_.token.empty() && !options_.tls_ca_pem.empty()) {
    context->AddMetadata("authorization",
                         absl::StrCat("Bearer ", options_.token));
  }
  if (deadline != absl::InfiniteFuture()) {
    context->set_deadline(absl::ToChronoTime(deadline));
  }
  return context;
}

absl::Status SchedulerConnection::CallError(
    const grpc::Status& status, absl::string_view what,
    absl::string_view not_found_hint) const {
  const std::string& msg = status.error_message();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  std::string text;
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return absl::OkStatus();
    case grpc::StatusCode::UNAVAILABLE:
      if (absl::StrContains(msg, "does not lead")) {
        // A replica that follows: its message names the leader.
        text = absl::StrCat(what, ": ", msg);
        break;
      }
      text = absl::StrCat("cannot reach the xl scheduler at ", options_.server,
                          ": ", msg,
                          "; is xl-scheduler running? set --server or "
                          "XL_SERVER",
                          options_.tls_ca_pem.empty()
                              ? "; if it serves TLS, give its CA with "
                                "--tls-ca (XL_TLS_CA)"
                              : "; if it does not serve TLS, drop --tls-ca");
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      text = absl::StrCat(what, ": the xl scheduler at ", options_.server,
                          " did not answer within ",
                          xl::HumanDuration(options_.timeout),
                          "; try again, raise --timeout, or check that "
                          "xl-scheduler is healthy");
      break;
    case grpc::StatusCode::NOT_FOUND:
      text = absl::StrCat(what, ": ", msg, not_found_hint);
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      text = absl::StrCat(what, ": the scheduler rejected the request: ", msg,
                          "; correct it and try again");
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      text = absl::StrCat(
          what, ": ", msg,
          options_.token.empty()
              ? "; log in with 'xlctl login' (with a token from an admin) "
                "or set XL_TOKEN"
          : options_.tls_ca_pem.empty()
              ? "; your token was not sent, since xlctl sends tokens only "
                "over TLS: give the scheduler's CA with --tls-ca (XL_TLS_CA)"
              : "; your token is not accepted: get a new one and run "
                "'xlctl login'");
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      text = absl::StrCat(what, ": ", msg);
      if (options_.token.empty()) {
        absl::StrAppend(&text, "; you are \"", options_.user,
                        "\" (set --user or XL_USER)");
      }
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      text = absl::StrCat(what, ": the scheduler at ", options_.server,
                          " does not offer this call (", msg,
                          "); use an xlctl that matches its version");
      break;
    default:
      text = absl::StrCat(what, ": ", msg);
      break;
  }
  return absl::Status(code, text);
}

}  // namespace xl::client
