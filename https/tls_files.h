// A TLS pair (and optional client CA) read from files that kubelet or cert-manager replace while
// the server runs: loaded at start, then looked at on every CheckFiles(); a change is loaded into
// the credential store that handshakes read, and a change that does not load (half-written
// files, a key that is not the certificate's) keeps the previous pair and is retried until the
// files make a pair.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/host_port.h"
#include "common/status.h"
#include "https/file_stamp.h"
#include "https/tls.h"

namespace kvgpu::https {

class TlsFiles {
 public:
  enum class Change { kNone, kReloaded, kFailed };

  static Result<std::unique_ptr<TlsFiles>> Load(std::string cert_file, std::string key_file,
                                                std::string client_ca_file);

  TlsCredentialStore& store() { return store_; }
  const TlsCredentialStore& store() const { return store_; }
  // Looks at the files; kFailed (with `error`) only when a change seen now does not load.
  Change CheckFiles(std::string* error = nullptr);

  // An SSL_CTX (TLS 1.2 floor, this store's pair per handshake, client certificates checked when a
  // CA file was given); nullptr with `error` on failure.
  SSL_CTX* NewServerContext(std::string* error);

 private:
  TlsFiles(std::string cert_file, std::string key_file, std::string client_ca_file,
           std::shared_ptr<const TlsCredentials> initial);

  std::string cert_file_, key_file_, client_ca_file_;
  TlsCredentialStore store_;
  std::mutex mutex_;
  FileStamp cert_stamp_, key_stamp_, ca_stamp_;
  bool pending_ = false;  // a change was seen but could not be loaded yet
};

}  // namespace kvgpu::https
