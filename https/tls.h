// Server-side TLS for the webhook and the scheduler extender: TLS 1.2 as the floor, optional
// client-certificate checks, and a certificate/key pair that can be replaced while connections are
// being served. The pair in use is picked per handshake (OpenSSL's certificate callback), so a
// rotation never touches a context another thread is using and never drops a connection.
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace kvgpu::https {

// One loaded certificate chain + key (+ optional client CA store), immutable once built.
class TlsCredentials {
 public:
  // Reads PEM files; fails unless the key belongs to the leaf certificate.
  static Result<std::shared_ptr<const TlsCredentials>> Load(const std::string& cert_file,
                                                            const std::string& key_file,
                                                            const std::string& client_ca_file);
  ~TlsCredentials();
  TlsCredentials(const TlsCredentials&) = delete;
  TlsCredentials& operator=(const TlsCredentials&) = delete;

  // Installs this pair (and CA store) on one connection.
  bool Apply(SSL* ssl) const;
  // The leaf's notAfter as text, for logs.
  std::string Describe() const;
  // The leaf's notAfter as seconds since the Unix epoch (the certificate-expiry metric).
  int64_t NotAfterUnixSeconds() const;

 private:
  TlsCredentials() = default;
  X509* leaf_ = nullptr;
  STACK_OF(X509) * chain_ = nullptr;
  EVP_PKEY* key_ = nullptr;
  X509_STORE* client_cas_ = nullptr;
};

class TlsCredentialStore {
 public:
  explicit TlsCredentialStore(std::shared_ptr<const TlsCredentials> initial)
      : current_(std::move(initial)) {}
  void Replace(std::shared_ptr<const TlsCredentials> next) {
    std::lock_guard lock(mutex_);
    current_ = std::move(next);
  }
  std::shared_ptr<const TlsCredentials> Current() const {
    std::lock_guard lock(mutex_);
    return current_;
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const TlsCredentials> current_;
};

// Sets TLS >= 1.2, the per-handshake credential callback and, when `verify_clients`, asks for a
// client certificate checked against the credentials' CA store: one that does not verify fails
// the handshake; a client with none gets through, and the server decides per path what it may
// reach (HttpRequest::client_certificate). `store` must outlive `ctx`.
bool ConfigureServerContext(SSL_CTX& ctx, TlsCredentialStore* store, bool verify_clients);

// The OpenSSL error queue as one line (and clears it).
std::string OpenSslErrors();

}  // namespace kvgpu::https
