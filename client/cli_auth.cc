// The subcommands about who you are: whoami, login and token (create, list,
// revoke).
#include <CLI/CLI.hpp>

#include "client/cli_subcommands.h"

namespace xl::client::cli {
namespace {

void AddTokenCreate(CLI::App* token, TokenFlags* t) {
  CLI::App* create = token->add_subcommand(
      "create",
      "Make a token, printed once on stdout: a user's (--user U [--admin]) "
      "or, with --join, a single-use join token an agent exchanges for its "
      "node certificate.");
  create->add_option("--user", t->user, "the user the token stands for");
  create->add_flag("--admin", t->admin,
                   "the user may cancel any job, set any priority, "
                   "drain nodes and manage tokens");
  create->add_option("--group", t->groups,
                     "a group of the user's, for queues that admit "
                     "groups (repeat for more)");
  create->add_option("--ttl", t->ttl,
                     "lifetime: 1h, 30d or never (default: user 90d, "
                     "join 1h)");
  create->add_flag("--join", t->join,
                   "a join token for an agent (xl-agent --join-token)");
  create->add_option("--node", t->node,
                     "with --join: the only node name it may join as "
                     "(needed to re-issue a known node's certificate)");
}

}  // namespace

void AddWhoAmICommand(Subcommands* commands) {
  commands->Add("whoami",
                "Who the scheduler takes you for, and whether it checks.");
}

void AddLoginCommand(Subcommands* commands) {
  CLI::App* login = commands->Add(
      "login",
      "Check a token with the scheduler and keep it (and --tls-ca) in "
      "$XDG_CONFIG_HOME/xl (~/.config/xl), mode 0600, for later commands.");
  login->footer(
      "The token comes from --token, $XL_TOKEN or standard input (so it "
      "stays out of the shell's history: xlctl login --tls-ca ca.crt < "
      "token-file). Ask an admin for one: xlctl token create --user NAME.\n"
      "Global flags (--server, --user, --timeout, -o) and exit codes: "
      "'xlctl --help'.");
}

CLI::App* AddTokenCommand(Subcommands* commands, Invocation* inv) {
  CLI::App* token = commands->Add("token",
                                  "Admins: make, list and revoke users' "
                                  "tokens and agents' join tokens.");
  token->require_subcommand(1);
  AddTokenCreate(token, &inv->token_cmd);
  token->add_subcommand("list",
                        "Every token: id, user, expiry and state; "
                        "never the secret.");
  CLI::App* revoke =
      token->add_subcommand("revoke", "Revoke a token: it stops working now.");
  revoke
      ->add_option("ID", inv->token_cmd.id,
                   "the token's id (the part after xl_)")
      ->required();
  return token;
}

}  // namespace xl::client::cli
