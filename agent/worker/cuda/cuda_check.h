// Check macros for the CUDA runtime, cuBLAS and NCCL, nccl-tests style: a
// failed call returns from the enclosing function (which returns
// absl::Status or absl::StatusOr) with the library's own error string, the
// call, file:line, the host name and the rank. Included only by the worker's
// CUDA files. The rank is per thread (tests run one rank per thread).
#ifndef XL_AGENT_WORKER_CUDA_CUDA_CHECK_H_
#define XL_AGENT_WORKER_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"

namespace xl::worker {

// Sets the rank that check failures on this thread name (default -1).
void SetCheckRank(int rank);
int CheckRank();

// Builds the status a failed check returns: "<lib> error '<what>' at
// <call> (<file>:<line>) on host <host> rank <rank>".
absl::Status CheckFailure(absl::StatusCode code, const char* lib,
                          const char* what, const char* call, const char* file,
                          int line);

absl::StatusCode CudaErrorCode(cudaError_t err);
absl::StatusCode NcclErrorCode(ncclResult_t err);
const char* CublasErrorString(cublasStatus_t err);

}  // namespace xl::worker

#define XL_CUDA_CHECK(...)                                                     \
  do {                                                                         \
    cudaError_t xl_cuda_err_ = (__VA_ARGS__);                                  \
    if (xl_cuda_err_ != cudaSuccess) {                                         \
      return ::xl::worker::CheckFailure(                                       \
          ::xl::worker::CudaErrorCode(xl_cuda_err_), "CUDA",                   \
          cudaGetErrorString(xl_cuda_err_), #__VA_ARGS__, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)

#define XL_CUBLAS_CHECK(...)                                             \
  do {                                                                   \
    cublasStatus_t xl_cublas_err_ = (__VA_ARGS__);                       \
    if (xl_cublas_err_ != CUBLAS_STATUS_SUCCESS) {                       \
      return ::xl::worker::CheckFailure(                                 \
          absl::StatusCode::kInternal, "cuBLAS",                         \
          ::xl::worker::CublasErrorString(xl_cublas_err_), #__VA_ARGS__, \
          __FILE__, __LINE__);                                           \
    }                                                                    \
  } while (0)

// ncclInProgress is not a failure: on a non-blocking communicator it means
// the call continues in the background (see NcclCollective::WaitReady).
#define XL_NCCL_CHECK(...)                                                     \
  do {                                                                         \
    ncclResult_t xl_nccl_err_ = (__VA_ARGS__);                                 \
    if (xl_nccl_err_ != ncclSuccess && xl_nccl_err_ != ncclInProgress) {       \
      return ::xl::worker::CheckFailure(                                       \
          ::xl::worker::NcclErrorCode(xl_nccl_err_), "NCCL",                   \
          ncclGetErrorString(xl_nccl_err_), #__VA_ARGS__, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)

// Checks the last kernel launch.
#define XL_CUDA_CHECK_LAUNCH() XL_CUDA_CHECK(cudaGetLastError())

#endif  // XL_AGENT_WORKER_CUDA_CUDA_CHECK_H_
