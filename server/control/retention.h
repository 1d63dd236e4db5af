// Retention: which finished jobs to forget, so the database and the
// scheduler's memory stay bounded. Pure: data in, decisions out.
//   - A job finished longer than `max_age` ago goes entirely (row, events,
//     logs, metrics); its idempotency key is forgotten with it.
//   - While the output of finished jobs adds up to more than
//     `max_log_bytes`, the output of the oldest finished jobs goes first (the
//     jobs themselves stay).
// Output of jobs that still run is never pruned.
#ifndef XL_SERVER_CONTROL_RETENTION_H_
#define XL_SERVER_CONTROL_RETENTION_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace xl::control {

struct RetentionPolicy {
  absl::Duration max_age = absl::Hours(24 * 30);
  int64_t max_log_bytes = int64_t{10} << 30;
};

struct FinishedJob {
  int64_t id = 0;
  absl::Time end_time;  // wall clock, as stored
  int64_t log_bytes = 0;
};

struct Prunes {
  std::vector<int64_t> delete_jobs;
  std::vector<int64_t> delete_logs;
};

// `finished` in any order; `running_log_bytes` is output of jobs not yet
// finished (counted, never pruned).
Prunes ChoosePrunes(std::vector<FinishedJob> finished, int64_t running_log_bytes,
                    absl::Time now_wall, const RetentionPolicy& policy);

}  // namespace xl::control

#endif  // XL_SERVER_CONTROL_RETENTION_H_
