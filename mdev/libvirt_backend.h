// The libvirt backend: vGPUs read and made through libvirt's node-device API, for hosts where
// libvirt (with mdevctl under it) owns the mediated devices. Operators keep their one view
// (`virsh nodedev-list --cap mdev`), and mdevs libvirt defines persistently are never touched.
//
// The connection is opened lazily and reopened with backoff after libvirtd goes away; while it
// is down every call fails with kTransport (callers keep the view they had). Node-device
// lifecycle events stand in for udev's.
#pragma once

#include <memory>
#include <string>

#include "mdev/backend.h"
#include "mdev/libvirt_options.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::mdev {

// The connection and its callbacks (libvirt_internal.h); shared with libvirt's event thread, which
// may outlive a call into it.
namespace libvirt_detail {
struct Impl;
}  // namespace libvirt_detail

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

 private:
  std::shared_ptr<libvirt_detail::Impl> impl_;
};

}  // namespace kvgpu::mdev
