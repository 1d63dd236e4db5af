// NcclCollective: the GPU Collective over NCCL. Rank 0 creates the
// ncclUniqueId and publishes it through the Rendezvous ("nccl/unique_id");
// the others fetch it. The communicator is non-blocking (blocking = 0), so
// every wait polls cudaEventQuery and ncclCommGetAsyncError and, on an
// asynchronous error or after the timeout, aborts the communicator with
// ncclCommAbort and returns an error instead of hanging: the rank exits
// non-zero and the scheduler restarts the gang. Collectives run on the
// instance's own stream. One instance per rank and GPU, used from one thread
// (the device current when Create ran must stay current). Included only by
// CUDA files.
#ifndef XL_AGENT_WORKER_COMM_NCCL_COLLECTIVE_H_
#define XL_AGENT_WORKER_COMM_NCCL_COLLECTIVE_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/worker/comm/collective.h"
#include "agent/worker/comm/rendezvous.h"

namespace xl::worker {

struct NcclOptions {
  // Longest wait for any NCCL operation (init included) before abort.
  absl::Duration timeout = absl::Seconds(300);
  // Longest wait for rank 0's unique id in the rendezvous.
  absl::Duration rendezvous_timeout = absl::Seconds(300);
  // Rendezvous key of the unique id (distinct per group in tests).
  std::string key = "nccl/unique_id";

  // Defaults, with timeout from XL_NCCL_TIMEOUT_S (seconds) when set.
  static NcclOptions FromEnv();
};

class NcclCollective : public Collective {
 public:
  // Joins rank `rank` of `size` on the current CUDA device. The rendezvous
  // is not owned and used only here. DEADLINE_EXCEEDED when the id or the
  // peers never arrive, UNAVAILABLE / INTERNAL with NCCL's message on
  // failure. NCCL_SOCKET_IFNAME / NCCL_IB_HCA come from the environment.
  static absl::StatusOr<std::unique_ptr<NcclCollective>> Create(
      int rank, int size, Rendezvous* rendezvous, const NcclOptions& options);
  // Finalizes and destroys a healthy communicator; aborts a failed one.
  ~NcclCollective() override;
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // `data` may be device or host memory (host data is staged through a
  // device buffer). Blocks until done; see the class comment for errors.
  absl::Status AllReduceMean(float* data, size_t count) override;
  absl::Status Broadcast(float* data, size_t count, int root) override;
  absl::Status Barrier() override;

  // The overlap API of the trainer. Enqueues an in-place mean all-reduce
  // of device data[0..count) on stream(), after `after` (an event on
  // another stream; may be null). Returns once enqueued.
  absl::Status EnqueueAllReduceMean(float* data, size_t count,
                                    cudaEvent_t after);
  // Waits for `event` (recorded on any stream whose work depends on this
  // communicator), polling NCCL's asynchronous error; aborts on error or
  // after the timeout.
  absl::Status WaitEvent(cudaEvent_t event);
  // Waits for everything enqueued on stream() so far.
  absl::Status Synchronize();

  cudaStream_t stream() const { return stream_; }
  // False once the communicator failed and was aborted.
  bool healthy() const { return comm_ != nullptr; }

 private:
  NcclCollective(int rank, int size, const NcclOptions& options);
  absl::Status Init(Rendezvous* rendezvous);
  // Polls until the communicator leaves ncclInProgress.
  absl::Status WaitReady(absl::Time deadline, const char* what);
  // Aborts the communicator and returns `why` annotated with host and rank.
  absl::Status Abort(absl::Status why);
  absl::Status EnsureScratch(size_t bytes);
  // Synchronize(), then frees a staging buffer above kKeepScratchBytes.
  absl::Status FinishStaged(bool staged);
  static constexpr size_t kKeepScratchBytes = 64 << 20;

  const int rank_;
  const int size_;
  const NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* scratch_ = nullptr;  // staging for host data and Barrier
  size_t scratch_bytes_ = 0;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_COMM_NCCL_COLLECTIVE_H_
