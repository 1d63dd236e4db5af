// #SBATCH lines to a JobSpec: every accepted form of every option, what is
// refused (with the file, line and text named), the task arithmetic, and the
// command that runs the script once per rank (run here in real bash).
#include "client/sbatch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace xl::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr char kPath[] = "/home/u/train.sh";

absl::StatusOr<v1::JobSpec> Parse(const std::string& text,
                                  const std::vector<std::string>& args = {}) {
  return JobSpecFromSbatch(kPath, text, args);
}

// The spec of the script `text`, which must be accepted.
v1::JobSpec Accepted(const std::string& text) {
  absl::StatusOr<v1::JobSpec> spec = Parse(text);
  EXPECT_TRUE(spec.ok()) << text << "\n" << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

// The message refusing `text`, which must be refused as INVALID_ARGUMENT.
std::string Refused(const std::string& text) {
  absl::StatusOr<v1::JobSpec> spec = Parse(text);
  if (spec.ok()) {
    ADD_FAILURE() << "accepted:\n" << text;
    return "";
  }
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(spec.status().message());
}

TEST(SbatchTest, ARealisticScriptBecomesAJob) {
  auto spec = Parse(R"(#!/bin/bash
# Fine-tune on two 8-GPU nodes.
#SBATCH --job-name="llama ft"
#SBATCH -N 2
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:"NVIDIA H100 80GB HBM3":8
#SBATCH --cpus-per-task=12
#SBATCH --mem=900G

#SBATCH --time=1-12:00:00
#SBATCH -p research   # the team's partition
#SBATCH --output=%x-%j.out
#SBATCH --error=%x-%j.err
#SBATCH --dependency=afterok:41:42
#SBATCH --export=ALL,DATA=/datasets/c4
#SBATCH --chdir=/scratch/u/run1
#SBATCH --exclude=gpu[07-09],n3
#SBATCH --account=proj --mail-type=END,FAIL --mail-user=u@example.com

module load cuda
#SBATCH --time=5
srun python train.py --config big.yaml
)",
                    {"--lr", "3e-4"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "llama ft");
  EXPECT_EQ(spec->queue(), "research");
  const v1::ResourceRequest& r = spec->resources();
  EXPECT_EQ(r.nodes(), 2);
  EXPECT_EQ(r.min_nodes(), 0);
  EXPECT_EQ(r.ranks_per_node(), 8);
  EXPECT_EQ(r.gpus_per_node(), 8);
  EXPECT_THAT(r.gpu_models(), ElementsAre("NVIDIA H100 80GB HBM3"));
  EXPECT_EQ(r.cpus_per_node(), 96);
  EXPECT_EQ(r.memory_bytes_per_node(), 900ull << 30);
  EXPECT_THAT(r.exclude_nodes(), ElementsAre("gpu07", "gpu08", "gpu09", "n3"));
  // 1 day 12 h; the --time=5 after `module load` is not read.
  EXPECT_EQ(spec->time_limit().seconds(), 36 * 3600);
  EXPECT_THAT(spec->after_ok(), ElementsAre("41", "42"));
  EXPECT_EQ(spec->working_dir(), "/scratch/u/run1");
  EXPECT_EQ(spec->env().at("DATA"), "/datasets/c4");
  EXPECT_EQ(spec->env().at("SLURM_JOB_NAME"), "llama ft");
  EXPECT_EQ(spec->env().at("SLURM_JOB_PARTITION"), "research");
  EXPECT_EQ(spec->env().at("SLURM_CPUS_PER_TASK"), "12");
  EXPECT_EQ(spec->env().at("SLURM_GPUS_ON_NODE"), "8");
  EXPECT_EQ(spec->env().at("SLURM_MEM_PER_NODE"), "921600");
  ASSERT_EQ(spec->command_size(), 7);
  EXPECT_EQ(spec->command(0), "/bin/bash");
  EXPECT_EQ(spec->command(1), "-c");
  EXPECT_THAT(spec->command(2), HasSubstr("SLURM_PROCID=\"$RANK\""));
  EXPECT_EQ(spec->command(3), kPath);
  // The script's text, carried in the job.
  EXPECT_THAT(spec->command(4), HasSubstr("srun python train.py"));
  EXPECT_EQ(spec->command(5), "--lr");
  EXPECT_EQ(spec->command(6), "3e-4");
}

TEST(SbatchTest, NothingSaidIsOneTaskOnOneNodeNamedAfterTheScript) {
  v1::JobSpec spec = Accepted("#!/bin/sh\necho hi\n");
  EXPECT_EQ(spec.resources().nodes(), 1);
  // Slurm's one task per node, not xl's one rank per GPU.
  EXPECT_EQ(spec.resources().ranks_per_node(), 1);
  EXPECT_EQ(spec.resources().gpus_per_node(), 0);
  EXPECT_EQ(spec.resources().cpus_per_node(), 0);
  EXPECT_EQ(spec.resources().memory_bytes_per_node(), 0u);
  EXPECT_THAT(spec.resources().gpu_models(), IsEmpty());
  EXPECT_EQ(spec.name(), "train.sh");
  EXPECT_EQ(spec.queue(), "");
  EXPECT_FALSE(spec.has_time_limit());
  EXPECT_EQ(spec.working_dir(), "");
  EXPECT_THAT(spec.after_ok(), IsEmpty());
  EXPECT_EQ(spec.env().at("SLURM_JOB_NAME"), "train.sh");
  EXPECT_EQ(spec.env().at("SLURM_JOB_PARTITION"), "default");
  EXPECT_EQ(spec.env().count("SLURM_GPUS_ON_NODE"), 0u);
  EXPECT_EQ(spec.env().count("SLURM_CPUS_PER_TASK"), 0u);
}

TEST(SbatchTest, LongShortAttachedAndSeparateFormsAreTheSame) {
  // Each script says the same thing in another form.
  const std::vector<std::string> scripts = {
      absl::StrCat("#SBATCH --nodes=2 --ntasks=8 --time=90 --job-name=a ",
                   "--partition=q --cpus-per-task=3 --chdir=/w --output=o ",
                   "--error=e\n"),
      absl::StrCat("#SBATCH --nodes 2 --ntasks 8 --time 90 --job-name a ",
                   "--partition q --cpus-per-task 3 --chdir /w --output o ",
                   "--error e\n"),
      "#SBATCH -N 2 -n 8 -t 90 -J a -p q -c 3 -D /w -o o -e e\n",
      "#SBATCH -N2 -n8 -t90 -Ja -pq -c3 -D/w -oo -ee\n",
      "#SBATCH -N=2 -n=8 -t=90 -J=a -p=q -c=3 -D=/w\n",
      absl::StrCat("#SBATCH -N 2\n#SBATCH -n 8\n#SBATCH -t 90\n#SBATCH -J a\n",
                   "#SBATCH -p q\n#SBATCH -c 3\n#SBATCH -D /w\n"),
      "#SBATCH\t--nodes=2\t-n 8 -t \"90\" -J 'a' -p q -c 3 -D /w  # comment\n",
  };
  for (const std::string& script : scripts) {
    v1::JobSpec spec = Accepted(script);
    EXPECT_EQ(spec.resources().nodes(), 2) << script;
    EXPECT_EQ(spec.resources().ranks_per_node(), 4) << script;
    EXPECT_EQ(spec.resources().cpus_per_node(), 12) << script;
    EXPECT_EQ(spec.time_limit().seconds(), 5400) << script;
    EXPECT_EQ(spec.name(), "a") << script;
    EXPECT_EQ(spec.queue(), "q") << script;
    EXPECT_EQ(spec.working_dir(), "/w") << script;
  }
}

TEST(SbatchTest, QuotesBackslashesAndCommentsAreSplitAsSbatchDoes) {
  v1::JobSpec spec = Accepted(
      "#SBATCH --job-name=\"two words\" --export=A='x y',B=a\\ b\n"
      "#SBATCH --comment=\"has # inside\"   # a real comment -N 99\n"
      "#SBATCH -p q#no space before this comment\n");
  EXPECT_EQ(spec.name(), "two words");
  EXPECT_EQ(spec.env().at("A"), "x y");
  EXPECT_EQ(spec.env().at("B"), "a b");
  EXPECT_EQ(spec.resources().nodes(), 1);
  EXPECT_EQ(spec.queue(), "q");
  EXPECT_EQ(Refused("#SBATCH --job-name=\"open\n"),
            "/home/u/train.sh:1: `#SBATCH --job-name=\"open`: a quote is not "
            "closed; close it");
}

TEST(SbatchTest, OnlyDirectivesBeforeTheFirstCommandAreRead) {
  v1::JobSpec spec = Accepted(
      "#!/bin/bash\n"
      "\n"
      "   # an indented comment\n"
      "#SBATCH -N 2\n"
      "  #SBATCH -N 7 (indented: a comment to sbatch)\n"
      "##SBATCH -N 5 (commented out)\n"
      "#SBATCHX -N 6\n"
      "#SBATCH --time=10\r\n"
      "set -e\n"
      "#SBATCH -N 3\n"
      "#SBATCH --array=1-10\n");
  EXPECT_EQ(spec.resources().nodes(), 2);
  EXPECT_EQ(spec.time_limit().seconds(), 600);
  // sbatch also reads #SLURM (with a warning).
  EXPECT_EQ(Accepted("#SLURM -N 4\n").resources().nodes(), 4);
}

TEST(SbatchTest, QuotedValuesAreOneWord) {
  auto spec = Parse("#SBATCH --job-name=\"big run\" -J 'x y'\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "x y");
  EXPECT_FALSE(Parse("#SBATCH --job-name=\"open\n").ok());
}

TEST(SbatchTest, EveryTimeFormat) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"90", 5400},      {"0", 0},          {"10:30", 630},
      {"2:00:00", 7200}, {"00:05:00", 300}, {"1-0", 86400},
      {"1-2", 93600},    {"1-2:30", 95400}, {"1-02:30:15", 95415},
      {"UNLIMITED", 0},  {"unlimited", 0},  {"infinite", 0},
      {"INFINITE", 0},   {"-1", 0},         {"14-00:00:00", 14 * 86400}};
  for (const auto& [text, want] : cases) {
    int64_t got = -1;
    EXPECT_TRUE(ParseSlurmTime(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
    // And through the script, short and long.
    v1::JobSpec spec = Accepted(absl::StrCat("#SBATCH -t ", text, "\n"));
    EXPECT_EQ(spec.time_limit().seconds(), want) << text;
    EXPECT_EQ(spec.has_time_limit(), want > 0) << text;
  }
  for (const char* bad :
       {"", "1:2:3:4", "a", "-2", "1-", "-5:00", "1-2:3:4:5", "5m", "1h", "1.5",
        ":30", "1::2", "+5", "99999999999999", "2000000-0"}) {
    int64_t got = 0;
    EXPECT_FALSE(ParseSlurmTime(bad, &got)) << bad;
  }
  // UNLIMITED after a limit removes it.
  EXPECT_FALSE(
      Accepted("#SBATCH -t 10\n#SBATCH -t UNLIMITED\n").has_time_limit());
}

TEST(SbatchTest, TasksNodesArithmetic) {
  struct Case {
    std::string options;
    int nodes, min_nodes, ranks_per_node;
  };
  const std::vector<Case> cases = {
      {"-N 4", 4, 0, 1},
      {"-n 8", 1, 0, 8},
      {"-N 2 -n 8", 2, 0, 4},
      {"-N 3 -n 3", 3, 0, 1},
      {"--ntasks-per-node=4", 1, 0, 4},
      {"-N 2 --ntasks-per-node=4", 2, 0, 4},
      {"-N 2 --ntasks-per-node=4 -n 8", 2, 0, 4},
      // Slurm derives the nodes from the other two.
      {"-n 16 --ntasks-per-node=8", 2, 0, 8},
      {"--nodes=2-4", 4, 2, 1},
      {"--nodes=2-4 --ntasks-per-node=8", 4, 2, 8},
      {"--nodes=3-3", 3, 0, 1},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Accepted(absl::StrCat("#SBATCH ", c.options, "\n"));
    EXPECT_EQ(spec.resources().nodes(), c.nodes) << c.options;
    EXPECT_EQ(spec.resources().min_nodes(), c.min_nodes) << c.options;
    EXPECT_EQ(spec.resources().ranks_per_node(), c.ranks_per_node) << c.options;
  }
  // What does not divide, or contradicts, is refused at the line that
  // says the task count.
  EXPECT_EQ(Refused("#SBATCH -N 3\n#SBATCH --ntasks=8\n"),
            "/home/u/train.sh:2: `#SBATCH --ntasks=8`: --ntasks=8 does not "
            "divide evenly over 3 nodes; xl runs as many tasks on every "
            "node: give a multiple of --nodes, or --ntasks-per-node");
  EXPECT_THAT(Refused("#SBATCH -N 4 -n 2\n"),
              HasSubstr("does not divide evenly over 4 nodes"));
  EXPECT_THAT(Refused("#SBATCH -N 2\n#SBATCH --ntasks-per-node=4\n"
                      "#SBATCH --ntasks=6\n"),
              StartsWith("/home/u/train.sh:3: `#SBATCH --ntasks=6`: "
                         "--ntasks=6 is not --nodes (2) x "
                         "--ntasks-per-node (4); give two of the three"));
  EXPECT_THAT(Refused("#SBATCH -n 10 --ntasks-per-node=4\n"),
              HasSubstr("is not a multiple of --ntasks-per-node=4"));
  EXPECT_THAT(Refused("#SBATCH --nodes=2-4\n#SBATCH -n 8\n"),
              StartsWith("/home/u/train.sh:2: `#SBATCH -n 8`: --ntasks "
                         "fixes the number of tasks, but an elastic job "
                         "(--nodes=2-4)"));
  for (const char* bad : {"-N 0", "-N x", "-N 4-2", "-N 1-2-3", "-N -2", "-n 0",
                          "--ntasks-per-node=0", "-c 0", "-N 2000000"}) {
    EXPECT_THAT(
        Refused(absl::StrCat("#SBATCH ", bad, "\n")),
        StartsWith(absl::StrCat("/home/u/train.sh:1: `#SBATCH ", bad, "`: ")))
        << bad;
  }
}

TEST(SbatchTest, GpuForms) {
  struct Case {
    std::string options;
    int gpus_per_node;
    std::string model;
  };
  const std::vector<Case> cases = {
      {"--gres=gpu:4", 4, ""},
      {"--gres=gpu", 1, ""},
      {"--gres gpu:a100:2", 2, "a100"},
      {"--gres=gpu:A100-SXM4-80GB", 1, "A100-SXM4-80GB"},
      {"--gres=gpu:0", 0, ""},
      {"--gres=none", 0, ""},
      {"--gpus-per-node=8", 8, ""},
      {"--gpus-per-node=h100:8", 8, "h100"},
      {"-N 2 --gpus=16", 8, ""},
      {"-N 2 -G h100:16", 8, "h100"},
      {"--ntasks-per-node=4 --gpus-per-task=2", 8, ""},
      // Options that agree are fine together.
      {"--gres=gpu:8 --ntasks-per-node=8 --gpus-per-task=1", 8, ""},
      {"-N 2 --gres=gpu:h100:4 --gpus=h100:8", 4, "h100"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Accepted(absl::StrCat("#SBATCH ", c.options, "\n"));
    EXPECT_EQ(spec.resources().gpus_per_node(), c.gpus_per_node) << c.options;
    if (c.model.empty()) {
      EXPECT_THAT(spec.resources().gpu_models(), IsEmpty()) << c.options;
    } else {
      EXPECT_THAT(spec.resources().gpu_models(), ElementsAre(c.model))
          << c.options;
    }
  }
  EXPECT_EQ(Refused("#SBATCH --gres=shard:2\n"),
            "/home/u/train.sh:1: `#SBATCH --gres=shard:2`: only GPUs are "
            "generic resources in xl, 'shard' has no equivalent; ask for GPUs "
            "with --gres=gpu:N or --gres=gpu:MODEL:N and remove the rest");
  EXPECT_THAT(Refused("#SBATCH --gres=gpu:2,mps:100\n"),
              HasSubstr("'mps' has no equivalent"));
  EXPECT_THAT(Refused("#SBATCH --gres=gpu:2,gpu:3\n"),
              HasSubstr("names gpu twice"));
  EXPECT_THAT(Refused("#SBATCH --gres=gpu:a:b:2\n"), HasSubstr("--gres takes"));
  EXPECT_THAT(Refused("#SBATCH --gres=gpu:-1\n"), HasSubstr("--gres takes"));
  EXPECT_THAT(Refused("#SBATCH --gpus-per-node=x\n"),
              HasSubstr("--gpus-per-node takes N or TYPE:N"));
  EXPECT_EQ(Refused("#SBATCH -N 3\n#SBATCH --gpus=8\n"),
            "/home/u/train.sh:2: `#SBATCH --gpus=8`: --gpus=8 does not "
            "divide evenly over 3 nodes; xl gives every node as many GPUs: "
            "give --gpus-per-node instead");
  EXPECT_EQ(Refused("#SBATCH --gres=gpu:8\n#SBATCH --gpus-per-node=4\n"),
            "/home/u/train.sh:2: `#SBATCH --gpus-per-node=4`: makes 4 GPUs "
            "per node, but line 1 makes 8; keep one of them");
  EXPECT_THAT(Refused("#SBATCH --gres=gpu:a100:8\n#SBATCH --gpus=h100:8\n"),
              StartsWith("/home/u/train.sh:2: `#SBATCH --gpus=h100:8`: asks "
                         "for GPU type h100, but line 1 asks for a100"));
  EXPECT_THAT(Refused("#SBATCH --nodes=1-2 --gpus=8\n"),
              HasSubstr("give --gpus-per-node instead"));
  EXPECT_THAT(Refused("#SBATCH --gpus-per-node=h100:0\n"),
              HasSubstr("names a GPU type but asks for no GPU"));
}

TEST(SbatchTest, MemoryIsPerNodeInSlurmUnits) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"500", 500ull << 20},  {"500M", 500ull << 20},
      {"500m", 500ull << 20}, {"4G", 4ull << 30},
      {"4g", 4ull << 30},     {"1T", 1ull << 40},
      {"2048K", 2ull << 20},  {"0", 0}};
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(Accepted(absl::StrCat("#SBATCH --mem=", text, "\n"))
                  .resources()
                  .memory_bytes_per_node(),
              want)
        << text;
  }
  for (const char* bad :
       {"lots", "4GB", "G", "-4G", "1.5G", "4P", "99999999999999999T"}) {
    EXPECT_THAT(Refused(absl::StrCat("#SBATCH --mem=", bad, "\n")),
                HasSubstr("--mem takes a size per node"))
        << bad;
  }
  EXPECT_THAT(Refused("#SBATCH --mem-per-cpu=4G\n"),
              HasSubstr("give --mem=SIZE for the whole node"));
  EXPECT_THAT(Refused("#SBATCH --mem-per-gpu=40G\n"),
              HasSubstr("give --mem=SIZE for the whole node"));
}

TEST(SbatchTest, ExportForms) {
  for (const char* all : {"ALL", "all", "NONE", "NIL"}) {
    v1::JobSpec spec = Accepted(absl::StrCat("#SBATCH --export=", all, "\n"));
    EXPECT_EQ(spec.env().count("HOME"), 0u) << all;
    EXPECT_EQ(spec.env().count("PATH"), 0u) << all;
  }
  setenv("SBATCH_TEST_VAR", "from-here", 1);
  v1::JobSpec spec = Accepted(
      "#SBATCH --export=ALL,A=1,B=x=y,C=,SBATCH_TEST_VAR\n"
      "#SBATCH --export NONE,SLURM_JOB_NAME=mine\n");
  EXPECT_EQ(spec.env().at("A"), "1");
  EXPECT_EQ(spec.env().at("B"), "x=y");
  EXPECT_EQ(spec.env().at("C"), "");
  EXPECT_EQ(spec.env().at("SBATCH_TEST_VAR"), "from-here");
  // A variable the script sets wins over the one derived from the options.
  EXPECT_EQ(spec.env().at("SLURM_JOB_NAME"), "mine");
  unsetenv("SBATCH_TEST_VAR");
  EXPECT_EQ(Refused("#SBATCH --export=SBATCH_TEST_VAR\n"),
            "/home/u/train.sh:1: `#SBATCH --export=SBATCH_TEST_VAR`: "
            "--export names SBATCH_TEST_VAR, which is not set here; set "
            "it, or give SBATCH_TEST_VAR=VALUE");
  EXPECT_THAT(Refused("#SBATCH --export=ALL,1X=2\n"),
              HasSubstr("'1X' is not a variable name"));
  EXPECT_THAT(Refused("#SBATCH --export=A-B=2\n"),
              HasSubstr("'A-B' is not a variable name"));
}

TEST(SbatchTest, ChdirDependencyExcludeAndSwitches) {
  EXPECT_EQ(Accepted("#SBATCH -D /data/../runs/x/\n").working_dir(),
            "/runs/x/");
  // Relative: from where xlctl runs, as sbatch.
  EXPECT_EQ(Accepted("#SBATCH --chdir=logs\n").working_dir(),
            (std::filesystem::current_path() / "logs").string());

  EXPECT_THAT(Accepted("#SBATCH -d afterok:7\n").after_ok(), ElementsAre("7"));
  EXPECT_THAT(
      Accepted("#SBATCH --dependency=afterok:1:2,afterok:3\n").after_ok(),
      ElementsAre("1", "2", "3"));
  for (const char* bad : {"afterany:4", "afternotok:4", "after:4+10",
                          "singleton", "afterok:1,afterany:2"}) {
    EXPECT_THAT(
        Refused(absl::StrCat("#SBATCH --dependency=", bad, "\n")),
        HasSubstr("only --dependency=afterok:ID[:ID...] has an equivalent"))
        << bad;
  }
  EXPECT_THAT(Refused("#SBATCH --dependency=afterok:1?afterok:2\n"),
              HasSubstr("instead of '?'"));
  EXPECT_THAT(Refused("#SBATCH --dependency=afterok:\n"),
              HasSubstr("'' is not a job id"));
  EXPECT_THAT(Refused("#SBATCH --dependency=afterok:5_1\n"),
              HasSubstr("'5_1' is not a job id"));

  EXPECT_THAT(Accepted("#SBATCH -x n1,n2 --exclude=gpu[1-2,10],rack[08-10]b\n")
                  .resources()
                  .exclude_nodes(),
              ElementsAre("n1", "n2", "gpu1", "gpu2", "gpu10", "rack08b",
                          "rack09b", "rack10b"));
  for (const char* bad : {"./nodes.txt", "n[1-", "n[3-1]", "n[1-2][1-2]",
                          "n[a-b]", "n[0-5000]", ","}) {
    EXPECT_THAT(Refused(absl::StrCat("#SBATCH --exclude=", bad, "\n")),
                HasSubstr("--exclude takes node names"))
        << bad;
  }

  v1::JobSpec sw = Accepted("#SBATCH -N 8 --switches=1@30:00\n");
  EXPECT_EQ(sw.resources().max_switches(), 1);
  EXPECT_EQ(sw.resources().max_switches_wait().seconds(), 1800);
  EXPECT_EQ(Accepted("#SBATCH --switches=2\n").resources().max_switches(), 2);
  EXPECT_THAT(Refused("#SBATCH --switches=x\n"),
              HasSubstr("--switches takes N or N@TIME"));
  EXPECT_THAT(Refused("#SBATCH -N 2-4\n#SBATCH --switches=1\n"),
              StartsWith("/home/u/train.sh:2: `#SBATCH --switches=1`: an "
                         "elastic job"));
}

TEST(SbatchTest, AcceptedWithoutEffect) {
  v1::JobSpec spec = Accepted(
      "#SBATCH --account=proj -A proj --mail-type=END --mail-user=a@b\n"
      "#SBATCH -o out.txt -e err.txt --open-mode=append --requeue\n"
      "#SBATCH --comment=\"x\" --wckey=k --parsable --quiet\n");
  EXPECT_EQ(spec.queue(), "");
  EXPECT_EQ(spec.max_retries(), 0);
}

TEST(SbatchTest, WhatCannotBeHonouredIsRefusedWithTheLine) {
  EXPECT_EQ(Refused("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --array=1-10\n"),
            "/home/u/train.sh:3: `#SBATCH --array=1-10`: job arrays are not "
            "supported; submit one job per index (a shell loop over xlctl "
            "submit --sbatch, the index given after --)");
  struct Case {
    std::string line, want;
  };
  const std::vector<Case> cases = {
      {"#SBATCH -a 0-3", "job arrays are not supported"},
      {"#SBATCH --exclusive", "cannot hold one for a job alone"},
      {"#SBATCH --exclusive=user", "cannot hold one for a job alone"},
      {"#SBATCH --constraint=a100", "node features have no equivalent"},
      {"#SBATCH -C ib", "node features have no equivalent"},
      {"#SBATCH --nodelist=n1", "xl chooses the nodes itself"},
      {"#SBATCH -w n[1-2]", "xl chooses the nodes itself"},
      {"#SBATCH --qos=high", "xl has no QOS"},
      {"#SBATCH --begin=now+1hour", "submit it when it should start"},
      {"#SBATCH --hold", "submit it when it should start"},
      {"#SBATCH --signal=B:USR1@90", "checkpoint on SIGTERM"},
      {"#SBATCH --ntasks-per-socket=2", "xl does not place tasks"},
      {"#SBATCH --partition=a,b", "one queue"},
      {"#SBATCH -Z", "-Z is not an sbatch option xl knows"},
      {"#SBATCH --job-name", "--job-name needs a value"},
      {"#SBATCH -J", "--job-name needs a value"},
      {"#SBATCH nodes=2", "'nodes=2' is not an option"},
      {"#SBATCH hetjob", "heterogeneous jobs are not supported"},
      {"#SBATCH --no-such-thing=1",
       "--no-such-thing is not an option xl can "
       "honour; remove it"},
      {"#SBATCH --chdir=", "--chdir needs a directory"},
  };
  for (const Case& c : cases) {
    const std::string script =
        absl::StrCat("#!/bin/bash\n\n", c.line, "   \n#SBATCH -N 1\n");
    const std::string message = Refused(script);
    EXPECT_THAT(message, StartsWith(absl::StrCat("/home/u/train.sh:3: `",
                                                 c.line, "`: ")))
        << c.line;
    EXPECT_THAT(message, HasSubstr(c.want)) << c.line;
  }
}

TEST(SbatchTest, ARelativeScriptPathBecomesAbsolute) {
  v1::JobSpec spec = *JobSpecFromSbatch("jobs/run.sh", "", {});
  EXPECT_EQ(spec.command(3),
            (std::filesystem::current_path() / "jobs/run.sh").string());
  EXPECT_EQ(spec.name(), "run.sh");
}

// Runs `argv` with `env` as its whole environment; its stdout, and its exit
// status in `*status`.
std::string RunProgram(const std::vector<std::string>& argv,
                       const std::vector<std::string>& env, int* status) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> a, e;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const std::string& s : env) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    e.push_back(nullptr);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  close(fds[0]);
  waitpid(pid, status, 0);
  return out;
}

TEST(SbatchTest, TheCommandRunsTheScriptAsOneSlurmTask) {
  if (access("/bin/bash", X_OK) != 0) GTEST_SKIP() << "no /bin/bash";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("sbatch_test_", getpid());
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "job.sh").string();
  std::ofstream(script) << "#!/bin/bash\n"
                           "#SBATCH -N 2 --ntasks-per-node=2\n"
                           "echo \"task $SLURM_PROCID/$SLURM_NTASKS "
                           "node $SLURM_NODEID local $SLURM_LOCALID "
                           "job $SLURM_JOB_ID args $*\"\n"
                           "srun -n 4 --label echo \"in srun $SLURM_PROCID\"\n";
  std::ifstream in(script);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<v1::JobSpec> spec =
      JobSpecFromSbatch(script, text.str(), {"a", "b c"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  // The environment an agent gives rank 3 of a 2 x 2 job.
  const std::vector<std::string> env = {
      "PATH=/usr/bin:/bin", "XL_JOB_ID=17",      "RANK=3",
      "WORLD_SIZE=4",       "LOCAL_RANK=1",      "GROUP_RANK=1",
      "GROUP_WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2"};
  int status = -1;
  const std::string out = RunProgram(
      {spec->command().begin(), spec->command().end()}, env, &status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(out, "task 3/4 node 1 local 1 job 17 args a b c\nin srun 3\n");

  // The text as submitted runs, not the file: removed (or edited) after
  // the submit, the job runs the same (as sbatch copies the script).
  std::filesystem::remove_all(dir);
  EXPECT_EQ(RunProgram({spec->command().begin(), spec->command().end()}, env,
                       &status),
            "task 3/4 node 1 local 1 job 17 args a b c\nin srun 3\n");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace xl::client
