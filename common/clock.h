// Clock: the only source of time for code that decides anything. Production
// code uses RealClock; tests inject FakeClock and advance it. Both are safe
// to share between threads.
#ifndef XL_COMMON_CLOCK_H_
#define XL_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace xl {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
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
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xl

#endif  // XL_COMMON_CLOCK_H_
