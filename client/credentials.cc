#include "client/credentials.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/crypto/openssl.h"

namespace xl::client {
namespace {

absl::Status MakeConfigDir() {
  const std::string dir = ConfigDir();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  if (chmod(dir.c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot make ", dir, " private: ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ConfigDir() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg != nullptr && *xdg == '/') return absl::StrCat(xdg, "/xl");
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr && *home != '\0' ? home : ".",
                      "/.config/xl");
}

std::string StoredTokenPath() { return ConfigDir() + "/token"; }
std::string StoredCaPath() { return ConfigDir() + "/ca.crt"; }

absl::StatusOr<std::string> ReadStoredToken() {
  auto text = crypto::ReadFile(StoredTokenPath());
  if (absl::IsNotFound(text.status())) return std::string();
  if (!text.ok()) return text.status();
  return std::string(absl::StripAsciiWhitespace(*text));
}

absl::Status StoreToken(const std::string& token) {
  absl::Status st = MakeConfigDir();
  if (!st.ok()) return st;
  return crypto::WriteFileAtomically(StoredTokenPath(), token + "\n", 0600);
}

absl::Status StoreCa(const std::string& pem) {
  absl::Status st = MakeConfigDir();
  if (!st.ok()) return st;
  return crypto::WriteFileAtomically(StoredCaPath(), pem, 0600);
}

}  // namespace xl::client
