// The queue of messages the session sends to the scheduler: rank statuses
// and log chunks in the order they happened. Log bytes are bounded; when the
// bound is passed the oldest chunks are dropped and, per rank and stream, one
// marker chunk saying how much was lost is sent in their place. Training
// metrics (points of a curve) are bounded by count: past it the oldest go.
// Statuses are few (two per rank) and a Register's snapshot replaces them.
// Not thread-safe: the session guards it with its own mutex.
#ifndef XL_AGENT_SESSION_OUTBOX_H_
#define XL_AGENT_SESSION_OUTBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>

#include "xl/v1/agent.pb.h"

namespace xl::agent {

class Outbox {
 public:
  explicit Outbox(size_t max_log_bytes, size_t max_metrics = 1024)
      : max_log_bytes_(max_log_bytes), max_metrics_(max_metrics) {}

  void PushStatus(const v1::RankStatus& status);
  void PushMetrics(v1::TrainMetrics metrics);
  // Returns true when older chunks had to be dropped to make room.
  bool PushLog(v1::LogChunk chunk);
  // Removes the queued statuses: a Register's snapshot carries them.
  void DropStatuses();
  // Takes the next message: markers for dropped output first, then the queue.
  // False when there is nothing to send.
  bool Pop(v1::AgentMessage* message);
  // Puts back a message whose write failed, to be sent first next time.
  void PushFront(v1::AgentMessage message);

  bool empty() const { return queue_.empty() && dropped_.empty(); }
  size_t log_bytes() const { return log_bytes_; }
  uint64_t dropped_bytes_total() const { return dropped_total_; }
  uint64_t dropped_metrics_total() const { return dropped_metrics_; }

 private:
  using StreamKey = std::tuple<std::string, int, int, int>;

  const size_t max_log_bytes_;
  const size_t max_metrics_;
  size_t metrics_ = 0;  // queued
  uint64_t dropped_metrics_ = 0;
  std::deque<v1::AgentMessage> queue_;
  size_t log_bytes_ = 0;
  // Bytes dropped per (job, attempt, rank, stream) not yet announced.
  std::map<StreamKey, uint64_t> dropped_;
  uint64_t dropped_total_ = 0;
};

}  // namespace xl::agent

#endif  // XL_AGENT_SESSION_OUTBOX_H_
