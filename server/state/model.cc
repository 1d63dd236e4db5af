#include "server/state/model.h"

#include <algorithm>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "common/duration.h"

namespace xl::state {
namespace {

Hold HoldOf(const store::StoredHold& h, const JobTable& jobs) {
  Hold hold;
  hold.job_id = h.job_id;
  hold.attempt = h.attempt;
  const v1::Allocation& a = h.allocation;
  hold.share.node = a.node();
  hold.share.gpu_indices.assign(a.gpu_indices().begin(),
                                a.gpu_indices().end());
  hold.share.cpus = a.cpus();
  hold.share.memory_bytes = a.memory_bytes();
  hold.share.nvme_bytes = a.nvme_bytes();
  hold.share.nic_gbps = a.nic_gbps();
  hold.live_ranks.insert(a.ranks().begin(), a.ranks().end());
  // The ranks the attempt ran there, for accepting their late output.
  if (const JobRecord* rec = jobs.Find(h.job_id);
      rec != nullptr && rec->job.attempt() == h.attempt) {
    for (const auto& alloc : rec->job.allocations()) {
      if (alloc.node() == a.node()) {
        hold.all_ranks.assign(alloc.ranks().begin(), alloc.ranks().end());
      }
    }
  }
  if (hold.all_ranks.empty()) {
    hold.all_ranks.assign(a.ranks().begin(), a.ranks().end());
  }
  return hold;
}

}  // namespace

void Model::Load(store::StoredState* state, const LoadClock& clock) {
  std::map<std::string, std::shared_ptr<AgentConnection>> conns;
  for (auto& [name, node] : nodes.all()) {
    if (node.conn) conns[name] = node.conn;
  }
  jobs.Clear();
  nodes.Clear();
  ledger.Clear();
  ports.Clear();
  jobs.ReserveIds(state->last_job_id);
  const absl::Time liveness_from = clock.now_mono + clock.reconnect_grace;
  for (auto& n : state->nodes) {
    NodeRecord& node = nodes.Upsert(n.name);
    node.inventory = n.inventory;
    node.info = scheduler::NodeInfo::FromInventory(n.name, n.inventory);
    node.address = n.inventory.address();
    node.drained = n.drained;
    node.drain_reason = n.state_reason;
    node.register_time = n.register_time;
    node.last_heartbeat_mono = liveness_from;
    node.last_heartbeat_wall = clock.now_wall;
    auto c = conns.find(n.name);
    if (c != conns.end()) node.conn = c->second;
    ledger.SetNode(node.info);
  }
  for (auto& job : state->jobs) {
    const int64_t id = JobTable::ParseId(job.id());
    if (id <= 0) continue;
    JobRecord rec;
    rec.id = id;
    rec.job = std::move(job);
    rec.committed = std::make_shared<const v1::Job>(rec.job);
    if (auto t = state->tokens.find(id); t != state->tokens.end()) {
      rec.token = t->second;
    }
    if (auto b = state->log_bytes.find(id); b != state->log_bytes.end()) {
      rec.log_bytes = b->second;
    }
    if (auto m = state->metrics_bytes.find(id);
        m != state->metrics_bytes.end()) {
      rec.metrics_bytes = m->second;
    }
    rec.log_ends_attempt = rec.job.attempt();
    for (auto it =
             state->log_ends.lower_bound({id, rec.job.attempt(), 0, 0});
         it != state->log_ends.end() && std::get<0>(it->first) == id &&
         std::get<1>(it->first) == rec.job.attempt();
         ++it) {
      rec.log_ends[{std::get<2>(it->first), std::get<3>(it->first)}] =
          it->second;
    }
    for (const auto& exit : rec.job.rank_exits()) {
      v1::RankStatus st;
      st.set_rank(exit.rank());
      st.set_state(exit.failed_to_start() ? v1::RANK_FAILED_TO_START
                                          : v1::RANK_EXITED);
      st.set_exit_code(exit.exit_code());
      st.set_signal(exit.signal());
      rec.ranks[exit.rank()] = st;
      if (!exit.failed_to_start() && exit.exit_code() == 0 &&
          exit.signal() == 0) {
        ++rec.ranks_succeeded;
      }
    }
    JobRecord& stored = jobs.Insert(std::move(rec));
    if (JobTable::IsActive(stored.job.state())) {
      // Elapsed running time before the restart comes from the wall clock,
      // the only reading that survives a restart.
      const absl::Duration ran =
          clock.now_wall - FromProto(stored.job.start_time());
      stored.start_mono =
          clock.now_mono - std::max(ran, absl::ZeroDuration());
      if (stored.job.master_port() > 0) {
        ports.Reserve(stored.job.master_addr(), stored.job.master_port());
      }
    }
  }
  for (const auto& h : state->holds) {
    const std::string& node = h.allocation.node();
    if (!nodes.Find(node)) {
      NodeRecord& placeholder = nodes.Upsert(node);
      placeholder.last_heartbeat_mono = liveness_from;
      placeholder.last_heartbeat_wall = clock.now_wall;
    }
    ledger.AddHold(node, HoldOf(h, jobs), /*force=*/true);
  }
  for (auto& e : state->events) {
    JobRecord* rec = jobs.Find(e.job_id());
    if (rec == nullptr) continue;
    rec->committed_event_seq = e.seq();
    rec->events.push_back(std::move(e));
  }
  queues.clear();
  for (auto& q : state->queues) {
    std::string name = q.spec().name();
    queues[std::move(name)] = std::move(q);
  }
  queue_changes.assign(state->queue_changes.begin(),
                       state->queue_changes.end());
  next_queue_change_seq =
      queue_changes.empty() ? 1 : queue_changes.back().seq() + 1;
  queue_usage.clear();
  user_usage.clear();
  for (const auto& u : state->usage) {
    scheduler::DecayedUsage& d =
        u.user.empty() ? queue_usage[u.queue] : user_usage[{u.queue, u.user}];
    d.value = u.gpu_seconds;
    d.as_of = u.as_of;
    // Decayed for the time it was stored (the wall clock is the only one
    // that spans a restart), then on the monotonic clock from here on.
    d.value = d.At(clock.now_wall, clock.usage_half_life);
    d.as_of = clock.now_wall;
  }
}

}  // namespace xl::state
