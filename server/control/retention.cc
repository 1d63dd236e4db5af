#include "server/control/retention.h"

#include <algorithm>

namespace xl::control {

Prunes ChoosePrunes(std::vector<FinishedJob> finished, int64_t running_log_bytes,
                    absl::Time now_wall, const RetentionPolicy& policy) {
  std::sort(finished.begin(), finished.end(),
            [](const FinishedJob& a, const FinishedJob& b) {
              if (a.end_time != b.end_time) return a.end_time < b.end_time;
              return a.id < b.id;
            });
  Prunes out;
  int64_t total = running_log_bytes;
  for (const auto& j : finished) total += j.log_bytes;
  for (const auto& j : finished) {
    // A wall-clock step backwards makes jobs look younger, never older; a
    // step forward may prune early, which costs only old output.
    if (now_wall - j.end_time > policy.max_age) {
      out.delete_jobs.push_back(j.id);
      total -= j.log_bytes;
    } else if (total > policy.max_log_bytes && j.log_bytes > 0) {
      out.delete_logs.push_back(j.id);
      total -= j.log_bytes;
    }
  }
  return out;
}

}  // namespace xl::control
