// The API server over HTTPS: bearer token (re-read as it rotates) or client certificate, the
// server checked against the configured CA. JSON in, JSON out; watches stream one JSON object
// per line. Plain requests reuse idle keep-alive connections (a few, each used by one request at a
// time), so a GET costs no TLS handshake; each watch has a connection of its own. A Canceller
// breaks one request in flight, which is how a watch blocked in a read is stopped.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/canceller.h"
#include "common/status.h"
#include "kube/config.h"

namespace httplib {
class ClientImpl;
}  // namespace httplib

namespace kvgpu::kube {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{30000};  // per read/write for plain requests
  std::string user_agent = "kata-vgpu";
  // Idle keep-alive connections kept for plain requests, and how long one may stay idle: past
  // that it is closed rather than reused (servers close idle connections too, and a request
  // written into one they just closed fails).
  size_t max_idle_connections = 4;
  std::chrono::milliseconds max_idle_time{30000};
  // The most body bytes a plain request's answer may have (0: no bound). Past it the request is
  // broken off with kDecode: a client that reads objects others write (the webhook's claim
  // lookups) must not hold whatever size the API server hands it.
  size_t max_response_bytes = 0;
};

using kvgpu::Canceller;  // common/canceller.h

// What the watch loop and the event recorder need; tests can stand in without HTTP.
class ApiTransport {
 public:
  virtual ~ApiTransport() = default;
  // GET/POST/PATCH a JSON document. A non-2xx answer is an Error carrying the status and the
  // message of the API's Status object; 410 is ErrorCode::kExpired.
  virtual Result<nlohmann::json> Get(const std::string& path, Canceller* cancel = nullptr) = 0;
  virtual Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body,
                                      Canceller* cancel = nullptr) = 0;
  // `content_type` is the patch flavour: application/merge-patch+json,
  // application/strategic-merge-patch+json or application/json-patch+json. `cancel` breaks it
  // (a shutdown must not wait out a hung API server).
  virtual Result<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body,
                                       const std::string& content_type,
                                       Canceller* cancel = nullptr) = 0;
  // DELETE, and GET of a body that is not JSON (a pod's log). Not pure, so the transports that
  // stand in for the API server in tests of watches and patches need not grow them: those answer
  // kConfig "not supported".
  virtual Result<nlohmann::json> Delete(const std::string& path, Canceller* cancel = nullptr);
  virtual Result<std::string> GetText(const std::string& path, Canceller* cancel = nullptr);
  // GETs `path`; `on_open` runs once the server accepted (200), then `on_line` gets each
  // non-empty line of the body as it arrives, until the server ends the body (ok), `on_line`
  // returns false (ok), the stream breaks or stays silent longer than `idle_timeout`
  // (kTransport), or `cancel` fires (kCancelled).
  virtual Status Stream(const std::string& path, std::chrono::milliseconds idle_timeout,
                        const std::function<void()>& on_open,
                        const std::function<bool(std::string_view line)>& on_line,
                        Canceller* cancel) = 0;
};

class ApiClient : public ApiTransport {
 public:
  // Checks what can be checked before the first request (URL, PEM blocks, token readable).
  static Result<std::unique_ptr<ApiClient>> Create(const Config& config,
                                                   ClientOptions options = {});
  ~ApiClient() override;

  Result<nlohmann::json> Get(const std::string& path, Canceller* cancel = nullptr) override;
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body,
                              Canceller* cancel = nullptr) override;
  Result<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body,
                               const std::string& content_type,
                               Canceller* cancel = nullptr) override;
  Result<nlohmann::json> Delete(const std::string& path, Canceller* cancel = nullptr) override;
  Result<std::string> GetText(const std::string& path, Canceller* cancel = nullptr) override;
  Status Stream(const std::string& path, std::chrono::milliseconds idle_timeout,
                const std::function<void()>& on_open,
                const std::function<bool(std::string_view line)>& on_line,
                Canceller* cancel) override;

 private:
  ApiClient(const Config& config, ClientOptions options);

  // A fresh connection (keep-alive or not) with the current token; nullptr (with `error`) when
  // none can be made.
  std::shared_ptr<httplib::ClientImpl> Connect(std::chrono::milliseconds read_timeout,
                                               bool keep_alive, Status* error);
  // The current token's headers onto `client` (a pooled connection may predate a rotation).
  Status SetHeaders(httplib::ClientImpl& client);
  // An idle connection (`*reused` true) or a new one; back into the pool after a clean answer.
  std::shared_ptr<httplib::ClientImpl> TakeConnection(bool* reused, Status* error);
  void ReturnConnection(std::shared_ptr<httplib::ClientImpl> client);
  Result<nlohmann::json> Send(const std::string& method, const std::string& path,
                              const nlohmann::json* body, const std::string& content_type,
                              Canceller* cancel);
  // The same, the answer's body as it came (2xx only).
  Result<std::string> SendRaw(const std::string& method, const std::string& path,
                              const nlohmann::json* body, const std::string& content_type,
                              Canceller* cancel);
  std::string FullPath(const std::string& path) const;

  Config config_;
  ClientOptions options_;
  TokenSource token_;
  bool https_ = true;
  std::string host_;
  int port_ = 443;
  std::string path_prefix_;

  struct IdleConnection {
    std::shared_ptr<httplib::ClientImpl> client;
    std::chrono::steady_clock::time_point since;
  };
  std::mutex idle_mutex_;
  std::vector<IdleConnection> idle_;  // newest last
};

// "The pod X/Y (uid)" and friends use this to turn an API Status body into a message.
std::string StatusMessage(const std::string& body);

// RFC 3339 in UTC with seconds, as the API writes timestamps: "2025-01-02T03:04:05Z".
std::string Rfc3339(std::chrono::system_clock::time_point when);

// Percent-encodes a query parameter value (RFC 3986 unreserved characters pass).
std::string QueryEscape(std::string_view value);

}  // namespace kvgpu::kube
