// MetricsInterval: what one reporting interval of a trainer becomes.
#include "agent/worker/metrics.h"

#include "absl/time/clock.h"
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

TEST(MetricsIntervalTest, MfuIsModelFlopsOverThePeakOfEveryDevice) {
  MetricsInterval interval(TwoRanks(1000000, 1e12));
  for (int i = 0; i < 4; ++i) interval.AddStep(0.001, 0.01, 0.002, 0.013);
  absl::SleepFor(absl::Milliseconds(50));
  v1::TrainMetrics m = interval.Finish(4, 0.5f, 1 << 20);
  ASSERT_GT(m.samples_per_second(), 0);
  // 6 x params x samples/s over world x peak.
  EXPECT_DOUBLE_EQ(m.mfu(), 6.0 * 1e6 * m.samples_per_second() / (2 * 1e12));
  EXPECT_GT(m.allreduce_bus_gbps(), 0);
  EXPECT_EQ(m.step(), 4);
}

TEST(MetricsIntervalTest, NoPeakMeansNoMfu) {
  MetricsInterval interval(TwoRanks(1000000, 0));
  interval.AddStep(0.001, 0.01, 0.002, 0.013);
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(interval.Finish(1, 0.5f, 0).mfu(), 0);
}

}  // namespace
}  // namespace xl::worker
