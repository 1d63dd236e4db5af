#include "common/crypto/openssl.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace xl::crypto {
namespace {

// The OpenSSL error queue as one message, emptied.
std::string OpenSslErrors() {
  std::string out;
  unsigned long e;
  char buf[256];
  while ((e = ERR_get_error()) != 0) {
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error recorded" : out;
}

absl::Status Internal(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", OpenSslErrors()));
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* s) const { X509_STORE_CTX_free(s); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

Bio MemBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

std::string BioString(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<Pkey> ReadPrivateKey(const std::string& pem) {
  Bio bio = MemBio(pem);
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a PEM private key: ", OpenSslErrors()));
  }
  return key;
}

absl::StatusOr<Pkey> ReadPublicKey(const std::string& pem) {
  Bio bio = MemBio(pem);
  Pkey key(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a PEM public key: ", OpenSslErrors()));
  }
  return key;
}

absl::StatusOr<Cert> ReadCert(const std::string& pem) {
  Bio bio = MemBio(pem);
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a PEM certificate: ", OpenSslErrors()));
  }
  return cert;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid,
                          const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext =
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) {
    return Internal(absl::StrCat("certificate extension ", OBJ_nid2sn(nid),
                                 "=", value));
  }
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) return Internal("adding a certificate extension");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()),
                 static_cast<int>(n)) != 1) {
    return Internal("RAND_bytes");
  }
  return out;
}

std::string HexEncode(absl::string_view data) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(data.size() * 2);
  for (unsigned char c : data) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  return HexEncode(
      absl::string_view(reinterpret_cast<const char*>(digest), len));
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::StatusOr<std::string> GeneratePrivateKeyPem() {
  Pkey key(EVP_EC_gen("P-256"));
  if (key == nullptr) return Internal("generating an EC P-256 key");
  Bio bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0,
                               nullptr, nullptr) != 1) {
    return Internal("writing a private key");
  }
  return BioString(bio.get());
}

absl::StatusOr<std::string> PublicKeyPem(const std::string& private_key_pem) {
  auto key = ReadPrivateKey(private_key_pem);
  if (!key.ok()) return key.status();
  Bio bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PUBKEY(bio.get(), key->get()) != 1) {
    return Internal("writing a public key");
  }
  return BioString(bio.get());
}

absl::StatusOr<std::string> IssueCertificate(
    const CertificateSubject& subject,
    const std::string& subject_public_key_pem,
    const std::string& issuer_cert_pem, const std::string& issuer_key_pem) {
  if (subject.common_name.empty() || subject.common_name.size() > 64) {
    return absl::InvalidArgumentError(
        "common name: must be 1 to 64 characters");
  }
  auto pub = ReadPublicKey(subject_public_key_pem);
  if (!pub.ok()) return pub.status();
  auto issuer_key = ReadPrivateKey(issuer_key_pem);
  if (!issuer_key.ok()) return issuer_key.status();
  Cert issuer;
  if (!issuer_cert_pem.empty()) {
    auto c = ReadCert(issuer_cert_pem);
    if (!c.ok()) return c.status();
    issuer = std::move(*c);
  }

  Cert cert(X509_new());
  if (cert == nullptr) return Internal("X509_new");
  X509_set_version(cert.get(), 2);  // v3
  auto serial = RandomBytes(16);
  if (!serial.ok()) return serial.status();
  (*serial)[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(reinterpret_cast<const unsigned char*>(serial->data()),
                         static_cast<int>(serial->size()), nullptr);
  if (bn == nullptr ||
      BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) == nullptr) {
    BN_free(bn);
    return Internal("certificate serial number");
  }
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                  static_cast<long>(absl::ToInt64Seconds(subject.validity)));
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(
          name, "CN", MBSTRING_UTF8,
          reinterpret_cast<const unsigned char*>(subject.common_name.c_str()),
          -1, -1, 0) != 1) {
    return Internal("certificate common name");
  }
  if (X509_set_issuer_name(cert.get(), issuer != nullptr
                                           ? X509_get_subject_name(issuer.get())
                                           : name) != 1 ||
      X509_set_pubkey(cert.get(), pub->get()) != 1) {
    return Internal("certificate issuer or key");
  }
  X509* issuer_ptr = issuer != nullptr ? issuer.get() : cert.get();
  absl::Status st;
  if (subject.is_ca) {
    st = AddExtension(cert.get(), issuer_ptr, NID_basic_constraints,
                      "critical,CA:TRUE,pathlen:0");
    if (st.ok()) {
      st = AddExtension(cert.get(), issuer_ptr, NID_key_usage,
                        "critical,keyCertSign,cRLSign");
    }
  } else {
    st = AddExtension(cert.get(), issuer_ptr, NID_basic_constraints,
                      "critical,CA:FALSE");
    if (st.ok()) {
      st = AddExtension(cert.get(), issuer_ptr, NID_key_usage,
                        "critical,digitalSignature,keyEncipherment");
    }
    std::vector<std::string> eku;
    if (subject.server_auth) eku.push_back("serverAuth");
    if (subject.client_auth) eku.push_back("clientAuth");
    if (st.ok() && !eku.empty()) {
      st = AddExtension(cert.get(), issuer_ptr, NID_ext_key_usage,
                        absl::StrJoin(eku, ","));
    }
  }
  std::vector<std::string> sans;
  for (const auto& d : subject.dns_names) sans.push_back("DNS:" + d);
  for (const auto& ip : subject.ip_addresses) sans.push_back("IP:" + ip);
  for (const auto& uri : subject.uris) sans.push_back("URI:" + uri);
  if (st.ok() && !sans.empty()) {
    st = AddExtension(cert.get(), issuer_ptr, NID_subject_alt_name,
                      absl::StrJoin(sans, ","));
  }
  if (st.ok()) {
    st = AddExtension(cert.get(), issuer_ptr, NID_subject_key_identifier,
                      "hash");
  }
  if (!st.ok()) return st;
  if (X509_sign(cert.get(), issuer_key->get(), EVP_sha256()) == 0) {
    return Internal("signing the certificate");
  }
  Bio bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_X509(bio.get(), cert.get()) != 1) {
    return Internal("writing the certificate");
  }
  return BioString(bio.get());
}

absl::StatusOr<std::string> CertificateCommonName(const std::string& cert_pem) {
  auto cert = ReadCert(cert_pem);
  if (!cert.ok()) return cert.status();
  char buf[256];
  int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert->get()),
                                    NID_commonName, buf, sizeof(buf));
  if (n < 0) {
    return absl::InvalidArgumentError("the certificate has no common name");
  }
  return std::string(buf, static_cast<size_t>(n));
}

absl::StatusOr<CertificateUse> DescribeCertificate(
    const std::string& cert_pem) {
  auto cert = ReadCert(cert_pem);
  if (!cert.ok()) return cert.status();
  CertificateUse use;
  X509* x = cert->get();
  // X509_check_ca and the extension flags need the cached extensions.
  use.is_ca = X509_check_ca(x) != 0;
  const uint32_t xku = X509_get_extended_key_usage(x);
  const bool has_eku = (X509_get_extension_flags(x) & EXFLAG_XKUSAGE) != 0;
  use.client_auth = has_eku && (xku & XKU_SSL_CLIENT) != 0;
  use.server_auth = !has_eku || (xku & XKU_SSL_SERVER) != 0;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = n->d.uniformResourceIdentifier;
    use.uris.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                          static_cast<size_t>(ASN1_STRING_length(uri)));
  }
  GENERAL_NAMES_free(names);
  return use;
}

absl::Status VerifyCertificate(const std::string& cert_pem,
                               const std::string& ca_cert_pem) {
  auto cert = ReadCert(cert_pem);
  if (!cert.ok()) return cert.status();
  auto ca = ReadCert(ca_cert_pem);
  if (!ca.ok()) return ca.status();
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (store == nullptr || ctx == nullptr ||
      X509_STORE_add_cert(store.get(), ca->get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert->get(), nullptr) != 1) {
    return Internal("setting up certificate verification");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        "certificate does not verify against the CA: ",
        X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()))));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    std::string msg = absl::StrCat("cannot read ", path, ": ", strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::FailedPreconditionError(msg);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, int mode) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  fchmod(fd, static_cast<mode_t>(mode));  // umask may have narrowed it
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return absl::UnavailableError(
          absl::StrCat("cannot write ", path, ": ", strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  fsync(fd);
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": ", strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace xl::crypto
