// Tests of job files (YAML -> xl.v1.JobSpec) and the submit flags that
// override them.
#include "client/job_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "client/exit_code.h"

namespace xl::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The job file of the user documentation; it must work as written.
constexpr char kDemoJob[] = R"(name: ddp-demo
queue: default
priority: 0
command: ["/usr/bin/python3", "train.py", "--steps", "50"]
env: {PYTHONUNBUFFERED: "1"}
resources:
  nodes: 2
  ranks_per_node: 2
  gpus_per_node: 0
max_retries: 1
time_limit: 600s
)";

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(JobFileTest, DemoJobParsesAsWritten) {
  auto spec = LoadJobFile(WriteFile("demo.yaml", kDemoJob));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "ddp-demo");
  EXPECT_EQ(spec->queue(), "default");
  EXPECT_EQ(spec->priority(), 0);
  EXPECT_THAT(spec->command(),
              ElementsAre("/usr/bin/python3", "train.py", "--steps", "50"));
  ASSERT_EQ(spec->env().size(), 1u);
  EXPECT_EQ(spec->env().at("PYTHONUNBUFFERED"), "1");
  EXPECT_EQ(spec->resources().nodes(), 2);
  EXPECT_EQ(spec->resources().ranks_per_node(), 2);
  EXPECT_EQ(spec->resources().gpus_per_node(), 0);
  EXPECT_EQ(spec->max_retries(), 1);
  EXPECT_EQ(spec->time_limit().seconds(), 600);
  EXPECT_EQ(spec->time_limit().nanos(), 0);
  EXPECT_FALSE(spec->has_grace_period());
}

TEST(JobFileTest, UnquotedNumberInCommandBecomesAString) {
  auto spec = LoadJobFile(WriteFile(
      "unquoted.yaml", "command: [python3, train.py, --steps, 50]\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->command(),
              ElementsAre("python3", "train.py", "--steps", "50"));
}

TEST(JobFileTest, UnknownFieldIsInvalidArgumentNamingIt) {
  auto spec = LoadJobFile(WriteFile("nodez.yaml", "command: [a]\nnodez: 2\n"));
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("nodez"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("nodez.yaml"));
  EXPECT_EQ(ExitCodeFor(spec.status()), kExitUsage);
}

TEST(JobFileTest, WrongTypeIsInvalidArgumentNamingTheField) {
  auto spec =
      LoadJobFile(WriteFile("prio.yaml", "command: [a]\npriority: high\n"));
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("priority"));
  EXPECT_EQ(ExitCodeFor(spec.status()), kExitUsage);
}

TEST(JobFileTest, MissingFileIsAUsageError) {
  auto spec = LoadJobFile(::testing::TempDir() + "/no-such-job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(ExitCodeFor(spec.status()), kExitUsage);
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("no-such-job.yaml"));
}

TEST(JobFileTest, FlagsOverrideTheFile) {
  JobOverrides o;
  o.name = "renamed";
  o.queue = "research";
  o.priority = 7;
  o.nodes = 4;
  o.ranks_per_node = 8;
  o.gpus_per_node = 8;
  o.max_retries = 3;
  o.time_limit = "1h30m";
  o.env = {"PYTHONUNBUFFERED=0", "NCCL_DEBUG=INFO", "EMPTY=", "EQ=a=b"};
  auto spec = BuildJobSpec(WriteFile("demo2.yaml", kDemoJob), o);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "renamed");
  EXPECT_EQ(spec->queue(), "research");
  EXPECT_EQ(spec->priority(), 7);
  EXPECT_EQ(spec->resources().nodes(), 4);
  EXPECT_EQ(spec->resources().ranks_per_node(), 8);
  EXPECT_EQ(spec->resources().gpus_per_node(), 8);
  EXPECT_EQ(spec->max_retries(), 3);
  EXPECT_EQ(spec->time_limit().seconds(), 5400);
  EXPECT_EQ(spec->env().at("PYTHONUNBUFFERED"), "0");
  EXPECT_EQ(spec->env().at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(spec->env().at("EMPTY"), "");
  EXPECT_EQ(spec->env().at("EQ"), "a=b");
  // Not overridden: kept from the file.
  EXPECT_THAT(spec->command(),
              ElementsAre("/usr/bin/python3", "train.py", "--steps", "50"));
}

TEST(JobFileTest, UnsetOverridesKeepTheFile) {
  auto spec = BuildJobSpec(WriteFile("demo3.yaml", kDemoJob), JobOverrides());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "ddp-demo");
  EXPECT_EQ(spec->resources().nodes(), 2);
  EXPECT_EQ(spec->time_limit().seconds(), 600);
}

// A relative working_dir in a file is the file's: the job runs the same
// wherever xlctl is started.
TEST(JobFileTest, RelativeWorkingDirIsRelativeToTheFile) {
  const std::string path = WriteFile(
      "rel.yaml", "command: [/bin/true]\nworking_dir: ../exp/./run1\n");
  auto spec = BuildJobSpec(path, JobOverrides());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string dir = ::testing::TempDir();
  const std::string parent = dir.substr(0, dir.find_last_of('/', dir.size() - 2));
  EXPECT_EQ(spec->working_dir(), parent + "/exp/run1");
}

TEST(JobFileTest, CommandAfterDashesWithoutFile) {
  JobOverrides o;
  o.nodes = 2;
  o.command = {"/usr/bin/python3", "train.py", "--steps", "50"};
  auto spec = BuildJobSpec("", o);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->command(),
              ElementsAre("/usr/bin/python3", "train.py", "--steps", "50"));
  EXPECT_EQ(spec->resources().nodes(), 2);
}

TEST(JobFileTest, CommandAfterDashesReplacesTheFilesCommand) {
  JobOverrides o;
  o.command = {"/bin/true"};
  auto spec = BuildJobSpec(WriteFile("demo4.yaml", kDemoJob), o);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->command(), ElementsAre("/bin/true"));
}

TEST(JobFileTest, NoCommandAtAllIsAUsageError) {
  auto spec = BuildJobSpec("", JobOverrides());
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(ExitCodeFor(spec.status()), kExitUsage);
  spec = BuildJobSpec(WriteFile("nocmd.yaml", "name: x\n"), JobOverrides());
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("no command"));
}

TEST(JobFileTest, BadEnvFlagNamesTheFlag) {
  for (const char* bad : {"NOEQUALS", "=value"}) {
    JobOverrides o;
    o.command = {"a"};
    o.env = {bad};
    auto spec = BuildJobSpec("", o);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr("--env"));
  }
}

TEST(JobFileTest, ParseDurationFlag) {
  EXPECT_EQ(*ParseDurationFlag("--x", "600s"), absl::Seconds(600));
  EXPECT_EQ(*ParseDurationFlag("--x", "600"), absl::Seconds(600));
  EXPECT_EQ(*ParseDurationFlag("--x", "1.5"), absl::Milliseconds(1500));
  EXPECT_EQ(*ParseDurationFlag("--x", "1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDurationFlag("--x", "250ms"), absl::Milliseconds(250));
  for (const char* bad : {"soon", "10x", "-5s", "inf", "nan", ""}) {
    auto d = ParseDurationFlag("--time-limit", bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_THAT(std::string(d.status().message()), HasSubstr("--time-limit"))
        << bad;
  }
}

}  // namespace
}  // namespace xl::client
