#include "server/scheduler/placement.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"

namespace xl::scheduler {
namespace {

std::string Label(const v1::NodeInventory& inv, const std::string& key) {
  auto it = inv.labels().find(key);
  return it == inv.labels().end() ? std::string() : it->second;
}

double FastestNic(const v1::NodeInventory& inv) {
  double best = 0;
  for (const auto& nic : inv.nics()) best = std::max(best, nic.gbps());
  return best;
}

bool GpuMatches(const v1::Gpu& gpu, const v1::ResourceRequest& req) {
  if (gpu.memory_bytes() < req.min_gpu_memory_bytes()) return false;
  if (req.gpu_models_size() == 0) return true;
  for (const auto& m : req.gpu_models()) {
    if (m == gpu.model()) return true;
  }
  return false;
}

}  // namespace

NodeCapacity NodeCapacity::Empty(std::string name,
                                 const v1::NodeInventory& inv) {
  NodeCapacity n;
  n.name = std::move(name);
  n.inventory = inv;
  n.gpu_free.assign(inv.gpus_size(), true);
  n.cpus_free = inv.cpus();
  n.memory_free = inv.memory_bytes();
  for (const auto& d : inv.nvme()) n.nvme_free += d.free_bytes();
  n.nic_gbps_free = FastestNic(inv);
  return n;
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
    parts.push_back(absl::StrCat(HumanBytes(req.nvme_bytes_per_node()), " NVMe"));
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
  if (!node.unavailable.empty()) return node.unavailable;
  const auto& inv = node.inventory;
  std::vector<int32_t> gpus;
  if (req.gpus_per_node() > 0) {
    int matching = 0;
    for (int i = 0; i < inv.gpus_size(); ++i) {
      if (!GpuMatches(inv.gpus(i), req)) continue;
      ++matching;
      if (node.gpu_free[i] &&
          static_cast<int>(gpus.size()) < req.gpus_per_node()) {
        gpus.push_back(inv.gpus(i).index());
      }
    }
    if (static_cast<int>(gpus.size()) < req.gpus_per_node()) {
      if (matching < req.gpus_per_node()) {
        std::string what = "GPUs";
        if (req.min_gpu_memory_bytes() > 0 || req.gpu_models_size() > 0) {
          what = "matching GPUs";
        }
        return absl::StrFormat("has %d %s, needs %d", matching, what,
                               req.gpus_per_node());
      }
      return absl::StrFormat("%d of %d matching GPUs free, needs %d",
                             gpus.size(), matching, req.gpus_per_node());
    }
  }
  if (req.cpus_per_node() > node.cpus_free) {
    return absl::StrFormat("%d CPUs free, needs %d", node.cpus_free,
                           req.cpus_per_node());
  }
  if (req.memory_bytes_per_node() > node.memory_free) {
    return absl::StrCat(HumanBytes(node.memory_free), " memory free, needs ",
                        HumanBytes(req.memory_bytes_per_node()));
  }
  if (req.nvme_bytes_per_node() > node.nvme_free) {
    return absl::StrCat(HumanBytes(node.nvme_free), " NVMe free, needs ",
                        HumanBytes(req.nvme_bytes_per_node()));
  }
  if (req.nic_gbps_per_node() > node.nic_gbps_free + 1e-9) {
    return absl::StrFormat("%g Gbit/s NIC free, needs %g", node.nic_gbps_free,
                           req.nic_gbps_per_node());
  }
  if (share != nullptr) {
    share->node = node.name;
    share->gpu_indices = std::move(gpus);
    share->cpus = req.cpus_per_node();
    share->memory_bytes = req.memory_bytes_per_node();
    share->nvme_bytes = req.nvme_bytes_per_node();
    share->nic_gbps = req.nic_gbps_per_node();
  }
  return "";
}

void Consume(NodeCapacity* node, const NodeShare& share) {
  for (int32_t idx : share.gpu_indices) {
    for (int i = 0; i < node->inventory.gpus_size(); ++i) {
      if (node->inventory.gpus(i).index() == idx) node->gpu_free[i] = false;
    }
  }
  node->cpus_free -= share.cpus;
  node->memory_free -= std::min(node->memory_free, share.memory_bytes);
  node->nvme_free -= std::min(node->nvme_free, share.nvme_bytes);
  node->nic_gbps_free -= share.nic_gbps;
}

bool PlaceGang(const std::vector<NodeCapacity>& nodes,
               const v1::ResourceRequest& req, Placement* placement,
               std::string* reason) {
  struct Candidate {
    const NodeCapacity* node;
    NodeShare share;
  };
  std::vector<Candidate> fits;
  // Why the others do not fit, grouped: reason -> node names.
  std::map<std::string, std::vector<std::string>> misfits;
  for (const auto& node : nodes) {
    Candidate c{&node, {}};
    std::string why = FitOnNode(node, req, &c.share);
    if (why.empty()) {
      fits.push_back(std::move(c));
    } else {
      misfits[why].push_back(node.name);
    }
  }
  const size_t want = static_cast<size_t>(req.nodes());
  if (fits.size() < want) {
    if (reason != nullptr) {
      // Would the job fit on the whole fleet with nothing else running?
      int could = 0;
      for (const auto& node : nodes) {
        if (FitOnNode(NodeCapacity::Empty(node.name, node.inventory), req,
                      nullptr)
                .empty()) {
          ++could;
        }
      }
      std::string text = absl::StrCat("needs ", DescribeRequest(req), "; ");
      if (static_cast<size_t>(could) < want) {
        absl::StrAppend(&text, "the fleet has only ", could, " such node",
                        could == 1 ? "" : "s", " of ", nodes.size(),
                        " even when idle, so it cannot start until nodes are "
                        "added (or shrink the request); ");
      }
      absl::StrAppend(&text, fits.size(), " fit", fits.size() == 1 ? "s" : "",
                      " now");
      std::vector<std::string> groups;
      for (const auto& [why, names] : misfits) {
        std::vector<std::string> shown(
            names.begin(), names.begin() + std::min<size_t>(names.size(), 4));
        std::string who = absl::StrJoin(shown, ", ");
        if (names.size() > shown.size()) {
          absl::StrAppend(&who, " and ", names.size() - shown.size(), " more");
        }
        groups.push_back(absl::StrCat(who, ": ", why));
      }
      if (!groups.empty()) {
        absl::StrAppend(&text, "; ", absl::StrJoin(groups, "; "));
      }
      if (nodes.empty()) absl::StrAppend(&text, "; no node is registered");
      *reason = text;
    }
    return false;
  }
  // Prefer one switch: the switch with enough fitting nodes and the fewest
  // spare ones (best fit keeps big groups whole for big jobs).
  std::map<std::string, std::vector<Candidate*>> by_switch;
  for (auto& c : fits) by_switch[Label(c.node->inventory, "switch")].push_back(&c);
  std::vector<Candidate*> chosen;
  size_t best_size = SIZE_MAX;
  for (auto& [sw, group] : by_switch) {
    if (sw.empty()) continue;
    if (group.size() >= want && group.size() < best_size) {
      best_size = group.size();
      chosen = group;
    }
  }
  // Ring order: nodes of a switch together, then of a rack, the fastest
  // NICs first within a rack, so the ring crosses the fewest switches.
  auto ring_order = [](Candidate* a, Candidate* b) {
    auto key = [](Candidate* c) {
      return std::make_tuple(Label(c->node->inventory, "switch"),
                             Label(c->node->inventory, "rack"),
                             -FastestNic(c->node->inventory), c->node->name);
    };
    return key(a) < key(b);
  };
  if (chosen.empty()) {
    for (auto& c : fits) chosen.push_back(&c);
  }
  std::sort(chosen.begin(), chosen.end(), ring_order);
  chosen.resize(want);
  placement->shares.clear();
  for (Candidate* c : chosen) placement->shares.push_back(c->share);
  return true;
}

Decisions Schedule(std::vector<NodeCapacity> nodes,
                   std::vector<JobRequest> queue) {
  std::sort(queue.begin(), queue.end(),
            [](const JobRequest& a, const JobRequest& b) {
              if (a.priority != b.priority) return a.priority > b.priority;
              return a.submit_seq < b.submit_seq;
            });
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i].name] = i;
  Decisions out;
  // Jobs with the same request get the same answer until something starts,
  // so a long queue of like jobs costs one placement attempt.
  std::map<std::string, std::string> failed;
  for (const auto& job : queue) {
    std::string key = job.resources.SerializeAsString();
    auto memo = failed.find(key);
    if (memo != failed.end()) {
      out.waiting[job.job_id] = memo->second;
      continue;
    }
    Placement placement;
    std::string reason;
    if (!PlaceGang(nodes, job.resources, &placement, &reason)) {
      failed[key] = reason;
      out.waiting[job.job_id] = reason;
      continue;
    }
    for (const auto& share : placement.shares) {
      Consume(&nodes[index[share.node]], share);
    }
    out.starts.emplace_back(job.job_id, std::move(placement));
  }
  return out;
}

}  // namespace xl::scheduler
