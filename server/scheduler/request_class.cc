#include "server/scheduler/request_class.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/scheduler/wait_reason.h"

namespace xl::scheduler {
namespace {

int LowestBit(uint64_t mask) { return __builtin_ctzll(mask); }

}  // namespace

RequestClass::RequestClass(const FleetIndex& fleet,
                           const v1::ResourceRequest& req)
    : fleet_(fleet), needs_(req), max_switches_(req.max_switches()) {
  layout_gpus_.reserve(fleet.layouts().size());
  for (const NodeInfo* layout : fleet.layouts()) {
    layout_gpus_.push_back(MatchingGpus(*layout, req));
  }
  live_.assign(fleet.num_buckets(), 0);
  switch_live_.assign(fleet.num_switches(), 0);
  if (req.exclude_nodes_size() > 0) {
    const std::set<std::string> names(req.exclude_nodes().begin(),
                                      req.exclude_nodes().end());
    for (int s = 0; s < fleet.size(); ++s) {
      if (names.count(fleet.node_at(s).name()) > 0) excluded_.push_back(s);
    }
  }
  for (int s = 0; s < fleet.size(); ++s) {
    const FleetIndex::Slot& slot = fleet.slot(s);
    if (Excluded(s)) continue;
    const uint64_t matching = layout_gpus_[slot.layout];
    // Counted over every node, available or not, as the old reasons did:
    // "the fleet has only N such nodes even when idle".
    if (FitsNow(slot.idle, matching, needs_)) ++idle_fit_;
    if (slot.available && FitsNow(slot.free, matching, needs_)) {
      const int b = fleet.bucket_of(s);
      live_[b] |= uint64_t{1} << (s - fleet.bucket_begin(b));
      ++switch_live_[fleet.bucket_switch(b)];
      ++live_total_;
    }
  }
  taken_seen_ = fleet.taken().size();
}

bool RequestClass::Fits(int s) const {
  const FleetIndex::Slot& slot = fleet_.slot(s);
  return slot.available && !Excluded(s) &&
         FitsNow(slot.free, layout_gpus_[slot.layout], needs_);
}

void RequestClass::CatchUp() {
  const std::vector<int32_t>& taken = fleet_.taken();
  const size_t first = taken_seen_;
  for (; taken_seen_ < taken.size(); ++taken_seen_) {
    const int b = taken[taken_seen_];
    // A gang's nodes come in ring order: one check covers a run of takes
    // from one bucket.
    if (taken_seen_ > first && taken[taken_seen_ - 1] == b) continue;
    const uint64_t live = live_[b];
    uint64_t keep = live;
    for (uint64_t rest = live; rest != 0; rest &= rest - 1) {
      const int i = LowestBit(rest);
      if (!Fits(fleet_.bucket_begin(b) + i)) keep &= ~(uint64_t{1} << i);
    }
    if (keep == live) continue;
    const int gone = CountBits(live) - CountBits(keep);
    live_[b] = keep;
    switch_live_[fleet_.bucket_switch(b)] -= gone;
    live_total_ -= gone;
  }
}

void RequestClass::TakeFromBucket(int b, int* want, std::vector<Pick>* picks) {
  for (uint64_t rest = live_[b]; rest != 0 && *want > 0; rest &= rest - 1) {
    const int s = fleet_.bucket_begin(b) + LowestBit(rest);
    const FleetIndex::Slot& slot = fleet_.slot(s);
    const uint64_t free = layout_gpus_[slot.layout] & slot.free.gpus;
    picks->push_back({s, LowestBits(free, needs_.gpus)});
    --*want;
  }
}

bool RequestClass::Choose(std::vector<Pick>* picks) {
  picks->clear();
  int want = needs_.nodes;
  if (want <= 0) return true;
  if (live_total_ < want) return false;
  int best = -1;
  for (int sw = 0; sw < fleet_.num_switches(); ++sw) {
    const int32_t live = switch_live_[sw];
    if (fleet_.labelled(sw) && live >= want &&
        (best < 0 || live < switch_live_[best])) {
      best = sw;
    }
  }
  if (best >= 0) {
    for (int b = fleet_.first_bucket(best);
         want > 0 && b < fleet_.first_bucket(best + 1); ++b) {
      TakeFromBucket(b, &want, picks);
    }
    return true;
  }
  if (max_switches_ > 0) {
    // The labelled switches with the most room, as few as the gang needs.
    std::vector<int> switches;
    for (int sw = 0; sw < fleet_.num_switches(); ++sw) {
      if (fleet_.labelled(sw) && switch_live_[sw] > 0) switches.push_back(sw);
    }
    std::sort(switches.begin(), switches.end(), [&](int x, int y) {
      return switch_live_[x] != switch_live_[y]
                 ? switch_live_[x] > switch_live_[y]
                 : x < y;
    });
    if (static_cast<int>(switches.size()) > max_switches_) {
      switches.resize(max_switches_);
    }
    int64_t room = 0;
    for (int sw : switches) room += switch_live_[sw];
    if (room < want) {
      best_under_limit_ = room;
      return false;
    }
    std::sort(switches.begin(), switches.end());  // ring order
    for (int sw : switches) {
      for (int b = fleet_.first_bucket(sw);
           want > 0 && b < fleet_.first_bucket(sw + 1); ++b) {
        TakeFromBucket(b, &want, picks);
      }
    }
    return true;
  }
  while (first_live_ < fleet_.num_buckets() && live_[first_live_] == 0) {
    ++first_live_;
  }
  for (int b = first_live_; want > 0 && b < fleet_.num_buckets(); ++b) {
    TakeFromBucket(b, &want, picks);
  }
  return true;
}

std::string RequestClass::WhyNot() const {
  if (best_under_limit_ >= 0) {
    // Even idle, do the N largest switches hold enough such nodes?
    std::vector<int64_t> idle(fleet_.num_switches(), 0);
    for (int s = 0; s < fleet_.size(); ++s) {
      const FleetIndex::Slot& slot = fleet_.slot(s);
      const int sw = fleet_.bucket_switch(fleet_.bucket_of(s));
      if (fleet_.labelled(sw) && !Excluded(s) &&
          FitsNow(slot.idle, layout_gpus_[slot.layout], needs_)) {
        ++idle[sw];
      }
    }
    std::sort(idle.rbegin(), idle.rend());
    int64_t most = 0;
    for (int k = 0; k < max_switches_ && k < static_cast<int>(idle.size());
         ++k) {
      most += idle[k];
    }
    if (most < needs_.nodes) {
      return absl::StrCat(
          "needs ", needs_.nodes, " nodes under at most ", max_switches_,
          max_switches_ == 1 ? " switch" : " switches",
          " (max_switches), but even idle the ", max_switches_,
          max_switches_ == 1 ? " switch" : " switches",
          " with the most such nodes (labels.switch) have ", most,
          ", so it never starts; raise max_switches, or give "
          "max_switches_wait");
    }
    return absl::StrCat(
        "needs ", needs_.nodes, " nodes under at most ", max_switches_,
        max_switches_ == 1 ? " switch" : " switches", " (max_switches); ",
        live_total_, " fit now, but the ", max_switches_,
        max_switches_ == 1 ? " switch" : " switches",
        " with the most room have ", best_under_limit_,
        "; it waits for nodes there to free",
        " (or for max_switches_wait, if it has one)");
  }
  return WaitReason(fleet_, needs_, layout_gpus_, idle_fit_);
}

}  // namespace xl::scheduler
