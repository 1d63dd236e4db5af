// Launch: the StartRanks message that starts a job attempt's ranks on one
// node, with the torchrun-compatible environment. Pure: data in, message out.
// The environment every rank shares goes once per message (StartRanks.env)
// to agents that merge it; the rest per rank.
#ifndef XL_SERVER_CONTROL_LAUNCH_H_
#define XL_SERVER_CONTROL_LAUNCH_H_

#include <string>

#include "xl/v1/agent.pb.h"
#include "xl/v1/job.pb.h"
#include "xl/v1/node.pb.h"

namespace xl::control {

struct LaunchContext {
  // XL_SCHEDULER.
  std::string scheduler_address;
  // XL_RENDEZVOUS_TOKEN of the attempt.
  std::string token;
  // The node's agent merges StartRanks.env (Register.shared_env).
  bool shared_env = false;
  // ResourceLimits.max_processes: the queue's max_processes_per_node.
  int64_t max_processes = 0;
};

// The StartRanks for `allocation` (one of job.allocations()) on a node with
// `inventory`.
v1::SchedulerMessage BuildStartRanks(const v1::Job& job,
                                     const v1::Allocation& allocation,
                                     const v1::NodeInventory& inventory,
                                     const LaunchContext& context);

}  // namespace xl::control

#endif  // XL_SERVER_CONTROL_LAUNCH_H_
