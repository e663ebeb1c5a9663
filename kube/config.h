// Where the API server is and how to prove who we are: from the pod's service account (in a
// cluster) or from a kubeconfig file (outside one, --kubeconfig).
#pragma once

#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvgpu::kube {

struct Config {
  std::string server;  // "https://host:port", optionally with a path prefix
  std::string ca_pem;  // trust only these CAs; empty: the system's trust store
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string token;                 // a fixed bearer token
  std::filesystem::path token_file;  // a bearer token that rotates on disk (wins over `token`)
  bool insecure_skip_tls_verify = false;
  std::string namespace_name;  // the namespace we run in, when known
};

// The service account as kubelet mounts it into the pod.
struct InClusterSource {
  std::string host;  // $KUBERNETES_SERVICE_HOST
  std::string port;  // $KUBERNETES_SERVICE_PORT
  std::filesystem::path secrets_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
};

InClusterSource InClusterFromEnvironment();

// Reads ca.crt, namespace and checks the token is readable; the token itself is re-read by
// TokenSource as kubelet rotates it.
Result<Config> LoadInCluster(const InClusterSource& source);

// The kubeconfig's current context (or `context` when not empty). Relative file paths are taken
// relative to the kubeconfig's own directory, as kubectl does. exec and auth-provider plugins are
// not supported and say so.
Result<Config> LoadKubeconfig(const std::filesystem::path& path, const std::string& context = "");
// The same from text already read; `base_dir` resolves relative paths.
Result<Config> ParseKubeconfig(const std::string& text, const std::filesystem::path& base_dir,
                               const std::string& context = "");

// The bearer token to send with each request. A token file is re-read whenever its mtime or size
// changes (projected service account tokens rotate hourly); if a re-read fails, the last good
// token is kept, because an expired token answered with 401 is better than no request at all.
class TokenSource {
 public:
  explicit TokenSource(const Config& config);
  // Empty when the config has no token (client certificates, or none at all).
  Result<std::string> Get();

 private:
  std::string fixed_;
  std::filesystem::path file_;
  std::mutex mutex_;
  std::string cached_;
  std::filesystem::file_time_type mtime_{};
  std::uintmax_t size_ = 0;
  bool loaded_ = false;
};

// common/base64.h with this library's error type: kubeconfig *-data fields, the checkpoint.
Result<std::string> DecodeBase64(const std::string& text);

}  // namespace kvgpu::kube
