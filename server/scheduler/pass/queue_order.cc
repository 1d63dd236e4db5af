#include "server/scheduler/pass/queue_order.h"

#include <algorithm>
#include <numeric>

namespace xl::scheduler {

std::vector<int32_t> QueueOrder(const std::vector<JobRequest>& queue) {
  std::vector<int32_t> order(queue.size());
  std::iota(order.begin(), order.end(), 0);
  // Equal keys keep the queue's order.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const double ra = RankOf(queue[a]), rb = RankOf(queue[b]);
    if (ra != rb) return ra > rb;
    if (queue[a].submit_seq != queue[b].submit_seq) {
      return queue[a].submit_seq < queue[b].submit_seq;
    }
    return a < b;
  });
  return order;
}

HoldOrder::HoldOrder(const std::vector<Reservation>& holds) {
  for (const Reservation& r : holds) holds_.push_back(&r);
  std::stable_sort(holds_.begin(), holds_.end(),
                   [](const Reservation* a, const Reservation* b) {
                     return a->priority != b->priority
                                ? a->priority > b->priority
                                : a->submit_seq < b->submit_seq;
                   });
}

const Reservation* HoldOrder::NextBefore(double rank, int64_t submit_seq) {
  if (next_ >= holds_.size()) return nullptr;
  const Reservation* h = holds_[next_];
  if (h->priority > rank ||
      (h->priority == rank && h->submit_seq < submit_seq)) {
    ++next_;
    return h;
  }
  return nullptr;
}

const Reservation* HoldOrder::Next() {
  return next_ < holds_.size() ? holds_[next_++] : nullptr;
}

}  // namespace xl::scheduler
