// Model: everything the store persists, in memory: jobs, nodes, the
// resources their attempts hold, master ports, queues with their recent
// changes, and decayed usage. The control layer reads and changes it under
// its lock; every change it makes durable goes through one door
// (control/effects.h), and recovery, at start or after a failed write, is
// Load(): the model as the store has it.
//
// In-memory model: no threads, no I/O; thread-compatible.
#ifndef XL_SERVER_STATE_MODEL_H_
#define XL_SERVER_STATE_MODEL_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "server/scheduler/queue_policy.h"
#include "server/state/job_table.h"
#include "server/state/ledger.h"
#include "server/state/node_table.h"
#include "server/state/ports.h"
#include "server/store/store.h"
#include "xl/v1/queue.pb.h"

namespace xl::state {

struct Model {
  Model(int master_port_base, int master_port_count)
      : ports(master_port_base, master_port_count) {}

  JobTable jobs;
  NodeTable nodes;
  ResourceLedger ledger;
  MasterPorts ports;
  // Defined queues by name, and the latest changes (oldest first).
  std::map<std::string, v1::Queue> queues;
  std::deque<v1::QueueChange> queue_changes;
  int64_t next_queue_change_seq = 1;
  // Decayed GPU-seconds per queue and per (queue, user).
  std::map<std::string, scheduler::DecayedUsage> queue_usage;
  std::map<std::pair<std::string, std::string>, scheduler::DecayedUsage>
      user_usage;

  struct LoadClock {
    absl::Time now_wall;
    absl::Time now_mono;
    // Nobody is lost for the scheduler's own downtime: a node's liveness
    // timeout starts this long after now (the agents' reconnect backoff).
    absl::Duration reconnect_grace = absl::ZeroDuration();
    // Of stored usage, decayed for the time it was stored.
    absl::Duration usage_half_life = absl::Hours(24);
  };
  // Replaces everything with `*state`. Agents' connections stay with their
  // nodes (the caller closes them when this is a reload). Jobs come with
  // their committed snapshot, events, token, output sizes, stored output
  // ends of the current attempt and the ranks that exited; active ones with
  // their running time and master port. Jobs, events and queues are moved
  // out of `*state`; its holds are left for the caller to read.
  void Load(store::StoredState* state, const LoadClock& clock);
};

}  // namespace xl::state

#endif  // XL_SERVER_STATE_MODEL_H_
