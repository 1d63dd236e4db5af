// Checkpoint files: round trip, atomic naming, keep-last-3, and that the
// newest corrupt, truncated or mismatched file is skipped with a warning.
#include "agent/worker/loop/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <thread>

#include "absl/time/clock.h"

namespace xl::worker {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xl-ckpt-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static TrainState State(int64_t step, int n) {
    TrainState s;
    s.step = step;
    s.adam_t = step;
    for (int i = 0; i < n; ++i) {
      s.params.push_back(0.25f * i + step);
      s.m.push_back(-0.5f * i);
      s.v.push_back(1e-3f * i + step);
    }
    return s;
  }

  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripAndKeepsTheLastThree) {
  const uint64_t fp = 42;
  for (int64_t step : {5, 10, 15, 20}) {
    ASSERT_TRUE(WriteCheckpoint(dir_, State(step, 9), fp).ok());
  }
  EXPECT_FALSE(fs::exists(CheckpointPath(dir_, 5)));
  for (int64_t step : {10, 15, 20}) {
    EXPECT_TRUE(fs::exists(CheckpointPath(dir_, step)));
  }
  int files = 0;
  for (auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 3) << "no temp files are left behind";
  auto r = LoadNewestCheckpoint(dir_, fp, 9);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->state.has_value());
  TrainState want = State(20, 9);
  EXPECT_EQ(r->state->step, 20);
  EXPECT_EQ(r->state->adam_t, 20);
  EXPECT_EQ(r->state->params, want.params);
  EXPECT_EQ(r->state->m, want.m);
  EXPECT_EQ(r->state->v, want.v);
  EXPECT_TRUE(r->skipped.empty());
}

// FP16's loss-scaling state is kept, and a version 1 file (written before
// it existed: the same bytes without those 16) still loads, with none.
TEST_F(CheckpointTest, LossScaleStateAndVersionOneFiles) {
  TrainState s = State(7, 4);
  s.loss_scale = 32768.0f;
  s.good_steps = 1234;
  ASSERT_TRUE(WriteCheckpoint(dir_, s, 9).ok());
  auto r = ReadCheckpoint(CheckpointPath(dir_, 7), 9, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->loss_scale, 32768.0f);
  EXPECT_EQ(r->good_steps, 1234);

  std::ifstream in(CheckpointPath(dir_, 7), std::ios::binary);
  std::string v2((std::istreambuf_iterator<char>(in)), {});
  std::string v1 = v2.substr(0, 40) + v2.substr(56, v2.size() - 56 - 8);
  const uint32_t one = 1;
  std::memcpy(&v1[4], &one, 4);
  const uint64_t sum = Fnv1a64(v1.data(), v1.size());
  v1.append(reinterpret_cast<const char*>(&sum), 8);
  const std::string old_path = CheckpointPath(dir_, 8);
  std::ofstream(old_path, std::ios::binary) << v1;
  auto old = ReadCheckpoint(old_path, 9, 4);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->step, 7);
  EXPECT_EQ(old->loss_scale, 0.0f);
  EXPECT_EQ(old->params, s.params);
  EXPECT_EQ(old->v, s.v);

  std::string newer = v2;
  const uint32_t three = 3;
  std::memcpy(&newer[4], &three, 4);
  std::ofstream(CheckpointPath(dir_, 9), std::ios::binary) << newer;
  auto refused = ReadCheckpoint(CheckpointPath(dir_, 9), 9, 4);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("newer"), std::string::npos);
}

TEST_F(CheckpointTest, MissingOrEmptyDirectoryStartsFresh) {
  auto r = LoadNewestCheckpoint(dir_ + "/nope", 1, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->state.has_value());
  r = LoadNewestCheckpoint(dir_, 1, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->state.has_value());
}

TEST_F(CheckpointTest, SkipsCorruptTruncatedAndMismatched) {
  const uint64_t fp = 7;
  ASSERT_TRUE(WriteCheckpoint(dir_, State(10, 50), fp, 10).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, State(20, 50), fp, 10).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, State(30, 50), fp, 10).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, State(40, 50), fp + 1, 10).ok());
  // 30: one flipped byte in the middle of the params.
  {
    std::fstream f(CheckpointPath(dir_, 30),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c;
    f.seekg(100);
    f.get(c);
    f.seekp(100);
    f.put(static_cast<char>(c ^ 0x10));
  }
  // 20: truncated, as a crash before rename can not leave it but a broken
  // disk or a copy can.
  fs::resize_file(CheckpointPath(dir_, 20),
                  fs::file_size(CheckpointPath(dir_, 20)) - 13);

  testing::internal::CaptureStderr();
  auto r = LoadNewestCheckpoint(dir_, fp, 50);
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->state.has_value());
  EXPECT_EQ(r->state->step, 10);
  EXPECT_EQ(r->path, CheckpointPath(dir_, 10));
  ASSERT_EQ(r->skipped.size(), 3u);
  EXPECT_NE(err.find(CheckpointPath(dir_, 40)), std::string::npos) << err;
  EXPECT_NE(err.find("fingerprint"), std::string::npos) << err;
  EXPECT_NE(err.find(CheckpointPath(dir_, 30)), std::string::npos) << err;
  EXPECT_NE(err.find("checksum"), std::string::npos) << err;
  EXPECT_NE(err.find(CheckpointPath(dir_, 20)), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;

  // A different parameter count is refused too.
  testing::internal::CaptureStderr();
  r = LoadNewestCheckpoint(dir_, fp, 51);
  testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->state.has_value());
}

TEST_F(CheckpointTest, UnwritableDirectoryIsAnError) {
  auto st = WriteCheckpoint("/proc/xl-no-such-dir", State(1, 2), 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/proc/xl-no-such-dir"), std::string::npos);
}

TEST(Fingerprint, DependsOnShapeOnly) {
  TrainConfig a, b;
  b.learning_rate = 0.5;
  b.steps = 7;
  EXPECT_EQ(ConfigFingerprint(a), ConfigFingerprint(b));
  b.hidden_dim = 512;
  EXPECT_NE(ConfigFingerprint(a), ConfigFingerprint(b));
}

// The training loop hands a checkpoint over and goes on while it is
// written; the next one waits for it (one write at a time), and Wait()
// gives the write's status.
TEST(CheckpointWriterTest, WritesOffTheCallersThreadOneAtATime) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> writes{0};
  std::atomic<int> running{0};
  std::atomic<int> most_at_once{0};
  CheckpointWriter writer([&](const TrainState& s) {
    most_at_once = std::max(most_at_once.load(), ++running);
    if (s.step == 1) released.wait();  // A slow disk.
    --running;
    ++writes;
    return s.step == 3 ? absl::ResourceExhaustedError("disk full")
                       : absl::OkStatus();
  });
  TrainState first;
  first.step = 1;
  writer.Submit(first);  // Returns although the write blocks.
  EXPECT_TRUE(writer.busy());
  EXPECT_EQ(writes.load(), 0);
  std::thread disk([&] {
    absl::SleepFor(absl::Milliseconds(100));
    release.set_value();
  });
  TrainState second;
  second.step = 2;
  writer.Submit(second);  // Waits for the first.
  EXPECT_GE(writes.load(), 1);
  EXPECT_TRUE(writer.Wait().ok());
  EXPECT_EQ(writes.load(), 2);
  EXPECT_EQ(most_at_once.load(), 1);
  disk.join();
  TrainState third;
  third.step = 3;
  writer.Submit(third);
  EXPECT_EQ(writer.Wait().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(writer.busy());
}

}  // namespace
}  // namespace xl::worker
