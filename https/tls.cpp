#include "https/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>

namespace kvgpu::https {
namespace {

struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using File = std::unique_ptr<FILE, FileCloser>;

int CertificateCallback(SSL* ssl, void* arg) {
  auto* store = static_cast<TlsCredentialStore*>(arg);
  auto credentials = store->Current();
  return credentials && credentials->Apply(ssl) ? 1 : 0;
}

}  // namespace

std::string OpenSslErrors() {
  std::string out;
  char buffer[256];
  while (unsigned long code = ERR_get_error()) {
    ERR_error_string_n(code, buffer, sizeof(buffer));
    if (!out.empty()) out += "; ";
    out += buffer;
  }
  return out.empty() ? "no OpenSSL error recorded" : out;
}

Result<std::shared_ptr<const TlsCredentials>> TlsCredentials::Load(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca_file) {
  std::shared_ptr<TlsCredentials> out(new TlsCredentials());
  ERR_clear_error();
  File cert(std::fopen(cert_file.c_str(), "r"));
  if (!cert) return Status::Error(ErrorCode::kInvalid, "cannot open TLS certificate " + cert_file);
  out->leaf_ = PEM_read_X509(cert.get(), nullptr, nullptr, nullptr);
  if (out->leaf_ == nullptr)
    return Status::Error(ErrorCode::kInvalid,
                         "no PEM certificate in " + cert_file + ": " + OpenSslErrors());
  out->chain_ = sk_X509_new_null();
  while (X509* extra = PEM_read_X509(cert.get(), nullptr, nullptr, nullptr))
    sk_X509_push(out->chain_, extra);
  ERR_clear_error();  // the loop ends on "no start line", which is no error

  File key(std::fopen(key_file.c_str(), "r"));
  if (!key) return Status::Error(ErrorCode::kInvalid, "cannot open TLS key " + key_file);
  out->key_ = PEM_read_PrivateKey(key.get(), nullptr, nullptr, nullptr);
  if (out->key_ == nullptr)
    return Status::Error(ErrorCode::kInvalid,
                         "no PEM private key in " + key_file + ": " + OpenSslErrors());
  if (X509_check_private_key(out->leaf_, out->key_) != 1)
    return Status::Error(ErrorCode::kInvalid, "TLS key " + key_file +
                                                  " does not belong to certificate " + cert_file +
                                                  " (a rotation may be half written)");

  if (!client_ca_file.empty()) {
    out->client_cas_ = X509_STORE_new();
    if (X509_STORE_load_file(out->client_cas_, client_ca_file.c_str()) != 1)
      return Status::Error(ErrorCode::kInvalid, "cannot load client CA bundle " + client_ca_file +
                                                    ": " + OpenSslErrors());
  }
  return std::shared_ptr<const TlsCredentials>(std::move(out));
}

TlsCredentials::~TlsCredentials() {
  X509_free(leaf_);
  if (chain_ != nullptr) sk_X509_pop_free(chain_, X509_free);
  EVP_PKEY_free(key_);
  X509_STORE_free(client_cas_);
}

bool TlsCredentials::Apply(SSL* ssl) const {
  // Each call takes its own references, so this object may be released mid-connection.
  if (SSL_use_certificate(ssl, leaf_) != 1 || SSL_use_PrivateKey(ssl, key_) != 1 ||
      SSL_set1_chain(ssl, chain_) != 1)
    return false;
  if (client_cas_ != nullptr && SSL_set1_verify_cert_store(ssl, client_cas_) != 1) return false;
  return true;
}

std::string TlsCredentials::Describe() const {
  std::string out = "certificate valid until ";
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return out + "?";
  ASN1_TIME_print(bio, X509_get0_notAfter(leaf_));
  char* data = nullptr;
  long length = BIO_get_mem_data(bio, &data);
  if (length > 0) out.append(data, static_cast<size_t>(length));
  BIO_free(bio);
  return out;
}

int64_t TlsCredentials::NotAfterUnixSeconds() const {
  // ASN1_TIME_diff from the epoch: OpenSSL's own calendar arithmetic, no time-zone handling.
  ASN1_TIME* epoch = ASN1_TIME_set(nullptr, 0);
  int days = 0;
  int seconds = 0;
  bool ok = epoch != nullptr && ASN1_TIME_diff(&days, &seconds, epoch, X509_get0_notAfter(leaf_));
  ASN1_TIME_free(epoch);
  return ok ? int64_t{days} * 86400 + seconds : 0;
}

bool ConfigureServerContext(SSL_CTX& ctx, TlsCredentialStore* store, bool verify_clients) {
  if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1) return false;
  SSL_CTX_set_options(
      &ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // TLS 1.2 suites: forward-secret AEAD only (TLS 1.3's defaults are all of that kind already).
  if (SSL_CTX_set_cipher_list(&ctx, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1) return false;
  SSL_CTX_set_cert_cb(&ctx, CertificateCallback, store);
  // No session resumption, TLS 1.2 or 1.3, cache or ticket: a resumed session skips the client
  // certificate check, so after the client CA (or the pair) is replaced a client holding an old
  // session would still get in, for the session's lifetime. The API server keeps its connections
  // alive, so each full handshake is paid once per connection, not per review.
  SSL_CTX_set_session_cache_mode(&ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_TICKET);
  if (SSL_CTX_set_num_tickets(&ctx, 0) != 1) return false;
  static constexpr unsigned char kSessionContext[] = "kvgpu-webhook";
  if (SSL_CTX_set_session_id_context(&ctx, kSessionContext, sizeof(kSessionContext) - 1) != 1)
    return false;
  if (verify_clients) {
    // A certificate that does not verify fails the handshake; none at all is let through, and
    // such a connection gets only /healthz and /readyz (kubelet's HTTPS probes present none).
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_NONE, nullptr);
  }
  return true;
}

}  // namespace kvgpu::https
