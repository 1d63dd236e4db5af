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

}  // namespace xl::worker
