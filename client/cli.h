// The xlctl command line: flags and subcommands (CLI11), the environment
// variables that stand in for global flags, and the dispatch of one parsed
// invocation to Commands. Parsing is separate from running so tests can check
// what a command line means without a scheduler. The subcommands are
// declared in cli_*.cc (cli_subcommands.h); cli_run.cc runs an invocation.
// Not thread-safe: one CommandLine per invocation.
#ifndef XL_CLIENT_CLI_H_
#define XL_CLIENT_CLI_H_

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/plan_command.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace xl::client {

// The flags of `xlctl token`.
struct TokenFlags {
  // "create", "list" or "revoke".
  std::string verb;
  std::string user, ttl, node, id;
  std::vector<std::string> groups;
  bool admin = false, join = false;
};

// Everything one xlctl command line says.
struct Invocation {
  // Global flags, after the environment fallbacks (XL_SERVER, XL_USER, USER).
  std::string server;
  std::string user;
  // --token / XL_TOKEN; when empty, the stored one is used at run time.
  std::string token;
  // --tls-ca / XL_TLS_CA: a file; its contents, once read, in tls_ca_pem.
  std::string tls_ca;
  std::string tls_ca_pem;
  std::string timeout = "10s";
  std::string output = "table";

  // The subcommand: "submit", "get", "list", "queue", "cancel",
  // "set-priority", "logs",
  // "watch", "wait", "top", "metrics", "nodes", "node", "drain",
  // "resume", "plan", "whoami", "login" or "token".
  std::string command;
  SubmitOptions submit;
  ListOptions list;
  LogsOptions logs;
  // top's flags but --interval, which is parsed when the command runs.
  TopOptions top;
  // --interval of top, as given.
  std::optional<std::string> top_interval;
  // The job of get, cancel, logs, watch, wait and metrics.
  std::string job_id;
  // The node of node, drain and resume.
  std::string node;
  // --reason of cancel, drain and set-priority.
  std::string reason;
  // The priority of set-priority.
  int32_t priority = 0;
  // --timeout of wait.
  std::optional<std::string> wait_timeout;
  // The flags of plan, as given.
  PlanFlags plan;
  TokenFlags token_cmd;
  // xlctl queue and its subcommands.
  QueueOptions queue;
  // The shell of `xlctl completion`: "bash" or "zsh".
  std::string completion_shell;
};

class CommandLine {
 public:
  CommandLine();
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // Parses `args` (the command line without the program name). Returns an
  // exit code when there is nothing to run: 0 after printing help to `out`,
  // 2 after printing a usage error to `err`. Returns nullopt when
  // invocation() is ready to run.
  std::optional<int> Parse(std::vector<std::string> args, std::ostream& out,
                           std::ostream& err);

  const Invocation& invocation() const { return invocation_; }

 private:
  // Copies what the parse left in flags_ into invocation_.
  void Resolve();

  std::unique_ptr<CLI::App> app_;
  Invocation invocation_;
  // Flags whose presence matters (an override is applied only when given)
  // and the subcommands, to name the one parsed.
  struct Flags;
  std::unique_ptr<Flags> flags_;
};

// Runs a parsed invocation against the scheduler it names, prints to `out`
// and `err`, and returns the exit code (see exit_code.h).
int RunInvocation(const Invocation& invocation, std::ostream& out,
                  std::ostream& err);

// main(): parses argv and runs it with std::cout and std::cerr.
int XlctlMain(int argc, char** argv);

}  // namespace xl::client

#endif  // XL_CLIENT_CLI_H_
