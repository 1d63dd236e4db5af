#include "server/state/ports.h"

namespace xl::state {

MasterPorts::MasterPorts(int base, int count, uint64_t seed)
    : base_(base),
      count_(count < 1 ? 1 : count),
      random_(seed != 0 ? seed : std::random_device()()) {}

int MasterPorts::Allocate(const std::string& address) {
  std::set<int>& used = used_[address];
  std::uniform_int_distribution<int> pick(0, count_ - 1);
  // Random probes find a free port at once while few are taken; past that,
  // the free ports are counted and one of them drawn.
  for (int i = 0; i < 16; ++i) {
    const int p = base_ + pick(random_);
    if (used.insert(p).second) return p;
  }
  const int free = count_ - static_cast<int>(used.size());
  if (free <= 0) return base_ + pick(random_);
  int n = std::uniform_int_distribution<int>(0, free - 1)(random_);
  for (int p = base_; p < base_ + count_; ++p) {
    if (used.count(p) != 0) continue;
    if (n-- == 0) {
      used.insert(p);
      return p;
    }
  }
  return base_;  // not reached
}

void MasterPorts::Reserve(const std::string& address, int port) {
  used_[address].insert(port);
}

void MasterPorts::Release(const std::string& address, int port) {
  auto it = used_.find(address);
  if (it == used_.end()) return;
  it->second.erase(port);
  if (it->second.empty()) used_.erase(it);
}

bool MasterPorts::Taken(const std::string& address, int port) const {
  auto it = used_.find(address);
  return it != used_.end() && it->second.count(port) > 0;
}

void MasterPorts::Clear() { used_.clear(); }

}  // namespace xl::state
