// loop/step_end.h: what both training loops do after a step, on the CPU
// alone: when metrics are due, which checkpoints are written (periodic ones
// off the loop, a stop's at once and its failure the run's), what the
// stop and a simulated crash end with, and that other ranks do nothing.
#include "agent/worker/loop/step_end.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace xl::worker {
namespace {

namespace fs = std::filesystem;

class StepEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xl-stepend-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    config_.steps = 10;
    config_.metrics_every = 4;
    config_.checkpoint_every = 3;
  }
  void TearDown() override { fs::remove_all(dir_); }

  StepEnd::Options For(int rank, std::string dir) const {
    StepEnd::Options o;
    o.rank = rank;
    o.checkpoint_dir = std::move(dir);
    o.fingerprint = 42;
    o.keep_checkpoints = 100;
    o.crash_after_steps = 7;
    return o;
  }

  // A state of 4 parameters; counts the calls.
  absl::Status Fill(TrainState* s) {
    ++fills_;
    s->adam_t = s->step;
    s->params = {1, 2, 3, 4};
    s->m = {0, 0, 0, 0};
    s->v = {0, 0, 0, 0};
    return absl::OkStatus();
  }

  std::vector<int64_t> Steps() const {
    std::vector<int64_t> steps;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ckpt-", 0) == 0) {
        steps.push_back(std::stoll(name.substr(5)));
      }
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }

  std::string dir_;
  TrainConfig config_;
  int fills_ = 0;
};

TEST_F(StepEndTest, MetricsEveryNStepsAtTheLastAndAtAStopOnRankZero) {
  StepEnd zero(config_, For(0, ""));
  StepEnd one(config_, For(1, ""));
  std::vector<int64_t> due;
  for (int64_t done = 1; done <= 10; ++done) {
    if (zero.MetricsDue(done, false)) due.push_back(done);
    EXPECT_FALSE(one.MetricsDue(done, done == 5));
  }
  EXPECT_EQ(due, (std::vector<int64_t>{4, 8, 10}));
  EXPECT_TRUE(zero.MetricsDue(5, /*stopping=*/true));
}

TEST_F(StepEndTest, PeriodicCheckpointsOffTheLoopAndAStopsAtOnce) {
  {
    StepEnd ends(config_, For(0, dir_));
    auto fill = [this](TrainState* s) { return Fill(s); };
    for (int64_t done = 1; done <= 7; ++done) {
      ASSERT_TRUE(ends.Checkpoint(done, false, 16, fill).ok());
    }
    EXPECT_EQ(fills_, 2);  // steps 3 and 6 only
    ASSERT_TRUE(ends.Checkpoint(8, /*stopping=*/true, 16, fill).ok());
    // The stop's is on disk when Checkpoint returns.
    EXPECT_TRUE(fs::exists(CheckpointPath(dir_, 8)));
    EXPECT_EQ(fills_, 3);
  }
  EXPECT_EQ(Steps(), (std::vector<int64_t>{3, 6, 8}));
  auto read = ReadCheckpoint(CheckpointPath(dir_, 6), 42, 4);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->step, 6);
  EXPECT_EQ(read->batch_per_rank, 16);
  EXPECT_EQ(read->adam_t, 6);
}

TEST_F(StepEndTest, OtherRanksAndNoDirectoryWriteNothing) {
  auto fill = [this](TrainState* s) { return Fill(s); };
  {
    StepEnd one(config_, For(1, dir_));
    StepEnd nowhere(config_, For(0, ""));
    for (int64_t done = 1; done <= 6; ++done) {
      EXPECT_TRUE(one.Checkpoint(done, done == 6, 16, fill).ok());
      EXPECT_TRUE(nowhere.Checkpoint(done, done == 6, 16, fill).ok());
    }
  }
  EXPECT_EQ(fills_, 0);
  EXPECT_TRUE(Steps().empty());
}

TEST_F(StepEndTest, AFailedFinalCheckpointIsTheRunsFailure) {
  // Under a plain file: no one, root included, can write there.
  { std::ofstream(dir_ + "/file") << "x"; }
  StepEnd ends(config_, For(0, dir_ + "/file/ckpts"));
  auto fill = [this](TrainState* s) { return Fill(s); };
  // A periodic one that fails costs progress, not the run.
  EXPECT_TRUE(ends.Checkpoint(3, false, 16, fill).ok());
  EXPECT_FALSE(ends.Wait().ok());
  absl::Status st = ends.Checkpoint(4, true, 16, fill);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("final checkpoint"), std::string::npos) << st;
  // A fill that fails is returned as it is, and nothing is written.
  StepEnd ok(config_, For(0, dir_));
  st = ok.Checkpoint(3, false, 16, [](TrainState*) {
    return absl::InternalError("GPU copy failed");
  });
  EXPECT_EQ(st.message(), "GPU copy failed");
  EXPECT_TRUE(Steps().empty());
}

TEST_F(StepEndTest, AStopAndACrashSayWhatHappened) {
  StepEnd ends(config_, For(0, dir_));
  absl::Status stop = ends.Stopped(8);
  EXPECT_EQ(stop.code(), absl::StatusCode::kCancelled);
  EXPECT_NE(stop.message().find("after step 8; checkpoint " +
                                CheckpointPath(dir_, 8)),
            std::string::npos)
      << stop;
  StepEnd nowhere(config_, For(0, ""));
  EXPECT_NE(nowhere.Stopped(2).message().find("nothing saved"),
            std::string::npos);
  EXPECT_TRUE(ends.CrashPoint(6).ok());
  EXPECT_EQ(ends.CrashPoint(7).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(ends.CrashPoint(8).ok());
  StepEnd::Options never = For(0, "");
  never.crash_after_steps = 0;
  StepEnd no_crash(config_, never);
  EXPECT_TRUE(no_crash.CrashPoint(0).ok());
}

}  // namespace
}  // namespace xl::worker
