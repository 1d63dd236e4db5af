// The pure scheduling core: given the free capacity of every node and the
// queue, decide which jobs start where (gang placement: all of a job's nodes
// at once or none) and why every other job waits. No I/O, no clock, no
// threads: data in, decisions out. Policy: priority, then submit order; a job
// that does not fit does not block smaller ones behind it (no reservation
// yet). Thread-compatible.
#ifndef XL_SERVER_SCHEDULER_PLACEMENT_H_
#define XL_SERVER_SCHEDULER_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "xl/v1/job.pb.h"
#include "xl/v1/node.pb.h"

namespace xl::scheduler {

// What one node has free right now.
struct NodeCapacity {
  std::string name;
  v1::NodeInventory inventory;
  // Empty when the node takes new work; else why not ("drained", ...).
  std::string unavailable;
  // Parallel to inventory.gpus(): true where the GPU is free.
  std::vector<bool> gpu_free;
  int64_t cpus_free = 0;
  uint64_t memory_free = 0;
  uint64_t nvme_free = 0;
  // Unreserved bandwidth of the node's fastest NIC.
  double nic_gbps_free = 0;

  // A node with everything free.
  static NodeCapacity Empty(std::string name, const v1::NodeInventory& inv);
};

// One job as the core sees it.
struct JobRequest {
  std::string job_id;
  int32_t priority = 0;
  int64_t submit_seq = 0;  // FIFO order among equal priorities
  v1::ResourceRequest resources;  // already defaulted and validated
};

// What a job gets on one node.
struct NodeShare {
  std::string node;
  std::vector<int32_t> gpu_indices;  // GPU index values, not positions
  int32_t cpus = 0;
  uint64_t memory_bytes = 0;
  uint64_t nvme_bytes = 0;
  double nic_gbps = 0;
};

// A job's nodes in ring order (group rank order).
struct Placement {
  std::vector<NodeShare> shares;
};

struct Decisions {
  // Jobs to start, in the order decided.
  std::vector<std::pair<std::string, Placement>> starts;
  // For every job left waiting: the reason, in words and numbers.
  std::map<std::string, std::string> waiting;
};

// Returns an empty string when `request` fits on `node` now (and fills
// `share`), else why not, naming the first resource short.
std::string FitOnNode(const NodeCapacity& node, const v1::ResourceRequest& req,
                      NodeShare* share);

// Finds nodes for the whole gang, preferring nodes under one switch and
// ordering nodes so that ring neighbours share a switch, then a rack.
// Returns false and the reason when it does not fit.
bool PlaceGang(const std::vector<NodeCapacity>& nodes,
               const v1::ResourceRequest& req, Placement* placement,
               std::string* reason);

// Takes the nodes' resources for `share` (used to keep a pass consistent).
void Consume(NodeCapacity* node, const NodeShare& share);

// Runs one scheduling pass over `queue` (any order; sorted here).
Decisions Schedule(std::vector<NodeCapacity> nodes,
                   std::vector<JobRequest> queue);

// "2 nodes x (2 GPUs >= 80 GiB, 4 CPUs, 1 TiB NVMe)": a request in words.
std::string DescribeRequest(const v1::ResourceRequest& req);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PLACEMENT_H_
