#include "https/http_server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "https/asio_names.h"

namespace kvgpu::https {
namespace {

using Clock = std::chrono::steady_clock;
using Parser = http::request_parser<http::string_body>;

// The status a framing error is answered with; 0: no answer (the peer went away or timed out).
int StatusFor(const beast::error_code& ec) {
  if (ec == http::error::header_limit) return 431;
  if (ec == http::error::body_limit) return 413;
  if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == asio::error::eof ||
      ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
      ec == asio::ssl::error::stream_truncated) {
    return 0;
  }
  return ec.category() == http::make_error_code(http::error::end_of_stream).category() ? 400 : 0;
}

void ConfigureParser(Parser& parser, size_t max_header, size_t max_body) {
  parser.header_limit(static_cast<std::uint32_t>(max_header));
  parser.body_limit(max_body);
}

// Refusals decided from the head alone, before any body byte is read.
int RefuseHead(const Parser& parser, size_t max_body) {
  const auto& head = parser.get();
  if (head.find(http::field::transfer_encoding) != head.end()) return 411;
  if (parser.content_length() && *parser.content_length() > max_body) return 413;
  return 0;
}

std::string PathOf(beast::string_view target) {
  std::string path(target);
  if (size_t query = path.find('?'); query != std::string::npos) path.resize(query);
  return path;
}

// An answer as the bytes Beast's serializer wrote for a response with these fields: status line,
// Content-Type, Content-Length, "Connection: close" when the connection ends after it, the body.
// Written into one string, without Beast's response object, its field list and the copy that
// gathered header and body into one buffer for the TLS stream.
std::string SerializeResponse(const HttpResponse& answer, bool keep_alive) {
  const beast::string_view reason = http::obsolete_reason(static_cast<http::status>(answer.status));
  const std::string length = std::to_string(answer.body.size());
  std::string out;
  out.reserve(96 + reason.size() + answer.content_type.size() + answer.body.size());
  out += "HTTP/1.1 ";
  out += std::to_string(answer.status);
  out += ' ';
  out.append(reason.data(), reason.size());
  out += "\r\nContent-Type: ";
  out += answer.content_type;
  out += "\r\nContent-Length: ";
  out += length;
  out += keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
  out += answer.body;
  return out;
}

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
constexpr auto kFirstMoments = std::chrono::milliseconds(500);

size_t LargeLimit(const HttpsServerOptions& options) {
  return options.max_large_body_bytes != 0 ? options.max_large_body_bytes
                                           : options.max_buffered_body_bytes / 4 * 3;
}

}  // namespace

struct HttpsServer::Impl : std::enable_shared_from_this<HttpsServer::Impl> {
  class Session;

  Impl(SSL_CTX* ctx, Handler on_request, HttpsServerOptions with)
      : ssl(ctx),
        handler(std::move(on_request)),
        options(std::move(with)),
        budget(options.max_buffered_body_bytes, LargeLimit(options)),
        io(static_cast<int>(std::max<size_t>(1, options.worker_threads))),
        acceptor(asio::make_strand(io)),
        accept_retry(acceptor.get_executor()) {}
  ~Impl() {
    if (spare_descriptor >= 0) ::close(spare_descriptor);
  }

  void Accept();
  void Admit(tcp::socket socket);
  void OnNoDescriptors(const beast::error_code& ec);
  // Closes the connection that `pick` prefers among the open ones, taking it off the count and
  // the budget at once; false when there is none to take.
  bool Evict(const std::function<bool(const Session&, const Session*)>& pick,
             const char* why = nullptr);
  // Whether `s` is to be shed before `best` (the one rule, below); false: never `s`.
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
  Handler handler;
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

class HttpsServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Impl> server, tcp::socket socket)
      : accepted_(Clock::now()),
        server_(std::move(server)),
        stream_(std::move(socket), server_->ssl),
        silent_timer_(stream_.get_executor()),
        buffer_(server_->options.max_header_bytes + server_->options.max_body_bytes) {
    ++server_->open;
    // A client that speaks at once has its ClientHello here by the time it is accepted: it is in
    // its handshake from the start, never taken for a silent socket while its strand waits to run.
    beast::error_code ec;
    if (beast::get_lowest_layer(stream_).socket().available(ec) > 0 && !ec) {
      phase_ = Phase::kHandshake;
    }
  }
  ~Session() {
    server_->budget.Close(account_);
    if (!retired_.exchange(true)) --server_->open;
  }

  // Until its first byte the connection is silent (first to go at the cap); the handshake and
  // every request after it must then complete within request_timeout.
  void Start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->phase_ == Phase::kHandshake) return self->Handshake();
      self->silent_timer_.expires_after(self->server_->options.request_timeout);
      self->silent_timer_.async_wait([self](const beast::error_code& ec) {
        if (!ec) beast::get_lowest_layer(self->stream_).close();
      });
      beast::get_lowest_layer(self->stream_)
          .socket()
          .async_wait(tcp::socket::wait_read, [self](const beast::error_code& ec) {
            self->silent_timer_.cancel();
            if (ec) return;
            self->Handshake();
          });
    });
  }

  // Takes this connection off the count and the budget now, and closes it on its strand; false
  // when that was done already (a connection is never chosen twice).
  // `why`, when given, is answered (503) to a connection evicted mid-body, so the client learns
  // why its request failed; its write holds no budget and closes the connection when done.
  bool Retire(const char* why = nullptr) {
    if (retired_.exchange(true)) return false;
    --server_->open;
    server_->budget.Close(account_);
    if (why == nullptr) {
      Close();
      return true;
    }
    asio::post(stream_.get_executor(), [self = shared_from_this(), why] {
      if (self->phase_ != Phase::kBody) return self->Close();
      self->Write({503, "text/plain; charset=utf-8", std::string(why) + "\n"}, false);
    });
    return true;
  }

  // Closes from any thread (eviction, Stop).
  void Close() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      beast::error_code ignored;
      self->silent_timer_.cancel();
      beast::get_lowest_layer(self->stream_).socket().shutdown(tcp::socket::shutdown_both, ignored);
      beast::get_lowest_layer(self->stream_).close();
    });
  }

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
  void Handshake() {
    Mark(Phase::kHandshake);
    Expire(server_->options.request_timeout);
    stream_.async_handshake(asio::ssl::stream_base::server,
                            [self = shared_from_this()](const beast::error_code& e) {
                              if (e) return;  // nothing to answer
                              self->ReadHead();
                            });
  }

  void Expire(std::chrono::seconds after) { beast::get_lowest_layer(stream_).expires_after(after); }
  // Every change of phase is news from the connection (or the server's answer to it), so it also
  // restarts the silence the connection cap sheds by (progress_).
  void Mark(Phase phase) {
    const auto now = Clock::now().time_since_epoch().count();
    phase_ = phase;
    since_ = now;
    progress_ = now;
  }
  // The current request's first byte came: `prompt_` if it is the connection's first request and
  // came in its first moments.
  void BeginRequest() {
    Mark(Phase::kHead);
    prompt_ = !answered_.load() && fresh(Clock::now());
  }

  // The head is read piecewise: waiting for its first byte is idleness (idle_timeout); once a
  // byte has come, the whole request must be done within request_timeout, however it trickles.
  void ReadHead() {
    Mark(Phase::kIdle);
    parser_.emplace();
    ConfigureParser(*parser_, server_->options.max_header_bytes, server_->options.max_body_bytes);
    begun_ = buffer_.size() > 0;  // pipelined bytes already here
    // An idle connection keeps no large read buffer (one that read a body grew to 64 KiB or
    // more); an ordinary review's few KiB stay, not freed and allocated again per request.
    if (!begun_ && buffer_.capacity() > 16 * 1024) buffer_.shrink_to_fit();
    if (begun_) BeginRequest();
    Expire(begun_ ? server_->options.request_timeout : server_->options.idle_timeout);
    ReadHeadSome();
  }

  void ReadHeadSome() {
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = shared_from_this()](const beast::error_code& ec, size_t) {
                            if (!self->begun_ && !ec) {
                              self->begun_ = true;
                              self->BeginRequest();
                              self->Expire(self->server_->options.request_timeout);
                            } else if (!ec) {
                              self->progress_ = Clock::now().time_since_epoch().count();
                            }
                            if (ec || self->parser_->is_header_done()) return self->OnHead(ec);
                            self->ReadHeadSome();
                          });
  }

  void OnHead(const beast::error_code& ec) {
    if (ec == http::error::body_limit) return Fail(413, TooLarge());
    if (ec) return Fail(StatusFor(ec), ec.message());
    Mark(Phase::kBody);
    body_bytes_ = 0;
    progress_ = Clock::now().time_since_epoch().count();
    if (!begun_) Expire(server_->options.request_timeout);
    if (int status = RefuseHead(*parser_, server_->options.max_body_bytes); status != 0) {
      return Fail(status, status == 411 ? "a Content-Length body is required" : TooLarge());
    }
    // The declared length only classes the request; nothing is reserved on its word.
    large_ = parser_->content_length().value_or(0) > server_->options.small_body_bytes;
    server_->budget.MarkLarge(account_, large_);
    const auto& head = parser_->get();
    auto expect = head.find(http::field::expect);
    if (expect != head.end() && beast::iequals(expect->value(), "100-continue")) {
      auto interim = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                        head.version());
      http::async_write(stream_, *interim,
                        [self = shared_from_this(), interim](const beast::error_code& e, size_t) {
                          if (e) return;
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  std::string TooLarge() const {
    return "the body is more than the " + std::to_string(server_->options.max_body_bytes >> 20) +
           " MiB a review can be";
  }

  void ReadBody() {
    if (!ChargeBody()) return Fail(503, "too many large requests at once; retry");
    if (parser_->is_done()) return OnRequest();
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = shared_from_this()](const beast::error_code& ec, size_t) {
                            if (ec) return self->Fail(StatusFor(ec), ec.message());
                            self->ReadBody();
                          });
  }

  // Charges the body bytes received so far (in the parser's body and the read buffer), making
  // room by evicting an older slow body when the budget is full.
  bool ChargeBody() {
    const size_t held = parser_->get().body().size() + buffer_.size();
    if (held > body_bytes_) progress_ = Clock::now().time_since_epoch().count();
    body_bytes_ = held;
    // Evicted: its account is closed, and evicting others would not help it.
    if (retired_) return false;
    for (int attempt = 0; attempt < 4; ++attempt) {
      if (server_->budget.Set(account_, held, 0, false)) return true;
      if (!server_->EvictForBody(*this)) return false;
    }
    return false;
  }

  void OnRequest() {
    Mark(Phase::kHandling);
    http::request<http::string_body> request = parser_->release();
    parser_.reset();
    const size_t body = request.body().size();
    if (!Reserve(body, server_->HandlerBytes(body)))
      return Fail(503, "the server's memory for requests is taken by other requests; retry");
    HttpResponse answer;
    try {
      HttpRequest in;
      in.method = std::string(request.method_string());
      in.path = PathOf(request.target());
      in.content_type = std::string(request[http::field::content_type]);
      in.body = std::move(request.body());
      SSL* ssl = stream_.native_handle();
      in.client_certificate =
          SSL_get0_peer_certificate(ssl) != nullptr && SSL_get_verify_result(ssl) == X509_V_OK;
      answer = server_->handler(in);
    } catch (const std::exception& e) {
      // bad_alloc on a huge review among them: this request fails, the server keeps serving.
      spdlog::error("request failed: {}", e.what());
      answer = {500, "text/plain; charset=utf-8", "internal error\n"};
    }
    // The body is freed; the answer is what this request holds until it is written.
    server_->budget.Set(account_, 0, answer.body.size(), true);
    const bool keep = request.keep_alive() && !server_->stopping && answer.status < 500;
    Write(std::move(answer), keep);
  }

  bool Reserve(size_t body, size_t handler) {
    if (retired_) return false;
    for (int attempt = 0; attempt < 4; ++attempt) {
      if (server_->budget.Set(account_, body, handler, false)) return true;
      if (!server_->EvictForBody(*this)) return false;
    }
    return false;
  }

  // The answer goes out as one buffer (SerializeResponse): one SSL_write, one TLS record for an
  // ordinary review's answer.
  void Write(HttpResponse answer, bool keep_alive) {
    Mark(Phase::kWriting);
    auto bytes = std::make_shared<std::string>(SerializeResponse(answer, keep_alive));
    answer.body = std::string();  // freed now: the copy in `bytes` is what is held until written
    Expire(server_->options.write_timeout);
    asio::async_write(
        stream_, asio::buffer(*bytes),
        [self = shared_from_this(), bytes, keep_alive](const beast::error_code& ec, size_t) {
          self->server_->budget.Set(self->account_, 0, 0, true);
          self->answered_ = true;
          self->prompt_ = false;
          if (ec) return;
          if (!keep_alive) return self->Shutdown();
          self->ReadHead();
        });
  }

  // Answers a refused or malformed request, then closes (the rest of its bytes are not read).
  void Fail(int status, const std::string& why) {
    if (status == 0 || server_->stopping || retired_) return;
    server_->budget.Set(account_, 0, 0, true);
    Write({status, "text/plain; charset=utf-8", why + "\n"}, false);
  }

  void Shutdown() {
    Expire(std::chrono::seconds(2));
    stream_.async_shutdown([self = shared_from_this()](const beast::error_code&) {});
  }

  const Clock::time_point accepted_;
  std::shared_ptr<Impl> server_;
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

void HttpsServer::Impl::Accept() {
  // Over the cap with nothing to evict (every connection is being handled): wait for one to end
  // rather than take more descriptors.
  if (open.load() > options.max_connections && !EvictForConnection()) {
    accept_retry.expires_after(std::chrono::milliseconds(10));
    accept_retry.async_wait([self = shared_from_this()](const beast::error_code& ec) {
      if (!ec && !self->stopping) self->Accept();
    });
    return;
  }
  acceptor.async_accept(asio::make_strand(io),
                        [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
                          if (self->stopping) return;
                          if (ec == asio::error::no_descriptors || ec.value() == ENFILE ||
                              ec.value() == ENOBUFS || ec.value() == ENOMEM) {
                            return self->OnNoDescriptors(ec);
                          }
                          if (!ec) self->Admit(std::move(socket));
                          if (self->spare_descriptor < 0)
                            self->spare_descriptor = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                          self->Accept();
                        });
}

// Out of descriptors: the spare one is given up so that the next accept succeeds, and the oldest
// connection still before its handshake is dropped to pay for it (its descriptor refills the
// spare). With neither, trying again at once would spin on the same error: wait.
//
// The dropped connection closes on its own strand, after this returns, so the accept that
// follows may take its descriptor before the spare is taken back: then there is no spare and
// every descriptor is a silent connection's. Waiting for a descriptor would then wait for the
// silent ones' handshake timeout (a new client stalled 8 s); instead the oldest is dropped
// without a spare, once no dropped connection is still closing, and the spare is taken back
// when its descriptor comes free.
void HttpsServer::Impl::OnNoDescriptors(const beast::error_code& ec) {
  if (spare_descriptor < 0) spare_descriptor = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (spare_descriptor >= 0 && EvictBeforeHandshake()) {
    ::close(spare_descriptor);
    spare_descriptor = -1;
    return Accept();
  }
  if (spare_descriptor < 0 && !AnyClosing()) (void)EvictBeforeHandshake();
  auto now = Clock::now();
  if (now - last_accept_warning > std::chrono::seconds(10)) {
    spdlog::warn("accept: {}; pausing {} ms before the next", ec.message(),
                 options.accept_backoff.count());
    last_accept_warning = now;
  }
  accept_retry.expires_after(spare_descriptor < 0 ? std::chrono::milliseconds(5)
                                                  : options.accept_backoff);
  accept_retry.async_wait([self = shared_from_this()](const beast::error_code& e) {
    if (!e && !self->stopping) self->Accept();
  });
}

void HttpsServer::Impl::Admit(tcp::socket socket) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (open.load() >= options.max_connections) EvictForConnection();
  auto session = std::make_shared<Session>(shared_from_this(), std::move(socket));
  {
    std::lock_guard lock(sessions_mutex);
    std::erase_if(sessions, [](const auto& weak) { return weak.expired(); });
    sessions.push_back(session);
  }
  session->Start();
}

bool HttpsServer::Impl::Evict(const std::function<bool(const Session&, const Session*)>& pick,
                              const char* why) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::shared_ptr<Session> victim;
    {
      std::lock_guard lock(sessions_mutex);
      for (const auto& weak : sessions) {
        auto s = weak.lock();
        if (s && !s->retired() && pick(*s, victim.get())) victim = s;
      }
    }
    if (!victim) return false;
    if (victim->Retire(why)) return true;  // else another thread took it first: choose again
  }
  return false;
}

// The connection cap's one rule of whom to shed (docs/webhook.md, "The HTTPS server"): never a
// connection being handled (closing it would free nothing); one in its first moments only when
// every other is too; then a speaking one (its handshake, or a prompt first request) only when
// every other is too; among those left, the one silent longest. A client that speaks at once is
// in its first moments, then speaking, until it has its answer: it is shed only when a burst
// faster than the cap leaves nothing else, and no flood of handshakes can lock the others out
// (they are shed among themselves).
bool HttpsServer::Impl::ShedFirst(const Session& s, const Session* best, Clock::time_point now) {
  if (s.phase() == Phase::kHandling) return false;
  if (best == nullptr) return true;
  if (s.fresh(now) != best->fresh(now)) return !s.fresh(now);
  if (s.speaking(now) != best->speaking(now)) return !s.speaking(now);
  return s.progress() < best->progress();
}

bool HttpsServer::Impl::EvictForConnection() {
  return Evict([now = Clock::now()](const Session& s, const Session* best) {
    return ShedFirst(s, best, now);
  });
}

bool HttpsServer::Impl::EvictBeforeHandshake() {
  return Evict([now = Clock::now()](const Session& s, const Session* best) {
    return (s.phase() == Phase::kSilent || s.phase() == Phase::kHandshake) &&
           ShedFirst(s, best, now);
  });
}

bool HttpsServer::Impl::AnyClosing() {
  std::lock_guard lock(sessions_mutex);
  return std::any_of(sessions.begin(), sessions.end(), [](const auto& weak) {
    auto s = weak.lock();
    return s && s->retired();
  });
}

bool HttpsServer::Impl::EvictForBody(const Session& self) {
  const auto now = Clock::now();
  // Slow: nothing for a second, or half a second into its body and under 1 MiB/s on average. A
  // large newcomer may only displace a slow body; a small one also any older large body (small
  // reviews keep their reserve).
  auto slow = [now](const Session& s) {
    const double seconds = std::chrono::duration<double>(now - s.since()).count();
    return now - s.progress() > std::chrono::seconds(1) ||
           (seconds > 0.5 && static_cast<double>(s.body_bytes()) / seconds < 1024.0 * 1024.0);
  };
  return Evict(
      [&](const Session& s, const Session* best) {
        if (&s == &self || s.phase() != Phase::kBody || s.since() > self.since()) return false;
        if (!slow(s) && (self.large() || !s.large())) return false;
        if (!best) return true;
        if (s.large() != best->large()) return s.large();
        return s.since() < best->since();
      },
      "this body came too slowly and was dropped to make room for other requests; retry");
}

HttpsServer::HttpsServer(SSL_CTX* ctx, Handler handler, HttpsServerOptions options)
    : impl_(std::make_shared<Impl>(ctx, std::move(handler), std::move(options))) {}

HttpsServer::~HttpsServer() {
  Stop();
  // Handlers still queued hold their sessions, and the sessions this server: let them finish
  // (every socket is closed, so they complete at once as aborted) rather than leak them.
  impl_->io.restart();
  impl_->io.run_for(std::chrono::seconds(2));
}

Result<int> HttpsServer::Listen(const std::string& host, int port) {
  beast::error_code ec;
  auto address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return Status::Error(ErrorCode::kInvalid, "'" + host + "' is not an IP address");
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Error(ErrorCode::kIo, ec.message());
  impl_->spare_descriptor = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return static_cast<int>(acceptor.local_endpoint().port());
}

void HttpsServer::Run() {
  impl_->running = true;
  impl_->Accept();
  auto serve = [impl = impl_] {
    // A handler that throws past a session ends that session; the loop goes on.
    while (!impl->stopping) {
      try {
        impl->io.run();
        break;
      } catch (const std::exception& e) {
        spdlog::error("event loop: {}", e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < impl_->options.worker_threads; ++i) threads.emplace_back(serve);
  serve();
  for (auto& thread : threads) thread.join();
  impl_->running = false;
}

void HttpsServer::Stop() {
  if (impl_->stopping.exchange(true)) return;
  asio::post(impl_->acceptor.get_executor(), [impl = impl_] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
  });
  std::vector<std::shared_ptr<Impl::Session>> open;
  {
    std::lock_guard lock(impl_->sessions_mutex);
    for (const auto& weak : impl_->sessions) {
      if (auto s = weak.lock()) open.push_back(s);
    }
  }
  for (const auto& s : open) s->Close();
  impl_->io.stop();
}

bool HttpsServer::running() const {
  return impl_->running;
}

size_t HttpsServer::connections() const {
  return impl_->open.load();
}

size_t HttpsServer::buffered_body_bytes() const {
  return impl_->budget.held();
}

int FrameRequestForFuzzing(std::string_view bytes, size_t max_header_bytes, size_t max_body_bytes) {
  Parser parser;
  ConfigureParser(parser, max_header_bytes, max_body_bytes);
  beast::error_code ec;
  size_t used = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec == http::error::need_more) return -1;
  if (ec) return StatusFor(ec) == 0 ? 400 : StatusFor(ec);
  if (!parser.is_header_done()) return -1;
  if (int status = RefuseHead(parser, max_body_bytes); status != 0) return status;
  while (!parser.is_done() && used < bytes.size()) {
    size_t more = parser.put(asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec == http::error::need_more) return -1;
    if (ec) return StatusFor(ec) == 0 ? 400 : StatusFor(ec);
    if (more == 0) break;
    used += more;
  }
  return parser.is_done() ? 0 : -1;
}

}  // namespace kvgpu::https
