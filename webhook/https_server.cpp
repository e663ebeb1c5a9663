#include "webhook/https_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "webhook/http_parse.h"

namespace kvgpu::webhook {
namespace {

constexpr size_t kReadChunk = 16 * 1024;

using Clock = std::chrono::steady_clock;

const char* Reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 411:
      return "Length Required";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

struct Connection {
  int fd = -1;
  SSL* ssl = nullptr;
  bool handshake_done = false;
  bool close_after_write = false;  // respond, flush, then close
  bool peer_closed = false;
  bool want_write = false;     // registered for EPOLLOUT
  bool continue_sent = false;  // "100 Continue" already sent for the request in progress
  size_t discard = 0;          // body bytes still to swallow after an early error reply
  std::string in;
  std::string out;
  Clock::time_point last_activity = Clock::now();
  // Start of the handshake or of the request being received: a slow client that trickles
  // bytes keeps last_activity fresh, but not this.
  Clock::time_point busy_since = Clock::now();

  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
    if (fd >= 0) ::close(fd);
  }
};

void AppendResponse(std::string& out, const HttpResponse& response, bool keep_alive) {
  out += "HTTP/1.1 ";
  out += std::to_string(response.status);
  out += ' ';
  out += Reason(response.status);
  out += "\r\nContent-Type: ";
  out += response.content_type;
  out += "\r\nContent-Length: ";
  out += std::to_string(response.body.size());
  out += keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
  out += response.body;
}

}  // namespace

struct HttpsServer::Worker {
  int epoll_fd = -1;
  std::unordered_map<int, std::unique_ptr<Connection>> connections;
  // Connections whose decrypted bytes wait inside OpenSSL: epoll cannot report those.
  std::vector<int> pending;
  std::thread thread;
};

HttpsServer::HttpsServer(SSL_CTX* ctx, Handler handler, HttpsServerOptions options)
    : ctx_(ctx), handler_(std::move(handler)), options_(options) {
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                             SSL_MODE_RELEASE_BUFFERS);
  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

HttpsServer::~HttpsServer() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  SSL_CTX_free(ctx_);
}

Expected<int> HttpsServer::Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0)
    return Error{"cannot resolve " + host + ": " + gai_strerror(rc)};
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, freeaddrinfo);
  // ":8443" resolves to "::" and "0.0.0.0"; the first that binds wins ("::" is dual-stack on
  // Linux), so a node without IPv6 still gets its IPv4 listener.
  int fd = -1;
  std::string failure = "no address to listen on";
  for (addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
    fd = ::socket(candidate->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      failure = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int yes = 1;
    // SO_REUSEADDR only: SO_REUSEPORT would let a second process quietly share the port.
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 && ::listen(fd, 1024) == 0)
      break;
    failure = std::string("cannot listen: ") + std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  if (fd < 0) return Error{failure};
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  listen_fd_ = fd;
  if (bound.ss_family == AF_INET6)
    return static_cast<int>(ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port));
  return static_cast<int>(ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port));
}

void HttpsServer::Run() {
  if (listen_fd_ < 0 || stopping_) return;
  std::vector<std::unique_ptr<Worker>> workers;
  for (size_t i = 0; i < std::max<size_t>(1, options_.worker_threads); ++i) {
    auto worker = std::make_unique<Worker>();
    worker->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event listen_event{};
    listen_event.events = EPOLLIN | EPOLLEXCLUSIVE;  // one worker woken per new connection
    listen_event.data.fd = listen_fd_;
    ::epoll_ctl(worker->epoll_fd, EPOLL_CTL_ADD, listen_fd_, &listen_event);
    epoll_event stop_event{};
    stop_event.events = EPOLLIN;
    stop_event.data.fd = stop_fd_;
    ::epoll_ctl(worker->epoll_fd, EPOLL_CTL_ADD, stop_fd_, &stop_event);
    workers.push_back(std::move(worker));
  }
  running_ = true;
  for (auto& worker : workers) worker->thread = std::thread([this, &worker] { Serve(*worker); });
  for (auto& worker : workers) worker->thread.join();
  for (auto& worker : workers) ::close(worker->epoll_fd);
  running_ = false;
}

void HttpsServer::Stop() {
  stopping_ = true;
  uint64_t one = 1;
  if (stop_fd_ >= 0) (void)!::write(stop_fd_, &one, sizeof(one));
}

void HttpsServer::Serve(Worker& worker) {
  // A peer that vanished mid-write must cost a connection, not the process: with SIGPIPE blocked
  // on this thread, the write fails with EPIPE instead.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
  auto update_interest = [&](Connection& conn) {
    bool want_write = !conn.out.empty() || (!conn.handshake_done && SSL_want_write(conn.ssl));
    if (want_write == conn.want_write) return;
    conn.want_write = want_write;
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP | (want_write ? EPOLLOUT : 0u);
    event.data.fd = conn.fd;
    ::epoll_ctl(worker.epoll_fd, EPOLL_CTL_MOD, conn.fd, &event);
  };
  auto close_connection = [&](int fd) {
    ::epoll_ctl(worker.epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    worker.connections.erase(fd);
    --connections_;
  };
  // One connection per wakeup: the listening socket stays readable while more wait, so each
  // goes to whichever loop gets back to epoll_wait first, the least busy one. Accepting all at
  // once let one loop take a whole burst (every connection of a client pool) and serve it alone.
  auto accept_one = [&] {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error: epoll reports again
    if (connections_ >= options_.max_connections) {
      ::close(fd);
      return;
    }
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    conn->ssl = SSL_new(ctx_);
    if (conn->ssl == nullptr) return;  // ~Connection closes fd
    SSL_set_fd(conn->ssl, fd);
    SSL_set_accept_state(conn->ssl);
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = fd;
    ::epoll_ctl(worker.epoll_fd, EPOLL_CTL_ADD, fd, &event);
    ++connections_;
    worker.connections.emplace(fd, std::move(conn));
  };

  // Moves one connection as far as it can go without blocking; false means close it.
  auto drive = [&](Connection& conn) -> bool {
    conn.last_activity = Clock::now();
    ERR_clear_error();
    if (!conn.handshake_done) {
      int rc = SSL_do_handshake(conn.ssl);
      if (rc != 1) {
        int err = SSL_get_error(conn.ssl, rc);
        return err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE;
      }
      conn.handshake_done = true;
    }
    for (int round = 0; round < 64; ++round) {
      // Flush first: a client that does not read its answers gets no more of them.
      while (!conn.out.empty()) {
        int n = SSL_write(conn.ssl, conn.out.data(), static_cast<int>(conn.out.size()));
        if (n <= 0) {
          int err = SSL_get_error(conn.ssl, n);
          if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) return true;
          return false;
        }
        conn.out.erase(0, static_cast<size_t>(n));
      }
      if (conn.close_after_write && conn.discard == 0) return false;
      if (conn.peer_closed) return false;

      char buffer[kReadChunk];
      bool progressed = false;
      while (true) {
        int n = SSL_read(conn.ssl, buffer, sizeof(buffer));
        if (n > 0) {
          progressed = true;
          size_t got = static_cast<size_t>(n);
          if (conn.discard > 0) {
            size_t skip = std::min(conn.discard, got);
            conn.discard -= skip;
            if (conn.discard == 0 && conn.close_after_write) return false;
            continue;
          }
          if (conn.in.empty()) conn.busy_since = Clock::now();
          conn.in.append(buffer, got);
          if (conn.in.size() > options_.max_body_bytes + kMaxHeaderBytes) break;
          continue;
        }
        int err = SSL_get_error(conn.ssl, n);
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) break;
        conn.peer_closed = true;  // close_notify, EOF or error: answer what arrived, then close
        break;
      }
      if (conn.close_after_write) return conn.discard > 0 || !conn.out.empty();

      bool answered = false;
      while (!conn.close_after_write) {
        ParsedRequest parsed;
        ParseResult result = ParseHttpRequest(conn.in, options_.max_body_bytes, parsed);
        if (result == ParseResult::kIncomplete) {
          // `Expect: 100-continue` with the body still to come: invite it, once.
          if (parsed.expect_continue && !conn.continue_sent) {
            conn.out += "HTTP/1.1 100 Continue\r\n\r\n";
            conn.continue_sent = true;
            answered = true;
          }
          break;
        }
        if (result == ParseResult::kError) {
          HttpResponse response{parsed.error_status, "text/plain; charset=utf-8",
                                parsed.error + "\n"};
          AppendResponse(conn.out, response, false);
          conn.close_after_write = true;
          // Swallow a declared body so closing does not reset the connection under the reply.
          if (parsed.header_length > 0 &&
              conn.in.size() < parsed.header_length + parsed.body_length)
            conn.discard = std::min<size_t>(
                parsed.header_length + parsed.body_length - conn.in.size(), 64 * 1024 * 1024);
          conn.in.clear();
          answered = true;
          break;
        }
        HttpResponse response = handler_(parsed.request);
        AppendResponse(conn.out, response, parsed.keep_alive && !stopping_);
        conn.in.erase(0, parsed.consumed);
        conn.continue_sent = false;
        if (!parsed.keep_alive || stopping_) conn.close_after_write = true;
        answered = true;
      }
      if (!progressed && !answered) return !conn.peer_closed;
    }
    return true;
  };

  std::vector<epoll_event> events(256);
  auto last_sweep = Clock::now();
  while (!stopping_) {
    int n = ::epoll_wait(worker.epoll_fd, events.data(), static_cast<int>(events.size()),
                         worker.pending.empty() ? 1000 : 0);
    std::vector<int> ready;
    ready.swap(worker.pending);
    for (int i = 0; i < n; ++i) ready.push_back(events[static_cast<size_t>(i)].data.fd);
    for (int fd : ready) {
      if (fd == stop_fd_) continue;
      if (fd == listen_fd_) {
        accept_one();
        continue;
      }
      auto it = worker.connections.find(fd);
      if (it == worker.connections.end()) continue;
      Connection& conn = *it->second;
      if (!drive(conn)) {
        close_connection(fd);
        continue;
      }
      update_interest(conn);
      if (SSL_has_pending(conn.ssl) == 1 && conn.out.empty() &&
          std::find(worker.pending.begin(), worker.pending.end(), fd) == worker.pending.end())
        worker.pending.push_back(fd);
    }
    auto now = Clock::now();
    if (now - last_sweep >= std::chrono::seconds(1)) {
      last_sweep = now;
      std::vector<int> expired;
      for (const auto& [fd, conn] : worker.connections) {
        bool mid_request = !conn->handshake_done || !conn->in.empty() || !conn->out.empty();
        if (mid_request ? now - conn->busy_since > options_.request_timeout
                        : now - conn->last_activity > options_.idle_timeout)
          expired.push_back(fd);
      }
      for (int fd : expired) close_connection(fd);
    }
  }
  // Stopping: answers already produced get a short chance to leave, then everything closes.
  for (auto& [fd, conn] : worker.connections) {
    if (!conn->out.empty() && conn->handshake_done)
      (void)SSL_write(conn->ssl, conn->out.data(), static_cast<int>(conn->out.size()));
    ::epoll_ctl(worker.epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    --connections_;
  }
  worker.connections.clear();
}

}  // namespace kvgpu::webhook
