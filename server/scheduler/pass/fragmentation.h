// The last phase of a pass: how fragmented the fleet is left. Private to
// the scheduling core; pure.
#ifndef XL_SERVER_SCHEDULER_PASS_FRAGMENTATION_H_
#define XL_SERVER_SCHEDULER_PASS_FRAGMENTATION_H_

#include <cstdint>
#include <unordered_set>

#include "server/scheduler/fleet_index.h"
#include "xl/v1/job.pb.h"

namespace xl::scheduler {

// Returns the free GPUs on available nodes of `fleet` where not one share
// of any of `waiting` requests fits (its GPU count, GPU memory, models,
// CPUs, memory...), whatever those jobs wait for (reserved, preempting,
// quota...); -1 when nothing waits. Null requests and CPU-only requests
// are skipped.
int64_t FragmentedGpus(
    const FleetIndex& fleet,
    const std::unordered_set<const v1::ResourceRequest*>& waiting);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PASS_FRAGMENTATION_H_
