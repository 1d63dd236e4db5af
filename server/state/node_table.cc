#include "server/state/node_table.h"

#include "absl/strings/str_cat.h"
#include "common/duration.h"

namespace xl::state {

NodeRecord* NodeTable::Find(const std::string& name) {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeRecord* NodeTable::Find(const std::string& name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

NodeRecord& NodeTable::Upsert(const std::string& name) {
  NodeRecord& node = nodes_[name];
  node.name = name;
  return node;
}

std::string NodeTable::Unavailable(const NodeRecord& node) {
  if (node.lost) return absl::StrCat("lost (", node.lost_reason, ")");
  if (!node.conn) return "agent not connected";
  // A drain on its way to disk counts at once (the operator was told it
  // is done once it is recorded; no new work starts there meanwhile); a
  // resume only once recorded.
  if (node.drain_writing && node.drain_writing->drained) {
    return node.drain_writing->reason.empty()
               ? "drained"
               : absl::StrCat("drained (", node.drain_writing->reason, ")");
  }
  if (node.drained) {
    return node.drain_reason.empty()
               ? "drained"
               : absl::StrCat("drained (", node.drain_reason, ")");
  }
  if (node.supervisor_stalled >= kStalledSupervisor) {
    return absl::StrCat(
        "its agent's supervisor has not run for ",
        HumanDuration(node.supervisor_stalled),
        " (stuck on the node: a hung mount or a blocked exec?); no new work "
        "until it runs again");
  }
  if (!node.foreign_ranks.empty()) {
    const auto& [job, attempt, rank] = *node.foreign_ranks.begin();
    return absl::StrCat("runs ", node.foreign_ranks.size(),
                        " rank(s) the scheduler has no record of (job ", job,
                        " attempt ", attempt, " rank ", rank,
                        "); waiting for them to exit");
  }
  return "";
}

std::vector<NodeRecord*> NodeTable::Silent(absl::Time now_mono,
                                           absl::Duration timeout) {
  std::vector<NodeRecord*> out;
  for (auto& [name, node] : nodes_) {
    if (!node.lost && now_mono - node.last_heartbeat_mono > timeout) {
      out.push_back(&node);
    }
  }
  return out;
}

std::map<std::string, int64_t> NodeTable::GpuModelsOf(
    const v1::Job& job) const {
  std::map<std::string, int64_t> out;
  for (const v1::Allocation& a : job.allocations()) {
    const NodeRecord* node = Find(a.node());
    if (node != nullptr && node->info != nullptr) {
      scheduler::AddGpuModels(*node->info, a.gpu_indices(), &out);
    } else {
      out["unknown"] += a.gpu_indices_size();
    }
  }
  return out;
}

}  // namespace xl::state
