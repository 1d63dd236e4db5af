// The one place the scheduler reads who is calling. Today the caller names
// itself in the "x-xl-user" metadata; tokens and TLS identities replace this
// function's body later. Stateless; safe from any thread.
#ifndef XL_SERVER_SERVICE_IDENTITY_H_
#define XL_SERVER_SERVICE_IDENTITY_H_

#include <grpcpp/server_context.h>

#include <string>

#include "absl/strings/ascii.h"
#include "common/identity.h"

namespace xl::service {

inline std::string CallerUser(const grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kUserMetadataKey);
  if (it == md.end()) return kAnonymousUser;
  std::string user(it->second.data(), it->second.size());
  if (user.empty() || user.size() > 64) return kAnonymousUser;
  for (char c : user) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.' &&
        c != '@') {
      return kAnonymousUser;
    }
  }
  return user;
}

}  // namespace xl::service

#endif  // XL_SERVER_SERVICE_IDENTITY_H_
