#include "agent/monotonic_wait.h"

#include <chrono>

namespace xl::agent {

bool RelativeSleeper::SleepFor(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  if (d > absl::ZeroDuration()) {
    // Relative, so measured on the steady clock; never an absolute wall
    // time.
    cv_.wait_for(lock, absl::ToChronoNanoseconds(d),
                 [this] { return cancelled_; });
  }
  return !cancelled_;
}

void RelativeSleeper::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  cv_.notify_all();
}

bool AwaitUntil(absl::Mutex* mu, const absl::Condition& cond,
                const uint64_t* ticks, const Clock& clock,
                absl::Time deadline) {
  while (!cond.Eval()) {
    const absl::Duration left = deadline - clock.MonotonicNow();
    if (left <= absl::ZeroDuration()) return false;
    const uint64_t seen = *ticks;
    auto woken = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return *ticks != seen || cond.Eval();
    };
    // Ends on time unless the wall clock steps; then the next tick ends it.
    mu->AwaitWithTimeout(absl::Condition(&woken), left);
  }
  return true;
}

}  // namespace xl::agent
