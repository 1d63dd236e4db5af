// Agent sessions: registration and reconciliation (what the agent runs
// against what its node holds), heartbeats and leases, rank statuses fenced
// by node and attempt, node loss.
#include <algorithm>
#include <cstdio>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "common/status.h"
#include "common/text.h"
#include "server/control/controller.h"

namespace xl::control {
namespace {

void Log(const std::string& line) {
  fprintf(stderr, "xl-scheduler: %s\n", line.c_str());
}

v1::SchedulerMessage StopMessage(const std::string& job_id, int32_t attempt,
                                 const google::protobuf::Duration& grace,
                                 const std::string& why) {
  v1::SchedulerMessage msg;
  v1::StopJob* stop = msg.mutable_stop_job();
  stop->set_job_id(job_id);
  stop->set_attempt(attempt);
  *stop->mutable_grace_period() = grace;
  stop->set_reason(why);
  return msg;
}

using state::IsExit;

}  // namespace

absl::StatusOr<std::string> Controller::AgentRegister(
    const v1::Register& reg, std::shared_ptr<AgentConnection> conn) {
  std::string name = reg.name().empty() ? reg.inventory().hostname()
                                        : reg.name();
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
  RETURN_IF_ERROR(
      CheckNoControlCharacters(reg.inventory(), "register.inventory"));
  std::set<int> indices;
  for (int i = 0; i < reg.inventory().gpus_size(); ++i) {
    if (!indices.insert(reg.inventory().gpus(i).index()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "register.inventory.gpus[", i, "].index: ",
          reg.inventory().gpus(i).index(),
          " appears twice; give each GPU its own index"));
    }
  }
  if (reg.inventory().gpus_size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register.inventory.gpus: ", reg.inventory().gpus_size(),
        " GPUs; a node may have at most 64 (split it into several agents "
        "with --inventory)"));
  }
  std::shared_ptr<AgentConnection> replaced;
  {
    absl::MutexLock lock(&mu_);
    NodeRecord& node = model_.nodes.Upsert(name);
    // Another agent process claims a node whose session is alive: refuse,
    // or the two would free each other's resources. (The same process
    // reconnecting has the same instance id.)
    const absl::Duration heard = clock_->MonotonicNow() - node.last_heartbeat_mono;
    if (node.conn && node.conn != conn && !reg.instance_id().empty() &&
        !node.instance_id.empty() && node.instance_id != reg.instance_id() &&
        heard < opts_.heartbeat_timeout) {
      return absl::AlreadyExistsError(absl::StrCat(
          "register.name: node ", name, " is already served by another "
          "xl-agent (heard from ", HumanDuration(heard), " ago, from ",
          node.address, "); give this agent its own --name, or stop the "
          "other one"));
    }
    node.instance_id = reg.instance_id();
    if (node.conn && node.conn != conn) replaced = node.conn;
    const bool was_lost = node.lost;
    node.inventory = reg.inventory();
    node.info = scheduler::NodeInfo::FromInventory(name, reg.inventory());
    node.address = reg.inventory().address().empty() ? conn->PeerAddress()
                                                     : reg.inventory().address();
    node.conn = conn;
    node.lost = false;
    node.lost_reason.clear();
    node.last_heartbeat_mono = clock_->MonotonicNow();
    node.last_heartbeat_wall = clock_->Now();
    node.register_time = clock_->Now();
    node.agent_version = reg.agent_version();
    node.shared_env = reg.shared_env();
    node.honours_lease = reg.honours_lease();
    model_.ledger.SetNode(node.info);
    capacity_freed_ = true;
    pass_needed_ = true;
    wake_ = true;
    Log(absl::StrCat("node ", name, " registered from ", node.address, " (",
                     node.inventory.gpus_size(), " GPUs, ",
                     node.inventory.cpus(), " CPUs)",
                     was_lost ? " after being lost" : "",
                     degraded_ ? " (degraded: not reconciled)" : ""));

    v1::SchedulerMessage ack;
    v1::RegisterAck* a = ack.mutable_register_ack();
    a->set_node(name);
    *a->mutable_heartbeat_interval() = ToProtoDuration(opts_.heartbeat_interval);
    a->set_log_acks(true);
    *a->mutable_lease() = ToProtoDuration(opts_.lease);
    conn->Send(ack);
    // In degraded mode the agent is kept alive (its lease renewed) but
    // nothing it reports is acted on; it registers again after the reload.
    if (!degraded_) {
      PersistNode(node, nullptr);
      Reconcile(&node, reg);
    }
  }
  if (replaced) replaced->Close("replaced by a newer session of this node");
  return name;
}

void Controller::Reconcile(NodeRecord* node, const v1::Register& reg) {
  // Exits the node reported before wait on for their output as they were:
  // it sends what was not acknowledged again after this Register, and the
  // exits it reports now queue behind them. They count as reported.
  std::set<std::tuple<int64_t, int32_t, int32_t>> reported;
  for (const auto& st : reg.ranks()) {
    reported.insert(
        {state::JobTable::ParseId(st.job_id()), st.attempt(), st.rank()});
  }
  for (int64_t id : parked_jobs_) {
    JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr) continue;
    for (auto& p : rec->parked_exits) {
      if (p.node != node->name) continue;
      const auto key = std::make_tuple(id, p.status.attempt(), p.status.rank());
      // Not reported any more (its agent's state was wiped): nothing of
      // it runs there, so its resources go when the exit is acted on.
      if (reported.count(key) == 0) p.status.set_processes_remaining(false);
      reported.insert(key);
    }
  }
  node->foreign_ranks.clear();
  // Ranks the node holds that the agent does not know of: gone.
  struct Missing {
    int64_t job;
    int32_t attempt;
    int rank;
  };
  std::vector<Missing> missing;
  for (const state::Hold& hold : model_.ledger.Holds(node->name)) {
    for (int rank : hold.live_ranks) {
      if (reported.count({hold.job_id, hold.attempt, rank}) == 0) {
        missing.push_back({hold.job_id, hold.attempt, rank});
      }
    }
  }
  // What the agent reports, through the same fences as live messages.
  for (const auto& st : reg.ranks()) HandleRankStatus(node, st);
  std::map<int64_t, std::vector<int>> undelivered, vanished;
  for (const Missing& m : missing) {
    JobRecord* rec = model_.jobs.Find(m.job);
    const bool current = rec != nullptr && rec->job.attempt() == m.attempt &&
                         state::JobTable::IsActive(rec->job.state()) &&
                         !rec->stopping;
    ReleaseRank(node, m.job, m.attempt, m.rank);
    if (!current) continue;
    if (rec->ranks.count(m.rank) == 0) {
      // Never reported by the agent: the StartRanks never reached it.
      undelivered[m.job].push_back(m.rank);
    } else if (!IsExit(rec->ranks[m.rank])) {
      vanished[m.job].push_back(m.rank);
    }
  }
  for (auto& [id, ranks] : vanished) {
    JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr || rec->stopping) continue;
    rec->job.set_exit_code(-1);
    FailAttempt(rec,
                absl::StrCat("rank(s) ", absl::StrJoin(ranks, ", "), " on ",
                             node->name,
                             " were not running when its agent reconnected"),
                /*spend_retry=*/true);
  }
  for (auto& [id, ranks] : undelivered) {
    JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr || rec->stopping ||
        !state::JobTable::IsActive(rec->job.state())) {
      continue;
    }
    FailAttempt(rec,
                absl::StrCat("rank(s) ", absl::StrJoin(ranks, ", "), " never "
                             "reached ", node->name,
                             " (its agent reconnected without them)"),
                /*spend_retry=*/false);
  }
}

void Controller::HandleRankStatus(NodeRecord* node, const v1::RankStatus& st,
                                  bool settled) {
  const int64_t id = state::JobTable::ParseId(st.job_id());
  JobRecord* rec = model_.jobs.Find(id);
  const state::Hold* hold = model_.ledger.FindHold(node->name, id, st.attempt());
  const bool held = hold != nullptr && hold->live_ranks.count(st.rank()) > 0;
  const bool current = rec != nullptr && rec->job.attempt() == st.attempt() &&
                       state::JobTable::IsActive(rec->job.state()) &&
                       !rec->stopping;
  const auto foreign = std::make_tuple(id, st.attempt(), st.rank());
  // A stop goes out only after every write queued so far has committed:
  // the change that made this attempt stale may still fail to be recorded.
  auto stop = [&](const std::string& why) {
    if (!node->conn) return;
    SendAfterCommits({{node->conn,
                       StopMessage(st.job_id(), st.attempt(),
                                   rec != nullptr
                                       ? rec->job.spec().grace_period()
                                       : ToProtoDuration(absl::Seconds(10)),
                                   why)}});
  };
  if (st.state() == v1::RANK_RUNNING) {
    if (!held) {
      // Running, and nothing on this node accounts for it: stop it, and
      // take no work here until it is gone.
      if (node->foreign_ranks.insert(foreign).second) {
        Log(absl::StrCat("node ", node->name, " runs job ", st.job_id(),
                         " attempt ", st.attempt(), " rank ", st.rank(),
                         " that it holds nothing for; stopping it"));
        pass_needed_ = true;
      }
      stop("the scheduler has no record of this rank on this node");
      return;
    }
    if (!current) {
      // A rank of an attempt that is over: stop it; its hold stays until
      // it has exited.
      stop("attempt is over");
      return;
    }
    auto step = state::RankRunning(&model_, rec, st, Now());
    if (!step.ok() || !step->events.empty()) Recorded(rec, &step);
    return;
  }
  if (!IsExit(st)) return;
  if (!held) {
    if (!st.processes_remaining() && node->foreign_ranks.erase(foreign) > 0) {
      capacity_freed_ = true;
      pass_needed_ = true;
      wake_ = true;
    }
    return;  // not this node's, or already released
  }
  // What the rank wrote before its exit is shown before the exit's
  // outcome: the exit waits (at most log_settle) for that output to be
  // stored, and the job's exits after it wait behind it (the first rank to
  // fail is the one the job's reason names).
  if (current && !settled) {
    if (!rec->parked_exits.empty() || OutputBehind(*rec, st)) {
      rec->parked_exits.push_back(
          {node->name, st, clock_->MonotonicNow() + opts_.log_settle});
      parked_jobs_.insert(id);
      return;
    }
  }
  // The outcome counts at the first exit status; the resources only once
  // the rank's whole process group is gone.
  const bool first_exit =
      current && (rec->ranks.count(st.rank()) == 0 ||
                  !IsExit(rec->ranks[st.rank()]));
  if (!st.processes_remaining()) {
    ReleaseRank(node, id, st.attempt(), st.rank());
  }
  if (!first_exit) return;
  state::ExitOutcome outcome = state::CountExit(rec, node->name, st);
  switch (outcome.kind) {
    case state::ExitOutcome::kRankDone: {
      // One row, not the whole job: O(1) per rank however large the gang.
      Effects effects;
      effects.changes.push_back(store::change::PutRankExit{
          id, rec->job.attempt(), std::move(outcome.exit)});
      Apply(std::move(effects));
      return;
    }
    case state::ExitOutcome::kJobSucceeded:
      EndJob(rec, v1::SUCCEEDED, outcome.why);
      return;
    case state::ExitOutcome::kRequeue:
      FailAttempt(rec, outcome.why, /*spend_retry=*/false);
      return;
    case state::ExitOutcome::kFailed:
      // Only what the agent puts down to the node counts against it: a job
      // whose command is wrong, or that crashes at once, fails the same on
      // every node, and must not drain them.
      NoteRankFailure(node, rec, outcome.node_fault);
      FailAttempt(rec, outcome.why, /*spend_retry=*/true);
      return;
  }
}

void Controller::AvoidNode(JobRecord* rec, const std::string& node) {
  if (opts_.avoid_failed_node <= absl::ZeroDuration()) return;
  v1::ResourceRequest avoiding = rec->job.spec().resources();
  bool listed = false;
  for (const std::string& n : avoiding.exclude_nodes()) listed |= n == node;
  if (!listed) avoiding.add_exclude_nodes(node);
  rec->avoiding = model_.jobs.Intern(avoiding);
  rec->avoid_until_mono = clock_->MonotonicNow() + opts_.avoid_failed_node;
}

void Controller::NoteRankFailure(NodeRecord* node, JobRecord* rec,
                                 bool node_fault) {
  const absl::Time now = clock_->MonotonicNow();
  AvoidNode(rec, node->name);
  if (!node_fault || opts_.bad_node_jobs <= 0 || node->drained ||
      (node->drain_writing && node->drain_writing->drained)) {
    return;
  }
  auto& failures = node->early_failures;
  failures.erase(std::remove_if(failures.begin(), failures.end(),
                                [&](const auto& f) {
                                  return now - f.second >
                                             opts_.bad_node_window ||
                                         f.first == rec->id;
                                }),
                 failures.end());
  failures.emplace_back(rec->id, now);
  if (static_cast<int>(failures.size()) < opts_.bad_node_jobs) return;
  std::vector<std::string> ids;
  for (const auto& f : failures) ids.push_back(absl::StrCat(f.first));
  // The latest word: a resume still being written is superseded. (Taken
  // into the model at once: it only stops new work on the node.)
  node->drain_writing.reset();
  node->drained = true;
  node->drain_reason = absl::StrCat(
      "drained by the scheduler: ranks of ", failures.size(),
      " different jobs (", absl::StrJoin(ids, ", "),
      ") failed to start here for reasons of the node, in ",
      HumanDuration(opts_.bad_node_window),
      "; check the node (xlctl logs of those jobs), then xlctl resume ",
      node->name);
  failures.clear();
  fprintf(stderr, "xl-scheduler: node %s: %s\n", node->name.c_str(),
          node->drain_reason.c_str());
  pass_needed_ = true;
  PersistNode(*node, nullptr);
}

void Controller::ReleaseRank(NodeRecord* node, int64_t job_id, int32_t attempt,
                             int rank) {
  bool found = false;
  const bool freed = model_.ledger.ReleaseRank(node->name, job_id, attempt, rank,
                                         &found);
  if (!found) return;
  if (freed) {
    const std::string name = node->name;
    Effects effects;
    effects.changes.push_back(store::change::DeleteHold{name, job_id, attempt});
    Apply(std::move(effects));
    capacity_freed_ = true;
    pass_needed_ = true;
    wake_ = true;
    return;
  }
  const state::Hold* hold = model_.ledger.FindHold(node->name, job_id, attempt);
  if (hold == nullptr) return;
  store::StoredHold stored;
  stored.job_id = job_id;
  stored.attempt = attempt;
  v1::Allocation& a = stored.allocation;
  a.set_node(node->name);
  for (int32_t g : hold->share.gpu_indices) a.add_gpu_indices(g);
  for (int r : hold->live_ranks) a.add_ranks(r);
  a.set_cpus(hold->share.cpus);
  a.set_memory_bytes(hold->share.memory_bytes);
  a.set_nvme_bytes(hold->share.nvme_bytes);
  a.set_nic_gbps(hold->share.nic_gbps);
  Effects effects;
  effects.changes.push_back(store::change::PutHold{std::move(stored)});
  Apply(std::move(effects));
}

void Controller::NodeLost(NodeRecord* node, const std::string& why) {
  // Exits the node reported count before its loss does.
  SettleExitsOfLostNode(node->name);
  node->lost = true;
  node->lost_reason = why;
  Log(absl::StrCat("node ", node->name, " lost: ", why));
  if (node->conn) {
    auto conn = std::move(node->conn);
    node->conn.reset();
    conn->Close(why);
  }
  // The holds stay: whatever still runs there keeps its resources until the
  // node comes back and reports it gone.
  std::set<int64_t> jobs;
  for (const state::Hold& hold : model_.ledger.Holds(node->name)) {
    JobRecord* rec = model_.jobs.Find(hold.job_id);
    if (rec != nullptr && rec->job.attempt() == hold.attempt &&
        state::JobTable::IsActive(rec->job.state()) && !rec->stopping) {
      jobs.insert(hold.job_id);
    }
  }
  for (int64_t id : jobs) {
    JobRecord* rec = model_.jobs.Find(id);
    // The node's agent stops the ranks when its lease runs out (at the
    // latest now) and kills them after the grace period: the next attempt
    // waits for that, plus a heartbeat for the clocks' difference.
    AvoidNode(rec, node->name);
    FailAttempt(rec, absl::StrCat("node ", node->name, " was lost: ", why),
                /*spend_retry=*/true, LostNodeFence(*rec));
  }
  pass_needed_ = true;
}

void Controller::AgentMessage(const std::string& name,
                              const AgentConnection* conn,
                              const v1::AgentMessage& msg) {
  absl::MutexLock lock(&mu_);
  NodeRecord* node = model_.nodes.Find(name);
  if (node == nullptr || node->conn.get() != conn) return;
  node->last_heartbeat_mono = clock_->MonotonicNow();
  node->last_heartbeat_wall = clock_->Now();
  if (msg.msg_case() == v1::AgentMessage::kHeartbeat) {
    // Renews the agent's lease, also in degraded mode: a full disk is no
    // reason to stop training.
    v1::SchedulerMessage ack;
    ack.mutable_heartbeat_ack()->set_seq(msg.heartbeat().seq());
    node->conn->Send(ack);
    const absl::Duration stalled =
        absl::Milliseconds(msg.heartbeat().supervisor_stalled_ms());
    if ((node->supervisor_stalled >= state::kStalledSupervisor) !=
        (stalled >= state::kStalledSupervisor)) {
      Log(absl::StrCat("node ", node->name, ": its agent's supervisor ",
                       stalled >= state::kStalledSupervisor
                           ? absl::StrCat("has not run for ",
                                          HumanDuration(stalled),
                                          "; no new work there")
                           : std::string("runs again")));
      // Back: what it has is free for pending jobs again.
      capacity_freed_ = true;
      pass_needed_ = true;
    }
    node->supervisor_stalled = stalled;
    return;
  }
  // Degraded: nothing is acted on. Statuses come again in the Register
  // after the reload; unacknowledged output is sent again.
  if (degraded_) return;
  switch (msg.msg_case()) {
    case v1::AgentMessage::kRankStatus:
      HandleRankStatus(node, msg.rank_status());
      break;
    case v1::AgentMessage::kMetrics:
      HandleMetrics(node, msg.metrics());
      break;
    case v1::AgentMessage::kLog:
      HandleLog(node, msg);
      break;
    default:
      break;
  }
}

void Controller::AgentDisconnected(const std::string& node,
                                   std::shared_ptr<AgentConnection> conn) {
  absl::MutexLock lock(&disconnect_mu_);
  disconnects_.emplace_back(node, std::move(conn));
}

}  // namespace xl::control
