// One connection of the HTTPS server (http_server.h), as a state machine on its own strand: silent
// until its first byte, the TLS handshake, the request head read piecewise, the body charged to
// the server-wide budget as it arrives, the handler, the answer written, then the next request or
// the end. Also the request framing (Beast's parser with the server's limits) that the fuzzer's
// entry point applies. The listener that admits and evicts connections is http_server.cpp.
#include <spdlog/spdlog.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "https/http_server_internal.h"

namespace kvgpu::https {

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

namespace {

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

}  // namespace

HttpsServerImpl::Session::Session(std::shared_ptr<HttpsServerImpl> server, tcp::socket socket)
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

HttpsServerImpl::Session::~Session() {
  server_->budget.Close(account_);
  if (!retired_.exchange(true)) --server_->open;
}

void HttpsServerImpl::Session::Start() {
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

bool HttpsServerImpl::Session::Retire(const char* why) {
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

void HttpsServerImpl::Session::Close() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    beast::error_code ignored;
    self->silent_timer_.cancel();
    beast::get_lowest_layer(self->stream_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(self->stream_).close();
  });
}

void HttpsServerImpl::Session::Handshake() {
  Mark(Phase::kHandshake);
  Expire(server_->options.request_timeout);
  stream_.async_handshake(asio::ssl::stream_base::server,
                          [self = shared_from_this()](const beast::error_code& e) {
                            if (e) return;  // nothing to answer
                            self->ReadHead();
                          });
}

void HttpsServerImpl::Session::Mark(Phase phase) {
  const auto now = Clock::now().time_since_epoch().count();
  phase_ = phase;
  since_ = now;
  progress_ = now;
}

void HttpsServerImpl::Session::BeginRequest() {
  Mark(Phase::kHead);
  prompt_ = !answered_.load() && fresh(Clock::now());
}

void HttpsServerImpl::Session::ReadHead() {
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

void HttpsServerImpl::Session::ReadHeadSome() {
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

void HttpsServerImpl::Session::OnHead(const beast::error_code& ec) {
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
    auto interim =
        std::make_shared<http::response<http::empty_body>>(http::status::continue_, head.version());
    http::async_write(stream_, *interim,
                      [self = shared_from_this(), interim](const beast::error_code& e, size_t) {
                        if (e) return;
                        self->ReadBody();
                      });
    return;
  }
  ReadBody();
}

std::string HttpsServerImpl::Session::TooLarge() const {
  return "the body is more than the " + std::to_string(server_->options.max_body_bytes >> 20) +
         " MiB a review can be";
}

void HttpsServerImpl::Session::ReadBody() {
  if (!ChargeBody()) return Fail(503, "too many large requests at once; retry");
  if (parser_->is_done()) return OnRequest();
  http::async_read_some(stream_, buffer_, *parser_,
                        [self = shared_from_this()](const beast::error_code& ec, size_t) {
                          if (ec) return self->Fail(StatusFor(ec), ec.message());
                          self->ReadBody();
                        });
}

bool HttpsServerImpl::Session::ChargeBody() {
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

void HttpsServerImpl::Session::OnRequest() {
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

bool HttpsServerImpl::Session::Reserve(size_t body, size_t handler) {
  if (retired_) return false;
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (server_->budget.Set(account_, body, handler, false)) return true;
    if (!server_->EvictForBody(*this)) return false;
  }
  return false;
}

void HttpsServerImpl::Session::Write(HttpResponse answer, bool keep_alive) {
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

void HttpsServerImpl::Session::Fail(int status, const std::string& why) {
  if (status == 0 || server_->stopping || retired_) return;
  server_->budget.Set(account_, 0, 0, true);
  Write({status, "text/plain; charset=utf-8", why + "\n"}, false);
}

void HttpsServerImpl::Session::Shutdown() {
  Expire(std::chrono::seconds(2));
  stream_.async_shutdown([self = shared_from_this()](const beast::error_code&) {});
}

}  // namespace kvgpu::https
