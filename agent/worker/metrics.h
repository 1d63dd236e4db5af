// Where xl-train's rank 0 sends TrainMetrics: FdMetricsSink writes one JSON
// line per report (protobuf's JSON mapping) to the file descriptor named by
// XL_METRICS_FD, which the agent reads, and a human progress line to stdout.
// Sinks are called from the training thread only; RecordingMetricsSink is
// thread-safe for tests that read it from another thread.
#ifndef XL_AGENT_WORKER_METRICS_H_
#define XL_AGENT_WORKER_METRICS_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "xl/v1/job.pb.h"

namespace xl::worker {

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void Report(const v1::TrainMetrics& metrics) = 0;
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

#endif  // XL_AGENT_WORKER_METRICS_H_
