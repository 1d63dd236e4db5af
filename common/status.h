// Status helpers: the RETURN_IF_ERROR / ASSIGN_OR_RETURN macros that Debian's
// Abseil (20220623) lacks. No gRPC (common/grpc_status.h converts to and
// from grpc::Status). Stateless; safe from any thread.
#ifndef XL_COMMON_STATUS_H_
#define XL_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define XL_STATUS_CONCAT_INNER_(a, b) a##b
#define XL_STATUS_CONCAT_(a, b) XL_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status xl_status_ = (expr);            \
    if (!xl_status_.ok()) return xl_status_;       \
  } while (0)

// `lhs = value of expr`, or returns its error from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  XL_ASSIGN_OR_RETURN_IMPL_(XL_STATUS_CONCAT_(xl_statusor_, __LINE__), lhs, expr)
#define XL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

namespace xl {

// Prefixes the message of a non-OK status with `context` and ": ".
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace xl

#endif  // XL_COMMON_STATUS_H_
