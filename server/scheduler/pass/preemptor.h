// The preemption plugin of a pass (Kubernetes' post-filter): which running
// gangs a blocked job may stop, in which order, within the pass's budget,
// and what a preemption decides (the victims' requeue reasons, an elastic
// victim's shrink, the job's reservation on the nodes they free).
// Private to the scheduling core: one object per pass, not thread-safe,
// pure.
#ifndef XL_SERVER_SCHEDULER_PASS_PREEMPTOR_H_
#define XL_SERVER_SCHEDULER_PASS_PREEMPTOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "server/scheduler/pass/policy_gate.h"
#include "server/scheduler/placement.h"

namespace xl::scheduler {

// The order gangs are preempted in: lowest priority first, then the least
// GPU time lost.
void SortVictims(std::vector<const RunningGang*>* gangs);

class Preemptor {
 public:
  // `snapshot` must outlive the object.
  explicit Preemptor(const ClusterSnapshot& snapshot);

  // Whether a job may still try to preempt in this pass: preemption is on,
  // fewer than max_preemptors jobs preempted, tries are left, and the job
  // may preempt.
  bool MayTry(const JobRequest& job) const {
    return preemptors_left_ > 0 && tries_left_ > 0 && job.may_preempt;
  }
  // Counts one try (successful or not): jobs preemption cannot help do not
  // use up the preemptors. Returns whether one was left.
  bool UseTry() { return tries_left_-- > 0; }

  // The running gangs `job` may stop so that `target` (the job, or its
  // smallest size when elastic) fits: preemptible gangs of a lower priority
  // that it also outranks once requeued, of its own queue unless
  // preemption crosses queues, not already preempted; in the order they
  // should go. Empty when an earlier job of the same request and queue
  // found none at a priority and rank at least this job's (capacity only
  // shrinks in a pass, victims only go).
  std::vector<const RunningGang*> Candidates(const JobRequest& job,
                                             const JobRequest& target) const;
  // Records that `candidates` did not make room for `target`.
  void NoneFound(const JobRequest& job, const JobRequest& target);

  // `job` preempts `victims` and will start on `placement` once they have
  // stopped: adds the preemptions (with an elastic victim's shrink onto
  // the nodes it keeps, when `may_shrink`), the job's reservation and its
  // reason to `out`, and keeps its quota in `policy`. `why` heads each
  // victim's reason ("priority 5 > " is followed by the victim's priority).
  void Record(const JobRequest& job,
              const std::vector<const RunningGang*>& victims,
              const Placement& placement, const std::string& why,
              bool may_shrink, PolicyGate* policy, Decisions* out);

  // The gangs preempted so far in this pass.
  const std::unordered_set<std::string>& preempted() const {
    return preempted_;
  }

 private:
  using Key = std::pair<const v1::ResourceRequest*, std::string>;
  Key KeyOf(const JobRequest& job, const JobRequest& target) const;

  const ClusterSnapshot& snapshot_;
  int preemptors_left_;
  // Tries, successful or not, are bounded apart.
  int tries_left_;
  std::unordered_set<std::string> preempted_;
  // Gangs that may be preempted, lowest priority first: a job's candidates
  // are a prefix (found by binary search), so jobs with nothing below them
  // cost nothing.
  std::vector<const RunningGang*> preemptible_;
  // A request of a queue that found no victims at a priority and rank
  // finds none at a lower one later in the pass.
  struct Failed {
    int32_t priority;
    double rank;
  };
  std::map<Key, Failed> unpreemptable_;
};

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PASS_PREEMPTOR_H_
