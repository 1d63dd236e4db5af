// MetricsInterval: what one reporting interval of a trainer becomes, timed
// on a fake clock so every rate is exact.
#include "agent/worker/loop/metrics.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace xl::worker {
namespace {

MetricsInterval::Run TwoRanks(uint64_t params, double peak_flops) {
  MetricsInterval::Run run;
  run.job_id = "7";
  run.world = 2;
  run.batch_per_rank = 64;
  run.grad_bytes = params * 4;
  run.total_steps = 100;
  run.params = params;
  run.peak_flops = peak_flops;
  return run;
}

TEST(MetricsIntervalTest, RatesAreTheIntervalsStepsOverItsTime) {
  FakeClock clock;
  MetricsInterval interval(TwoRanks(1000000, 1e12), &clock);
  for (int i = 0; i < 4; ++i) interval.AddStep(0.001, 0.01, 0.002, 0.013);
  clock.Advance(absl::Seconds(2));
  v1::TrainMetrics m = interval.Finish(4, 0.5f, 1 << 20);
  // 4 steps x 64 samples x 2 ranks in 2 s.
  EXPECT_DOUBLE_EQ(m.samples_per_second(), 256);
  // 6 x params x samples/s over world x peak.
  EXPECT_DOUBLE_EQ(m.mfu(), 6.0 * 1e6 * 256 / (2 * 1e12));
  // 2(n-1)/n x 4 MB x 8 bits over the 2 ms all-reduce of each step.
  EXPECT_DOUBLE_EQ(m.allreduce_bus_gbps(), 1.0 * 4e6 * 8 / 0.002 / 1e9);
  EXPECT_DOUBLE_EQ(m.step_seconds(), 0.013);
  EXPECT_DOUBLE_EQ(m.compute_seconds(), 0.01);
  EXPECT_EQ(m.step(), 4);
  EXPECT_EQ(m.global_batch(), 128);
  EXPECT_EQ(m.time().seconds(), absl::ToUnixSeconds(clock.Now()));

  // The next interval starts where this one ended; a wall-clock step
  // changes no rate.
  interval.AddStep(0.001, 0.01, 0.002, 0.013);
  clock.StepWall(-absl::Hours(3));
  clock.Advance(absl::Milliseconds(500));
  EXPECT_DOUBLE_EQ(interval.Finish(5, 0.4f, 0).samples_per_second(), 256);
}

TEST(MetricsIntervalTest, NoPeakMeansNoMfu) {
  FakeClock clock;
  MetricsInterval interval(TwoRanks(1000000, 0), &clock);
  interval.AddStep(0.001, 0.01, 0.002, 0.013);
  clock.Advance(absl::Seconds(1));
  v1::TrainMetrics m = interval.Finish(1, 0.5f, 0);
  EXPECT_GT(m.samples_per_second(), 0);
  EXPECT_EQ(m.mfu(), 0);
}

}  // namespace
}  // namespace xl::worker
