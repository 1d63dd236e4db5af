// Lease: the agent's side of the scheduler's heartbeat timeout. The scheduler
// counts the node alive for `duration` after each heartbeat it receives; the
// agent lets its ranks run until the send time of the last acknowledged
// heartbeat (or Register) plus `duration`, which is never later than the
// scheduler's own deadline. Pure bookkeeping on monotonic readings passed in;
// not thread-safe (the session guards it with its mutex).
#ifndef XL_AGENT_SESSION_LEASE_H_
#define XL_AGENT_SESSION_LEASE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

#include "absl/time/time.h"

namespace xl::agent {

class Lease {
 public:
  // Heartbeats remembered for their acknowledgement; older ones are forgotten
  // (their late acknowledgement then renews nothing, which only shortens the
  // lease).
  static constexpr size_t kMaxPending = 1024;

  // A RegisterAck answered the Register sent at `register_sent`. A positive
  // `duration` grants a lease valid until register_sent + duration; zero or
  // less (a scheduler from before leases) means no lease, which never
  // expires.
  void Grant(absl::Time register_sent, absl::Duration duration);

  // A new connection begins: its heartbeats count from seq 1 again and those
  // of the previous one can no longer be acknowledged. A lease held runs on.
  void NewConnection();

  // Heartbeat `seq` of the current connection was sent at `sent`. Remembered
  // only while a lease is held.
  void HeartbeatSent(uint64_t seq, absl::Time sent);

  // HeartbeatAck `seq`: renews the lease from that heartbeat's send time.
  // Returns false when no lease is held or `seq` is unknown.
  bool HeartbeatAcked(uint64_t seq);

  // True when a lease is held and has run out at `now`.
  bool ExpiredAt(absl::Time now) const { return now >= valid_until(); }

  // Gives the lease up (it expired): nothing expires again until the next
  // Grant.
  void Release();

  bool held() const { return duration_ > absl::ZeroDuration(); }
  // When the lease runs out; InfiniteFuture when none is held.
  absl::Time valid_until() const {
    return held() ? renewed_from_ + duration_ : absl::InfiniteFuture();
  }
  // The send time of the last acknowledged heartbeat or Register.
  absl::Time renewed_from() const { return renewed_from_; }
  absl::Duration duration() const { return duration_; }

 private:
  absl::Duration duration_ = absl::ZeroDuration();
  absl::Time renewed_from_ = absl::InfinitePast();
  // (seq, send time) of heartbeats not yet acknowledged, oldest first.
  std::deque<std::pair<uint64_t, absl::Time>> pending_;
};

}  // namespace xl::agent

#endif  // XL_AGENT_SESSION_LEASE_H_
