// One class of equal requests during one pass: the nodes that take one of its
// shares now, as one bit per slot of the FleetIndex and a count per switch.
// Built once in O(nodes); afterwards only the buckets the pass took from are
// re-checked, and since capacity only shrinks within a pass a node that left
// the set never comes back. Choosing a gang then costs about the number of
// switches plus the gang size. Private to the scheduling core.
// Thread-compatible.
#ifndef XL_SERVER_SCHEDULER_REQUEST_CLASS_H_
#define XL_SERVER_SCHEDULER_REQUEST_CLASS_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "server/scheduler/fleet_index.h"
#include "server/scheduler/node_fit.h"
#include "xl/v1/job.pb.h"

namespace xl::scheduler {

class RequestClass {
 public:
  // One node of a gang: the slot and the GPU positions it gives.
  struct Pick {
    int32_t slot;
    uint64_t gpus;
  };

  // Finds the nodes that fit now. `fleet` and `req` must outlive the class;
  // the class sees what `fleet` has taken only through CatchUp.
  RequestClass(const FleetIndex& fleet, const v1::ResourceRequest& req);

  const Needs& needs() const { return needs_; }

  // Drops the nodes that no longer fit from every bucket the fleet has
  // taken from since the class was built or last caught up.
  void CatchUp();

  // Fills `picks` with the nodes for one gang in ring order and returns
  // true, or returns false when too few nodes fit. Call CatchUp first.
  // Policy: the labelled switch with enough fitting nodes and the fewest of
  // them (best fit keeps large groups whole for large gangs); else the
  // first fitting nodes in ring order. On each node, the lowest free
  // matching GPU positions.
  bool Choose(std::vector<Pick>* picks);

  // How many nodes fit one share now (after CatchUp or a Choose).
  int64_t fitting() const { return live_total_; }

  // Why the class does not fit now, in words and numbers, grouping the
  // nodes by why they do not fit.
  std::string WhyNot() const;

 private:
  bool Fits(int slot) const;
  // Slots of nodes the request excludes (exclude_nodes), sorted.
  std::vector<int32_t> excluded_;
  bool Excluded(int slot) const {
    return !excluded_.empty() &&
           std::binary_search(excluded_.begin(), excluded_.end(), slot);
  }
  void TakeFromBucket(int b, int* want, std::vector<Pick>* picks);

  const FleetIndex& fleet_;
  Needs needs_;
  // resources.max_switches (0: any), and what the last failing Choose
  // found under that many switches.
  int32_t max_switches_ = 0;
  int64_t best_under_limit_ = -1;
  std::vector<uint64_t> layout_gpus_;  // matching GPU positions per layout
  std::vector<uint64_t> live_;         // per bucket; bit i: slot begin + i fits
  std::vector<int32_t> switch_live_;   // fitting nodes per switch
  int64_t live_total_ = 0;
  int32_t idle_fit_ = 0;    // nodes that would fit with nothing running
  int32_t first_live_ = 0;  // buckets before it are empty
  size_t taken_seen_ = 0;   // entries of fleet_.taken() already checked
};

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_REQUEST_CLASS_H_
