#include "server/state/lifecycle.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"

namespace xl::state {
namespace {

absl::Status Refused(const JobRecord& rec, v1::JobState to) {
  return absl::FailedPreconditionError(absl::StrCat(
      "job ", rec.id, ": ", v1::JobState_Name(rec.job.state()), " -> ",
      v1::JobState_Name(to), " is not a transition a job may take"));
}

// The attempt is over in the model: its master port is free again.
void CloseAttempt(Model* model, JobRecord* rec, Step* step) {
  v1::Job& job = rec->job;
  if (job.master_port() > 0) {
    model->ports.Release(job.master_addr(), job.master_port());
  }
  step->attempt_closed = true;
}

}  // namespace

store::Changes JobChanges(std::shared_ptr<const v1::Job> job,
                          std::vector<v1::JobEvent> events) {
  store::Changes changes;
  changes.reserve(1 + events.size());
  changes.push_back(store::change::PutJob{std::move(job)});
  for (auto& e : events) {
    changes.push_back(store::change::AddEvent{std::move(e)});
  }
  return changes;
}

Sends StopMessages(const Model& model, const JobRecord& rec,
                   const std::string& why) {
  Sends sends;
  for (const auto& a : rec.job.allocations()) {
    const NodeRecord* node = model.nodes.Find(a.node());
    if (node == nullptr || !node->conn) continue;
    v1::SchedulerMessage msg;
    v1::StopJob* stop = msg.mutable_stop_job();
    stop->set_job_id(rec.job.id());
    stop->set_attempt(rec.job.attempt());
    *stop->mutable_grace_period() = rec.job.spec().grace_period();
    stop->set_reason(why);
    sends.emplace_back(node->conn, std::move(msg));
  }
  return sends;
}

JobRecord Submitted(Model* model, Submission submission, Now now) {
  JobRecord rec;
  rec.id = model->jobs.TakeId();
  v1::Job& job = rec.job;
  job.set_id(absl::StrCat(rec.id));
  job.set_user(submission.user);
  job.set_memory_derived(submission.memory_derived);
  job.set_state(v1::PENDING);
  job.set_attempt(1);
  job.set_idempotency_key(submission.idempotency_key);
  job.set_world_size(submission.spec.resources().nodes() *
                     submission.spec.resources().ranks_per_node());
  *job.mutable_create_time() = ToProtoTime(now.wall);
  job.set_reason("waiting for the next scheduling pass");
  if (submission.plan.parameters() > 0) {
    *job.mutable_plan() = std::move(submission.plan);
  }
  *job.mutable_spec() = std::move(submission.spec);
  rec.request = model->jobs.Intern(job.spec().resources());
  v1::JobEvent e;
  e.set_job_id(job.id());
  e.set_seq(1);
  *e.mutable_time() = job.create_time();
  e.set_to_state(v1::PENDING);
  e.set_attempt(1);
  e.set_reason(absl::StrCat("submitted by ", submission.user));
  rec.events.push_back(std::move(e));
  if (!submission.idempotency_key.empty()) {
    model->jobs.keys()[JobTable::ScopedKey(
        submission.user, submission.idempotency_key)] = rec.id;
  }
  return rec;
}

absl::StatusOr<Step> Start(Model* model, JobRecord* rec,
                           scheduler::Placement placement,
                           const std::string& token, Now now) {
  if (!JobTable::Allowed(rec->job.state(), v1::SCHEDULED)) {
    return Refused(*rec, v1::SCHEDULED);
  }
  if (placement.shares.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", rec->id, ": a placement with no nodes"));
  }
  v1::Job& job = rec->job;
  const int rpn = job.spec().resources().ranks_per_node();
  // Rank 0 stays on the node it was on where that node is in the new
  // placement (the ring rotated): a checkpoint rank 0 wrote to the node's
  // scratch is found again after a requeue or an elastic resize.
  if (!rec->last_first_node.empty()) {
    auto first = std::find_if(placement.shares.begin(), placement.shares.end(),
                              [&](const scheduler::NodeShare& s) {
                                return s.node == rec->last_first_node;
                              });
    std::rotate(placement.shares.begin(), first, placement.shares.end());
  }
  Step step;
  rec->restart_request.reset();
  // An elastic job's world is the nodes it got.
  job.set_world_size(static_cast<int32_t>(placement.shares.size()) * rpn);
  job.clear_allocations();
  job.clear_rank_exits();
  std::vector<std::string> names;
  for (size_t g = 0; g < placement.shares.size(); ++g) {
    const auto& share = placement.shares[g];
    const NodeRecord* node = model->nodes.Find(share.node);
    names.push_back(share.node);
    v1::Allocation* a = job.add_allocations();
    a->set_node(share.node);
    for (int32_t gpu : share.gpu_indices) a->add_gpu_indices(gpu);
    a->set_group_rank(static_cast<int32_t>(g));
    a->set_address(node != nullptr ? node->address : "");
    a->set_cpus(share.cpus);
    a->set_memory_bytes(share.memory_bytes);
    a->set_nvme_bytes(share.nvme_bytes);
    a->set_nic_gbps(share.nic_gbps);
    Hold hold;
    hold.job_id = rec->id;
    hold.attempt = job.attempt();
    hold.share = share;
    for (int l = 0; l < rpn; ++l) {
      int rank = static_cast<int>(g) * rpn + l;
      a->add_ranks(rank);
      hold.live_ranks.insert(rank);
      hold.all_ranks.push_back(rank);
    }
    model->ledger.AddHold(share.node, std::move(hold));
    step.holds.push_back({rec->id, job.attempt(), *a});
  }
  job.set_master_addr(job.allocations(0).address());
  job.set_master_port(model->ports.Allocate(job.master_addr()));
  *job.mutable_start_time() = ToProtoTime(now.wall);
  rec->start_mono = now.mono;
  job.clear_end_time();
  job.set_exit_code(0);
  rec->ranks.clear();
  rec->ranks_succeeded = 0;
  rec->stopping = false;
  rec->token = token;
  auto e = model->jobs.Transition(
      rec, v1::SCHEDULED,
      absl::StrCat("placed on ", absl::StrJoin(names, ", ")), now.wall);
  if (!e.ok()) return e.status();  // checked above: not expected
  step.events.push_back(*std::move(e));
  step.extra.push_back(store::change::PutToken{rec->id, token});
  for (const auto& h : step.holds) {
    step.extra.push_back(store::change::PutHold{h});
  }
  return step;
}

absl::StatusOr<Step> End(Model* model, JobRecord* rec, v1::JobState to,
                         const std::string& reason, Now now) {
  if (!JobTable::Allowed(rec->job.state(), to)) return Refused(*rec, to);
  const bool was_active = JobTable::IsActive(rec->job.state());
  Step step;
  if (was_active && to != v1::SUCCEEDED) {
    step.stops = StopMessages(*model, *rec, reason);
  }
  auto e = model->jobs.Transition(rec, to, reason, now.wall);
  if (!e.ok()) return e.status();
  step.events.push_back(*std::move(e));
  if (was_active) {
    rec->stopping = true;
    CloseAttempt(model, rec, &step);
  }
  return step;
}

absl::StatusOr<Step> EndAttempt(Model* model, JobRecord* rec,
                                const Requeue& requeue, Now now) {
  v1::Job& job = rec->job;
  const int used = job.retries_used();
  if (requeue.spend_retry && used >= job.spec().max_retries()) {
    std::string reason = requeue.why;
    if (job.spec().max_retries() > 0) {
      absl::StrAppend(&reason, "; no retries left (max_retries ",
                      job.spec().max_retries(), ")");
    }
    return End(model, rec, v1::FAILED, reason, now);
  }
  const v1::JobState first = requeue.preempted ? v1::PREEMPTED : v1::PENDING;
  if (!JobTable::Allowed(job.state(), first)) return Refused(*rec, first);
  Step step;
  step.stops = StopMessages(*model, *rec, requeue.why);
  if (requeue.preempted) {
    auto ended =
        model->jobs.Transition(rec, v1::PREEMPTED, requeue.why, now.wall);
    if (!ended.ok()) return ended.status();
    step.events.push_back(*std::move(ended));
    job.set_preemptions(job.preemptions() + 1);
  }
  std::string reason =
      requeue.spend_retry
          ? absl::StrCat(requeue.why, "; requeued as attempt ",
                         job.attempt() + 1, " (retry ", used + 1, " of ",
                         job.spec().max_retries(), ")")
          : absl::StrCat(requeue.why, "; requeued as attempt ",
                         job.attempt() + 1, " without spending a retry");
  CloseAttempt(model, rec, &step);
  if (job.allocations_size() > 0) {
    rec->last_first_node = job.allocations(0).node();
  }
  if (requeue.spend_retry) job.set_retries_used(used + 1);
  job.set_attempt(job.attempt() + 1);
  job.clear_allocations();
  job.clear_master_addr();
  job.set_master_port(0);
  job.clear_start_time();
  job.clear_rank_exits();
  rec->ranks.clear();
  rec->ranks_succeeded = 0;
  rec->stopping = false;
  rec->token.clear();
  if (requeue.fence > absl::ZeroDuration()) {
    rec->eligible_mono = now.mono + requeue.fence;
    absl::StrAppend(&reason, "; it starts again no sooner than ",
                    HumanDuration(requeue.fence),
                    " from now, once the lost node's agent has surely "
                    "stopped its ranks (its lease ran out)");
  }
  auto e = model->jobs.Transition(rec, v1::PENDING, reason, now.wall);
  if (!e.ok()) return e.status();
  step.events.push_back(*std::move(e));
  step.requeued = true;
  return step;
}

bool IsExit(const v1::RankStatus& st) {
  return st.state() == v1::RANK_EXITED ||
         st.state() == v1::RANK_FAILED_TO_START;
}

absl::StatusOr<Step> RankRunning(Model* model, JobRecord* rec,
                                 const v1::RankStatus& st, Now now) {
  Step step;
  // An exit already counted stays counted: a restarted agent reports the
  // rank running until it has said the exit again (its output first).
  if (auto known = rec->ranks.find(st.rank());
      known != rec->ranks.end() && IsExit(known->second)) {
    return step;
  }
  rec->ranks[st.rank()] = st;
  if (rec->job.state() != v1::SCHEDULED ||
      static_cast<int>(rec->ranks.size()) != rec->job.world_size()) {
    return step;
  }
  auto e = model->jobs.Transition(
      rec, v1::RUNNING,
      absl::StrCat("all ", rec->job.world_size(), " ranks running"), now.wall);
  if (!e.ok()) return e.status();
  step.events.push_back(*std::move(e));
  return step;
}

ExitOutcome CountExit(JobRecord* rec, const std::string& node,
                      const v1::RankStatus& st) {
  rec->ranks[st.rank()] = st;
  ExitOutcome out;
  v1::RankExit& exit = out.exit;
  exit.set_rank(st.rank());
  exit.set_node(node);
  exit.set_exit_code(st.exit_code());
  exit.set_signal(st.signal());
  exit.set_failed_to_start(st.state() == v1::RANK_FAILED_TO_START);
  exit.set_message(st.message());
  exit.set_peak_memory_bytes(st.peak_memory_bytes());
  *rec->job.add_rank_exits() = exit;
  const std::string rank = absl::StrCat("rank ", st.rank(), " on ", node);
  if (st.state() == v1::RANK_EXITED && st.exit_code() == 0 &&
      st.signal() == 0) {
    const int done = ++rec->ranks_succeeded;
    if (done == rec->job.world_size()) {
      out.kind = ExitOutcome::kJobSucceeded;
      out.why = absl::StrCat("all ", done, " ranks exited with code 0");
    }
    return out;
  }
  out.kind = ExitOutcome::kFailed;
  if (st.state() == v1::RANK_FAILED_TO_START) {
    out.why = absl::StrCat(rank, " failed to start: ", st.message());
    out.node_fault = st.node_fault();
    rec->job.set_exit_code(127);
  } else if (st.stopped_by_agent()) {
    // Not the job's doing: the scheduler was out of reach (or the agent
    // shut down).
    out.kind = ExitOutcome::kRequeue;
    out.why = absl::StrCat(rank, " ", st.message());
    rec->job.set_exit_code(st.exit_code());
  } else if (st.signal() != 0) {
    out.why = absl::StrCat(rank, " was killed by signal ", st.signal());
    // The agent's words, when they say more than the signal (the OOM
    // killer and the memory limit, for one).
    if (!st.message().empty() &&
        !absl::StartsWith(st.message(), "killed by signal")) {
      absl::StrAppend(&out.why, " (", st.message(), ")");
    }
    rec->job.set_exit_code(128 + st.signal());
  } else {
    out.why = absl::StrCat(rank, " exited with code ", st.exit_code());
    if (!st.message().empty()) {
      absl::StrAppend(&out.why, " (", st.message(), ")");
    }
    rec->job.set_exit_code(st.exit_code());
  }
  return out;
}

}  // namespace xl::state
