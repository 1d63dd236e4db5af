#include "server/scheduler/pass/share_fit.h"

namespace xl::scheduler {

bool GpuPositions(const NodeInfo& info, const std::vector<int32_t>& indices,
                  uint64_t* mask) {
  *mask = 0;
  const size_t n = std::min<size_t>(info.gpus.size(), 64);
  for (int32_t index : indices) {
    size_t pos = 0;
    while (pos < n && info.gpus[pos].index != index) ++pos;
    const uint64_t bit = uint64_t{1} << pos;
    if (pos == n || (*mask & bit) != 0) return false;
    *mask |= bit;
  }
  return true;
}

NodeShare ShareOf(const NodeCapacity& node, uint64_t gpus, const Needs& needs) {
  NodeShare share;
  share.node = node.name();
  for (; gpus != 0; gpus &= gpus - 1) {
    share.gpu_indices.push_back(node.info->gpus[__builtin_ctzll(gpus)].index);
  }
  share.cpus = needs.req->cpus_per_node();
  share.memory_bytes = needs.memory;
  share.nvme_bytes = needs.nvme;
  share.nic_gbps = needs.nic_gbps;
  return share;
}

}  // namespace xl::scheduler
