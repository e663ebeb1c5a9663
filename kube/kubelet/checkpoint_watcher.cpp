#include "kube/kubelet/checkpoint_watcher.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <cstring>

namespace kvgpu::kubelet {

CheckpointWatcher::CheckpointWatcher(std::filesystem::path kubelet_dir,
                                     std::chrono::milliseconds retry)
    : dir_(kubelet_dir / "device-plugins"), path_(CheckpointPath(kubelet_dir)), retry_(retry) {}

CheckpointWatcher::~CheckpointWatcher() {
  Stop();
}

CheckpointView CheckpointWatcher::ReadLocked() {
  // The time first: kubelet replaces the file by rename, so what is read next is this version or
  // a newer one, never an older one.
  std::error_code error;
  const auto written = std::filesystem::last_write_time(path_, error);
  auto checkpoint = ReadCheckpoint(path_);
  ++view_.generation;
  if (checkpoint.ok()) {
    if (!view_.current) spdlog::info("kubelet checkpoint {} is readable", path_.string());
    view_.checkpoint = std::make_shared<const Checkpoint>(std::move(checkpoint.value()));
    view_.written_unix_ms = error ? 0
                                  : std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::file_clock::to_sys(written).time_since_epoch())
                                        .count();
    view_.current = true;
    view_.problem.clear();
  } else {
    // Say it once per problem, not once per inotify event.
    if (view_.current || view_.problem != checkpoint.status().message()) {
      spdlog::warn("kubelet checkpoint: {}; {}", checkpoint.status().message(),
                   view_.checkpoint ? "keeping the last good view" : "no good view yet");
    }
    view_.current = false;
    view_.problem = checkpoint.status().message();
  }
  return view_;
}

CheckpointView CheckpointWatcher::View() const {
  std::lock_guard lock(mutex_);
  return view_;
}

CheckpointView CheckpointWatcher::Reload() {
  std::lock_guard lock(mutex_);
  return ReadLocked();
}

void CheckpointWatcher::Start(Callback on_change) {
  Stop();
  on_change_ = std::move(on_change);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // The body blocks in poll(2), not in the worker's waits: a stop writes the eventfd it polls.
  worker_.Start([this](BackgroundWorker::Handle&) { Run(); },
                [this] {
                  const std::uint64_t one = 1;
                  (void)!::write(stop_fd_, &one, sizeof one);
                });
}

void CheckpointWatcher::Stop() {
  if (!worker_.running()) return;
  worker_.Stop();
  ::close(stop_fd_);
  stop_fd_ = -1;
}

void CheckpointWatcher::Run() {
  const int inotify = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (inotify < 0) {
    spdlog::error("kubelet checkpoint: inotify_init1: {}; checkpoint changes go unnoticed",
                  std::strerror(errno));
  }
  int watch = -1;
  auto report = [this] {
    CheckpointView view;
    {
      std::lock_guard lock(mutex_);
      view = ReadLocked();
    }
    if (on_change_) on_change_(view);
  };
  // kubelet finishes a write with rename (IN_MOVED_TO); an in-place writer with close.
  constexpr std::uint32_t kMask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
                                  IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF;
  auto arm = [&] {
    if (inotify < 0 || watch >= 0) return;
    watch = ::inotify_add_watch(inotify, dir_.c_str(), kMask);
    // The file may have appeared while nobody watched.
    if (watch >= 0) report();
  };
  arm();
  if (watch < 0) report();
  const std::string name = path_.filename().string();
  std::array<char, 16 * 1024> buffer{};
  while (true) {
    std::array<pollfd, 2> fds = {pollfd{stop_fd_, POLLIN, 0}, pollfd{inotify, POLLIN, 0}};
    const int timeout = watch < 0 ? static_cast<int>(retry_.count()) : -1;
    const int ready = ::poll(fds.data(), inotify < 0 ? 1 : 2, timeout);
    if (ready < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    if (watch < 0) {
      arm();
      continue;
    }
    if (fds[1].revents == 0) continue;
    bool changed = false;
    bool lost_dir = false;
    ssize_t length;
    while ((length = ::read(inotify, buffer.data(), buffer.size())) > 0) {
      for (ssize_t offset = 0; offset < length;) {
        inotify_event event{};
        std::memcpy(&event, buffer.data() + offset, sizeof event);
        const char* event_name = buffer.data() + offset + static_cast<ssize_t>(sizeof event);
        if ((event.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) != 0) lost_dir = true;
        // Events were lost: whatever they were, read again.
        if ((event.mask & IN_Q_OVERFLOW) != 0) changed = true;
        if (event.len > 0 && name == event_name) {
          // A file just created is still being written; its close or rename follows.
          changed = changed || (event.mask & IN_CREATE) == 0;
        }
        offset += static_cast<ssize_t>(sizeof event + event.len);
      }
    }
    if (lost_dir) {
      spdlog::warn("kubelet checkpoint: {} went away; waiting for it", dir_.string());
      ::inotify_rm_watch(inotify, watch);
      watch = -1;
      report();
      continue;
    }
    if (changed) report();
  }
  if (inotify >= 0) ::close(inotify);
}

}  // namespace kvgpu::kubelet
