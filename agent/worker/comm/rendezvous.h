// Rendezvous: the key-value store ranks meet through, scoped to one job
// attempt. In production it is the scheduler's RendezvousService
// (SchedulerRendezvous); tests use InMemoryRendezvous shared by threads.
// Implementations are thread-safe.
#ifndef XL_AGENT_WORKER_COMM_RENDEZVOUS_H_
#define XL_AGENT_WORKER_COMM_RENDEZVOUS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace xl::worker {

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  virtual absl::Status Put(const std::string& key, const std::string& value) = 0;
  // The values of `keys`, in order, once all are set. DEADLINE_EXCEEDED
  // naming the missing keys after `timeout`.
  virtual absl::StatusOr<std::vector<std::string>> Get(
      const std::vector<std::string>& keys, absl::Duration timeout) = 0;
};

// For tests: ranks as threads of one process.
class InMemoryRendezvous : public Rendezvous {
 public:
  absl::Status Put(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::vector<std::string>> Get(
      const std::vector<std::string>& keys, absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

// The scheduler's RendezvousService, reached at XL_SCHEDULER with the
// job, attempt and XL_RENDEZVOUS_TOKEN of this rank.
std::unique_ptr<Rendezvous> NewSchedulerRendezvous(const std::string& address,
                                                   const std::string& job_id,
                                                   int attempt,
                                                   const std::string& token);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_COMM_RENDEZVOUS_H_
