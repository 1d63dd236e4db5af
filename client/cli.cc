#include "client/cli.h"

#include <pwd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli_subcommands.h"
#include "client/completion.h"
#include "client/exit_code.h"
#include "common/identity.h"

#ifndef XL_VERSION
#define XL_VERSION "dev"
#endif

namespace xl::client {
namespace {

constexpr char kDescription[] =
    "xlctl: the command-line client of xl, which runs deep-learning training "
    "jobs on GPU machines.\nSubmit jobs, follow them, and look at the queue "
    "and the nodes of an xl-scheduler.";

constexpr char kEnvironmentHelp[] =
    "Environment:\n"
    "  XL_SERVER  HOST:PORT of xl-scheduler when --server is not given "
    "(default 127.0.0.1:7070)\n"
    "  XL_USER    user name sent to the scheduler when --user is not given; "
    "then USER, then \"anonymous\" (a scheduler with TLS ignores it: it "
    "knows you by your token)\n"
    "  XL_TOKEN   your token when --token is not given; then the one 'xlctl "
    "login' stored in $XDG_CONFIG_HOME/xl/token (~/.config/xl/token)\n"
    "  XL_TLS_CA  the CA certificate (PEM file) to verify a TLS scheduler "
    "with when --tls-ca is not given; then the one 'xlctl login --tls-ca' "
    "stored; without one xlctl talks plaintext\n";

constexpr char kOutputHelp[] =
    "Output (-o): table (readable, aligned), json (the API message in "
    "protobuf's JSON mapping), yaml (the same as YAML).\n";

// The footer of every subcommand that sets none of its own.
constexpr char kSubcommandFooter[] =
    "Global flags (--server, --user, --timeout, -o) are listed by "
    "'xlctl --help'; exit codes too.";

std::string Footer() {
  return absl::StrCat(kOutputHelp, "\n", kEnvironmentHelp, "\n", kExitCodeHelp);
}

std::string ResolveUser(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* user = std::getenv("USER");
  if (user != nullptr && *user != '\0') return user;
  if (const struct passwd* pw = getpwuid(getuid()); pw != nullptr) {
    return pw->pw_name;
  }
  return xl::kAnonymousUser;
}

// The flags before (or, as they fall through, after) the subcommand.
void AddGlobalFlags(CLI::App* app, Invocation* inv) {
  inv->server = kDefaultServer;
  app->add_option("--server", inv->server, "HOST:PORT of xl-scheduler")
      ->envname("XL_SERVER")
      ->capture_default_str();
  app->add_option("--user", inv->user,
                  "user name sent to the scheduler (default: $XL_USER, then "
                  "$USER, then anonymous)")
      ->envname("XL_USER");
  app->add_option("--token", inv->token,
                  "your token for a scheduler with TLS (default: $XL_TOKEN, "
                  "then the one 'xlctl login' stored); prefer those: an "
                  "argument shows in ps until xlctl has started")
      ->envname("XL_TOKEN");
  app->add_option("--tls-ca", inv->tls_ca,
                  "CA certificate (PEM file) that signed the scheduler's "
                  "certificate; turns on TLS (default: $XL_TLS_CA, then the "
                  "one 'xlctl login' stored)")
      ->envname("XL_TLS_CA");
  app->add_option("--timeout", inv->timeout,
                  "deadline of each call to the scheduler, like 10s or 1m "
                  "(`wait --timeout` is different: how long to wait)")
      ->capture_default_str();
  app->add_option("-o,--output", inv->output,
                  "output format: table, json or yaml (csv: `xlctl metrics` "
                  "only)")
      ->check(CLI::IsMember({"table", "json", "yaml", "csv"}, CLI::ignore_case))
      ->capture_default_str();
}

void AddCompletionCommand(cli::Subcommands* commands, Invocation* inv) {
  CLI::App* completion =
      commands->Add("completion",
                    "Print a shell completion script: source <(xlctl "
                    "completion bash) in ~/.bashrc, or source <(xlctl "
                    "completion zsh) in ~/.zshrc.");
  completion->add_option("SHELL", inv->completion_shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
}

}  // namespace

namespace cli {

CLI::App* Subcommands::Add(const std::string& name, const std::string& help) {
  CLI::App* sub = app_->add_subcommand(name, help);
  sub->footer(kSubcommandFooter);
  added_.emplace_back(name, sub);
  return sub;
}

std::string Subcommands::Parsed() const {
  std::string parsed;
  for (const auto& [name, sub] : added_) {
    if (sub->parsed()) parsed = name;
  }
  return parsed;
}

void ParsedVerb(const CLI::App& parent, std::string* verb) {
  for (CLI::App* sub : parent.get_subcommands()) {
    if (sub->parsed()) *verb = sub->get_name();
  }
}

void AddJobArgument(CLI::App* sub, Invocation* inv) {
  sub->add_option("ID", inv->job_id, "job id")->required();
}

void AddNodeArgument(CLI::App* sub, Invocation* inv) {
  sub->add_option("NAME", inv->node, "node name")->required();
}

}  // namespace cli

// The targets of the flags whose presence matters, and what the parse
// leaves besides the Invocation.
struct CommandLine::Flags {
  explicit Flags(CLI::App* app) : subcommands(app) {}

  cli::Subcommands subcommands;
  cli::SubmitFlags submit;
  cli::GivenFlag<int32_t> logs_rank;
  cli::GivenFlag<std::string> wait_timeout, top_interval;
  cli::QueueSetFlags queue_set;
  cli::PlanGivenFlags plan;
  CLI::App* queue_cmd = nullptr;
  CLI::App* token_cmd = nullptr;
  // The argv after `--` (submit only).
  std::vector<std::string> after_dashes;
  bool saw_dashes = false;
};

CommandLine::CommandLine()
    : app_(std::make_unique<CLI::App>(kDescription, "xlctl")),
      flags_(std::make_unique<Flags>(app_.get())) {
  CLI::App& app = *app_;
  app.footer(Footer());
  app.require_subcommand(1);
  // Global flags may also follow the subcommand (xlctl get 42 -o json).
  app.fallthrough();
  app.set_version_flag("--version", std::string("xlctl ") + XL_VERSION);
  AddGlobalFlags(&app, &invocation_);

  // In the order --help lists them.
  Flags& f = *flags_;
  cli::Subcommands* s = &f.subcommands;
  Invocation* inv = &invocation_;
  cli::AddSubmitCommand(s, inv, &f.submit);
  cli::AddGetCommand(s, inv);
  cli::AddExplainCommand(s, inv);
  cli::AddListCommand(s, inv);
  f.queue_cmd = cli::AddQueueCommand(s, inv, &f.queue_set);
  cli::AddShareCommand(s);
  cli::AddCancelCommand(s, inv);
  cli::AddSetPriorityCommand(s, inv);
  cli::AddLogsCommand(s, inv, &f.logs_rank);
  cli::AddWatchCommand(s, inv);
  cli::AddWaitCommand(s, inv, &f.wait_timeout);
  cli::AddTopCommand(s, inv, &f.top_interval);
  cli::AddMetricsCommand(s, inv);
  AddCompletionCommand(s, inv);
  cli::AddNodesCommand(s);
  cli::AddServersCommand(s);
  cli::AddNodeCommand(s, inv);
  cli::AddDrainCommand(s, inv);
  cli::AddResumeCommand(s, inv);
  cli::AddWhoAmICommand(s);
  cli::AddLoginCommand(s);
  f.token_cmd = cli::AddTokenCommand(s, inv);
  cli::AddPlanCommand(s, inv, &f.plan);
}

CommandLine::~CommandLine() = default;

void CommandLine::Resolve() {
  Invocation& inv = invocation_;
  const Flags& f = *flags_;
  inv.command = f.subcommands.Parsed();
  if (inv.server.empty()) inv.server = kDefaultServer;  // XL_SERVER=""
  if (inv.command == "token")
    cli::ParsedVerb(*f.token_cmd, &inv.token_cmd.verb);
  if (inv.command == "queue") {
    cli::ParsedVerb(*f.queue_cmd, &inv.queue.verb);
    f.queue_set.ApplyTo(&inv.queue);
  }
  inv.user = ResolveUser(inv.user);
  f.submit.ApplyTo(&inv.submit.overrides);
  inv.submit.overrides.command = f.after_dashes;
  f.logs_rank.ApplyTo(&inv.logs.rank);
  f.wait_timeout.ApplyTo(&inv.wait_timeout);
  f.top_interval.ApplyTo(&inv.top_interval);
  f.plan.ApplyTo(&inv.plan);
}

std::optional<int> CommandLine::Parse(std::vector<std::string> args,
                                      std::ostream& out, std::ostream& err) {
  // Everything after the first "--" is the command of `submit`; CLI11 never
  // sees it, so an argument such as "--steps" cannot be taken for a flag.
  auto dashes = std::find(args.begin(), args.end(), "--");
  if (dashes != args.end()) {
    flags_->saw_dashes = true;
    flags_->after_dashes.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them reversed.
  try {
    app_->parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --help-all, --version
      app_->exit(e, out, err);
      return 0;
    }
    const std::string parsed = flags_->subcommands.Parsed();
    const std::string where =
        parsed.empty() ? "xlctl" : absl::StrCat("xlctl ", parsed);
    err << "xlctl: " << e.what() << "; run '" << where
        << " --help' for usage\n";
    return kExitUsage;
  }
  Resolve();
  if (invocation_.command == "completion") {
    out << CompletionScript(*app_, invocation_.completion_shell);
    return 0;
  }
  if (flags_->saw_dashes) {
    if (invocation_.command != "submit") {
      err << "xlctl: a command after -- is only taken by 'xlctl submit'; "
             "run 'xlctl --help' for usage\n";
      return kExitUsage;
    }
    if (flags_->after_dashes.empty()) {
      err << "xlctl: no command after --; write it like 'xlctl submit "
             "--nodes 2 -- /usr/bin/python3 train.py'\n";
      return kExitUsage;
    }
  }
  return std::nullopt;
}

}  // namespace xl::client
