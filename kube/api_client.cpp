#include "kube/api_client.h"

#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <charconv>

namespace kvgpu::kube {

namespace {

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in a PEM bundle, in a fresh store (an SSL_CTX takes ownership of one).
X509_STORE* StoreFromPem(const std::string& pem, int* count) {
  X509_STORE* store = X509_STORE_new();
  BioPtr bio = MemoryBio(pem);
  *count = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, cert);
    X509_free(cert);
    ++*count;
  }
  return store;
}

bool ParseServer(const std::string& server, bool* https, std::string* host, int* port,
                 std::string* prefix) {
  std::string rest;
  if (server.rfind("https://", 0) == 0) {
    *https = true;
    *port = 443;
    rest = server.substr(8);
  } else if (server.rfind("http://", 0) == 0) {
    *https = false;
    *port = 80;
    rest = server.substr(7);
  } else {
    return false;
  }
  const auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  *prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!prefix->empty() && prefix->back() == '/') prefix->pop_back();
  std::string port_text;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string::npos) return false;
    *host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return false;
      port_text = authority.substr(close + 2);
    }
  } else {
    const auto colon = authority.rfind(':');
    *host = authority.substr(0, colon);
    if (colon != std::string::npos) port_text = authority.substr(colon + 1);
  }
  if (host->empty()) return false;
  if (!port_text.empty()) {
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), *port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || *port <= 0 ||
        *port > 65535) {
      return false;
    }
  }
  return true;
}

Status HttpError(int status, const std::string& body, const std::string& what) {
  const std::string message =
      what + ": HTTP " + std::to_string(status) + (body.empty() ? "" : ": " + StatusMessage(body));
  return Status::Remote(status == 410 ? ErrorCode::kExpired : ErrorCode::kHttp, message, status);
}

// A GET whose body may hold at most `limit` bytes: a declared length past it is refused before a
// byte of the body is read, and a body that grows past it is broken off (`*too_large`).
httplib::Result BoundedGet(httplib::ClientImpl& client, const std::string& full, size_t limit,
                           std::string* body, bool* too_large) {
  *too_large = false;
  body->clear();
  return client.Get(
      full.c_str(),
      [&](const httplib::Response& response) {
        const std::string length = response.get_header_value("Content-Length");
        size_t declared = 0;
        const auto [end, ec] =
            std::from_chars(length.data(), length.data() + length.size(), declared);
        if (!length.empty() && (ec != std::errc() || declared > limit)) {
          *too_large = ec == std::errc() || ec == std::errc::result_out_of_range;
          return !*too_large;
        }
        return true;
      },
      [&](const char* data, size_t length) {
        if (body->size() + length > limit) {
          *too_large = true;
          return false;
        }
        body->append(data, length);
        return true;
      });
}

}  // namespace

std::string StatusMessage(const std::string& body) {
  const auto json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_object() && json.contains("message") && json["message"].is_string()) {
    return json["message"].get<std::string>();
  }
  constexpr size_t kMax = 200;
  return body.size() > kMax ? body.substr(0, kMax) + "..." : body;
}

std::string QueryEscape(std::string_view value) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    }
  }
  return out;
}

Result<std::unique_ptr<ApiClient>> ApiClient::Create(const Config& config, ClientOptions options) {
  std::unique_ptr<ApiClient> client(new ApiClient(config, options));
  if (!ParseServer(config.server, &client->https_, &client->host_, &client->port_,
                   &client->path_prefix_)) {
    return Status::Error(ErrorCode::kConfig, "server \"" + config.server + "\" is not a valid URL");
  }
  if (!config.ca_pem.empty()) {
    int count = 0;
    X509_STORE_free(StoreFromPem(config.ca_pem, &count));
    if (count == 0)
      return Status::Error(ErrorCode::kConfig, "the CA bundle holds no PEM certificate");
  }
  if (!config.client_cert_pem.empty()) {
    BioPtr cert_bio = MemoryBio(config.client_cert_pem);
    X509* cert = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr);
    BioPtr key_bio = MemoryBio(config.client_key_pem);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
    const bool good = cert != nullptr && key != nullptr && X509_check_private_key(cert, key) == 1;
    X509_free(cert);
    EVP_PKEY_free(key);
    if (!good) {
      return Status::Error(ErrorCode::kConfig,
                           "the client certificate or key is not valid PEM, or they do not match");
    }
  }
  auto token = client->token_.Get();
  if (!token.ok()) return token.status();
  return client;
}

ApiClient::ApiClient(const Config& config, ClientOptions options)
    : config_(config), options_(std::move(options)), token_(config) {}

ApiClient::~ApiClient() = default;

std::string ApiClient::FullPath(const std::string& path) const {
  return path_prefix_ + path;
}

std::shared_ptr<httplib::ClientImpl> ApiClient::Connect(std::chrono::milliseconds read_timeout,
                                                        bool keep_alive, Status* error) {
  std::shared_ptr<httplib::ClientImpl> client;
  if (https_) {
    std::shared_ptr<httplib::SSLClient> ssl;
    if (!config_.client_cert_pem.empty()) {
      BioPtr cert_bio = MemoryBio(config_.client_cert_pem);
      X509* cert = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr);
      BioPtr key_bio = MemoryBio(config_.client_key_pem);
      EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
      ssl = std::make_shared<httplib::SSLClient>(host_, port_, cert, key);
      X509_free(cert);
      EVP_PKEY_free(key);
    } else {
      ssl = std::make_shared<httplib::SSLClient>(host_, port_);
    }
    if (config_.insecure_skip_tls_verify) {
      ssl->enable_server_certificate_verification(false);
    } else {
      ssl->enable_server_certificate_verification(true);
      if (!config_.ca_pem.empty()) {
        int count = 0;
        ssl->set_ca_cert_store(StoreFromPem(config_.ca_pem, &count));
        // Without a CA path httplib adds the system's trust store to ours, and a certificate
        // from any public CA would pass. A directory lookup that finds nothing keeps it out.
        ssl->set_ca_cert_path("", "/nonexistent/kata-vgpu-no-system-cas");
      }
    }
    client = ssl;
  } else {
    client = std::make_shared<httplib::ClientImpl>(host_, port_);
  }
  client->set_connection_timeout(options_.connect_timeout);
  client->set_read_timeout(read_timeout);
  client->set_write_timeout(options_.request_timeout);
  client->set_keep_alive(keep_alive);
  client->set_tcp_nodelay(true);
  if (Status headers = SetHeaders(*client); !headers.ok()) {
    *error = headers;
    return nullptr;
  }
  return client;
}

Status ApiClient::SetHeaders(httplib::ClientImpl& client) {
  auto token = token_.Get();
  if (!token.ok()) return token.status();
  // client-go's Accept: JSON where the API has it, and a pod's log (text/plain) where it has not.
  httplib::Headers headers = {{"Accept", "application/json, */*"},
                              {"User-Agent", options_.user_agent}};
  if (!token->empty()) headers.emplace("Authorization", "Bearer " + token.value());
  client.set_default_headers(std::move(headers));
  return Status();
}

std::shared_ptr<httplib::ClientImpl> ApiClient::TakeConnection(bool* reused, Status* error) {
  std::shared_ptr<httplib::ClientImpl> client;
  {
    std::lock_guard lock(idle_mutex_);
    const auto now = std::chrono::steady_clock::now();
    while (!idle_.empty()) {
      IdleConnection idle = std::move(idle_.back());
      idle_.pop_back();
      // The newest is last: once one is too old, so are the rest (closed as they go).
      if (now - idle.since > options_.max_idle_time) {
        idle_.clear();
        break;
      }
      client = std::move(idle.client);
      break;
    }
  }
  *reused = client != nullptr;
  if (!client) return Connect(options_.request_timeout, /*keep_alive=*/true, error);
  if (Status headers = SetHeaders(*client); !headers.ok()) {
    *error = headers;
    return nullptr;
  }
  return client;
}

void ApiClient::ReturnConnection(std::shared_ptr<httplib::ClientImpl> client) {
  // A connection the server asked to close is closed by httplib itself; reusing it only costs a
  // reconnect.
  std::lock_guard lock(idle_mutex_);
  if (idle_.size() >= options_.max_idle_connections) return;
  idle_.push_back({std::move(client), std::chrono::steady_clock::now()});
}

Result<std::string> ApiClient::SendRaw(const std::string& method, const std::string& path,
                                       const nlohmann::json* body, const std::string& content_type,
                                       Canceller* cancel) {
  const std::string full = FullPath(path);
  const std::string what = method + " " + full;
  const std::string payload = body != nullptr ? body->dump() : std::string();
  Status error;
  bool reused = false;
  auto client = TakeConnection(&reused, &error);
  if (!client) return error;
  bool cancelled = false;
  const size_t limit = options_.max_response_bytes;
  const bool bounded = method == "GET" && limit > 0;
  bool too_large = false;
  std::string bounded_body;
  auto send = [&](const std::shared_ptr<httplib::ClientImpl>& connection) {
    ArmedCall armed(cancel, [connection] { connection->stop(); });
    httplib::Result res(nullptr, httplib::Error::Canceled);
    if (!armed.cancelled()) {
      if (bounded)
        res = BoundedGet(*connection, full, limit, &bounded_body, &too_large);
      else if (method == "GET")
        res = connection->Get(full.c_str());
      else if (method == "DELETE")
        res = connection->Delete(full.c_str());
      else if (method == "POST")
        res = connection->Post(full.c_str(), payload, content_type.c_str());
      else
        res = connection->Patch(full.c_str(), payload, content_type.c_str());
    }
    cancelled = armed.cancelled();
    return res;
  };
  httplib::Result res = send(client);
  // A reused connection the server closed while it sat idle fails before any answer. A GET is
  // safe to send again on a new one, and so is any request that could not be written whole: a
  // server acts on a request only once it has all of it (Go's transport likewise retries any
  // request on a reused connection that wrote nothing). A write that went out whole and got no
  // answer may have reached the server: its caller's own retry decides.
  const bool unsent = !res && res.error() == httplib::Error::Write;
  if (!res && !cancelled && reused && (method == "GET" || unsent)) {
    client = Connect(options_.request_timeout, /*keep_alive=*/true, &error);
    if (!client) return error;
    res = send(client);
  }
  if (cancelled) return Status::Error(ErrorCode::kCancelled, what + ": cancelled");
  if (too_large) {
    return Status::Error(ErrorCode::kDecode,
                         what + ": the answer is larger than " + std::to_string(limit) + " bytes");
  }
  if (!res) {
    return Status::Error(ErrorCode::kTransport, what + ": " + httplib::to_string(res.error()));
  }
  ReturnConnection(std::move(client));
  std::string answer = bounded ? std::move(bounded_body) : std::move(res->body);
  if (res->status < 200 || res->status > 299) return HttpError(res->status, answer, what);
  return answer;
}

Result<nlohmann::json> ApiClient::Send(const std::string& method, const std::string& path,
                                       const nlohmann::json* body, const std::string& content_type,
                                       Canceller* cancel) {
  auto text = SendRaw(method, path, body, content_type, cancel);
  if (!text.ok()) return text.status();
  auto json = nlohmann::json::parse(text.value(), nullptr, false);
  if (json.is_discarded()) {
    return Status::Error(ErrorCode::kDecode,
                         method + " " + FullPath(path) + ": the answer is not JSON");
  }
  return json;
}

Result<nlohmann::json> ApiClient::Get(const std::string& path, Canceller* cancel) {
  return Send("GET", path, nullptr, "", cancel);
}

Result<nlohmann::json> ApiClient::Post(const std::string& path, const nlohmann::json& body,
                                       Canceller* cancel) {
  return Send("POST", path, &body, "application/json", cancel);
}

Result<nlohmann::json> ApiClient::Patch(const std::string& path, const nlohmann::json& body,
                                        const std::string& content_type, Canceller* cancel) {
  return Send("PATCH", path, &body, content_type, cancel);
}

Result<nlohmann::json> ApiClient::Delete(const std::string& path, Canceller* cancel) {
  return Send("DELETE", path, nullptr, "", cancel);
}

Result<std::string> ApiClient::GetText(const std::string& path, Canceller* cancel) {
  return SendRaw("GET", path, nullptr, "", cancel);
}

Result<nlohmann::json> ApiTransport::Delete(const std::string& path, Canceller*) {
  return Status::Error(ErrorCode::kConfig, "DELETE " + path + ": not supported by this transport");
}

Result<std::string> ApiTransport::GetText(const std::string& path, Canceller*) {
  return Status::Error(ErrorCode::kConfig, "GET " + path + ": not supported by this transport");
}

Status ApiClient::Stream(const std::string& path, std::chrono::milliseconds idle_timeout,
                         const std::function<void()>& on_open,
                         const std::function<bool(std::string_view line)>& on_line,
                         Canceller* cancel) {
  Status error;
  auto client = Connect(idle_timeout, /*keep_alive=*/false, &error);
  if (!client) return error;
  const std::string full = FullPath(path);
  const std::string what = "GET " + full;
  ArmedCall armed(cancel, [client] { client->stop(); });
  if (armed.cancelled()) return Status::Error(ErrorCode::kCancelled, what + ": cancelled");
  int status = 0;
  std::string pending;     // a line not yet complete
  std::string error_body;  // the body of a non-200 answer, for the message
  bool stopped_by_caller = false;
  auto res = client->Get(
      full.c_str(),
      [&](const httplib::Response& response) {
        status = response.status;
        if (status == 200 && on_open) on_open();
        return true;
      },
      [&](const char* data, size_t length) {
        if (status != 200) {
          if (error_body.size() < 4096) error_body.append(data, length);
          return true;
        }
        pending.append(data, length);
        size_t start = 0;
        for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
          std::string_view line(pending.data() + start, nl - start);
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          if (line.empty()) continue;
          if (!on_line(line)) {
            stopped_by_caller = true;
            return false;
          }
        }
        pending.erase(0, start);
        return true;
      });
  if (stopped_by_caller) return Status();
  if (armed.cancelled()) return Status::Error(ErrorCode::kCancelled, what + ": cancelled");
  if (!res) {
    if (status != 0 && status != 200) return HttpError(status, error_body, what);
    return Status::Error(ErrorCode::kTransport, what + ": " + httplib::to_string(res.error()));
  }
  if (res->status != 200) return HttpError(res->status, error_body, what);
  // A last object without its newline still counts: the stream ended cleanly after it.
  if (!pending.empty() && !on_line(pending)) return Status();
  return Status();
}

}  // namespace kvgpu::kube
