#include "server/state/ports.h"

namespace xl::state {

int MasterPorts::Allocate(const std::string& address) {
  std::set<int>& used = used_[address];
  int& cursor = cursor_[address];
  if (cursor < base_) cursor = base_;
  for (int i = 0; i < count_; ++i) {
    int p = base_ + (cursor - base_ + i) % count_;
    if (used.count(p) == 0) {
      used.insert(p);
      cursor = p + 1;
      return p;
    }
  }
  return base_;
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

void MasterPorts::Clear() {
  used_.clear();
  cursor_.clear();
}

}  // namespace xl::state
