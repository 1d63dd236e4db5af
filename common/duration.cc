#include "common/duration.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace xl {

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

google::protobuf::Duration ToProtoDuration(absl::Duration d) {
  google::protobuf::Duration out;
  int64_t secs = absl::IDivDuration(d, absl::Seconds(1), &d);
  out.set_seconds(secs);
  out.set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(d)));
  return out;
}

google::protobuf::Timestamp ToProtoTime(absl::Time t) {
  google::protobuf::Timestamp out;
  int64_t ns = absl::ToUnixNanos(t);
  out.set_seconds(ns / 1000000000);
  out.set_nanos(static_cast<int32_t>(ns % 1000000000));
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%d B", bytes);
  if (v == static_cast<double>(static_cast<int64_t>(v))) {
    return absl::StrFormat("%d %s", static_cast<int64_t>(v), kUnits[unit]);
  }
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

std::string HumanDuration(absl::Duration d) {
  if (d < absl::Seconds(1)) {
    return absl::StrFormat("%dms", absl::ToInt64Milliseconds(d));
  }
  int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%ds", s / 60, s % 60);
  return absl::StrFormat("%dh%dm", s / 3600, (s % 3600) / 60);
}

bool ParseLifetime(const std::string& text, absl::Duration* out) {
  if (text == "never") {
    *out = absl::InfiniteDuration();
    return true;
  }
  int64_t days = 0;
  if (!text.empty() && text.back() == 'd') {
    if (!absl::SimpleAtoi(text.substr(0, text.size() - 1), &days) ||
        days <= 0 || days > 365 * 100) {
      return false;
    }
    *out = absl::Hours(24 * days);
    return true;
  }
  return absl::ParseDuration(text, out) && *out > absl::ZeroDuration() &&
         *out != absl::InfiniteDuration();
}

}  // namespace xl
