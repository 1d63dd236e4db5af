// MasterPorts: the MASTER_PORT handed to each running attempt, unique per
// master address within [base, base + count). In-memory model: no threads,
// no I/O; thread-compatible (the controller's mutex guards it).
#ifndef XL_SERVER_STATE_PORTS_H_
#define XL_SERVER_STATE_PORTS_H_

#include <map>
#include <set>
#include <string>

namespace xl::state {

class MasterPorts {
 public:
  MasterPorts(int base, int count) : base_(base), count_(count) {}

  // A free port of `address`, taken; the next search starts after it so a
  // port just released is not reused at once. When all are taken: base.
  int Allocate(const std::string& address);
  // Marks `port` taken (recovery of a running attempt).
  void Reserve(const std::string& address, int port);
  void Release(const std::string& address, int port);
  void Clear();

 private:
  const int base_;
  const int count_;
  std::map<std::string, std::set<int>> used_;
  std::map<std::string, int> cursor_;
};

}  // namespace xl::state

#endif  // XL_SERVER_STATE_PORTS_H_
