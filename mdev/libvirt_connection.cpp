// The libvirt backend's connection: libvirt's event loop, opening and reopening with backoff,
// the close and lifecycle callbacks, and listing node devices.
#include <libvirt/virterror.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "mdev/backend_kit.h"
#include "mdev/libvirt_internal.h"
#include "mdev/nvidia.h"
#include "mdev/uuid.h"

namespace kvgpu::mdev {
namespace libvirt_detail {

Status LastError(const std::string& context, ErrorCode otherwise) {
  virErrorPtr error = virGetLastError();
  std::string message =
      error != nullptr && error->message != nullptr ? error->message : "libvirt gave no reason";
  ErrorCode code = otherwise;
  int sys_errno = 0;
  if (error != nullptr) {
    switch (error->code) {
      case VIR_ERR_NO_NODE_DEVICE:
        code = ErrorCode::kGone;
        break;
      case VIR_ERR_AUTH_FAILED:
      case VIR_ERR_AUTH_CANCELLED:
      case VIR_ERR_AUTH_UNAVAILABLE:
      case VIR_ERR_OPERATION_DENIED:
      case VIR_ERR_ACCESS_DENIED:
        code = ErrorCode::kPermission;
        break;
      case VIR_ERR_NO_CONNECT:
      case VIR_ERR_INVALID_CONN:
      case VIR_ERR_RPC:
        code = ErrorCode::kTransport;
        break;
      case VIR_ERR_SYSTEM_ERROR:
        if (error->domain == VIR_FROM_RPC || error->domain == VIR_FROM_REMOTE) {
          code = ErrorCode::kTransport;
        } else if (error->int1 > 0) {
          sys_errno = error->int1;
          code = Status::FromErrno(sys_errno, "").code();
        }
        break;
      default:
        if (error->domain == VIR_FROM_RPC) code = ErrorCode::kTransport;
        break;
    }
  }
  // mdevctl's failures reach us as libvirt's internal errors with mdevctl's or the kernel's
  // words inside.
  if (code == otherwise) {
    if (std::optional<ErrorCode> kind = LibvirtFailureKind(message)) code = *kind;
  }
  virResetLastError();
  return Status::Error(code, context + ": " + message, sys_errno);
}

std::string TakeString(char* text) {
  if (text == nullptr) return {};
  std::string out = text;
  std::free(text);
  return out;
}

}  // namespace libvirt_detail

using namespace libvirt_detail;

namespace {

// libvirt prints every error to stderr unless told otherwise; ours are read with
// virGetLastError and reported through Status.
void DropLibvirtErrorPrint(void*, virErrorPtr) {}

// libvirt's events (lifecycle, connection close, keepalive) are delivered by an event loop the
// application runs; it must be registered before the first connection. One per process, for the
// process's lifetime: libvirt offers no way to unregister it.
void StartEventLoopOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    virInitialize();
    virSetErrorFunc(nullptr, DropLibvirtErrorPrint);
    if (virEventRegisterDefaultImpl() < 0) return;
    std::thread([] {
      while (true) {
        if (virEventRunDefaultImpl() < 0) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }).detach();
  });
}

// The answer of a libvirt yes/no call (1, 0, -1 with an error); `unsupported` stands for a
// libvirt too old to have the call.
Result<bool> Ask(int answer, bool unsupported, const std::string& what) {
  if (answer >= 0) return answer == 1;
  virErrorPtr error = virGetLastError();
  if (error != nullptr && error->code == VIR_ERR_NO_SUPPORT) {
    virResetLastError();
    return unsupported;
  }
  return LastError(what);
}

}  // namespace

namespace {

using WeakImpl = std::weak_ptr<libvirt_detail::Impl>;

void FreeWeak(void* opaque) {
  delete static_cast<WeakImpl*>(opaque);
}

// libvirt's close callback: the connection broke (libvirtd went away, keepalive gave up).
void OnConnectionClosed(virConnectPtr, int, void* opaque) {
  if (auto impl = static_cast<WeakImpl*>(opaque)->lock()) {
    // No lock: libvirt may call this on a thread that is inside a call of ours.
    impl->lost = true;
    impl->Notify("libvirt connection closed");
  }
}

const char* LifecycleName(int event) {
  switch (event) {
    case VIR_NODE_DEVICE_EVENT_CREATED:
      return "created";
    case VIR_NODE_DEVICE_EVENT_DELETED:
      return "deleted";
    case VIR_NODE_DEVICE_EVENT_DEFINED:
      return "defined";
    case VIR_NODE_DEVICE_EVENT_UNDEFINED:
      return "undefined";
    default:
      return "changed";
  }
}

}  // namespace

void libvirt_detail::Impl::Notify(const std::string& what) {
  std::function<void(const std::string&)> callback;
  {
    std::lock_guard lock(changed_mutex);
    callback = changed;
  }
  if (callback) callback(what);
}

Result<ConnectionRef> libvirt_detail::Impl::Acquire() {
  bool regained = false;
  Result<ConnectionRef> out = [&]() -> Result<ConnectionRef> {
    std::lock_guard lock(mutex);
    if (connection != nullptr && (lost || virConnectIsAlive(connection) != 1)) {
      last_error = "the connection to libvirtd at " + options.uri + " was lost";
      DropLocked();
      next_attempt = std::chrono::steady_clock::now();  // the first reconnect is immediate
    }
    if (connection == nullptr) {
      auto now = std::chrono::steady_clock::now();
      if (now < next_attempt) {
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt - now);
        return Status::Error(ErrorCode::kTransport,
                             "libvirt at " + options.uri + " is unreachable (" + last_error +
                                 "); next attempt in " + std::to_string(wait.count()) + " ms");
      }
      StartEventLoopOnce();
      virConnectPtr opened = virConnectOpen(options.uri.c_str());
      if (opened == nullptr) {
        Status failed =
            LastError("cannot connect to libvirt at " + options.uri, ErrorCode::kTransport);
        last_error = failed.message();
        next_attempt = now + backoff.Next();
        return failed;
      }
      connection = opened;
      lost = false;
      backoff.Reset();
      last_error.clear();
      // Local test drivers have no keepalive; a failure here costs nothing but hang detection.
      if (virConnectSetKeepAlive(connection, options.keepalive_interval_s,
                                 options.keepalive_count) < 0) {
        virResetLastError();
      }
      // The opaque is our own `self`, freed with us after the callback is unregistered: drivers
      // without close callbacks (test:///) accept one and never call its free function.
      if (virConnectRegisterCloseCallback(connection, OnConnectionClosed, &self, nullptr) < 0) {
        virResetLastError();
      }
      if (watching) RegisterEventsLocked();
      if (ever_connected) {
        ++reconnects;
        regained = true;
      }
      ever_connected = true;
    }
    virConnectRef(connection);
    return ConnectionRef(connection);
  }();
  // What changed while libvirtd was away is only seen by a rescan.
  if (regained) Notify("libvirt reconnected");
  return out;
}

void libvirt_detail::Impl::DropLocked() {
  if (connection == nullptr) return;
  if (event_id >= 0) virConnectNodeDeviceEventDeregisterAny(connection, event_id);
  event_id = -1;
  // Waits for a close callback that is running (libvirt holds its lock over the call), so `self`,
  // its opaque, is not in use once this returns.
  virConnectUnregisterCloseCallback(connection, OnConnectionClosed);
  virConnectClose(connection);
  virResetLastError();
  connection = nullptr;
}

void libvirt_detail::Impl::RegisterEventsLocked() {
  if (connection == nullptr || event_id >= 0) return;
  auto on_lifecycle = [](virConnectPtr, virNodeDevicePtr device, int event, int, void* opaque) {
    auto impl = static_cast<WeakImpl*>(opaque)->lock();
    if (!impl) return;
    const char* name = virNodeDeviceGetName(device);
    std::string what = name != nullptr ? name : "";
    // Every node device has lifecycle events (disks, NICs): only mdevs and PCI parents matter.
    if (what.rfind("mdev_", 0) != 0 && what.rfind("pci_", 0) != 0) return;
    impl->Notify(std::string("libvirt ") + LifecycleName(event) + " " + what);
  };
  auto* watcher = new WeakImpl(self);
  event_id = virConnectNodeDeviceEventRegisterAny(
      connection, nullptr, VIR_NODE_DEVICE_EVENT_ID_LIFECYCLE,
      VIR_NODE_DEVICE_EVENT_CALLBACK(+on_lifecycle), watcher, FreeWeak);
  if (event_id < 0) {
    delete watcher;  // not taken: libvirt frees only what it registered
    last_error = LastError("node-device events unavailable").message();
  }
}

void libvirt_detail::Impl::Check(const Status& status) {
  if (status.ok() || status.code() != ErrorCode::kTransport) return;
  std::lock_guard lock(mutex);
  lost = true;
  last_error = status.message();
}

void libvirt_detail::Impl::ReadDescription(const LibvirtParent& parent, VgpuType& type) {
  if (parent.sysfs_path.empty()) return;
  std::filesystem::path relative = std::filesystem::path(parent.sysfs_path).relative_path();
  auto description = ReadAttribute(
      io, options.sysfs_root / relative / "mdev_supported_types" / type.id / "description");
  if (description.ok() && !description->empty()) type.description = *description;
  FillNvidiaDetails(type);
}

Result<std::vector<LibvirtParent>> libvirt_detail::Impl::ListParents(
    virConnectPtr conn, std::vector<std::string>& warnings) {
  virNodeDevicePtr* devices = nullptr;
  int count =
      virConnectListAllNodeDevices(conn, &devices, VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES);
  if (count < 0) return LastError("listing libvirt's mdev-capable devices", ErrorCode::kTransport);
  std::vector<DevicePtr> owned(devices, devices + count);
  std::free(devices);
  std::vector<LibvirtParent> parents;
  for (const DevicePtr& device : owned) {
    std::string name = virNodeDeviceGetName(device.get());
    std::string xml = TakeString(virNodeDeviceGetXMLDesc(device.get(), 0));
    if (xml.empty()) {
      warnings.push_back("parent " + name + " skipped: " + LastError("no XML").message());
      continue;
    }
    Result<LibvirtParent> parent = ParseLibvirtParent(xml);
    if (!parent.ok()) {
      warnings.push_back("parent " + name + " skipped: " + parent.status().message());
      continue;
    }
    for (VgpuType& type : parent->parent.types) ReadDescription(*parent, type);
    parents.push_back(std::move(*parent));
  }
  return parents;
}

Result<std::vector<ListedMdev>> libvirt_detail::Impl::ListMdevs(
    virConnectPtr conn, std::vector<std::string>& warnings) {
  virNodeDevicePtr* devices = nullptr;
  int count = virConnectListAllNodeDevices(conn, &devices, VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV);
  if (count < 0) return LastError("listing libvirt's mdevs", ErrorCode::kTransport);
  std::vector<DevicePtr> owned(devices, devices + count);
  std::free(devices);
  std::vector<ListedMdev> mdevs;
  for (const DevicePtr& device : owned) {
    std::string name = virNodeDeviceGetName(device.get());
    // A defined mdev that is not started is a definition, not a device: nothing of it exists
    // in the kernel, nothing is counted. A libvirt older than 7.3 cannot tell (nor define mdevs):
    // what it lists is active and transient.
    Result<bool> active = Ask(virNodeDeviceIsActive(device.get()), true, "activity unknown");
    if (active.ok() && !*active) continue;
    Result<bool> persistent =
        Ask(virNodeDeviceIsPersistent(device.get()), false, "persistence unknown");
    std::string xml = TakeString(virNodeDeviceGetXMLDesc(device.get(), 0));
    if (!active.ok() || xml.empty()) {
      warnings.push_back("mdev " + name + " skipped: " +
                         (active.ok() ? LastError("no XML").message() : active.status().message()));
      continue;
    }
    Result<LibvirtMdev> mdev = ParseLibvirtMdev(xml);
    if (!mdev.ok()) {
      warnings.push_back("mdev " + name + " skipped: " + mdev.status().message());
      continue;
    }
    if (!persistent.ok()) {
      // Unknown counts as persistent: someone else's until shown otherwise.
      warnings.push_back("mdev " + name + ": " + persistent.status().message() +
                         "; treated as persistent");
    }
    mdev->uuid = NormalizeUuid(mdev->uuid);
    mdevs.push_back({std::move(*mdev), !persistent.ok() || *persistent});
  }
  return mdevs;
}

}  // namespace kvgpu::mdev
