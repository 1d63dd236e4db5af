// xlctl whoami, login and token: identity and credentials.
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/credentials.h"
#include "client/exit_code.h"
#include "common/status.h"
#include "client/output.h"
#include "common/duration.h"

namespace xl::client {
namespace {

constexpr char kTokenHint[] =
    "; list tokens with 'xlctl token list' (admins only)";

std::string TimeOrNever(const google::protobuf::Timestamp& t, bool set,
                        absl::TimeZone zone) {
  if (!set) return "never";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", FromProto(t), zone);
}

}  // namespace

absl::Status Commands::WhoAmI() {
  xl::v1::WhoAmIResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->auth().WhoAmI(context.get(), {}, &response);
  if (!status.ok()) return connection_->CallError(status, "whoami", "");
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(response, format_);
    return absl::OkStatus();
  }
  *out_ << response.name() << " (" << response.kind()
        << (response.admin() ? ", admin" : "") << ")\n";
  if (!response.auth_enabled()) {
    *out_ << "this scheduler runs without TLS or tokens: every caller is "
             "who it says it is\n";
  }
  if (!response.warning().empty()) {
    *err_ << "xlctl: WARNING: " << Printable(response.warning()) << "\n";
  }
  return absl::OkStatus();
}

absl::Status Commands::Login(const std::string& token,
                             const std::string& tls_ca_pem) {
  if (token.empty()) {
    return UsageError(
        "login: no token; pass --token, or pipe it in: "
        "echo \"$TOKEN\" | xlctl login");
  }
  if (tls_ca_pem.empty()) {
    return UsageError(
        "login: give the CA certificate of the scheduler with --tls-ca FILE "
        "(or XL_TLS_CA): a token is only ever sent over TLS");
  }
  xl::v1::WhoAmIResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->auth().WhoAmI(context.get(), {}, &response);
  if (!status.ok()) {
    return connection_->CallError(status, "login (nothing was stored)", "");
  }
  if (!response.auth_enabled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "login: the scheduler at ", connection_->options().server,
        " runs without TLS or tokens, so a token means nothing to it; "
        "nothing was stored"));
  }
  // The CA first: a stored token never goes without the CA it is for.
  absl::Status st = StoreCa(tls_ca_pem);
  if (st.ok()) st = StoreToken(token);
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("login: ", st.message(),
                                     "; set XL_TOKEN instead"));
  }
  *out_ << "logged in to " << connection_->options().server << " as "
        << response.name() << (response.admin() ? " (admin)" : "")
        << "; token stored in " << StoredTokenPath() << "\n";
  return absl::OkStatus();
}

absl::Status Commands::TokenCreate(const std::string& user, bool admin,
                                   const std::string& ttl, bool join,
                                   const std::string& node,
                                   const std::vector<std::string>& groups) {
  xl::v1::CreateTokenRequest request;
  if (join) {
    if (!user.empty()) {
      return UsageError("token create: --user is for user tokens; a join "
                        "token takes --node NAME (or nothing: any new node)");
    }
    if (admin) return UsageError("token create: a join token cannot be --admin");
    if (!groups.empty()) {
      return UsageError("token create: --group is for user tokens; a node "
                        "has no groups");
    }
    request.set_user(node);
    request.set_join(true);
  } else {
    if (user.empty()) {
      return UsageError("token create: --user is required (or --join)");
    }
    if (!node.empty()) {
      return UsageError("token create: --node goes with --join");
    }
    request.set_user(user);
    request.set_admin(admin);
    for (const std::string& g : groups) request.add_groups(g);
  }
  if (!ttl.empty()) {
    absl::Duration d;
    if (!ParseLifetime(ttl, &d)) {
      return UsageError(absl::StrCat(
          "--ttl: '", ttl,
          "' is not a lifetime; give one such as 1h, 30d, or 'never'"));
    }
    if (d == absl::InfiniteDuration()) {
      request.set_never_expires(true);
    } else {
      *request.mutable_ttl() = ToProtoDuration(d);
    }
  }
  xl::v1::CreateTokenResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->auth().CreateToken(context.get(), request, &response);
  if (!status.ok()) {
    return connection_->CallError(status, "token create", kTokenHint);
  }
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(response, format_);
    return absl::OkStatus();
  }
  *out_ << response.token() << "\n";
  const auto& info = response.info();
  *err_ << "xlctl: token " << info.id() << " ("
        << (info.kind() == "join" ? "join" : "user " + info.user())
        << (info.admin() ? ", admin" : "") << ") expires "
        << TimeOrNever(info.expire_time(), info.has_expire_time(), zone_)
        << "; it is shown only this once\n";
  return absl::OkStatus();
}

absl::Status Commands::TokenList() {
  xl::v1::ListTokensResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->auth().ListTokens(context.get(), {}, &response);
  if (!status.ok()) return connection_->CallError(status, "token list", "");
  if (format_ != OutputFormat::kTable) {
    *out_ << RenderMessage(response, format_);
    return absl::OkStatus();
  }
  const absl::Time now = clock_->Now();
  char line[512];
  std::snprintf(line, sizeof(line),
                "%-16s  %-4s  %-20s  %-5s  %-25s  %-20s  %s\n", "ID", "KIND",
                "USER/NODE", "ADMIN", "EXPIRES", "STATE", "GROUPS");
  *out_ << line;
  for (const auto& t : response.tokens()) {
    std::string state = "valid";
    if (t.has_revoke_time()) {
      state = t.used_by().empty() ? "revoked" : "used by " + t.used_by();
    } else if (t.has_expire_time() && now >= FromProto(t.expire_time())) {
      state = "expired";
    }
    const std::string groups =
        t.groups().empty() ? "-" : absl::StrJoin(t.groups(), ",");
    std::snprintf(
        line, sizeof(line), "%-16s  %-4s  %-20s  %-5s  %-25s  %-20s  %s\n",
        t.id().c_str(), t.kind().c_str(), t.user().c_str(),
        t.admin() ? "yes" : "no",
        TimeOrNever(t.expire_time(), t.has_expire_time(), zone_).c_str(),
        state.c_str(), groups.c_str());
    *out_ << line;
  }
  return absl::OkStatus();
}

absl::Status Commands::TokenRevoke(const std::string& id) {
  xl::v1::RevokeTokenRequest request;
  request.set_id(id);
  xl::v1::RevokeTokenResponse response;
  auto context = connection_->UnaryContext();
  grpc::Status status =
      connection_->auth().RevokeToken(context.get(), request, &response);
  if (!status.ok()) {
    return connection_->CallError(status, absl::StrCat("token revoke ", id),
                                  kTokenHint);
  }
  *out_ << "token " << id << " revoked\n";
  return absl::OkStatus();
}

}  // namespace xl::client
