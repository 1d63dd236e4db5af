#include "server/state/node_life.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "common/text.h"

namespace xl::state {
namespace {

constexpr int kMaxGpusPerNode = 64;
// Register.agent_version and instance_id.
constexpr size_t kMaxAgentWord = 128;

}  // namespace

absl::StatusOr<std::string> CheckRegister(const v1::Register& reg) {
  std::string name =
      reg.name().empty() ? reg.inventory().hostname() : reg.name();
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "register.name: empty and the inventory has no hostname; start "
        "xl-agent with --name");
  }
  // Names, models and labels end up in everyone's `xlctl nodes` and plans.
  if (FindControlCharacter(name) != std::string::npos || name.size() > 253) {
    return absl::InvalidArgumentError(
        "register.name: a node name is at most 253 printable characters; "
        "start xl-agent with another --name");
  }
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"register.agent_version",
                                                   &reg.agent_version()},
        {"register.instance_id", &reg.instance_id()}}) {
    if (FindControlCharacter(*value) != std::string::npos ||
        value->size() > kMaxAgentWord) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": at most ", kMaxAgentWord,
          " printable characters; run an xl-agent of this release"));
    }
  }
  if (reg.inventory().gpus_size() > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("register.inventory.gpus: ", reg.inventory().gpus_size(),
                     " GPUs; a node may have at most ", kMaxGpusPerNode,
                     " (split it into several agents with --inventory)"));
  }
  absl::Status printable =
      CheckNoControlCharacters(reg.inventory(), "register.inventory");
  if (!printable.ok()) return printable;
  std::set<int> indices;
  for (int i = 0; i < reg.inventory().gpus_size(); ++i) {
    if (!indices.insert(reg.inventory().gpus(i).index()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("register.inventory.gpus[", i,
                       "].index: ", reg.inventory().gpus(i).index(),
                       " appears twice; give each GPU its own index"));
    }
  }
  return name;
}

store::StoredNode StoredNodeOf(const NodeRecord& node) {
  store::StoredNode stored;
  stored.name = node.name;
  stored.inventory = node.inventory;
  stored.drained =
      node.drain_writing ? node.drain_writing->drained : node.drained;
  stored.state_reason =
      node.drain_writing ? node.drain_writing->reason : node.drain_reason;
  stored.register_time = node.register_time;
  return stored;
}

absl::StatusOr<Registered> Register(Model* model, const std::string& name,
                                    const v1::Register& reg,
                                    std::shared_ptr<AgentConnection> conn,
                                    absl::Duration heartbeat_timeout, Now now) {
  if (const NodeRecord* known = model->nodes.Find(name); known != nullptr) {
    // Another agent process claims a node whose session is alive: refuse,
    // or the two would free each other's resources. (The same process
    // reconnecting has the same instance id.)
    const absl::Duration heard = now.mono - known->last_heartbeat_mono;
    if (known->conn && known->conn != conn && !reg.instance_id().empty() &&
        !known->instance_id.empty() &&
        known->instance_id != reg.instance_id() && heard < heartbeat_timeout) {
      return absl::AlreadyExistsError(absl::StrCat(
          "register.name: node ", name,
          " is already served by another xl-agent (heard from ",
          HumanDuration(heard), " ago, from ", known->address,
          "); give this agent its own --name, or stop the other one"));
    }
  }
  NodeRecord& node = model->nodes.Upsert(name);
  Registered out;
  out.node = &node;
  out.was_lost = node.lost;
  if (node.conn && node.conn != conn) out.replaced = node.conn;
  node.instance_id = reg.instance_id();
  node.inventory = reg.inventory();
  node.info = scheduler::NodeInfo::FromInventory(name, reg.inventory());
  node.address = reg.inventory().address().empty() ? conn->PeerAddress()
                                                   : reg.inventory().address();
  node.conn = std::move(conn);
  node.lost = false;
  node.lost_reason.clear();
  node.last_heartbeat_mono = now.mono;
  node.last_heartbeat_wall = now.wall;
  node.register_time = now.wall;
  node.agent_version = reg.agent_version();
  node.shared_env = reg.shared_env();
  node.honours_lease = reg.honours_lease();
  model->ledger.SetNode(node.info);
  return out;
}

std::vector<RankRef> UnreportedRanks(Model* model, const NodeRecord& node,
                                     const v1::Register& reg,
                                     const std::set<int64_t>& parked_jobs) {
  std::set<RankRef> reported;
  for (const auto& st : reg.ranks()) {
    reported.insert({JobTable::ParseId(st.job_id()), st.attempt(), st.rank()});
  }
  // Exits reported before wait on for their output as they were: the agent
  // sends what was not acknowledged again after this Register, and the
  // exits it reports now queue behind them.
  for (int64_t id : parked_jobs) {
    JobRecord* rec = model->jobs.Find(id);
    if (rec == nullptr) continue;
    for (auto& p : rec->parked_exits) {
      if (p.node != node.name) continue;
      const RankRef key{id, p.status.attempt(), p.status.rank()};
      // Not reported any more (its agent's state was wiped): nothing of it
      // runs there, so its resources go when the exit is acted on.
      if (reported.count(key) == 0) p.status.set_processes_remaining(false);
      reported.insert(key);
    }
  }
  std::vector<RankRef> missing;
  for (const Hold& hold : model->ledger.Holds(node.name)) {
    for (int rank : hold.live_ranks) {
      const RankRef ref{hold.job_id, hold.attempt, rank};
      if (reported.count(ref) == 0) missing.push_back(ref);
    }
  }
  return missing;
}

Unreported SortUnreported(const Model& model,
                          const std::vector<RankRef>& missing) {
  Unreported out;
  for (const RankRef& m : missing) {
    const JobRecord* rec = model.jobs.Find(m.job);
    const bool current = rec != nullptr && rec->job.attempt() == m.attempt &&
                         JobTable::IsActive(rec->job.state()) && !rec->stopping;
    if (!current) continue;
    auto it = rec->ranks.find(m.rank);
    if (it == rec->ranks.end()) {
      out.undelivered[m.job].push_back(m.rank);
    } else if (!IsExit(it->second)) {
      out.vanished[m.job].push_back(m.rank);
    }
  }
  return out;
}

RankStatusKind KindOf(const Model& model, const NodeRecord& node,
                      const v1::RankStatus& st) {
  RankStatusKind out;
  const bool running = st.state() == v1::RANK_RUNNING;
  if (!running && !IsExit(st)) return out;
  const int64_t id = JobTable::ParseId(st.job_id());
  const JobRecord* rec = model.jobs.Find(id);
  const Hold* hold = model.ledger.FindHold(node.name, id, st.attempt());
  const bool held = hold != nullptr && hold->live_ranks.count(st.rank()) > 0;
  out.current = rec != nullptr && rec->job.attempt() == st.attempt() &&
                JobTable::IsActive(rec->job.state()) && !rec->stopping;
  if (running) {
    out.kind = !held         ? RankStatusKind::kRunningUnknown
               : out.current ? RankStatusKind::kRunning
                             : RankStatusKind::kRunningStale;
    return out;
  }
  if (!held) {
    out.kind = RankStatusKind::kExitNotHeld;
    return out;
  }
  out.kind = RankStatusKind::kExitHeld;
  if (out.current) {
    auto it = rec->ranks.find(st.rank());
    out.first_exit = it == rec->ranks.end() || !IsExit(it->second);
  }
  return out;
}

bool RankWasOnNode(const Model& model, const NodeRecord& node,
                   const JobRecord& rec, int32_t attempt, int32_t rank) {
  if (const Hold* hold = model.ledger.FindHold(node.name, rec.id, attempt)) {
    return std::find(hold->all_ranks.begin(), hold->all_ranks.end(), rank) !=
           hold->all_ranks.end();
  }
  if (rec.job.attempt() != attempt) return false;
  for (const auto& a : rec.job.allocations()) {
    if (a.node() != node.name) continue;
    return std::find(a.ranks().begin(), a.ranks().end(), rank) !=
           a.ranks().end();
  }
  return false;
}

bool OutputBehind(const JobRecord& rec, const v1::RankStatus& st) {
  // Output past the job's quota is dropped: nothing more will come.
  if (st.state() != v1::RANK_EXITED) return false;
  auto stored = [&](v1::LogStream stream) -> int64_t {
    if (rec.log_ends_attempt != st.attempt()) return 0;
    auto it = rec.log_ends.find({st.rank(), stream});
    return it == rec.log_ends.end() ? 0 : it->second;
  };
  return stored(v1::STDOUT) < st.stdout_bytes() ||
         stored(v1::STDERR) < st.stderr_bytes();
}

Released ReleaseRank(Model* model, const std::string& node, int64_t job_id,
                     int32_t attempt, int rank) {
  Released out;
  out.freed =
      model->ledger.ReleaseRank(node, job_id, attempt, rank, &out.found);
  if (!out.found) return out;
  if (out.freed) {
    out.changes.push_back(store::change::DeleteHold{node, job_id, attempt});
    return out;
  }
  const Hold* hold = model->ledger.FindHold(node, job_id, attempt);
  if (hold == nullptr) return out;
  store::StoredHold stored;
  stored.job_id = job_id;
  stored.attempt = attempt;
  v1::Allocation& a = stored.allocation;
  a.set_node(node);
  for (int32_t g : hold->share.gpu_indices) a.add_gpu_indices(g);
  for (int r : hold->live_ranks) a.add_ranks(r);
  a.set_cpus(hold->share.cpus);
  a.set_memory_bytes(hold->share.memory_bytes);
  a.set_nvme_bytes(hold->share.nvme_bytes);
  a.set_nic_gbps(hold->share.nic_gbps);
  out.changes.push_back(store::change::PutHold{std::move(stored)});
  return out;
}

bool CountNodeFailure(NodeRecord* node, int64_t job_id, bool node_fault,
                      const BadNodePolicy& policy, absl::Time now_mono,
                      store::Changes* changes) {
  if (!node_fault || policy.jobs <= 0 || node->drained ||
      (node->drain_writing && node->drain_writing->drained)) {
    return false;
  }
  auto& failures = node->early_failures;
  failures.erase(std::remove_if(failures.begin(), failures.end(),
                                [&](const auto& f) {
                                  return now_mono - f.second > policy.window ||
                                         f.first == job_id;
                                }),
                 failures.end());
  failures.emplace_back(job_id, now_mono);
  if (static_cast<int>(failures.size()) < policy.jobs) return false;
  std::vector<std::string> ids;
  for (const auto& f : failures) ids.push_back(absl::StrCat(f.first));
  // The latest word: a resume still being written is superseded.
  node->drain_writing.reset();
  node->drained = true;
  node->drain_reason = absl::StrCat(
      "drained by the scheduler: ranks of ", failures.size(),
      " different jobs (", absl::StrJoin(ids, ", "),
      ") failed to start here for reasons of the node, in ",
      HumanDuration(policy.window),
      "; check the node (xlctl logs of those jobs), then xlctl resume ",
      node->name);
  failures.clear();
  changes->push_back(store::change::PutNode{StoredNodeOf(*node)});
  return true;
}

store::Changes BeginDrain(NodeRecord* node, bool drained,
                          const std::string& reason, uint64_t seq) {
  node->drain_writing =
      NodeRecord::DrainWrite{drained, drained ? reason : "", seq};
  store::Changes changes;
  changes.push_back(store::change::PutNode{StoredNodeOf(*node)});
  return changes;
}

bool CommitDrain(NodeRecord* node, uint64_t seq) {
  if (!node->drain_writing || node->drain_writing->seq != seq) {
    return false;  // a later drain or resume is on its way
  }
  node->drained = node->drain_writing->drained;
  node->drain_reason = node->drain_writing->reason;
  node->drain_writing.reset();
  node->early_failures.clear();
  return true;
}

}  // namespace xl::state
