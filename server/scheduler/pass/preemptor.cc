#include "server/scheduler/pass/preemptor.h"

#include <algorithm>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"

namespace xl::scheduler {

void SortVictims(std::vector<const RunningGang*>* gangs) {
  std::sort(gangs->begin(), gangs->end(),
            [](const RunningGang* a, const RunningGang* b) {
              if (a->priority != b->priority) {
                return a->priority < b->priority;
              }
              // GPU time lost (a CPU-only gang counts as one GPU).
              const double wa =
                  std::max<int64_t>(a->gpus, 1) * absl::ToDoubleSeconds(a->ran);
              const double wb =
                  std::max<int64_t>(b->gpus, 1) * absl::ToDoubleSeconds(b->ran);
              if (wa != wb) return wa < wb;
              return a->job_id < b->job_id;
            });
}

Preemptor::Preemptor(const ClusterSnapshot& snapshot)
    : snapshot_(snapshot),
      preemptors_left_(snapshot.preemption ? snapshot.max_preemptors : 0),
      tries_left_(4 * preemptors_left_) {
  if (!snapshot.preemption) return;
  for (const RunningGang& g : snapshot.running) {
    if (g.preemptible && !g.shares.empty()) preemptible_.push_back(&g);
  }
  std::stable_sort(preemptible_.begin(), preemptible_.end(),
                   [](const RunningGang* a, const RunningGang* b) {
                     return a->priority < b->priority;
                   });
}

Preemptor::Key Preemptor::KeyOf(const JobRequest& job,
                                const JobRequest& target) const {
  return Key(target.resources.get(),
             snapshot_.preempt_across_queues ? std::string() : job.queue);
}

std::vector<const RunningGang*> Preemptor::Candidates(
    const JobRequest& job, const JobRequest& target) const {
  std::vector<const RunningGang*> candidates;
  if (target.resources == nullptr) return candidates;
  auto failed = unpreemptable_.find(KeyOf(job, target));
  if (failed != unpreemptable_.end() &&
      job.priority <= failed->second.priority &&
      RankOf(job) <= failed->second.rank) {
    return candidates;
  }
  const auto below = std::lower_bound(
      preemptible_.begin(), preemptible_.end(), job.priority,
      [](const RunningGang* g, int32_t p) { return g->priority < p; });
  for (auto it = preemptible_.begin(); it != below; ++it) {
    const RunningGang* g = *it;
    if ((snapshot_.preempt_across_queues || g->queue == job.queue) &&
        g->rank < RankOf(job) && preempted_.count(g->job_id) == 0) {
      candidates.push_back(g);
    }
  }
  SortVictims(&candidates);
  return candidates;
}

void Preemptor::NoneFound(const JobRequest& job, const JobRequest& target) {
  auto [at, added] = unpreemptable_.emplace(KeyOf(job, target),
                                            Failed{job.priority, RankOf(job)});
  if (!added) {
    at->second.priority = std::max(at->second.priority, job.priority);
    at->second.rank = std::max(at->second.rank, RankOf(job));
  }
}

void Preemptor::Record(const JobRequest& job,
                       const std::vector<const RunningGang*>& victims,
                       const Placement& placement, const std::string& why,
                       bool may_shrink, PolicyGate* policy, Decisions* out) {
  --preemptors_left_;
  Reservation r;
  r.job_id = job.job_id;
  r.priority = RankOf(job);
  r.submit_seq = job.submit_seq;
  absl::Duration grace = absl::ZeroDuration();
  std::vector<std::string> named;
  std::unordered_set<std::string> taken;
  for (const NodeShare& share : placement.shares) taken.insert(share.node);
  for (const RunningGang* v : victims) {
    preempted_.insert(v->job_id);
    grace = std::max(grace, v->grace);
    r.waits_for.push_back(v->job_id);
    named.push_back(absl::StrCat(
        "job ", v->job_id, " (", v->queue.empty() ? "" : v->queue + ", ",
        "priority ", v->priority, ", ran ", HumanDuration(v->ran), ")"));
    Preemption p{
        v->job_id,
        job.job_id,
        absl::StrCat("preempted by job ", job.job_id, " of ", job.user, " (",
                     why,
                     absl::EndsWith(why, "> ") ? absl::StrCat(v->priority)
                                               : std::string(),
                     ")"),
        {}};
    // An elastic victim left its minimum shrinks onto what is left: it
    // restarts there (held for it) rather than waiting whole.
    if (v->min_nodes > 0 && may_shrink) {
      std::vector<NodeShare> kept;
      for (const NodeShare& share : v->shares) {
        if (taken.count(share.node) == 0) kept.push_back(share);
      }
      if (static_cast<int32_t>(kept.size()) >= v->min_nodes) {
        Reservation keep;
        keep.job_id = v->job_id;
        keep.priority = v->rank;
        keep.submit_seq = v->submit_seq;
        keep.start = snapshot_.now + v->grace;
        for (const NodeShare& share : kept) {
          p.keep_nodes.push_back(share.node);
        }
        keep.nodes = p.keep_nodes;
        keep.waits_for = {v->job_id};
        keep.queue = v->queue;
        keep.user = v->user;
        keep.gpus_by_model = policy->ModelsOf(kept);
        absl::StrAppend(&p.reason, "; elastic, it shrinks from ",
                        v->shares.size(), " to ", kept.size(), " nodes");
        out->reservations.push_back(std::move(keep));
      }
    }
    out->preemptions.push_back(std::move(p));
  }
  r.start = snapshot_.now + grace;
  for (const NodeShare& share : placement.shares) {
    r.nodes.push_back(share.node);
  }
  r.queue = job.queue;
  r.user = job.user;
  r.gpus_by_model = policy->ModelsOf(placement.shares);
  if (policy->governs(job)) policy->ChargeReserved(job, r.gpus_by_model);
  out->waiting.emplace_back(
      job.job_id, std::make_shared<const std::string>(absl::StrCat(
                      "preempting ", absl::StrJoin(named, ", "),
                      " to start on ", absl::StrJoin(r.nodes, ", "),
                      "; it starts once their ranks have stopped (grace up to ",
                      HumanDuration(grace), ")")));
  out->reservations.push_back(std::move(r));
}

}  // namespace xl::scheduler
