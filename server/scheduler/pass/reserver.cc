#include "server/scheduler/pass/reserver.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/duration.h"
#include "server/scheduler/pass/share_fit.h"

namespace xl::scheduler {

class Reserver::Future {
 public:
  Future(const Reserver& r, const v1::ResourceRequest& req, int max_placements)
      : index_(r.index_),
        req_(req),
        nodes_(r.current_),
        share_fit_(*r.fleet_, req),
        fits_(nodes_.size(), false),
        max_placements_(max_placements) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      fits_[i] = Fits(static_cast<int32_t>(i));
      fitting_ += fits_[i];
    }
  }
  // Gives back what `shares` hold (or, with `undo`, takes it again).
  void Change(const std::vector<NodeShare>& shares, bool undo) {
    for (const NodeShare& share : shares) {
      auto it = index_.find(share.node);
      if (it == index_.end()) continue;
      const int32_t n = it->second;
      if (undo) {
        Consume(&nodes_[n], share);
      } else {
        Release(&nodes_[n], share);
      }
      const bool f = Fits(n);
      fitting_ += static_cast<int32_t>(f) - static_cast<int32_t>(fits_[n]);
      fits_[n] = f;
    }
  }
  // The reservation holding these nodes has ended: they are usable with
  // what the replay has given back on them.
  void Unhold(const std::vector<int32_t>& nodes, absl::Time at,
              const std::vector<absl::Time>& free_from) {
    for (int32_t n : nodes) {
      // Another reservation holds it longer.
      if (free_from[n] > at) continue;
      nodes_[n].unavailable.clear();
      const bool f = Fits(n);
      fitting_ += static_cast<int32_t>(f) - static_cast<int32_t>(fits_[n]);
      fits_[n] = f;
    }
  }
  // Places the gang over the nodes that fit; false when too few do, or
  // after max_placements tries.
  bool Place(Placement* out) {
    if (fitting_ < req_.nodes() || placements_ >= max_placements_) {
      return false;
    }
    ++placements_;
    candidates_.clear();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (fits_[i]) candidates_.push_back(nodes_[i]);
    }
    return PlaceGang(candidates_, req_, out, nullptr);
  }
  void ResetPlacements() { placements_ = 0; }

 private:
  bool Fits(int32_t n) {
    return nodes_[n].unavailable.empty() && share_fit_(nodes_[n], n);
  }
  const std::unordered_map<std::string, int32_t>& index_;
  const v1::ResourceRequest& req_;
  std::vector<NodeCapacity> nodes_;
  ShareFit share_fit_;
  std::vector<bool> fits_;
  int32_t fitting_ = 0;
  int placements_ = 0;
  const int max_placements_;
  std::vector<NodeCapacity> candidates_;
};

Reserver::Reserver(const ClusterSnapshot& snapshot, FleetIndex* fleet)
    : max_reserve_tries_(
          std::max(kMaxReserveTries, 2 * snapshot.max_reservations)),
      now_(snapshot.now),
      fleet_(fleet),
      current_(snapshot.nodes),
      held_until_(snapshot.nodes.size(), absl::InfinitePast()),
      free_from_(snapshot.nodes.size(), absl::InfinitePast()),
      touched_(snapshot.nodes.size(), false) {
  for (size_t i = 0; i < current_.size(); ++i) {
    index_[current_[i].name()] = static_cast<int32_t>(i);
  }
  for (const RunningGang& g : snapshot.running) {
    if (g.expected_end == absl::InfiniteFuture()) continue;
    ends_.push_back({std::max(g.expected_end, now_), g.job_id, g.shares});
  }
  std::stable_sort(ends_.begin(), ends_.end(),
                   [](const End& a, const End& b) { return a.at < b.at; });
  sorted_ = ends_.size();
}

bool Reserver::Hold(const Reservation& r) {
  bool stands = true;
  for (const std::string& name : r.nodes) {
    auto it = index_.find(name);
    // Held by another reservation of this pass is no reason: they line
    // up (a later one starts after the earlier one's time limit).
    if (it == index_.end() ||
        (!current_[it->second].unavailable.empty() &&
         held_until_[it->second] == absl::InfinitePast())) {
      stands = false;
      continue;
    }
    stands &= !touched_[it->second];
    HoldNode(it->second, r.job_id, r.start);
  }
  return stands;
}

bool Reserver::BackfillOnHeld(const JobRequest& job, Placement* placement) {
  if (!any_held_ || job.resources == nullptr ||
      job.time_limit == absl::InfiniteDuration() ||
      backfills_ >= kMaxBackfills) {
    return false;
  }
  const absl::Time ends = now_ + job.time_limit;
  // Jobs of a request that failed with a shorter limit fail too.
  auto failed = failed_limit_.find(job.resources.get());
  if (failed != failed_limit_.end() && job.time_limit >= failed->second) {
    return false;
  }
  ++backfills_;
  // The class failed on what is not held, so fewer nodes than the gang
  // needs fit there: the candidates are few, and the placement small.
  ShareFit share_fit(*fleet_, *job.resources);
  std::vector<NodeCapacity> candidates;
  bool uses_held = false;
  for (size_t i = 0; i < current_.size(); ++i) {
    const bool held = held_until_[i] != absl::InfinitePast();
    if (held ? held_until_[i] < ends : !current_[i].unavailable.empty()) {
      continue;
    }
    if (!share_fit(current_[i], static_cast<int32_t>(i))) continue;
    uses_held |= held;
    candidates.push_back(current_[i]);
    if (held) candidates.back().unavailable.clear();
  }
  if (!uses_held ||
      !PlaceGang(candidates, *job.resources, placement, nullptr)) {
    failed_limit_[job.resources.get()] =
        failed == failed_limit_.end()
            ? job.time_limit
            : std::min(failed->second, job.time_limit);
    return false;
  }
  for (const NodeShare& share : placement->shares) {
    const int32_t n = index_[share.node];
    if (held_until_[n] == absl::InfinitePast()) {
      uint64_t gpus = 0;
      GpuPositions(*current_[n].info, share.gpu_indices, &gpus);
      fleet_->Take(fleet_->slot_of_node(n), gpus, share_fit.needs());
    }
  }
  return true;
}

void Reserver::Started(const JobRequest& job, const Placement& placement) {
  for (const NodeShare& share : placement.shares) {
    auto it = index_.find(share.node);
    if (it == index_.end()) continue;
    Consume(&current_[it->second], share);
    touched_[it->second] = true;
  }
  if (job.time_limit != absl::InfiniteDuration()) {
    ends_.push_back({now_ + job.time_limit, job.job_id, placement.shares});
  }
}

bool Reserver::Reserve(const JobRequest& job, Reservation* out) {
  // A request that found no time stays without one for the pass: what is
  // held and taken only grows, and what later starts gives back only what
  // it took. Tries are bounded too (Slurm's bf_max_job_test).
  if (job.resources == nullptr || reserve_tries_ >= max_reserve_tries_ ||
      unreservable_.count(job.resources.get()) > 0) {
    return false;
  }
  ++reserve_tries_;
  if (!ReserveOnce(job, out)) {
    unreservable_.insert(job.resources.get());
    return false;
  }
  return true;
}

bool Reserver::PreemptFor(const JobRequest& job,
                          const std::vector<const RunningGang*>& candidates,
                          std::vector<const RunningGang*>* victims,
                          Placement* placement, bool minimize) {
  Future future(*this, *job.resources, 8 * kMaxPlacements);
  auto give_back = [&](const RunningGang& g, bool undo) {
    future.Change(g.shares, undo);
  };
  auto place = [&](Placement* out) { return future.Place(out); };
  victims->clear();
  bool placed = false;
  for (const RunningGang* g : candidates) {
    give_back(*g, false);
    victims->push_back(g);
    if (place(placement)) {
      placed = true;
      break;
    }
  }
  if (!placed) return false;
  if (minimize) {
    // Gangs with nothing on the nodes it got are not needed at all.
    std::set<std::string> on;
    for (const NodeShare& share : placement->shares) on.insert(share.node);
    for (size_t k = victims->size(); k-- > 0;) {
      const RunningGang* g = (*victims)[k];
      const bool there =
          std::any_of(g->shares.begin(), g->shares.end(),
                      [&](const NodeShare& s) { return on.count(s.node); });
      if (!there) {
        give_back(*g, true);
        victims->erase(victims->begin() + k);
      }
    }
    // Then each of the others is put back if the job still fits without
    // it (the last added is needed).
    future.ResetPlacements();
    for (size_t k = victims->size() - 1; k-- > 0;) {
      const RunningGang* g = (*victims)[k];
      give_back(*g, true);
      Placement without;
      if (place(&without)) {
        *placement = std::move(without);
        victims->erase(victims->begin() + k);
      } else {
        give_back(*g, false);
      }
    }
  }
  for (const NodeShare& share : placement->shares) {
    HoldNode(index_[share.node], job.job_id, now_);
  }
  return true;
}

bool Reserver::ReserveOnce(const JobRequest& job, Reservation* out) {
  if (sorted_ < ends_.size()) {
    // Jobs started since the last reservation: sort them and merge them
    // in, instead of sorting everything again.
    auto by_time = [](const End& a, const End& b) { return a.at < b.at; };
    std::stable_sort(ends_.begin() + sorted_, ends_.end(), by_time);
    std::inplace_merge(ends_.begin(), ends_.begin() + sorted_, ends_.end(),
                       by_time);
    sorted_ = ends_.size();
  }
  Future future(*this, *job.resources, kMaxPlacements);
  Placement placement;
  absl::Time at = now_;
  bool placed = future.Place(&placement);
  for (size_t e = 0; !placed && e < ends_.size(); ++e) {
    const End& end = ends_[e];
    future.Change(end.shares, /*undo=*/false);
    future.Unhold(end.unhold, end.at, free_from_);
    at = end.at;
    // Jobs ending at the same moment are given back together.
    if (e + 1 < ends_.size() && ends_[e + 1].at == at) continue;
    placed = future.Place(&placement);
  }
  if (!placed) return false;
  out->job_id = job.job_id;
  out->queue = job.queue;
  out->user = job.user;
  out->gpus_by_model.clear();
  for (const NodeShare& share : placement.shares) {
    AddGpuModels(*current_[index_[share.node]].info, share.gpu_indices,
                 &out->gpus_by_model);
  }
  out->priority = RankOf(job);
  out->submit_seq = job.submit_seq;
  out->start = at;
  out->nodes.clear();
  std::set<std::string> on_nodes;
  End after{at + job.time_limit, job.job_id, {}, {}};
  for (const NodeShare& share : placement.shares) {
    out->nodes.push_back(share.node);
    on_nodes.insert(share.node);
    HoldNode(index_[share.node], job.job_id, at, after.at);
    after.unhold.push_back(index_[share.node]);
  }
  // Only the jobs on the reserved nodes matter to it.
  out->waits_for.clear();
  for (const End& end : ends_) {
    if (end.at > at) break;
    bool on = false;
    for (const NodeShare& share : end.shares)
      on |= on_nodes.count(share.node) > 0;
    for (int32_t n : end.unhold) on |= on_nodes.count(current_[n].name()) > 0;
    if (on) out->waits_for.push_back(end.job_id);
  }
  // A job reserved later may have these nodes once this one's time limit
  // has run out after its start (estimates for many jobs line up so).
  if (job.time_limit != absl::InfiniteDuration()) {
    ends_.push_back(std::move(after));
  }
  return true;
}

void Reserver::HoldNode(int32_t n, const std::string& job_id, absl::Time until,
                        absl::Time ends) {
  current_[n].unavailable = absl::StrCat("held for job ", job_id);
  held_until_[n] = held_until_[n] == absl::InfinitePast()
                       ? until
                       : std::min(held_until_[n], until);
  free_from_[n] = std::max(free_from_[n], ends);
  any_held_ = true;
  held_why_.push_back(absl::StrCat("held for job ", job_id, "'s reservation"));
  fleet_->Hold(fleet_->slot_of_node(n), &held_why_.back());
}

std::string ReservationText(const Reservation& r, absl::Time now) {
  std::string nodes =
      r.nodes.size() <= 4
          ? absl::StrJoin(r.nodes, ", ")
          : absl::StrCat(r.nodes[0], ", ", r.nodes[1], ", ", r.nodes[2],
                         " and ", r.nodes.size() - 3, " more");
  std::string when =
      r.start <= now
          ? std::string("as soon as its nodes are free")
          : absl::StrCat("by ",
                         absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", r.start,
                                          absl::UTCTimeZone()),
                         " (in ", HumanDuration(r.start - now), ")");
  std::string jobs;
  if (!r.waits_for.empty()) {
    std::vector<std::string> ids(
        r.waits_for.begin(),
        r.waits_for.begin() + std::min<size_t>(r.waits_for.size(), 5));
    jobs = absl::StrCat(
        ", when job", r.waits_for.size() == 1 ? " " : "s ",
        absl::StrJoin(ids, ", "),
        r.waits_for.size() > 5
            ? absl::StrCat(" and ", r.waits_for.size() - 5, " more")
            : "",
        r.waits_for.size() == 1 ? " ends" : " end",
        " at the latest (time limits)");
  }
  return absl::StrCat("reserved: expected to start ", when, " on ", nodes, jobs,
                      "; other jobs start only elsewhere meanwhile");
}

}  // namespace xl::scheduler
