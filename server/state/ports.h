// MasterPorts: the MASTER_PORT handed to each running attempt, unique per
// master address within [base, base + count), drawn at random among the
// free ones: a co-tenant cannot know the next job's port ahead and take it
// first (security review F5). In-memory model: no threads, no I/O;
// thread-compatible (the controller's mutex guards it).
#ifndef XL_SERVER_STATE_PORTS_H_
#define XL_SERVER_STATE_PORTS_H_

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>

namespace xl::state {

class MasterPorts {
 public:
  // `seed` 0: from std::random_device.
  MasterPorts(int base, int count, uint64_t seed = 0);

  // A free port of `address`, taken, at random. When all are taken: one of
  // them at random (the job then fails to bind and says so).
  int Allocate(const std::string& address);
  // Marks `port` taken (recovery of a running attempt).
  void Reserve(const std::string& address, int port);
  void Release(const std::string& address, int port);
  bool Taken(const std::string& address, int port) const;
  void Clear();

 private:
  const int base_;
  const int count_;
  std::mt19937_64 random_;
  std::map<std::string, std::set<int>> used_;
};

}  // namespace xl::state

#endif  // XL_SERVER_STATE_PORTS_H_
