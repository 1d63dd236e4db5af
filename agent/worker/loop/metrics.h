// Where xl-train's rank 0 sends TrainMetrics: FdMetricsSink writes one JSON
// line per report (protobuf's JSON mapping) to the file descriptor named by
// XL_METRICS_FD, which the agent reads, and a human progress line to stdout.
// Sinks are called from the training thread only; RecordingMetricsSink is
// thread-safe for tests that read it from another thread.
#ifndef XL_AGENT_WORKER_LOOP_METRICS_H_
#define XL_AGENT_WORKER_LOOP_METRICS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "xl/v1/job.pb.h"

namespace xl::worker {

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void Report(const v1::TrainMetrics& metrics) = 0;
};

// The reporting intervals of one trainer run (CPU or CUDA): each step's time
// split is added, and at the end of an interval it becomes a TrainMetrics.
// Not thread-safe.
class MetricsInterval {
 public:
  // What stays the same for the whole run.
  struct Run {
    std::string job_id;
    int attempt = 0;
    int rank = 0;
    int world = 1;
    int batch_per_rank = 0;  // the micro-batch when accumulating
    int accumulation_steps = 1;
    uint64_t grad_bytes = 0;  // all-reduced per step
    // Each gradient bucket's bytes, in all-reduce order; AddStep's
    // bucket_seconds follow it.
    std::vector<uint64_t> bucket_bytes;
    int64_t resumed_from_step = 0;
    int64_t total_steps = 0;
    // For MFU: the model's parameters and one device's peak FLOP/s in the
    // precision used (0: unknown, no MFU).
    uint64_t params = 0;
    double peak_flops = 0;
    v1::Precision precision = v1::FP32;
  };

  // Intervals are timed on `clock`'s monotonic reading (a wall-clock step
  // changes no rate); the points' time is its wall reading.
  explicit MetricsInterval(Run run, const Clock* clock = RealClock::Get())
      : run_(std::move(run)), clock_(clock), start_(clock->MonotonicNow()) {}
  // bucket_seconds: each bucket's own all-reduce time this step
  // (Run::bucket_bytes.size() values), or null when not measured.
  void AddStep(double data_s, double compute_s, double allreduce_s,
               double step_s, const double* bucket_seconds = nullptr);
  // The interval's metrics after `step` completed steps; starts the next
  // interval.
  v1::TrainMetrics Finish(int64_t step, float loss,
                          uint64_t peak_memory_bytes);

 private:
  const Run run_;
  const Clock* const clock_;
  absl::Time start_;
  int64_t steps_ = 0;
  double data_ = 0, compute_ = 0, allreduce_ = 0, step_ = 0;
  std::vector<double> bucket_seconds_;  // summed over the interval
  int64_t bucket_steps_ = 0;
};

// "step 20/100 loss 0.4321 samples/s 12345 step 1.2ms compute 0.9ms
// allreduce 0.2ms (3.1 Gbit/s) data 0.0ms mem 12.0 MiB".
std::string HumanMetricsLine(const v1::TrainMetrics& metrics);

class FdMetricsSink : public MetricsSink {
 public:
  // fd < 0: human lines on stdout only. Does not own the fd.
  explicit FdMetricsSink(int fd) : fd_(fd) {}
  // The fd of XL_METRICS_FD, or -1 when unset or not a number.
  static FdMetricsSink FromEnv();
  void Report(const v1::TrainMetrics& metrics) override;

 private:
  int fd_;
};

// Keeps every report; for tests.
class RecordingMetricsSink : public MetricsSink {
 public:
  void Report(const v1::TrainMetrics& metrics) override {
    absl::MutexLock lock(&mu_);
    reports_.push_back(metrics);
  }
  std::vector<v1::TrainMetrics> reports() const {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::TrainMetrics> reports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_LOOP_METRICS_H_
