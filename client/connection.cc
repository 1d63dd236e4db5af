#include "client/connection.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <utility>

#include "absl/strings/str_cat.h"
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

}  // namespace

SchedulerConnection::SchedulerConnection(const ConnectionOptions& options)
    : SchedulerConnection(
          options, grpc::CreateChannel(options.server, Credentials(options))) {}

SchedulerConnection::SchedulerConnection(ConnectionOptions options,
                                         std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      jobs_(xl::v1::JobService::NewStub(channel_)),
      nodes_(xl::v1::NodeService::NewStub(channel_)),
      auth_(xl::v1::AuthService::NewStub(channel_)),
      queues_(xl::v1::QueueService::NewStub(channel_)) {}

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
