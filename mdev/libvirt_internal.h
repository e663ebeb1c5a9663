// The libvirt backend's own pieces, shared by its connection (libvirt_connection.cpp: opening,
// reopening, events, listing node devices) and its create/remove (libvirt_backend.cpp); the XML is
// libvirt_xml.h's. Not part of the library's interface.
#pragma once

#include <libvirt/libvirt.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "common/status.h"
#include "mdev/libvirt_options.h"
#include "mdev/libvirt_xml.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::mdev {
namespace libvirt_detail {

struct DeviceFree {
  void operator()(virNodeDevicePtr device) const { virNodeDeviceFree(device); }
};
using DevicePtr = std::unique_ptr<virNodeDevice, DeviceFree>;

struct ConnectionClose {
  void operator()(virConnectPtr connection) const { virConnectClose(connection); }
};
using ConnectionRef = std::unique_ptr<virConnect, ConnectionClose>;

// libvirt's last error on this thread as a Status of the project's kinds, then cleared.
Status LastError(const std::string& context, ErrorCode otherwise = ErrorCode::kIo);
// A string libvirt allocated, taken and freed.
std::string TakeString(char* text);

struct ListedMdev {
  LibvirtMdev mdev;
  bool persistent = false;
};

// LibvirtBackend's state (libvirt_backend.h holds it by pointer).
struct Impl {
  Impl(LibvirtOptions given, SysfsIo& sysfs)
      : options(std::move(given)),
        io(sysfs),
        backoff(options.reconnect_initial, options.reconnect_max, 0.2) {}

  ~Impl() {
    std::lock_guard lock(mutex);
    DropLocked();
  }

  // A reference to the open connection (the caller's to release), opened or reopened first when
  // needed and the backoff allows.
  Result<ConnectionRef> Acquire();
  void DropLocked();
  void RegisterEventsLocked();
  void Notify(const std::string& what);
  // Marks the connection for reopening when `status` says it broke.
  void Check(const Status& status);

  Result<std::vector<LibvirtParent>> ListParents(virConnectPtr conn,
                                                 std::vector<std::string>& warnings);
  Result<std::vector<ListedMdev>> ListMdevs(virConnectPtr conn, std::vector<std::string>& warnings);
  void ReadDescription(const LibvirtParent& parent, VgpuType& type);

  LibvirtOptions options;
  SysfsIo& io;
  std::weak_ptr<Impl> self;

  mutable std::mutex mutex;  // the fields below; never held while calling `changed`
  virConnectPtr connection = nullptr;
  Backoff backoff;
  std::chrono::steady_clock::time_point next_attempt{};
  bool ever_connected = false;
  std::atomic<bool> lost{false};  // set by libvirt's close callback
  uint64_t reconnects = 0;
  std::string last_error;
  int event_id = -1;
  bool watching = false;

  std::mutex changed_mutex;  // taken on the event loop's thread: nothing else is held under it
  std::function<void(const std::string&)> changed;
};

}  // namespace libvirt_detail
}  // namespace kvgpu::mdev
