// Collective: the collectives xl-train needs, over Gloo (CPU, TCP) or NCCL
// (GPU rings). One instance per rank; not thread-safe (one caller thread,
// except where an implementation documents a background stream).
#ifndef XL_AGENT_WORKER_COMM_COLLECTIVE_H_
#define XL_AGENT_WORKER_COMM_COLLECTIVE_H_

#include <cstddef>

#include "absl/status/status.h"

namespace xl::worker {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Replaces data[0..count) on every rank with the element-wise mean over
  // ranks. Every rank ends with bitwise the same values.
  virtual absl::Status AllReduceMean(float* data, size_t count) = 0;
  // Copies data[0..count) of `root` to every rank.
  virtual absl::Status Broadcast(float* data, size_t count, int root) = 0;
  virtual absl::Status Barrier() = 0;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_COMM_COLLECTIVE_H_
