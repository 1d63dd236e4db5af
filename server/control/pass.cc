// The scheduling pass as the controller runs it: the snapshot of the
// model a pass (or a dry run, or the estimator) decides on, and the
// decisions applied to the model afterwards (starts checked again,
// preemptions, reservations and reasons kept for readers). Dry runs are in
// dry_run.cc.
#include <algorithm>
#include <unordered_set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "server/control/controller.h"
#include "server/scheduler/schedule.h"

namespace xl::control {

bool Controller::AnyElasticShort() const {
  for (int64_t id : model_.jobs.active()) {
    const JobRecord* rec = model_.jobs.Find(id);
    if (rec != nullptr && !rec->stopping &&
        rec->job.spec().resources().min_nodes() > 0 &&
        rec->job.allocations_size() < rec->job.spec().resources().nodes()) {
      return true;
    }
  }
  return false;
}

bool Controller::BuildSnapshot(scheduler::ClusterSnapshot* snapshot,
                               std::vector<scheduler::JobRequest>* queue) {
  const absl::Time now = clock_->MonotonicNow();
  const absl::Time mono_now = now;
  const absl::Time wall_now = clock_->Now();
  // Jobs whose dependencies can never succeed end FAILED after the scan
  // (ending one changes the pending index being walked).
  std::vector<std::pair<int64_t, std::string>> unsatisfiable;
  // Effective priorities: fair share per (queue, user), computed once.
  const ShareInputs& shares = Shares();
  const scheduler::FairShare fs(shares.weights, shares.queue_usage,
                                shares.user_usage, shares.active_users);
  std::map<std::pair<std::string, std::string>, double> factors;
  auto add = [&](const JobRecord* rec) {
    if (rec == nullptr || rec->job.state() != v1::PENDING) return;
    if (rec->eligible_mono > now) {
      next_eligible_mono_ = std::min(next_eligible_mono_, rec->eligible_mono);
      return;
    }
    if (rec->job.spec().after_ok_size() > 0) {
      std::string failed;
      if (!DependencyWait(*rec, &failed).empty()) return;
      if (!failed.empty()) {
        unsatisfiable.emplace_back(rec->id, std::move(failed));
        return;
      }
    }
    // A topology limit with a wait (--switches=N@wait) relaxes after it.
    if (rec->relaxed == nullptr && SwitchLimitRelaxed(*rec, wall_now)) {
      v1::ResourceRequest relaxed = rec->job.spec().resources();
      relaxed.set_max_switches(0);
      relaxed.clear_max_switches_wait();
      model_.jobs.Find(rec->id)->relaxed = model_.jobs.Intern(relaxed);
    }
    auto [f, added] =
        factors.emplace(std::make_pair(rec->as_request.queue,
                                       rec->as_request.user),
                        0.0);
    if (added) f->second = fs.Factor(f->first.first, f->first.second);
    queue->push_back(QueueEntry(*rec, f->second, wall_now, now));
  };
  full_pass_ = capacity_freed_;
  if (capacity_freed_) {
    queue->reserve(model_.jobs.pending().size());
    for (const auto& [key, rec] : model_.jobs.pending()) add(rec);
  } else {
    for (int64_t id : new_pending_) add(model_.jobs.Find(id));
  }
  capacity_freed_ = false;
  new_pending_.clear();
  for (auto& [id, why] : unsatisfiable) {
    if (JobRecord* rec = model_.jobs.Find(id)) EndJob(rec, v1::FAILED, why);
  }
  // A full pass with nothing pending still grows elastic jobs.
  const bool grow = full_pass_ && opts_.max_grows > 0 && AnyElasticShort();
  if (queue->empty() && !grow) return false;
  SnapshotCluster(fs, snapshot);
  if (grow) snapshot->max_grows = opts_.max_grows;
  // An elastic job short of nodes but too young to grow: a full pass when it
  // is old enough, so that the nodes free now are offered to it then rather
  // than at the next periodic pass. Only while nothing is pending: a queue
  // has periodic passes anyway (and a job that outranks it takes free nodes
  // first), and a busy fleet starting many elastic jobs must not add a full
  // pass for each.
  if (grow && model_.jobs.pending().empty()) {
    for (const scheduler::RunningGang& g : snapshot->running) {
      if (g.min_nodes > 0 && g.request != nullptr &&
          static_cast<int32_t>(g.nodes.size()) < g.request->nodes() &&
          g.ran < opts_.elastic_grow_after) {
        next_eligible_mono_ = std::min(
            next_eligible_mono_, now + (opts_.elastic_grow_after - g.ran));
      }
    }
  }
  for (const auto& req : *queue) ++snapshot->queues[req.queue].pending_jobs;
  for (auto it = preempting_.begin(); it != preempting_.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    preempt_holds_.erase(it->first);
    it = preempting_.erase(it);
  }
  // A full pass decides reservations again, but a preemptor's claim on
  // what its victims free stands, or whoever ranks first when those nodes
  // free (a victim requeued above it, say) takes them.
  if (full_pass_) {
    for (auto it = preempt_holds_.begin(); it != preempt_holds_.end();) {
      const JobRecord* rec = model_.jobs.Find(it->first);
      if (rec == nullptr || rec->job.state() != v1::PENDING) {
        preempting_.erase(it->first);
        it = preempt_holds_.erase(it);
        continue;
      }
      snapshot->holds.push_back(it->second.reservation);
      snapshot->holds.back().priority = EffectiveOf(
          *rec, fs.Factor(rec->job.spec().queue(), rec->job.user()), wall_now);
      ++it;
    }
  }
  // A full pass decides reservations again; a pass over new jobs keeps
  // those of jobs still pending.
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    int64_t id = 0;
    const JobRecord* rec =
        absl::SimpleAtoi(it->first, &id) ? model_.jobs.Find(id) : nullptr;
    if (rec == nullptr || rec->job.state() != v1::PENDING) {
      // Its nodes are free for others, and the next job may now get a
      // reservation: the next pass looks at the whole queue.
      it = reservations_.erase(it);
      capacity_freed_ = true;
      pass_needed_ = true;
      continue;
    }
    if (!full_pass_) {
      // Ranked by what the job's effective priority is now, as the jobs it
      // is compared with.
      snapshot->holds.push_back(it->second.reservation);
      snapshot->holds.back().priority = EffectiveOf(
          *rec, fs.Factor(rec->job.spec().queue(), rec->job.user()), wall_now);
    }
    ++it;
  }
  return true;
}

void Controller::FullPassQueue(const scheduler::FairShare& fs,
                               std::vector<scheduler::JobRequest>* queue) {
  const absl::Time now = clock_->MonotonicNow();
  const absl::Time wall_now = clock_->Now();
  // Fenced jobs and jobs waiting for their after_ok are not in it.
  for (const auto& [key, rec] : model_.jobs.pending()) {
    if (rec->eligible_mono > now) continue;
    if (rec->job.spec().after_ok_size() > 0) {
      std::string failed;
      if (!DependencyWait(*rec, &failed).empty() || !failed.empty()) {
        continue;
      }
    }
    queue->push_back(QueueEntry(
        *rec, fs.Factor(rec->job.spec().queue(), rec->job.user()), wall_now,
        now));
  }
}

void Controller::FullPassSnapshot(
    const scheduler::FairShare& fs,
    const std::vector<scheduler::JobRequest>& queue,
    scheduler::ClusterSnapshot* snapshot, bool shares) const {
  SnapshotCluster(fs, snapshot, shares);
  for (const auto& req : queue) ++snapshot->queues[req.queue].pending_jobs;
  // Preemptors' claims stand, as in a full pass.
  for (const auto& [id, held] : preempt_holds_) {
    snapshot->holds.push_back(held.reservation);
  }
}

void Controller::EstimateStarts() {
  scheduler::ClusterSnapshot snapshot;
  std::vector<scheduler::JobRequest> queue;
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (degraded_ || model_.jobs.pending().empty() || opts_.estimate_jobs <= 0) {
      estimates_.clear();
      return;
    }
    const ShareInputs& shares = Shares();
    const scheduler::FairShare fs(shares.weights, shares.queue_usage,
                                  shares.user_usage, shares.active_users);
    FullPassQueue(fs, &queue);
    // The running jobs' shares, whatever the pass's options need.
    FullPassSnapshot(fs, queue, &snapshot, /*shares=*/true);
    generation = generation_;
  }
  // Every blocked job in rank order gets a reservation, as the first few
  // do in a pass (the ends of running jobs and of the jobs reserved before
  // it): nothing is held or started by it. Preemption would only move the
  // estimates of the jobs a pass makes preempt (they have their own).
  snapshot.max_reservations = opts_.estimate_jobs;
  snapshot.preemption = false;
  snapshot.max_grows = 0;
  const absl::Time now = snapshot.now;
  // Jobs their queue's quota or per-user limit holds get no reservation:
  // they start when both their policy admits them (the pass says when the
  // running gangs counted against it have ended enough) and resources
  // free for them (a second pass without the queues' policies).
  snapshot.policy_frees = true;
  scheduler::ClusterSnapshot unlimited;
  std::vector<scheduler::JobRequest> all;
  if (!snapshot.policies.empty()) {
    unlimited = snapshot;
    unlimited.policies.clear();
    all = queue;
  }
  scheduler::Decisions d =
      scheduler::Schedule(std::move(snapshot), std::move(queue));
  scheduler::Decisions held;
  if (!d.job_reasons.empty()) {
    held = scheduler::Schedule(std::move(unlimited), std::move(all));
  }
  absl::MutexLock lock(&mu_);
  // The model was rebuilt meanwhile (a reload, a failed write): these
  // estimates are of another state.
  if (generation != generation_) return;
  estimates_.clear();
  for (const scheduler::Reservation& r : d.reservations) {
    estimates_[state::JobTable::ParseId(r.job_id)] = r.start;
  }
  // Those that would start now start in the next pass.
  for (const auto& [id, placement] : d.starts) {
    estimates_[state::JobTable::ParseId(id)] = now;
  }
  if (d.job_reasons.empty()) return;
  // When resources free for the jobs a policy holds (or that it narrowed
  // to some GPU models): now, or their reservation without the policies.
  std::unordered_map<std::string, absl::Time> resources_at;
  for (const scheduler::Reservation& r : held.reservations) {
    resources_at[r.job_id] = r.start;
  }
  for (const auto& [id, placement] : held.starts) resources_at[id] = now;
  std::unordered_map<std::string, absl::Time> policy_at(
      d.policy_frees_at.begin(), d.policy_frees_at.end());
  for (const auto& [id, why] : d.job_reasons) {
    auto r = resources_at.find(id);
    if (r == resources_at.end()) continue;
    absl::Time at = r->second;
    if (auto p = policy_at.find(id); p != policy_at.end()) {
      // Its policy never admits it as the running jobs end: no estimate.
      if (p->second == absl::InfiniteFuture()) continue;
      at = std::max(at, p->second);
    }
    estimates_.emplace(state::JobTable::ParseId(id), at);
  }
}

void Controller::SnapshotCluster(const scheduler::FairShare& fs,
                                 scheduler::ClusterSnapshot* snapshot,
                                 bool shares) const {
  const absl::Time mono_now = clock_->MonotonicNow();
  const absl::Time wall_now = clock_->Now();
  snapshot->nodes.reserve(model_.nodes.all().size());
  for (const auto& [name, node] : model_.nodes.all()) {
    const scheduler::NodeCapacity* cap = model_.ledger.Capacity(name);
    if (cap == nullptr || node.info == nullptr) continue;
    snapshot->nodes.push_back(*cap);
    snapshot->nodes.back().unavailable = state::NodeTable::Unavailable(node);
  }
  for (int64_t id : model_.jobs.active()) {
    const JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr) continue;
    scheduler::RunningGang gang;
    gang.job_id = rec->job.id();
    gang.priority = rec->job.spec().priority();
    gang.queue = rec->job.spec().queue();
    gang.user = rec->job.user();
    const int32_t min_nodes = rec->job.spec().resources().min_nodes();
    const bool elastic = min_nodes > 0;
    for (const auto& a : rec->job.allocations()) {
      gang.nodes.push_back(a.node());
      gang.gpus += a.gpu_indices_size();
      // What the ledger still holds for it there (ranks that ended early
      // gave theirs back already, and may not be given back twice); only
      // reservations and preemption read it.
      if (!shares && opts_.reservations == 0 && !opts_.preemption &&
          !elastic) {
        continue;
      }
      if (const state::Hold* hold =
              model_.ledger.FindHold(a.node(), id, rec->job.attempt())) {
        gang.shares.push_back(hold->share);
      }
    }
    absl::Duration limit = FromProto(rec->job.spec().time_limit());
    if (limit > absl::ZeroDuration()) {
      // On the clock the limit is enforced by (monotonic), moved to the
      // wall clock estimates are shown in: a clock step moves both alike.
      gang.expected_end =
          rec->start_mono != absl::InfinitePast()
              ? wall_now + (limit - (mono_now - rec->start_mono))
              : FromProto(rec->job.start_time()) + limit;
    }
    if (rec->start_mono != absl::InfinitePast()) {
      gang.ran = std::max(absl::ZeroDuration(), mono_now - rec->start_mono);
    }
    gang.grace = GraceOf(*rec);
    gang.rank = scheduler::EffectivePriority(
        gang.priority, fs.Factor(gang.queue, gang.user), absl::ZeroDuration(),
        opts_.priority_weights);
    // A gang with an exit waiting for its output is ending, not a victim.
    if (opts_.preemption && !rec->stopping && rec->parked_exits.empty() &&
        (!rec->job.spec().has_preemptible() ||
         rec->job.spec().preemptible().value())) {
      const v1::QueueSpec* q = QueueSpecOf(gang.queue);
      gang.preemptible =
          q == nullptr || gang.ran >= FromProto(q->min_runtime());
    }
    if (elastic) {
      gang.submit_seq = rec->as_request.submit_seq;
      gang.request = rec->request;
      gang.min_nodes = min_nodes;
      // Only while every node it has is connected and takes work: the
      // restart must be able to stop every old rank, and would not get
      // more than it has from a draining node.
      bool nodes_ok = true;
      for (const auto& a : rec->job.allocations()) {
        const NodeRecord* node = model_.nodes.Find(a.node());
        nodes_ok &= node != nullptr && node->conn != nullptr &&
                    state::NodeTable::Unavailable(*node).empty();
      }
      gang.may_grow = nodes_ok && !rec->stopping &&
                      rec->job.allocations_size() <
                          rec->job.spec().resources().nodes() &&
                      gang.ran >= opts_.elastic_grow_after;
    }
    scheduler::QueueUsage& usage = snapshot->queues[gang.queue];
    ++usage.running_jobs;
    usage.gpus_in_use += gang.gpus;
    if (policies_.count(gang.queue) > 0) {
      for (const auto& [model, n] : model_.nodes.GpuModelsOf(rec->job)) {
        usage.gpus_by_model[model] += n;
      }
      usage.user_gpus[gang.user] += gang.gpus;
    }
    snapshot->running.push_back(std::move(gang));
  }
  snapshot->now = wall_now;
  snapshot->policies = policies_;
  snapshot->preemption = opts_.preemption;
  snapshot->preempt_across_queues = opts_.preempt_across_queues;
  snapshot->max_reservations = opts_.reservations;
}

void Controller::ApplyDecisions(scheduler::Decisions decisions,
                                uint64_t generation) {
  if (generation != generation_ || degraded_) {
    // The model was rebuilt while the pass ran: decide again.
    capacity_freed_ = true;
    pass_needed_ = true;
    return;
  }
  // Reasons are kept per class (every job of a class waits for the same
  // thing) and shown when someone looks: a pass touches the jobs it starts,
  // not the ones it leaves waiting.
  if (full_pass_) {
    class_reasons_.clear();
    reservations_.clear();
    job_reasons_.clear();
    fragmented_gpus_ = std::max<int64_t>(0, decisions.fragmented_gpus);
  }
  for (auto& [job_id, reason] : decisions.job_reasons) {
    job_reasons_[job_id] = std::move(reason);
  }
  for (auto& [request, reason] : decisions.class_reasons) {
    class_reasons_[request.get()] = {request, reason};
  }
  for (const std::string& id : decisions.dropped_holds) {
    // It no longer stands (a node gone, or taken by a job that outranks
    // it): decide again over the whole queue. A preemptor's claim goes
    // too (it still waits for its victims), or every full pass would
    // bring it back and drop it again.
    reservations_.erase(id);
    preempt_holds_.erase(state::JobTable::ParseId(id));
    capacity_freed_ = true;
    pass_needed_ = true;
  }
  if (!decisions.reservations.empty()) {
    std::map<std::string, std::shared_ptr<const std::string>> reasons;
    for (auto& [job_id, reason] : decisions.waiting) {
      if (reason != nullptr) reasons.emplace(job_id, reason);
    }
    for (auto& r : decisions.reservations) {
      const std::string id = r.job_id;
      reservations_[id] = {std::move(r), reasons[id]};
    }
  }
  // An elastic job that shrinks or grows waits, pending, for its own
  // attempt to stop, holding the nodes it restarts on as a preemptor holds
  // its victims' (through full passes, until it starts or the wait ends).
  auto hold_for_restart = [&](JobRecord* rec, absl::Duration grace,
                              const std::string& why) {
    const absl::Time mono = clock_->MonotonicNow();
    absl::Time& until = preempting_[rec->id];
    until = std::max(until, mono + grace + opts_.heartbeat_timeout);
    if (auto r = reservations_.find(rec->job.id()); r != reservations_.end()) {
      r->second.reason = std::make_shared<const std::string>(why);
      preempt_holds_[rec->id] = r->second;
      // While it waits for its own ranks, it restarts on no fewer nodes
      // than it holds (an old rank slow to let go would else make it start
      // small, and grow again later).
      v1::ResourceRequest at_least = rec->job.spec().resources();
      at_least.set_min_nodes(std::max<int32_t>(
          at_least.min_nodes(),
          static_cast<int32_t>(r->second.reservation.nodes.size())));
      rec->restart_request = model_.jobs.Intern(at_least);
    }
  };
  for (const scheduler::Preemption& p : decisions.preemptions) {
    JobRecord* victim = model_.jobs.Find(p.victim);
    const JobRecord* preemptor = model_.jobs.Find(p.for_job);
    // Either may have ended, been cancelled or stopped while the pass ran.
    if (victim == nullptr || victim->stopping ||
        !state::JobTable::IsActive(victim->job.state()) ||
        preemptor == nullptr || preemptor->job.state() != v1::PENDING) {
      continue;
    }
    const absl::Duration grace = GraceOf(*victim);
    victim->job.set_preempted_by(p.for_job);
    FailAttempt(victim, p.reason, /*spend_retry=*/false,
                absl::ZeroDuration(), /*preempted=*/true);
    // Its next attempt waits until this one has surely stopped (its grace
    // and a heartbeat): two attempts never write one checkpoint at once.
    const absl::Time mono = clock_->MonotonicNow();
    victim->eligible_mono = std::max(
        victim->eligible_mono, mono + grace + opts_.heartbeat_interval);
    if (!p.keep_nodes.empty()) {
      hold_for_restart(
          victim, grace,
          absl::StrCat("elastic, shrunk by job ", p.for_job,
                       ": restarts on ", absl::StrJoin(p.keep_nodes, ", "),
                       " once its ranks have stopped"));
    }
    const int64_t for_id = state::JobTable::ParseId(p.for_job);
    absl::Time& until = preempting_[for_id];
    until = std::max(until, mono + grace + opts_.heartbeat_timeout);
    // Its claim, as this pass reserved it (with its reason) above.
    if (auto r = reservations_.find(p.for_job); r != reservations_.end()) {
      preempt_holds_[for_id] = r->second;
    }
  }
  for (const scheduler::Grow& g : decisions.grows) {
    JobRecord* rec = model_.jobs.Find(g.job_id);
    // It may have ended, been stopped or changed attempt while the pass
    // ran: grow another time.
    if (rec == nullptr || rec->stopping ||
        !state::JobTable::IsActive(rec->job.state()) ||
        rec->job.allocations_size() != g.from) {
      reservations_.erase(g.job_id);
      continue;
    }
    const absl::Duration grace = GraceOf(*rec);
    rec->job.set_resizes(rec->job.resizes() + 1);
    FailAttempt(rec, g.reason, /*spend_retry=*/false);
    if (rec->job.state() != v1::PENDING) continue;
    rec->eligible_mono =
        std::max(rec->eligible_mono,
                 clock_->MonotonicNow() + grace + opts_.heartbeat_interval);
    hold_for_restart(rec, grace,
                     absl::StrCat("elastic, growing: restarts on ",
                                  absl::StrJoin(g.nodes, ", "),
                                  " once its ranks have stopped"));
  }
  for (auto& [job_id, placement] : decisions.starts) {
    JobRecord* rec = model_.jobs.Find(job_id);
    if (rec == nullptr || rec->job.state() != v1::PENDING) continue;
    // The model moved on while the pass ran (a node left, a rank started
    // elsewhere): check again, and leave the job for the next pass.
    bool ok = model_.ledger.Fits(placement);
    for (const auto& share : placement.shares) {
      const NodeRecord* node = model_.nodes.Find(share.node);
      if (node == nullptr || !state::NodeTable::Unavailable(*node).empty()) {
        ok = false;
      }
    }
    if (!ok) {
      capacity_freed_ = true;
      pass_needed_ = true;
      continue;
    }
    StartJob(rec, placement);
  }
}

}  // namespace xl::control
