#include "server/dev_cluster.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/identity.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/crypto/openssl.h"
#include "common/status.h"
#include "server/auth/token_store.h"

extern char** environ;

namespace xl::server {

absl::StatusOr<DevCluster> DevCluster::Create(bool keep) {
  const char* tmp = getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/xl-dev-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create ", templ, ": ", strerror(errno),
        "; set TMPDIR to a writable directory"));
  }
  DevCluster c;
  c.dir_ = buf.data();
  c.keep_ = keep;
  return c;
}

DevCluster::~DevCluster() {
  if (dir_.empty()) return;
  StopAgents(10);
  if (!keep_) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

absl::StatusOr<std::string> DevCluster::MakeCredentials(
    int agents, const std::string& user) {
  const std::string tls = dir_ + "/tls";
  mkdir(tls.c_str(), 0700);
  auto issue = [](const crypto::CertificateSubject& subject,
                  const std::string& ca_cert, const std::string& ca_key,
                  const std::string& cert_path, const std::string& key_path)
      -> absl::StatusOr<std::pair<std::string, std::string>> {
    ASSIGN_OR_RETURN(std::string key, crypto::GeneratePrivateKeyPem());
    ASSIGN_OR_RETURN(std::string pub, crypto::PublicKeyPem(key));
    ASSIGN_OR_RETURN(
        std::string cert,
        crypto::IssueCertificate(subject, pub, ca_cert,
                                 ca_cert.empty() ? key : ca_key));
    RETURN_IF_ERROR(crypto::WriteFileAtomically(key_path, key, 0600));
    RETURN_IF_ERROR(crypto::WriteFileAtomically(cert_path, cert, 0644));
    return std::make_pair(cert, key);
  };
  crypto::CertificateSubject ca;
  ca.common_name = "xl dev CA";
  ca.is_ca = true;
  ca.validity = absl::Hours(24 * 30);
  ASSIGN_OR_RETURN(auto ca_pair, issue(ca, "", "", ca_cert(), ca_key()));
  crypto::CertificateSubject server;
  server.common_name = "localhost";
  server.dns_names = {"localhost"};
  server.ip_addresses = {"127.0.0.1", "::1"};
  server.server_auth = true;
  server.validity = ca.validity;
  RETURN_IF_ERROR(issue(server, ca_pair.first, ca_pair.second, server_cert(),
                        server_key())
                      .status());
  for (int i = 0; i < agents; ++i) {
    crypto::CertificateSubject node;
    node.common_name = absl::StrCat("dev-", i);
    node.uris = {absl::StrCat(kNodeCertificateUriPrefix, node.common_name)};
    node.client_auth = true;
    node.validity = ca.validity;
    RETURN_IF_ERROR(issue(node, ca_pair.first, ca_pair.second,
                          absl::StrCat(tls, "/dev-", i, ".crt"),
                          absl::StrCat(tls, "/dev-", i, ".key"))
                        .status());
  }
  ASSIGN_OR_RETURN(auto tokens, auth::TokenStore::Open(db_path()));
  ASSIGN_OR_RETURN(auto made, tokens->Create(auth::kUserToken, user, true,
                                             absl::Hours(24 * 30), absl::Now()));
  RETURN_IF_ERROR(
      crypto::WriteFileAtomically(tls + "/token", made.second + "\n", 0600));
  tls_ = true;
  return made.second;
}

absl::Status DevCluster::WriteClientEnv(const std::string& path,
                                        const std::string& server,
                                        const std::string& token) const {
  std::string text = absl::StrCat("export XL_SERVER=", server, "\n");
  if (tls_) {
    absl::StrAppend(&text, "export XL_TLS_CA=", ca_cert(), "\n",
                    "export XL_TOKEN=", token, "\n");
  }
  return crypto::WriteFileAtomically(path, text, 0600);
}

absl::Status DevCluster::StartAgents(
    const std::string& agent_binary, const std::string& scheduler, int count,
    const std::vector<std::string>& inventories) {
  for (int i = 0; i < count; ++i) {
    std::string name = absl::StrCat("dev-", i);
    std::string work = absl::StrCat(dir_, "/", name);
    mkdir(work.c_str(), 0755);
    // One person's cluster on one machine, often started as root: every
    // job runs as that person, root included. Its directory goes with it,
    // so its agents stop their ranks when it stops (--drain).
    std::vector<std::string> args = {agent_binary, "--scheduler", scheduler,
                                     "--work-dir", work, "--name", name,
                                     "--run-as", "agent", "--allow-root-jobs",
                                     "--drain"};
    if (tls_) {
      for (const std::string& a :
           {std::string("--tls-ca"), ca_cert(), std::string("--tls-cert"),
            absl::StrCat(dir_, "/tls/", name, ".crt"),
            std::string("--tls-key"),
            absl::StrCat(dir_, "/tls/", name, ".key")}) {
        args.push_back(a);
      }
    }
    if (i < static_cast<int>(inventories.size())) {
      args.push_back("--inventory");
      args.push_back(inventories[i]);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    int rc = posix_spawn(&pid, agent_binary.c_str(), nullptr, nullptr,
                         argv.data(), environ);
    if (rc != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot start ", agent_binary, ": ", strerror(rc),
                       "; build it (see README) or pass --agent-binary"));
    }
    agents_.push_back(pid);
  }
  return absl::OkStatus();
}

void DevCluster::StopAgents(int grace_s) {
  for (pid_t pid : agents_) kill(pid, SIGTERM);
  absl::Time deadline = absl::Now() + absl::Seconds(grace_s);
  for (pid_t pid : agents_) {
    while (true) {
      pid_t r = waitpid(pid, nullptr, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) break;
      if (absl::Now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  agents_.clear();
}

absl::StatusOr<std::string> FindAgentBinary() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto dir = self.parent_path();
    for (auto candidate : {dir / "xl-agent", dir / ".." / "agent" / "xl-agent"}) {
      if (access(candidate.c_str(), X_OK) == 0) {
        return std::filesystem::weakly_canonical(candidate).string();
      }
    }
  }
  const char* path = getenv("PATH");
  for (auto dir : absl::StrSplit(path ? path : "", ':')) {
    std::string candidate = absl::StrCat(dir, "/xl-agent");
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(
      "cannot find xl-agent next to xl-scheduler or in PATH; build it or "
      "pass --agent-binary");
}

}  // namespace xl::server
