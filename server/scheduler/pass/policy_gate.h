// The quota plugin of a pass (Kubernetes' pre-filter and permit, Kueue's
// admission): whether a job's queue admits it now (quotas by GPU model,
// per-user limits, borrowing within a cohort), which GPU models it may then
// use, which borrowers to preempt to reclaim lent quota, and when running
// gangs ending would admit it. Private to the scheduling core: one object
// per pass, not thread-safe, pure.
#ifndef XL_SERVER_SCHEDULER_PASS_POLICY_GATE_H_
#define XL_SERVER_SCHEDULER_PASS_POLICY_GATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/scheduler/fleet_index.h"
#include "server/scheduler/placement.h"
#include "server/scheduler/queue_policy.h"

namespace xl::scheduler {

// Queue policy within a pass: quotas and per-user limits (QuotaBook), kept
// up to date as jobs start. Costs nothing when no queue has a policy.
class PolicyGate {
 public:
  PolicyGate(const ClusterSnapshot& snapshot, const FleetIndex& fleet);

  // Whether the job's queue has a policy to check.
  bool governs(const JobRequest& job) const;

  // False with the reason when the job must wait for its queue (and
  // *reclaimable when preempting borrowers of its quota would make room);
  // else true, with job->resources narrowed to the GPU models its quota
  // still covers (*narrowed set) when that is not all it could use.
  bool Admit(JobRequest* job, bool* narrowed,
             std::shared_ptr<const std::string>* why, bool* reclaimable);

  // Reclaiming a queue's lent quota (Kueue's reclaimWithinCohort): the
  // gangs of other queues of its cohort that hold more than their nominal,
  // lowest priority and least GPU time lost first, as few as let `job` in
  // by quota. Whatever their priority: what they borrowed was lent. Fills
  // `victims` and narrows `job` as Admit does; the quota changes only at
  // CommitReclaim.
  bool Reclaim(JobRequest* job, const std::vector<RunningGang>& running,
               const std::unordered_set<std::string>& preempted,
               std::vector<const RunningGang*>* victims, bool* narrowed);
  void CommitReclaim();

  // When the policy would admit `job` if the gangs counted against it
  // ended at their time limits, earliest first, and nothing else started:
  // InfiniteFuture when their ends never make room (no time limits, or
  // more than the quota ever allows). From what the running gangs held
  // before this pass (needs ClusterSnapshot::policy_frees); kept per
  // request for the pass.
  absl::Time FreesAt(const JobRequest& job,
                     const std::vector<RunningGang>& running);

  // A job that got a reservation (or preempted for one) keeps its quota:
  // jobs of its queue ranked after it cannot use it up meanwhile. Counted
  // on the models of the GPUs it would get (or, without those, the first
  // it may use).
  void ChargeReserved(const JobRequest& job,
                      const std::map<std::string, int64_t>& by_model);
  // A hold of a job not in this pass (a pass over new jobs): its quota is
  // kept as when it was reserved.
  void ChargeHold(const Reservation& r);

  // GPU model -> GPUs of the shares.
  std::map<std::string, int64_t> ModelsOf(const std::vector<NodeShare>& shares);

  // "queue research's quota has room only for NVIDIA A100-SXM4-80GB now: "
  std::string NarrowedWhy(const JobRequest& job) const;

  void Charge(const JobRequest& job, const Placement& placement);

 private:
  // The fleet's GPU models the request may use.
  std::vector<std::string> UsableModels(const v1::ResourceRequest& req) const;

  bool AdmitWith(const QuotaBook& book, JobRequest* job, bool* narrowed,
                 std::string* reason, bool* reclaimable);

  using Key =
      std::tuple<std::string, std::string, int64_t, const v1::ResourceRequest*>;
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

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PASS_POLICY_GATE_H_
