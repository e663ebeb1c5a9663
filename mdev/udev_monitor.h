// Kernel device events (libudev) for mdev and PCI devices, delivered to a callback on the
// monitor's own thread. The device plugin uses it for hot-plug and health.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "mdev/backend.h"

namespace kvgpu::mdev {

struct DeviceEvent {
  std::string action;     // "add", "remove", "change", "bind", "unbind", ...
  std::string subsystem;  // "mdev", "pci", ...
  std::string sysname;    // "<uuid>", "0000:3b:00.0"
  std::string syspath;    // "/sys/devices/..."
  std::string driver;     // may be empty
};

struct UdevMonitorOptions {
  // "kernel": raw kernel uevents, needs no udevd (what a DaemonSet or the VM lab has);
  // "udev": events after udevd processed them.
  std::string source = "kernel";
  std::vector<std::string> subsystems = {"mdev", "pci"};
};

class UdevMonitor : public EventSubscription {
 public:
  using Callback = std::function<void(const DeviceEvent&)>;

  UdevMonitor(UdevMonitorOptions options, Callback callback);
  ~UdevMonitor() override;
  UdevMonitor(const UdevMonitor&) = delete;
  UdevMonitor& operator=(const UdevMonitor&) = delete;

  // Opens the netlink socket and starts the thread. Events are delivered until Stop().
  Status Start();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgpu::mdev
