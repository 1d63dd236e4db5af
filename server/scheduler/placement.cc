#include "server/scheduler/placement.h"

#include <algorithm>
#include <deque>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "server/scheduler/fleet_index.h"
#include "server/scheduler/node_fit.h"
#include "server/scheduler/request_class.h"

namespace xl::scheduler {
namespace {

std::string Label(const v1::NodeInventory& inv, const std::string& key) {
  auto it = inv.labels().find(key);
  return it == inv.labels().end() ? std::string() : it->second;
}

uint64_t AllGpus(const NodeInfo& info) {
  const size_t n = std::min<size_t>(info.gpus.size(), 64);
  return n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
}

// Maps the GPU index values of a share to positions on the node. Returns
// false when one is unknown or given twice.
bool GpuPositions(const NodeInfo& info, const std::vector<int32_t>& indices,
                  uint64_t* mask) {
  *mask = 0;
  const size_t n = std::min<size_t>(info.gpus.size(), 64);
  for (int32_t index : indices) {
    size_t pos = 0;
    while (pos < n && info.gpus[pos].index != index) ++pos;
    const uint64_t bit = uint64_t{1} << pos;
    if (pos == n || (*mask & bit) != 0) return false;
    *mask |= bit;
  }
  return true;
}

NodeShare ShareOf(const NodeCapacity& node, uint64_t gpus, const Needs& needs) {
  NodeShare share;
  share.node = node.name();
  for (; gpus != 0; gpus &= gpus - 1) {
    share.gpu_indices.push_back(node.info->gpus[__builtin_ctzll(gpus)].index);
  }
  share.cpus = needs.req->cpus_per_node();
  share.memory_bytes = needs.memory;
  share.nvme_bytes = needs.nvme;
  share.nic_gbps = needs.nic_gbps;
  return share;
}

// The classes of one pass. Jobs with equal requests share one entry: the
// control layer shares one request object between equal requests, so the
// pointer answers first and the serialized request only for new pointers.
class ClassTable {
 public:
  struct Entry {
    std::shared_ptr<const v1::ResourceRequest> request;
    std::unique_ptr<RequestClass> live;  // built at the class's first job
    std::shared_ptr<const std::string> reason;  // set once it failed
    // Nodes that fit one share when it failed (an upper bound after).
    int64_t fitting = -1;
    // Elastic: `reason` already says what even its minimum finds.
    bool elastic_told = false;
  };

  Entry& Find(const std::shared_ptr<const v1::ResourceRequest>& request) {
    if (request == nullptr) {
      if (no_request_.reason == nullptr) {
        no_request_.reason = std::make_shared<const std::string>(
            "the job has no resource request");
      }
      return no_request_;
    }
    auto by_pointer = by_pointer_.find(request.get());
    if (by_pointer != by_pointer_.end()) return entries_[by_pointer->second];
    auto [it, added] = by_content_.emplace(
        request->SerializeAsString(), static_cast<int32_t>(entries_.size()));
    if (added) entries_.push_back(Entry{request, nullptr, nullptr});
    by_pointer_.emplace(request.get(), it->second);
    return entries_[it->second];
  }

 private:
  std::unordered_map<const v1::ResourceRequest*, int32_t> by_pointer_;
  std::unordered_map<std::string, int32_t> by_content_;
  // A deque: an entry found stays where it is while more are added.
  std::deque<Entry> entries_;
  Entry no_request_;
};

}  // namespace

std::shared_ptr<const NodeInfo> NodeInfo::FromInventory(
    const std::string& name, const v1::NodeInventory& inv) {
  auto info = std::make_shared<NodeInfo>();
  info->name = name;
  info->switch_label = Label(inv, "switch");
  info->rack_label = Label(inv, "rack");
  // A free mask has 64 bits: GPUs past the 64th are left unused rather than
  // refusing the node.
  const int gpus = std::min(inv.gpus_size(), 64);
  info->gpus.reserve(gpus);
  for (int i = 0; i < gpus; ++i) {
    const v1::Gpu& g = inv.gpus(i);
    info->gpus.push_back({g.index(), g.model(), g.memory_bytes()});
  }
  info->cpus = inv.cpus();
  info->memory_bytes = inv.memory_bytes();
  for (const auto& d : inv.nvme()) info->nvme_bytes += d.free_bytes();
  for (const auto& nic : inv.nics()) {
    info->nic_gbps = std::max(info->nic_gbps, nic.gbps());
  }
  return info;
}

NodeCapacity NodeCapacity::Empty(std::shared_ptr<const NodeInfo> info) {
  NodeCapacity n;
  n.gpu_free = AllGpus(*info);
  n.cpus_free = info->cpus;
  n.memory_free = info->memory_bytes;
  n.nvme_free = info->nvme_bytes;
  n.nic_gbps_free = info->nic_gbps;
  n.info = std::move(info);
  return n;
}

NodeCapacity NodeCapacity::Empty(std::string name,
                                 const v1::NodeInventory& inv) {
  return Empty(NodeInfo::FromInventory(name, inv));
}

void AddGpuModels(const NodeInfo& info, absl::Span<const int32_t> indices,
                  std::map<std::string, int64_t>* by_model) {
  for (int32_t index : indices) {
    const std::string* model = nullptr;
    for (const NodeInfo::Gpu& gpu : info.gpus) {
      if (gpu.index == index) {
        model = &gpu.model;
        break;
      }
    }
    ++(*by_model)[model != nullptr ? *model : std::string("unknown")];
  }
}

std::string DescribeRequest(const v1::ResourceRequest& req) {
  std::vector<std::string> parts;
  if (req.gpus_per_node() > 0) {
    std::string gpus = absl::StrCat(req.gpus_per_node(), " GPU",
                                    req.gpus_per_node() == 1 ? "" : "s");
    if (req.min_gpu_memory_bytes() > 0) {
      absl::StrAppend(&gpus, " >= ", HumanBytes(req.min_gpu_memory_bytes()));
    }
    if (req.gpu_models_size() > 0) {
      absl::StrAppend(&gpus, " of ", absl::StrJoin(req.gpu_models(), " or "));
    }
    parts.push_back(gpus);
  }
  if (req.cpus_per_node() > 0) {
    parts.push_back(absl::StrCat(req.cpus_per_node(), " CPUs"));
  }
  if (req.memory_bytes_per_node() > 0) {
    parts.push_back(
        absl::StrCat(HumanBytes(req.memory_bytes_per_node()), " memory"));
  }
  if (req.nvme_bytes_per_node() > 0) {
    parts.push_back(
        absl::StrCat(HumanBytes(req.nvme_bytes_per_node()), " NVMe"));
  }
  if (req.nic_gbps_per_node() > 0) {
    parts.push_back(absl::StrFormat("%g Gbit/s NIC", req.nic_gbps_per_node()));
  }
  if (req.max_switches() > 0) {
    parts.push_back(absl::StrCat("under at most ", req.max_switches(),
                                 req.max_switches() == 1 ? " switch"
                                                         : " switches"));
  }
  if (req.exclude_nodes_size() > 0) {
    parts.push_back(absl::StrCat(
        "not on ",
        req.exclude_nodes_size() <= 3
            ? absl::StrJoin(req.exclude_nodes(), ", ")
            : absl::StrCat(req.exclude_nodes(0), " and ",
                           req.exclude_nodes_size() - 1, " more")));
  }
  std::string nodes =
      absl::StrCat(req.nodes(), " node", req.nodes() == 1 ? "" : "s");
  if (parts.empty()) return nodes;
  return absl::StrCat(nodes, " x (", absl::StrJoin(parts, ", "), ")");
}

std::string FitOnNode(const NodeCapacity& node, const v1::ResourceRequest& req,
                      NodeShare* share) {
  const Needs needs(req);
  const uint64_t matching = MatchingGpus(*node.info, req);
  const FreeCapacity free{node.gpu_free, node.cpus_free, node.memory_free,
                          node.nvme_free, node.nic_gbps_free};
  Misfit misfit = Classify(node.unavailable, free, matching, needs);
  if (misfit.kind != Misfit::kFits) return MisfitText(misfit, needs);
  if (share != nullptr) {
    *share = ShareOf(node, LowestBits(matching & free.gpus, needs.gpus), needs);
  }
  return "";
}

bool PlaceGang(const std::vector<NodeCapacity>& nodes,
               const v1::ResourceRequest& req, Placement* placement,
               std::string* reason) {
  FleetIndex fleet(nodes);
  RequestClass klass(fleet, req);
  std::vector<RequestClass::Pick> picks;
  if (!klass.Choose(&picks)) {
    if (reason != nullptr) *reason = klass.WhyNot();
    return false;
  }
  placement->shares.clear();
  for (const auto& pick : picks) {
    placement->shares.push_back(
        ShareOf(fleet.node_at(pick.slot), pick.gpus, klass.needs()));
  }
  return true;
}

bool Consume(NodeCapacity* node, const NodeShare& share) {
  uint64_t gpus;
  if (!GpuPositions(*node->info, share.gpu_indices, &gpus) ||
      (gpus & ~node->gpu_free) != 0 || share.cpus > node->cpus_free ||
      share.memory_bytes > node->memory_free ||
      share.nvme_bytes > node->nvme_free ||
      share.nic_gbps > node->nic_gbps_free + kNicSlackGbps) {
    return false;
  }
  node->gpu_free &= ~gpus;
  node->cpus_free -= share.cpus;
  node->memory_free -= share.memory_bytes;
  node->nvme_free -= share.nvme_bytes;
  node->nic_gbps_free = std::max(0.0, node->nic_gbps_free - share.nic_gbps);
  return true;
}

void Release(NodeCapacity* node, const NodeShare& share) {
  const NodeInfo& info = *node->info;
  uint64_t gpus;
  if (GpuPositions(info, share.gpu_indices, &gpus)) node->gpu_free |= gpus;
  // Never more than the node has, even if a share is given back twice.
  node->cpus_free = std::min<int64_t>(node->cpus_free + share.cpus, info.cpus);
  node->memory_free =
      std::min(node->memory_free + share.memory_bytes, info.memory_bytes);
  node->nvme_free =
      std::min(node->nvme_free + share.nvme_bytes, info.nvme_bytes);
  node->nic_gbps_free =
      std::min(node->nic_gbps_free + share.nic_gbps, info.nic_gbps);
}

namespace {

// Whether a node's free capacity takes one share of a request, ignoring its
// availability; the GPUs the request may use are matched once per GPU
// layout of the fleet.
class ShareFit {
 public:
  ShareFit(const FleetIndex& fleet, const v1::ResourceRequest& req)
      : fleet_(fleet),
        req_(req),
        needs_(req),
        matching_(fleet.layouts().size(), 0),
        matched_(fleet.layouts().size(), false),
        excluded_(req.exclude_nodes().begin(), req.exclude_nodes().end()) {}

  bool operator()(const NodeCapacity& c, int32_t node) {
    if (!excluded_.empty() && excluded_.count(c.name()) > 0) return false;
    const int32_t layout = fleet_.slot(fleet_.slot_of_node(node)).layout;
    if (!matched_[layout]) {
      matching_[layout] = MatchingGpus(*fleet_.layouts()[layout], req_);
      matched_[layout] = true;
    }
    return FitsNow(FreeCapacity{c.gpu_free, c.cpus_free, c.memory_free,
                                c.nvme_free, c.nic_gbps_free},
                   matching_[layout], needs_);
  }
  const Needs& needs() const { return needs_; }

 private:
  const FleetIndex& fleet_;
  const v1::ResourceRequest& req_;
  const Needs needs_;
  std::vector<uint64_t> matching_;
  std::vector<bool> matched_;
  const std::set<std::string> excluded_;
};

// Reservations for blocked jobs (EASY backfill). Keeps what the pass has
// left on every node (`current`) and when running jobs give back what they
// hold; for a blocked job, replays those ends in time order on a copy until
// the gang fits, and holds the nodes it would get.
//
// Cost per reservation: one copy of the nodes, one fit check per node and
// per share given back (the GPUs a request may use are matched once per
// GPU layout), and a placement over the fitting nodes each time enough fit
// (at most kMaxPlacements times): about nodes + running shares. With 8
// reservations, 10,000 nodes x 10,000 pending: +17 ms (schedule_bench).
class Reserver {
 public:
  Reserver(const ClusterSnapshot& snapshot, FleetIndex* fleet)
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

  // Holds the nodes of a reservation an earlier pass made. False when one of
  // them is gone (the reservation no longer stands).
  // False when one of them is gone or unavailable, or a job ranked before it
  // took from one in this pass: the reservation no longer stands. What is
  // left of it is held all the same for the rest of the pass, so jobs
  // ranked after it do not take what it will most likely get again.
  bool Hold(const Reservation& r) {
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

  // Backfill on held nodes: a job that ends (by its time limit) before the
  // reservations holding some nodes begin may run on them meanwhile, as in
  // Slurm. Tries `job` over the nodes that are free or held past its end;
  // on success takes what it gets (from the fleet, for nodes not held) and
  // fills `placement`. At most kMaxBackfills tries a pass.
  bool BackfillOnHeld(const JobRequest& job, Placement* placement) {
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

  // A job this pass starts: its shares leave `current`, and come back at
  // now + time_limit for later reservations.
  void Started(const JobRequest& job, const Placement& placement) {
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

  // Finds the earliest time `job` fits, from the current state and the
  // ends of running jobs, and holds those nodes. False when it never fits
  // on what running jobs with time limits give back.
  bool Reserve(const JobRequest& job, Reservation* out) {
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

  // Preemption: finds the gangs among `candidates` (in the order they
  // should go) whose resources let `job` start now: whole gangs, in order
  // until the job fits, then every one found not needed put back (the last
  // added is needed). Holds the nodes it would start on. False when even
  // all of them do not make room.
  // With `minimize` false every candidate up to the one that made room
  // stays a victim (a reclaim needs them all for the quota).
  bool PreemptFor(const JobRequest& job,
                  const std::vector<const RunningGang*>& candidates,
                  std::vector<const RunningGang*>* victims,
                  Placement* placement, bool minimize = true) {
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

 private:
  bool ReserveOnce(const JobRequest& job, Reservation* out) {
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
      for (const NodeShare& share : end.shares) on |= on_nodes.count(share.node) > 0;
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

 private:
  // What the pass has left, copied, on which shares are given back (or
  // taken again), keeping which nodes take one share of `req` and how many:
  // a gang is placed over those only, so a placement costs about them,
  // not the fleet.
  class Future {
   public:
    Future(const Reserver& r, const v1::ResourceRequest& req,
           int max_placements)
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

  // Each placement runs over nodes that all fit, so the first succeeds
  // unless the request constrains topology; this bounds the rest.
  static constexpr int kMaxPlacements = 8;
  static constexpr int kMaxBackfills = 32;
  static constexpr int kMaxReserveTries = 64;
  // kMaxReserveTries, or twice the reservations asked for (an estimating
  // pass asks for many).
  const int max_reserve_tries_;
  struct End {
    absl::Time at;
    std::string job_id;
    std::vector<NodeShare> shares;
    // A reservation's end: these nodes (indices) are no longer held.
    std::vector<int32_t> unhold;
  };

  // Holds node n for a reservation from `until` on, to `ends` (its time
  // limit after its start; InfiniteFuture: unknown). A node held twice is
  // held from the earlier start to the later end.
  void HoldNode(int32_t n, const std::string& job_id, absl::Time until,
                absl::Time ends = absl::InfiniteFuture()) {
    current_[n].unavailable = absl::StrCat("held for job ", job_id);
    held_until_[n] = held_until_[n] == absl::InfinitePast()
                         ? until
                         : std::min(held_until_[n], until);
    free_from_[n] = std::max(free_from_[n], ends);
    any_held_ = true;
    held_why_.push_back(absl::StrCat("held for job ", job_id, "'s reservation"));
    fleet_->Hold(fleet_->slot_of_node(n), &held_why_.back());
  }

  const absl::Time now_;
  FleetIndex* const fleet_;
  std::vector<NodeCapacity> current_;
  // When the reservation holding each node begins; InfinitePast: not held.
  std::vector<absl::Time> held_until_;
  // When the last reservation holding each node ends (by its time limit).
  std::vector<absl::Time> free_from_;
  bool any_held_ = false;
  // Nodes a job started on in this pass.
  std::vector<bool> touched_;
  // The reasons held slots point to (a deque: stable addresses).
  std::deque<std::string> held_why_;
  int reserve_tries_ = 0;
  std::unordered_set<const v1::ResourceRequest*> unreservable_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<End> ends_;
  size_t sorted_ = 0;  // ends_[0, sorted_) is in time order
  int backfills_ = 0;
  std::unordered_map<const v1::ResourceRequest*, absl::Duration> failed_limit_;
};

// The order gangs are preempted in: lowest priority first, then the least
// GPU time lost.
void SortVictims(std::vector<const RunningGang*>* gangs) {
  std::sort(gangs->begin(), gangs->end(),
            [](const RunningGang* a, const RunningGang* b) {
              if (a->priority != b->priority) {
                return a->priority < b->priority;
              }
              // GPU time lost (a CPU-only gang counts as one GPU).
              const double wa = std::max<int64_t>(a->gpus, 1) *
                                absl::ToDoubleSeconds(a->ran);
              const double wb = std::max<int64_t>(b->gpus, 1) *
                                absl::ToDoubleSeconds(b->ran);
              if (wa != wb) return wa < wb;
              return a->job_id < b->job_id;
            });
}

// Queue policy within a pass: quotas and per-user limits (QuotaBook), kept
// up to date as jobs start. Costs nothing when no queue has a policy.
class PolicyGate {
 public:
  PolicyGate(const ClusterSnapshot& snapshot, const FleetIndex& fleet)
      : snapshot_(snapshot) {
    if (snapshot.policies.empty()) return;
    std::map<std::string, std::map<std::string, int64_t>> by_model, by_user;
    for (const auto& [name, usage] : snapshot.queues) {
      if (snapshot.policies.count(name) == 0) continue;
      by_model[name] = usage.gpus_by_model;
      by_user[name] = usage.user_gpus;
    }
    book_ = std::make_unique<QuotaBook>(&snapshot.policies, by_model, by_user);
    // What the running gangs hold, before this pass starts anything.
    if (snapshot.policy_frees) before_ = std::make_unique<QuotaBook>(*book_);
    std::set<std::string> models;
    for (const NodeInfo* layout : fleet.layouts()) {
      for (const NodeInfo::Gpu& gpu : layout->gpus) models.insert(gpu.model);
    }
    models_.assign(models.begin(), models.end());
  }

  // Whether the job's queue has a policy to check.
  bool governs(const JobRequest& job) const {
    return book_ != nullptr && job.resources != nullptr &&
           job.resources->gpus_per_node() > 0 &&
           snapshot_.policies.count(job.queue) > 0;
  }

  // False with the reason when the job must wait for its queue (and
  // *reclaimable when preempting borrowers of its quota would make room);
  // else true, with job->resources narrowed to the GPU models its quota
  // still covers (*narrowed set) when that is not all it could use.
  bool Admit(JobRequest* job, bool* narrowed,
             std::shared_ptr<const std::string>* why, bool* reclaimable) {
    const v1::ResourceRequest& req = *job->resources;
    const int64_t gpus = int64_t{req.nodes()} * req.gpus_per_node();
    // What failed stays failed for the pass while usage only grows (a
    // reclaim, which gives some back, forgets these).
    const Key key{job->queue, job->user, gpus, job->resources.get()};
    if (auto f = failed_.find(key); f != failed_.end()) {
      *why = f->second.first;
      *reclaimable = f->second.second;
      return false;
    }
    std::string reason;
    if (!AdmitWith(*book_, job, narrowed, &reason, reclaimable)) {
      *why = std::make_shared<const std::string>(reason);
      failed_[key] = {*why, *reclaimable};
      return false;
    }
    return true;
  }

  // Reclaiming a queue's lent quota (Kueue's reclaimWithinCohort): the
  // gangs of other queues of its cohort that hold more than their nominal,
  // lowest priority and least GPU time lost first, as few as let `job` in
  // by quota. Whatever their priority: what they borrowed was lent. Fills
  // `victims` and narrows `job` as Admit does; the quota changes only at
  // CommitReclaim.
  bool Reclaim(JobRequest* job, const std::vector<RunningGang>& running,
               const std::unordered_set<std::string>& preempted,
               std::vector<const RunningGang*>* victims, bool* narrowed) {
    const QueuePolicy& own = snapshot_.policies.at(job->queue);
    if (own.cohort.empty() || !own.reclaim) return false;
    const std::vector<std::string> usable = UsableModels(*job->resources);
    // Only gangs that hold GPUs the job could use, of a queue that holds
    // more of that model's quota than its nominal: what was lent.
    std::vector<const RunningGang*> candidates;
    for (const RunningGang& g : running) {
      auto p = snapshot_.policies.find(g.queue);
      if (!g.preemptible || g.shares.empty() || g.queue == job->queue ||
          preempted.count(g.job_id) > 0 || p == snapshot_.policies.end() ||
          p->second.cohort != own.cohort) {
        continue;
      }
      bool borrowed = false;
      for (const auto& [model, n] : ModelsOf(g.shares)) {
        const std::string* key = p->second.KeyFor(model);
        if (key == nullptr ||
            std::find(usable.begin(), usable.end(), model) == usable.end()) {
          continue;
        }
        auto quota = p->second.quotas.find(*key);
        borrowed |= quota != p->second.quotas.end() &&
                    book_->Used(g.queue, *key) > quota->second.nominal;
      }
      if (borrowed) candidates.push_back(&g);
    }
    SortVictims(&candidates);
    trial_ = std::make_unique<QuotaBook>(*book_);
    victims->clear();
    std::string reason;
    bool reclaimable = false;
    auto charge = [&](const RunningGang* g, int sign) {
      std::map<std::string, int64_t> held = ModelsOf(g->shares);
      for (auto& [model, n] : held) n *= sign;
      trial_->Charge(g->queue, g->user, held);
    };
    auto admits = [&](JobRequest* attempt, bool* narrow) {
      *attempt = *job;
      *narrow = false;
      return AdmitWith(*trial_, attempt, narrow, &reason, &reclaimable);
    };
    JobRequest attempt;
    bool narrow = false;
    for (const RunningGang* g : candidates) {
      charge(g, -1);
      victims->push_back(g);
      if (!admits(&attempt, &narrow)) continue;
      // Those not needed after all go back (the last added is needed).
      for (size_t k = victims->size() - 1; k-- > 0;) {
        charge((*victims)[k], +1);
        JobRequest without;
        bool n = false;
        if (admits(&without, &n)) {
          victims->erase(victims->begin() + k);
        } else {
          charge((*victims)[k], -1);
        }
      }
      admits(&attempt, &narrow);
      *job = std::move(attempt);
      *narrowed = narrow;
      return true;
    }
    return false;
  }
  void CommitReclaim() {
    book_ = std::move(trial_);
    failed_.clear();
  }

  // When the policy would admit `job` if the gangs counted against it
  // ended at their time limits, earliest first, and nothing else started:
  // InfiniteFuture when their ends never make room (no time limits, or
  // more than the quota ever allows). From what the running gangs held
  // before this pass (needs ClusterSnapshot::policy_frees); kept per
  // request for the pass.
  absl::Time FreesAt(const JobRequest& job,
                     const std::vector<RunningGang>& running) {
    const Key key{job.queue, job.user,
                  int64_t{job.resources->nodes()} *
                      job.resources->gpus_per_node(),
                  job.resources.get()};
    if (auto f = frees_.find(key); f != frees_.end()) return f->second;
    const QueuePolicy& own = snapshot_.policies.at(job.queue);
    std::vector<const RunningGang*> ending;
    for (const RunningGang& g : running) {
      if (g.shares.empty() || g.expected_end == absl::InfiniteFuture()) {
        continue;
      }
      if (g.queue != job.queue) {
        auto p = snapshot_.policies.find(g.queue);
        if (own.cohort.empty() || p == snapshot_.policies.end() ||
            p->second.cohort != own.cohort) {
          continue;
        }
      }
      ending.push_back(&g);
    }
    std::sort(ending.begin(), ending.end(),
              [](const RunningGang* a, const RunningGang* b) {
                return a->expected_end < b->expected_end;
              });
    QuotaBook trial(*before_);
    absl::Time at = absl::InfiniteFuture();
    for (size_t i = 0; i < ending.size(); ++i) {
      std::map<std::string, int64_t> held = ModelsOf(ending[i]->shares);
      for (auto& [model, n] : held) n = -n;
      trial.Charge(ending[i]->queue, ending[i]->user, held);
      // Gangs ending at the same time free their GPUs together.
      if (i + 1 < ending.size() &&
          ending[i + 1]->expected_end == ending[i]->expected_end) {
        continue;
      }
      JobRequest attempt = job;
      bool narrowed = false, reclaimable = false;
      std::string reason;
      if (AdmitWith(trial, &attempt, &narrowed, &reason, &reclaimable)) {
        at = ending[i]->expected_end;
        break;
      }
    }
    frees_[key] = at;
    return at;
  }

  // A job that got a reservation (or preempted for one) keeps its quota:
  // jobs of its queue ranked after it cannot use it up meanwhile. Counted
  // on the models of the GPUs it would get (or, without those, the first
  // it may use).
  void ChargeReserved(const JobRequest& job,
                      const std::map<std::string, int64_t>& by_model) {
    if (!by_model.empty()) {
      book_->Charge(job.queue, job.user, by_model);
      return;
    }
    const v1::ResourceRequest& req = *job.resources;
    const std::vector<std::string> usable = UsableModels(req);
    if (usable.empty()) return;
    book_->Charge(job.queue, job.user,
                  {{usable.front(), int64_t{req.nodes()} * req.gpus_per_node()}});
  }
  // A hold of a job not in this pass (a pass over new jobs): its quota is
  // kept as when it was reserved.
  void ChargeHold(const Reservation& r) {
    if (book_ == nullptr || snapshot_.policies.count(r.queue) == 0) return;
    book_->Charge(r.queue, r.user, r.gpus_by_model);
  }

  // GPU model -> GPUs of the shares.
  std::map<std::string, int64_t> ModelsOf(
      const std::vector<NodeShare>& shares) {
    if (infos_.empty()) {
      for (const NodeCapacity& n : snapshot_.nodes) {
        infos_[n.name()] = n.info.get();
      }
    }
    std::map<std::string, int64_t> by_model;
    for (const NodeShare& share : shares) {
      auto it = infos_.find(share.node);
      if (it != infos_.end()) {
        AddGpuModels(*it->second, share.gpu_indices, &by_model);
      }
    }
    return by_model;
  }

  // "queue research's quota has room only for NVIDIA A100-SXM4-80GB now: "
  std::string NarrowedWhy(const JobRequest& job) const {
    return absl::StrCat("queue ", job.queue, "'s quota has room only for ",
                        absl::StrJoin(job.resources->gpu_models(), ", "),
                        " now: ");
  }

  void Charge(const JobRequest& job, const Placement& placement) {
    book_->Charge(job.queue, job.user, ModelsOf(placement.shares));
  }

 private:
  // The fleet's GPU models the request may use.
  std::vector<std::string> UsableModels(const v1::ResourceRequest& req) const {
    std::vector<std::string> usable;
    for (const std::string& m : models_) {
      if (req.gpu_models_size() == 0 ||
          std::find(req.gpu_models().begin(), req.gpu_models().end(), m) !=
              req.gpu_models().end()) {
        usable.push_back(m);
      }
    }
    return usable;
  }

  bool AdmitWith(const QuotaBook& book, JobRequest* job, bool* narrowed,
                 std::string* reason, bool* reclaimable) {
    const v1::ResourceRequest& req = *job->resources;
    const int64_t gpus = int64_t{req.nodes()} * req.gpus_per_node();
    const std::vector<std::string> usable = UsableModels(req);
    // No GPU of the fleet is what it asks for: its class says so.
    if (usable.empty()) return true;
    std::vector<std::string> allowed;
    if (!book.Admit(job->queue, job->user, gpus, usable, &allowed, reason,
                    reclaimable)) {
      return false;
    }
    if (allowed.size() < usable.size()) {
      std::shared_ptr<const v1::ResourceRequest>& n =
          narrowed_[{job->resources.get(), absl::StrJoin(allowed, "\n")}];
      if (n == nullptr) {
        auto copy = std::make_shared<v1::ResourceRequest>(req);
        copy->clear_gpu_models();
        for (const std::string& m : allowed) copy->add_gpu_models(m);
        n = std::move(copy);
      }
      job->resources = n;
      *narrowed = true;
    }
    return true;
  }

  using Key = std::tuple<std::string, std::string, int64_t,
                         const v1::ResourceRequest*>;
  const ClusterSnapshot& snapshot_;
  std::unique_ptr<QuotaBook> book_;
  std::unique_ptr<QuotaBook> trial_;
  std::unique_ptr<QuotaBook> before_;
  std::vector<std::string> models_;
  std::map<Key, std::pair<std::shared_ptr<const std::string>, bool>> failed_;
  std::map<Key, absl::Time> frees_;
  std::map<std::pair<const v1::ResourceRequest*, std::string>,
           std::shared_ptr<const v1::ResourceRequest>>
      narrowed_;
  std::unordered_map<std::string, const NodeInfo*> infos_;
};

// "reserved: expected to start by 2026-12-02 14:05:09 UTC on n1, n2 (when
// jobs 42, 43 end at their time limits)".
std::string ReservationText(const Reservation& r, absl::Time now) {
  std::string nodes = r.nodes.size() <= 4
                          ? absl::StrJoin(r.nodes, ", ")
                          : absl::StrCat(r.nodes[0], ", ", r.nodes[1], ", ",
                                         r.nodes[2], " and ",
                                         r.nodes.size() - 3, " more");
  std::string when =
      r.start <= now
          ? std::string("as soon as its nodes are free")
          : absl::StrCat("by ",
                         absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", r.start,
                                          absl::UTCTimeZone()),
                         " (in ", HumanDuration(r.start - now), ")");
  std::string jobs;
  if (!r.waits_for.empty()) {
    std::vector<std::string> ids(r.waits_for.begin(),
                                 r.waits_for.begin() +
                                     std::min<size_t>(r.waits_for.size(), 5));
    jobs = absl::StrCat(", when job", r.waits_for.size() == 1 ? " " : "s ",
                        absl::StrJoin(ids, ", "),
                        r.waits_for.size() > 5
                            ? absl::StrCat(" and ", r.waits_for.size() - 5,
                                           " more")
                            : "",
                        r.waits_for.size() == 1 ? " ends" : " end",
                        " at the latest (time limits)");
  }
  return absl::StrCat("reserved: expected to start ", when, " on ", nodes,
                      jobs, "; other jobs start only elsewhere meanwhile");
}

}  // namespace

Decisions Schedule(ClusterSnapshot snapshot, std::vector<JobRequest> queue) {
  std::vector<int32_t> order(queue.size());
  std::iota(order.begin(), order.end(), 0);
  // Equal keys keep the queue's order.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const double ra = RankOf(queue[a]), rb = RankOf(queue[b]);
    if (ra != rb) return ra > rb;
    if (queue[a].submit_seq != queue[b].submit_seq) {
      return queue[a].submit_seq < queue[b].submit_seq;
    }
    return a < b;
  });
  FleetIndex fleet(snapshot.nodes);
  int reservations_left = snapshot.max_reservations;
  Decisions out;
  // Made when first needed (a hold to apply, a blocked job), so a pass
  // where everything fits copies no nodes; it then catches up with the
  // jobs started so far (their limits are kept until then).
  std::unique_ptr<Reserver> reserver;
  std::vector<absl::Duration> started_limits;
  auto reserving = [&]() -> Reserver* {
    if (snapshot.max_reservations <= 0 && !snapshot.preemption) return nullptr;
    if (reserver == nullptr) {
      reserver = std::make_unique<Reserver>(snapshot, &fleet);
      JobRequest started;
      for (size_t k = 0; k < out.starts.size(); ++k) {
        started.job_id = out.starts[k].first;
        started.time_limit = started_limits[k];
        reserver->Started(started, out.starts[k].second);
      }
    }
    return reserver.get();
  };
  // Earlier reservations hold their nodes from the first job ranked after
  // theirs on: a new job that outranks one may still take its nodes (and
  // the reservation is dropped, to be decided again).
  std::vector<const Reservation*> holds;
  for (const Reservation& r : snapshot.holds) holds.push_back(&r);
  std::stable_sort(holds.begin(), holds.end(),
                   [](const Reservation* a, const Reservation* b) {
                     return a->priority != b->priority
                                ? a->priority > b->priority
                                : a->submit_seq < b->submit_seq;
                   });
  size_t next_hold = 0;
  PolicyGate policy(snapshot, fleet);
  // Jobs of this pass, when holds of others may need their quota kept.
  std::unordered_set<std::string> in_pass;
  std::unordered_map<std::string, const Reservation*> hold_of;
  if (!snapshot.holds.empty() && !snapshot.policies.empty()) {
    for (const JobRequest& j : queue) in_pass.insert(j.job_id);
    for (const Reservation& r : snapshot.holds) hold_of[r.job_id] = &r;
  }
  auto apply_hold = [&](const Reservation& r) {
    // The held job is not in a pass over new jobs: its quota is kept.
    if (!in_pass.empty() && in_pass.count(r.job_id) == 0) {
      policy.ChargeHold(r);
    }
    if (reservations_left <= 0) {
      out.dropped_holds.push_back(r.job_id);
      return;
    }
    --reservations_left;
    if (!reserving()->Hold(r)) out.dropped_holds.push_back(r.job_id);
  };
  int preemptors_left = snapshot.preemption ? snapshot.max_preemptors : 0;
  // Tries, successful or not, are bounded apart: jobs preemption cannot
  // help do not use up the preemptors.
  int preempt_tries_left = 4 * preemptors_left;
  std::unordered_set<std::string> preempted;
  // Gangs that may be preempted, lowest priority first: a job's candidates
  // are a prefix (found by binary search), so jobs with nothing below them
  // cost nothing.
  std::vector<const RunningGang*> preemptible;
  if (snapshot.preemption) {
    for (const RunningGang& g : snapshot.running) {
      if (g.preemptible && !g.shares.empty()) preemptible.push_back(&g);
    }
    std::stable_sort(preemptible.begin(), preemptible.end(),
                     [](const RunningGang* a, const RunningGang* b) {
                       return a->priority < b->priority;
                     });
  }
  // A request of a queue that found no victims at a priority and rank
  // finds none at a lower one later in the pass (capacity only shrinks,
  // victims only go).
  struct Failed {
    int32_t priority;
    double rank;
  };
  std::map<std::pair<const v1::ResourceRequest*, std::string>, Failed>
      unpreemptable;
  // The rank of the first job left waiting for resources (not for its
  // queue's policy): elastic gangs ranked below it do not grow.
  std::optional<double> first_waiting_rank;
  auto waits_for_resources = [&](double rank) {
    if (!first_waiting_rank.has_value()) first_waiting_rank = rank;
  };
  // The job waits for its victims to stop, holding the nodes they free;
  // `why` heads each victim's reason ("priority 5 > " is followed by the
  // victim's priority).
  auto record_preemption = [&](JobRequest& job,
                               const std::vector<const RunningGang*>& victims,
                               const Placement& placement,
                               const std::string& why, bool may_shrink) {
    Reservation r;
    r.job_id = job.job_id;
    r.priority = RankOf(job);
    r.submit_seq = job.submit_seq;
    absl::Duration grace = absl::ZeroDuration();
    std::vector<std::string> named;
    std::unordered_set<std::string> taken;
    for (const NodeShare& share : placement.shares) taken.insert(share.node);
    for (const RunningGang* v : victims) {
      preempted.insert(v->job_id);
      grace = std::max(grace, v->grace);
      r.waits_for.push_back(v->job_id);
      named.push_back(absl::StrCat("job ", v->job_id, " (", v->queue.empty()
                                                              ? ""
                                                              : v->queue + ", ",
                                   "priority ", v->priority, ", ran ",
                                   HumanDuration(v->ran), ")"));
      Preemption p{v->job_id, job.job_id,
                   absl::StrCat("preempted by job ", job.job_id, " of ",
                                job.user, " (", why,
                                absl::EndsWith(why, "> ")
                                    ? absl::StrCat(v->priority)
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
          keep.start = snapshot.now + v->grace;
          for (const NodeShare& share : kept) {
            p.keep_nodes.push_back(share.node);
          }
          keep.nodes = p.keep_nodes;
          keep.waits_for = {v->job_id};
          keep.queue = v->queue;
          keep.user = v->user;
          keep.gpus_by_model = policy.ModelsOf(kept);
          absl::StrAppend(&p.reason, "; elastic, it shrinks from ",
                          v->shares.size(), " to ", kept.size(), " nodes");
          out.reservations.push_back(std::move(keep));
        }
      }
      out.preemptions.push_back(std::move(p));
    }
    r.start = snapshot.now + grace;
    waits_for_resources(RankOf(job));
    for (const NodeShare& share : placement.shares) {
      r.nodes.push_back(share.node);
    }
    r.queue = job.queue;
    r.user = job.user;
    r.gpus_by_model = policy.ModelsOf(placement.shares);
    if (policy.governs(job)) policy.ChargeReserved(job, r.gpus_by_model);
    out.waiting.emplace_back(
        job.job_id,
        std::make_shared<const std::string>(absl::StrCat(
            "preempting ", absl::StrJoin(named, ", "), " to start on ",
            absl::StrJoin(r.nodes, ", "),
            "; it starts once their ranks have stopped (grace up to ",
            HumanDuration(grace), ")")));
    out.reservations.push_back(std::move(r));
  };
  ClassTable classes;
  // Fixed sizes of elastic requests: one object per (request, nodes) for
  // the pass, so that equal sizes share a class (the base is kept alive
  // with it).
  std::map<std::pair<const v1::ResourceRequest*, int32_t>,
           std::pair<std::shared_ptr<const v1::ResourceRequest>,
                     std::shared_ptr<const v1::ResourceRequest>>>
      sized;
  auto sized_of = [&](const std::shared_ptr<const v1::ResourceRequest>& base,
                      int32_t n) {
    auto& entry = sized[{base.get(), n}];
    if (entry.second == nullptr) {
      auto r = std::make_shared<v1::ResourceRequest>(*base);
      r->set_nodes(n);
      r->set_min_nodes(0);
      entry = {base, std::move(r)};
    }
    return entry.second;
  };
  out.waiting.reserve(queue.size());
  std::vector<RequestClass::Pick> picks;
  std::unordered_set<const v1::ResourceRequest*> reported;
  std::vector<bool> started_at(queue.size(), false);
  for (int32_t i : order) {
    JobRequest& job = queue[i];
    const double rank = RankOf(job);
    while (next_hold < holds.size() &&
           (holds[next_hold]->priority > rank ||
            (holds[next_hold]->priority == rank &&
             holds[next_hold]->submit_seq < job.submit_seq))) {
      apply_hold(*holds[next_hold++]);
    }
    // The queue's policy first: over its quota or a per-user limit, the
    // job waits whatever is free; under a quota that covers only some GPU
    // models, it is placed as if it had asked for those.
    bool narrowed = false;
    // An elastic job its quota admits at fewer nodes than its most.
    bool quota_sized = false;
    // Elastic: at most `nodes`, at least this many (0: not elastic).
    const int32_t min_nodes =
        job.resources != nullptr &&
                job.resources->min_nodes() < job.resources->nodes()
            ? job.resources->min_nodes()
            : 0;
    if (policy.governs(job)) {
      std::shared_ptr<const std::string> why;
      bool reclaimable = false;
      // An elastic job over its quota at its most nodes is admitted at the
      // most its quota takes (fewer GPUs never admit less: binary search).
      auto admit_smaller = [&]() {
        int32_t lo = min_nodes, hi = job.resources->nodes() - 1;
        std::optional<JobRequest> best;
        bool best_narrowed = false;
        while (lo <= hi) {
          const int32_t mid = lo + (hi - lo + 1) / 2;
          JobRequest smaller = job;
          smaller.resources = sized_of(job.resources, mid);
          smaller.preferred = nullptr;
          bool n = false, r = false;
          std::shared_ptr<const std::string> w;
          if (policy.Admit(&smaller, &n, &w, &r)) {
            best = std::move(smaller);
            best_narrowed = n;
            lo = mid + 1;
          } else {
            hi = mid - 1;
          }
        }
        if (!best.has_value()) return false;
        job = *std::move(best);
        narrowed = best_narrowed;
        quota_sized = true;
        return true;
      };
      if (!policy.Admit(&job, &narrowed, &why, &reclaimable) &&
          !(min_nodes > 0 && admit_smaller())) {
        // Its own nominal quota was lent: take it back from borrowers.
        std::vector<const RunningGang*> borrowers, used;
        Placement placement;
        JobRequest reclaiming = job;
        bool narrow = false;
        if (reclaimable && preemptors_left > 0 && job.may_preempt &&
            preempt_tries_left-- > 0 &&
            policy.Reclaim(&reclaiming, snapshot.running, preempted,
                           &borrowers, &narrow) &&
            reserving()->PreemptFor(reclaiming, borrowers, &used, &placement,
                                    /*minimize=*/false)) {
          // Every borrower found is stopped: the quota needs them all,
          // even when fewer make room on the nodes.
          --preemptors_left;
          policy.CommitReclaim();
          record_preemption(reclaiming, borrowers, placement,
                            absl::StrCat("reclaiming the nominal quota queue ",
                                         job.queue, " lent to its cohort"),
                            /*may_shrink=*/false);
          continue;
        }
        if (snapshot.policy_frees) {
          // At its smallest, as it would first be admitted.
          JobRequest smallest = job;
          if (min_nodes > 0) {
            smallest.resources = sized_of(job.resources, min_nodes);
          }
          out.policy_frees_at.emplace_back(
              job.job_id, policy.FreesAt(smallest, snapshot.running));
        }
        out.job_reasons.emplace_back(job.job_id, why);
        out.waiting.emplace_back(std::move(job.job_id), std::move(why));
        continue;
      }
    }
    // Starts the job now if the class of `request` has room; else records
    // why not for the rest of the pass (capacity only shrinks within it).
    auto start_now = [&](ClassTable::Entry& c) {
      if (c.reason != nullptr) return false;
      if (c.live == nullptr) {
        c.live = std::make_unique<RequestClass>(fleet, *c.request);
      } else {
        c.live->CatchUp();
      }
      if (!c.live->Choose(&picks)) {
        c.reason = std::make_shared<const std::string>(c.live->WhyNot());
        c.fitting = c.live->fitting();
        c.live.reset();
        return false;
      }
      Placement placement;
      placement.shares.reserve(picks.size());
      for (const auto& pick : picks) {
        placement.shares.push_back(
            ShareOf(fleet.node_at(pick.slot), pick.gpus, c.live->needs()));
        fleet.Take(pick.slot, pick.gpus, c.live->needs());
      }
      if (reserver != nullptr) {
        reserver->Started(job, placement);
      } else {
        started_limits.push_back(job.time_limit);
      }
      if (policy.governs(job)) policy.Charge(job, placement);
      out.starts.emplace_back(std::move(job.job_id), std::move(placement));
      started_at[i] = true;
      return true;
    };
    // Nodes it would rather avoid (where its last attempt failed) first;
    // if that is all that has room, there.
    if (job.preferred != nullptr && !narrowed &&
        start_now(classes.Find(job.preferred))) {
      continue;
    }
    ClassTable::Entry& c = classes.Find(job.resources);
    if (start_now(c)) continue;
    // Only where something is held can a job backfill onto held nodes.
    if (reserver != nullptr) {
      Placement placement;
      if (reserver->BackfillOnHeld(job, &placement)) {
        reserver->Started(job, placement);
        started_at[i] = true;
        if (policy.governs(job)) policy.Charge(job, placement);
        out.starts.emplace_back(std::move(job.job_id), std::move(placement));
        continue;
      }
    }
    // Elastic: the most nodes that fit now, down to its minimum (each size
    // tried bounds the next by the nodes it found fitting).
    JobRequest smallest;
    if (min_nodes > 0 && job.resources->nodes() > min_nodes) {
      int32_t n = job.resources->nodes() - 1;
      if (c.fitting >= 0) n = static_cast<int32_t>(std::min<int64_t>(n, c.fitting));
      bool started = false;
      while (n >= min_nodes) {
        ClassTable::Entry& sc = classes.Find(sized_of(job.resources, n));
        if (start_now(sc)) {
          started = true;
          break;
        }
        int32_t next = n - 1;
        if (sc.fitting >= 0) {
          next = static_cast<int32_t>(std::min<int64_t>(next, sc.fitting));
        }
        n = next;
      }
      if (started) continue;
      if (!c.elastic_told) {
        c.elastic_told = true;
        ClassTable::Entry& least =
            classes.Find(sized_of(job.resources, min_nodes));
        c.reason = std::make_shared<const std::string>(absl::StrCat(
            "elastic, ", min_nodes, " to ", job.resources->nodes(),
            " nodes; not even ", min_nodes, " fit now: ",
            least.reason != nullptr ? *least.reason : *c.reason));
      }
      // Preempting and reserving for the fewest nodes it runs on.
      smallest = job;
      smallest.resources = sized_of(job.resources, min_nodes);
      smallest.preferred = nullptr;
    }
    JobRequest& target = smallest.resources != nullptr ? smallest : job;
    // Preemption: gangs of a lower priority (of its own queue, unless
    // preemption crosses queues) that it also outranks once requeued make
    // room, whole.
    if (preemptors_left > 0 && preempt_tries_left > 0 && job.may_preempt &&
        target.resources != nullptr) {
      const std::pair<const v1::ResourceRequest*, std::string> key(
          target.resources.get(),
          snapshot.preempt_across_queues ? std::string() : job.queue);
      auto failed = unpreemptable.find(key);
      const auto below = std::lower_bound(
          preemptible.begin(), preemptible.end(), job.priority,
          [](const RunningGang* g, int32_t p) { return g->priority < p; });
      std::vector<const RunningGang*> candidates;
      if (failed == unpreemptable.end() ||
          job.priority > failed->second.priority ||
          RankOf(job) > failed->second.rank) {
        for (auto it = preemptible.begin(); it != below; ++it) {
          const RunningGang* g = *it;
          if ((snapshot.preempt_across_queues || g->queue == job.queue) &&
              g->rank < RankOf(job) && preempted.count(g->job_id) == 0) {
            candidates.push_back(g);
          }
        }
      }
      if (!candidates.empty()) {
        --preempt_tries_left;
        SortVictims(&candidates);
        std::vector<const RunningGang*> victims;
        Placement placement;
        if (reserving()->PreemptFor(target, candidates, &victims, &placement)) {
          --preemptors_left;
          // A shrunk victim keeps quota it did not borrow: only priority
          // preemption shrinks (a reclaim needs all the GPUs back).
          record_preemption(job, victims, placement,
                            absl::StrCat("priority ", job.priority, " > "),
                            /*may_shrink=*/true);
          continue;
        }
        auto [at, added] =
            unpreemptable.emplace(key, Failed{job.priority, RankOf(job)});
        if (!added) {
          at->second.priority = std::max(at->second.priority, job.priority);
          at->second.rank = std::max(at->second.rank, RankOf(job));
        }
      }
    }
    if (reservations_left > 0) {
      Reservation r;
      if (reserving()->Reserve(target, &r)) {
        --reservations_left;
        out.waiting.emplace_back(
            job.job_id, std::make_shared<const std::string>(absl::StrCat(
                            *c.reason, "; ", ReservationText(r, snapshot.now))));
        if (policy.governs(job)) policy.ChargeReserved(target, r.gpus_by_model);
        waits_for_resources(rank);
        out.reservations.push_back(std::move(r));
        // Its nodes are held: every class re-checks what it can have.
        continue;
      }
    }
    // Waiting for the gangs it preempted to stop, it keeps its quota (or
    // borrowers would take it again meanwhile).
    if (!job.may_preempt && policy.governs(job)) {
      auto h = hold_of.find(job.job_id);
      policy.ChargeReserved(target, h != hold_of.end()
                                     ? h->second->gpus_by_model
                                     : std::map<std::string, int64_t>());
    }
    waits_for_resources(rank);
    if (narrowed || quota_sized) {
      // Its request is not the one the caller keeps reasons by.
      auto why = std::make_shared<const std::string>(absl::StrCat(
          narrowed ? policy.NarrowedWhy(job) : std::string(),
          quota_sized ? absl::StrCat("its queue's quota takes ",
                                     job.resources->nodes(), " of its nodes; ")
                      : std::string(),
          *c.reason));
      out.job_reasons.emplace_back(job.job_id, why);
      out.waiting.emplace_back(std::move(job.job_id), std::move(why));
      continue;
    }
    if (reported.insert(job.resources.get()).second) {
      out.class_reasons.emplace_back(job.resources, c.reason);
    }
    out.waiting.emplace_back(std::move(job.job_id), c.reason);
  }
  // Elastic gangs grow onto what is left free, highest rank first, only
  // while no job that outranks them waits for resources (those nodes, and
  // the gang's own once it stops, are theirs first). Its own nodes are
  // excluded (one share per node); the added nodes are taken at once.
  if (snapshot.max_grows > 0) {
    // What earlier passes reserved is never grown onto.
    while (next_hold < holds.size()) apply_hold(*holds[next_hold++]);
    std::vector<const RunningGang*> growable;
    for (const RunningGang& g : snapshot.running) {
      if (g.may_grow && g.request != nullptr && g.min_nodes > 0 &&
          preempted.count(g.job_id) == 0 &&
          static_cast<int32_t>(g.nodes.size()) < g.request->nodes() &&
          (!first_waiting_rank.has_value() || g.rank > *first_waiting_rank)) {
        growable.push_back(&g);
      }
    }
    std::stable_sort(growable.begin(), growable.end(),
                     [](const RunningGang* a, const RunningGang* b) {
                       return a->rank > b->rank;
                     });
    int tries = snapshot.max_grows;
    // Every request tried stays alive for the pass: the quota gate keeps
    // what it decided by the request's address.
    std::vector<std::shared_ptr<const v1::ResourceRequest>> tried;
    for (const RunningGang* g : growable) {
      if (tries-- <= 0) break;
      const int32_t have = static_cast<int32_t>(g->nodes.size());
      auto more = std::make_shared<v1::ResourceRequest>(*g->request);
      more->set_min_nodes(0);
      for (const std::string& node : g->nodes) more->add_exclude_nodes(node);
      JobRequest as;
      as.job_id = g->job_id;
      as.priority = g->priority;
      as.queue = g->queue;
      as.user = g->user;
      int32_t n = g->request->nodes() - have;
      while (n >= 1) {
        more->set_nodes(n);
        as.resources = std::make_shared<const v1::ResourceRequest>(*more);
        tried.push_back(as.resources);
        if (policy.governs(as)) {
          bool narrow = false, reclaimable = false;
          std::shared_ptr<const std::string> why;
          if (!policy.Admit(&as, &narrow, &why, &reclaimable)) {
            --n;
            continue;
          }
        }
        RequestClass klass(fleet, *as.resources);
        if (!klass.Choose(&picks)) {
          n = static_cast<int32_t>(std::min<int64_t>(n - 1, klass.fitting()));
          continue;
        }
        Placement added;
        for (const auto& pick : picks) {
          added.shares.push_back(
              ShareOf(fleet.node_at(pick.slot), pick.gpus, klass.needs()));
          fleet.Take(pick.slot, pick.gpus, klass.needs());
        }
        if (policy.governs(as)) policy.Charge(as, added);
        Grow grow;
        grow.job_id = g->job_id;
        grow.from = have;
        std::vector<NodeShare> all = g->shares;
        std::vector<std::string> new_nodes;
        for (const NodeShare& share : added.shares) {
          all.push_back(share);
          new_nodes.push_back(share.node);
        }
        for (const NodeShare& share : all) grow.nodes.push_back(share.node);
        grow.reason = absl::StrCat(
            "elastic: growing from ", have, " to ", all.size(), " of ",
            g->request->nodes(), " nodes (", absl::StrJoin(new_nodes, ", "),
            " free); it restarts from its checkpoint once its ranks have "
            "stopped");
        Reservation r;
        r.job_id = g->job_id;
        r.priority = g->rank;
        r.submit_seq = g->submit_seq;
        r.start = snapshot.now + g->grace;
        r.nodes = grow.nodes;
        r.waits_for = {g->job_id};
        r.queue = g->queue;
        r.user = g->user;
        r.gpus_by_model = policy.ModelsOf(all);
        out.reservations.push_back(std::move(r));
        out.grows.push_back(std::move(grow));
        break;
      }
    }
  }
  // Fragmentation: free GPUs on nodes where not one share of any request
  // left waiting fits (its GPU count, memory, models, CPUs, memory...),
  // whatever it waits for (reserved, preempting, quota...).
  std::unordered_set<const v1::ResourceRequest*> waiting_requests;
  for (size_t i = 0; i < queue.size(); ++i) {
    if (!started_at[i]) waiting_requests.insert(queue[i].resources.get());
  }
  if (!waiting_requests.empty()) {
    struct Want {
      Needs needs;
      std::vector<uint64_t> matching;  // per layout
    };
    std::vector<Want> wants;
    for (const v1::ResourceRequest* req : waiting_requests) {
      if (req == nullptr || req->gpus_per_node() <= 0) continue;
      Want w{Needs(*req), {}};
      for (const NodeInfo* layout : fleet.layouts()) {
        w.matching.push_back(MatchingGpus(*layout, *req));
      }
      wants.push_back(std::move(w));
    }
    int64_t fragmented = 0;
    for (int sl = 0; sl < fleet.size(); ++sl) {
      const FleetIndex::Slot& slot = fleet.slot(sl);
      if (!slot.available || slot.free.gpus == 0) continue;
      const bool usable = std::any_of(
          wants.begin(), wants.end(), [&](const Want& w) {
            return FitsNow(slot.free, w.matching[slot.layout], w.needs);
          });
      if (!usable) fragmented += __builtin_popcountll(slot.free.gpus);
    }
    out.fragmented_gpus = fragmented;
  }
  return out;
}

}  // namespace xl::scheduler
