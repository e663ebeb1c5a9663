// Throw-away PKI for TLS tests: a CA and leaf certificates (P-256, SAN 127.0.0.1/localhost)
// written as PEM files, so tests need no openssl binary and no checked-in keys.
#pragma once

#include <string>

namespace kvgpu::webhook::testing {

struct PemPair {
  std::string cert_pem;
  std::string key_pem;
};

class TestCa {
 public:
  explicit TestCa(const std::string& name);
  ~TestCa();
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  const std::string& cert_pem() const { return cert_pem_; }
  // A leaf signed by this CA; `serial` makes rotations distinguishable.
  PemPair Issue(const std::string& common_name, long serial, bool client) const;

 private:
  void* key_ = nullptr;   // EVP_PKEY*
  void* cert_ = nullptr;  // X509*
  std::string cert_pem_;
};

// Writes `text` to `path` atomically (temp file + rename), as kubelet's secret volumes do.
void WriteFileAtomically(const std::string& path, const std::string& text);

// SHA-256 of a PEM certificate's DER, hex; compares what a client saw with what was issued.
std::string Fingerprint(const std::string& cert_pem);

}  // namespace kvgpu::webhook::testing
