// The one place absl::Status becomes grpc::Status and back. Stateless; safe
// from any thread. In its own library (xl_grpc_status) so that what needs no
// gRPC (the scheduling core, the model, the store) links none.
#ifndef XL_COMMON_GRPC_STATUS_H_
#define XL_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace xl {

// Maps codes one to one; the message is kept, cut to 2 KiB (a status
// message is a header, and gRPC refuses headers over 8 KiB).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace xl

#endif  // XL_COMMON_GRPC_STATUS_H_
