// FileRendezvous: a Rendezvous over a directory that all ranks share (one
// machine, or a shared file system), so xl-train runs without a scheduler
// for benchmarks and tests. A key is a file (written to a temp name, then
// renamed); Get polls every 10 ms. Use a fresh directory (or a new
// XL_ATTEMPT) per run: stale keys of an old run would be read as current.
// Thread-safe (no state but the directory).
#ifndef XL_AGENT_WORKER_COMM_FILE_RENDEZVOUS_H_
#define XL_AGENT_WORKER_COMM_FILE_RENDEZVOUS_H_

#include <string>
#include <vector>

#include "agent/worker/comm/rendezvous.h"

namespace xl::worker {

class FileRendezvous : public Rendezvous {
 public:
  // Keys live under <dir>/<scope>/ (created on first Put).
  FileRendezvous(std::string dir, std::string scope);
  absl::Status Put(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::vector<std::string>> Get(
      const std::vector<std::string>& keys, absl::Duration timeout) override;

 private:
  std::string PathOf(const std::string& key) const;
  const std::string root_;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_COMM_FILE_RENDEZVOUS_H_
