// SubmitQuota: the per-user limits on submitting, so that one user (or one
// runaway script) cannot fill the queue or the scheduler's disk: at most
// `max_pending` PENDING jobs per user, and a token bucket of `rate` submits
// per second with `burst` in reserve. Part of the in-memory model: no
// threads, no I/O; times come from the caller's monotonic clock.
// Thread-compatible (the Controller calls it under its mutex).
#ifndef XL_SERVER_STATE_SUBMIT_QUOTA_H_
#define XL_SERVER_STATE_SUBMIT_QUOTA_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace xl::state {

struct SubmitLimits {
  // PENDING jobs one user may have; 0: no limit.
  int max_pending = 10000;
  // Sustained submits per second per user; 0: no limit.
  double rate = 100;
  // Submits a user may make at once before the rate applies (at least 1).
  double burst = 1000;
  // Bytes of the specs of one user's PENDING jobs (their environment and
  // arguments mostly); 0: no limit. 10,000 specs of 1 MiB would be 10 GiB
  // of the scheduler's memory and database.
  int64_t max_pending_bytes = int64_t{256} << 20;
};

class SubmitQuota {
 public:
  explicit SubmitQuota(SubmitLimits limits) : limits_(limits) {}

  // OK and one submit taken from `user`'s bucket; or RESOURCE_EXHAUSTED
  // naming the limit, the user's numbers and what to do (then nothing is
  // taken). `pending` is how many PENDING jobs the user has now, counting
  // submits not yet committed.
  absl::Status Admit(const std::string& user, int64_t pending,
                     absl::Time now);

  // OK when `user`, whose pending jobs' specs hold `pending_bytes`, may
  // add a spec of `spec_bytes`; RESOURCE_EXHAUSTED naming the limit and
  // the numbers otherwise. Takes nothing (Admit does).
  absl::Status AdmitBytes(const std::string& user, int64_t pending_bytes,
                          int64_t spec_bytes) const;

  const SubmitLimits& limits() const { return limits_; }
  // Buckets held (full ones are dropped once there are many).
  size_t tracked_users() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time last;
  };
  void Refill(Bucket* b, absl::Time now) const;

  SubmitLimits limits_;
  absl::flat_hash_map<std::string, Bucket> buckets_;
};

}  // namespace xl::state

#endif  // XL_SERVER_STATE_SUBMIT_QUOTA_H_
