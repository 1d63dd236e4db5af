// Tests of what an xlctl command line means: flags, the command after --,
// environment fallbacks, help and usage errors. Nothing here is run against a
// scheduler.
#include "client/cli.h"

#include <pwd.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "client/exit_code.h"

namespace xl::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("XL_SERVER");
    unsetenv("XL_USER");
  }
  void TearDown() override {
    unsetenv("XL_SERVER");
    unsetenv("XL_USER");
  }

  // Parses `args`; returns the exit code when there is nothing to run.
  std::optional<int> Parse(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    return command_line_.Parse(std::move(args), out_, err_);
  }
  const Invocation& inv() const { return command_line_.invocation(); }

  CommandLine command_line_;
  std::ostringstream out_, err_;
};

TEST_F(CliTest, SubmitFlagsBecomeOverrides) {
  ASSERT_EQ(Parse({"submit",
                   "job.yaml",
                   "--name",
                   "n",
                   "--queue",
                   "q",
                   "--priority",
                   "5",
                   "--nodes",
                   "4",
                   "--ranks-per-node",
                   "8",
                   "--gpus-per-node",
                   "8",
                   "--max-retries",
                   "2",
                   "--time-limit",
                   "600s",
                   "--env",
                   "A=1",
                   "--env",
                   "B=2",
                   "--idempotency-key",
                   "k1"}),
            std::nullopt)
      << err_.str();
  EXPECT_EQ(inv().command, "submit");
  const SubmitOptions& s = inv().submit;
  EXPECT_EQ(s.job_file, "job.yaml");
  EXPECT_EQ(s.idempotency_key, "k1");
  EXPECT_EQ(s.overrides.name, "n");
  EXPECT_EQ(s.overrides.queue, "q");
  EXPECT_EQ(s.overrides.priority, 5);
  EXPECT_EQ(s.overrides.nodes, 4);
  EXPECT_EQ(s.overrides.ranks_per_node, 8);
  EXPECT_EQ(s.overrides.gpus_per_node, 8);
  EXPECT_EQ(s.overrides.max_retries, 2);
  EXPECT_EQ(s.overrides.time_limit, "600s");
  EXPECT_THAT(s.overrides.env, ElementsAre("A=1", "B=2"));
  EXPECT_TRUE(s.overrides.command.empty());
}

TEST_F(CliTest, FlagsNotGivenStayUnset) {
  ASSERT_EQ(Parse({"submit", "job.yaml"}), std::nullopt) << err_.str();
  const JobOverrides& o = inv().submit.overrides;
  EXPECT_FALSE(o.name || o.queue || o.priority || o.nodes || o.ranks_per_node ||
               o.gpus_per_node || o.max_retries || o.time_limit);
  EXPECT_TRUE(o.env.empty());
  EXPECT_TRUE(inv().submit.idempotency_key.empty());
}

TEST_F(CliTest, EnvFlagTakesOneValueSoTheFileIsNotSwallowed) {
  ASSERT_EQ(Parse({"submit", "--env", "A=1", "job.yaml"}), std::nullopt)
      << err_.str();
  EXPECT_THAT(inv().submit.overrides.env, ElementsAre("A=1"));
  EXPECT_EQ(inv().submit.job_file, "job.yaml");
}

TEST_F(CliTest, NodesTakeARangeForAnElasticJob) {
  ASSERT_EQ(Parse({"submit", "--nodes", "2-8", "--", "/bin/true"}),
            std::nullopt)
      << err_.str();
  EXPECT_EQ(inv().submit.overrides.nodes, 8);
  EXPECT_EQ(inv().submit.overrides.min_nodes, 2);
  auto spec = BuildJobSpec(inv().submit.job_file, inv().submit.overrides);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resources().nodes(), 8);
  EXPECT_EQ(spec->resources().min_nodes(), 2);
  ASSERT_EQ(Parse({"submit", "--nodes", "4", "--", "/bin/true"}),
            std::nullopt);
  EXPECT_EQ(inv().submit.overrides.min_nodes, 0);
}

TEST_F(CliTest, CommandAfterDashesWithoutFile) {
  ASSERT_EQ(Parse({"submit", "--nodes", "2", "--", "/usr/bin/python3",
                   "train.py", "--steps", "50", "-o", "x"}),
            std::nullopt)
      << err_.str();
  EXPECT_EQ(inv().submit.job_file, "");
  EXPECT_EQ(inv().submit.overrides.nodes, 2);
  // Everything after -- is the command, flags included.
  EXPECT_THAT(
      inv().submit.overrides.command,
      ElementsAre("/usr/bin/python3", "train.py", "--steps", "50", "-o", "x"));
  EXPECT_EQ(inv().output, "table");
  auto spec = BuildJobSpec(inv().submit.job_file, inv().submit.overrides);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resources().nodes(), 2);
  EXPECT_THAT(spec->command(), ElementsAre("/usr/bin/python3", "train.py",
                                           "--steps", "50", "-o", "x"));
}

TEST_F(CliTest, DashesOutsideSubmitAreAUsageError) {
  EXPECT_EQ(Parse({"get", "42", "--", "x"}), kExitUsage);
  EXPECT_THAT(err_.str(), StartsWith("xlctl: "));
  EXPECT_EQ(Parse({"submit", "--"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("no command after --"));
}

TEST_F(CliTest, GlobalFlagsBeforeOrAfterTheSubcommand) {
  ASSERT_EQ(Parse({"--server", "h:1", "-o", "json", "get", "42"}), std::nullopt)
      << err_.str();
  EXPECT_EQ(inv().server, "h:1");
  EXPECT_EQ(inv().output, "json");
  EXPECT_EQ(inv().job_id, "42");

  CommandLine other;
  ASSERT_EQ(other.Parse(
                {"get", "42", "-o", "yaml", "--user", "bob", "--timeout", "3s"},
                out_, err_),
            std::nullopt)
      << err_.str();
  EXPECT_EQ(other.invocation().output, "yaml");
  EXPECT_EQ(other.invocation().user, "bob");
  EXPECT_EQ(other.invocation().timeout, "3s");
}

TEST_F(CliTest, DefaultsAndEnvironment) {
  ASSERT_EQ(Parse({"queue"}), std::nullopt) << err_.str();
  EXPECT_EQ(inv().server, "127.0.0.1:7070");
  EXPECT_EQ(inv().timeout, "10s");
  EXPECT_EQ(inv().output, "table");
  EXPECT_FALSE(inv().user.empty());

  setenv("XL_SERVER", "sched:9000", 1);
  setenv("XL_USER", "carol", 1);
  CommandLine from_env;
  ASSERT_EQ(from_env.Parse({"queue"}, out_, err_), std::nullopt);
  EXPECT_EQ(from_env.invocation().server, "sched:9000");
  EXPECT_EQ(from_env.invocation().user, "carol");

  CommandLine flags_win;
  ASSERT_EQ(flags_win.Parse({"--server", "x:1", "--user", "dave", "queue"},
                            out_, err_),
            std::nullopt);
  EXPECT_EQ(flags_win.invocation().server, "x:1");
  EXPECT_EQ(flags_win.invocation().user, "dave");
}

TEST_F(CliTest, UserFallsBackToUserVariable) {
  const char* saved = std::getenv("USER");
  std::string saved_user = saved ? saved : "";
  setenv("USER", "erin", 1);
  CommandLine a;
  ASSERT_EQ(a.Parse({"queue"}, out_, err_), std::nullopt);
  EXPECT_EQ(a.invocation().user, "erin");
  unsetenv("USER");
  CommandLine b;
  ASSERT_EQ(b.Parse({"queue"}, out_, err_), std::nullopt);
  // Without USER, the login name of the process's uid.
  const struct passwd* pw = getpwuid(getuid());
  EXPECT_EQ(b.invocation().user, pw != nullptr ? pw->pw_name : "anonymous");
  if (saved) setenv("USER", saved_user.c_str(), 1);
}

TEST_F(CliTest, ListFlags) {
  ASSERT_EQ(
      Parse({"list", "--state", "running", "--state", "PENDING,failed",
             "--user", "u", "--queue", "q", "--limit", "5", "--all-pages"}),
      std::nullopt)
      << err_.str();
  EXPECT_EQ(inv().command, "list");
  EXPECT_THAT(inv().list.states, ElementsAre("running", "PENDING", "failed"));
  EXPECT_EQ(inv().list.user, "u");
  EXPECT_EQ(inv().list.queue, "q");
  EXPECT_EQ(inv().list.limit, 5);
  EXPECT_TRUE(inv().list.all_pages);
}

TEST_F(CliTest, TopFlags) {
  ASSERT_EQ(Parse({"top", "--once", "--interval", "5s", "--queue", "q",
                   "--user", "u", "-o", "json"}),
            std::nullopt)
      << err_.str();
  EXPECT_EQ(inv().command, "top");
  EXPECT_TRUE(inv().top.once);
  EXPECT_EQ(inv().top_interval, "5s");
  EXPECT_EQ(inv().top.queue, "q");
  EXPECT_EQ(inv().top.user, "u");
  EXPECT_EQ(inv().output, "json");

  CommandLine plain;
  ASSERT_EQ(plain.Parse({"--user", "me", "top"}, out_, err_), std::nullopt);
  EXPECT_FALSE(plain.invocation().top.once);
  EXPECT_FALSE(plain.invocation().top_interval.has_value());
  EXPECT_EQ(plain.invocation().top.user, "");
  EXPECT_EQ(plain.invocation().user, "me");

  CommandLine metrics;
  ASSERT_EQ(metrics.Parse({"metrics", "9"}, out_, err_), std::nullopt);
  EXPECT_EQ(metrics.invocation().command, "metrics");
  EXPECT_EQ(metrics.invocation().job_id, "9");
}

TEST_F(CliTest, LogsWaitCancelDrainFlags) {
  ASSERT_EQ(Parse({"logs", "7", "--rank", "3", "-f"}), std::nullopt);
  EXPECT_EQ(inv().job_id, "7");
  EXPECT_EQ(inv().logs.rank, 3);
  EXPECT_TRUE(inv().logs.follow);

  CommandLine all_ranks;
  ASSERT_EQ(all_ranks.Parse({"logs", "7"}, out_, err_), std::nullopt);
  EXPECT_FALSE(all_ranks.invocation().logs.rank.has_value());
  EXPECT_FALSE(all_ranks.invocation().logs.follow);

  // wait's --timeout is how long to wait; the global one stays the deadline.
  CommandLine wait;
  ASSERT_EQ(wait.Parse({"--timeout", "2s", "wait", "7", "--timeout", "30m"},
                       out_, err_),
            std::nullopt);
  EXPECT_EQ(wait.invocation().command, "wait");
  EXPECT_EQ(wait.invocation().wait_timeout, "30m");
  EXPECT_EQ(wait.invocation().timeout, "2s");

  CommandLine cancel;
  ASSERT_EQ(cancel.Parse({"cancel", "7", "--reason", "oops"}, out_, err_),
            std::nullopt);
  EXPECT_EQ(cancel.invocation().command, "cancel");
  EXPECT_EQ(cancel.invocation().reason, "oops");

  CommandLine drain;
  ASSERT_EQ(drain.Parse({"drain", "node-3", "--reason", "disk"}, out_, err_),
            std::nullopt);
  EXPECT_EQ(drain.invocation().node, "node-3");
  EXPECT_EQ(drain.invocation().reason, "disk");
}

TEST_F(CliTest, SubmitExcludeAndDryRun) {
  ASSERT_EQ(Parse({"submit", "--exclude", "n1,n2", "--exclude", "n3",
                   "--dry-run", "--", "/bin/true"}),
            std::nullopt)
      << err_.str();
  EXPECT_THAT(inv().submit.overrides.exclude_nodes,
              ElementsAre("n1", "n2", "n3"));
  EXPECT_TRUE(inv().submit.dry_run);
}

TEST_F(CliTest, QueueSubcommandsAndTheirFlags) {
  ASSERT_EQ(Parse({"queue", "set", "research", "--weight", "2.5", "--cohort",
                   "lab", "--quota", "NVIDIA H100 80GB HBM3=64,borrow=16",
                   "--quota", "*=8,lend=4", "--max-time-limit", "3d",
                   "--max-running-gpus-per-user", "16"}),
            std::nullopt)
      << err_.str();
  const QueueOptions& q = inv().queue;
  EXPECT_EQ(inv().command, "queue");
  EXPECT_EQ(q.verb, "set");
  EXPECT_EQ(q.name, "research");
  EXPECT_EQ(q.weight, 2.5);
  EXPECT_EQ(q.cohort, "lab");
  EXPECT_THAT(q.quotas, ElementsAre("NVIDIA H100 80GB HBM3=64,borrow=16",
                                    "*=8,lend=4"));
  EXPECT_EQ(q.max_time_limit, "3d");
  EXPECT_EQ(q.max_running_gpus_per_user, 16);
  // Flags not given stay unset: set changes only what it is told.
  EXPECT_FALSE(q.default_time_limit.has_value());
  EXPECT_FALSE(q.max_pending_jobs_per_user.has_value());
  EXPECT_FALSE(q.max_priority.has_value());

  CommandLine summary;
  ASSERT_EQ(summary.Parse({"queue"}, out_, err_), std::nullopt);
  EXPECT_EQ(summary.invocation().queue.verb, "");
  CommandLine show;
  ASSERT_EQ(show.Parse({"queue", "show", "research"}, out_, err_),
            std::nullopt);
  EXPECT_EQ(show.invocation().queue.verb, "show");
  CommandLine missing;
  EXPECT_EQ(missing.Parse({"queue", "delete"}, out_, err_), kExitUsage);

  auto quota = ParseQuotaFlag("NVIDIA A100-SXM4-80GB=8,borrow=2,lend=1");
  ASSERT_TRUE(quota.ok());
  EXPECT_EQ(quota->gpu_model(), "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(quota->nominal_gpus(), 8);
  EXPECT_EQ(quota->borrowing_limit_gpus().value(), 2);
  EXPECT_EQ(quota->lending_limit_gpus().value(), 1);
  EXPECT_FALSE(ParseQuotaFlag("*=4")->has_borrowing_limit_gpus());
  for (const char* bad : {"8", "=8", "*=x", "*=-1", "*=4,steal=2", "*=4,borrow"}) {
    EXPECT_FALSE(ParseQuotaFlag(bad).ok()) << bad;
  }
}

TEST_F(CliTest, EveryCommandParses) {
  const std::vector<std::vector<std::string>> lines = {
      {"get", "1"},    {"list"},         {"queue"},
      {"cancel", "1"}, {"logs", "1"},    {"watch", "1"},
      {"wait", "1"},   {"nodes"},        {"node", "n"},
      {"drain", "n"},  {"resume", "n"},  {"submit", "f"},
      {"top"},         {"metrics", "1"}, {"plan", "--params", "7B"},
      {"share"},       {"explain", "1"}};
  for (const auto& line : lines) {
    CommandLine command_line;
    EXPECT_EQ(command_line.Parse(line, out_, err_), std::nullopt) << line[0];
    EXPECT_EQ(command_line.invocation().command, line[0]);
  }
}

TEST_F(CliTest, HelpPrintsAndExitsZero) {
  EXPECT_EQ(Parse({"--help"}), 0);
  for (const char* text :
       {"submit", "list", "watch", "wait", "top", "metrics", "drain", "plan",
        "XL_SERVER", "XL_USER", "Exit codes", "-o,--output"}) {
    EXPECT_THAT(out_.str(), HasSubstr(text));
  }

  CommandLine sub;
  std::ostringstream out, err;
  EXPECT_EQ(sub.Parse({"submit", "--help"}, out, err), 0);
  for (const char* text : {"--ranks-per-node", "--time-limit", "--env",
                           "--idempotency-key", "-- COMMAND"}) {
    EXPECT_THAT(out.str(), HasSubstr(text));
  }

  CommandLine top;
  std::ostringstream top_out, top_err;
  EXPECT_EQ(top.Parse({"top", "--help"}, top_out, top_err), 0);
  for (const char* text : {"--once", "--interval", "--queue", "--user",
                           "not a terminal", "BUS GBIT/S", "Ctrl-C"}) {
    EXPECT_THAT(top_out.str(), HasSubstr(text));
  }
}

TEST_F(CliTest, UsageErrorsExitTwoWithAPrefixedMessage) {
  const std::vector<std::vector<std::string>> bad = {
      {},                            // no subcommand
      {"get"},                       // missing ID
      {"frobnicate"},                // unknown subcommand
      {"list", "-o", "xml"},         // unknown format
      {"submit", "--nodes", "two"},  // not a number
      {"submit", "--nodes", "-1"},   // negative
      {"submit", "--nodes", "8-2"},  // min above max
      {"submit", "--nodes", "2-"},   // no max
      {"submit", "--nodes", "0-8"},  // a range starts at 1
      {"submit", "--nodes", "+2-8"}, // digits only
      {"get", "1", "2"},             // extra argument
      {"metrics"},                   // missing ID
      {"top", "--interval"},         // missing value
  };
  for (const auto& line : bad) {
    CommandLine command_line;
    std::ostringstream out, err;
    EXPECT_EQ(command_line.Parse(line, out, err), kExitUsage)
        << (line.empty() ? "(empty)" : line[0]);
    EXPECT_THAT(err.str(), StartsWith("xlctl: "));
    EXPECT_THAT(err.str(), HasSubstr("--help"));
  }
}

TEST_F(CliTest, RunReportsBadInputWithoutContactingTheScheduler) {
  // Port 1 refuses connections: a result of 2 shows nothing was sent.
  ASSERT_EQ(Parse({"--server", "127.0.0.1:1", "submit",
                   ::testing::TempDir() + "/missing.yaml"}),
            std::nullopt);
  std::ostringstream out, err;
  EXPECT_EQ(RunInvocation(inv(), out, err), kExitUsage);
  EXPECT_THAT(err.str(), StartsWith("xlctl: bad job file: "));
  EXPECT_EQ(out.str(), "");

  CommandLine bad_timeout;
  ASSERT_EQ(bad_timeout.Parse({"--timeout", "soon", "queue"}, out, err),
            std::nullopt);
  std::ostringstream err2;
  EXPECT_EQ(RunInvocation(bad_timeout.invocation(), out, err2), kExitUsage);
  EXPECT_THAT(err2.str(), StartsWith("xlctl: --timeout"));

  CommandLine csv;
  ASSERT_EQ(csv.Parse({"--server", "127.0.0.1:1", "-o", "csv", "list"}, out,
                      err),
            std::nullopt);
  std::ostringstream err3;
  EXPECT_EQ(RunInvocation(csv.invocation(), out, err3), kExitUsage);
  EXPECT_THAT(err3.str(), HasSubstr("only `xlctl metrics` prints CSV"));
}

TEST_F(CliTest, RunMapsUnreachableSchedulerToFour) {
  ASSERT_EQ(Parse({"--server", "127.0.0.1:1", "get", "42"}), std::nullopt);
  std::ostringstream out, err;
  EXPECT_EQ(RunInvocation(inv(), out, err), kExitUnreachable);
  EXPECT_THAT(
      err.str(),
      StartsWith("xlctl: cannot reach the xl scheduler at 127.0.0.1:1"));
  EXPECT_THAT(err.str(), HasSubstr("is xl-scheduler running? set --server or "
                                   "XL_SERVER"));
}

}  // namespace
}  // namespace xl::client
