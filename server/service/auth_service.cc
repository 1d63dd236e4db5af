// AuthService: who the caller is, token management (admins only), and the
// exchange of a join token for a node certificate.
#include "absl/strings/str_cat.h"
#include "common/identity.h"
#include "common/crypto/openssl.h"
#include "common/duration.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "server/service/services.h"

namespace xl::service {
namespace {

constexpr absl::Duration kDefaultUserTtl = absl::Hours(24 * 90);
constexpr absl::Duration kDefaultJoinTtl = absl::Hours(1);

v1::TokenInfo ToProto(const auth::TokenInfo& t) {
  v1::TokenInfo out;
  out.set_id(t.id);
  out.set_kind(t.kind);
  out.set_user(t.user);
  out.set_admin(t.admin);
  *out.mutable_create_time() = ToProtoTime(t.created);
  if (t.expires != absl::InfiniteFuture()) {
    *out.mutable_expire_time() = ToProtoTime(t.expires);
  }
  if (t.revoked != absl::InfinitePast()) {
    *out.mutable_revoke_time() = ToProtoTime(t.revoked);
  }
  out.set_used_by(t.used_by);
  for (const std::string& g : t.groups) out.add_groups(g);
  return out;
}

// The admin calling, or why not; FAILED_PRECONDITION when auth is off (no
// tokens to manage: use `xl-scheduler token` on the database).
absl::StatusOr<auth::Principal> Admin(const auth::Authenticator* auth,
                                      const grpc::CallbackServerContext* ctx,
                                      absl::string_view what) {
  ASSIGN_OR_RETURN(auth::Principal p, auth->Identify(ctx));
  RETURN_IF_ERROR(auth::RequireAdmin(p, what));
  if (!auth->enabled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": this scheduler runs without TLS, so it takes no tokens; "
              "start it with --tls-cert, --tls-key and --tls-ca"));
  }
  return p;
}

}  // namespace

grpc::ServerUnaryReactor* AuthServiceImpl::WhoAmI(
    grpc::CallbackServerContext* ctx, const v1::WhoAmIRequest* request,
    v1::WhoAmIResponse* response) {
  (void)request;
  auto* reactor = ctx->DefaultReactor();
  auto who = auth_->Identify(ctx);
  if (who.ok()) {
    response->set_name(who->name);
    response->set_kind(who->is_node() ? "node" : "user");
    response->set_admin(who->admin);
    for (const std::string& g : who->groups) response->add_groups(g);
    response->set_auth_enabled(auth_->enabled());
    response->set_warning(auth_->warning());
  }
  reactor->Finish(ToGrpcStatus(who.status()));
  return reactor;
}

grpc::ServerUnaryReactor* AuthServiceImpl::CreateToken(
    grpc::CallbackServerContext* ctx, const v1::CreateTokenRequest* request,
    v1::CreateTokenResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto admin = Admin(auth_, ctx, "create token");
  if (!admin.ok()) {
    reactor->Finish(ToGrpcStatus(admin.status()));
    return reactor;
  }
  absl::Duration ttl = request->has_ttl() ? FromProto(request->ttl())
                                          : absl::ZeroDuration();
  if (ttl == absl::ZeroDuration()) {
    ttl = request->join() ? kDefaultJoinTtl : kDefaultUserTtl;
  }
  if (request->never_expires()) ttl = absl::InfiniteDuration();
  auto made = auth_->tokens()->Create(
      request->join() ? auth::kJoinToken : auth::kUserToken, request->user(),
      request->admin(), ttl, absl::Now(),
      std::vector<std::string>(request->groups().begin(),
                               request->groups().end()));
  if (made.ok()) {
    *response->mutable_info() = ToProto(made->first);
    response->set_token(made->second);
  }
  reactor->Finish(ToGrpcStatus(made.status()));
  return reactor;
}

grpc::ServerUnaryReactor* AuthServiceImpl::ListTokens(
    grpc::CallbackServerContext* ctx, const v1::ListTokensRequest* request,
    v1::ListTokensResponse* response) {
  (void)request;
  auto* reactor = ctx->DefaultReactor();
  auto admin = Admin(auth_, ctx, "list tokens");
  absl::Status st = admin.status();
  if (st.ok()) {
    auto tokens = auth_->tokens()->List();
    st = tokens.status();
    if (tokens.ok()) {
      for (const auto& t : *tokens) *response->add_tokens() = ToProto(t);
    }
  }
  reactor->Finish(ToGrpcStatus(st));
  return reactor;
}

grpc::ServerUnaryReactor* AuthServiceImpl::RevokeToken(
    grpc::CallbackServerContext* ctx, const v1::RevokeTokenRequest* request,
    v1::RevokeTokenResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto admin = Admin(auth_, ctx, "revoke token");
  absl::Status st = admin.status();
  if (st.ok()) {
    auto info = auth_->tokens()->Revoke(request->id(), absl::Now());
    st = info.status();
    if (info.ok()) *response->mutable_info() = ToProto(*info);
  }
  reactor->Finish(ToGrpcStatus(st));
  return reactor;
}

grpc::ServerUnaryReactor* AuthServiceImpl::JoinNode(
    grpc::CallbackServerContext* ctx, const v1::JoinNodeRequest* request,
    v1::JoinNodeResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto finish = [reactor](const absl::Status& st) {
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  };
  if (!auth_->enabled() || ca_.cert_pem.empty()) {
    return finish(absl::FailedPreconditionError(
        "join: this scheduler signs no node certificates; start it with "
        "--ca-cert and --ca-key (and TLS), or give the agent a certificate "
        "an operator issued"));
  }
  if (request->public_key_pem().empty() ||
      request->public_key_pem().size() > 16384) {
    return finish(absl::InvalidArgumentError(
        "public_key_pem: required; the node's public key in PEM"));
  }
  // A name the scheduler already knows is taken over only with a token
  // bound to that name (token create --join --node NAME). The certificate
  // is made before the token is spent, so a bad key does not burn it.
  std::string cert;
  auto spent = auth_->tokens()->UseJoin(
      request->join_token(), request->node_name(), request->name_is_default(),
      absl::Now(),
      [&](const auth::TokenInfo& token,
          const std::string& name) -> absl::Status {
        // `name`: the token's node, else the one the agent asked for.
        RETURN_IF_ERROR(auth::ValidatePrincipalName(name, "node_name"));
        if (token.user.empty() && controller_->GetNode(name).ok()) {
          return absl::AlreadyExistsError(absl::StrCat(
              "join: node ", name,
              " is already known; to give it a new certificate use a join "
              "token made for it (xlctl token create --join --node ", name,
              "); this token was not spent"));
        }
        crypto::CertificateSubject subject;
        subject.common_name = name;
        subject.uris = {absl::StrCat(kNodeCertificateUriPrefix, name)};
        subject.client_auth = true;
        subject.validity = ca_.validity;
        auto made = crypto::IssueCertificate(subject, request->public_key_pem(),
                                             ca_.cert_pem, ca_.key_pem);
        if (!made.ok()) {
          return Annotate(made.status(),
                          "public_key_pem (the token was not spent)");
        }
        cert = std::move(*made);
        return absl::OkStatus();
      });
  if (!spent.ok()) return finish(spent.status());
  response->set_certificate_pem(cert);
  response->set_ca_certificate_pem(ca_.cert_pem);
  return finish(absl::OkStatus());
}

}  // namespace xl::service
