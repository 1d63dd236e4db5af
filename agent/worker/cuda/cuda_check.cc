#include "agent/worker/cuda/cuda_check.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace xl::worker {
namespace {

thread_local int check_rank = -1;

const std::string& HostName() {
  static const std::string* host = [] {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return new std::string("?");
    return new std::string(buf);
  }();
  return *host;
}

}  // namespace

void SetCheckRank(int rank) { check_rank = rank; }
int CheckRank() { return check_rank; }

absl::Status CheckFailure(absl::StatusCode code, const char* lib,
                          const char* what, const char* call, const char* file,
                          int line) {
  return absl::Status(
      code, absl::StrCat(lib, " error '", what, "' at ", call, " (", file, ":",
                         line, ") on host ", HostName(), " rank ", check_rank));
}

absl::StatusCode CudaErrorCode(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorInvalidValue:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode NcclErrorCode(ncclResult_t err) {
  switch (err) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::StatusCode::kInvalidArgument;
    case ncclRemoteError:
    case ncclSystemError:
      // A peer or the network failed: the gang restarts.
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

const char* CublasErrorString(cublasStatus_t err) {
  return cublasGetStatusString(err);
}

}  // namespace xl::worker
