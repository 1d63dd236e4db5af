#include "server/state/ledger.h"

#include <algorithm>
#include <utility>

namespace xl::state {
namespace {
const std::vector<Hold>& NoHolds() {
  static const auto* kNone = new std::vector<Hold>();
  return *kNone;
}

// Takes the share even where it does not fit: what runs keeps running even
// if its node now reports less (free amounts floor at zero).
void TakeAnyway(scheduler::NodeCapacity* c, const scheduler::NodeShare& share) {
  if (scheduler::Consume(c, share)) return;
  for (int32_t idx : share.gpu_indices) {
    for (size_t i = 0; i < c->info->gpus.size() && i < 64; ++i) {
      if (c->info->gpus[i].index == idx) c->gpu_free &= ~(uint64_t{1} << i);
    }
  }
  c->cpus_free -= share.cpus;
  c->memory_free -= std::min(c->memory_free, share.memory_bytes);
  c->nvme_free -= std::min(c->nvme_free, share.nvme_bytes);
  c->nic_gbps_free -= share.nic_gbps;
}
}  // namespace

void ResourceLedger::SetNode(std::shared_ptr<const scheduler::NodeInfo> info) {
  NodeEntry& entry = nodes_[info->name];
  entry.capacity = scheduler::NodeCapacity::Empty(std::move(info));
  for (const Hold& h : entry.holds) TakeAnyway(&entry.capacity, h.share);
}

bool ResourceLedger::HasNode(const std::string& node) const {
  return nodes_.count(node) > 0;
}

bool ResourceLedger::AddHold(const std::string& node, Hold hold, bool force) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    if (!force) return false;
    // A hold on a node that has not registered since the restart: keep it,
    // so that the node's capacity is right when it comes back.
    scheduler::NodeInfo info;
    info.name = node;
    it = nodes_.emplace(node, NodeEntry{}).first;
    it->second.capacity = scheduler::NodeCapacity::Empty(
        std::make_shared<const scheduler::NodeInfo>(std::move(info)));
  }
  NodeEntry& entry = it->second;
  if (force) {
    TakeAnyway(&entry.capacity, hold.share);
  } else if (!scheduler::Consume(&entry.capacity, hold.share)) {
    return false;
  }
  entry.holds.push_back(std::move(hold));
  return true;
}

bool ResourceLedger::ReleaseRank(const std::string& node, int64_t job_id,
                                 int32_t attempt, int rank, bool* found) {
  if (found != nullptr) *found = false;
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return false;
  NodeEntry& entry = it->second;
  for (auto h = entry.holds.begin(); h != entry.holds.end(); ++h) {
    if (h->job_id != job_id || h->attempt != attempt) continue;
    if (h->live_ranks.erase(rank) == 0) return false;
    if (found != nullptr) *found = true;
    if (!h->live_ranks.empty()) return false;
    scheduler::Release(&entry.capacity, h->share);
    entry.holds.erase(h);
    return true;
  }
  return false;
}

const Hold* ResourceLedger::FindHold(const std::string& node, int64_t job_id,
                                     int32_t attempt) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return nullptr;
  for (const Hold& h : it->second.holds) {
    if (h.job_id == job_id && h.attempt == attempt) return &h;
  }
  return nullptr;
}

const std::vector<Hold>& ResourceLedger::Holds(const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? NoHolds() : it->second.holds;
}

const scheduler::NodeCapacity* ResourceLedger::Capacity(
    const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &it->second.capacity;
}

bool ResourceLedger::Fits(const scheduler::Placement& placement) const {
  std::map<std::string, scheduler::NodeCapacity> trial;
  for (const auto& share : placement.shares) {
    auto it = nodes_.find(share.node);
    if (it == nodes_.end()) return false;
    auto t = trial.emplace(share.node, it->second.capacity).first;
    if (!scheduler::Consume(&t->second, share)) return false;
  }
  return true;
}

void ResourceLedger::Clear() { nodes_.clear(); }

}  // namespace xl::state
