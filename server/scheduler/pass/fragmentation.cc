#include "server/scheduler/pass/fragmentation.h"

#include <algorithm>
#include <vector>

#include "server/scheduler/node_fit.h"

namespace xl::scheduler {

int64_t FragmentedGpus(
    const FleetIndex& fleet,
    const std::unordered_set<const v1::ResourceRequest*>& waiting) {
  if (waiting.empty()) return -1;
  struct Want {
    Needs needs;
    std::vector<uint64_t> matching;  // per layout
  };
  std::vector<Want> wants;
  for (const v1::ResourceRequest* req : waiting) {
    if (req == nullptr || req->gpus_per_node() <= 0) continue;
    Want w{Needs(*req), {}};
    for (const NodeInfo* layout : fleet.layouts()) {
      w.matching.push_back(MatchingGpus(*layout, *req));
    }
    wants.push_back(std::move(w));
  }
  int64_t fragmented = 0;
  for (int sl = 0; sl < fleet.size(); ++sl) {
    const FleetIndex::Slot& slot = fleet.slot(sl);
    if (!slot.available || slot.free.gpus == 0) continue;
    const bool usable =
        std::any_of(wants.begin(), wants.end(), [&](const Want& w) {
          return FitsNow(slot.free, w.matching[slot.layout], w.needs);
        });
    if (!usable) fragmented += __builtin_popcountll(slot.free.gpus);
  }
  return fragmented;
}

}  // namespace xl::scheduler
