// Small fleets, requests and jobs for the tests of one phase of a pass.
#ifndef XL_TESTS_SERVER_PASS_FLEET_H_
#define XL_TESTS_SERVER_PASS_FLEET_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/scheduler/placement.h"
#include "xl/v1/job.pb.h"

namespace xl::scheduler::testing {

inline constexpr uint64_t kGiB = 1ull << 30;
// The snapshot's time in these tests.
inline const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

inline v1::NodeInventory Inventory(int gpus, const std::string& model = "H100",
                                   uint64_t gpu_memory = 80 * kGiB) {
  v1::NodeInventory inv;
  inv.set_cpus(32);
  inv.set_memory_bytes(256 * kGiB);
  for (int i = 0; i < gpus; ++i) {
    v1::Gpu* g = inv.add_gpus();
    g->set_index(i);
    g->set_model(model);
    g->set_memory_bytes(gpu_memory);
  }
  return inv;
}

// Nodes n<first>..n<first+count-1>, each with `gpus` GPUs of `model`.
inline std::vector<NodeCapacity> Fleet(int count, int gpus,
                                       const std::string& model = "H100",
                                       int first = 0) {
  std::vector<NodeCapacity> out;
  for (int i = first; i < first + count; ++i) {
    out.push_back(
        NodeCapacity::Empty("n" + std::to_string(i), Inventory(gpus, model)));
  }
  return out;
}

inline std::shared_ptr<const v1::ResourceRequest> Request(int nodes, int gpus,
                                                          int min_nodes = 0) {
  auto r = std::make_shared<v1::ResourceRequest>();
  r->set_nodes(nodes);
  r->set_min_nodes(min_nodes);
  r->set_gpus_per_node(gpus);
  r->set_ranks_per_node(gpus > 0 ? gpus : 1);
  return r;
}

inline JobRequest Job(std::string id,
                      std::shared_ptr<const v1::ResourceRequest> req,
                      int priority = 0, int64_t seq = 0,
                      std::string queue = "") {
  JobRequest j;
  j.job_id = std::move(id);
  j.priority = priority;
  j.submit_seq = seq;
  j.resources = std::move(req);
  j.queue = std::move(queue);
  j.user = "alice";
  return j;
}

// The whole of `node` as one share: what a running gang holds there.
inline NodeShare WholeNode(const NodeCapacity& node) {
  NodeShare s;
  s.node = node.name();
  for (const NodeInfo::Gpu& g : node.info->gpus)
    s.gpu_indices.push_back(g.index);
  return s;
}

// A gang running on whole `nodes` of `fleet` until `end`.
inline RunningGang Gang(std::string id, const std::vector<NodeCapacity>& fleet,
                        std::vector<int> nodes, int priority = 0,
                        absl::Time end = absl::InfiniteFuture()) {
  RunningGang g;
  g.job_id = std::move(id);
  g.priority = priority;
  g.rank = priority;
  g.user = "bob";
  g.expected_end = end;
  for (int n : nodes) {
    g.nodes.push_back(fleet[n].name());
    g.shares.push_back(WholeNode(fleet[n]));
    g.gpus += static_cast<int64_t>(fleet[n].info->gpus.size());
  }
  return g;
}

// `fleet` with what `gangs` hold taken.
inline std::vector<NodeCapacity> Busy(std::vector<NodeCapacity> fleet,
                                      const std::vector<RunningGang>& gangs) {
  for (const RunningGang& g : gangs) {
    for (const NodeShare& s : g.shares) {
      for (NodeCapacity& n : fleet) {
        if (n.name() == s.node) Consume(&n, s);
      }
    }
  }
  return fleet;
}

inline std::vector<std::string> NodesOf(const Placement& p) {
  std::vector<std::string> out;
  for (const NodeShare& s : p.shares) out.push_back(s.node);
  return out;
}

}  // namespace xl::scheduler::testing

#endif  // XL_TESTS_SERVER_PASS_FLEET_H_
