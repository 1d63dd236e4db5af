// Where xlctl keeps its credentials: the token `xlctl login` stored, and the
// CA it was given, in $XDG_CONFIG_HOME/xl (else ~/.config/xl): the
// directory mode 0700, the files 0600. Stateless; thread-compatible.
#ifndef XL_CLIENT_CREDENTIALS_H_
#define XL_CLIENT_CREDENTIALS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace xl::client {

// $XDG_CONFIG_HOME/xl, else $HOME/.config/xl.
std::string ConfigDir();
std::string StoredTokenPath();
std::string StoredCaPath();

// The stored token, or "" when there is none.
absl::StatusOr<std::string> ReadStoredToken();
// Stores `token` (creating the directory with mode 0700, the file 0600).
absl::Status StoreToken(const std::string& token);
// Stores a copy of the CA certificate PEM xlctl verifies the scheduler with.
absl::Status StoreCa(const std::string& pem);

}  // namespace xl::client

#endif  // XL_CLIENT_CREDENTIALS_H_
