// The resume protocol (loop/resume.h) on several ranks as threads over the
// real Gloo collective: every rank ends with rank 0's newest valid
// checkpoint, bitwise, or every rank starts fresh, or every rank fails at
// once; peers' own directories are never read. And AgreeAllOk, the
// agreement the GPU loop's set-up steps use.
#include "agent/worker/loop/resume.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "agent/worker/loop/checkpoint.h"
#include "rank_threads.h"

namespace xl::worker {
namespace {

namespace fs = std::filesystem;
using testing::OnRanks;

constexpr uint64_t kFingerprint = 7;
constexpr int64_t kCount = 1000;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/xl-resume-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A state whose every field depends on the step, so that two steps'
// states differ everywhere.
TrainState State(int64_t step) {
  TrainState s;
  s.step = step;
  s.adam_t = step + 1;
  s.loss_scale = 1024.0f + static_cast<float>(step % 7);
  s.good_steps = step % 5 + 2;
  s.batch_per_rank = static_cast<int32_t>(step % 11 + 3);
  for (int64_t i = 0; i < kCount; ++i) {
    s.params.push_back(0.25f * i + step);
    s.m.push_back(-0.5f * i - step);
    s.v.push_back(1e-3f * i + 2 * step);
  }
  return s;
}

void Write(const std::string& dir, const TrainState& s) {
  ASSERT_TRUE(WriteCheckpoint(dir, s, kFingerprint, /*keep=*/10).ok());
}

void FlipByte(const std::string& path, int offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char b;
  f.get(b);
  f.seekp(offset);
  f.put(static_cast<char>(b ^ 1));
}

// What one rank ended with.
struct RankResume {
  absl::Status status;
  ResumePoint point;
  std::vector<float> params, m, v;
};

// Runs both steps of the protocol on `dirs.size()` ranks, rank r reading
// dirs[r]. The vectors start as a fresh model's would (sized, not zero).
std::vector<RankResume> Resume(const std::vector<std::string>& dirs) {
  const int world = static_cast<int>(dirs.size());
  std::vector<RankResume> out(world);
  std::vector<absl::Status> st = OnRanks(world, [&](int r, Collective* c) {
    RankResume& me = out[r];
    me.params.assign(kCount, -1.0f);
    me.m.assign(kCount, -2.0f);
    me.v.assign(kCount, -3.0f);
    absl::StatusOr<ResumePoint> p =
        AgreeResumePoint(c, dirs[r], kFingerprint, kCount);
    if (!p.ok()) return p.status();
    me.point = *std::move(p);
    return ShareResumeState(c, &me.point, &me.params, &me.m, &me.v);
  });
  for (int r = 0; r < world; ++r) out[r].status = st[r];
  return out;
}

// Every rank holds `want` exactly: the step and counters, and the vectors
// bit for bit.
void ExpectEveryRankLoaded(const std::vector<RankResume>& got,
                           const TrainState& want) {
  for (size_t r = 0; r < got.size(); ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    ASSERT_TRUE(got[r].status.ok()) << got[r].status;
    EXPECT_TRUE(got[r].point.found);
    EXPECT_EQ(got[r].point.state.step, want.step);
    EXPECT_EQ(got[r].point.state.adam_t, want.adam_t);
    EXPECT_EQ(got[r].point.state.loss_scale, want.loss_scale);
    EXPECT_EQ(got[r].point.state.good_steps, want.good_steps);
    EXPECT_EQ(got[r].point.state.batch_per_rank, want.batch_per_rank);
    EXPECT_EQ(got[r].params, want.params);
    EXPECT_EQ(got[r].m, want.m);
    EXPECT_EQ(got[r].v, want.v);
  }
}

void ExpectEveryRankFresh(const std::vector<RankResume>& got) {
  for (size_t r = 0; r < got.size(); ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    ASSERT_TRUE(got[r].status.ok()) << got[r].status;
    EXPECT_FALSE(got[r].point.found);
    EXPECT_EQ(got[r].point.state.step, 0);
    // A fresh start leaves the caller's initial state alone.
    EXPECT_EQ(got[r].params, std::vector<float>(kCount, -1.0f));
    EXPECT_EQ(got[r].m, std::vector<float>(kCount, -2.0f));
    EXPECT_EQ(got[r].v, std::vector<float>(kCount, -3.0f));
  }
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(Resume, EveryRankLoadsTheNewestCheckpoint) {
  TempDir dir;
  Write(dir.path(), State(10));
  Write(dir.path(), State(20));
  auto got = Resume({dir.path(), dir.path(), dir.path()});
  ExpectEveryRankLoaded(got, State(20));
  EXPECT_EQ(got[0].point.path, CheckpointPath(dir.path(), 20));
}

// Rank 0's newest is corrupt or truncated: rank 0 skips it (once: no other
// rank reads) and every rank takes the step before it.
TEST(Resume, ACorruptNewestMovesEveryRankToTheSameOlderStep) {
  for (bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "truncated" : "one bit flipped");
    TempDir dir;
    Write(dir.path(), State(10));
    Write(dir.path(), State(20));
    const std::string newest = CheckpointPath(dir.path(), 20);
    if (truncate) {
      fs::resize_file(newest, fs::file_size(newest) / 2);
    } else {
      FlipByte(newest, 200);
    }
    ::testing::internal::CaptureStderr();
    auto got = Resume({dir.path(), dir.path(), dir.path()});
    const std::string err = ::testing::internal::GetCapturedStderr();
    ExpectEveryRankLoaded(got, State(10));
    EXPECT_EQ(Count(err, "skipping checkpoint " + newest), 1u) << err;
  }
}

// Only rank 0 writes checkpoints, so only its directory counts: a peer
// whose own directory lacks the newest, or holds a corrupt one, or does
// not exist, still loads rank 0's newest, and nothing reads its directory.
TEST(Resume, PeersTakeRankZerosNewestWhateverTheirOwnDirectoryHolds) {
  TempDir zero, empty, corrupt;
  Write(zero.path(), State(10));
  Write(zero.path(), State(20));
  Write(corrupt.path(), State(30));
  FlipByte(CheckpointPath(corrupt.path(), 30), 200);
  ::testing::internal::CaptureStderr();
  auto got = Resume({zero.path(), empty.path(), corrupt.path(),
                     zero.path() + "/no-such-dir"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ExpectEveryRankLoaded(got, State(20));
  EXPECT_EQ(err.find("skipping"), std::string::npos) << err;
}

TEST(Resume, NoCheckpointAnywhereStartsEveryRankFresh) {
  TempDir dir;
  ExpectEveryRankFresh(Resume({dir.path(), dir.path(), dir.path()}));
  // A directory not made yet (the first attempt) and no directory at all.
  ExpectEveryRankFresh(Resume({dir.path() + "/first", "", ""}));
  ExpectEveryRankFresh(Resume({"", "", ""}));
}

// A fresh start on rank 0 is a fresh start everywhere, even where a peer's
// own directory holds a checkpoint.
TEST(Resume, RankZeroStartingFreshStartsEveryRankFresh) {
  TempDir empty, other;
  Write(other.path(), State(20));
  ExpectEveryRankFresh(Resume({empty.path(), other.path(), other.path()}));
}

// Rank 0 cannot read its directory (here it is a file): it returns why,
// and its peers end at once naming it, not at the collective timeout (20 s
// in OnRanks).
TEST(Resume, AnUnreadableDirectoryOnRankZeroEndsEveryRankAtOnce) {
  TempDir dir;
  const std::string not_a_dir = dir.path() + "/file";
  { std::ofstream(not_a_dir) << "x"; }
  const absl::Time t0 = absl::Now();
  auto got = Resume({not_a_dir, not_a_dir, not_a_dir});
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  EXPECT_NE(got[0].status.message().find("opendir"), std::string::npos)
      << got[0].status;
  for (int r : {1, 2}) {
    EXPECT_EQ(got[r].status.code(), absl::StatusCode::kFailedPrecondition)
        << "rank " << r << ": " << got[r].status;
    EXPECT_NE(got[r].status.message().find("rank 0 could not read"),
              std::string::npos)
        << "rank " << r << ": " << got[r].status;
  }
}

// The step and counters travel as integers, exact beyond a float's 24 bits.
TEST(Resume, LargeStepsAndCountersArriveExact) {
  TempDir dir;
  TrainState s = State(10);
  s.step = (int64_t{1} << 33) + 1;
  s.adam_t = (int64_t{1} << 53) + 1;
  s.good_steps = (int64_t{1} << 31) + 5;
  s.batch_per_rank = (1 << 24) + 1;
  Write(dir.path(), s);
  ExpectEveryRankLoaded(Resume({dir.path(), dir.path()}), s);
}

// A world of one has no collective (the GPU loop on one GPU).
TEST(Resume, AWorldOfOneNeedsNoCollective) {
  TempDir dir;
  Write(dir.path(), State(20));
  absl::StatusOr<ResumePoint> p =
      AgreeResumePoint(nullptr, dir.path(), kFingerprint, kCount);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->found);
  std::vector<float> params, m, v;
  ASSERT_TRUE(ShareResumeState(nullptr, &*p, &params, &m, &v).ok());
  const TrainState want = State(20);
  EXPECT_EQ(p->state.step, 20);
  EXPECT_EQ(params, want.params);
  EXPECT_EQ(m, want.m);
  EXPECT_EQ(v, want.v);
}

// One rank fails a set-up step: it returns its own error and every other
// rank a FAILED_PRECONDITION that names the step and the fix.
TEST(AgreeAllOk, OneRankFailingFailsEveryRank) {
  const absl::Status oom =
      absl::ResourceExhaustedError("rank 2: out of memory");
  std::vector<absl::Status> st = OnRanks(4, [&](int r, Collective* c) {
    return AgreeAllOk(c, r == 2 ? oom : absl::OkStatus(),
                      "to allocate the model", "free that GPU");
  });
  EXPECT_EQ(st[2], oom);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kFailedPrecondition)
        << "rank " << r << ": " << st[r];
    EXPECT_EQ(st[r].message(),
              "another rank failed to allocate the model (its own error says "
              "which and why); free that GPU")
        << "rank " << r;
  }
}

TEST(AgreeAllOk, EveryRankOkIsOkEverywhere) {
  std::vector<absl::Status> st = OnRanks(3, [&](int, Collective* c) {
    return AgreeAllOk(c, absl::OkStatus(), "to allocate", "fix");
  });
  for (size_t r = 0; r < st.size(); ++r) {
    EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  }
  EXPECT_TRUE(AgreeAllOk(nullptr, absl::OkStatus(), "x", "y").ok());
  EXPECT_EQ(AgreeAllOk(nullptr, absl::InternalError("own"), "x", "y"),
            absl::InternalError("own"));
}

}  // namespace
}  // namespace xl::worker
