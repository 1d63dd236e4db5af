// The caller's identity on the wire. Clients put the user name in the call
// metadata under kUserMetadataKey; the scheduler reads it in exactly one place
// (server/service/identity.h). A later change replaces the name with a token.
#ifndef XL_COMMON_IDENTITY_H_
#define XL_COMMON_IDENTITY_H_

namespace xl {

inline constexpr char kUserMetadataKey[] = "x-xl-user";
inline constexpr char kAnonymousUser[] = "anonymous";

}  // namespace xl

#endif  // XL_COMMON_IDENTITY_H_
