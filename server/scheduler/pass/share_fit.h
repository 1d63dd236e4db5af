// What one share of a request is on one node, for the phases of a pass:
// GPU index values as positions, a share from the positions a placement
// picked, and whether a node's free capacity takes one share. Private to the
// scheduling core; pure.
#ifndef XL_SERVER_SCHEDULER_PASS_SHARE_FIT_H_
#define XL_SERVER_SCHEDULER_PASS_SHARE_FIT_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "server/scheduler/fleet_index.h"
#include "server/scheduler/node_fit.h"
#include "server/scheduler/placement.h"

namespace xl::scheduler {

// Maps the GPU index values of a share to positions on the node. Returns
// false when one is unknown or given twice.
bool GpuPositions(const NodeInfo& info, const std::vector<int32_t>& indices,
                  uint64_t* mask);

// The share of a node a placement picked: the GPUs at positions `gpus`
// and the request's other per-node needs.
NodeShare ShareOf(const NodeCapacity& node, uint64_t gpus, const Needs& needs);

// Whether a node's free capacity takes one share of a request, ignoring its
// availability; the GPUs the request may use are matched once per GPU
// layout of the fleet.
class ShareFit {
 public:
  ShareFit(const FleetIndex& fleet, const v1::ResourceRequest& req)
      : fleet_(fleet),
        req_(req),
        needs_(req),
        matching_(fleet.layouts().size(), 0),
        matched_(fleet.layouts().size(), false),
        excluded_(req.exclude_nodes().begin(), req.exclude_nodes().end()) {}

  bool operator()(const NodeCapacity& c, int32_t node) {
    if (!excluded_.empty() && excluded_.count(c.name()) > 0) return false;
    const int32_t layout = fleet_.slot(fleet_.slot_of_node(node)).layout;
    if (!matched_[layout]) {
      matching_[layout] = MatchingGpus(*fleet_.layouts()[layout], req_);
      matched_[layout] = true;
    }
    return FitsNow(FreeCapacity{c.gpu_free, c.cpus_free, c.memory_free,
                                c.nvme_free, c.nic_gbps_free},
                   matching_[layout], needs_);
  }
  const Needs& needs() const { return needs_; }

 private:
  const FleetIndex& fleet_;
  const v1::ResourceRequest& req_;
  const Needs needs_;
  std::vector<uint64_t> matching_;
  std::vector<bool> matched_;
  const std::set<std::string> excluded_;
};

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PASS_SHARE_FIT_H_
