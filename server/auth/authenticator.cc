#include "server/auth/authenticator.h"

#include <grpcpp/security/auth_context.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crypto/openssl.h"
#include "common/identity.h"
#include "server/service/identity.h"

namespace xl::auth {
namespace {

constexpr char kAuthorization[] = "authorization";

// The node a verified client certificate names, "" when there is none, or
// the reason a certificate cannot stand for a node. Only a certificate made
// for a node counts: clientAuth and not serverAuth in its extended key
// usage, not a CA, a common name that is a valid node name, and (unless
// `accept_unmarked`) the subjectAltName URI xl-node:<that name>, so a
// server's, an operator's or a person's certificate from the same CA is no
// node (security review F12).
absl::StatusOr<std::string> CertificateName(
    const grpc::CallbackServerContext* ctx, bool accept_unmarked) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::string();
  auto pems = auth->FindPropertyValues("x509_pem_cert");
  auto names = auth->FindPropertyValues("x509_common_name");
  if (pems.empty() || names.empty()) {
    return absl::UnauthenticatedError(
        "the client certificate names no node (no common name); issue node "
        "certificates with 'xl-scheduler token create --join' or as the "
        "README's Security section says");
  }
  auto use = crypto::DescribeCertificate(
      std::string(pems.front().data(), pems.front().size()));
  if (!use.ok()) return absl::UnauthenticatedError(use.status().message());
  std::string name(names.front().data(), names.front().size());
  if (use->is_ca || !use->client_auth || use->server_auth) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the client certificate of \"", name,
        "\" is not a node certificate (it must have the clientAuth extended "
        "key usage only and not be a CA); give the agent the certificate "
        "issued for its node"));
  }
  absl::Status valid = ValidatePrincipalName(name, "node certificate name");
  if (!valid.ok()) return absl::PermissionDeniedError(valid.message());
  const std::string mark = absl::StrCat(kNodeCertificateUriPrefix, name);
  bool marked = false;
  for (const std::string& uri : use->uris) marked |= uri == mark;
  if (!marked && !accept_unmarked) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the client certificate of \"", name,
        "\" is not marked as a node's: it needs the subjectAltName URI ", mark,
        " (xl issues it so to joining agents; add "
        "'subjectAltName=URI:", mark,
        "' where you sign node certificates, as the README's recipe does), "
        "or start the scheduler with --accept-unmarked-node-certificates "
        "while you reissue them"));
  }
  return name;
}

}  // namespace

Authenticator Authenticator::Off(std::string warning) {
  Authenticator a;
  a.warning_ = std::move(warning);
  return a;
}

Authenticator Authenticator::On(TokenStore* tokens, const Clock* clock) {
  Authenticator a;
  a.tokens_ = tokens;
  a.clock_ = clock;
  return a;
}

absl::StatusOr<Principal> Authenticator::Identify(
    const grpc::CallbackServerContext* ctx) const {
  Principal p;
  if (!enabled()) {
    p.name = service::CallerUser(ctx);
    p.admin = true;
    return p;
  }
  const auto& md = ctx->client_metadata();
  auto it = md.find(kAuthorization);
  if (it != md.end()) {
    absl::string_view value(it->second.data(), it->second.size());
    if (!absl::ConsumePrefix(&value, "Bearer ")) {
      return absl::UnauthenticatedError(
          "the authorization metadata must read \"Bearer <token>\"");
    }
    auto info = tokens_->VerifyUser(std::string(value), clock_->Now());
    if (!info.ok()) return info.status();
    p.name = info->user;
    p.admin = info->admin;
    p.groups = info->groups;
    p.authenticated = true;
    return p;
  }
  auto certified = CertificateName(ctx, accept_unmarked_nodes_);
  if (!certified.ok()) return certified.status();
  const std::string& node = *certified;
  if (!node.empty()) {
    p.kind = Principal::Kind::kNode;
    p.name = node;
    p.authenticated = true;
    return p;
  }
  return absl::UnauthenticatedError(
      "no credential: this scheduler takes calls only with a user's token "
      "(\"authorization: Bearer <token>\") or an agent's client "
      "certificate");
}

absl::Status RequireUser(const Principal& p, absl::string_view what) {
  if (p.is_user()) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(what, ": the certificate of node ", p.name,
                   " may only run an agent session; users need a token"));
}

absl::Status RequireAdmin(const Principal& p, absl::string_view what) {
  if (p.is_user() && p.admin) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, ": only admins may do this, and ", p.is_node() ? "node " : "",
      p.name, " is not one"));
}

bool OwnsOrAdmin(const Principal& p, const std::string& owner) {
  return p.is_user() && (p.admin || p.name == owner);
}

absl::Status RequireOwner(const Principal& p, const v1::Job& job,
                          absl::string_view what) {
  if (OwnsOrAdmin(p, job.user())) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(what, ": job ", job.id(), " belongs to ", job.user(),
                   "; only its owner or an admin may do this, and you are ",
                   p.name));
}

void RedactJob(v1::Job* job, bool full) {
  auto* env = job->mutable_spec()->mutable_env();
  if (!full) {
    // Others see what a job asks for and where it runs, not what it runs
    // with: environment values, arguments (they often carry keys), its
    // training metrics, its idempotency key, its MASTER_PORT and its ranks'
    // messages.
    for (auto& entry : *env) entry.second = kRedacted;
    auto* command = job->mutable_spec()->mutable_command();
    for (int i = 1; i < command->size(); ++i) *command->Mutable(i) = kRedacted;
    job->clear_metrics();
    job->clear_idempotency_key();
    // A co-tenant on the master's node could take the port first or talk
    // to the job's store on it (security review F5).
    job->clear_master_port();
    for (auto& exit : *job->mutable_rank_exits()) exit.clear_message();
    RedactReason(job->state(),
                 job->attempt() > 1 || job->retries_used() > 0 ||
                     job->preemptions() > 0 || job->has_start_time(),
                 job->mutable_reason());
  }
  for (const std::string& key : job->spec().secret_env()) {
    auto it = env->find(key);
    if (it != env->end()) it->second = kRedacted;
  }
}

void RedactReason(v1::JobState state, bool ran, std::string* reason) {
  if ((state != v1::PENDING || ran) && !reason->empty()) {
    *reason = kReasonHidden;
  }
}

void RedactJobFor(const Principal& p, v1::Job* job) {
  RedactJob(job, OwnsOrAdmin(p, job->user()));
}

}  // namespace xl::auth
