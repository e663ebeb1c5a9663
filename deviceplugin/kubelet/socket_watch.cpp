#include "deviceplugin/kubelet/socket_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvgpu::deviceplugin {

DirWatcher::~DirWatcher() {
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status DirWatcher::Start(const std::filesystem::path& dir) {
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return Status::FromErrno(errno, "inotify_init1");
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::FromErrno(errno, "eventfd");
  if (::inotify_add_watch(inotify_fd_, dir.c_str(),
                          IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
    int err = errno;
    return Status::FromErrno(err, "watch " + dir.string() + ": " + std::strerror(err));
  }
  return Status::Ok();
}

std::vector<DirEvent> DirWatcher::Wait(std::chrono::milliseconds timeout) {
  std::vector<DirEvent> events;
  pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  int ready = ::poll(fds, 2, static_cast<int>(timeout.count()));
  if (ready <= 0) return events;
  if ((fds[1].revents & POLLIN) != 0) {
    uint64_t count = 0;
    (void)::read(wake_fd_, &count, sizeof(count));
  }
  if ((fds[0].revents & POLLIN) == 0) return events;
  alignas(inotify_event) char buffer[8192];
  while (true) {
    ssize_t n = ::read(inotify_fd_, buffer, sizeof(buffer));
    if (n <= 0) break;
    for (ssize_t offset = 0; offset < n;) {
      inotify_event event;
      std::memcpy(&event, buffer + offset, sizeof(event));
      if (event.len > 0) {
        std::string name(buffer + offset + static_cast<ssize_t>(sizeof(inotify_event)));
        events.push_back({name, (event.mask & (IN_CREATE | IN_MOVED_TO)) != 0});
      }
      offset += static_cast<ssize_t>(sizeof(inotify_event) + event.len);
    }
  }
  return events;
}

void DirWatcher::Wake() {
  uint64_t one = 1;
  (void)::write(wake_fd_, &one, sizeof(one));
}

}  // namespace kvgpu::deviceplugin
