// xl-scheduler: the gRPC service that keeps jobs and nodes in SQLite and
// places each job, all or nothing, on agents.
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/duration.h"
#include "server/auth/token_store.h"
#include "server/dev_cluster.h"
#include "server/scheduler_flags.h"
#include "server/service/scheduler_server.h"
#include "server/store/db_lock.h"

#ifndef XL_VERSION
#define XL_VERSION "dev"
#endif

namespace {

using xl::server::AddOptions;
using xl::server::AddTokenCommands;
using xl::server::Flags;
using xl::server::ResolveFlags;
using xl::server::TokenCommand;
using xl::server::TokenCommands;

int Fail(const std::string& msg) {
  fprintf(stderr, "xl-scheduler: %s\n", msg.c_str());
  return 1;
}

std::string LocalUser() {
  const char* user = getenv("USER");
  if (user != nullptr && *user != '\0') return user;
  if (const struct passwd* pw = getpwuid(getuid()); pw != nullptr) {
    return pw->pw_name;
  }
  return "admin";
}

std::string TimeText(absl::Time t) {
  if (t == absl::InfiniteFuture()) return "never";
  if (t == absl::InfinitePast()) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", t, absl::LocalTimeZone());
}

int RunTokenCommand(const std::string& verb, const TokenCommand& c) {
  if (c.db.empty())
    return Fail("token: --db is required: the scheduler's SQLite file");
  // A running scheduler holds the database; it manages tokens itself.
  auto lock = xl::store::DbLock::Acquire(c.db);
  if (!lock.ok()) {
    return Fail(absl::StrCat(
        "token ", verb, ": ", lock.status().message(),
        "; while it runs, manage tokens through it as an admin: xlctl "
        "token ",
        verb, verb == "create" ? " --user U [--admin]" : "",
        verb == "revoke" ? " ID" : ""));
  }
  umask(077);  // a database made here is private, as the scheduler's is
  auto tokens = xl::auth::TokenStore::Open(c.db);
  if (!tokens.ok()) return Fail(std::string(tokens.status().message()));
  const absl::Time now = absl::Now();
  if (verb == "create") {
    absl::Duration ttl;
    const std::string ttl_text =
        c.ttl.empty() ? (c.join ? "1h" : "90d") : c.ttl;
    if (!xl::ParseLifetime(ttl_text, &ttl)) {
      return Fail(absl::StrCat("--ttl: '", ttl_text,
                               "' is not a duration; give one such as 1h, "
                               "30d or never"));
    }
    if (c.join && !c.user.empty()) {
      return Fail("--user: a join token is for a node; use --node NAME");
    }
    std::string given;
    if (!c.token_file.empty() && access(c.token_file.c_str(), F_OK) == 0) {
      std::ifstream in(c.token_file);
      std::getline(in, given);
      if (!in && given.empty()) {
        return Fail(absl::StrCat("--token-file ", c.token_file,
                                 ": cannot read it"));
      }
    }
    auto made = (*tokens)->Create(
        c.join ? xl::auth::kJoinToken : xl::auth::kUserToken,
        c.join ? c.node : c.user, c.admin, ttl, now, c.groups, given);
    if (!made.ok()) return Fail(std::string(made.status().message()));
    if (!c.token_file.empty() && given.empty()) {
      const mode_t old = umask(077);
      std::ofstream out(c.token_file);
      out << made->second << "\n";
      out.close();
      umask(old);
      if (!out) {
        return Fail(absl::StrCat("--token-file ", c.token_file,
                                 ": cannot write it; the token is ",
                                 made->first.id, ", revoke it"));
      }
    }
    printf("%s\n", made->second.c_str());
    fprintf(stderr,
            "xl-scheduler: token %s (%s%s%s) expires %s; it is shown only "
            "this once\n",
            made->first.id.c_str(), c.join ? "join" : "user ",
            c.join ? "" : c.user.c_str(), c.admin ? ", admin" : "",
            TimeText(made->first.expires).c_str());
    return 0;
  }
  if (verb == "revoke") {
    auto info = (*tokens)->Revoke(c.id, now);
    if (!info.ok()) return Fail(std::string(info.status().message()));
    printf("token %s revoked\n", c.id.c_str());
    return 0;
  }
  auto list = (*tokens)->List();
  if (!list.ok()) return Fail(std::string(list.status().message()));
  printf("%-16s  %-4s  %-20s  %-5s  %-25s  %s\n", "ID", "KIND", "USER/NODE",
         "ADMIN", "EXPIRES", "STATE");
  for (const auto& t : *list) {
    std::string state = "valid";
    if (t.revoked != absl::InfinitePast()) {
      state = t.used_by.empty() ? "revoked" : "used by " + t.used_by;
    } else if (now >= t.expires) {
      state = "expired";
    }
    printf("%-16s  %-4s  %-20s  %-5s  %-25s  %s\n", t.id.c_str(),
           t.kind.c_str(), t.user.c_str(), t.admin ? "yes" : "no",
           TimeText(t.expires).c_str(), state.c_str());
  }
  return 0;
}

// Runs the `token` subcommand that was given.
int RunToken(const xl::server::TokenCommands& cmds,
             const xl::server::TokenCommand& token) {
  if (cmds.create->parsed()) {
    if (!token.join && token.user.empty()) {
      return Fail("token create: --user is required (or --join)");
    }
    return RunTokenCommand("create", token);
  }
  return RunTokenCommand(cmds.revoke->parsed() ? "revoke" : "list", token);
}

// With --dev: a throw-away directory with its database, certificates and
// an admin token (returned) for whoever started it. Without: --db is
// required.
absl::StatusOr<std::string> PrepareDev(
    Flags* f, std::optional<xl::server::DevCluster>* cluster) {
  xl::service::ServerOptions& opts = f->opts;
  if (!f->dev) {
    if (opts.db.empty()) {
      return absl::InvalidArgumentError(
          "--db is required: give the SQLite file to keep jobs in (for "
          "example --db /var/lib/xl/xl.db), or use --dev to try xl on one "
          "machine");
    }
    return std::string();
  }
  if (!opts.db.empty()) {
    return absl::InvalidArgumentError(
        "--dev makes its own database; drop --db");
  }
  auto c = xl::server::DevCluster::Create(f->keep);
  if (!c.ok()) return c.status();
  cluster->emplace(std::move(*c));
  opts.db = (*cluster)->db_path();
  // The dev cluster is secure too: TLS, node certificates and an admin
  // token for whoever started it.
  if (!opts.tls_cert_file.empty() || opts.insecure) {
    return absl::InvalidArgumentError(
        "--dev makes its own certificates; drop --tls-* and --insecure");
  }
  auto made = (*cluster)->MakeCredentials(f->agents, LocalUser());
  if (!made.ok()) return made.status();
  opts.tls_cert_file = (*cluster)->server_cert();
  opts.tls_key_file = (*cluster)->server_key();
  opts.tls_ca_file = (*cluster)->ca_cert();
  opts.ca_cert_file = (*cluster)->ca_cert();
  opts.ca_key_file = (*cluster)->ca_key();
  return *made;
}

// Starts the server with a database readable by this user only: it holds
// every job's environment and the tokens' hashes (SQLite gives its -wal and
// -shm files the database's mode).
absl::StatusOr<std::unique_ptr<xl::service::SchedulerServer>> StartPrivate(
    const xl::service::ServerOptions& opts) {
  const mode_t old_umask = umask(077);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string f = opts.db + suffix;
    if (access(f.c_str(), F_OK) == 0 && chmod(f.c_str(), 0600) != 0) {
      fprintf(stderr, "xl-scheduler: WARNING: cannot make %s private: %s\n",
              f.c_str(), strerror(errno));
    }
  }
  auto server = xl::service::SchedulerServer::Start(opts);
  umask(old_umask);
  return server;
}

// Says where the server listens and how it is secured.
void Announce(const xl::service::ServerOptions& opts,
              const xl::service::SchedulerServer& server) {
  printf("xl-scheduler: listening on %s (db %s; %s)\n",
         server.address().c_str(), opts.db.c_str(),
         server.auth_enabled() ? "TLS, tokens and node certificates"
                               : "no TLS: callers name themselves");
  if (!server.security_warning().empty()) {
    fprintf(stderr, "xl-scheduler: WARNING: %s\n",
            server.security_warning().c_str());
  }
  if (!server.metrics_url().empty()) {
    printf("xl-scheduler: metrics on %s/metrics, dashboard on %s/\n",
           server.metrics_url().c_str(), server.metrics_url().c_str());
  }
  fflush(stdout);
}

// Writes the bound ports to --port-file and --metrics-port-file (each
// renamed into place whole).
void WritePortFiles(const Flags& f,
                    const xl::service::SchedulerServer& server) {
  for (const auto& [file, port] :
       {std::make_pair(f.port_file, server.port()),
        std::make_pair(f.metrics_port_file, server.metrics_port())}) {
    if (file.empty()) continue;
    std::ofstream out(file + ".tmp");
    out << port << "\n";
    out.close();
    rename((file + ".tmp").c_str(), file.c_str());
  }
}

// With --dev: the shell lines that point xlctl at the cluster (`address`:
// one, or every replica's), in its directory and in --dev-env.
absl::Status WriteDevEnv(const Flags& f, xl::server::DevCluster* cluster,
                         const std::string& address,
                         const std::string& token) {
  const std::string env_file = cluster->dir() + "/xlctl.env";
  for (const std::string& file : {env_file, f.dev_env}) {
    if (file.empty()) continue;
    absl::Status st = cluster->WriteClientEnv(file, address, token);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

// With --dev: starts the agents, connecting to `address`.
absl::Status StartDevAgents(Flags* f, xl::server::DevCluster* cluster,
                            const std::string& address) {
  if (f->agent_binary.empty()) {
    auto found = xl::server::FindAgentBinary();
    if (!found.ok()) return found.status();
    f->agent_binary = *found;
  }
  absl::Status st = cluster->StartAgents(f->agent_binary, address,
                                         f->agents, f->inventories);
  if (!st.ok()) return st;
  printf(
      "xl-scheduler: dev cluster in %s with %d agents; an admin token "
      "for you is in %s/tls/token; try: . %s/xlctl.env && xlctl nodes\n",
      cluster->dir().c_str(), f->agents, cluster->dir().c_str(),
      cluster->dir().c_str());
  fflush(stdout);
  return absl::OkStatus();
}

// The flags of a --dev --replicas run that each replica takes too: all but
// those of the dev cluster itself, the addresses and files each replica
// gets of its own, and --config (give the flags on the command line).
std::vector<std::string> ReplicaFlags(int argc, char** argv) {
  static const char* const kValued[] = {
      "--replicas", "--agents", "--agent-inventory", "--agent-binary",
      "--listen", "--port-file", "--metrics-port-file", "--dev-env",
      "--metrics-listen", "--config", "--db"};
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string name = arg.substr(0, arg.find('='));
    if (name == "--dev" || name == "--keep-dev-dir") continue;
    bool valued = false;
    for (const char* v : kValued) valued = valued || name == v;
    if (valued) {
      if (arg.find('=') == std::string::npos) ++i;  // its value too
      continue;
    }
    out.push_back(arg);
  }
  return out;
}

// `--dev --replicas N`: N scheduler replicas (child processes, started
// again when one ends), the agents, until SIGINT or SIGTERM.
int RunDevReplicas(Flags* f, xl::server::DevCluster* cluster,
                   const std::string& token, const sigset_t& signals,
                   int argc, char** argv) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return Fail("--replicas: cannot find this binary's path");
  self[n] = '\0';
  const std::string& listen = f->opts.listen;
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port)) {
    return Fail(absl::StrCat("--listen: '", listen,
                             "' is not HOST:PORT, e.g. 127.0.0.1:7070"));
  }
  auto list = cluster->StartReplicas(self, f->replicas,
                                     listen.substr(0, colon), port,
                                     ReplicaFlags(argc, argv));
  if (!list.ok()) return Fail(std::string(list.status().message()));
  printf("xl-scheduler: dev cluster of %d replicas at %s (TLS, tokens and "
         "node certificates); kill the leader (xlctl servers names it) to "
         "see another take over\n",
         f->replicas, list->c_str());
  fflush(stdout);
  if (absl::Status st = WriteDevEnv(*f, cluster, *list, token); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  if (!f->port_file.empty()) {
    std::ofstream out(f->port_file + ".tmp");
    // The first replica's API port.
    const std::string first = list->substr(0, list->find(','));
    out << first.substr(first.rfind(':') + 1) << "\n";
    out.close();
    rename((f->port_file + ".tmp").c_str(), f->port_file.c_str());
  }
  if (absl::Status st = StartDevAgents(f, cluster, *list); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  const timespec tick{0, 200 * 1000 * 1000};
  int sig = -1;
  while (sig < 0) {
    sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig < 0) cluster->SuperviseReplicas();
  }
  fprintf(stderr, "xl-scheduler: stopping (signal %d)\n", sig);
  cluster->StopAgents(10);
  cluster->StopReplicas(10);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Lock-order checks run in tests; in the server they cost a graph lookup
  // on every lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{
      "xl-scheduler: keeps jobs and node inventories in SQLite and places "
      "each job, all or nothing, on xl-agent nodes.\n\n"
      "  xl-scheduler --listen 127.0.0.1:7070 --db /var/lib/xl/xl.db\n"
      "  xl-scheduler --dev --agents 2      # one-machine cluster for trying "
      "xl"};
  Flags f;
  AddOptions(&app, &f);
  const TokenCommands token = AddTokenCommands(&app, &f);
  app.footer(
      "Stops cleanly on SIGINT or SIGTERM. Exit status: 0 after a clean stop, "
      "1 when it cannot start (the message says why).");
  f.opts.version = XL_VERSION;
  CLI11_PARSE(app, argc, argv);
  if (token.token->parsed()) return RunToken(token, f.token);
  if (absl::Status st = ResolveFlags(&f); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  // Signals are taken by sigwait below; every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::optional<xl::server::DevCluster> cluster;
  absl::StatusOr<std::string> dev_token = PrepareDev(&f, &cluster);
  if (!dev_token.ok()) return Fail(std::string(dev_token.status().message()));
  if (f.dev && f.replicas > 1) {
    return RunDevReplicas(&f, &*cluster, *dev_token, signals, argc, argv);
  }
  auto server = StartPrivate(f.opts);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  Announce(f.opts, **server);
  if (f.dev) {
    absl::Status st =
        WriteDevEnv(f, &*cluster, (*server)->address(), *dev_token);
    if (!st.ok()) return Fail(std::string(st.message()));
  }
  // Written once the dev cluster's xlctl.env is there: callers wait on it.
  WritePortFiles(f, **server);
  if (f.dev) {
    absl::Status st = StartDevAgents(&f, &*cluster, (*server)->address());
    if (!st.ok()) return Fail(std::string(st.message()));
  }
  int sig = 0;
  sigwait(&signals, &sig);
  fprintf(stderr, "xl-scheduler: stopping (signal %d)\n", sig);
  if (cluster) cluster->StopAgents(10);
  (*server)->Shutdown();
  return 0;
}
