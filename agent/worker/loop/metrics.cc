// FdMetricsSink: JSON lines to XL_METRICS_FD, human lines to stdout. Called
// from the training thread only.
#include "agent/worker/loop/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/duration.h"
#include "common/proto_text.h"

namespace xl::worker {

std::string HumanMetricsLine(const v1::TrainMetrics& m) {
  std::string line = absl::StrFormat(
      "step %d/%d loss %.4f samples/s %.0f step %.2fms compute %.2fms "
      "allreduce %.2fms (%.2f Gbit/s) data %.2fms mem %s",
      m.step(), m.total_steps(), m.loss(), m.samples_per_second(),
      m.step_seconds() * 1e3, m.compute_seconds() * 1e3,
      m.allreduce_seconds() * 1e3, m.allreduce_bus_gbps(),
      m.data_wait_seconds() * 1e3, HumanBytes(m.peak_memory_bytes()));
  if (m.batch_per_rank() > 0) {
    absl::StrAppend(&line, " batch ", m.batch_per_rank());
    if (m.accumulation_steps() > 1) {
      absl::StrAppend(&line, "x", m.accumulation_steps());
    }
  }
  if (m.mfu() > 0) {
    absl::StrAppend(&line, absl::StrFormat(" MFU %.1f%% (%s)", 100 * m.mfu(),
                                           v1::Precision_Name(m.precision())));
  }
  return line;
}

FdMetricsSink FdMetricsSink::FromEnv() {
  const char* v = std::getenv("XL_METRICS_FD");
  int fd = -1;
  if (v == nullptr || !absl::SimpleAtoi(v, &fd) || fd < 0) fd = -1;
  return FdMetricsSink(fd);
}

void FdMetricsSink::Report(const v1::TrainMetrics& metrics) {
  if (fd_ >= 0) {
    std::string line = MessageToJson(metrics, /*pretty=*/false);
    line.push_back('\n');
    const char* p = line.data();
    size_t n = line.size();
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        break;  // The agent went away; metrics are best effort.
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  std::printf("%s\n", HumanMetricsLine(metrics).c_str());
  std::fflush(stdout);
}

void MetricsInterval::AddStep(double data_s, double compute_s,
                              double allreduce_s, double step_s,
                              const double* bucket_seconds) {
  if (bucket_seconds != nullptr) {
    bucket_seconds_.resize(run_.bucket_bytes.size(), 0.0);
    for (size_t b = 0; b < bucket_seconds_.size(); ++b) {
      bucket_seconds_[b] += bucket_seconds[b];
    }
    ++bucket_steps_;
  }
  data_ += data_s;
  compute_ += compute_s;
  allreduce_ += allreduce_s;
  step_ += step_s;
  ++steps_;
}

v1::TrainMetrics MetricsInterval::Finish(int64_t step, float loss,
                                         uint64_t peak_memory_bytes) {
  const Run& r = run_;
  v1::TrainMetrics m;
  m.set_job_id(r.job_id);
  m.set_attempt(r.attempt);
  m.set_rank(r.rank);
  m.set_step(step);
  m.set_loss(loss);
  const absl::Time now = clock_->MonotonicNow();
  const double wall = absl::ToDoubleSeconds(now - start_);
  const double k = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  const double step_batch =
      static_cast<double>(r.batch_per_rank) * std::max(1, r.accumulation_steps);
  m.set_samples_per_second(
      wall > 0 ? static_cast<double>(steps_) * r.world * step_batch / wall : 0);
  m.set_batch_per_rank(r.batch_per_rank);
  m.set_accumulation_steps(std::max(1, r.accumulation_steps));
  m.set_global_batch(static_cast<int64_t>(step_batch) * r.world);
  m.set_precision(r.precision);
  m.set_peak_tflops(r.peak_flops / 1e12);
  // Bus bandwidth: 2(n-1)/n x bytes over the buckets' own times, bucket by
  // bucket and in all (the step's all-reduce window also holds waits for
  // backward, so it would understate the link).
  const double bus = r.world > 1 ? 2.0 * (r.world - 1) / r.world : 0;
  double bucket_total = 0;
  if (bucket_steps_ > 0) {
    for (size_t b = 0; b < bucket_seconds_.size(); ++b) {
      const double sec = bucket_seconds_[b] / bucket_steps_;
      bucket_total += sec;
      v1::AllReduceBucket* out = m.add_allreduce_buckets();
      out->set_bytes(r.bucket_bytes[b]);
      out->set_seconds(sec);
      if (sec > 0 && bus > 0) {
        out->set_bus_gbps(bus * static_cast<double>(r.bucket_bytes[b]) * 8 /
                          sec / 1e9);
      }
    }
  }
  m.set_step_seconds(step_ / k);
  m.set_compute_seconds(compute_ / k);
  m.set_allreduce_seconds(allreduce_ / k);
  m.set_data_wait_seconds(data_ / k);
  if (bucket_total > 0 && bus > 0) {
    m.set_allreduce_bus_gbps(bus * static_cast<double>(r.grad_bytes) * 8 /
                             bucket_total / 1e9);
  } else if (r.world > 1 && allreduce_ > 0) {
    m.set_allreduce_bus_gbps(bus * static_cast<double>(r.grad_bytes) * 8 * k /
                             allreduce_ / 1e9);
  }
  if (r.peak_flops > 0 && r.world > 0) {
    m.set_mfu(6.0 * static_cast<double>(r.params) * m.samples_per_second() /
              (r.peak_flops * r.world));
  }
  m.set_peak_memory_bytes(peak_memory_bytes);
  *m.mutable_time() = ToProtoTime(clock_->Now());
  m.set_resumed_from_step(r.resumed_from_step);
  m.set_total_steps(r.total_steps);
  start_ = now;
  steps_ = 0;
  data_ = compute_ = allreduce_ = step_ = 0;
  bucket_seconds_.assign(bucket_seconds_.size(), 0.0);
  bucket_steps_ = 0;
  return m;
}

}  // namespace xl::worker
