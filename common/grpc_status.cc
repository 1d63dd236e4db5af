#include "common/grpc_status.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace xl {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels in a header (grpc-message), percent-encoded: a byte
  // outside printable ASCII takes three. gRPC drops a call whose headers
  // pass 8 KiB, and the caller would get "metadata size exceeds limit" in
  // place of the error, so a message that echoes a long value is cut.
  constexpr size_t kMaxMessage = 2048;
  absl::string_view message = status.message();
  if (message.size() <= kMaxMessage) {
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        std::string(message));
  }
  size_t cut = kMaxMessage;
  // Not inside a UTF-8 sequence: back up over continuation bytes.
  while (cut > 0 && (static_cast<uint8_t>(message[cut]) & 0xC0) == 0x80) --cut;
  return grpc::Status(
      static_cast<grpc::StatusCode>(status.code()),
      absl::StrCat(message.substr(0, cut), "... (cut from ", message.size(),
                   " bytes)"));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace xl
