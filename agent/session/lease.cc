#include "agent/session/lease.h"

#include <algorithm>

namespace xl::agent {

void Lease::Grant(absl::Time register_sent, absl::Duration duration) {
  pending_.clear();
  if (duration <= absl::ZeroDuration()) {
    Release();
    return;
  }
  duration_ = duration;
  renewed_from_ = register_sent;
}

void Lease::NewConnection() { pending_.clear(); }

void Lease::HeartbeatSent(uint64_t seq, absl::Time sent) {
  if (!held()) return;
  pending_.emplace_back(seq, sent);
  if (pending_.size() > kMaxPending) pending_.pop_front();
}

bool Lease::HeartbeatAcked(uint64_t seq) {
  if (!held()) return false;
  // Acknowledgements come in order; one for a later heartbeat also covers
  // the earlier ones, whose own acknowledgements are then not needed.
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [seq](const auto& p) { return p.first == seq; });
  if (it == pending_.end()) return false;
  renewed_from_ = std::max(renewed_from_, it->second);
  pending_.erase(pending_.begin(), it + 1);
  return true;
}

void Lease::Release() {
  duration_ = absl::ZeroDuration();
  renewed_from_ = absl::InfinitePast();
  pending_.clear();
}

}  // namespace xl::agent
