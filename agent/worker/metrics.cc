// FdMetricsSink: JSON lines to XL_METRICS_FD, human lines to stdout. Called
// from the training thread only.
#include "agent/worker/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/duration.h"
#include "common/proto_text.h"

namespace xl::worker {

std::string HumanMetricsLine(const v1::TrainMetrics& m) {
  return absl::StrFormat(
      "step %d/%d loss %.4f samples/s %.0f step %.2fms compute %.2fms "
      "allreduce %.2fms (%.2f Gbit/s) data %.2fms mem %s",
      m.step(), m.total_steps(), m.loss(), m.samples_per_second(),
      m.step_seconds() * 1e3, m.compute_seconds() * 1e3,
      m.allreduce_seconds() * 1e3, m.allreduce_bus_gbps(),
      m.data_wait_seconds() * 1e3, HumanBytes(m.peak_memory_bytes()));
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
                              double allreduce_s, double step_s) {
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
  const absl::Time now = absl::Now();
  const double wall = absl::ToDoubleSeconds(now - start_);
  const double k = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  m.set_samples_per_second(
      wall > 0 ? static_cast<double>(steps_) * r.world * r.batch_per_rank / wall
               : 0);
  m.set_step_seconds(step_ / k);
  m.set_compute_seconds(compute_ / k);
  m.set_allreduce_seconds(allreduce_ / k);
  m.set_data_wait_seconds(data_ / k);
  if (r.world > 1 && allreduce_ > 0) {
    m.set_allreduce_bus_gbps(2.0 * (r.world - 1) / r.world *
                             static_cast<double>(r.grad_bytes) * 8 * k /
                             allreduce_ / 1e9);
  }
  if (r.peak_flops > 0 && r.world > 0) {
    m.set_mfu(6.0 * static_cast<double>(r.params) * m.samples_per_second() /
              (r.peak_flops * r.world));
  }
  m.set_peak_memory_bytes(peak_memory_bytes);
  *m.mutable_time() = ToProtoTime(now);
  m.set_resumed_from_step(r.resumed_from_step);
  m.set_total_steps(r.total_steps);
  start_ = now;
  steps_ = 0;
  data_ = compute_ = allreduce_ = step_ = 0;
  return m;
}

}  // namespace xl::worker
