// batch_per_rank: auto and global_batch: the batch chosen is the planner's
// largest fitting one (checked against MlpMemory itself, one sample more
// must not fit), a CPU run reports it and allocates exactly what the
// planner predicted for it, gradient accumulation trains like the big batch
// it stands for, and the errors name the field, the numbers and the fix.
#include "agent/worker/loop/batch_fit.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "common/planner/planner.h"
#include "rank_threads.h"

namespace xl::worker {
namespace {

double GpuNeed(const TrainConfig& c, int b) {
  return static_cast<double>(
             planner::MlpMemory(MlpShapeOf(c), b, c.precision, false)
                 .total_bytes()) +
         2.0 * b * (4.0 * c.input_dim + 4);
}

// The MFU benchmark's model: 8192 wide, 4 hidden layers, bf16.
TrainConfig Width8192Bf16() {
  TrainConfig c;
  c.input_dim = 8192;
  c.hidden_dim = 8192;
  c.hidden_layers = 4;
  c.classes = 1000;
  c.precision = v1::BF16;
  return c;
}

TEST(BatchFit, GpuBatchIsThePlannersLargestFit) {
  TrainConfig c = Width8192Bf16();
  const double h200 = 139.8 * (1ull << 30);  // what cudaMemGetInfo says
  const int b = MaxBatchPerRank(c, /*cpu=*/false, h200);
  ASSERT_GT(b, 64);
  EXPECT_EQ(b % 8, 0);
  const double usable = planner::GpuUsableBytes(h200);
  EXPECT_LE(GpuNeed(c, b), usable);
  EXPECT_GT(GpuNeed(c, b + 8), usable) << "a larger multiple of 8 fits";
  // An 80 GB card fits less; a model bigger than the card fits nothing.
  EXPECT_LT(MaxBatchPerRank(c, false, 79.6 * (1ull << 30)), b);
  c.hidden_layers = 200;  // 13 G params: 210 GB of states
  EXPECT_EQ(MaxBatchPerRank(c, false, h200), 0);
}

TEST(BatchFit, GlobalBatchSplitsIntoWholeMicroBatches) {
  TrainConfig c;
  c.input_dim = 256;
  c.hidden_dim = 512;
  c.hidden_layers = 2;
  c.classes = 10;
  c.batch_auto = true;
  const double budget = 64ull << 20;  // 64 MiB for this CPU rank
  const int max_b = MaxBatchPerRank(c, /*cpu=*/true, budget);
  ASSERT_GT(max_b, 100);
  ASSERT_LT(max_b, 20000);
  std::string line;
  // No global batch: the largest fit, one micro-batch.
  TrainConfig a = c;
  ASSERT_TRUE(FitBatch(&a, 4, true, budget, &line).ok());
  EXPECT_EQ(a.batch_per_rank, max_b);
  EXPECT_EQ(a.accumulation_steps, 1);
  EXPECT_NE(line.find("batch_per_rank auto: "), std::string::npos) << line;
  // A global batch of 4 ranks x 3 x max_b, x 2 x (max_b - 1) (a smaller
  // micro-batch), and a small one: whole micro-batches, each fitting.
  for (int64_t g : {int64_t{4} * 3 * max_b, int64_t{4} * 2 * (max_b - 1),
                    int64_t{4} * 7}) {
    TrainConfig t = c;
    t.global_batch = static_cast<int>(g);
    line.clear();
    absl::Status fit = FitBatch(&t, 4, true, budget, &line);
    ASSERT_TRUE(fit.ok()) << g << ": " << fit;
    EXPECT_EQ(int64_t{4} * t.batch_per_rank * t.accumulation_steps, g);
    EXPECT_LE(t.batch_per_rank, max_b);
    EXPECT_LE(t.batch_per_rank,
              MaxBatchPerRank(t, true, budget, t.accumulation_steps));
    EXPECT_NE(line.find(absl::StrCat("global batch ", g)), std::string::npos)
        << line;
  }
  // A step's inputs are held whole (twice: in use and made ahead), so
  // micro-batches cannot stretch the global batch without end.
  TrainConfig far = c;
  far.global_batch = 4 * 6 * (max_b - 1);
  EXPECT_EQ(FitBatch(&far, 4, true, budget, &line).code(),
            absl::StatusCode::kResourceExhausted);
  // A share per rank that is a prime above the fit splits only into
  // micro-batches of 1: refused, with a global batch that would do.
  int64_t prime = max_b + 1;
  for (bool found = false; !found; ++prime) {
    found = true;
    for (int64_t d = 2; d * d <= prime; ++d) {
      if (prime % d == 0) found = false;
    }
    if (found) break;
  }
  TrainConfig tiny = c;
  tiny.global_batch = static_cast<int>(4 * prime);
  absl::Status st = FitBatch(&tiny, 4, true, budget, &line);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(absl::StrCat("splits only into ", prime,
                                           " micro-batches of 1")),
            std::string::npos)
      << st;
  // A global batch the ranks do not divide, and a fixed batch that does
  // not divide it: refused with the numbers and the fix.
  TrainConfig bad = c;
  bad.global_batch = 1001;
  st = FitBatch(&bad, 4, true, budget, &line);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("train.global_batch: 1001 is not divisible by "
                              "the 4 ranks"),
            std::string::npos)
      << st;
  TrainConfig fixed;
  fixed.batch_per_rank = 48;
  fixed.global_batch = 1000;
  st = FitBatch(&fixed, 2, true, 0, &line);
  EXPECT_NE(st.message().find("not a multiple of 2 ranks x batch_per_rank 48 "
                              "= 96; use a multiple of 96"),
            std::string::npos)
      << st;
  fixed.global_batch = 960;
  ASSERT_TRUE(FitBatch(&fixed, 2, true, 0, &line).ok());
  EXPECT_EQ(fixed.accumulation_steps, 10);
  // Nothing fits: the field, both sizes and the way out.
  TrainConfig huge = c;
  huge.hidden_dim = 65536;
  st = FitBatch(&huge, 1, true, budget, &line);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("raise resources.memory_bytes_per_node"),
            std::string::npos)
      << st;
}

// The caller's cap on a step's inputs (the GPU's pinned host slots) bounds
// the auto batch and the global batch, and the explanation says why.
TEST(BatchFit, TheInputSlotCapBoundsTheAutoBatch) {
  TrainConfig c;
  c.input_dim = 1024;
  c.hidden_dim = 1024;
  c.hidden_layers = 2;
  c.classes = 16;
  c.precision = v1::BF16;
  c.batch_auto = true;
  const double gpu = 80.0 * (1ull << 30);
  ASSERT_GT(MaxBatchPerRank(c, false, gpu), 5000);
  std::string line;
  TrainConfig t = c;
  ASSERT_TRUE(FitBatch(&t, 2, false, gpu, &line, 1003).ok());
  EXPECT_EQ(t.batch_per_rank, 1000);  // a multiple of 8 under the cap
  EXPECT_NE(line.find("lowered from"), std::string::npos) << line;
  t = c;
  t.global_batch = 2 * 2000;
  EXPECT_EQ(FitBatch(&t, 2, false, gpu, &line, 1003).code(),
            absl::StatusCode::kInvalidArgument);
  // The cap is a share of this machine's memory over the node's ranks
  // (wide inputs: far from the 1 << 20 ceiling on any host).
  TrainConfig wide = c;
  wide.input_dim = 1 << 16;
  EXPECT_GT(PinnedStepBatchCap(wide, 3), 0);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  const int half = PinnedStepBatchCap(wide, 3);
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_NEAR(half, PinnedStepBatchCap(wide, 3) / 2, 1);
}

// On a GPU the device holds two micro-batches of inputs whatever the
// micro-batches per step, so accumulation reaches global batches whose
// inputs would not fit on the device; a fixed batch with a global batch is
// held to the same limits as auto: the pinned slots' cap and the GPU's
// free memory, each refused with the numbers and the fix.
TEST(BatchFit, FixedBatchWithAGlobalBatchIsCheckedOnTheGpu) {
  TrainConfig c = Width8192Bf16();
  const double gpu = 80.0 * (1ull << 30);
  ASSERT_GT(MaxBatchPerRank(c, false, gpu), 256);
  EXPECT_EQ(MaxBatchPerRank(c, false, gpu, 64), MaxBatchPerRank(c, false, gpu));
  std::string line;
  TrainConfig t = c;
  t.batch_per_rank = 256;
  t.global_batch = 2 * 256 * 8;
  ASSERT_TRUE(FitBatch(&t, 2, false, gpu, &line, 4096).ok()) << line;
  EXPECT_EQ(t.accumulation_steps, 8);
  // Over the pinned slots' cap: 2048 samples per rank per step.
  t = c;
  t.batch_per_rank = 256;
  t.global_batch = 2 * 256 * 8;
  absl::Status st = FitBatch(&t, 2, false, gpu, &line, 1024);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("2048 samples per rank per step, over 1024 (the "
                              "pinned host slots"),
            std::string::npos)
      << st;
  // A batch the GPU cannot hold.
  t = c;
  t.batch_per_rank = MaxBatchPerRank(c, false, gpu) + 64;
  t.global_batch = 2 * t.batch_per_rank;
  st = FitBatch(&t, 2, false, gpu, &line);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("use batch_per_rank: auto"), std::string::npos)
      << st;
  // The same batch on CPU (whose budget may be unknown) is not refused.
  t.device = "cpu";
  EXPECT_TRUE(FitBatch(&t, 2, true, 0, &line).ok());
}

TEST(BatchFit, CpuBudgetComesFromTheJobsMemory) {
  ::unsetenv("XL_MEMORY_BYTES_PER_NODE");
  absl::StatusOr<double> none = CpuRankBudgetFromEnv();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("resources.memory_bytes_per_node"),
            std::string::npos);
  ::setenv("XL_MEMORY_BYTES_PER_NODE", "8589934592", 1);  // 8 GiB
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  absl::StatusOr<double> b = CpuRankBudgetFromEnv();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, 2147483648.0 - static_cast<double>(kCpuRankOverheadBytes));
  ::unsetenv("XL_MEMORY_BYTES_PER_NODE");
  ::unsetenv("LOCAL_WORLD_SIZE");
}

TrainConfig Small() {
  TrainConfig c;
  c.input_dim = 16;
  c.hidden_dim = 32;
  c.hidden_layers = 2;
  c.classes = 4;
  c.steps = 12;
  c.learning_rate = 3e-3;
  c.metrics_every = 4;
  c.bucket_bytes = 4096;
  return c;
}

// A CPU run with batch_per_rank auto: the batch it reports is the fit, and
// what it allocates is what the planner predicts for that batch.
TEST(BatchFit, CpuRunReportsTheBatchItChoseAndAllocatesThePrediction) {
  TrainConfig c = Small();
  c.batch_auto = true;
  TrainOptions o;
  o.memory_budget_bytes = 2 << 20;  // 2 MiB: a few thousand samples
  auto res = testing::Train(c, 2, "", o);
  for (const auto& st : res.status) ASSERT_TRUE(st.ok()) << st;
  ASSERT_FALSE(res.reports.empty());
  const v1::TrainMetrics& m = res.reports.back();
  const int want = MaxBatchPerRank(c, true, o.memory_budget_bytes);
  EXPECT_EQ(m.batch_per_rank(), want);
  EXPECT_EQ(m.accumulation_steps(), 1);
  EXPECT_EQ(m.global_batch(), 2 * want);
  EXPECT_EQ(m.peak_memory_bytes(),
            planner::MlpMemory(MlpShapeOf(c), want, v1::FP32, true).total_bytes());
  EXPECT_LE(static_cast<double>(m.peak_memory_bytes()),
            o.memory_budget_bytes / 1.1);
  // Per-bucket all-reduce figures, last layer first, adding up.
  ASSERT_GE(m.allreduce_buckets_size(), 2);
  uint64_t bytes = 0;
  for (const auto& b : m.allreduce_buckets()) {
    EXPECT_GT(b.seconds(), 0);
    EXPECT_GT(b.bus_gbps(), 0);
    bytes += b.bytes();
  }
  EXPECT_EQ(bytes, static_cast<uint64_t>(c.ParamCount()) * 4);
}

// A resumed auto run keeps its checkpoint's batch while it fits (so the
// samples go on where they stopped), and fits anew when it does not.
TEST(BatchFit, ResumeKeepsTheCheckpointsBatchWhileItFits) {
  char tmpl[] = "/tmp/xl-batch-fit-test-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  TrainConfig c = Small();
  c.batch_auto = true;
  c.checkpoint_every = 4;
  TrainOptions o;
  o.memory_budget_bytes = 1 << 20;
  o.crash_after_steps = 4;
  auto first = testing::Train(c, 2, dir, o);
  const int b1 = MaxBatchPerRank(c, true, o.memory_budget_bytes);
  ASSERT_EQ(first.reports.back().batch_per_rank(), b1);
  // More memory now: still the checkpoint's batch.
  o.crash_after_steps = 8;
  o.memory_budget_bytes = 2 << 20;
  auto second = testing::Train(c, 2, dir, o);
  ASSERT_FALSE(second.reports.empty());
  EXPECT_EQ(second.reports.back().resumed_from_step(), 4);
  EXPECT_EQ(second.reports.back().batch_per_rank(), b1);
  // Too little for it: fitted anew, smaller.
  o.crash_after_steps = 0;
  o.memory_budget_bytes = 640 << 10;
  auto third = testing::Train(c, 2, dir, o);
  for (const auto& st : third.status) ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(third.reports.back().resumed_from_step(), 8);
  EXPECT_EQ(third.reports.back().batch_per_rank(),
            MaxBatchPerRank(c, true, o.memory_budget_bytes));
  EXPECT_LT(third.reports.back().batch_per_rank(), b1);
  std::filesystem::remove_all(dir);
}

// Two ranks of 3 micro-batches of 4 train like two ranks of 12: the same
// samples, the mean gradient, up to float rounding.
TEST(BatchFit, AccumulatedMicroBatchesTrainLikeTheirBigBatch) {
  TrainConfig big = Small();
  big.batch_per_rank = 12;
  TrainConfig acc = Small();
  acc.batch_per_rank = 4;
  acc.global_batch = 24;
  auto a = testing::Train(big, 2, "");
  auto b = testing::Train(acc, 2, "");
  for (const auto& st : a.status) ASSERT_TRUE(st.ok()) << st;
  for (const auto& st : b.status) ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(b.reports.back().accumulation_steps(), 3);
  EXPECT_EQ(b.reports.back().global_batch(), 24);
  EXPECT_NEAR(a.reports.back().loss(), b.reports.back().loss(), 1e-5);
  double max_diff = 0;
  for (size_t i = 0; i < a.params[0].size(); ++i) {
    max_diff = std::max<double>(
        max_diff, std::fabs(a.params[0][i] - b.params[0][i]));
  }
  EXPECT_LT(max_diff, 1e-5);
  EXPECT_EQ(b.params[0], b.params[1]) << "ranks agree bit for bit";
  // And it is not the same run as one micro-batch of 4 per step.
  TrainConfig small = Small();
  small.batch_per_rank = 4;
  auto s = testing::Train(small, 2, "");
  double diff = 0;
  for (size_t i = 0; i < s.params[0].size(); ++i) {
    diff = std::max<double>(diff, std::fabs(s.params[0][i] - b.params[0][i]));
  }
  EXPECT_GT(diff, 1e-3);
}

}  // namespace
}  // namespace xl::worker
