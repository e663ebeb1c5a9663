// Throw-away PKI for TLS tests: a CA and the leaves it signs (P-256, valid for a day, server
// leaves with subjectAltName 127.0.0.1 and localhost), made at test time so tests need no
// openssl binary and no checked-in keys. Shared by the fake API server and the webhook's tests.
#pragma once

#include <string>

namespace kvgpu::testing {

struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

class TestAuthority {
 public:
  explicit TestAuthority(const std::string& common_name);
  ~TestAuthority();
  TestAuthority(const TestAuthority&) = delete;
  TestAuthority& operator=(const TestAuthority&) = delete;

  const std::string& cert_pem() const { return cert_pem_; }
  // `server` sets extendedKeyUsage serverAuth (and the subjectAltName), otherwise clientAuth.
  // Every certificate gets its own serial, so a rotated one is always distinguishable.
  // Valid from a minute ago for `valid_seconds` (a day by default).
  CertAndKey Issue(const std::string& common_name, bool server,
                   long valid_seconds = 24 * 3600) const;

 private:
  void* key_ = nullptr;   // EVP_PKEY*
  void* cert_ = nullptr;  // X509*
  std::string cert_pem_;
};

// Writes `text` to `path` atomically (temp file + rename), as kubelet updates secret volumes.
void WriteFileAtomically(const std::string& path, const std::string& text);

// SHA-256 of a PEM certificate's DER, hex ("" if it does not parse): compares what a client saw
// with what was issued.
std::string Fingerprint(const std::string& cert_pem);

}  // namespace kvgpu::testing
