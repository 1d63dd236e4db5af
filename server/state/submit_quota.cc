#include "server/state/submit_quota.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace xl::state {
namespace {

// Above this many users' buckets, full (idle) ones are dropped: a full
// bucket and a missing one mean the same.
constexpr size_t kPruneAbove = 10000;

}  // namespace

void SubmitQuota::Refill(Bucket* b, absl::Time now) const {
  // A monotonic clock never goes back; a fake one in a test might.
  const double elapsed =
      std::max(0.0, absl::ToDoubleSeconds(now - b->last));
  b->tokens = std::min(std::max(limits_.burst, 1.0),
                       b->tokens + elapsed * limits_.rate);
  b->last = now;
}

absl::Status SubmitQuota::AdmitBytes(const std::string& user,
                                     int64_t pending_bytes,
                                     int64_t spec_bytes) const {
  if (limits_.max_pending_bytes <= 0 ||
      pending_bytes + spec_bytes <= limits_.max_pending_bytes) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "user ", user, "'s pending jobs hold ", pending_bytes,
      " bytes of specs and this one ", spec_bytes, ", more than one user may ",
      "hold (--max-pending-bytes-per-user ", limits_.max_pending_bytes,
      "); wait for some to start or cancel some, and keep large data in "
      "files rather than in env or command"));
}

absl::Status SubmitQuota::Admit(const std::string& user, int64_t pending,
                                absl::Time now) {
  if (limits_.max_pending > 0 && pending >= limits_.max_pending) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "user ", user, " has ", pending, " pending jobs, the most one user "
        "may have (--max-pending-per-user ", limits_.max_pending,
        "); wait for some to start or cancel some, then submit again"));
  }
  if (limits_.rate <= 0) return absl::OkStatus();
  const double cap = std::max(limits_.burst, 1.0);
  auto [it, inserted] = buckets_.try_emplace(user);
  Bucket& b = it->second;
  if (inserted) {
    b.tokens = cap;
    b.last = now;
  } else {
    Refill(&b, now);
  }
  if (b.tokens < 1.0) {
    const double wait_s = (1.0 - b.tokens) / limits_.rate;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "user %s submits faster than %g jobs/s (burst %g; "
        "--submit-rate-per-user); retry in %.2fs, or submit fewer, larger "
        "jobs",
        user, limits_.rate, cap, std::max(wait_s, 0.01)));
  }
  b.tokens -= 1.0;
  if (buckets_.size() > kPruneAbove) {
    for (auto i = buckets_.begin(); i != buckets_.end();) {
      Refill(&i->second, now);
      if (i->second.tokens >= cap) {
        buckets_.erase(i++);
      } else {
        ++i;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace xl::state
