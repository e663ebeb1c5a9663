// The libvirt backend: vGPUs read and made through libvirt's node-device API, for hosts where
// libvirt (with mdevctl under it) owns the mediated devices. Operators keep their one view
// (`virsh nodedev-list --cap mdev`), and mdevs libvirt defines persistently are never touched.
//
// The connection is opened lazily and reopened with backoff after libvirtd goes away; while it
// is down every call fails with kTransport (callers keep the view they had). Node-device
// lifecycle events stand in for udev's.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "mdev/backend.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::mdev {

struct LibvirtOptions {
  std::string uri = "qemu:///system";
  // libvirt's XML names each type but not its description (an NVIDIA type's framebuffer and
  // instance limit): that one attribute is read from the sysfs path libvirt gives, under this
  // root. Only read, never written.
  std::filesystem::path sysfs_root = "/";
  std::chrono::milliseconds reconnect_initial{500};
  std::chrono::milliseconds reconnect_max{30000};
  // How long a created vGPU may take to show its IOMMU group, and a removed one to go, in
  // libvirt's view (which follows udev).
  std::chrono::milliseconds settle_timeout{10000};
  std::chrono::milliseconds settle_poll{20};
  // libvirt's keepalive: a libvirtd that stops answering for interval * count is given up on.
  int keepalive_interval_s = 5;
  unsigned keepalive_count = 3;
};

class LibvirtBackend : public Backend {
 public:
  LibvirtBackend(LibvirtOptions options, SysfsIo& io);
  ~LibvirtBackend() override;
  LibvirtBackend(const LibvirtBackend&) = delete;
  LibvirtBackend& operator=(const LibvirtBackend&) = delete;

  const char* Name() const override { return "libvirt"; }
  Result<Inventory> Scan() override;
  Result<Vgpu> Create(const CreateRequest& request) override;
  Status Remove(const std::string& id) override;
  Result<std::unique_ptr<EventSubscription>> WatchChanges(
      std::function<void(const std::string& what)> changed) override;
  BackendHealth Health() const override;

  // Connects now (instead of on first use); the error says why not.
  Status Connect();

  // The connection and its callbacks; shared with libvirt's event thread, which may outlive a
  // call into it.
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvgpu::mdev
