// The caller's identity on the wire. Clients put the user name in the call
// metadata under kUserMetadataKey; the scheduler reads it in exactly one place
// (server/service/identity.h). A later change replaces the name with a token.
#ifndef XL_COMMON_IDENTITY_H_
#define XL_COMMON_IDENTITY_H_

namespace xl {

inline constexpr char kUserMetadataKey[] = "x-xl-user";
inline constexpr char kAnonymousUser[] = "anonymous";
// What marks a certificate as node <name>'s: a subjectAltName URI
// "xl-node:<name>" beside its common name <name>. A client certificate of
// a person from the same CA lacks it, and so is no node.
inline constexpr char kNodeCertificateUriPrefix[] = "xl-node:";

}  // namespace xl

#endif  // XL_COMMON_IDENTITY_H_
