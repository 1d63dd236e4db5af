// Why a class of requests waits, in words and numbers: what it needs, whether
// the fleet could ever hold it, how many nodes fit now, and the other nodes
// grouped by the first resource they are short of ("n1, n2 and 3 more: 1 of
// 2 matching GPUs free, needs 2"). Nodes are classified into small values and
// counted; each distinct value is put into words once. Private to the
// scheduling core. Pure; safe from any thread.
#ifndef XL_SERVER_SCHEDULER_WAIT_REASON_H_
#define XL_SERVER_SCHEDULER_WAIT_REASON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/scheduler/fleet_index.h"
#include "server/scheduler/node_fit.h"

namespace xl::scheduler {

// Returns the reason for `needs` on what `fleet` has left now.
// `layout_gpus` holds the matching GPU positions per layout of `fleet`;
// `idle_fit` counts the nodes that would fit with nothing running.
std::string WaitReason(const FleetIndex& fleet, const Needs& needs,
                       const std::vector<uint64_t>& layout_gpus,
                       int32_t idle_fit);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_WAIT_REASON_H_
