// The exit codes of xlctl and how an absl::Status maps onto them. A status
// can carry an explicit exit code as a payload (for outcomes that are not
// errors of a call, such as `wait` running past its --timeout).
// Stateless; safe from any thread.
#ifndef XL_CLIENT_EXIT_CODE_H_
#define XL_CLIENT_EXIT_CODE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace xl::client {

enum ExitCode : int {
  kExitOk = 0,
  // The operation failed at the server, or `wait` saw the job end FAILED or
  // CANCELLED.
  kExitFailed = 1,
  // Bad flags, a bad job file, or INVALID_ARGUMENT from the scheduler.
  kExitUsage = 2,
  // NOT_FOUND: no such job or node.
  kExitNotFound = 3,
  // The scheduler could not be reached or did not answer in time.
  kExitUnreachable = 4,
  // `wait --timeout` expired before the job ended.
  kExitWaitTimeout = 5,
};

// The text of the exit code table, for --help and the report.
extern const char kExitCodeHelp[];

// Returns the exit code for `status`: its explicit code if it carries one,
// else the code implied by status.code().
ExitCode ExitCodeFor(const absl::Status& status);

// Returns `status` carrying the explicit exit code `code`.
absl::Status WithExitCode(absl::Status status, ExitCode code);

// An error in the command line or the input files (exit code 2).
absl::Status UsageError(absl::string_view message);

}  // namespace xl::client

#endif  // XL_CLIENT_EXIT_CODE_H_
