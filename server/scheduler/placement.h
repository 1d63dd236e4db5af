// The pure scheduling core: given a snapshot of the cluster (what every node
// has free, the running gangs, per-queue usage) and the pending queue, decide
// which jobs start where (gang placement: all of a job's nodes at once or
// none) and why every other job waits. No I/O, no clock, no threads: data in,
// decisions out. Policy: effective priority (priority with fair share and
// age), then submit order; a job over its queue's quota or per-user limit
// waits (QuotaBook), and a job of a queue with quotas uses only GPU models
// the quota still covers; a job that does not fit
// does not block smaller ones behind it, except that the first blocked jobs
// (ClusterSnapshot::max_reservations of them) get reservations, as in EASY
// backfill: from running jobs' time limits, the earliest time and the nodes
// each could start on; those nodes are held, so jobs behind it start now
// only elsewhere, and a big gang is not starved by small jobs.
//
// Cost: jobs with equal requests form a class and are answered together; a
// class that fails once fails for the rest of the pass (capacity only shrinks
// within a pass); fitting nodes are found through per-class candidate lists
// grouped by switch, so a pass costs about nodes x classes + starts, not
// nodes x jobs. Reasons are built once per class. Thread-compatible.
#ifndef XL_SERVER_SCHEDULER_PLACEMENT_H_
#define XL_SERVER_SCHEDULER_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/scheduler/queue_policy.h"
#include "xl/v1/job.pb.h"
#include "xl/v1/node.pb.h"

namespace xl::scheduler {

// What a node is, as far as placement cares; built once per registration and
// shared (immutable) by every snapshot.
struct NodeInfo {
  struct Gpu {
    int32_t index = 0;  // the GPU's index value (CUDA_VISIBLE_DEVICES)
    std::string model;
    uint64_t memory_bytes = 0;
  };
  std::string name;
  std::string switch_label;  // labels["switch"], or empty
  std::string rack_label;    // labels["rack"], or empty
  std::vector<Gpu> gpus;     // at most 64
  int64_t cpus = 0;
  uint64_t memory_bytes = 0;
  uint64_t nvme_bytes = 0;   // free bytes of all NVMe devices at registration
  double nic_gbps = 0;       // the fastest NIC

  static std::shared_ptr<const NodeInfo> FromInventory(
      const std::string& name, const v1::NodeInventory& inv);
};

// What one node has free right now. Cheap to copy (the static part is shared).
struct NodeCapacity {
  std::shared_ptr<const NodeInfo> info;
  // Empty when the node takes new work; else why not ("drained", ...).
  std::string unavailable;
  // Bit i set: info->gpus[i] (a position, not an index value) is free.
  uint64_t gpu_free = 0;
  int64_t cpus_free = 0;
  uint64_t memory_free = 0;
  uint64_t nvme_free = 0;
  // Unreserved bandwidth of the node's fastest NIC.
  double nic_gbps_free = 0;

  const std::string& name() const { return info->name; }

  // A node with everything free.
  static NodeCapacity Empty(std::shared_ptr<const NodeInfo> info);
  static NodeCapacity Empty(std::string name, const v1::NodeInventory& inv);
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

// One job as the core sees it.
struct JobRequest {
  std::string job_id;
  int32_t priority = 0;
  // What the queue is ordered by (priority with fair share and age, see
  // EffectivePriority); unset: the priority.
  std::optional<double> effective_priority;
  int64_t submit_seq = 0;  // FIFO order among equal priorities
  // Already defaulted and validated. Jobs whose requests are equal form one
  // class; the control layer shares one object between equal requests, so
  // the core can compare pointers before contents.
  std::shared_ptr<const v1::ResourceRequest> resources;
  std::string queue;
  std::string user;
  // How long it may run (InfiniteDuration: no limit): a job started in this
  // pass frees its nodes by now + time_limit, for reservations behind it.
  absl::Duration time_limit = absl::InfiniteDuration();
  // False while gangs preempted for it are still stopping: it waits for
  // them rather than preempting more.
  bool may_preempt = true;
  // Tried first when set: the request with nodes it had rather not use
  // (where its last attempt failed) excluded; `resources` if that does
  // not fit now.
  std::shared_ptr<const v1::ResourceRequest> preferred;
};

// A job that runs now (input for policy: preemption, reservations).
struct RunningGang {
  std::string job_id;
  int32_t priority = 0;
  std::string queue;
  std::string user;
  std::vector<std::string> nodes;
  int64_t gpus = 0;
  // When its time limit ends it at the latest; InfiniteFuture without one.
  absl::Time expected_end = absl::InfiniteFuture();
  // What it holds on each node (given back at expected_end, for
  // reservations and preemption).
  std::vector<NodeShare> shares;
  // Preemption: whether it may be preempted now (it allows it, is not
  // already stopping, and has run its queue's minimum runtime), how long it
  // has run (work lost) and the grace its ranks get to checkpoint.
  bool preemptible = false;
  absl::Duration ran = absl::ZeroDuration();
  absl::Duration grace = absl::Seconds(10);
  // The effective priority it would have once requeued: a job preempts it
  // only if it outranks that too, or the victim would rank first when its
  // nodes free and take them back.
  double rank = 0;
  // Elastic (resources.min_nodes > 0): its request (at the most nodes),
  // and whether it may grow now (it has fewer nodes than it asked for and
  // has run long enough since its last start). A preemption that leaves it
  // at least min_nodes of its nodes shrinks it onto those instead.
  std::shared_ptr<const v1::ResourceRequest> request;
  int32_t min_nodes = 0;
  bool may_grow = false;
  // Its place among equal ranks (JobRequest::submit_seq): the hold of its
  // restart after a resize applies to jobs after it, not to itself.
  int64_t submit_seq = 0;
};

// A running gang stopped so that a job ranked above it can start: whole
// gangs only, requeued without spending a retry.
struct Preemption {
  std::string victim;
  std::string for_job;
  std::string reason;
  // An elastic victim left at least its min_nodes: it restarts on these
  // (held for it in `Decisions::reservations`) instead of waiting whole.
  std::vector<std::string> keep_nodes;
};

// An elastic job that grows: its attempt stops and the next one starts on
// `nodes` (its own and the ones this pass found free, held for it in
// `Decisions::reservations` meanwhile).
struct Grow {
  std::string job_id;
  int32_t from = 0;
  std::vector<std::string> nodes;
  std::string reason;
};

// A blocked job's claim on the future: the nodes it is expected to start on
// and when (the time limits of the jobs holding them). Those nodes are held
// for it: nothing else starts on them meanwhile.
struct Reservation {
  std::string job_id;
  // The job's rank (its effective priority): a hold applies only to jobs
  // ranked after it.
  double priority = 0;
  int64_t submit_seq = 0;
  absl::Time start;
  std::vector<std::string> nodes;
  // The running jobs whose ends free those nodes.
  std::vector<std::string> waits_for;
  // Whose it is, and the GPUs by model it would take (its quota is kept
  // for it in passes it is not part of).
  std::string queue;
  std::string user;
  std::map<std::string, int64_t> gpus_by_model;
};

struct QueueUsage {
  int64_t running_jobs = 0;
  int64_t gpus_in_use = 0;
  int64_t pending_jobs = 0;
  // What its running jobs hold: GPU model -> GPUs, user -> GPUs (for
  // quotas and per-user limits; filled when the queue has a policy).
  std::map<std::string, int64_t> gpus_by_model;
  std::map<std::string, int64_t> user_gpus;
};

// Everything a pass decides on, copied out of the scheduler's state.
struct ClusterSnapshot {
  std::vector<NodeCapacity> nodes;
  std::vector<RunningGang> running;
  std::map<std::string, QueueUsage> queues;
  // Queues with quotas or per-user limits (see QuotaBook); a job of a queue
  // not here is limited by nothing but the fleet.
  std::map<std::string, QueuePolicy> policies;
  // The time reservations are computed from (wall clock).
  absl::Time now = absl::UnixEpoch();
  // How many blocked jobs get reservations (0: none; jobs are placed
  // greedily in policy order).
  int max_reservations = 0;
  // Preemption: a blocked job may stop running gangs of a lower priority
  // (not effective priority: fair share moves, and would churn) that are
  // `preemptible`, the fewest and cheapest (lowest priority, least GPU time
  // lost) whose resources let it start; at most max_preemptors jobs a pass
  // preempt.
  bool preemption = false;
  // Priority preemption stops only gangs of the preemptor's own queue
  // (Kueue's LowerPriority within a ClusterQueue) unless this is set;
  // reclaiming lent quota crosses queues within a cohort either way.
  bool preempt_across_queues = false;
  int max_preemptors = 4;
  // Elastic gangs (RunningGang::may_grow) grown this pass onto what is left
  // free after the pending jobs, highest rank first; 0: none.
  int max_grows = 0;
  // For estimates: when the queue's policy would admit each job it holds
  // (Decisions::policy_frees_at).
  bool policy_frees = false;
  // Reservations an earlier pass made that still stand (a pass over new jobs
  // only): their nodes are held from the first job ranked after theirs on,
  // and they count towards max_reservations.
  std::vector<Reservation> holds;
};


// A job's nodes in ring order (group rank order).
struct Placement {
  std::vector<NodeShare> shares;
};

struct Decisions {
  // Jobs to start, in the order decided.
  std::vector<std::pair<std::string, Placement>> starts;
  // Every job left waiting, with the reason in words and numbers. Jobs of
  // one class share one string.
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>>
      waiting;
  // The same reasons once per request object of a waiting job, for a caller
  // that keeps reasons by class rather than touching every waiting job.
  std::vector<std::pair<std::shared_ptr<const v1::ResourceRequest>,
                        std::shared_ptr<const std::string>>>
      class_reasons;
  // The reservations this pass made, in policy order; each reserved job is
  // also in `waiting`, with its own reason saying when and where.
  std::vector<Reservation> reservations;
  // Jobs that wait because of their queue's policy (a quota, a per-user
  // limit) rather than what their class finds free; also in `waiting`.
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>>
      job_reasons;
  // With ClusterSnapshot::policy_frees: for each job its queue's quota or
  // per-user limit holds, when the running gangs that count against it
  // (its queue's and its cohort's) have ended at their time limits enough
  // for the policy to admit it, as things stand (jobs ranked before it may
  // take that room first). InfiniteFuture when their ends never make room.
  std::vector<std::pair<std::string, absl::Time>> policy_frees_at;
  // Gangs to stop (each once), for jobs that then wait in `waiting` with
  // a reservation (in `reservations`) on the nodes they free.
  std::vector<Preemption> preemptions;
  // Elastic gangs to restart on more nodes.
  std::vector<Grow> grows;
  // Free GPUs (after this pass) on nodes where not one share of any job
  // left waiting fits: the fleet's fragmentation. -1 when no job waits.
  int64_t fragmented_gpus = -1;
  // Holds that no longer stand (a node gone, or taken by a job ranked before
  // the reserved one): the caller forgets them and decides again in a full
  // pass.
  std::vector<std::string> dropped_holds;
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

// Takes the node's resources for `share`. Returns false (and changes
// nothing) when the node no longer has them.
bool Consume(NodeCapacity* node, const NodeShare& share);
// Gives them back.
void Release(NodeCapacity* node, const NodeShare& share);

// The key the queue is ordered by: the effective priority, else priority.
inline double RankOf(const JobRequest& job) {
  return job.effective_priority.value_or(job.priority);
}

// Counts the GPUs with these index values by model into `by_model`
// ("unknown" for an index the node does not have).
void AddGpuModels(const NodeInfo& info, absl::Span<const int32_t> indices,
                  std::map<std::string, int64_t>* by_model);

// "2 nodes x (2 GPUs >= 80 GiB, 4 CPUs, 1 TiB NVMe)": a request in words.
std::string DescribeRequest(const v1::ResourceRequest& req);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PLACEMENT_H_
