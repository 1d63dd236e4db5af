// The NodeService side of the controller: nodes as people see them, pages of
// them, drain and resume.
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "common/status.h"
#include "server/control/controller.h"
#include "server/state/node_life.h"

namespace xl::control {

v1::Node Controller::NodeToProto(const NodeRecord& node) const {
  v1::Node out;
  out.set_name(node.name);
  *out.mutable_inventory() = node.inventory;
  if (out.inventory().address().empty()) {
    out.mutable_inventory()->set_address(node.address);
  }
  if (node.lost) {
    out.set_state(v1::LOST);
    out.set_state_reason(node.lost_reason);
  } else if (node.drained) {
    out.set_state(v1::DRAINED);
    out.set_state_reason(node.drain_reason);
  } else {
    out.set_state(v1::READY);
    if (brake_since_ != absl::InfinitePast() &&
        clock_->MonotonicNow() - node.last_heartbeat_mono >
            opts_.heartbeat_timeout) {
      out.set_state_reason(absl::StrCat("silent for ",
                                        HumanDuration(clock_->MonotonicNow() -
                                                      node.last_heartbeat_mono),
                                        "; not counted lost: ", brake_reason_));
    } else if (!node.conn) {
      out.set_state_reason(
          "agent not connected; the node is lost if it stays away past the "
          "heartbeat timeout");
    } else {
      out.set_state_reason(state::NodeTable::Unavailable(node));
    }
  }
  v1::NodeUsage* u = out.mutable_usage();
  std::set<std::string> jobs;
  for (const auto& h : model_.ledger.Holds(node.name)) {
    for (int32_t g : h.share.gpu_indices) u->add_gpus_in_use(g);
    u->set_cpus_in_use(u->cpus_in_use() + h.share.cpus);
    u->set_memory_bytes_in_use(u->memory_bytes_in_use() +
                               h.share.memory_bytes);
    u->set_nvme_bytes_in_use(u->nvme_bytes_in_use() + h.share.nvme_bytes);
    u->set_nic_gbps_in_use(u->nic_gbps_in_use() + h.share.nic_gbps);
    jobs.insert(absl::StrCat(h.job_id));
  }
  for (const auto& j : jobs) u->add_job_ids(j);
  *out.mutable_last_heartbeat_time() = ToProtoTime(node.last_heartbeat_wall);
  *out.mutable_register_time() = ToProtoTime(node.register_time);
  out.set_agent_version(node.agent_version);
  return out;
}

absl::StatusOr<v1::ListNodesResponse> Controller::ListNodes(
    const v1::ListNodesRequest& request) {
  constexpr int kDefaultPage = 500, kMaxPage = 2000;
  int limit = request.page_size();
  if (limit < 0) {
    return absl::InvalidArgumentError("page_size: must not be negative");
  }
  if (limit == 0) limit = kDefaultPage;
  limit = std::min(limit, kMaxPage);
  v1::ListNodesResponse resp;
  absl::MutexLock lock(&mu_);
  const auto& all = model_.nodes.all();
  // The token is the last name of the previous page.
  auto it = request.page_token().empty() ? all.begin()
                                         : all.upper_bound(request.page_token());
  for (; it != all.end(); ++it) {
    if (it->second.info == nullptr) continue;  // known only from a hold
    if (resp.nodes_size() == limit) {
      resp.set_next_page_token(resp.nodes(limit - 1).name());
      break;
    }
    *resp.add_nodes() = NodeToProto(it->second);
  }
  return resp;
}

absl::StatusOr<v1::Node> Controller::GetNode(const std::string& name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("name: required; see xlctl nodes");
  }
  absl::MutexLock lock(&mu_);
  const NodeRecord* node = model_.nodes.Find(name);
  if (node == nullptr) {
    return absl::NotFoundError(absl::StrCat("node ", name, " is not known"));
  }
  return NodeToProto(*node);
}

void Controller::PersistNode(const NodeRecord& node,
                             std::function<void(absl::Status)> answer) {
  Effects effects;
  effects.changes.push_back(store::change::PutNode{state::StoredNodeOf(node)});
  effects.answer = std::move(answer);
  Apply(std::move(effects));
}

void Controller::SetDrained(
    const std::string& name, bool drained, const std::string& reason,
    std::function<void(absl::StatusOr<v1::Node>)> done) {
  if (name.empty()) {
    done(absl::InvalidArgumentError("name: required; see xlctl nodes"));
    return;
  }
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    NodeRecord* node = model_.nodes.Find(name);
    if (node == nullptr) {
      error = absl::NotFoundError(absl::StrCat("node ", name, " is not known"));
    } else if (degraded_) {
      error = absl::UnavailableError(degraded_reason_);
    } else {
      // The model takes the change once it is on disk: a failed write
      // leaves the node as every reader saw it.
      const uint64_t seq = ++drain_writes_;
      Effects effects;
      effects.changes = state::BeginDrain(node, drained, reason, seq);
      effects.apply = [this, name, seq] {
        mu_.AssertHeld();
        NodeRecord* node = model_.nodes.Find(name);
        if (node == nullptr || !state::CommitDrain(node, seq)) return;
        if (!node->drained) capacity_freed_ = true;
        pass_needed_ = true;
        wake_ = true;
      };
      effects.answer = [this, name, done](absl::Status st) {
        if (!st.ok()) {
          done(st);
          return;
        }
        done(GetNode(name));
      };
      Apply(std::move(effects));
    }
  }
  if (!error.ok()) done(error);
}

}  // namespace xl::control
