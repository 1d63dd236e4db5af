#include "common/leader.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace xl {

absl::StatusOr<std::vector<std::string>> SplitServerList(
    absl::string_view text, absl::string_view flag) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t colon = part.rfind(':');
    int port = 0;
    if (part.empty() || colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(part.substr(colon + 1), &port) || port <= 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": '", part, "' is not HOST:PORT; give one address or a "
          "comma-separated list of a replicated scheduler's replicas, for "
          "example sched-1:7070,sched-2:7070,sched-3:7070"));
    }
    std::string address(part);
    if (std::find(out.begin(), out.end(), address) == out.end()) {
      out.push_back(std::move(address));
    }
  }
  return out;
}

std::string LeaderHint(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kLeaderMetadataKey);
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace xl
