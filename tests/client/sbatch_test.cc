// #SBATCH lines to a JobSpec: what is honoured, what is refused (with the
// line named), and the command that runs the script once per rank.
#include "client/sbatch.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace xl::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<v1::JobSpec> Parse(const std::string& text,
                                  std::vector<std::string> args = {}) {
  return JobSpecFromSbatch("/home/u/train.sh", text, args);
}

TEST(SbatchTest, ARealisticScriptBecomesAJob) {
  auto spec = Parse(R"(#!/bin/bash
#SBATCH --job-name=llama-ft
#SBATCH -N 2
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:h100:8
#SBATCH --cpus-per-task=12
#SBATCH --mem=900G
#SBATCH --time=1-12:00:00
#SBATCH -p research   # the team's partition
#SBATCH --output=%x-%j.out
#SBATCH --dependency=afterok:41:42
#SBATCH --export=ALL,DATA=/datasets/c4

module load cuda
#SBATCH --time=5   (after the first command: ignored, as sbatch does)
srun python train.py --config big.yaml
)", {"--lr", "3e-4"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "llama-ft");
  EXPECT_EQ(spec->queue(), "research");
  EXPECT_EQ(spec->resources().nodes(), 2);
  EXPECT_EQ(spec->resources().ranks_per_node(), 8);
  EXPECT_EQ(spec->resources().gpus_per_node(), 8);
  EXPECT_THAT(spec->resources().gpu_models(), ElementsAre("h100"));
  EXPECT_EQ(spec->resources().cpus_per_node(), 96);
  EXPECT_EQ(spec->resources().memory_bytes_per_node(), 900ull << 30);
  EXPECT_EQ(spec->time_limit().seconds(), 36 * 3600);
  EXPECT_THAT(spec->after_ok(), ElementsAre("41", "42"));
  EXPECT_EQ(spec->env().at("DATA"), "/datasets/c4");
  EXPECT_EQ(spec->env().at("SLURM_JOB_NAME"), "llama-ft");
  EXPECT_EQ(spec->env().at("SLURM_CPUS_PER_TASK"), "12");
  ASSERT_EQ(spec->command_size(), 6);
  EXPECT_EQ(spec->command(0), "/bin/bash");
  EXPECT_EQ(spec->command(1), "-c");
  EXPECT_THAT(spec->command(2), HasSubstr("SLURM_PROCID=\"$RANK\""));
  EXPECT_THAT(spec->command(2), HasSubstr("srun()"));
  EXPECT_EQ(spec->command(3), "/home/u/train.sh");
  EXPECT_EQ(spec->command(4), "--lr");
  EXPECT_EQ(spec->command(5), "3e-4");
}

TEST(SbatchTest, OptionFormsAndDefaults) {
  auto spec = Parse("#SBATCH -N2 -n 8 -J=a\n#SBATCH --gpus-per-node 4\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resources().nodes(), 2);
  EXPECT_EQ(spec->resources().ranks_per_node(), 4);
  EXPECT_EQ(spec->resources().gpus_per_node(), 4);
  EXPECT_EQ(spec->name(), "a");
  // Nothing said: one node, one task, no GPU, named after the script.
  auto bare = Parse("#!/bin/sh\necho hi\n");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->resources().nodes(), 1);
  EXPECT_EQ(bare->resources().ranks_per_node(), 1);
  EXPECT_EQ(bare->resources().gpus_per_node(), 0);
  EXPECT_EQ(bare->name(), "train.sh");
  EXPECT_FALSE(bare->has_time_limit());
  // A range of nodes is an elastic job; --gpus is over all nodes.
  auto elastic = Parse("#SBATCH --nodes=2-4 --gpus=16 --gpus-per-task=1\n");
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->resources().nodes(), 4);
  EXPECT_EQ(elastic->resources().min_nodes(), 2);
  EXPECT_EQ(elastic->resources().gpus_per_node(), 4);
  auto gres = Parse("#SBATCH --gres=gpu\n");
  ASSERT_TRUE(gres.ok());
  EXPECT_EQ(gres->resources().gpus_per_node(), 1);
}

TEST(SbatchTest, EveryTimeFormat) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"90", 5400},          {"10:30", 630},        {"2:00:00", 7200},
      {"1-0", 86400},        {"1-2", 93600},        {"1-2:30", 95400},
      {"1-02:30:15", 95415}, {"UNLIMITED", 0},      {"infinite", 0}};
  for (const auto& [text, want] : cases) {
    int64_t got = -1;
    EXPECT_TRUE(ParseSlurmTime(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
  }
  for (const char* bad : {"", "1:2:3:4", "a", "-1", "1-", "1-2:3:4:5", "5m"}) {
    int64_t got = 0;
    EXPECT_FALSE(ParseSlurmTime(bad, &got)) << bad;
  }
}

TEST(SbatchTest, WhatCannotBeHonouredIsRefusedWithTheLine) {
  struct Case {
    std::string script, want;
  };
  const std::vector<Case> cases = {
      {"#!/bin/bash\n#SBATCH -N 2\n#SBATCH --array=1-10\n",
       "/home/u/train.sh:3: `#SBATCH --array=1-10`: job arrays are not "
       "supported"},
      {"#SBATCH --gres=shard:2\n", "only GPUs are generic resources"},
      {"#SBATCH --exclusive\n", "ask for every GPU of a node"},
      {"#SBATCH --constraint=a100\n", "--gres=gpu:MODEL:N"},
      {"#SBATCH --nodelist=n1\n", "no equivalent"},
      {"#SBATCH --mem-per-cpu=4G\n", "--mem-per-cpu is not an option xl can honour"},
      {"#SBATCH --dependency=afterany:4\n", "only --dependency=afterok"},
      {"#SBATCH --time=soon\n", "--time takes minutes"},
      {"#SBATCH --nodes=4-2\n", "--nodes takes N or MIN-MAX"},
      {"#SBATCH -N 3\n#SBATCH --ntasks=8\n", "does not divide evenly over 3"},
      {"#SBATCH -N 2 --ntasks-per-node=4 --ntasks=6\n", "give two of the three"},
      {"#SBATCH --partition=a,b\n", "one queue"},
      {"#SBATCH --export=NONE\n", "never passes the submitter's environment"},
      {"#SBATCH -Z\n", "-Z is not an sbatch option"},
      {"#SBATCH --job-name\n", "--job-name needs a value"},
      {"#SBATCH --mem=lots\n", "--mem takes a size"},
  };
  for (const Case& c : cases) {
    auto spec = Parse(c.script);
    ASSERT_FALSE(spec.ok()) << c.script;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.want))
        << c.script;
  }
}

TEST(SbatchTest, InformationalOptionsAreAccepted) {
  auto spec = Parse(
      "#SBATCH --account=proj --mail-type=END --mail-user=a@b\n"
      "#SBATCH -o out.txt -e err.txt --requeue\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
}

}  // namespace
}  // namespace xl::client
