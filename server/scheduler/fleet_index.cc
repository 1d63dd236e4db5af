#include "server/scheduler/fleet_index.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <string_view>
#include <unordered_map>

namespace xl::scheduler {
namespace {

// Gives every distinct label an id such that ids compare like the labels, so
// the ring sort compares integers. Neighbouring nodes usually share labels,
// which skips the hash.
std::vector<int32_t> LabelIds(const std::vector<NodeCapacity>& nodes,
                              std::string NodeInfo::*field,
                              std::vector<std::string_view>* labels) {
  std::unordered_map<std::string_view, int32_t> seen;
  std::vector<int32_t> ids(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::string_view label = (*nodes[i].info).*field;
    if (i > 0 && label == (*labels)[ids[i - 1]]) {
      ids[i] = ids[i - 1];
      continue;
    }
    auto [it, added] =
        seen.emplace(label, static_cast<int32_t>(labels->size()));
    if (added) labels->push_back(label);
    ids[i] = it->second;
  }
  std::vector<int32_t> by_label(labels->size());
  std::iota(by_label.begin(), by_label.end(), 0);
  std::sort(by_label.begin(), by_label.end(),
            [&](int32_t a, int32_t b) { return (*labels)[a] < (*labels)[b]; });
  std::vector<int32_t> rank(labels->size());
  for (size_t k = 0; k < by_label.size(); ++k) rank[by_label[k]] = k;
  for (int32_t& id : ids) id = rank[id];
  std::vector<std::string_view> sorted;
  sorted.reserve(labels->size());
  for (int32_t i : by_label) sorted.push_back((*labels)[i]);
  *labels = std::move(sorted);
  return ids;
}

size_t UsedGpus(const NodeInfo& info) {
  return std::min<size_t>(info.gpus.size(), 64);
}

bool SameGpus(const NodeInfo& a, const NodeInfo& b) {
  if (UsedGpus(a) != UsedGpus(b)) return false;
  for (size_t i = 0; i < UsedGpus(a); ++i) {
    if (a.gpus[i].memory_bytes != b.gpus[i].memory_bytes ||
        a.gpus[i].model != b.gpus[i].model) {
      return false;
    }
  }
  return true;
}

size_t HashGpus(const NodeInfo& info) {
  size_t h = UsedGpus(info);
  for (size_t i = 0; i < UsedGpus(info); ++i) {
    h = h * 1000003 ^ std::hash<std::string_view>()(info.gpus[i].model);
    h = h * 1000003 ^ std::hash<uint64_t>()(info.gpus[i].memory_bytes);
  }
  return h;
}

}  // namespace

FleetIndex::FleetIndex(const std::vector<NodeCapacity>& nodes)
    : nodes_(&nodes) {
  InternLayouts();
  LayOutRing();
}

void FleetIndex::InternLayouts() {
  const std::vector<NodeCapacity>& nodes = *nodes_;
  node_layout_.resize(nodes.size());
  std::unordered_multimap<size_t, int32_t> by_hash;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeInfo& info = *nodes[i].info;
    // Fleets are mostly alike: try the previous node's layout first.
    if (i > 0 && SameGpus(info, *layouts_[node_layout_[i - 1]])) {
      node_layout_[i] = node_layout_[i - 1];
      ++layout_nodes_[node_layout_[i]];
      continue;
    }
    size_t h = HashGpus(info);
    int32_t found = -1;
    auto [first, last] = by_hash.equal_range(h);
    for (auto it = first; it != last; ++it) {
      if (SameGpus(info, *layouts_[it->second])) found = it->second;
    }
    if (found < 0) {
      found = static_cast<int32_t>(layouts_.size());
      layouts_.push_back(&info);
      layout_nodes_.push_back(0);
      by_hash.emplace(h, found);
    }
    node_layout_[i] = found;
    ++layout_nodes_[found];
  }
}

void FleetIndex::LayOutRing() {
  const std::vector<NodeCapacity>& nodes = *nodes_;
  const int n = static_cast<int>(nodes.size());
  std::vector<std::string_view> switches, racks;
  std::vector<int32_t> sw = LabelIds(nodes, &NodeInfo::switch_label, &switches);
  std::vector<int32_t> rack = LabelIds(nodes, &NodeInfo::rack_label, &racks);
  labelled_.resize(switches.size());
  for (size_t i = 0; i < switches.size(); ++i) {
    labelled_[i] = !switches[i].empty();
  }

  // Ring order: a switch's nodes together, then a rack's, the fastest NICs
  // first, so that a ring over them crosses the fewest switches.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (sw[a] != sw[b]) return sw[a] < sw[b];
    if (rack[a] != rack[b]) return rack[a] < rack[b];
    double nic_a = nodes[a].info->nic_gbps, nic_b = nodes[b].info->nic_gbps;
    if (nic_a != nic_b) return nic_a > nic_b;
    const std::string& name_a = nodes[a].name();
    const std::string& name_b = nodes[b].name();
    if (name_a != name_b) return name_a < name_b;
    return a < b;
  });

  slots_.resize(n);
  slot_of_node_.resize(n);
  bucket_of_.resize(n);
  switch_first_bucket_.assign(switches.size() + 1, 0);
  for (int s = 0; s < n; ++s) {
    const int32_t i = order[s];
    const NodeCapacity& cap = nodes[i];
    const NodeInfo& info = *cap.info;
    Slot& slot = slots_[s];
    slot.free = {cap.gpu_free, cap.cpus_free, cap.memory_free, cap.nvme_free,
                 cap.nic_gbps_free};
    uint64_t all = UsedGpus(info) == 64 ? ~uint64_t{0}
                                        : (uint64_t{1} << UsedGpus(info)) - 1;
    slot.idle = {all, info.cpus, info.memory_bytes, info.nvme_bytes,
                 info.nic_gbps};
    slot.node = i;
    slot.layout = node_layout_[i];
    slot.available = cap.unavailable.empty();
    slot_of_node_[i] = s;

    const bool new_switch = s == 0 || sw[i] != sw[order[s - 1]];
    if (new_switch || s - bucket_begin_.back() == kBucketSlots) {
      if (new_switch) switch_first_bucket_[sw[i]] = bucket_begin_.size();
      bucket_begin_.push_back(s);
      bucket_switch_.push_back(sw[i]);
    }
    bucket_of_[s] = static_cast<int32_t>(bucket_begin_.size()) - 1;
  }
  switch_first_bucket_[switches.size()] = bucket_begin_.size();
  node_layout_.clear();
  node_layout_.shrink_to_fit();
}

void FleetIndex::Take(int s, uint64_t gpus, const Needs& needs) {
  FreeCapacity& free = slots_[s].free;
  free.gpus &= ~gpus;
  free.cpus -= needs.cpus;
  free.memory -= std::min(free.memory, needs.memory);
  free.nvme -= std::min(free.nvme, needs.nvme);
  free.nic_gbps -= needs.nic_gbps;
  taken_.push_back(bucket_of_[s]);
}

void FleetIndex::Hold(int s, const std::string* why) {
  slots_[s].free = FreeCapacity();
  slots_[s].held = why;
  taken_.push_back(bucket_of_[s]);
}

}  // namespace xl::scheduler
