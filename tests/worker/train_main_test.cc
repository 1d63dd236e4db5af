// xl-train as a child process: JSON metrics lines on XL_METRICS_FD, SIGTERM
// -> checkpoint and exit 143, usage errors exit 2, --write-shards, and two
// ranks meeting through --rendezvous-dir.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/worker/loop/checkpoint.h"
#include "common/proto_text.h"
#include "xl/v1/job.pb.h"

namespace {

namespace fs = std::filesystem;

struct Child {
  pid_t pid = -1;
  int metrics_fd = -1;  // read end
};

Child Spawn(const std::vector<std::string>& args,
            const std::vector<std::string>& env, bool metrics_pipe) {
  int p[2] = {-1, -1};
  if (metrics_pipe) EXPECT_EQ(::pipe(p), 0);
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    std::vector<std::string> envs = env;
    if (metrics_pipe) {
      ::close(p[0]);
      ::dup2(p[1], 9);
      ::close(p[1]);
      envs.push_back("XL_METRICS_FD=9");
    }
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    std::vector<char*> argv{const_cast<char*>(XL_TRAIN_BINARY)};
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    ::execve(XL_TRAIN_BINARY, argv.data(), envp.data());
    ::_exit(127);
  }
  if (metrics_pipe) {
    ::close(p[1]);
    c.metrics_fd = p[0];
  }
  return c;
}

int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadLine(int fd) {
  std::string line;
  char ch;
  while (::read(fd, &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  return line;
}

class TrainMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xl-train-main-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(TrainMainTest, SigtermCheckpointsAndExits143) {
  // Many steps so that it is still running when SIGTERM arrives.
  const std::string spec =
      R"({"inputDim":16,"hiddenDim":32,"classes":4,"batchPerRank":8,)"
      R"("steps":100000000,"metricsEvery":1,"device":"cpu"})";
  Child c = Spawn({"--spec-json", spec, "--checkpoint-dir", dir_ + "/ck"},
                  {"XL_JOB_ID=j1", "XL_ATTEMPT=2"}, true);
  std::string line = ReadLine(c.metrics_fd);
  xl::v1::TrainMetrics m;
  ASSERT_TRUE(xl::ParseYamlToMessage(line, "metrics", &m).ok()) << line;
  EXPECT_EQ(m.step(), 1);
  EXPECT_EQ(m.job_id(), "j1");
  EXPECT_EQ(m.attempt(), 2);
  EXPECT_EQ(m.total_steps(), 100000000);
  EXPECT_GT(m.loss(), 0);
  ::kill(c.pid, SIGTERM);
  // Drain the pipe until the child closes it (it must not block on a full
  // pipe while stopping), then reap it.
  int64_t last = 0;
  while (!(line = ReadLine(c.metrics_fd)).empty()) {
    ASSERT_TRUE(xl::ParseYamlToMessage(line, "metrics", &m).ok()) << line;
    last = m.step();
  }
  ::close(c.metrics_fd);
  EXPECT_EQ(Wait(c.pid), 143);
  EXPECT_TRUE(fs::exists(xl::worker::CheckpointPath(dir_ + "/ck", last)))
      << "the last reported step " << last << " is saved";
}

TEST_F(TrainMainTest, UsageErrorsExit2) {
  Child bad =
      Spawn({"--spec-json", R"({"hiddenDim":-4,"device":"cpu"})"}, {}, false);
  EXPECT_EQ(Wait(bad.pid), 2);
  Child unknown = Spawn({"--spec-json", R"({"nope":1})"}, {}, false);
  EXPECT_EQ(Wait(unknown.pid), 2);
  Child cuda = Spawn({"--spec-json", R"({"device":"cuda"})"}, {}, false);
#ifndef XL_HAVE_CUDA
  EXPECT_EQ(Wait(cuda.pid), 2);
#else
  Wait(cuda.pid);
#endif
  Child help = Spawn({"--help"}, {}, false);
  EXPECT_EQ(Wait(help.pid), 0);
}

TEST_F(TrainMainTest, TwoRanksThroughADirectoryAndShards) {
  const std::string spec =
      R"({"inputDim":8,"hiddenDim":16,"classes":3,"batchPerRank":4,)"
      R"("steps":20,"metricsEvery":5,"device":"cpu")";
  Child w = Spawn({"--spec-json", spec + "}", "--write-shards", dir_ + "/data",
                   "--count", "100"},
                  {}, false);
  ASSERT_EQ(Wait(w.pid), 0);
  ASSERT_TRUE(fs::exists(dir_ + "/data/shard-00000.xls"));
  const std::string with_shards =
      spec + R"(,"data":{"shards":")" + dir_ + R"(/data/shard-*.xls"}})";
  std::vector<Child> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(
        Spawn({"--spec-json", with_shards, "--rendezvous-dir", dir_ + "/rdv"},
              {"RANK=" + std::to_string(r), "WORLD_SIZE=2",
               "XL_NODE_ADDRESS=127.0.0.1"},
              r == 0));
  }
  std::string line, last;
  while (!(line = ReadLine(ranks[0].metrics_fd)).empty()) last = line;
  ::close(ranks[0].metrics_fd);
  EXPECT_EQ(Wait(ranks[0].pid), 0);
  EXPECT_EQ(Wait(ranks[1].pid), 0);
  xl::v1::TrainMetrics m;
  ASSERT_TRUE(xl::ParseYamlToMessage(last, "metrics", &m).ok()) << last;
  EXPECT_EQ(m.step(), 20);
  EXPECT_GT(m.allreduce_bus_gbps(), 0);
}

}  // namespace
