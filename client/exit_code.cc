#include "client/exit_code.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace xl::client {
namespace {

constexpr char kExitCodePayload[] = "type.xl.dev/xl.client.ExitCode";

}  // namespace

const char kExitCodeHelp[] =
    "Exit codes:\n"
    "  0  success\n"
    "  1  the operation failed at the scheduler, or `wait` saw the job end "
    "FAILED or CANCELLED\n"
    "  2  usage error or invalid input (bad flags, bad job file, "
    "INVALID_ARGUMENT from the scheduler)\n"
    "  3  not found (no such job or node)\n"
    "  4  cannot reach the scheduler (UNAVAILABLE, DEADLINE_EXCEEDED)\n"
    "  5  `wait --timeout` expired before the job ended\n";

ExitCode ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  if (auto payload = status.GetPayload(kExitCodePayload)) {
    int code;
    const std::string text(*payload);
    if (absl::SimpleAtoi(text, &code)) {
      return static_cast<ExitCode>(code);
    }
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    default:
      return kExitFailed;
  }
}

absl::Status WithExitCode(absl::Status status, ExitCode code) {
  status.SetPayload(kExitCodePayload,
                    absl::Cord(std::to_string(static_cast<int>(code))));
  return status;
}

absl::Status UsageError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

}  // namespace xl::client
