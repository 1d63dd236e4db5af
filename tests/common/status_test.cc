// Tests of the absl::Status <-> grpc::Status mapping.
#include "common/grpc_status.h"
#include "common/status.h"

#include <gtest/gtest.h>

#include <string>

namespace xl {
namespace {

TEST(StatusTest, CodesAndShortMessagesPassUnchanged) {
  grpc::Status s = ToGrpcStatus(absl::NotFoundError("job 7 not found"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "job 7 not found");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(FromGrpcStatus(s).code(), absl::StatusCode::kNotFound);
}

// A message is a header: one that echoes a long value is cut so the call
// still ends with its error instead of "metadata size exceeds limit", and
// never inside a UTF-8 sequence.
TEST(StatusTest, LongMessagesAreCutOnACharacterBoundary) {
  std::string message = "working_dir: '";
  for (int i = 0; i < 5000; ++i) message += "\xc3\xa9";  // é, 2 bytes
  grpc::Status s = ToGrpcStatus(absl::InvalidArgumentError(message));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(s.error_message().size(), 2100u);
  EXPECT_EQ(s.error_message().rfind("working_dir: '", 0), 0u);
  EXPECT_NE(s.error_message().find("(cut from 10014 bytes)"),
            std::string::npos);
  const size_t dots = s.error_message().find("...");
  ASSERT_NE(dots, std::string::npos);
  // Before the cut: whole two-byte characters only.
  EXPECT_EQ((dots - 14) % 2, 0u);
}

}  // namespace
}  // namespace xl
