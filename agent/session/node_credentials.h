// The agent's identity towards the scheduler: TLS that verifies the
// scheduler with --tls-ca, and the node's client certificate, either one an
// operator issued (--tls-cert, --tls-key) or one obtained by spending a join
// token (AuthService.JoinNode) and kept in <work-dir>/tls/ (mode 0600) for
// every later start. Called once from main, before the session starts.
#ifndef XL_AGENT_SESSION_NODE_CREDENTIALS_H_
#define XL_AGENT_SESSION_NODE_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace xl::agent {

struct NodeTlsOptions {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string join_token;
  std::string work_dir;
  // The name the node wants when it joins (the certificate's name).
  std::string name;
  // `name` is the hostname, not --name: a join token made for a node names
  // the node instead.
  bool name_is_default = false;
  std::string scheduler;
};

struct NodeCredentials {
  // Null: plaintext (no --tls-ca).
  std::shared_ptr<grpc::ChannelCredentials> channel;
  // The node name the certificate carries ("" without TLS).
  std::string certificate_name;
};

// Builds the session's credentials, joining the cluster first when only a
// join token is at hand. INVALID_ARGUMENT for flags that do not go
// together; the join's own errors (UNAUTHENTICATED for a spent token...).
absl::StatusOr<NodeCredentials> LoadNodeCredentials(
    const NodeTlsOptions& options);

}  // namespace xl::agent

#endif  // XL_AGENT_SESSION_NODE_CREDENTIALS_H_
