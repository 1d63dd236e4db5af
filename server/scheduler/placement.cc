#include "server/scheduler/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "server/scheduler/fleet_index.h"
#include "server/scheduler/node_fit.h"
#include "server/scheduler/pass/share_fit.h"
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

}  // namespace xl::scheduler
