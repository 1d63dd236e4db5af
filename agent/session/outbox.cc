#include "agent/session/outbox.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace xl::agent {

void Outbox::PushStatus(const v1::RankStatus& status) {
  v1::AgentMessage message;
  *message.mutable_rank_status() = status;
  queue_.push_back(std::move(message));
}

void Outbox::PushMetrics(v1::TrainMetrics metrics) {
  if (metrics_ >= max_metrics_) {
    // The oldest point goes: the curve keeps its latest.
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->has_metrics()) {
        queue_.erase(it);
        --metrics_;
        ++dropped_metrics_;
        break;
      }
    }
  }
  v1::AgentMessage message;
  *message.mutable_metrics() = std::move(metrics);
  queue_.push_back(std::move(message));
  ++metrics_;
}

bool Outbox::PushLog(v1::LogChunk chunk) {
  log_bytes_ += chunk.data().size();
  v1::AgentMessage message;
  *message.mutable_log() = std::move(chunk);
  queue_.push_back(std::move(message));
  bool dropped = false;
  // Oldest first; statuses are never dropped.
  for (auto it = queue_.begin();
       log_bytes_ > max_log_bytes_ && it != queue_.end();) {
    if (!it->has_log()) {
      ++it;
      continue;
    }
    const v1::LogChunk& old = it->log();
    dropped_[StreamKey(old.job_id(), old.attempt(), old.rank(),
                       old.stream())] += old.data().size();
    dropped_total_ += old.data().size();
    log_bytes_ -= old.data().size();
    it = queue_.erase(it);
    dropped = true;
  }
  return dropped;
}

void Outbox::DropStatuses() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    it = it->has_rank_status() ? queue_.erase(it) : it + 1;
  }
}

bool Outbox::Pop(v1::AgentMessage* message) {
  message->Clear();
  if (!dropped_.empty()) {
    auto it = dropped_.begin();
    v1::LogChunk* marker = message->mutable_log();
    marker->set_job_id(std::get<0>(it->first));
    marker->set_attempt(std::get<1>(it->first));
    marker->set_rank(std::get<2>(it->first));
    marker->set_stream(static_cast<v1::LogStream>(std::get<3>(it->first)));
    marker->set_data(absl::StrCat(
        "[xl-agent: ", it->second,
        " bytes of this output were dropped: the agent's log buffer was "
        "full while the scheduler was unreachable or slow]\n"));
    dropped_.erase(it);
    return true;
  }
  if (queue_.empty()) return false;
  *message = std::move(queue_.front());
  queue_.pop_front();
  if (message->has_log()) log_bytes_ -= message->log().data().size();
  if (message->has_metrics()) --metrics_;
  return true;
}

void Outbox::PushFront(v1::AgentMessage message) {
  if (message.has_log()) log_bytes_ += message.log().data().size();
  if (message.has_metrics()) ++metrics_;
  queue_.push_front(std::move(message));
}

}  // namespace xl::agent
