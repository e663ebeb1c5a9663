#include "https/http_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace kvgpu::https {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
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

}  // namespace

struct HttpsServer::Impl : std::enable_shared_from_this<HttpsServer::Impl> {
  class Session;

  Impl(SSL_CTX* ctx, Handler on_request, HttpsServerOptions with)
      : ssl(ctx),
        handler(std::move(on_request)),
        options(std::move(with)),
        io(static_cast<int>(std::max<size_t>(1, options.worker_threads))),
        acceptor(asio::make_strand(io)),
        accept_retry(acceptor.get_executor()) {}

  void Accept();
  void Admit(tcp::socket socket);
  // Makes room for one more connection by closing the longest-idle one (or the oldest busy one).
  void Evict();
  bool Reserve(size_t bytes) {
    size_t held = buffered.load();
    do {
      if (held + bytes > options.max_buffered_body_bytes) return false;
    } while (!buffered.compare_exchange_weak(held, held + bytes));
    return true;
  }
  void Release(size_t bytes) { buffered -= bytes; }

  asio::ssl::context ssl;
  Handler handler;
  HttpsServerOptions options;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  std::atomic<bool> stopping{false};
  std::atomic<bool> running{false};
  std::atomic<size_t> buffered{0};
  std::atomic<size_t> open{0};
  Clock::time_point last_accept_warning{};

  std::mutex sessions_mutex;
  std::list<std::weak_ptr<Session>> sessions;
};

class HttpsServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Impl> server, tcp::socket socket)
      : server_(std::move(server)),
        stream_(std::move(socket), server_->ssl),
        buffer_(server_->options.max_header_bytes + server_->options.max_body_bytes) {
    ++server_->open;
  }
  ~Session() {
    server_->Release(reserved_);
    --server_->open;
  }

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->Expire(self->server_->options.request_timeout);
      self->stream_.async_handshake(asio::ssl::stream_base::server,
                                    [self](const beast::error_code& ec) {
                                      if (ec) return;  // a failed handshake has nothing to answer
                                      self->ReadHead();
                                    });
    });
  }

  // Closes from any thread (eviction, Stop).
  void Close() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      beast::error_code ignored;
      beast::get_lowest_layer(self->stream_).socket().shutdown(tcp::socket::shutdown_both, ignored);
      beast::get_lowest_layer(self->stream_).close();
    });
  }

  bool idle() const { return idle_.load(); }
  Clock::time_point since() const { return Clock::time_point(Clock::duration(since_.load())); }

 private:
  void Expire(std::chrono::seconds after) { beast::get_lowest_layer(stream_).expires_after(after); }
  void Mark(bool idle) {
    idle_ = idle;
    since_ = Clock::now().time_since_epoch().count();
  }

  // The head is read piecewise: waiting for its first byte is idleness (idle_timeout); once a
  // byte has come, the whole request must be done within request_timeout, however it trickles.
  void ReadHead() {
    Mark(true);
    parser_.emplace();
    ConfigureParser(*parser_, server_->options.max_header_bytes, server_->options.max_body_bytes);
    begun_ = buffer_.size() > 0;  // pipelined bytes already here
    Expire(begun_ ? server_->options.request_timeout : server_->options.idle_timeout);
    ReadHeadSome();
  }

  void ReadHeadSome() {
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = shared_from_this()](const beast::error_code& ec, size_t) {
                            if (ec || self->parser_->is_header_done()) return self->OnHead(ec);
                            if (!self->begun_) {
                              self->begun_ = true;
                              self->Mark(false);
                              self->Expire(self->server_->options.request_timeout);
                            }
                            self->ReadHeadSome();
                          });
  }

  void OnHead(const beast::error_code& ec) {
    Mark(false);
    if (ec == http::error::body_limit) return Fail(413, TooLarge());
    if (ec) return Fail(StatusFor(ec), ec.message());
    if (!begun_) Expire(server_->options.request_timeout);
    if (int status = RefuseHead(*parser_, server_->options.max_body_bytes); status != 0) {
      return Fail(status, status == 411 ? "a Content-Length body is required" : TooLarge());
    }
    const size_t length = parser_->content_length().value_or(0);
    if (!server_->Reserve(length)) {
      return Fail(503, "too many large requests at once; retry");
    }
    reserved_ = length;
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
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnRequest(ec); });
  }

  void OnRequest(const beast::error_code& ec) {
    if (ec) return Fail(StatusFor(ec), ec.message());
    http::request<http::string_body> request = parser_->release();
    parser_.reset();
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
    const bool keep = request.keep_alive() && !server_->stopping && answer.status < 500;
    Write(answer, keep);
  }

  void Write(const HttpResponse& answer, bool keep_alive) {
    auto response = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(answer.status), 11);
    response->set(http::field::content_type, answer.content_type);
    response->body() = answer.body;
    response->keep_alive(keep_alive);
    response->prepare_payload();
    Expire(server_->options.write_timeout);
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response](const beast::error_code& ec, size_t) {
                        self->server_->Release(self->reserved_);
                        self->reserved_ = 0;
                        if (ec) return;
                        if (!response->keep_alive()) return self->Shutdown();
                        self->ReadHead();
                      });
  }

  // Answers a refused or malformed request, then closes (the rest of its bytes are not read).
  void Fail(int status, const std::string& why) {
    if (status == 0 || server_->stopping) return;
    Write({status, "text/plain; charset=utf-8", why + "\n"}, false);
  }

  void Shutdown() {
    Expire(std::chrono::seconds(2));
    stream_.async_shutdown([self = shared_from_this()](const beast::error_code&) {});
  }

  std::shared_ptr<Impl> server_;
  beast::ssl_stream<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  size_t reserved_ = 0;
  bool begun_ = false;  // a byte of the current request has come
  std::atomic<bool> idle_{true};
  std::atomic<Clock::rep> since_{Clock::now().time_since_epoch().count()};
};

void HttpsServer::Impl::Accept() {
  acceptor.async_accept(
      asio::make_strand(io), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
        if (self->stopping) return;
        if (ec == asio::error::no_descriptors || ec.value() == ENFILE || ec.value() == ENOBUFS ||
            ec.value() == ENOMEM) {
          // Out of descriptors: trying again at once would spin on the same error.
          auto now = Clock::now();
          if (now - self->last_accept_warning > std::chrono::seconds(10)) {
            spdlog::warn("accept: {}; pausing {} ms before the next", ec.message(),
                         self->options.accept_backoff.count());
            self->last_accept_warning = now;
          }
          self->accept_retry.expires_after(self->options.accept_backoff);
          self->accept_retry.async_wait([self](const beast::error_code&) { self->Accept(); });
          return;
        }
        if (!ec) self->Admit(std::move(socket));
        self->Accept();
      });
}

void HttpsServer::Impl::Admit(tcp::socket socket) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (open.load() >= options.max_connections) Evict();
  auto session = std::make_shared<Session>(shared_from_this(), std::move(socket));
  {
    std::lock_guard lock(sessions_mutex);
    std::erase_if(sessions, [](const auto& weak) { return weak.expired(); });
    sessions.push_back(session);
  }
  session->Start();
}

void HttpsServer::Impl::Evict() {
  std::shared_ptr<Session> victim;
  {
    std::lock_guard lock(sessions_mutex);
    std::shared_ptr<Session> oldest_idle, oldest_busy;
    for (const auto& weak : sessions) {
      auto s = weak.lock();
      if (!s) continue;
      auto& pick = s->idle() ? oldest_idle : oldest_busy;
      if (!pick || s->since() < pick->since()) pick = s;
    }
    victim = oldest_idle ? oldest_idle : oldest_busy;
  }
  if (victim) victim->Close();
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
  return impl_->buffered.load();
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
