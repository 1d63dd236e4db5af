#include "server/scheduler/placement.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

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
  std::vector<Entry> entries_;
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

Decisions Schedule(ClusterSnapshot snapshot, std::vector<JobRequest> queue) {
  std::vector<int32_t> order(queue.size());
  std::iota(order.begin(), order.end(), 0);
  // Equal keys keep the queue's order.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (queue[a].priority != queue[b].priority) {
      return queue[a].priority > queue[b].priority;
    }
    if (queue[a].submit_seq != queue[b].submit_seq) {
      return queue[a].submit_seq < queue[b].submit_seq;
    }
    return a < b;
  });
  FleetIndex fleet(snapshot.nodes);
  ClassTable classes;
  Decisions out;
  out.waiting.reserve(queue.size());
  std::vector<RequestClass::Pick> picks;
  std::unordered_set<const v1::ResourceRequest*> reported;
  for (int32_t i : order) {
    JobRequest& job = queue[i];
    ClassTable::Entry& c = classes.Find(job.resources);
    if (c.reason == nullptr) {
      if (c.live == nullptr) {
        c.live = std::make_unique<RequestClass>(fleet, *c.request);
      } else {
        c.live->CatchUp();
      }
      if (c.live->Choose(&picks)) {
        Placement placement;
        placement.shares.reserve(picks.size());
        for (const auto& pick : picks) {
          placement.shares.push_back(
              ShareOf(fleet.node_at(pick.slot), pick.gpus, c.live->needs()));
          fleet.Take(pick.slot, pick.gpus, c.live->needs());
        }
        out.starts.emplace_back(std::move(job.job_id), std::move(placement));
        continue;
      }
      // Capacity only shrinks within a pass: the class fails for the rest
      // of it, with this reason.
      c.reason = std::make_shared<const std::string>(c.live->WhyNot());
      c.live.reset();
    }
    if (reported.insert(job.resources.get()).second) {
      out.class_reasons.emplace_back(job.resources, c.reason);
    }
    out.waiting.emplace_back(std::move(job.job_id), c.reason);
  }
  return out;
}

}  // namespace xl::scheduler
