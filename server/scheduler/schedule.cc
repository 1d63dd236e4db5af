#include "server/scheduler/schedule.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/scheduler/fleet_index.h"
#include "server/scheduler/pass/class_table.h"
#include "server/scheduler/pass/elastic.h"
#include "server/scheduler/pass/fragmentation.h"
#include "server/scheduler/pass/policy_gate.h"
#include "server/scheduler/pass/preemptor.h"
#include "server/scheduler/pass/queue_order.h"
#include "server/scheduler/pass/reserver.h"
#include "server/scheduler/pass/share_fit.h"
#include "server/scheduler/request_class.h"

namespace xl::scheduler {
namespace {

// One pass: the phases' state, and each job taken through them in order
// (Consider). A job leaves at the first phase that decides it: started,
// waiting for its queue, preempting, reserved, or waiting.
class Pass {
 public:
  Pass(ClusterSnapshot snapshot, std::vector<JobRequest> queue)
      : snapshot_(std::move(snapshot)),
        queue_(std::move(queue)),
        fleet_(snapshot_.nodes),
        holds_(snapshot_.holds),
        reservations_left_(snapshot_.max_reservations),
        policy_(snapshot_, fleet_),
        preemptor_(snapshot_),
        started_(queue_.size(), false) {
    // Jobs of this pass, when holds of others may need their quota kept.
    if (!snapshot_.holds.empty() && !snapshot_.policies.empty()) {
      for (const JobRequest& j : queue_) in_pass_.insert(j.job_id);
      for (const Reservation& r : snapshot_.holds) hold_of_[r.job_id] = &r;
    }
  }

  Decisions Run() {
    out_.waiting.reserve(queue_.size());
    for (int32_t i : QueueOrder(queue_)) Consider(i);
    if (snapshot_.max_grows > 0) {
      // What earlier passes reserved is never grown onto.
      while (const Reservation* r = holds_.Next()) ApplyHold(*r);
      GrowElastic(snapshot_, preemptor_.preempted(), first_waiting_rank_,
                  &fleet_, &policy_, &out_);
    }
    std::unordered_set<const v1::ResourceRequest*> waiting;
    for (size_t i = 0; i < queue_.size(); ++i) {
      if (!started_[i]) waiting.insert(queue_[i].resources.get());
    }
    out_.fragmented_gpus = FragmentedGpus(fleet_, waiting);
    return std::move(out_);
  }

 private:
  // How the queue's policy admitted a job.
  struct Admitted {
    // Placed as if it had asked only for the GPU models its quota covers.
    bool narrowed = false;
    // Elastic: admitted at fewer nodes than its most.
    bool quota_sized = false;
  };

  void Consider(int32_t i) {
    JobRequest& job = queue_[i];
    const double rank = RankOf(job);
    while (const Reservation* r = holds_.NextBefore(rank, job.submit_seq)) {
      ApplyHold(*r);
    }
    const int32_t min_nodes = MinNodes(job);
    Admitted admitted;
    if (policy_.governs(job) && !Admit(job, min_nodes, &admitted)) return;
    // Nodes it would rather avoid (where its last attempt failed) first;
    // if that is all that has room, there.
    if (job.preferred != nullptr && !admitted.narrowed &&
        StartNow(classes_.Find(job.preferred), i)) {
      return;
    }
    ClassTable::Entry& c = classes_.Find(job.resources);
    if (StartNow(c, i) || BackfillOnHeld(i)) return;
    // An elastic job that does not fit whole preempts and reserves for the
    // fewest nodes it runs on.
    JobRequest smallest;
    if (min_nodes > 0 && job.resources->nodes() > min_nodes) {
      if (StartSmaller(c, i, min_nodes)) return;
      smallest = job;
      smallest.resources = sizes_.Of(job.resources, min_nodes);
      smallest.preferred = nullptr;
    }
    const JobRequest& target = smallest.resources != nullptr ? smallest : job;
    if (Preempt(job, target) || Reserve(c, job, target)) return;
    Wait(c, job, target, admitted);
  }

  // Earlier reservations hold their nodes from the first job ranked after
  // theirs on: a new job that outranks one may still take its nodes (and
  // the reservation is dropped, to be decided again).
  void ApplyHold(const Reservation& r) {
    // The held job is not in a pass over new jobs: its quota is kept.
    if (!in_pass_.empty() && in_pass_.count(r.job_id) == 0) {
      policy_.ChargeHold(r);
    }
    if (reservations_left_ <= 0) {
      out_.dropped_holds.push_back(r.job_id);
      return;
    }
    --reservations_left_;
    if (!Reserving()->Hold(r)) out_.dropped_holds.push_back(r.job_id);
  }

  // The pre-filter: the queue's policy. Over its quota or a per-user
  // limit, the job waits whatever is free (or reclaims its lent quota);
  // under a quota that covers only some GPU models, it is placed as if it
  // had asked for those; an elastic job over its quota at its most nodes
  // is admitted at the most its quota takes. False when the job is decided
  // here.
  bool Admit(JobRequest& job, int32_t min_nodes, Admitted* admitted) {
    std::shared_ptr<const std::string> why;
    bool reclaimable = false;
    if (policy_.Admit(&job, &admitted->narrowed, &why, &reclaimable) ||
        (min_nodes > 0 && AdmitSmaller(job, min_nodes, admitted))) {
      return true;
    }
    if (reclaimable && Reclaim(job)) return false;
    if (snapshot_.policy_frees) {
      // At its smallest, as it would first be admitted.
      JobRequest smallest = job;
      if (min_nodes > 0) {
        smallest.resources = sizes_.Of(job.resources, min_nodes);
      }
      out_.policy_frees_at.emplace_back(
          job.job_id, policy_.FreesAt(smallest, snapshot_.running));
    }
    out_.job_reasons.emplace_back(job.job_id, why);
    out_.waiting.emplace_back(std::move(job.job_id), std::move(why));
    return false;
  }

  // The most nodes the quota admits an elastic job at (fewer GPUs never
  // admit less: binary search), down to its minimum.
  bool AdmitSmaller(JobRequest& job, int32_t min_nodes, Admitted* admitted) {
    int32_t lo = min_nodes, hi = job.resources->nodes() - 1;
    std::optional<JobRequest> best;
    bool best_narrowed = false;
    while (lo <= hi) {
      const int32_t mid = lo + (hi - lo + 1) / 2;
      JobRequest smaller = job;
      smaller.resources = sizes_.Of(job.resources, mid);
      smaller.preferred = nullptr;
      bool n = false, r = false;
      std::shared_ptr<const std::string> w;
      if (policy_.Admit(&smaller, &n, &w, &r)) {
        best = std::move(smaller);
        best_narrowed = n;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (!best.has_value()) return false;
    job = *std::move(best);
    admitted->narrowed = best_narrowed;
    admitted->quota_sized = true;
    return true;
  }

  // Its own nominal quota was lent: takes it back from borrowers. Every
  // borrower found is stopped: the quota needs them all, even when fewer
  // make room on the nodes.
  bool Reclaim(const JobRequest& job) {
    std::vector<const RunningGang*> borrowers, used;
    Placement placement;
    JobRequest reclaiming = job;
    bool narrow = false;
    if (!preemptor_.MayTry(job) || !preemptor_.UseTry() ||
        !policy_.Reclaim(&reclaiming, snapshot_.running, preemptor_.preempted(),
                         &borrowers, &narrow) ||
        !Reserving()->PreemptFor(reclaiming, borrowers, &used, &placement,
                                 /*minimize=*/false)) {
      return false;
    }
    policy_.CommitReclaim();
    preemptor_.Record(reclaiming, borrowers, placement,
                      absl::StrCat("reclaiming the nominal quota queue ",
                                   job.queue, " lent to its cohort"),
                      /*may_shrink=*/false, &policy_, &out_);
    WaitsForResources(RankOf(reclaiming));
    return true;
  }

  // Filter and score: starts job i now if the class `c` has room; else
  // records why not for the rest of the pass (capacity only shrinks within
  // it).
  bool StartNow(ClassTable::Entry& c, int32_t i) {
    if (c.reason != nullptr) return false;
    if (c.live == nullptr) {
      c.live = std::make_unique<RequestClass>(fleet_, *c.request);
    } else {
      c.live->CatchUp();
    }
    if (!c.live->Choose(&picks_)) {
      c.reason = std::make_shared<const std::string>(c.live->WhyNot());
      c.fitting = c.live->fitting();
      c.live.reset();
      return false;
    }
    Placement placement;
    placement.shares.reserve(picks_.size());
    for (const auto& pick : picks_) {
      placement.shares.push_back(
          ShareOf(fleet_.node_at(pick.slot), pick.gpus, c.live->needs()));
      fleet_.Take(pick.slot, pick.gpus, c.live->needs());
    }
    Started(i, std::move(placement));
    return true;
  }

  // Only where something is held can a job backfill onto held nodes.
  bool BackfillOnHeld(int32_t i) {
    if (reserver_ == nullptr) return false;
    Placement placement;
    if (!reserver_->BackfillOnHeld(queue_[i], &placement)) return false;
    Started(i, std::move(placement));
    return true;
  }

  // Elastic: the most nodes that fit now, down to its minimum (each size
  // tried bounds the next by the nodes it found fitting). When not even
  // its minimum fits, `c`'s reason says so.
  bool StartSmaller(ClassTable::Entry& c, int32_t i, int32_t min_nodes) {
    const JobRequest& job = queue_[i];
    int32_t n = job.resources->nodes() - 1;
    if (c.fitting >= 0) {
      n = static_cast<int32_t>(std::min<int64_t>(n, c.fitting));
    }
    while (n >= min_nodes) {
      ClassTable::Entry& sc = classes_.Find(sizes_.Of(job.resources, n));
      if (StartNow(sc, i)) return true;
      int32_t next = n - 1;
      if (sc.fitting >= 0) {
        next = static_cast<int32_t>(std::min<int64_t>(next, sc.fitting));
      }
      n = next;
    }
    if (!c.elastic_told) {
      c.elastic_told = true;
      ClassTable::Entry& least =
          classes_.Find(sizes_.Of(job.resources, min_nodes));
      c.reason = std::make_shared<const std::string>(absl::StrCat(
          "elastic, ", min_nodes, " to ", job.resources->nodes(),
          " nodes; not even ", min_nodes,
          " fit now: ", least.reason != nullptr ? *least.reason : *c.reason));
    }
    return false;
  }

  // The permit for a start: the placement is the job's, its quota charged.
  void Started(int32_t i, Placement placement) {
    JobRequest& job = queue_[i];
    if (reserver_ != nullptr) {
      reserver_->Started(job, placement);
    } else {
      started_limits_.push_back(job.time_limit);
    }
    if (policy_.governs(job)) policy_.Charge(job, placement);
    out_.starts.emplace_back(std::move(job.job_id), std::move(placement));
    started_[i] = true;
  }

  // The post-filter: gangs of a lower priority (of its own queue, unless
  // preemption crosses queues) that it also outranks once requeued make
  // room for `target`, whole.
  bool Preempt(const JobRequest& job, const JobRequest& target) {
    if (!preemptor_.MayTry(job)) return false;
    std::vector<const RunningGang*> candidates =
        preemptor_.Candidates(job, target);
    if (candidates.empty()) return false;
    preemptor_.UseTry();
    std::vector<const RunningGang*> victims;
    Placement placement;
    if (!Reserving()->PreemptFor(target, candidates, &victims, &placement)) {
      preemptor_.NoneFound(job, target);
      return false;
    }
    // A shrunk victim keeps quota it did not borrow: only priority
    // preemption shrinks (a reclaim needs all the GPUs back).
    preemptor_.Record(job, victims, placement,
                      absl::StrCat("priority ", job.priority, " > "),
                      /*may_shrink=*/true, &policy_, &out_);
    WaitsForResources(RankOf(job));
    return true;
  }

  // Reserve: the earliest time and nodes `target` fits on as running jobs
  // end; its nodes are held, so every class re-checks what it can have.
  bool Reserve(const ClassTable::Entry& c, const JobRequest& job,
               const JobRequest& target) {
    if (reservations_left_ <= 0) return false;
    Reservation r;
    if (!Reserving()->Reserve(target, &r)) return false;
    --reservations_left_;
    out_.waiting.emplace_back(
        job.job_id, std::make_shared<const std::string>(absl::StrCat(
                        *c.reason, "; ", ReservationText(r, snapshot_.now))));
    if (policy_.governs(job)) policy_.ChargeReserved(target, r.gpus_by_model);
    WaitsForResources(RankOf(job));
    out_.reservations.push_back(std::move(r));
    return true;
  }

  // The job waits for resources, with its class's reason (or its own, when
  // its request is not the one the caller keeps reasons by).
  void Wait(const ClassTable::Entry& c, JobRequest& job,
            const JobRequest& target, const Admitted& admitted) {
    // Waiting for the gangs it preempted to stop, it keeps its quota (or
    // borrowers would take it again meanwhile).
    if (!job.may_preempt && policy_.governs(job)) {
      auto h = hold_of_.find(job.job_id);
      policy_.ChargeReserved(target, h != hold_of_.end()
                                         ? h->second->gpus_by_model
                                         : std::map<std::string, int64_t>());
    }
    WaitsForResources(RankOf(job));
    if (admitted.narrowed || admitted.quota_sized) {
      auto why = std::make_shared<const std::string>(absl::StrCat(
          admitted.narrowed ? policy_.NarrowedWhy(job) : std::string(),
          admitted.quota_sized
              ? absl::StrCat("its queue's quota takes ", job.resources->nodes(),
                             " of its nodes; ")
              : std::string(),
          *c.reason));
      out_.job_reasons.emplace_back(job.job_id, why);
      out_.waiting.emplace_back(std::move(job.job_id), std::move(why));
      return;
    }
    if (reported_.insert(job.resources.get()).second) {
      out_.class_reasons.emplace_back(job.resources, c.reason);
    }
    out_.waiting.emplace_back(std::move(job.job_id), c.reason);
  }

  // The rank of the first job left waiting for resources (not for its
  // queue's policy): elastic gangs ranked below it do not grow.
  void WaitsForResources(double rank) {
    if (!first_waiting_rank_.has_value()) first_waiting_rank_ = rank;
  }

  // Made when first needed (a hold to apply, a blocked job), so a pass
  // where everything fits copies no nodes; it then catches up with the
  // jobs started so far (their limits are kept until then).
  Reserver* Reserving() {
    if (snapshot_.max_reservations <= 0 && !snapshot_.preemption) {
      return nullptr;
    }
    if (reserver_ == nullptr) {
      reserver_ = std::make_unique<Reserver>(snapshot_, &fleet_);
      JobRequest started;
      for (size_t k = 0; k < out_.starts.size(); ++k) {
        started.job_id = out_.starts[k].first;
        started.time_limit = started_limits_[k];
        reserver_->Started(started, out_.starts[k].second);
      }
    }
    return reserver_.get();
  }

  const ClusterSnapshot snapshot_;
  std::vector<JobRequest> queue_;
  FleetIndex fleet_;
  HoldOrder holds_;
  int reservations_left_;
  PolicyGate policy_;
  Preemptor preemptor_;
  ClassTable classes_;
  ElasticSizes sizes_;
  std::unique_ptr<Reserver> reserver_;
  // The time limits of the jobs started before the reserver was made.
  std::vector<absl::Duration> started_limits_;
  std::unordered_set<std::string> in_pass_;
  std::unordered_map<std::string, const Reservation*> hold_of_;
  std::optional<double> first_waiting_rank_;
  std::vector<RequestClass::Pick> picks_;
  std::unordered_set<const v1::ResourceRequest*> reported_;
  std::vector<bool> started_;
  Decisions out_;
};

}  // namespace

Decisions Schedule(ClusterSnapshot snapshot, std::vector<JobRequest> queue) {
  return Pass(std::move(snapshot), std::move(queue)).Run();
}

}  // namespace xl::scheduler
