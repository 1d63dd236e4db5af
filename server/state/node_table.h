// NodeTable: every node the scheduler knows, with its inventory, whether it
// takes work (drained, lost, disconnected, running ranks nobody accounts
// for) and its liveness on the monotonic clock. In-memory model: no threads,
// no I/O; thread-compatible (the controller's mutex guards it).
#ifndef XL_SERVER_STATE_NODE_TABLE_H_
#define XL_SERVER_STATE_NODE_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "server/scheduler/placement.h"
#include "server/state/agent_connection.h"
#include "xl/v1/node.pb.h"

namespace xl::state {

// An agent whose supervisor loop has not run this long is stuck on its
// node (it waits at most a second for events).
inline constexpr absl::Duration kStalledSupervisor = absl::Seconds(5);

struct NodeRecord {
  std::string name;
  v1::NodeInventory inventory;
  std::shared_ptr<const scheduler::NodeInfo> info;
  std::string address;
  bool drained = false;
  std::string drain_reason;
  // A drain or resume a caller asked for whose write has not committed:
  // the model takes it only once it is on disk, and a row written in the
  // meantime carries it (it is the latest word).
  struct DrainWrite {
    bool drained = false;
    std::string reason;
    uint64_t seq = 0;
  };
  std::optional<DrainWrite> drain_writing;
  bool lost = false;
  std::string lost_reason;
  std::shared_ptr<AgentConnection> conn;
  // Monotonic: for liveness. Wall: for people.
  absl::Time last_heartbeat_mono;
  absl::Time last_heartbeat_wall;
  absl::Time register_time;
  std::string agent_version;
  // Register.instance_id of the agent process serving the node.
  std::string instance_id;
  // Heartbeat.supervisor_stalled_ms of the last heartbeat: past
  // kStalledSupervisor the node takes no new work.
  absl::Duration supervisor_stalled = absl::ZeroDuration();
  // What the agent said it does (Register).
  bool shared_env = false;
  bool honours_lease = false;
  // Running ranks the agent reported that no hold accounts for: (job,
  // attempt, rank). The node takes no new work until they are gone.
  std::set<std::tuple<int64_t, int32_t, int32_t>> foreign_ranks;
  // Jobs whose ranks failed to start here for reasons of the node, with
  // when (monotonic): the node is drained by itself when several jobs do.
  // Cleared when the node is resumed.
  std::vector<std::pair<int64_t, absl::Time>> early_failures;
};

class NodeTable {
 public:
  NodeRecord* Find(const std::string& name);
  const NodeRecord* Find(const std::string& name) const;
  // GPU model -> GPUs of the job's current allocations ("unknown" for a
  // GPU of a node not known).
  std::map<std::string, int64_t> GpuModelsOf(const v1::Job& job) const;
  // Finds or creates the record.
  NodeRecord& Upsert(const std::string& name);
  // Why the node takes no new work now, or "" when it does.
  static std::string Unavailable(const NodeRecord& node);
  // Nodes not lost and silent for longer than `timeout` at `now_mono`.
  std::vector<NodeRecord*> Silent(absl::Time now_mono, absl::Duration timeout);
  std::map<std::string, NodeRecord>& all() { return nodes_; }
  const std::map<std::string, NodeRecord>& all() const { return nodes_; }
  void Clear() { nodes_.clear(); }

 private:
  std::map<std::string, NodeRecord> nodes_;
};

}  // namespace xl::state

#endif  // XL_SERVER_STATE_NODE_TABLE_H_
