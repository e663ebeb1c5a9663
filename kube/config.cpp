#include "kube/config.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "common/base64.h"

namespace kvgpu::kube {

namespace {

Result<std::string> ReadWholeFile(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::Error(ErrorCode::kConfig, "cannot read " + what + " " + path.string());
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return Status::Error(ErrorCode::kConfig, "error reading " + what + " " + path.string());
  return text.str();
}

std::string TrimSpace(std::string text) {
  const char* space = " \t\r\n";
  const auto first = text.find_first_not_of(space);
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(space);
  return text.substr(first, last - first + 1);
}

// A named entry of one of the kubeconfig lists (clusters, contexts, users); empty when absent.
std::optional<YAML::Node> FindNamed(const YAML::Node& list, const std::string& name,
                                    const char* field) {
  if (!list || !list.IsSequence()) return std::nullopt;
  for (const auto& entry : list) {
    if (entry["name"] && entry["name"].as<std::string>() == name && entry[field] &&
        entry[field].IsMap()) {
      return entry[field];
    }
  }
  return std::nullopt;
}

std::string YamlString(const YAML::Node& node, const char* key) {
  if (!node || !node[key] || node[key].IsNull()) return "";
  return node[key].as<std::string>();
}

// Either the inline base64 `<key>-data` or the file `<key>`; both set is an error, as in kubectl.
Result<std::string> DataOrFile(const YAML::Node& node, const std::string& key,
                               const std::filesystem::path& base_dir, const std::string& where) {
  const std::string data = YamlString(node, (key + "-data").c_str());
  const std::string file = YamlString(node, key.c_str());
  if (!data.empty() && !file.empty()) {
    return Status::Error(ErrorCode::kConfig,
                         where + ": both " + key + " and " + key + "-data are set; keep one");
  }
  if (!data.empty()) {
    auto decoded = DecodeBase64(data);
    if (!decoded.ok()) {
      return Status::Error(ErrorCode::kConfig,
                           where + ": " + key + "-data: " + decoded.status().message());
    }
    return decoded;
  }
  if (!file.empty()) {
    std::filesystem::path path = file;
    if (path.is_relative()) path = base_dir / path;
    return ReadWholeFile(path, where + " " + key);
  }
  return std::string();
}

}  // namespace

InClusterSource InClusterFromEnvironment() {
  InClusterSource source;
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST")) source.host = host;
  if (const char* port = std::getenv("KUBERNETES_SERVICE_PORT")) source.port = port;
  return source;
}

Result<Config> LoadInCluster(const InClusterSource& source) {
  if (source.host.empty() || source.port.empty()) {
    return Status::Error(
        ErrorCode::kConfig,
        "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
        "set (or pass --kubeconfig)");
  }
  Config config;
  // An IPv6 service address needs brackets in a URL.
  const bool ipv6 = source.host.find(':') != std::string::npos;
  config.server = "https://" + (ipv6 ? "[" + source.host + "]" : source.host) + ":" + source.port;
  auto ca = ReadWholeFile(source.secrets_dir / "ca.crt", "service account CA");
  if (!ca.ok()) return ca.status();
  config.ca_pem = std::move(ca.value());
  config.token_file = source.secrets_dir / "token";
  auto token = ReadWholeFile(config.token_file, "service account token");
  if (!token.ok()) return token.status();
  if (TrimSpace(token.value()).empty()) {
    return Status::Error(ErrorCode::kConfig,
                         "service account token " + config.token_file.string() + " is empty");
  }
  // The namespace file is optional in practice (automount can project only the token).
  auto ns = ReadWholeFile(source.secrets_dir / "namespace", "namespace");
  if (ns.ok()) config.namespace_name = TrimSpace(ns.value());
  return config;
}

Result<Config> LoadKubeconfig(const std::filesystem::path& path, const std::string& context) {
  auto text = ReadWholeFile(path, "kubeconfig");
  if (!text.ok()) return text.status();
  auto config = ParseKubeconfig(text.value(), path.parent_path(), context);
  if (!config.ok()) {
    return Status::Error(ErrorCode::kConfig, path.string() + ": " + config.status().message());
  }
  return config;
}

namespace {

// The credentials of the context's user: a token (or its file) or a client certificate and key;
// exec and auth-provider plugins are refused.
Status ReadUser(const YAML::Node& root, const std::string& user_name,
                const std::filesystem::path& base_dir, Config& config) {
  const auto found_user = FindNamed(root["users"], user_name, "user");
  if (!found_user) return Status::Error(ErrorCode::kConfig, "user \"" + user_name + "\" not found");
  const YAML::Node& user = *found_user;
  const std::string where = "user \"" + user_name + "\"";
  if (user["exec"] || user["auth-provider"]) {
    return Status::Error(ErrorCode::kConfig,
                         where +
                             ": exec and auth-provider credentials are not supported; use a "
                             "token or a client certificate");
  }
  auto cert = DataOrFile(user, "client-certificate", base_dir, where);
  if (!cert.ok()) return cert.status();
  auto key = DataOrFile(user, "client-key", base_dir, where);
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty()) {
    return Status::Error(ErrorCode::kConfig,
                         where + ": a client certificate needs its key and the other way round");
  }
  config.client_cert_pem = std::move(cert.value());
  config.client_key_pem = std::move(key.value());
  config.token = YamlString(user, "token");
  const std::string token_file = YamlString(user, "tokenFile");
  if (!token_file.empty()) {
    config.token_file = token_file;
    if (config.token_file.is_relative()) config.token_file = base_dir / config.token_file;
  }
  return Status::Ok();
}

}  // namespace

Result<Config> ParseKubeconfig(const std::string& text, const std::filesystem::path& base_dir,
                               const std::string& context) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::Error(ErrorCode::kConfig, std::string("not valid YAML: ") + e.what());
  }
  if (!root.IsMap()) return Status::Error(ErrorCode::kConfig, "kubeconfig is not a YAML mapping");
  try {
    const std::string context_name =
        context.empty() ? YamlString(root, "current-context") : context;
    if (context_name.empty()) {
      return Status::Error(ErrorCode::kConfig, "no current-context set and no context asked for");
    }
    const auto found_ctx = FindNamed(root["contexts"], context_name, "context");
    if (!found_ctx)
      return Status::Error(ErrorCode::kConfig, "context \"" + context_name + "\" not found");
    const YAML::Node& ctx = *found_ctx;
    const std::string cluster_name = YamlString(ctx, "cluster");
    const std::string user_name = YamlString(ctx, "user");
    const auto found_cluster = FindNamed(root["clusters"], cluster_name, "cluster");
    if (!found_cluster) {
      return Status::Error(ErrorCode::kConfig, "cluster \"" + cluster_name + "\" of context \"" +
                                                   context_name + "\" not found");
    }
    const YAML::Node& cluster = *found_cluster;
    Config config;
    config.server = YamlString(cluster, "server");
    if (config.server.empty()) {
      return Status::Error(ErrorCode::kConfig, "cluster \"" + cluster_name + "\" has no server");
    }
    if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0) {
      return Status::Error(ErrorCode::kConfig, "cluster \"" + cluster_name + "\": server \"" +
                                                   config.server + "\" is not an http(s) URL");
    }
    if (!YamlString(cluster, "tls-server-name").empty()) {
      return Status::Error(ErrorCode::kConfig,
                           "cluster \"" + cluster_name + "\": tls-server-name is not supported");
    }
    if (cluster["insecure-skip-tls-verify"]) {
      config.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"].as<bool>();
    }
    auto ca =
        DataOrFile(cluster, "certificate-authority", base_dir, "cluster \"" + cluster_name + "\"");
    if (!ca.ok()) return ca.status();
    config.ca_pem = std::move(ca.value());
    config.namespace_name = YamlString(ctx, "namespace");

    if (!user_name.empty()) {
      Status user = ReadUser(root, user_name, base_dir, config);
      if (!user.ok()) return user;
    }
    return config;
  } catch (const YAML::Exception& e) {
    return Status::Error(ErrorCode::kConfig,
                         std::string("unexpected kubeconfig shape: ") + e.what());
  }
}

TokenSource::TokenSource(const Config& config)
    : fixed_(TrimSpace(config.token)), file_(config.token_file) {}

Result<std::string> TokenSource::Get() {
  if (file_.empty()) return fixed_;
  std::lock_guard lock(mutex_);
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(file_, ec);
  const auto size = ec ? 0 : std::filesystem::file_size(file_, ec);
  if (!ec && loaded_ && mtime == mtime_ && size == size_) return cached_;
  auto text = ReadWholeFile(file_, "token");
  std::string token = text.ok() ? TrimSpace(text.value()) : "";
  if (ec || !text.ok() || token.empty()) {
    if (loaded_) {
      spdlog::warn("kube: cannot re-read token {}; keeping the previous one", file_.string());
      return cached_;
    }
    return Status::Error(ErrorCode::kConfig, "cannot read a token from " + file_.string());
  }
  cached_ = std::move(token);
  mtime_ = mtime;
  size_ = size;
  loaded_ = true;
  return cached_;
}

Result<std::string> DecodeBase64(const std::string& text) {
  Base64Decoded decoded = Base64Decode(text);
  if (!decoded.ok()) return Status::Error(ErrorCode::kDecode, decoded.error);
  return std::move(decoded.bytes);
}

}  // namespace kvgpu::kube
