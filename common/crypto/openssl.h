// The one wrapper around OpenSSL's libcrypto: random bytes, SHA-256,
// constant-time comparison, EC key pairs and X.509 certificates (a CA, and
// server, node and client certificates it signs). Every OpenSSL error is
// turned into an absl::Status here, with OpenSSL's own error string.
// Stateless; every function is safe from any thread.
#ifndef XL_COMMON_CRYPTO_OPENSSL_H_
#define XL_COMMON_CRYPTO_OPENSSL_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace xl::crypto {

// Returns `n` bytes from the operating system's generator (RAND_bytes).
absl::StatusOr<std::string> RandomBytes(size_t n);

// Lower-case hex of `data`.
std::string HexEncode(absl::string_view data);

// SHA-256 of `data`, as 64 lower-case hex digits.
std::string Sha256Hex(absl::string_view data);

// Compares in time that depends only on the lengths (CRYPTO_memcmp).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// Generates a new EC P-256 private key; returns it as PKCS#8 PEM.
absl::StatusOr<std::string> GeneratePrivateKeyPem();

// The public key (SubjectPublicKeyInfo PEM) of a private key PEM.
absl::StatusOr<std::string> PublicKeyPem(const std::string& private_key_pem);

// What a certificate says about its subject.
struct CertificateSubject {
  std::string common_name;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  // subjectAltName URIs (a node certificate's "xl-node:<name>").
  std::vector<std::string> uris;
  bool is_ca = false;
  // Extended key usage: serverAuth, clientAuth.
  bool server_auth = false;
  bool client_auth = false;
  // Valid from now minus a minute (clock skew) for this long.
  absl::Duration validity = absl::Hours(24 * 365);
};

// Issues an X.509 v3 certificate (PEM) for `subject_public_key_pem`, signed
// by the issuer's certificate and key; self-signed (a root CA) when
// `issuer_cert_pem` is empty, with `issuer_key_pem` the subject's own key.
// INVALID_ARGUMENT for unreadable PEM, INTERNAL for OpenSSL failures.
absl::StatusOr<std::string> IssueCertificate(
    const CertificateSubject& subject,
    const std::string& subject_public_key_pem,
    const std::string& issuer_cert_pem, const std::string& issuer_key_pem);

// The subject's common name of a certificate PEM.
absl::StatusOr<std::string> CertificateCommonName(const std::string& cert_pem);

// What a certificate may be used for. A certificate without an extended
// key usage extension counts as usable for anything (server_auth true,
// client_auth false: xl's node certificates always name clientAuth).
struct CertificateUse {
  bool is_ca = false;
  bool client_auth = false;
  bool server_auth = false;
  // Its subjectAltName URIs.
  std::vector<std::string> uris;
};
absl::StatusOr<CertificateUse> DescribeCertificate(const std::string& cert_pem);

// Checks that `cert_pem` was signed by `ca_cert_pem` and is valid now.
absl::Status VerifyCertificate(const std::string& cert_pem,
                               const std::string& ca_cert_pem);

// Reads a whole file; NOT_FOUND / PERMISSION_DENIED name the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `contents` to `path` (through a temporary file and rename) with
// `mode` (0600 for keys and tokens).
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, int mode);

}  // namespace xl::crypto

#endif  // XL_COMMON_CRYPTO_OPENSSL_H_
