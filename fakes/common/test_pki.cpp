#include "fakes/common/test_pki.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace kvgpu::testing {

namespace {

EVP_PKEY* NewKey() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) throw std::runtime_error("EC key generation failed");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) throw std::runtime_error("bad X509 extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

X509* NewCert(const std::string& cn, EVP_PKEY* key, long valid_seconds = 24 * 3600) {
  static std::atomic<long> serial{1};
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), valid_seconds);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return cert;
}

std::string CertPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(bio);
  return pem;
}

std::string KeyPem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(bio);
  return pem;
}

}  // namespace

TestAuthority::TestAuthority(const std::string& common_name) {
  EVP_PKEY* key = NewKey();
  X509* cert = NewCert(common_name, key);
  X509_set_issuer_name(cert, X509_get_subject_name(cert));
  AddExtension(cert, cert, NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExtension(cert, cert, NID_subject_key_identifier, "hash");
  X509_sign(cert, key, EVP_sha256());
  key_ = key;
  cert_ = cert;
  cert_pem_ = CertPem(cert);
}

TestAuthority::~TestAuthority() {
  X509_free(static_cast<X509*>(cert_));
  EVP_PKEY_free(static_cast<EVP_PKEY*>(key_));
}

CertAndKey TestAuthority::Issue(const std::string& common_name, bool server,
                                long valid_seconds) const {
  auto* ca_cert = static_cast<X509*>(cert_);
  EVP_PKEY* key = NewKey();
  X509* cert = NewCert(common_name, key, valid_seconds);
  X509_set_issuer_name(cert, X509_get_subject_name(ca_cert));
  AddExtension(cert, ca_cert, NID_basic_constraints, "critical,CA:FALSE");
  AddExtension(cert, ca_cert, NID_key_usage, "critical,digitalSignature,keyEncipherment");
  AddExtension(cert, ca_cert, NID_ext_key_usage, server ? "serverAuth" : "clientAuth");
  AddExtension(cert, ca_cert, NID_authority_key_identifier, "keyid:always");
  if (server) AddExtension(cert, ca_cert, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
  X509_sign(cert, static_cast<EVP_PKEY*>(key_), EVP_sha256());
  CertAndKey out{CertPem(cert), KeyPem(key)};
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("rename " + path);
}

std::string Fingerprint(const std::string& cert_pem) {
  BIO* bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) return "";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  X509_digest(cert, EVP_sha256(), digest, &size);
  X509_free(cert);
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < size; ++i) {
    std::snprintf(byte, sizeof(byte), "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

}  // namespace kvgpu::testing
