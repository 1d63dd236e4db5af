// Following the leader of a replicated xl-scheduler: the address lists that
// --scheduler, --server and XL_SERVER take, and the call metadata in which a
// replica that does not lead names the one that does. Stateless; safe from
// any thread.
//
// A replica that does not lead answers every call (except the health
// service's) UNAVAILABLE with the trailing metadata
//   xl-leader: HOST:PORT   the leader's API address, when it knows it
//   xl-term:   N           the newest Raft term it knows
// A caller retries the call there (an agent reconnects there); without
// xl-leader, it tries the next address of its list after a short wait (an
// election is under way). Any gRPC client can do the same.
#ifndef XL_COMMON_LEADER_H_
#define XL_COMMON_LEADER_H_

#include <grpcpp/client_context.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xl {

inline constexpr char kLeaderMetadataKey[] = "xl-leader";
inline constexpr char kTermMetadataKey[] = "xl-term";
// The grpc.health.v1 service name that is SERVING on the leader only (and
// on a scheduler that is not replicated): a readiness check, and how a
// caller with a list finds the leader without a redirect.
inline constexpr char kLeaderHealthService[] = "xl.v1.JobService";

// "a:1,b:2" -> {"a:1", "b:2"}: every element HOST:PORT (a DNS name, IPv4,
// or [IPv6]), spaces around commas allowed, duplicates dropped. `flag`
// names the flag in the error.
absl::StatusOr<std::vector<std::string>> SplitServerList(
    absl::string_view text, absl::string_view flag);

// The xl-leader trailing metadata of a finished call; "" when none.
std::string LeaderHint(const grpc::ClientContext& context);

}  // namespace xl

#endif  // XL_COMMON_LEADER_H_
