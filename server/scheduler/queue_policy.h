// Queue policy for the pure scheduling core: quotas with borrowing and
// lending inside a cohort (Kueue's semantics), per-user limits, and fair
// share on decayed GPU usage (Slurm's classic multifactor: the factor is
// 2^-(usage / share)). No I/O, no clock: times are given. Thread-compatible.
//
// Quotas count GPUs by model. A queue with quotas may use only the models
// they cover ("*" covers the models it does not name). For a key k (a model
// or "*") of queue Q, with nominal N, borrowing limit B and lending limit L:
//   - Q may hold up to N + B GPUs of k (N alone without a cohort);
//   - in a cohort, after every admission the GPUs its queues hold beyond
//     their nominal never exceed what they leave unused of theirs, each
//     lending at most L (all of its unused nominal when L is unset); so a
//     queue beyond N borrows only what others do not use, and a queue
//     within N whose unused part was lent waits for the borrowers' jobs to
//     end (N - L is never lent: always its own).
// Borrowed GPUs come back when the borrowers' jobs end, or when the lender
// reclaims them by preemption (placement.cc).
#ifndef XL_SERVER_SCHEDULER_QUEUE_POLICY_H_
#define XL_SERVER_SCHEDULER_QUEUE_POLICY_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "xl/v1/queue.pb.h"

namespace xl::scheduler {

inline constexpr char kAnyModel[] = "*";
inline constexpr char kDefaultQueue[] = "default";

struct Quota {
  int64_t nominal = 0;
  int64_t borrowing_limit = -1;  // -1: no limit
  int64_t lending_limit = -1;    // -1: all of the unused nominal
};

// A queue as the core sees it.
struct QueuePolicy {
  std::string name;
  double weight = 1;
  std::string cohort;
  // Quota key (a model, or "*") -> quota. Empty: no quota.
  std::map<std::string, Quota> quotas;
  int64_t max_running_gpus_per_user = 0;  // 0: no limit
  // Takes lent quota back by preemption (QueueSpec.reclaim_lent_quota).
  bool reclaim = false;

  static QueuePolicy FromSpec(const v1::QueueSpec& spec);
  // The key a GPU of `model` is charged to, or nullptr when the queue's
  // quotas do not cover it (never nullptr for a queue without quotas).
  const std::string* KeyFor(const std::string& model) const;
};

// Checks a queue spec and fills its defaults (weight 1). INVALID_ARGUMENT
// names the field and the fix.
absl::Status ValidateQueueSpec(v1::QueueSpec* spec);

// GPUs in use per queue, by quota key and by user; kept up to date within
// a pass as jobs start.
class QuotaBook {
 public:
  // `policies`: queues with a policy (others have none). `by_model`: queue
  // -> GPU model -> GPUs its running jobs hold; `by_user`: queue -> user ->
  // GPUs.
  QuotaBook(const std::map<std::string, QueuePolicy>* policies,
            const std::map<std::string, std::map<std::string, int64_t>>&
                by_model,
            const std::map<std::string, std::map<std::string, int64_t>>&
                by_user);

  // Which of `models` (the GPU models the job could use) a job of `queue`
  // and `user` needing `gpus` GPUs in all may take now. Returns true with
  // every model allowed when none is restricted; true with `allowed` set to
  // a subset; or false with the reason.
  // `reclaimable` (if given) is set when the job would be within its
  // queue's own nominal quota on some model but the cohort lent that part:
  // preempting borrowers would make room.
  bool Admit(const std::string& queue, const std::string& user, int64_t gpus,
             const std::vector<std::string>& models,
             std::vector<std::string>* allowed, std::string* reason,
             bool* reclaimable = nullptr) const;
  // A job started: count what it holds (GPU model -> GPUs); negative
  // counts give back what a preempted job held.
  void Charge(const std::string& queue, const std::string& user,
              const std::map<std::string, int64_t>& gpus_by_model);

  // GPUs the queue holds of a quota key, and beyond its nominal.
  int64_t Used(const std::string& queue, const std::string& key) const;
  int64_t Borrowed(const std::string& queue) const;

 private:
  // Empty when `queue` may take `gpus` more of `key`, else why not;
  // `lent` says the refusal is only because the cohort borrowed the
  // queue's own nominal.
  std::string CheckKey(const QueuePolicy& q, const std::string& key,
                       int64_t gpus, bool* lent = nullptr) const;

  const std::map<std::string, QueuePolicy>* policies_;
  // queue -> key -> GPUs held.
  std::map<std::string, std::map<std::string, int64_t>> used_;
  // queue -> user -> GPUs held.
  std::map<std::string, std::map<std::string, int64_t>> user_gpus_;
  // cohort -> its queues.
  std::map<std::string, std::vector<const QueuePolicy*>> cohorts_;
};

// Usage that halves every half-life: GPU-seconds as of a time.
struct DecayedUsage {
  double value = 0;
  absl::Time as_of = absl::InfinitePast();

  // Decays to `now` (never forward in reverse: a clock that went back
  // decays nothing) and adds `amount`.
  void Add(double amount, absl::Time now, absl::Duration half_life);
  // Decays by `elapsed` (measured on a clock that does not step) and dates
  // the value `now`, whatever `now` was before: a wall clock stepped
  // forward and back does not stop the decay.
  void Decay(absl::Duration elapsed, absl::Duration half_life, absl::Time now);
  double At(absl::Time now, absl::Duration half_life) const;
};

// Fair-share factors from decayed usage, in two levels as Slurm's fair
// tree orders accounts before users: a queue's factor is 2^-(U / S) with U
// its part of everyone's usage and S its weight over all queues' weights; a
// user's factor inside the queue is 2^-(u / s) with u their part of the
// queue's usage and s one over the queue's active users. A job ranks by
// the product, so queues get GPU time by weight however many users they
// have, and users share their queue evenly.
class FairShare {
 public:
  // `weights`: every queue's weight; `queue_usage`, `user_usage`: decayed
  // GPU-seconds; `active_users`: queue -> users with pending or running
  // jobs there.
  // The maps must outlive this object.
  FairShare(const std::map<std::string, double>& weights,
            const std::map<std::string, double>& queue_usage,
            const std::map<std::pair<std::string, std::string>, double>&
                user_usage,
            const std::map<std::string, int64_t>& active_users);

  double QueueShare(const std::string& queue) const;
  // The queue's share split evenly between its active users.
  double UserShare(const std::string& queue) const;
  // The part of everyone's usage.
  double QueueUsage(const std::string& queue) const;
  double UserUsage(const std::string& queue, const std::string& user) const;
  double QueueFactor(const std::string& queue) const;
  double UserFactor(const std::string& queue, const std::string& user) const;
  // The factor a job of (queue, user) ranks by: queue x user factor.
  double Factor(const std::string& queue, const std::string& user) const;

 private:
  static double FactorOf(double usage, double share);

  const std::map<std::string, double>& weights_;
  const std::map<std::string, double>& queue_usage_;
  const std::map<std::pair<std::string, std::string>, double>& user_usage_;
  const std::map<std::string, int64_t>& active_users_;
  double total_weight_ = 0;
  double total_usage_ = 0;
};

// How a pending job's effective priority is made.
struct PriorityWeights {
  double fair_share = 100;
  double age = 10;
  absl::Duration max_age = absl::Hours(24 * 7);
  absl::Duration half_life = absl::Hours(24 * 7);
};

// priority + fair_share x factor + age x min(waited / max_age, 1).
double EffectivePriority(int32_t priority, double fair_share_factor,
                         absl::Duration waited, const PriorityWeights& w,
                         double* age_factor = nullptr);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_QUEUE_POLICY_H_
