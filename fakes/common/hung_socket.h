// A peer that accepts and never answers, on a unix socket: a hung kubelet (its kubelet.sock or
// its PodResources socket), as a kubelet stuck in a deadlock or a node under memory pressure
// shows itself. connect() succeeds and the connection stays open, but nothing is ever read or
// written: a gRPC call on it waits for its deadline, or until cancelled. Header-only, so any test
// can use it without a library.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kvgpu::testing {

class HungSocket {
 public:
  explicit HungSocket(std::filesystem::path path) : path_(std::move(path)) {
    std::filesystem::remove(path_);
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string text = path_.string();
    if (listener_ < 0 || text.size() >= sizeof(address.sun_path)) {
      throw std::runtime_error("hung socket: cannot make " + text);
    }
    std::memcpy(address.sun_path, text.c_str(), text.size() + 1);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(listener_, 64) != 0) {
      ::close(listener_);
      throw std::runtime_error("hung socket: cannot listen on " + text);
    }
    thread_ = std::thread([this] { Accept(); });
  }
  ~HungSocket() {
    stopping_ = true;
    thread_.join();
    ::close(listener_);
    std::lock_guard lock(mutex_);
    for (int fd : accepted_) ::close(fd);
    if (!unlinked_) {
      std::error_code ignored;
      std::filesystem::remove(path_, ignored);
    }
  }
  HungSocket(const HungSocket&) = delete;
  HungSocket& operator=(const HungSocket&) = delete;

  // Connections taken and held so far.
  size_t accepted() const {
    std::lock_guard lock(mutex_);
    return accepted_.size();
  }
  const std::filesystem::path& path() const { return path_; }
  // The socket file goes (a new peer may bind the path) while the connections taken stay open
  // and unanswered: a peer replaced while calls to it still wait.
  void Unlink() {
    std::filesystem::remove(path_);
    unlinked_ = true;
  }

 private:
  void Accept() {
    while (!stopping_) {
      pollfd ready{listener_, POLLIN, 0};
      if (::poll(&ready, 1, 20) <= 0) continue;
      int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mutex_);
      accepted_.push_back(fd);  // held open, never read: the peer waits for an answer
    }
  }

  std::filesystem::path path_;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  bool unlinked_ = false;
  mutable std::mutex mutex_;
  std::vector<int> accepted_;
  std::thread thread_;
};

}  // namespace kvgpu::testing
