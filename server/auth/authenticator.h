// Authenticator: who is calling, from one gRPC call's context. With auth on
// (the scheduler serves TLS with client-certificate verification), a user
// is the holder of a valid bearer token ("authorization: Bearer <token>")
// and an agent is the node named by its verified client certificate (its
// common name, or its first subject alternative name); the "x-xl-user"
// metadata is ignored. With auth off (loopback without TLS, or
// --insecure), the caller is the user it names, with every right, as
// before auth existed. Also the permission rules the services apply.
// Thread-safe.
#ifndef XL_SERVER_AUTH_AUTHENTICATOR_H_
#define XL_SERVER_AUTH_AUTHENTICATOR_H_

#include <grpcpp/server_context.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/auth/token_store.h"
#include "xl/v1/job.pb.h"

namespace xl::auth {

struct Principal {
  enum class Kind { kUser, kNode };
  Kind kind = Kind::kUser;
  // The user name, or the node name of an agent's certificate.
  std::string name;
  bool admin = false;
  // A user's groups, from their token (none with auth off).
  std::vector<std::string> groups;
  // Identified by a credential (false with auth off).
  bool authenticated = false;

  bool is_user() const { return kind == Kind::kUser; }
  bool is_node() const { return kind == Kind::kNode; }
};

class Authenticator {
 public:
  // Auth off: every caller is the user its "x-xl-user" names, with every
  // right. `warning` (non-empty with --insecure) is shown to callers.
  static Authenticator Off(std::string warning);
  // Auth on: tokens from `tokens` (outlives this), times from `clock`.
  static Authenticator On(TokenStore* tokens, const Clock* clock);

  // Takes clientAuth certificates without the xl-node:<name> mark as nodes
  // (certificates made by the recipe of before the mark).
  void set_accept_unmarked_node_certificates(bool accept) {
    accept_unmarked_nodes_ = accept;
  }

  bool enabled() const { return tokens_ != nullptr; }
  const std::string& warning() const { return warning_; }
  TokenStore* tokens() const { return tokens_; }

  // The caller, or UNAUTHENTICATED saying what credential is missing or why
  // it is not accepted.
  absl::StatusOr<Principal> Identify(
      const grpc::CallbackServerContext* ctx) const;

 private:
  Authenticator() = default;
  TokenStore* tokens_ = nullptr;
  const Clock* clock_ = nullptr;
  bool accept_unmarked_nodes_ = false;
  std::string warning_;
};

// --- the rules, in one place ---

// Users (not agents) only: PERMISSION_DENIED for a node's certificate.
absl::Status RequireUser(const Principal& p, absl::string_view what);
// Admins only.
absl::Status RequireAdmin(const Principal& p, absl::string_view what);
// May `p` see the environment and logs of, and cancel, a job of `owner`?
bool OwnsOrAdmin(const Principal& p, const std::string& owner);
// PERMISSION_DENIED unless OwnsOrAdmin.
absl::Status RequireOwner(const Principal& p, const v1::Job& job,
                          absl::string_view what);

inline constexpr char kRedacted[] = "<redacted>";
// Hides the values of the job's secret_env entries always; when `full` is
// false (someone else's job) also every env value, the command's
// arguments, the metrics, the idempotency key, MASTER_PORT, the ranks' exit
// messages and the reason of a job that is not pending (RedactReason).
void RedactJob(v1::Job* job, bool full);
// A reason shown to others: that of a job that never ran (pending, not
// requeued: `ran` false) is the scheduler's own words, why it waits, and
// kept; any other may quote the ranks and the agent (a path from the job's
// environment, its program's message), and is hidden.
void RedactReason(v1::JobState state, bool ran, std::string* reason);
inline constexpr char kReasonHidden[] =
    "<shown to the job's owner and admins>";
// RedactJob with `full` = OwnsOrAdmin(p, job->user()).
void RedactJobFor(const Principal& p, v1::Job* job);

}  // namespace xl::auth

#endif  // XL_SERVER_AUTH_AUTHENTICATOR_H_
