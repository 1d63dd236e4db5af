#include "server/auth/token_store.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/crypto/openssl.h"
#include "common/status.h"
#include "server/store/migrator.h"

namespace xl::auth {
namespace {

constexpr char kColumns[] =
    "id, kind, user, admin, hash, created, expires, revoked, used_by, groups";

int64_t ToUnix(absl::Time t) {
  if (t == absl::InfiniteFuture() || t == absl::InfinitePast()) return 0;
  return absl::ToUnixSeconds(t);
}

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(why);
}

}  // namespace

absl::Status ValidatePrincipalName(const std::string& name,
                                   const std::string& field) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be 1 to 64 characters"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.' &&
        c != '@') {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": '", name,
          "' may hold only letters, digits and . _ @ -"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenStore>> TokenStore::Open(
    const std::string& db_path) {
  ASSIGN_OR_RETURN(auto db, store::Db::Open(db_path));
  // The scheduler's own writer shares the file; wait for it, briefly.
  RETURN_IF_ERROR(db->Exec("PRAGMA busy_timeout = 5000"));
  RETURN_IF_ERROR(store::Migrate(db.get(), store::SchemaMigrations()));
  std::unique_ptr<TokenStore> tokens(new TokenStore(std::move(db)));
  absl::MutexLock lock(&tokens->mu_);
  RETURN_IF_ERROR(tokens->Load());
  return tokens;
}

void TokenStore::ReplicateWith(WriteRow write) {
  absl::MutexLock lock(&mu_);
  write_ = std::move(write);
}

absl::Status TokenStore::Reload() {
  absl::MutexLock lock(&mu_);
  tokens_.clear();
  return Load();
}

store::StoredAuthToken TokenStore::Row(const Entry& e) {
  store::StoredAuthToken row;
  row.id = e.info.id;
  row.kind = e.info.kind;
  row.user = e.info.user;
  row.admin = e.info.admin;
  row.hash = e.hash;
  row.created = ToUnix(e.info.created);
  row.expires = ToUnix(e.info.expires);
  row.revoked = ToUnix(e.info.revoked);
  row.used_by = e.info.used_by;
  row.groups = absl::StrJoin(e.info.groups, ",");
  return row;
}

absl::StatusOr<std::vector<store::StoredAuthToken>> TokenStore::Rows() {
  absl::MutexLock lock(&mu_);
  std::vector<store::StoredAuthToken> rows;
  for (const auto& [id, e] : tokens_) rows.push_back(Row(e));
  return rows;
}

absl::Status TokenStore::Load() {
  ASSIGN_OR_RETURN(auto st, db_->Prepare(absl::StrCat(
                                "SELECT ", kColumns, " FROM tokens")));
  return st->ForEachRow([&] {
    Entry e;
    TokenInfo& info = e.info;
    info.id = st->ColumnText(0);
    info.kind = st->ColumnText(1);
    info.user = st->ColumnText(2);
    info.admin = st->ColumnInt(3) != 0;
    e.hash = st->ColumnText(4);
    info.created = absl::FromUnixSeconds(st->ColumnInt(5));
    if (st->ColumnInt(6) != 0) {
      info.expires = absl::FromUnixSeconds(st->ColumnInt(6));
    }
    if (st->ColumnInt(7) != 0) {
      info.revoked = absl::FromUnixSeconds(st->ColumnInt(7));
    }
    info.used_by = st->ColumnText(8);
    info.groups = absl::StrSplit(st->ColumnText(9), ',', absl::SkipEmpty());
    tokens_[info.id] = std::move(e);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::pair<TokenInfo, std::string>> TokenStore::Create(
    const std::string& kind, const std::string& user, bool admin,
    absl::Duration ttl, absl::Time now,
    const std::vector<std::string>& groups, const std::string& given) {
  if (kind == kUserToken) {
    RETURN_IF_ERROR(ValidatePrincipalName(user, "user"));
    if (groups.size() > 64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "groups: ", groups.size(), " groups; a token names at most 64"));
    }
    for (const std::string& g : groups) {
      RETURN_IF_ERROR(ValidatePrincipalName(g, "groups"));
    }
  } else if (kind == kJoinToken) {
    if (!user.empty()) RETURN_IF_ERROR(ValidatePrincipalName(user, "node"));
    if (admin) {
      return absl::InvalidArgumentError("admin: a join token cannot be admin");
    }
    if (!groups.empty()) {
      return absl::InvalidArgumentError(
          "groups: a join token is for a node, which has no groups");
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("kind: '", kind, "' is neither user nor join"));
  }
  if (ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ttl: must be more than 0, like 1h");
  }
  std::string id, secret;
  if (!given.empty()) {
    std::vector<std::string> parts = absl::StrSplit(given, '_');
    auto hex = [](const std::string& s) {
      return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      });
    };
    if (parts.size() != 3 || parts[0] != "xl" || parts[1].size() != 16 ||
        parts[2].size() != 64 || !hex(parts[1]) || !hex(parts[2])) {
      return absl::InvalidArgumentError(
          "token: not a token of xl (xl_<16 hex>_<64 hex>); give a file an "
          "earlier 'token create --token-file' wrote");
    }
    id = parts[1];
    secret = parts[2];
  } else {
    ASSIGN_OR_RETURN(std::string id_bytes, crypto::RandomBytes(8));
    ASSIGN_OR_RETURN(std::string secret_bytes, crypto::RandomBytes(32));
    id = crypto::HexEncode(id_bytes);
    secret = crypto::HexEncode(secret_bytes);
  }
  TokenInfo info;
  info.id = id;
  info.kind = kind;
  info.user = user;
  info.admin = admin;
  info.groups = groups;
  info.created = now;
  info.expires = ttl == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                 : now + ttl;
  const std::string token = absl::StrCat("xl_", info.id, "_", secret);
  absl::MutexLock lock(&mu_);
  if (auto it = tokens_.find(info.id); it != tokens_.end()) {
    if (given.empty() ||
        !crypto::ConstantTimeEquals(it->second.hash, crypto::Sha256Hex(secret))) {
      return absl::AlreadyExistsError(absl::StrCat(
          "token ", info.id, " exists with another secret; make a new one"));
    }
    return std::make_pair(it->second.info, token);  // stored already
  }
  Entry entry{info, crypto::Sha256Hex(secret)};
  if (write_) {
    RETURN_IF_ERROR(write_(Row(entry)));
    tokens_[info.id] = std::move(entry);
    return std::make_pair(info, token);
  }
  ASSIGN_OR_RETURN(auto st, db_->Prepare(absl::StrCat(
                                "INSERT INTO tokens (", kColumns,
                                ") VALUES (?, ?, ?, ?, ?, ?, ?, 0, '', ?)")));
  st->BindText(1, info.id);
  st->BindText(2, info.kind);
  st->BindText(3, info.user);
  st->BindInt(4, admin ? 1 : 0);
  st->BindText(5, crypto::Sha256Hex(secret));
  st->BindInt(6, ToUnix(now));
  st->BindInt(7, ToUnix(info.expires));
  st->BindText(8, absl::StrJoin(groups, ","));
  RETURN_IF_ERROR(st->Run());
  tokens_[info.id] = Entry{info, crypto::Sha256Hex(secret)};
  return std::make_pair(info, token);
}

absl::StatusOr<TokenInfo> TokenStore::Revoke(const std::string& id,
                                             absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(id);
  if (it == tokens_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "token ", id, " does not exist; see the ids in 'token list'"));
  }
  TokenInfo& info = it->second.info;
  if (info.revoked != absl::InfinitePast()) return info;
  const int64_t when = std::max<int64_t>(ToUnix(now), 1);
  if (write_) {
    Entry revoked = it->second;
    revoked.info.revoked = absl::FromUnixSeconds(when);
    RETURN_IF_ERROR(write_(Row(revoked)));
    info.revoked = revoked.info.revoked;
    return info;
  }
  ASSIGN_OR_RETURN(auto st,
                   db_->Prepare("UPDATE tokens SET revoked = ? WHERE id = ?"));
  st->BindInt(1, when);
  st->BindText(2, id);
  RETURN_IF_ERROR(st->Run());
  info.revoked = absl::FromUnixSeconds(when);
  return info;
}

absl::StatusOr<std::vector<TokenInfo>> TokenStore::List() {
  absl::MutexLock lock(&mu_);
  std::vector<TokenInfo> out;
  out.reserve(tokens_.size());
  for (const auto& [id, e] : tokens_) out.push_back(e.info);
  std::stable_sort(out.begin(), out.end(),
                   [](const TokenInfo& a, const TokenInfo& b) {
                     return a.created < b.created;
                   });
  return out;
}

absl::StatusOr<TokenInfo> TokenStore::Verify(const std::string& token,
                                             const std::string& kind,
                                             absl::Time now) {
  std::vector<std::string> parts = absl::StrSplit(token, '_');
  if (parts.size() != 3 || parts[0] != "xl" || parts[1].size() != 16 ||
      parts[2].size() != 64) {
    return Unauthenticated(
        "the token is malformed; tokens read xl_<16 hex>_<64 hex>");
  }
  auto it = tokens_.find(parts[1]);
  const bool row = it != tokens_.end();
  // A missing id and a wrong secret answer alike.
  const std::string stored = row ? it->second.hash : std::string(64, '0');
  const bool match =
      crypto::ConstantTimeEquals(stored, crypto::Sha256Hex(parts[2]));
  if (!row || !match) {
    return Unauthenticated("the token is not valid; ask an admin for one");
  }
  const TokenInfo& info = it->second.info;
  if (info.kind != kind) {
    return Unauthenticated(absl::StrCat("token ", info.id, " is a ",
                                        info.kind, " token, not a ", kind,
                                        " token"));
  }
  if (info.revoked != absl::InfinitePast()) {
    return Unauthenticated(absl::StrCat(
        "token ", info.id,
        info.kind == kJoinToken && !info.used_by.empty()
            ? absl::StrCat(" was already used by node ", info.used_by)
            : std::string(" was revoked"),
        "; ask an admin for a new one"));
  }
  if (now >= info.expires) {
    return Unauthenticated(absl::StrCat(
        "token ", info.id, " expired at ", absl::FormatTime(info.expires),
        "; ask an admin for a new one"));
  }
  return info;
}

absl::StatusOr<TokenInfo> TokenStore::VerifyUser(const std::string& token,
                                                 absl::Time now) {
  absl::MutexLock lock(&mu_);
  return Verify(token, kUserToken, now);
}

absl::StatusOr<TokenInfo> TokenStore::UseJoin(
    const std::string& token, const std::string& node, bool name_is_default,
    absl::Time now,
    const std::function<absl::Status(const TokenInfo&, const std::string&)>&
        before_spend) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(TokenInfo info, Verify(token, kJoinToken, now));
  if (!info.user.empty() && info.user != node && !name_is_default) {
    return absl::PermissionDeniedError(absl::StrCat(
        "join token ", info.id, " is for node ", info.user, ", not ", node,
        "; start the agent with --name ", info.user,
        " (or without --name) or ask an admin for a token for ", node));
  }
  // The name the certificate will carry: the token's node, if it has one.
  const std::string name = info.user.empty() ? node : info.user;
  if (info.user.empty()) {
    // One unbound token, one new name: a second unbound join for a name
    // already issued (even before that node registers) would put two
    // certificates, and two machines, behind one node.
    for (const auto& [id, entry] : tokens_) {
      if (entry.info.kind == kJoinToken && entry.info.used_by == name) {
        return absl::AlreadyExistsError(absl::StrCat(
            "join: a certificate for node ", name, " was issued with join "
            "token ", id, "; to give the node a new one use a join token made "
            "for it (xlctl token create --join --node ", name,
            "); this token was not spent"));
      }
    }
  }
  if (before_spend) RETURN_IF_ERROR(before_spend(info, name));
  if (write_) {
    // Under mu_, as Verify was: two joins on one token, one wins.
    Entry spent = tokens_[info.id];
    spent.info.revoked = absl::FromUnixSeconds(std::max<int64_t>(ToUnix(now), 1));
    spent.info.used_by = name;
    RETURN_IF_ERROR(write_(Row(spent)));
    tokens_[info.id] = spent;
    return spent.info;
  }
  // Spent only if still unspent: two joins racing on one token, one wins.
  ASSIGN_OR_RETURN(auto st, db_->Prepare("UPDATE tokens SET revoked = ?, "
                                         "used_by = ? WHERE id = ? AND "
                                         "revoked = 0"));
  const int64_t when = std::max<int64_t>(ToUnix(now), 1);
  st->BindInt(1, when);
  st->BindText(2, name);
  st->BindText(3, info.id);
  RETURN_IF_ERROR(st->Run());
  if (db_->Changes() != 1) {
    return Unauthenticated(absl::StrCat(
        "join token ", info.id,
        " was already used; ask an admin for a new one (xlctl token create "
        "--join --node ", name, ")"));
  }
  TokenInfo& spent = tokens_[info.id].info;
  spent.revoked = absl::FromUnixSeconds(when);
  spent.used_by = name;
  return spent;
}

}  // namespace xl::auth
