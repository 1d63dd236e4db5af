// Tests of what the agent asks the shim to run for a rank (launch_spec.h):
// plain values in, a shim::Spec out, no process started.
#include "agent/supervisor/launch_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "agent/shim/rank_shim.h"
#include "common/duration.h"

namespace xl::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

LaunchSettings Node() {
  LaunchSettings node;
  node.work_dir = "/var/lib/xl";
  node.scratch_dir = "/scratch";
  node.train_binary = "/opt/xl/bin/xl-train";
  node.run_as = RunAs::kSubmitter;
  node.rank_open_files = 65536;
  node.default_grace = absl::Seconds(10);
  node.default_memory_bytes = 8ull << 30;
  node.default_max_processes = 4096;
  node.state_dir = "/var/lib/xl/state";
  node.boot_id = "boot-1";
  return node;
}

AttemptPlace Alice() {
  AttemptPlace place;
  place.user.name = "alice";
  place.user.uid = 1001;
  place.user.gid = 1002;
  place.user.groups = {1002, 27};
  place.user.home = "/home/alice";
  place.tmp_dir = "/var/lib/xl/tmp/j7-2";
  return place;
}

// A two-rank job's start as the scheduler sends it (server/control/launch.cc):
// the shared part in StartRanks.env, each rank's own in RankLaunch.env.
v1::StartRanks Start() {
  v1::StartRanks start;
  start.set_job_id("j7");
  start.set_attempt(2);
  start.add_argv("python3");
  start.add_argv("train.py");
  start.add_argv("--lr=0.1");
  start.set_user("alice");
  auto& env = *start.mutable_env();
  env["WORLD_SIZE"] = "2";
  env["MASTER_ADDR"] = "node-a";
  env["MASTER_PORT"] = "29517";
  env["CUDA_VISIBLE_DEVICES"] = "2,3";
  env["XL_JOB_ID"] = "j7";
  for (int r = 0; r < 2; ++r) {
    v1::RankLaunch* launch = start.add_ranks();
    launch->set_rank(r);
    launch->set_local_rank(r);
    (*launch->mutable_env())["RANK"] = std::to_string(r);
    (*launch->mutable_env())["LOCAL_RANK"] = std::to_string(r);
  }
  return start;
}

const std::map<std::string, std::string> kAgentEnv = {
    {"PATH", "/usr/local/bin:/usr/bin"},
    {"HOME", "/root"},
    {"LANG", "C.UTF-8"},
    {"XL_TOKEN", "the agent's secret"},
    {"LD_PRELOAD", "/agent/only.so"}};

std::map<std::string, std::string> EnvOf(const shim::Spec& spec) {
  std::map<std::string, std::string> env;
  for (const std::string& entry : spec.env) {
    const size_t eq = entry.find('=');
    EXPECT_NE(eq, std::string::npos) << entry;
    EXPECT_TRUE(env.emplace(entry.substr(0, eq), entry.substr(eq + 1)).second)
        << "twice: " << entry;
  }
  return env;
}

TEST(LaunchSpecTest,
     EnvironmentIsTheSchedulersPlusXlsAndNothingElseOfTheAgent) {
  const v1::StartRanks start = Start();
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(1), Node(), Alice(), kAgentEnv);
  const std::map<std::string, std::string> want = {
      {"WORLD_SIZE", "2"},
      {"MASTER_ADDR", "node-a"},
      {"MASTER_PORT", "29517"},
      {"CUDA_VISIBLE_DEVICES", "2,3"},
      {"XL_JOB_ID", "j7"},
      {"RANK", "1"},
      {"LOCAL_RANK", "1"},
      {"XL_CHECKPOINT_DIR", "/scratch/checkpoints/j7"},
      {"XL_METRICS_FD", "3"},
      {"TMPDIR", "/var/lib/xl/tmp/j7-2"},
      {"HOME", "/home/alice"},
      {"USER", "alice"},
      {"LOGNAME", "alice"},
      {"PATH", "/usr/local/bin:/usr/bin"},
      {"LANG", "C.UTF-8"}};
  EXPECT_EQ(EnvOf(spec), want);
  // One entry per name, in name order: the same bytes for the same start.
  EXPECT_TRUE(std::is_sorted(spec.env.begin(), spec.env.end()));
  EXPECT_EQ(spec.env.size(), want.size());
  EXPECT_EQ(spec.search_path, "/usr/local/bin:/usr/bin");
}

TEST(LaunchSpecTest, TheRanksOwnEnvironmentWinsOverTheSharedOne) {
  v1::StartRanks start = Start();
  (*start.mutable_env())["RANK"] = "shared";
  (*start.mutable_env())["BOTH"] = "job";
  (*start.mutable_ranks(0)->mutable_env())["BOTH"] = "rank 0";
  const shim::Spec rank0 =
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv);
  const shim::Spec rank1 =
      BuildRankSpec(start, start.ranks(1), Node(), Alice(), kAgentEnv);
  EXPECT_EQ(EnvOf(rank0).at("RANK"), "0");
  EXPECT_EQ(EnvOf(rank1).at("RANK"), "1");
  EXPECT_EQ(EnvOf(rank0).at("BOTH"), "rank 0");
  EXPECT_EQ(EnvOf(rank1).at("BOTH"), "job");
}

// XL_METRICS_FD names the shim's pipe: a job that sets it would write its
// metrics into a descriptor that is not there.
TEST(LaunchSpecTest, MetricsFdIsTheAgentsWhateverTheJobSays) {
  v1::StartRanks start = Start();
  (*start.mutable_env())["XL_METRICS_FD"] = "7";
  (*start.mutable_ranks(0)->mutable_env())["XL_METRICS_FD"] = "9";
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv);
  EXPECT_EQ(EnvOf(spec).at("XL_METRICS_FD"), "3");
}

// What the agent only adds (checkpoints, TMPDIR, the user's names, PATH,
// LANG) the job may set itself.
TEST(LaunchSpecTest, WhatTheJobSetsWinsOverWhatTheAgentAdds) {
  v1::StartRanks start = Start();
  auto& env = *start.mutable_env();
  env["XL_CHECKPOINT_DIR"] = "/shared/ckpt/j7";
  env["TMPDIR"] = "/fast/tmp";
  env["HOME"] = "/home/shared";
  env["USER"] = "svc";
  env["LOGNAME"] = "svc";
  env["PATH"] = "/opt/conda/bin:/usr/bin";
  env["LANG"] = "en_GB.UTF-8";
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv);
  const std::map<std::string, std::string> got = EnvOf(spec);
  EXPECT_EQ(got.at("XL_CHECKPOINT_DIR"), "/shared/ckpt/j7");
  EXPECT_EQ(got.at("TMPDIR"), "/fast/tmp");
  EXPECT_EQ(got.at("HOME"), "/home/shared");
  EXPECT_EQ(got.at("USER"), "svc");
  EXPECT_EQ(got.at("LOGNAME"), "svc");
  EXPECT_EQ(got.at("PATH"), "/opt/conda/bin:/usr/bin");
  EXPECT_EQ(got.at("LANG"), "en_GB.UTF-8");
  EXPECT_EQ(spec.search_path, "/opt/conda/bin:/usr/bin");
  // A checkpoint directory of the job's own: the shim makes none on scratch.
  for (const shim::DirStep& step : spec.dirs) {
    EXPECT_NE(step.what, "checkpoint directory") << step.path;
  }
}

// --run-as agent: the ranks are the agent's, with its HOME, and the shim
// changes no user.
TEST(LaunchSpecTest, RunAsAgentKeepsTheAgentsHomeAndSetsNoUserNames) {
  LaunchSettings node = Node();
  node.run_as = RunAs::kAgent;
  const v1::StartRanks start = Start();
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(0), node, Alice(), kAgentEnv);
  const std::map<std::string, std::string> got = EnvOf(spec);
  EXPECT_EQ(got.at("HOME"), "/root");
  EXPECT_EQ(got.count("USER"), 0u);
  EXPECT_EQ(got.count("LOGNAME"), 0u);
  EXPECT_FALSE(spec.change_user);
  EXPECT_TRUE(BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv)
                  .change_user);
}

TEST(LaunchSpecTest, WithoutAPathAnywhereTheProgramIsSearchedInUsrBinAndBin) {
  const v1::StartRanks start = Start();
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), {});
  EXPECT_EQ(spec.search_path, "/usr/bin:/bin");
  const std::map<std::string, std::string> got = EnvOf(spec);
  EXPECT_EQ(got.count("PATH"), 0u);
  EXPECT_EQ(got.count("LANG"), 0u);
  EXPECT_EQ(got.at("HOME"), "/home/alice");
}

TEST(LaunchSpecTest, WithoutAWorkingDirectoryTheShimMakesOneUnderWorkDir) {
  const v1::StartRanks start = Start();
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv);
  EXPECT_EQ(spec.dir, "/var/lib/xl/jobs/j7/2");
  struct Step {
    std::string path;
    int mode;
    bool give;
    std::string what;
    std::string fix;
  };
  const std::string work = "; check the agent's --work-dir";
  const std::string scratch = "; fix the scratch path in the node's inventory";
  const std::vector<Step> want = {
      {"/var/lib/xl/jobs", 0711, false, "jobs directory", work},
      {"/var/lib/xl/jobs/j7", 0700, true, "job directory", work},
      {"/var/lib/xl/jobs/j7/2", 0700, true, "working directory", work},
      {"/scratch/checkpoints", 0711, false, "checkpoint directory", scratch},
      {"/scratch/checkpoints/j7", 0700, true, "checkpoint directory", scratch}};
  ASSERT_EQ(spec.dirs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].path);
    EXPECT_EQ(spec.dirs[i].path, want[i].path);
    EXPECT_EQ(spec.dirs[i].mode, want[i].mode);
    EXPECT_EQ(spec.dirs[i].give_to_user, want[i].give);
    EXPECT_EQ(spec.dirs[i].what, want[i].what);
    EXPECT_EQ(spec.dirs[i].fix, want[i].fix);
  }
}

TEST(LaunchSpecTest, AGivenWorkingDirectoryIsUsedAsItIs) {
  v1::StartRanks start = Start();
  start.set_working_dir("/home/alice/project");
  (*start.mutable_env())["XL_CHECKPOINT_DIR"] = "/home/alice/ckpt";
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv);
  EXPECT_EQ(spec.dir, "/home/alice/project");
  EXPECT_THAT(spec.dirs, IsEmpty());
}

TEST(LaunchSpecTest, XlTrainRunsTheBuiltInWorkerAndOtherProgramsAsGiven) {
  v1::StartRanks start = Start();
  EXPECT_EQ(
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv).program,
      "python3");
  start.set_argv(0, "xl-train");
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv);
  EXPECT_EQ(spec.program, "/opt/xl/bin/xl-train");
  // argv[0] is what the job said; only the file run differs.
  EXPECT_THAT(spec.argv, ElementsAre("xl-train", "train.py", "--lr=0.1"));
  LaunchSettings no_worker = Node();
  no_worker.train_binary.clear();
  EXPECT_EQ(BuildRankSpec(start, start.ranks(0), no_worker, Alice(), kAgentEnv)
                .program,
            "xl-train");
}

TEST(LaunchSpecTest, UserCgroupAndPathsComeFromTheAttemptAndTheNode) {
  v1::StartRanks start = Start();
  start.set_checkpoint_dir("/shared/ckpt/j7/2");
  AttemptPlace place = Alice();
  place.has_cgroup = true;
  place.cgroup.procs_files = {"/sys/fs/cgroup/xl/j7-2/cgroup.procs"};
  place.cgroup.dir = "/sys/fs/cgroup/xl/j7-2";
  place.cgroup.memory_limit = 1 << 30;
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(1), Node(), place, kAgentEnv);
  EXPECT_EQ(spec.job_id, "j7");
  EXPECT_EQ(spec.attempt, 2);
  EXPECT_EQ(spec.rank, 1);
  EXPECT_EQ(spec.lease_file, "/var/lib/xl/state/lease");
  EXPECT_EQ(spec.uid, 1001u);
  EXPECT_EQ(spec.gid, 1002u);
  EXPECT_THAT(spec.groups, ElementsAre(1002u, 27u));
  EXPECT_EQ(spec.user_name, "alice");
  EXPECT_THAT(spec.cgroup_procs,
              ElementsAre("/sys/fs/cgroup/xl/j7-2/cgroup.procs"));
  EXPECT_EQ(spec.cgroup_dir, "/sys/fs/cgroup/xl/j7-2");
  EXPECT_EQ(spec.checkpoint_dir, "/shared/ckpt/j7/2");
  EXPECT_EQ(spec.open_files, 65536u);

  const shim::Spec no_cgroup =
      BuildRankSpec(start, start.ranks(1), Node(), Alice(), kAgentEnv);
  EXPECT_THAT(no_cgroup.cgroup_procs, IsEmpty());
  EXPECT_EQ(no_cgroup.cgroup_dir, "");
}

TEST(LaunchSpecTest, GraceIsTheRequestsOrTheNodesDefault) {
  v1::StartRanks start = Start();
  EXPECT_EQ(RankGrace(start, absl::Seconds(10)), absl::Seconds(10));
  EXPECT_EQ(
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv).grace_ms,
      10000);
  *start.mutable_grace_period() = ToProtoDuration(absl::Milliseconds(2500));
  EXPECT_EQ(RankGrace(start, absl::Seconds(10)), absl::Milliseconds(2500));
  EXPECT_EQ(
      BuildRankSpec(start, start.ranks(0), Node(), Alice(), kAgentEnv).grace_ms,
      2500);
  *start.mutable_grace_period() = ToProtoDuration(absl::Seconds(-1));
  EXPECT_EQ(RankGrace(start, absl::Seconds(7)), absl::Seconds(7));
}

// The record is how a restarted agent finds the rank again (Adopt reads
// these keys); the cgroup's name must be the one JobCgroup::Create got.
TEST(LaunchSpecTest, TheRecordSaysWhatAnAdoptingAgentReads) {
  v1::StartRanks start = Start();
  *start.mutable_grace_period() = ToProtoDuration(absl::Seconds(30));
  AttemptPlace place = Alice();
  place.has_cgroup = true;
  place.cgroup.memory_limit = 123456789;
  const shim::Spec spec =
      BuildRankSpec(start, start.ranks(1), Node(), place, kAgentEnv);
  const std::map<std::string, std::string> want = {
      {"job", "j7"},
      {"attempt", "2"},
      {"rank", "1"},
      {"grace_ms", "30000"},
      {"user", "alice"},
      {"uid", "1001"},
      {"gid", "1002"},
      {"tmp_dir", "/var/lib/xl/tmp/j7-2"},
      {"boot", "boot-1"},
      {"cgroup", AttemptName("j7", 2)},
      {"memory_limit", "123456789"}};
  EXPECT_EQ(shim::ParseLines(spec.record), want);
  EXPECT_EQ(spec.record.back(), '\n');  // The shim appends "shim_pid N\n".

  std::map<std::string, std::string> no_cgroup = want;
  no_cgroup.erase("cgroup");
  no_cgroup.erase("memory_limit");
  EXPECT_EQ(shim::ParseLines(
                BuildRankSpec(start, start.ranks(1), Node(), Alice(), kAgentEnv)
                    .record),
            no_cgroup);
}

TEST(LaunchSpecTest, AttemptLimitsAreTheRequestsWithTheNodesDefaults) {
  v1::StartRanks start = Start();
  start.mutable_limits()->set_cpus(8);
  start.mutable_limits()->add_gpu_indices(2);
  start.mutable_limits()->add_gpu_indices(3);
  v1::ResourceLimits limits = AttemptLimits(start, Node());
  EXPECT_EQ(limits.memory_bytes(), 8ull << 30);
  EXPECT_EQ(limits.max_processes(), 4096);
  EXPECT_EQ(limits.cpus(), 8);
  // The only GPUs the ranks may open (the cgroup's device filter).
  EXPECT_THAT(limits.gpu_indices(), ElementsAre(2, 3));

  start.mutable_limits()->set_memory_bytes(1 << 20);
  start.mutable_limits()->set_max_processes(64);
  limits = AttemptLimits(start, Node());
  EXPECT_EQ(limits.memory_bytes(), 1u << 20);
  EXPECT_EQ(limits.max_processes(), 64);
}

TEST(LaunchSpecTest, AttemptNamesAndTmpDir) {
  EXPECT_EQ(AttemptName("j7", 2), "j7-2");
  EXPECT_EQ(AttemptTmpDir("/var/lib/xl", Start()), "/var/lib/xl/tmp/j7-2");
}

TEST(LaunchSpecTest, AStartWithABadJobIdOrNoCommandIsRefusedWithTheFix) {
  v1::StartRanks start = Start();
  EXPECT_TRUE(CheckStartRanks(start).ok());
  for (const char* id : {"", ".", "..", "a/b", "a\nb", "a\x7f"}) {
    start.set_job_id(id);
    const absl::Status status = CheckStartRanks(start);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_EQ(status.message(),
              std::string("job id \"") + id +
                  "\" cannot name a directory; the scheduler must send a "
                  "plain id");
  }
  start.set_job_id("j7");
  start.set_argv(0, "");
  EXPECT_EQ(CheckStartRanks(start).message(),
            "empty command; set command in the job spec");
  start.clear_argv();
  EXPECT_EQ(CheckStartRanks(start).message(),
            "empty command; set command in the job spec");
  EXPECT_TRUE(SafePathComponent("job-7.a_b"));
  EXPECT_TRUE(SafePathComponent("..."));
}

}  // namespace
}  // namespace xl::agent
