// The elastic-gang plugin of a pass: fixed sizes of an elastic request
// (one object per size, so equal sizes share a class), and the grow phase
// that restarts running elastic gangs on more nodes with what the pass left
// free. Private to the scheduling core; pure, one object per pass.
#ifndef XL_SERVER_SCHEDULER_PASS_ELASTIC_H_
#define XL_SERVER_SCHEDULER_PASS_ELASTIC_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "server/scheduler/fleet_index.h"
#include "server/scheduler/pass/policy_gate.h"
#include "server/scheduler/placement.h"
#include "xl/v1/job.pb.h"

namespace xl::scheduler {

// The fewest nodes an elastic request runs on; 0 when it is not elastic
// (or has no request).
int32_t MinNodes(const JobRequest& job);

// Fixed sizes of elastic requests for one pass.
class ElasticSizes {
 public:
  // Returns `base` at exactly `nodes` nodes (min_nodes cleared): the same
  // object for the same (base, nodes) within the pass. `base` is kept
  // alive with it.
  std::shared_ptr<const v1::ResourceRequest> Of(
      const std::shared_ptr<const v1::ResourceRequest>& base, int32_t nodes);

 private:
  std::map<std::pair<const v1::ResourceRequest*, int32_t>,
           std::pair<std::shared_ptr<const v1::ResourceRequest>,
                     std::shared_ptr<const v1::ResourceRequest>>>
      sized_;
};

// The grow phase: elastic gangs (RunningGang::may_grow) grow onto what is
// left free in `fleet`, highest rank first, at most snapshot.max_grows
// tries, only while no job that outranks them waits for resources
// (`first_waiting_rank`: those nodes, and the gang's own once it stops,
// are theirs first) and not when preempted this pass. Each gang's own
// nodes are excluded (one share per node); the added nodes are taken from
// `fleet` at once and charged to `policy`. Appends to out->grows and
// out->reservations (the gang's nodes, held for its restart).
void GrowElastic(const ClusterSnapshot& snapshot,
                 const std::unordered_set<std::string>& preempted,
                 std::optional<double> first_waiting_rank, FleetIndex* fleet,
                 PolicyGate* policy, Decisions* out);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PASS_ELASTIC_H_
