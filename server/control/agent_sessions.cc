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
#include "server/state/node_life.h"

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

}  // namespace

absl::StatusOr<std::string> Controller::AgentRegister(
    const v1::Register& reg, std::shared_ptr<AgentConnection> conn) {
  // The message is checked before the lock: a hostile one stalls nobody.
  ASSIGN_OR_RETURN(const std::string name, state::CheckRegister(reg));
  std::shared_ptr<AgentConnection> replaced;
  {
    absl::MutexLock lock(&mu_);
    auto registered = state::Register(&model_, name, reg, conn,
                                      opts_.heartbeat_timeout, Now());
    if (!registered.ok()) return registered.status();
    NodeRecord& node = *registered->node;
    replaced = std::move(registered->replaced);
    capacity_freed_ = true;
    pass_needed_ = true;
    wake_ = true;
    Log(absl::StrCat("node ", name, " registered from ", node.address, " (",
                     node.inventory.gpus_size(), " GPUs, ",
                     node.inventory.cpus(), " CPUs)",
                     registered->was_lost ? " after being lost" : "",
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
  node->foreign_ranks.clear();
  // Ranks the node holds that the agent does not know of: gone.
  const std::vector<state::RankRef> missing =
      state::UnreportedRanks(&model_, *node, reg, parked_jobs_);
  // What the agent reports, through the same fences as live messages.
  for (const auto& st : reg.ranks()) HandleRankStatus(node, st);
  // Sorted as the reported statuses left the jobs, before anything fails.
  const state::Unreported gone = state::SortUnreported(model_, missing);
  for (const state::RankRef& m : missing) {
    ReleaseRank(node, m.job, m.attempt, m.rank);
  }
  for (auto& [id, ranks] : gone.vanished) {
    JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr || rec->stopping) continue;
    rec->job.set_exit_code(-1);
    FailAttempt(rec,
                absl::StrCat("rank(s) ", absl::StrJoin(ranks, ", "), " on ",
                             node->name,
                             " were not running when its agent reconnected"),
                /*spend_retry=*/true);
  }
  for (auto& [id, ranks] : gone.undelivered) {
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
  const state::RankStatusKind kind = state::KindOf(model_, *node, st);
  if (kind.kind == state::RankStatusKind::kOther) return;
  const int64_t id = state::JobTable::ParseId(st.job_id());
  JobRecord* rec = model_.jobs.Find(id);
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
  switch (kind.kind) {
    case state::RankStatusKind::kOther:
      return;
    case state::RankStatusKind::kRunningUnknown:
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
    case state::RankStatusKind::kRunningStale:
      // A rank of an attempt that is over: stop it; its hold stays until
      // it has exited.
      stop("attempt is over");
      return;
    case state::RankStatusKind::kRunning: {
      auto step = state::RankRunning(&model_, rec, st, Now());
      if (!step.ok() || !step->events.empty()) Recorded(rec, &step);
      return;
    }
    case state::RankStatusKind::kExitNotHeld:
      if (!st.processes_remaining() && node->foreign_ranks.erase(foreign) > 0) {
        capacity_freed_ = true;
        pass_needed_ = true;
        wake_ = true;
      }
      return;  // not this node's, or already released
    case state::RankStatusKind::kExitHeld:
      break;
  }
  const bool current = kind.current;
  // What the rank wrote before its exit is shown before the exit's
  // outcome: the exit waits (at most log_settle) for that output to be
  // stored, and the job's exits after it wait behind it (the first rank to
  // fail is the one the job's reason names).
  if (current && !settled) {
    if (!rec->parked_exits.empty() || state::OutputBehind(*rec, st)) {
      rec->parked_exits.push_back(
          {node->name, st, clock_->MonotonicNow() + opts_.log_settle});
      parked_jobs_.insert(id);
      return;
    }
  }
  // The outcome counts at the first exit status; the resources only once
  // the rank's whole process group is gone.
  if (!st.processes_remaining()) {
    ReleaseRank(node, id, st.attempt(), st.rank());
  }
  if (!kind.first_exit) return;
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
  AvoidNode(rec, node->name);
  Effects effects;
  if (!state::CountNodeFailure(
          node, rec->id, node_fault,
          state::BadNodePolicy{opts_.bad_node_jobs, opts_.bad_node_window},
          clock_->MonotonicNow(), &effects.changes)) {
    return;
  }
  fprintf(stderr, "xl-scheduler: node %s: %s\n", node->name.c_str(),
          node->drain_reason.c_str());
  pass_needed_ = true;
  Apply(std::move(effects));
}

void Controller::ReleaseRank(NodeRecord* node, int64_t job_id, int32_t attempt,
                             int rank) {
  state::Released released =
      state::ReleaseRank(&model_, node->name, job_id, attempt, rank);
  if (released.changes.empty()) return;
  Effects effects;
  effects.changes = std::move(released.changes);
  Apply(std::move(effects));
  if (released.freed) {
    capacity_freed_ = true;
    pass_needed_ = true;
    wake_ = true;
  }
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
