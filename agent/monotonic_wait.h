// Timed waits that a wall-clock step neither stretches nor cuts short.
// Abseil 20220623's timed waits (Mutex::AwaitWithTimeout, AwaitWithDeadline,
// CondVar::WaitWithTimeout) sleep until an absolute CLOCK_REALTIME instant:
// set the clock back by D during one and it lasts D longer, however short it
// was meant to be. Here a deadline is read on a Clock's MonotonicNow(), and a
// wait also ends whenever a tick counter moves; a thread bumps it after each
// relative sleep (RelativeSleeper, on CLOCK_MONOTONIC).
#ifndef XL_AGENT_MONOTONIC_WAIT_H_
#define XL_AGENT_MONOTONIC_WAIT_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace xl::agent {

// How often the agent's tickers bump their counters: the most a wall-clock
// step can delay an AwaitUntil() past its deadline.
inline constexpr absl::Duration kTickPeriod = absl::Milliseconds(50);

// Sleeps for relative durations measured on CLOCK_MONOTONIC
// (std::condition_variable::wait_for, which libstdc++ runs on the steady
// clock with pthread_cond_clockwait), until cancelled. Safe from any thread.
class RelativeSleeper {
 public:
  // Sleeps for `d` (not at all when it is not positive). Returns false, at
  // once, when Cancel() was called before or during the sleep.
  bool SleepFor(absl::Duration d);
  // Ends the sleep under way and every later one.
  void Cancel();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;  // Guarded by mu_.
};

// With `*mu` held: waits until `cond` holds (returns true) or the `clock`'s
// MonotonicNow() reaches `deadline` (returns false); `*mu` is held again on
// return. `*ticks` is guarded by `*mu`, and some thread must bump it at least
// every kTickPeriod of real time while anyone waits: each change ends
// Abseil's own timed wait, so that a wall-clock step delays the return by one
// tick at most, and an injected clock that moved is read again.
bool AwaitUntil(absl::Mutex* mu, const absl::Condition& cond,
                const uint64_t* ticks, const Clock& clock, absl::Time deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

}  // namespace xl::agent

#endif  // XL_AGENT_MONOTONIC_WAIT_H_
