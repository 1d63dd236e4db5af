// StreamLimits: how many server streams (WatchJob, StreamLogs) may be open
// at once, in all and per user, so that idle or slow readers cannot grow
// the scheduler's memory without bound: each open stream holds a reactor,
// a listener and at most one page of items. Beyond a limit the stream ends
// at once with RESOURCE_EXHAUSTED. Thread-safe.
#ifndef XL_SERVER_SERVICE_STREAM_LIMITS_H_
#define XL_SERVER_SERVICE_STREAM_LIMITS_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace xl::service {

class StreamLimits {
 public:
  // 0: no limit.
  StreamLimits(int max_total, int max_per_user)
      : max_total_(max_total), max_per_user_(max_per_user) {}

  // Takes a slot for one of `user`'s streams, or says which limit is hit.
  absl::Status Acquire(const std::string& user) {
    absl::MutexLock lock(&mu_);
    if (max_total_ > 0 && total_ >= max_total_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the scheduler has ", total_, " streams open, its limit "
          "(--max-streams ", max_total_, "); retry later, or poll with "
          "'xlctl get' instead of following"));
    }
    int& mine = per_user_[user];
    if (max_per_user_ > 0 && mine >= max_per_user_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "user ", user, " has ", mine, " streams open, the most one user "
          "may (--max-streams-per-user ", max_per_user_,
          "); close some (xlctl watch/logs -f) and retry"));
    }
    ++mine;
    ++total_;
    return absl::OkStatus();
  }

  void Release(const std::string& user) {
    absl::MutexLock lock(&mu_);
    auto it = per_user_.find(user);
    if (it == per_user_.end()) return;
    --total_;
    if (--it->second <= 0) per_user_.erase(it);
  }

  int open() const {
    absl::MutexLock lock(&mu_);
    return total_;
  }

 private:
  const int max_total_;
  const int max_per_user_;
  mutable absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> per_user_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xl::service

#endif  // XL_SERVER_SERVICE_STREAM_LIMITS_H_
