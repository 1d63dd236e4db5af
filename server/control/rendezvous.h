// Rendezvous: the key-value store through which the ranks of one job
// attempt meet (xl-train's ncclUniqueId, Gloo's store). A scope is open while
// its attempt runs and is reachable only with the attempt's token; Get waits
// until every key is set, the deadline passes, or the attempt ends.
//
// Bounded, so that one attempt cannot hurt another's: at most 64 MiB and
// 100,000 keys, and 4 x world size (at least 16) waiting Gets of at most
// 1,024 keys each, none waiting longer than 30 minutes. A Put wakes only the
// waiters of its key (an index by key).
//
// Threading: thread-safe. A mutex guards the map of scopes only; each scope
// has its own, so ranks of one job meeting never wait on another job's, nor
// on the controller. `done` callbacks run without any lock held.
#ifndef XL_SERVER_CONTROL_RENDEZVOUS_H_
#define XL_SERVER_CONTROL_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/limits.h"
#include "xl/v1/rendezvous.pb.h"

namespace xl::control {

class Rendezvous {
 public:
  using GetDone = std::function<void(absl::StatusOr<std::vector<std::string>>)>;

  static constexpr int kMaxKeysPerGet = kMaxRendezvousKeysPerGet;
  static constexpr int kMinWaiters = 16;
  static constexpr absl::Duration kMaxWait = absl::Minutes(30);

  explicit Rendezvous(const Clock* clock) : clock_(clock) {}

  // The attempt runs: its `world_size` ranks may meet with `token`. Replaces
  // any older attempt of the job (whose waiters are aborted); the same
  // attempt and token again changes nothing (its keys stay).
  void Open(const std::string& job_id, int32_t attempt,
            const std::string& token, int32_t world_size);
  // Closes every scope but those of `job_ids`.
  void RetainOnly(const std::set<std::string>& job_ids);
  // The attempt is over: waiters get ABORTED, keys are dropped.
  void Close(const std::string& job_id);
  // Close() every scope.
  void CloseAll();

  // Both answer PERMISSION_DENIED unless the scope names an open attempt
  // with its token.
  absl::Status Put(const v1::RendezvousPutRequest& request);
  // `done` runs once every key is set, or with DEADLINE_EXCEEDED naming the
  // missing keys, or ABORTED when the attempt ends first;
  // INVALID_ARGUMENT for no keys or more than kMaxKeysPerGet;
  // RESOURCE_EXHAUSTED when the attempt has as many Gets waiting as it may
  // (a Get whose keys are all set is answered at once and takes no place).
  // No timeout waits 5 minutes, one past kMaxWait waits kMaxWait, zero or
  // less does not wait.
  // `caller_left`: how long the caller will still wait for the answer (its
  // call's deadline); the wait ends then too.
  void Get(const v1::RendezvousGetRequest& request, GetDone done,
           absl::Duration caller_left = absl::InfiniteDuration());
  // Expires waiters past their deadline.
  void Expire();

 private:
  using Calls = std::vector<std::function<void()>>;
  struct Waiter {
    std::vector<std::string> keys;
    size_t missing = 0;
    absl::Time deadline_mono;
    GetDone done;
  };
  struct Scope {
    absl::Mutex mu;
    int32_t attempt ABSL_GUARDED_BY(mu) = 0;
    std::string token ABSL_GUARDED_BY(mu);
    int32_t max_waiters ABSL_GUARDED_BY(mu) = kMinWaiters;
    bool closed ABSL_GUARDED_BY(mu) = false;
    std::map<std::string, std::string> kv ABSL_GUARDED_BY(mu);
    int64_t bytes ABSL_GUARDED_BY(mu) = 0;
    // Waiters by id, and the ids waiting for each key not yet set.
    std::map<uint64_t, Waiter> waiters ABSL_GUARDED_BY(mu);
    std::map<std::string, std::set<uint64_t>> waiting_for ABSL_GUARDED_BY(mu);
    uint64_t next_waiter ABSL_GUARDED_BY(mu) = 0;
  };

  // The open scope of `s` (its lock not taken), or PERMISSION_DENIED.
  absl::StatusOr<std::shared_ptr<Scope>> Find(const v1::RendezvousScope& s)
      ABSL_LOCKS_EXCLUDED(mu_);
  static absl::Status CheckToken(Scope* scope, const v1::RendezvousScope& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(scope->mu);
  // Completes waiter `id` with the values of its keys.
  static void Complete(Scope* scope, uint64_t id, Calls* calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(scope->mu);
  static void Abort(Scope* scope, Calls* calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(scope->mu);
  static void Run(Calls& calls);

  const Clock* const clock_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Scope>> scopes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xl::control

#endif  // XL_SERVER_CONTROL_RENDEZVOUS_H_
