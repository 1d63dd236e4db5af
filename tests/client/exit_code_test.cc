// Tests of the mapping from call results to xlctl's exit codes and of the
// error messages a failed call produces.
#include "client/exit_code.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/connection.h"
#include "common/grpc_status.h"
#include "common/status.h"

namespace xl::client {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ExitCodeTest, GrpcCodesMapToExitCodes) {
  struct Case {
    grpc::StatusCode code;
    ExitCode exit;
  };
  const Case cases[] = {
      {grpc::StatusCode::OK, kExitOk},
      {grpc::StatusCode::INVALID_ARGUMENT, kExitUsage},
      {grpc::StatusCode::NOT_FOUND, kExitNotFound},
      {grpc::StatusCode::UNAVAILABLE, kExitUnreachable},
      {grpc::StatusCode::DEADLINE_EXCEEDED, kExitUnreachable},
      {grpc::StatusCode::FAILED_PRECONDITION, kExitFailed},
      {grpc::StatusCode::PERMISSION_DENIED, kExitFailed},
      {grpc::StatusCode::ALREADY_EXISTS, kExitFailed},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, kExitFailed},
      {grpc::StatusCode::INTERNAL, kExitFailed},
      {grpc::StatusCode::UNKNOWN, kExitFailed},
      {grpc::StatusCode::UNIMPLEMENTED, kExitFailed},
  };
  for (const Case& c : cases) {
    grpc::Status status(c.code, "boom");
    if (c.code == grpc::StatusCode::OK) status = grpc::Status::OK;
    EXPECT_EQ(ExitCodeFor(xl::FromGrpcStatus(status)), c.exit)
        << "grpc code " << c.code;
  }
}

TEST(ExitCodeTest, CallErrorKeepsTheCodeForTheExitCode) {
  ConnectionOptions options;
  options.server = "sched:7070";
  SchedulerConnection connection(options);
  EXPECT_EQ(
      ExitCodeFor(connection.CallError(
          grpc::Status(grpc::StatusCode::NOT_FOUND, "no job 9"), "job 9")),
      kExitNotFound);
  EXPECT_EQ(ExitCodeFor(connection.CallError(
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "resources.nodes: must be >= 1"),
                "submit")),
            kExitUsage);
  EXPECT_EQ(ExitCodeFor(connection.CallError(
                grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "finished"),
                "cancel job 1")),
            kExitFailed);
  EXPECT_TRUE(connection.CallError(grpc::Status::OK, "x").ok());
}

TEST(ExitCodeTest, UnavailableMessageSaysWhatToDo) {
  ConnectionOptions options;
  options.server = "sched:7070";
  SchedulerConnection connection(options);
  absl::Status status = connection.CallError(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"), "get");
  EXPECT_EQ(ExitCodeFor(status), kExitUnreachable);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("cannot reach the xl scheduler at sched:7070: "
                         "connection refused; is xl-scheduler running? set "
                         "--server or XL_SERVER"));
}

TEST(ExitCodeTest, ExplicitExitCodeWins) {
  absl::Status timeout = WithExitCode(
      absl::DeadlineExceededError("still running"), kExitWaitTimeout);
  EXPECT_EQ(ExitCodeFor(timeout), kExitWaitTimeout);
  EXPECT_EQ(timeout.message(), "still running");
  EXPECT_EQ(
      ExitCodeFor(WithExitCode(absl::AbortedError("FAILED"), kExitFailed)),
      kExitFailed);
  EXPECT_EQ(ExitCodeFor(UsageError("bad")), kExitUsage);
}

TEST(ExitCodeTest, HelpTextListsEveryCode) {
  for (const char* line :
       {"  0  ", "  1  ", "  2  ", "  3  ", "  4  ", "  5  "}) {
    EXPECT_THAT(kExitCodeHelp, HasSubstr(line));
  }
}

}  // namespace
}  // namespace xl::client
