#include "https/metrics_listener.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <list>
#include <thread>

#include "https/asio_names.h"

namespace kvgpu::https {

// Everything runs on the one thread of `io`, so no state here needs a lock.
struct MetricsListener::Impl : std::enable_shared_from_this<MetricsListener::Impl> {
  struct Connection {
    beast::tcp_stream stream;
    beast::flat_buffer buffer{8 * 1024};
    http::request<http::empty_body> request;
    http::response<http::string_body> response;
    explicit Connection(tcp::socket socket) : stream(std::move(socket)) {}
  };
  using Open = std::list<std::shared_ptr<Connection>>;

  Impl(std::function<std::string()> produce, Options with)
      : text(std::move(produce)), options(with), acceptor(io), accept_retry(io) {}

  void Accept() {
    acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
      if (!self->acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors or another passing failure: retrying at once would spin.
        self->accept_retry.expires_after(std::chrono::milliseconds(100));
        self->accept_retry.async_wait([self](const beast::error_code&) { self->Accept(); });
        return;
      }
      self->Serve(std::make_shared<Connection>(std::move(socket)));
      self->Accept();
    });
  }

  void Serve(std::shared_ptr<Connection> connection) {
    if (open.size() >= options.max_connections) {
      beast::error_code ignored;
      open.front()->stream.socket().close(ignored);
      open.pop_front();
    }
    open.push_back(connection);
    auto where = std::prev(open.end());
    connection->stream.expires_after(options.request_timeout);
    http::async_read(connection->stream, connection->buffer, connection->request,
                     [self = shared_from_this(), connection, where](beast::error_code ec, size_t) {
                       if (ec) return self->Forget(connection, where);
                       self->Answer(connection, where);
                     });
  }

  void Answer(const std::shared_ptr<Connection>& connection, Open::iterator where) {
    auto& response = connection->response;
    const auto& request = connection->request;
    response.version(request.version());
    Route(request, response);
    response.keep_alive(false);
    // A HEAD answer carries the GET answer's length and no body (Route set both).
    if (request.method() != http::verb::head) response.prepare_payload();
    http::async_write(connection->stream, response,
                      [self = shared_from_this(), connection, where](beast::error_code, size_t) {
                        beast::error_code ignored;
                        connection->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
                        self->Forget(connection, where);
                      });
  }

  // Drops the connection from the open list unless an eviction took it already.
  void Forget(const std::shared_ptr<Connection>& connection, Open::iterator where) {
    beast::error_code ignored;
    if (connection->stream.socket().is_open()) {
      connection->stream.socket().close(ignored);
      open.erase(where);
    }
  }

  // What a request gets: the metrics, the health check's word, or 404/405.
  void Route(const http::request<http::empty_body>& request,
             http::response<http::string_body>& response) {
    const std::string_view target(request.target().data(), request.target().size());
    const bool metrics = target == "/metrics" || target.starts_with("/metrics?");
    const bool health = options.health && target == "/healthz";
    const bool get = request.method() == http::verb::get;
    const bool head = request.method() == http::verb::head;
    response.set(http::field::content_type, "text/plain; charset=utf-8");
    if (!metrics && !health) {
      response.result(http::status::not_found);
      response.body() =
          options.health ? "only GET /metrics and /healthz here\n" : "only GET /metrics here\n";
    } else if (!get && !(health && head)) {
      response.result(http::status::method_not_allowed);
      response.set(http::field::allow, health ? "GET, HEAD" : "GET");
      response.body() = health ? "GET or HEAD only\n" : "GET only\n";
    } else if (metrics) {
      response.result(http::status::ok);
      response.set(http::field::content_type, "text/plain; version=0.0.4");
      response.body() = text();
    } else {
      const bool healthy = options.health();
      response.result(healthy ? http::status::ok : http::status::service_unavailable);
      response.body() = healthy ? "ok\n" : "unhealthy\n";
    }
    if (head) {
      response.content_length(response.body().size());
      response.body().clear();
    }
  }

  std::function<std::string()> text;
  Options options;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  Open open;
  std::thread thread;
};

Result<std::unique_ptr<MetricsListener>> MetricsListener::Start(const std::string& host, int port,
                                                                std::function<std::string()> text,
                                                                Options options) {
  auto impl = std::make_shared<Impl>(std::move(text), options);
  beast::error_code ec;
  auto address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return Status::Error(ErrorCode::kInvalid, "'" + host + "' is not an IP address");
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Error(ErrorCode::kIo, ec.message());
  impl->Accept();
  impl->thread = std::thread([impl = impl.get()] {
    try {
      impl->io.run();
    } catch (const std::exception& e) {
      spdlog::error("metrics listener: {}", e.what());
    }
  });
  return std::unique_ptr<MetricsListener>(new MetricsListener(impl));
}

MetricsListener::MetricsListener(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsListener::~MetricsListener() {
  asio::post(impl_->io, [impl = impl_] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
    for (auto& connection : impl->open) connection->stream.socket().close(ignored);
    impl->open.clear();
  });
  // With the acceptor and every socket closed, the loop runs out of work and returns.
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsListener::port() const {
  return impl_->acceptor.local_endpoint().port();
}

}  // namespace kvgpu::https
