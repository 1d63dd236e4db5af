// Conversions between google.protobuf.Duration/Timestamp and absl time, and
// human formatting of sizes and durations for messages and tables.
// Stateless; safe from any thread.
#ifndef XL_COMMON_DURATION_H_
#define XL_COMMON_DURATION_H_

#include <cstdint>
#include <string>

#include <google/protobuf/duration.pb.h>
#include <google/protobuf/timestamp.pb.h>

#include "absl/time/time.h"

namespace xl {

absl::Duration FromProto(const google::protobuf::Duration& d);
absl::Time FromProto(const google::protobuf::Timestamp& t);
google::protobuf::Duration ToProtoDuration(absl::Duration d);
google::protobuf::Timestamp ToProtoTime(absl::Time t);

// "80 GiB", "1.5 TiB", "512 B".
std::string HumanBytes(uint64_t bytes);
// "1h2m", "45s", "250ms".
std::string HumanDuration(absl::Duration d);

// A credential's lifetime: an absl duration ("90m", "12h"), days ("30d"),
// or "never" (InfiniteDuration). False for anything else or for <= 0.
bool ParseLifetime(const std::string& text, absl::Duration* out);

}  // namespace xl

#endif  // XL_COMMON_DURATION_H_
