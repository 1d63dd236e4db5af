// Rendezvous: the key-value store through which the ranks of one job
// attempt meet (xl-train's ncclUniqueId, Gloo's store). A scope is open while
// its attempt runs and is reachable only with the attempt's token; Get waits
// until every key is set, the deadline passes, or the attempt ends.
//
// Threading: thread-safe, with its own mutex, so ranks meeting never wait on
// the controller. `done` callbacks run without the lock held.
#ifndef XL_SERVER_CONTROL_RENDEZVOUS_H_
#define XL_SERVER_CONTROL_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "xl/v1/rendezvous.pb.h"

namespace xl::control {

class Rendezvous {
 public:
  using GetDone = std::function<void(absl::StatusOr<std::vector<std::string>>)>;

  explicit Rendezvous(const Clock* clock) : clock_(clock) {}

  // The attempt runs: its ranks may meet with `token`. Replaces any older
  // attempt of the job (whose waiters are aborted); the same attempt and
  // token again changes nothing (its keys stay).
  void Open(const std::string& job_id, int32_t attempt,
            const std::string& token);
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
  // missing keys, or ABORTED when the attempt ends first.
  void Get(const v1::RendezvousGetRequest& request, GetDone done);
  // Expires waiters past their deadline.
  void Expire();

 private:
  struct Waiter {
    std::vector<std::string> keys;
    absl::Time deadline_mono;
    GetDone done;
  };
  struct Scope {
    int32_t attempt = 0;
    std::string token;
    std::map<std::string, std::string> kv;
    int64_t bytes = 0;
    std::vector<Waiter> waiters;
  };
  using Calls = std::vector<std::function<void()>>;
  absl::StatusOr<Scope*> Find(const v1::RendezvousScope& scope)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes the scope's waiters whose keys are all set or that expired.
  void Serve(Scope* scope, absl::Time now_mono, Calls* calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Abort(Scope* scope, Calls* calls);

  const Clock* const clock_;
  absl::Mutex mu_;
  std::map<std::string, Scope> scopes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xl::control

#endif  // XL_SERVER_CONTROL_RENDEZVOUS_H_
