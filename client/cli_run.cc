// Running a parsed invocation: credentials and connection settings resolved,
// the subcommand dispatched to Commands, errors printed with their exit code.
#include <unistd.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "client/credentials.h"
#include "client/exit_code.h"
#include "client/output.h"
#include "common/argv.h"
#include "common/crypto/openssl.h"
#include "common/status.h"

namespace xl::client {
namespace {

absl::Status Dispatch(const Invocation& inv, Commands& commands) {
  const std::string& c = inv.command;
  if (c == "submit") return commands.Submit(inv.submit);
  if (c == "get") return commands.Get(inv.job_id);
  if (c == "explain") return commands.Explain(inv.job_id);
  if (c == "list") return commands.List(inv.list);
  if (c == "queue") return commands.QueueCommand(inv.queue);
  if (c == "share") return commands.Share();
  if (c == "cancel") return commands.Cancel(inv.job_id, inv.reason);
  if (c == "set-priority") {
    return commands.SetPriority(inv.job_id, inv.priority, inv.reason);
  }
  if (c == "logs") return commands.Logs(inv.job_id, inv.logs);
  if (c == "watch") return commands.Watch(inv.job_id);
  if (c == "wait") {
    std::optional<absl::Duration> timeout;
    if (inv.wait_timeout) {
      ASSIGN_OR_RETURN(timeout,
                       ParseDurationFlag("wait --timeout", *inv.wait_timeout));
    }
    return commands.Wait(inv.job_id, timeout);
  }
  if (c == "top") {
    TopOptions options = inv.top;
    if (inv.top_interval) {
      ASSIGN_OR_RETURN(options.interval,
                       ParseDurationFlag("top --interval", *inv.top_interval));
      options.interval_given = true;
    }
    return commands.Top(options);
  }
  if (c == "metrics") return commands.Metrics(inv.job_id);
  if (c == "nodes") return commands.Nodes();
  if (c == "servers") return commands.Servers();
  if (c == "node") return commands.Node(inv.node);
  if (c == "drain") return commands.Drain(inv.node, inv.reason);
  if (c == "resume") return commands.Resume(inv.node);
  if (c == "whoami") return commands.WhoAmI();
  if (c == "login") return commands.Login(inv.token, inv.tls_ca_pem);
  if (c == "token") {
    const TokenFlags& t = inv.token_cmd;
    if (t.verb == "create") {
      return commands.TokenCreate(t.user, t.admin, t.ttl, t.join, t.node,
                                  t.groups);
    }
    if (t.verb == "revoke") return commands.TokenRevoke(t.id);
    return commands.TokenList();
  }
  if (c == "plan") {
    ASSIGN_OR_RETURN(PlanOptions options, BuildPlanOptions(inv.plan));
    return commands.Plan(options);
  }
  return UsageError(absl::StrCat("unknown command \"", c,
                                 "\"; run 'xlctl --help' for the commands"));
}

// Fills in the token and the CA: flags and environment first, then what
// 'xlctl login' stored. `login` reads its token from stdin when none is
// given, and never falls back to the stored one.
absl::Status ResolveCredentials(Invocation* inv) {
  if (inv->command == "login") {
    if (inv->token.empty() && isatty(STDIN_FILENO) != 1) {
      std::string line;
      std::getline(std::cin, line);
      inv->token = std::string(absl::StripAsciiWhitespace(line));
    }
  } else if (inv->token.empty()) {
    auto stored = ReadStoredToken();
    if (!stored.ok()) {
      return absl::Status(
          stored.status().code(),
          absl::StrCat("reading the stored token: ", stored.status().message(),
                       "; fix its mode or log in again"));
    }
    inv->token = *stored;
  }
  std::string ca_path = inv->tls_ca;
  if (ca_path.empty() && inv->command != "login") {
    if (access(StoredCaPath().c_str(), F_OK) == 0) ca_path = StoredCaPath();
  }
  if (!ca_path.empty()) {
    auto pem = crypto::ReadFile(ca_path);
    if (!pem.ok()) {
      return absl::Status(
          pem.status().code(),
          absl::StrCat("--tls-ca: ", pem.status().message(),
                       "; give the CA certificate file of the scheduler"));
    }
    inv->tls_ca_pem = *pem;
  }
  return absl::OkStatus();
}

absl::Status RunStatus(const Invocation& inv, std::ostream& out,
                       std::ostream& err) {
  ASSIGN_OR_RETURN(OutputFormat format, ParseOutputFormat(inv.output));
  if (format == OutputFormat::kCsv && inv.command != "metrics") {
    return UsageError(absl::StrCat(
        "-o csv: only `xlctl metrics` prints CSV; use -o json or -o yaml "
        "for `xlctl ",
        inv.command, "`"));
  }
  ASSIGN_OR_RETURN(absl::Duration timeout,
                   ParseDurationFlag("--timeout", inv.timeout));
  if (timeout <= absl::ZeroDuration()) {
    return UsageError("--timeout: must be more than 0, like 10s");
  }
  Invocation resolved = inv;
  RETURN_IF_ERROR(ResolveCredentials(&resolved));
  ConnectionOptions options;
  options.server = resolved.server;
  options.user = resolved.user;
  options.token = resolved.token;
  options.tls_ca_pem = resolved.tls_ca_pem;
  options.timeout = timeout;
  SchedulerConnection connection(options);
  Commands commands(&connection, format, &out, &err);
  commands.set_terminal(&out == &std::cout && isatty(STDOUT_FILENO) == 1);
  return Dispatch(resolved, commands);
}

}  // namespace

int RunInvocation(const Invocation& invocation, std::ostream& out,
                  std::ostream& err) {
  absl::Status status = RunStatus(invocation, out, err);
  out.flush();
  if (!status.ok()) {
    // Errors echo values other users chose (a job's reason, a node's):
    // escaped, line by line, like every table.
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
      lines.push_back(Printable(line));
    }
    err << "xlctl: " << absl::StrJoin(lines, "\n") << "\n";
  }
  return ExitCodeFor(status);
}

int XlctlMain(int argc, char** argv) {
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  // Copied: the token leaves what ps shows (common/argv.h).
  HideArgumentValues(argc, argv, {"--token"});
  CommandLine command_line;
  if (std::optional<int> code =
          command_line.Parse(args, std::cout, std::cerr)) {
    return *code;
  }
  return RunInvocation(command_line.invocation(), std::cout, std::cerr);
}

}  // namespace xl::client
