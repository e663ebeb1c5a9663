#include "https/tls_files.h"

namespace kvgpu::https {

TlsFiles::TlsFiles(std::string cert_file, std::string key_file, std::string client_ca_file,
                   std::shared_ptr<const TlsCredentials> initial)
    : cert_file_(std::move(cert_file)),
      key_file_(std::move(key_file)),
      client_ca_file_(std::move(client_ca_file)),
      store_(std::move(initial)) {}

Result<std::unique_ptr<TlsFiles>> TlsFiles::Load(std::string cert_file, std::string key_file,
                                                 std::string client_ca_file) {
  FileStamp cert = FileStamp::Of(cert_file);
  FileStamp key = FileStamp::Of(key_file);
  FileStamp ca = FileStamp::Of(client_ca_file);
  auto credentials = TlsCredentials::Load(cert_file, key_file, client_ca_file);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<TlsFiles> files(new TlsFiles(std::move(cert_file), std::move(key_file),
                                               std::move(client_ca_file), credentials.value()));
  files->cert_stamp_ = cert;
  files->key_stamp_ = key;
  files->ca_stamp_ = ca;
  return files;
}

TlsFiles::Change TlsFiles::CheckFiles(std::string* error) {
  std::lock_guard lock(mutex_);
  FileStamp cert = FileStamp::Of(cert_file_);
  FileStamp key = FileStamp::Of(key_file_);
  FileStamp ca = FileStamp::Of(client_ca_file_);
  const bool changed = !(cert == cert_stamp_) || !(key == key_stamp_) || !(ca == ca_stamp_);
  if (!pending_ && !changed) return Change::kNone;
  cert_stamp_ = cert;
  key_stamp_ = key;
  ca_stamp_ = ca;
  auto loaded = TlsCredentials::Load(cert_file_, key_file_, client_ca_file_);
  if (loaded.ok()) {
    store_.Replace(loaded.value());
    pending_ = false;
    return Change::kReloaded;
  }
  pending_ = true;
  // Said once per change, not on every retry of the same files.
  if (!changed) return Change::kNone;
  if (error != nullptr) *error = loaded.status().message();
  return Change::kFailed;
}

SSL_CTX* TlsFiles::NewServerContext(std::string* error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr || !ConfigureServerContext(*ctx, &store_, !client_ca_file_.empty())) {
    SSL_CTX_free(ctx);
    if (error != nullptr) *error = "cannot set up TLS: " + OpenSslErrors();
    return nullptr;
  }
  return ctx;
}

}  // namespace kvgpu::https
