// The HTTPS server's listener (http_server.h): bind and listen, the accept loop with its pause
// when descriptors run out, the connection cap's rule of whom to shed, the evictions that make room
// in the memory budget, and start and stop. One connection's state machine is http_connection.cpp.
#include "https/http_server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <thread>
#include <vector>

#include "https/http_server_internal.h"

namespace kvgpu::https {

void HttpsServerImpl::Accept() {
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
void HttpsServerImpl::OnNoDescriptors(const beast::error_code& ec) {
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

void HttpsServerImpl::Admit(tcp::socket socket) {
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

bool HttpsServerImpl::Evict(const std::function<bool(const Session&, const Session*)>& pick,
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
bool HttpsServerImpl::ShedFirst(const Session& s, const Session* best, Clock::time_point now) {
  if (s.phase() == Phase::kHandling) return false;
  if (best == nullptr) return true;
  if (s.fresh(now) != best->fresh(now)) return !s.fresh(now);
  if (s.speaking(now) != best->speaking(now)) return !s.speaking(now);
  return s.progress() < best->progress();
}

bool HttpsServerImpl::EvictForConnection() {
  return Evict([now = Clock::now()](const Session& s, const Session* best) {
    return ShedFirst(s, best, now);
  });
}

bool HttpsServerImpl::EvictBeforeHandshake() {
  return Evict([now = Clock::now()](const Session& s, const Session* best) {
    return (s.phase() == Phase::kSilent || s.phase() == Phase::kHandshake) &&
           ShedFirst(s, best, now);
  });
}

bool HttpsServerImpl::AnyClosing() {
  std::lock_guard lock(sessions_mutex);
  return std::any_of(sessions.begin(), sessions.end(), [](const auto& weak) {
    auto s = weak.lock();
    return s && s->retired();
  });
}

bool HttpsServerImpl::EvictForBody(const Session& self) {
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
    : impl_(std::make_shared<HttpsServerImpl>(ctx, std::move(handler), std::move(options))) {}

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
  std::vector<std::shared_ptr<HttpsServerImpl::Session>> open;
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
