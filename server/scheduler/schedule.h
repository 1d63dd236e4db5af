// One scheduling pass: a snapshot of the fleet and the queue in, decisions
// out (jobs to start and where, why the others wait, reservations,
// preemptions, elastic grows). Pure: no I/O, no clock (time is the
// snapshot's), no threads; safe to call from any thread on its own data.
//
// The pass is a short driver over phases, after the Kubernetes scheduling
// framework's extension points, each a small type of server/scheduler/pass/
// with tests of its own:
//   sort        QueueOrder, HoldOrder                      (queue_order.h)
//   pre-filter  PolicyGate::Admit: quotas, per-user limits (policy_gate.h)
//   filter and  RequestClass: nodes that fit a class, the gang's nodes by
//   score       switch best fit, memoised per class in ClassTable
//                                        (request_class.h, class_table.h)
//   backfill    Reserver::BackfillOnHeld                    (reserver.h)
//   post-filter Preemptor + Reserver::PreemptFor; PolicyGate::Reclaim
//                                        (preemptor.h, policy_gate.h)
//   reserve     Reserver::Reserve (EASY backfill)            (reserver.h)
//   permit      PolicyGate::Charge*: the quota a start or a reservation
//               keeps for the rest of the pass
//   post-pass   GrowElastic (elastic.h), FragmentedGpus (fragmentation.h)
#ifndef XL_SERVER_SCHEDULER_SCHEDULE_H_
#define XL_SERVER_SCHEDULER_SCHEDULE_H_

#include <vector>

#include "server/scheduler/placement.h"

namespace xl::scheduler {

// Runs one scheduling pass over `queue` (any order; sorted here).
Decisions Schedule(ClusterSnapshot snapshot, std::vector<JobRequest> queue);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_SCHEDULE_H_
