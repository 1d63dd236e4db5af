// The sort phase of a pass: the order jobs are considered in, and the
// order earlier reservations take hold in. Private to the scheduling core;
// pure.
#ifndef XL_SERVER_SCHEDULER_PASS_QUEUE_ORDER_H_
#define XL_SERVER_SCHEDULER_PASS_QUEUE_ORDER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/scheduler/placement.h"

namespace xl::scheduler {

// Returns the indices of `queue` in the order a pass considers them: the
// highest rank (effective priority, else priority) first, then the lowest
// submit_seq; equal keys keep the queue's order.
std::vector<int32_t> QueueOrder(const std::vector<JobRequest>& queue);

// Reservations an earlier pass made, in the order they apply: a hold
// applies from the first job ranked after its own on (a job that outranks
// it may still take its nodes). `holds` must outlive the object.
class HoldOrder {
 public:
  explicit HoldOrder(const std::vector<Reservation>& holds);

  // Returns the next hold ranked before a job of `rank` and `submit_seq`
  // and moves past it; null when there is none (left).
  const Reservation* NextBefore(double rank, int64_t submit_seq);
  // Returns the next hold whatever its rank; null when none is left.
  const Reservation* Next();

 private:
  std::vector<const Reservation*> holds_;
  size_t next_ = 0;
};

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PASS_QUEUE_ORDER_H_
