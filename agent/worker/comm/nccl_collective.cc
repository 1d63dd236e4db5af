#include "agent/worker/comm/nccl_collective.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/worker/cuda/cuda_check.h"

namespace xl::worker {
namespace {

std::string Where(int rank) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  return absl::StrCat(" (host ", host, " rank ", rank, ")");
}

// Polling cadence: spin briefly, then back off to keep a core mostly free.
void PollPause(int iteration) {
  if (iteration < 1000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

NcclOptions NcclOptions::FromEnv() {
  NcclOptions o;
  const char* s = std::getenv("XL_NCCL_TIMEOUT_S");
  double secs = 0;
  if (s != nullptr && absl::SimpleAtod(s, &secs) && secs > 0) {
    o.timeout = absl::Seconds(secs);
  }
  return o;
}

NcclCollective::NcclCollective(int rank, int size, const NcclOptions& options)
    : rank_(rank), size_(size), options_(options) {}

NcclCollective::~NcclCollective() {
  if (comm_ != nullptr) {
    // A clean shutdown: finalize (non-blocking, so wait for it), then destroy;
    // abort if finalize does not finish in time.
    ncclResult_t r = ncclCommFinalize(comm_);
    if (r == ncclSuccess || r == ncclInProgress) {
      absl::Status st = WaitReady(absl::Now() + options_.timeout, "finalize");
      if (st.ok() && comm_ != nullptr) ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(
    int rank, int size, Rendezvous* rendezvous, const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of ", size, " is not a valid NCCL rank"));
  }
  SetCheckRank(rank);
  std::unique_ptr<NcclCollective> c(new NcclCollective(rank, size, options));
  absl::Status st = c->Init(rendezvous);
  if (!st.ok()) return st;
  return c;
}

absl::Status NcclCollective::Init(Rendezvous* rendezvous) {
  XL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  XL_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  ncclUniqueId id;
  if (rank_ == 0) {
    XL_NCCL_CHECK(ncclGetUniqueId(&id));
    absl::Status st = rendezvous->Put(
        options_.key,
        std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    if (!st.ok()) return st;
  } else {
    auto got = rendezvous->Get({options_.key}, options_.rendezvous_timeout);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat("NCCL unique id from rank 0: ",
                                       got.status().message(), Where(rank_)));
    }
    const std::string& v = (*got)[0];
    if (v.size() != sizeof(id)) {
      return absl::DataLossError(absl::StrCat("NCCL unique id has ", v.size(),
                                              " bytes, want ", sizeof(id),
                                              Where(rank_)));
    }
    std::memcpy(&id, v.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  XL_NCCL_CHECK(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config));
  return WaitReady(absl::Now() + options_.timeout, "communicator init");
}

absl::Status NcclCollective::Abort(absl::Status why) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return absl::Status(
      why.code(),
      absl::StrCat(why.message(), "; NCCL communicator aborted", Where(rank_)));
}

absl::Status NcclCollective::WaitReady(absl::Time deadline, const char* what) {
  for (int i = 0;; ++i) {
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError("NCCL communicator was aborted");
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return Abort(absl::UnavailableError(
          absl::StrCat("NCCL ", what, " failed: ", ncclGetErrorString(state),
                       " (", ncclGetLastError(comm_), ")")));
    }
    if (absl::Now() > deadline) {
      return Abort(absl::DeadlineExceededError(absl::StrCat(
          "NCCL ", what, " did not finish within ",
          absl::FormatDuration(options_.timeout),
          " (a peer is gone or hung; XL_NCCL_TIMEOUT_S sets the limit)")));
    }
    PollPause(i);
  }
}

absl::Status NcclCollective::WaitEvent(cudaEvent_t event) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  for (int i = 0;; ++i) {
    cudaError_t q = cudaEventQuery(event);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) XL_CUDA_CHECK(q);
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError("NCCL communicator was aborted");
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state != ncclSuccess && state != ncclInProgress) {
      return Abort(absl::UnavailableError(
          absl::StrCat("NCCL all-reduce failed: ", ncclGetErrorString(state),
                       " (", ncclGetLastError(comm_), ")")));
    }
    if (absl::Now() > deadline) {
      return Abort(absl::DeadlineExceededError(absl::StrCat(
          "NCCL collective did not finish within ",
          absl::FormatDuration(options_.timeout),
          " (a peer is gone or hung; XL_NCCL_TIMEOUT_S sets the limit)")));
    }
    PollPause(i);
  }
  return absl::OkStatus();
}

absl::Status NcclCollective::Synchronize() {
  XL_CUDA_CHECK(cudaEventRecord(done_, stream_));
  return WaitEvent(done_);
}

absl::Status NcclCollective::EnqueueAllReduceMean(float* data, size_t count,
                                                  cudaEvent_t after) {
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError("NCCL communicator was aborted");
  }
  if (after != nullptr) XL_CUDA_CHECK(cudaStreamWaitEvent(stream_, after, 0));
  if (count == 0) return absl::OkStatus();
  ncclResult_t r =
      ncclAllReduce(data, data, count, ncclFloat, ncclAvg, comm_, stream_);
  XL_NCCL_CHECK(r);
  if (r == ncclInProgress) {
    return WaitReady(absl::Now() + options_.timeout, "all-reduce enqueue");
  }
  return absl::OkStatus();
}

absl::Status NcclCollective::EnsureScratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return absl::OkStatus();
  if (scratch_ != nullptr) {
    XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    XL_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
  }
  XL_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
  scratch_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status NcclCollective::FinishStaged(bool staged) {
  absl::Status st = Synchronize();
  // A staging buffer grown for a large host array (the parameters and
  // optimizer state broadcast at a resume) is not kept for the whole run.
  if (st.ok() && staged && scratch_bytes_ > kKeepScratchBytes) {
    XL_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
  }
  return st;
}

namespace {
bool IsDevicePointer(const void* p) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // clear: plain host memory on old drivers
    return false;
  }
  return attr.type == cudaMemoryTypeDevice ||
         attr.type == cudaMemoryTypeManaged;
}
}  // namespace

absl::Status NcclCollective::AllReduceMean(float* data, size_t count) {
  if (count == 0) return absl::OkStatus();
  const size_t bytes = count * sizeof(float);
  float* dev = data;
  const bool staged = !IsDevicePointer(data);
  if (staged) {
    absl::Status st = EnsureScratch(bytes);
    if (!st.ok()) return st;
    dev = static_cast<float*>(scratch_);
    XL_CUDA_CHECK(
        cudaMemcpyAsync(dev, data, bytes, cudaMemcpyHostToDevice, stream_));
  }
  absl::Status st = EnqueueAllReduceMean(dev, count, nullptr);
  if (!st.ok()) return st;
  if (staged) {
    // A copy into pageable memory blocks the host until the stream drains,
    // past any timeout: wait for the collective by polling first.
    st = Synchronize();
    if (!st.ok()) return st;
    XL_CUDA_CHECK(
        cudaMemcpyAsync(data, dev, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  return FinishStaged(staged);
}

absl::Status NcclCollective::Broadcast(float* data, size_t count, int root) {
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError("NCCL communicator was aborted");
  }
  if (count == 0) return absl::OkStatus();
  const size_t bytes = count * sizeof(float);
  float* dev = data;
  const bool staged = !IsDevicePointer(data);
  // A host array (a resume's parameters and moments) goes in pieces: a
  // staging buffer its size would take GPU memory the batch was fitted to.
  if (staged && bytes > kKeepScratchBytes) {
    const size_t piece = kKeepScratchBytes / sizeof(float);
    for (size_t off = 0; off < count; off += piece) {
      absl::Status st =
          Broadcast(data + off, std::min(piece, count - off), root);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  if (staged) {
    absl::Status st = EnsureScratch(bytes);
    if (!st.ok()) return st;
    dev = static_cast<float*>(scratch_);
    XL_CUDA_CHECK(
        cudaMemcpyAsync(dev, data, bytes, cudaMemcpyHostToDevice, stream_));
  }
  ncclResult_t r =
      ncclBroadcast(dev, dev, count, ncclFloat, root, comm_, stream_);
  XL_NCCL_CHECK(r);
  if (r == ncclInProgress) {
    absl::Status st =
        WaitReady(absl::Now() + options_.timeout, "broadcast enqueue");
    if (!st.ok()) return st;
  }
  if (staged) {
    // As in AllReduceMean: the resume's broadcast waits for a peer that may
    // never come, so it is polled against the timeout before the copy back.
    absl::Status st = Synchronize();
    if (!st.ok()) return st;
    XL_CUDA_CHECK(
        cudaMemcpyAsync(data, dev, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  return FinishStaged(staged);
}

absl::Status NcclCollective::Barrier() {
  absl::Status st = EnsureScratch(sizeof(float));
  if (!st.ok()) return st;
  XL_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, sizeof(float), stream_));
  st = EnqueueAllReduceMean(static_cast<float*>(scratch_), 1, nullptr);
  if (!st.ok()) return st;
  return Synchronize();
}

}  // namespace xl::worker
