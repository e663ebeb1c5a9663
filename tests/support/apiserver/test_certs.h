// Certificates made at test time (P-256, one day): a CA and leaves it signs, with
// subjectAltName 127.0.0.1 and localhost, so TLS tests need no checked-in keys.
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
  // `server` sets extendedKeyUsage serverAuth, otherwise clientAuth.
  CertAndKey Issue(const std::string& common_name, bool server) const;

 private:
  void* key_ = nullptr;   // EVP_PKEY*
  void* cert_ = nullptr;  // X509*
  std::string cert_pem_;
};

}  // namespace kvgpu::testing
