// The HTTPS server's private core (http_server.h), shared by its two halves: the listener
// (http_server.cpp: accept, the connection cap, the budget's evictions, start and stop) and one
// connection's state machine (http_connection.cpp: handshake, head, body, handler, answer).
// Private to https/.
#pragma once

#include <openssl/ssl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "https/asio_names.h"
#include "https/http_server_types.h"

namespace kvgpu::https {

using Clock = std::chrono::steady_clock;
using Parser = http::request_parser<http::string_body>;

// The request framing (http_connection.cpp), which the fuzzer's entry point (http_server.cpp)
// applies too.
int StatusFor(const beast::error_code& ec);
void ConfigureParser(Parser& parser, size_t max_header, size_t max_body);
int RefuseHead(const Parser& parser, size_t max_body);

// What one connection holds against the budget. Guarded by Budget's mutex.
struct Account {
  size_t body = 0;   // body bytes received and held
  size_t other = 0;  // a handler's reserve, then the answer being written
  bool large = false;
  bool closed = false;  // evicted or gone: holds nothing and may take nothing more
};

// The server-wide budget of request memory (http_server.h).
class Budget {
 public:
  Budget(size_t total, size_t large) : total_(total), large_(large) {}

  // Sets what `account` holds; false, changing nothing, when that would pass a limit (unless
  // `force`: shrinking, or an answer already built within its reserve) or the account is closed.
  bool Set(Account& account, size_t body, size_t other, bool force) {
    std::lock_guard lock(mutex_);
    if (account.closed) return false;
    const size_t held = held_ - account.body - account.other + body + other;
    const size_t large = account.large ? large_held_ - account.body + body : large_held_;
    const bool grows = body + other > account.body + account.other || large > large_held_;
    if (grows && !force && (held > total_ || large > large_)) return false;
    held_ = held;
    large_held_ = large;
    account.body = body;
    account.other = other;
    return true;
  }
  // Releases what `account` holds and refuses it anything more, in one step: the connection's
  // own strand may be charging it at the same moment.
  void Close(Account& account) {
    std::lock_guard lock(mutex_);
    held_ -= account.body + account.other;
    if (account.large) large_held_ -= account.body;
    account.body = 0;
    account.other = 0;
    account.closed = true;
  }
  void MarkLarge(Account& account, bool large) {
    std::lock_guard lock(mutex_);
    if (account.body == 0) account.large = large;
  }
  size_t held() const {
    std::lock_guard lock(mutex_);
    return held_;
  }

 private:
  const size_t total_;
  const size_t large_;
  mutable std::mutex mutex_;
  size_t held_ = 0;
  size_t large_held_ = 0;
};

// Where a connection is.
enum class Phase { kSilent, kIdle, kHandshake, kHead, kBody, kWriting, kHandling };

// How long after its accept a connection is in its "first moments": a client that speaks at once
// (kubelet's probe, the API server) has sent its ClientHello and its request line by then, even on
// two loaded cores (the slowest probe measured under attack: 0.17 s); a connection that is silent
// through them is not such a client. Short, because a burst arriving faster than the cap over this
// time (512 a second) leaves only connections in their first moments to choose from.
inline constexpr auto kFirstMoments = std::chrono::milliseconds(500);

inline size_t LargeLimit(const HttpsServerOptions& options) {
  return options.max_large_body_bytes != 0 ? options.max_large_body_bytes
                                           : options.max_buffered_body_bytes / 4 * 3;
}

// The server's state, held by HttpsServer and by every connection (which outlive a Stop until
// their handlers have run).
struct HttpsServerImpl : std::enable_shared_from_this<HttpsServerImpl> {
  class Session;

  HttpsServerImpl(SSL_CTX* ctx, std::function<HttpResponse(const HttpRequest&)> on_request,
                  HttpsServerOptions with)
      : ssl(ctx),
        handler(std::move(on_request)),
        options(std::move(with)),
        budget(options.max_buffered_body_bytes, LargeLimit(options)),
        io(static_cast<int>(std::max<size_t>(1, options.worker_threads))),
        acceptor(asio::make_strand(io)),
        accept_retry(acceptor.get_executor()) {}
  ~HttpsServerImpl() {
    if (spare_descriptor >= 0) ::close(spare_descriptor);
  }

  void Accept();
  void Admit(tcp::socket socket);
  void OnNoDescriptors(const beast::error_code& ec);
  // Closes the connection that `pick` prefers among the open ones, taking it off the count and
  // the budget at once; false when there is none to take.
  bool Evict(const std::function<bool(const Session&, const Session*)>& pick,
             const char* why = nullptr);
  // Whether `s` is to be shed before `best` (the one rule, http_server.cpp); false: never `s`.
  // `now` is read once per choice: the choice looks at every open connection, at every accept.
  static bool ShedFirst(const Session& s, const Session* best, Clock::time_point now);
  bool EvictForConnection();
  bool EvictBeforeHandshake();
  // Whether a dropped connection has not closed yet (its descriptor is still held).
  bool AnyClosing();
  // Makes room in the budget for `self` by evicting an older, slow body (http_server.h).
  bool EvictForBody(const Session& self);
  size_t HandlerBytes(size_t body) const {
    return options.handler_bytes ? options.handler_bytes(body) : 2 * body + 64 * 1024;
  }

  asio::ssl::context ssl;
  std::function<HttpResponse(const HttpRequest&)> handler;
  HttpsServerOptions options;
  Budget budget;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  std::atomic<bool> stopping{false};
  std::atomic<bool> running{false};
  std::atomic<size_t> open{0};
  Clock::time_point last_accept_warning{};
  // Given up at EMFILE so that one accept can succeed (acceptor's strand only).
  int spare_descriptor = -1;

  std::mutex sessions_mutex;
  std::list<std::weak_ptr<Session>> sessions;
};

// One connection (http_connection.cpp): its phase, what it holds of the budget, and what the
// connection cap and the evictions judge it by.
class HttpsServerImpl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<HttpsServerImpl> server, tcp::socket socket);
  ~Session();

  // Until its first byte the connection is silent (first to go at the cap); the handshake and
  // every request after it must then complete within request_timeout.
  void Start();
  // Takes this connection off the count and the budget now, and closes it on its strand; false
  // when that was done already (a connection is never chosen twice).
  // `why`, when given, is answered (503) to a connection evicted mid-body, so the client learns
  // why its request failed; its write holds no budget and closes the connection when done.
  bool Retire(const char* why = nullptr);
  // Closes from any thread (eviction, Stop).
  void Close();

  bool retired() const { return retired_.load(); }
  Phase phase() const { return phase_.load(); }
  Clock::time_point since() const { return Clock::time_point(Clock::duration(since_.load())); }
  size_t body_bytes() const { return body_bytes_.load(); }
  Clock::time_point progress() const {
    return Clock::time_point(Clock::duration(progress_.load()));
  }
  bool large() const { return large_.load(); }
  // The connection cap sheds it only when nothing else is left: its handshake is under way, or it
  // is a connection's first request whose line came in the connection's first moments (until
  // its answer is written). A client that speaks at once is this until it has its answer.
  bool speaking(Clock::time_point now) const {
    switch (phase_.load()) {
      case Phase::kHandshake:
        return true;
      case Phase::kIdle:  // between its handshake and its first request line, in its first moments
        return !answered_.load() && fresh(now);
      default:
        return prompt_.load();
    }
  }
  bool fresh(Clock::time_point now) const { return now - accepted_ < kFirstMoments; }

 private:
  void Handshake();
  void Expire(std::chrono::seconds after) { beast::get_lowest_layer(stream_).expires_after(after); }
  // Every change of phase is news from the connection (or the server's answer to it), so it also
  // restarts the silence the connection cap sheds by (progress_).
  void Mark(Phase phase);
  // The current request's first byte came: `prompt_` if it is the connection's first request and
  // came in its first moments.
  void BeginRequest();
  // The head is read piecewise: waiting for its first byte is idleness (idle_timeout); once a
  // byte has come, the whole request must be done within request_timeout, however it trickles.
  void ReadHead();
  void ReadHeadSome();
  void OnHead(const beast::error_code& ec);
  std::string TooLarge() const;
  void ReadBody();
  // Charges the body bytes received so far (in the parser's body and the read buffer), making
  // room by evicting an older slow body when the budget is full.
  bool ChargeBody();
  void OnRequest();
  bool Reserve(size_t body, size_t handler);
  // The answer goes out as one buffer (SerializeResponse): one SSL_write, one TLS record for an
  // ordinary review's answer.
  void Write(HttpResponse answer, bool keep_alive);
  // Answers a refused or malformed request, then closes (the rest of its bytes are not read).
  void Fail(int status, const std::string& why);
  void Shutdown();

  const Clock::time_point accepted_;
  std::shared_ptr<HttpsServerImpl> server_;
  beast::ssl_stream<beast::tcp_stream> stream_;
  asio::steady_timer silent_timer_;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  Account account_;
  bool begun_ = false;                 // a byte of the current request has come
  std::atomic<bool> answered_{false};  // an answer was written: no later request is the first
  std::atomic<bool> prompt_{false};    // BeginRequest
  std::atomic<bool> retired_{false};
  std::atomic<bool> large_{false};
  std::atomic<size_t> body_bytes_{0};
  std::atomic<Phase> phase_{Phase::kSilent};
  std::atomic<Clock::rep> since_{Clock::now().time_since_epoch().count()};
  // The last byte from the peer, or the last change of phase: the connection has been silent
  // since then. The body's bytes are what EvictForBody judges slowness by.
  std::atomic<Clock::rep> progress_{Clock::now().time_since_epoch().count()};
};

}  // namespace kvgpu::https
