// The client side of xl-scheduler's API: one channel, the JobService and
// NodeService stubs, per-call contexts (identity metadata, deadline) and the
// turning of a failed call into an error message that says what to do next.
// Safe to share between threads, as the gRPC stubs are.
#ifndef XL_CLIENT_CONNECTION_H_
#define XL_CLIENT_CONNECTION_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "xl/v1/auth.grpc.pb.h"
#include "xl/v1/queue.grpc.pb.h"
#include "xl/v1/replica.pb.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl::client {

inline constexpr char kDefaultServer[] = "127.0.0.1:7070";

struct ConnectionOptions {
  // HOST:PORT of xl-scheduler, or a comma-separated list of a replicated
  // scheduler's replicas: the connection finds the one that leads.
  std::string server = kDefaultServer;
  // Sent as the "x-xl-user" call metadata (ignored by a scheduler with
  // auth on).
  std::string user;
  // Sent as "authorization: Bearer <token>" when not empty.
  std::string token;
  // PEM of the CA that signed the scheduler's certificate: the channel is
  // TLS when not empty.
  std::string tls_ca_pem;
  // Deadline of every unary call.
  absl::Duration timeout = absl::Seconds(10);
};

// Asks every address's ReplicaService at once, each call by `deadline`:
// one ReplicaStatus per address, in order, `address` as given. A scheduler
// from before replication counts as leading; one that did not answer has
// `unreachable` saying why.
v1::ReplicaStatusList AskReplicas(const std::vector<std::string>& addresses,
                                  const ConnectionOptions& options,
                                  absl::Time deadline);

class SchedulerConnection {
 public:
  // Opens a channel to options.server (TLS when options.tls_ca_pem is
  // set); it connects on first use. Given a list, it first asks each
  // replica (ReplicaService) which leads, for up to options.timeout (an
  // election may be under way), and opens the channel there.
  explicit SchedulerConnection(const ConnectionOptions& options);
  // Uses `channel` (for tests: an in-process server's channel).
  SchedulerConnection(ConnectionOptions options,
                      std::shared_ptr<grpc::Channel> channel);

  const ConnectionOptions& options() const { return options_; }
  // The address the channel goes to (the leader's, given a list).
  const std::string& address() const { return address_; }
  // A channel to `address` with the connection's credentials.
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) const;
  xl::v1::JobService::Stub& jobs() { return *jobs_; }
  xl::v1::NodeService::Stub& nodes() { return *nodes_; }
  xl::v1::AuthService::Stub& auth() { return *auth_; }
  xl::v1::QueueService::Stub& queues() { return *queues_; }

  // Returns a context for one unary call: the user metadata and a deadline
  // options().timeout from now. The call fails fast (UNAVAILABLE) when the
  // scheduler cannot be reached.
  std::unique_ptr<grpc::ClientContext> UnaryContext() const;

  // Returns a context for a server stream: the user metadata and `deadline`
  // (none when infinite), since a stream lasts as long as the job does.
  std::unique_ptr<grpc::ClientContext> StreamContext(
      absl::Time deadline = absl::InfiniteFuture()) const;

  // Returns the error for a failed call: `what` names the operation ("get job
  // 42"); the message says what to do next (for NOT_FOUND, `not_found_hint`).
  // The code is the call's, so it maps onto xlctl's exit codes.
  absl::Status CallError(const grpc::Status& status, absl::string_view what,
                         absl::string_view not_found_hint = "") const;

 private:
  ConnectionOptions options_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<xl::v1::JobService::Stub> jobs_;
  std::unique_ptr<xl::v1::NodeService::Stub> nodes_;
  std::unique_ptr<xl::v1::AuthService::Stub> auth_;
  std::unique_ptr<xl::v1::QueueService::Stub> queues_;
};

}  // namespace xl::client

#endif  // XL_CLIENT_CONNECTION_H_
