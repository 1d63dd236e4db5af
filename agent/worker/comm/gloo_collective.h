// GlooCollective: the CPU Collective over Gloo's TCP transport. Ranks meet
// through our Rendezvous (a gloo::rendezvous::Store adapter, keys prefixed
// "gloo/") and form Gloo's full mesh of TCP pairs. The pairs are then put in
// Gloo's synchronous mode, where the calling thread does the socket I/O itself
// (no hand-off to Gloo's device thread and no per-message ready handshake),
// and AllReduceMean is a segmented ring (reduce-scatter, then all-gather)
// over them: each chunk is reduced by one owner and copied to the others, so
// every rank ends with bitwise the same values. One instance per rank, used
// from one thread.
#ifndef XL_AGENT_WORKER_COMM_GLOO_COLLECTIVE_H_
#define XL_AGENT_WORKER_COMM_GLOO_COLLECTIVE_H_

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/worker/comm/collective.h"
#include "agent/worker/comm/rendezvous.h"

namespace gloo {
class Context;
}

namespace xl::worker {

struct GlooOptions {
  // The address peers reach this rank at; empty: XL_NODE_ADDRESS, else
  // MASTER_ADDR, else 127.0.0.1.
  std::string hostname;
  // Connection and per-operation timeout: a dead peer becomes UNAVAILABLE.
  absl::Duration timeout = absl::Seconds(120);
  // Prefix of the rendezvous keys (distinct per group when one rendezvous
  // serves several groups, as in tests).
  std::string key_prefix = "gloo/";
  // Largest message of the ring, in bytes; 0: 120 KiB, or half of
  // net.core.wmem_max when that is less. The ranks agree on the smallest
  // any of them asks for (tests use small ones to cross many segments).
  size_t segment_bytes = 0;
};

class GlooCollective : public Collective {
 public:
  // Connects rank `rank` of `size` through `rendezvous` (not owned; used
  // only during Create). UNAVAILABLE naming the host when the mesh cannot be
  // formed (a peer never arrives, an address is unreachable). Sets SIGPIPE
  // to ignored if it is at its default, so a vanished peer is an error.
  static absl::StatusOr<std::unique_ptr<GlooCollective>> Create(
      int rank, int size, Rendezvous* rendezvous, const GlooOptions& options);
  ~GlooCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceMean(float* data, size_t count) override;
  absl::Status Broadcast(float* data, size_t count, int root) override;
  absl::Status Barrier() override;

 private:
  GlooCollective(int rank, int size, std::string host, absl::Duration timeout);
  // Sum over ranks times `scale`, in place: the ring described above.
  void RingAllReduce(float* data, size_t count, float scale);
  // Records the first failure: after it the pairs' streams are out of step,
  // so every later call returns the same error.
  absl::Status Fail(const std::string& what, const std::exception& e);
  // Two fresh buffer slots, the same sequence on every rank.
  int NextSlots() {
    slot_ = slot_ >= (1 << 30) ? 16 : slot_ + 2;
    return slot_;
  }

  const int rank_;
  const int size_;
  const std::string host_;
  const absl::Duration timeout_;
  std::shared_ptr<gloo::Context> context_;  // null when size_ == 1
  std::vector<float> scratch_;  // one received segment, reduced into data
  int left_fd_ = -1;  // the left neighbour's socket, polled while waiting
  absl::Status broken_;  // the first failure, returned ever after
  int slot_ = 16;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_COMM_GLOO_COLLECTIVE_H_
