#include "server/dev_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  StopReplicas(10);
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

namespace {

// A port free on `host` now (the replica binds it a moment later).
absl::StatusOr<int> FreePort(const std::string& host) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(),
            &addr.sin_addr);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot find a free port on ", host, ": ", strerror(err)));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

absl::Status DevCluster::Spawn(Replica* r) {
  std::vector<char*> argv;
  for (auto& a : r->argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawn(&r->pid, argv[0], nullptr, nullptr, argv.data(),
                             environ);
  if (rc != 0) {
    r->pid = -1;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start ", argv[0], ": ", strerror(rc)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DevCluster::StartReplicas(
    const std::string& scheduler, int count, const std::string& host,
    int first_port, const std::vector<std::string>& extra) {
  std::vector<std::string> api, raft;
  for (int i = 0; i < count; ++i) {
    int port = first_port != 0 ? first_port + i : 0;
    if (port == 0) {
      ASSIGN_OR_RETURN(port, FreePort(host));
    }
    api.push_back(absl::StrCat(host, ":", port));
    ASSIGN_OR_RETURN(int raft_port, FreePort(host));
    raft.push_back(absl::StrCat(host, ":", raft_port));
  }
  std::vector<std::string> peers;
  for (int i = 0; i < count; ++i) {
    peers.push_back(absl::StrCat(i + 1, "=", raft[i], "/", api[i]));
  }
  for (int i = 0; i < count; ++i) {
    // Every replica starts from the same database: the admin token is in
    // all of them.
    const std::string db = absl::StrCat(dir_, "/replica-", i + 1, ".db");
    std::error_code ec;
    std::filesystem::copy_file(db_path(), db,
                               std::filesystem::copy_options::overwrite_existing,
                               ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("copying ", db_path(), " to ",
                                              db, ": ", ec.message()));
    }
    Replica r;
    r.argv = {scheduler, "--replica-id", absl::StrCat(i + 1), "--peers",
              absl::StrJoin(peers, ","), "--listen", api[i], "--db", db};
    if (tls_) {
      for (const std::string& a :
           {std::string("--tls-cert"), server_cert(),
            std::string("--tls-key"), server_key(), std::string("--tls-ca"),
            ca_cert(), std::string("--ca-cert"), ca_cert(),
            std::string("--ca-key"), ca_key()}) {
        r.argv.push_back(a);
      }
    }
    r.argv.insert(r.argv.end(), extra.begin(), extra.end());
    RETURN_IF_ERROR(Spawn(&r));
    replicas_.push_back(std::move(r));
  }
  return absl::StrJoin(api, ",");
}

void DevCluster::SuperviseReplicas() {
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    if (r.pid > 0) {
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      fprintf(stderr,
              "xl-scheduler: replica %zu (pid %d) ended (%s %d); starting it "
              "again in a second: it rejoins as a follower\n",
              i + 1, r.pid, WIFSIGNALED(status) ? "signal" : "exit status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      r.pid = -1;
      r.ended = absl::Now();
      continue;
    }
    if (absl::Now() - r.ended < absl::Seconds(1)) continue;
    if (absl::Status st = Spawn(&r); !st.ok()) {
      fprintf(stderr, "xl-scheduler: %s\n", std::string(st.message()).c_str());
      r.ended = absl::Now();
    }
  }
}

void DevCluster::StopReplicas(int grace_s) {
  for (const Replica& r : replicas_) {
    if (r.pid > 0) kill(r.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(grace_s);
  for (Replica& r : replicas_) {
    while (r.pid > 0) {
      const pid_t got = waitpid(r.pid, nullptr, WNOHANG);
      if (got == r.pid || (got < 0 && errno == ECHILD)) break;
      if (absl::Now() > deadline) {
        kill(r.pid, SIGKILL);
        waitpid(r.pid, nullptr, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    r.pid = -1;
  }
  replicas_.clear();
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
