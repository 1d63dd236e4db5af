#include "agent/session/node_credentials.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "agent/log.h"
#include "common/crypto/openssl.h"
#include "common/grpc_status.h"
#include "common/leader.h"
#include "common/status.h"
#include "xl/v1/auth.grpc.pb.h"

namespace xl::agent {
namespace {

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// Spends the join token: a new key pair, the public key to JoinNode, the
// signed certificate back; both kept under `dir`.
absl::Status Join(const NodeTlsOptions& o, const std::string& ca_pem,
                  const std::string& cert_path, const std::string& key_path) {
  if (o.name.empty()) {
    return absl::InvalidArgumentError(
        "--join-token: the node needs a name to join with; give --name");
  }
  ASSIGN_OR_RETURN(std::string key_pem, crypto::GeneratePrivateKeyPem());
  ASSIGN_OR_RETURN(std::string pub_pem, crypto::PublicKeyPem(key_pem));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem;
  v1::JoinNodeRequest req;
  req.set_join_token(o.join_token);
  req.set_node_name(o.name);
  req.set_public_key_pem(pub_pem);
  req.set_name_is_default(o.name_is_default);
  v1::JoinNodeResponse resp;
  // A replicated scheduler: each address in turn, and the leader a replica
  // names (common/leader.h).
  ASSIGN_OR_RETURN(std::vector<std::string> addresses,
                   SplitServerList(o.scheduler, "--scheduler"));
  grpc::Status st;
  std::string next;
  for (size_t i = 0; i < addresses.size() + 1; ++i) {
    const std::string address = !next.empty()              ? next
                                : i < addresses.size()     ? addresses[i]
                                                           : std::string();
    if (address.empty()) break;
    auto stub = v1::AuthService::NewStub(
        grpc::CreateChannel(address, grpc::SslCredentials(ssl)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    st = stub->JoinNode(&ctx, req, &resp);
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE &&
        st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      break;
    }
    // Only to an address of the list: the token goes nowhere else.
    next = LeaderHint(ctx);
    if (next == address ||
        std::find(addresses.begin(), addresses.end(), next) ==
            addresses.end()) {
      next.clear();
    }
  }
  if (!st.ok()) {
    return Annotate(FromGrpcStatus(st),
                    absl::StrCat("joining the cluster at ", o.scheduler));
  }
  // The key first: a certificate without its key is of no use.
  RETURN_IF_ERROR(crypto::WriteFileAtomically(key_path, key_pem, 0600));
  RETURN_IF_ERROR(
      crypto::WriteFileAtomically(cert_path, resp.certificate_pem(), 0600));
  LogLine(absl::StrCat("joined the cluster; the node's certificate is in ",
                       cert_path));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NodeCredentials> LoadNodeCredentials(const NodeTlsOptions& o) {
  NodeCredentials out;
  if (o.ca_file.empty()) {
    if (!o.cert_file.empty() || !o.key_file.empty() || !o.join_token.empty()) {
      return absl::InvalidArgumentError(
          "--tls-cert, --tls-key and --join-token need --tls-ca: the CA to "
          "verify the scheduler with");
    }
    return out;
  }
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together");
  }
  ASSIGN_OR_RETURN(std::string ca_pem, crypto::ReadFile(o.ca_file));
  std::string cert_path = o.cert_file, key_path = o.key_file;
  if (cert_path.empty()) {
    const std::string dir = absl::StrCat(o.work_dir, "/tls");
    cert_path = dir + "/node.crt";
    key_path = dir + "/node.key";
    if (!Exists(cert_path) || !Exists(key_path)) {
      if (o.join_token.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--tls-ca: the agent has no node certificate; give --tls-cert "
            "and --tls-key (issued by the cluster's CA), or --join-token "
            "(from 'xl-scheduler token create --join'); none was found in ",
            dir));
      }
      // The key's directory is the agent's alone, whatever was there.
      if ((mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) ||
          chmod(dir.c_str(), 0700) != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot make ", dir, " (mode 0700) for the node's key: ",
            strerror(errno), "; check --work-dir"));
      }
      RETURN_IF_ERROR(Join(o, ca_pem, cert_path, key_path));
    }
  }
  ASSIGN_OR_RETURN(std::string cert_pem, crypto::ReadFile(cert_path));
  ASSIGN_OR_RETURN(std::string key_pem, crypto::ReadFile(key_path));
  ASSIGN_OR_RETURN(out.certificate_name,
                   crypto::CertificateCommonName(cert_pem));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem;
  ssl.pem_cert_chain = cert_pem;
  ssl.pem_private_key = key_pem;
  out.channel = grpc::SslCredentials(ssl);
  return out;
}

}  // namespace xl::agent
