#include "mdev/udev_monitor.h"

#include <libudev.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "common/background_worker.h"
#include "mdev/sysfs_backend.h"

namespace kvgpu::mdev {

struct UdevMonitor::Impl {
  UdevMonitorOptions options;
  Callback callback;
  udev* context = nullptr;
  udev_monitor* monitor = nullptr;
  int stop_fd = -1;  // the body polls it beside the monitor; the worker's stop writes it
  BackgroundWorker worker;

  void Run() {
    pollfd fds[2] = {{udev_monitor_get_fd(monitor), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    while (true) {
      int n = ::poll(fds, 2, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      if ((fds[0].revents & POLLIN) == 0) continue;
      udev_device* device = udev_monitor_receive_device(monitor);
      if (device == nullptr) continue;  // a message another filter let through, or ENOBUFS
      DeviceEvent event;
      auto text = [](const char* s) { return s != nullptr ? std::string(s) : std::string(); };
      event.action = text(udev_device_get_action(device));
      event.subsystem = text(udev_device_get_subsystem(device));
      event.sysname = text(udev_device_get_sysname(device));
      event.syspath = text(udev_device_get_syspath(device));
      event.driver = text(udev_device_get_driver(device));
      udev_device_unref(device);
      callback(event);
    }
  }

  void Close() {
    if (monitor != nullptr) udev_monitor_unref(monitor);
    if (context != nullptr) udev_unref(context);
    if (stop_fd >= 0) ::close(stop_fd);
    monitor = nullptr;
    context = nullptr;
    stop_fd = -1;
  }
};

UdevMonitor::UdevMonitor(UdevMonitorOptions options, Callback callback)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->callback = std::move(callback);
}

UdevMonitor::~UdevMonitor() {
  Stop();
}

Status UdevMonitor::Start() {
  if (impl_->worker.running()) return Status::Ok();
  if (impl_->options.source != "kernel" && impl_->options.source != "udev") {
    return Status::Error(
        ErrorCode::kInvalid,
        "udev monitor source must be 'kernel' or 'udev', not '" + impl_->options.source + "'");
  }
  impl_->context = udev_new();
  if (impl_->context == nullptr) return Status::FromErrno(errno, "udev_new failed");
  impl_->monitor = udev_monitor_new_from_netlink(impl_->context, impl_->options.source.c_str());
  if (impl_->monitor == nullptr) {
    int err = errno != 0 ? errno : EPERM;
    impl_->Close();
    return Status::FromErrno(err, "cannot open the " + impl_->options.source +
                                      " uevent socket (needs the host network namespace)");
  }
  for (const auto& subsystem : impl_->options.subsystems) {
    udev_monitor_filter_add_match_subsystem_devtype(impl_->monitor, subsystem.c_str(), nullptr);
  }
  int rc = udev_monitor_enable_receiving(impl_->monitor);
  if (rc < 0) {
    impl_->Close();
    return Status::FromErrno(-rc, "cannot bind the uevent socket");
  }
  impl_->stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl_->stop_fd < 0) {
    int err = errno;
    impl_->Close();
    return Status::FromErrno(err, "eventfd failed");
  }
  // The body blocks in poll(2), not in the worker's waits: a stop writes the eventfd it polls.
  impl_->worker.Start([impl = impl_.get()](BackgroundWorker::Handle&) { impl->Run(); },
                      [impl = impl_.get()] {
                        uint64_t one = 1;
                        ssize_t ignored = ::write(impl->stop_fd, &one, sizeof one);
                        (void)ignored;
                      });
  return Status::Ok();
}

void UdevMonitor::Stop() {
  if (!impl_ || !impl_->worker.running()) return;
  impl_->worker.Stop();
  impl_->Close();
}

// The sysfs backend's events are the kernel's own; they live here, beside the monitor.
Result<std::unique_ptr<EventSubscription>> SysfsBackend::WatchChanges(
    std::function<void(const std::string& what)> changed) {
  auto monitor = std::make_unique<UdevMonitor>(
      UdevMonitorOptions{}, [changed = std::move(changed)](const DeviceEvent& event) {
        changed("udev " + event.action + " " + event.subsystem + " " + event.sysname);
      });
  Status started = monitor->Start();
  if (!started.ok()) return started;
  return std::unique_ptr<EventSubscription>(std::move(monitor));
}

}  // namespace kvgpu::mdev
