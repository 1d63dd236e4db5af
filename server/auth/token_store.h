// TokenStore: users' bearer tokens and agents' single-use join tokens, in
// the scheduler's SQLite file (table `tokens`, schema/0007_tokens.sql).
// A token reads "xl_<id>_<secret>"; only the SHA-256 of the secret is
// stored, and it is compared in constant time. It has its own connection
// to the database, so `xl-scheduler token` works on the file offline.
// Every token is also held in memory (loaded at Open, updated after each
// write commits), so checking a call's token reads no disk; only one
// process uses the file at a time (the scheduler's DbLock).
// Thread-safe: one mutex around the connection and the map.
#ifndef XL_SERVER_AUTH_TOKEN_STORE_H_
#define XL_SERVER_AUTH_TOKEN_STORE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/sqlite.h"
#include "server/store/store.h"

namespace xl::auth {

inline constexpr char kUserToken[] = "user";
inline constexpr char kJoinToken[] = "join";

struct TokenInfo {
  std::string id;
  std::string kind;  // kUserToken or kJoinToken
  // The user; for a join token, the node it is bound to ("" for any).
  std::string user;
  bool admin = false;
  absl::Time created;
  absl::Time expires = absl::InfiniteFuture();
  absl::Time revoked = absl::InfinitePast();  // InfinitePast: not revoked
  std::string used_by;
  // User tokens: the user's groups (queues may admit by group).
  std::vector<std::string> groups;
};

class TokenStore {
 public:
  // Opens the database at `db_path` (created and migrated if needed).
  static absl::StatusOr<std::unique_ptr<TokenStore>> Open(
      const std::string& db_path);

  // A replicated scheduler: every change of a token row is written by
  // `write` (through the replicated log, which applies it to this database
  // too) instead of here; it returns once the row is committed.
  using WriteRow = std::function<absl::Status(const store::StoredAuthToken&)>;
  void ReplicateWith(WriteRow write);
  // Reads every token again from the database (a new leader: the rows the
  // log applied while it followed).
  absl::Status Reload();
  // Every row, for a new leader to write through the log again: a token
  // made on this replica's database while it was stopped reaches the
  // others.
  absl::StatusOr<std::vector<store::StoredAuthToken>> Rows();

  // Creates a token; returns its record and the token, which is not kept.
  // `ttl` InfiniteDuration: never expires. INVALID_ARGUMENT for a bad user
  // or group name (at most 64 groups), groups on a join token, or a ttl <=
  // 0.
  // `given` (xl_<16 hex>_<64 hex>): store that token rather than a new one
  // (the same token on every replica's database); storing it again with
  // the same secret changes nothing and returns it, ALREADY_EXISTS for its
  // id with another secret.
  absl::StatusOr<std::pair<TokenInfo, std::string>> Create(
      const std::string& kind, const std::string& user, bool admin,
      absl::Duration ttl, absl::Time now,
      const std::vector<std::string>& groups = {},
      const std::string& given = "");
  // NOT_FOUND for an unknown id; revoking twice keeps the first time.
  absl::StatusOr<TokenInfo> Revoke(const std::string& id, absl::Time now);
  // Every token, oldest first.
  absl::StatusOr<std::vector<TokenInfo>> List();
  // The record of a valid user token; UNAUTHENTICATED saying why not
  // (malformed, unknown, wrong secret, expired, revoked).
  absl::StatusOr<TokenInfo> VerifyUser(const std::string& token,
                                       absl::Time now);
  // Spends a valid join token for `node`: it cannot be used again.
  // UNAUTHENTICATED as for VerifyUser; PERMISSION_DENIED when the token is
  // bound to another node, unless `name_is_default` (the agent was given no
  // name: the token's node is its name); ALREADY_EXISTS when the token is
  // unbound and another join token was spent for that name. The name the
  // node gets (the token's node, else `node`) is what `before_spend` sees
  // and what used_by records. `before_spend` (when set) runs once the token is
  // known good and before it is spent; its error is returned and leaves
  // the token unspent (a bad public key does not burn it).
  absl::StatusOr<TokenInfo> UseJoin(
      const std::string& token, const std::string& node,
      bool name_is_default, absl::Time now,
      const std::function<absl::Status(const TokenInfo&,
                                        const std::string& name)>&
          before_spend = nullptr);

 private:
  struct Entry {
    TokenInfo info;
    std::string hash;  // hex SHA-256 of the secret
  };
  explicit TokenStore(std::unique_ptr<store::Db> db) : db_(std::move(db)) {}
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stored row of `e`.
  static store::StoredAuthToken Row(const Entry& e);
  absl::StatusOr<TokenInfo> Verify(const std::string& token,
                                   const std::string& kind, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<store::Db> db_ ABSL_GUARDED_BY(mu_);
  // id -> token, as committed.
  std::map<std::string, Entry> tokens_ ABSL_GUARDED_BY(mu_);
  WriteRow write_ ABSL_GUARDED_BY(mu_);
};

// Checks a user or node name: 1 to 64 of [A-Za-z0-9._@-].
absl::Status ValidatePrincipalName(const std::string& name,
                                   const std::string& field);

}  // namespace xl::auth

#endif  // XL_SERVER_AUTH_TOKEN_STORE_H_
