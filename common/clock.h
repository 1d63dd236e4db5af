// Clock: the only source of time for code that decides anything. Production
// code uses RealClock; tests inject FakeClock and advance it. Both are safe
// to share between threads.
//
// Two readings: Now() is the wall clock, for what people read and what is
// stored (timestamps); it may step (NTP, an operator). MonotonicNow() never
// steps: use it for anything that measures elapsed time (liveness, leases,
// time limits, timeouts). Its absl::Time has an arbitrary epoch: only
// differences between two readings mean something; never show or store it.
#ifndef XL_COMMON_CLOCK_H_
#define XL_COMMON_CLOCK_H_

#include <time.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace xl {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // CLOCK_MONOTONIC by default.
  virtual absl::Time MonotonicNow() const {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return absl::UnixEpoch() + absl::DurationFromTimespec(ts);
  }
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // Returns a process-wide instance; never destroyed.
  static Clock* Get() {
    static RealClock* clock = new RealClock();
    return clock;
  }
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_(start), mono_(absl::UnixEpoch() + absl::Hours(1000)) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  absl::Time MonotonicNow() const override {
    absl::MutexLock lock(&mu_);
    return mono_;
  }
  // Time passes: both readings move.
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
    mono_ += d;
  }
  // The wall clock is set (an NTP step): only Now() moves, either way.
  void StepWall(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  absl::Time mono_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xl

#endif  // XL_COMMON_CLOCK_H_
