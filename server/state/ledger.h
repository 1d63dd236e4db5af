// ResourceLedger: which attempt of which job holds what on every node, and
// what each node has free, kept incrementally as holds come and go (a pass
// copies the free capacity; nothing is recomputed from the holds). A hold
// lasts until every rank of it is known to be gone, even when its attempt
// ended long before or its node was lost. In-memory model: no threads, no
// I/O; thread-compatible (the controller's mutex guards it).
#ifndef XL_SERVER_STATE_LEDGER_H_
#define XL_SERVER_STATE_LEDGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "server/scheduler/placement.h"

namespace xl::state {

struct Hold {
  int64_t job_id = 0;
  int32_t attempt = 0;
  scheduler::NodeShare share;
  // Every rank the attempt ran on the node, and those not yet known to be
  // gone (their whole process group).
  std::vector<int> all_ranks;
  std::set<int> live_ranks;
};

class ResourceLedger {
 public:
  // Adds or replaces the node's description; its free capacity is that of
  // the new description less its holds.
  void SetNode(std::shared_ptr<const scheduler::NodeInfo> info);
  bool HasNode(const std::string& node) const;

  // Records the hold and takes its resources. Returns false and changes
  // nothing when the node does not have them (or is unknown); `force` takes
  // them anyway (recovery: what runs, runs).
  bool AddHold(const std::string& node, Hold hold, bool force = false);
  // The rank is gone. Returns true when that released the whole hold
  // (its resources are free again); *found says whether the rank was held.
  bool ReleaseRank(const std::string& node, int64_t job_id, int32_t attempt,
                   int rank, bool* found = nullptr);
  // The hold of (job, attempt) on `node`, or nullptr.
  const Hold* FindHold(const std::string& node, int64_t job_id,
                       int32_t attempt) const;
  const std::vector<Hold>& Holds(const std::string& node) const;
  // What the node has free (unavailable is left empty: the node table says
  // whether the node takes work). nullptr for an unknown node.
  const scheduler::NodeCapacity* Capacity(const std::string& node) const;
  // Takes every share of `placement` if all still fit, else none; false then.
  bool Fits(const scheduler::Placement& placement) const;
  void Clear();

 private:
  struct NodeEntry {
    scheduler::NodeCapacity capacity;
    std::vector<Hold> holds;
  };
  std::map<std::string, NodeEntry> nodes_;
};

}  // namespace xl::state

#endif  // XL_SERVER_STATE_LEDGER_H_
