#include "mdev/libvirt_backend.h"

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "common/backoff.h"
#include "mdev/libvirt_xml.h"
#include "mdev/node_internal.h"
#include "mdev/nvidia.h"
#include "mdev/uuid.h"

namespace kvgpu::mdev {

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

struct DeviceFree {
  void operator()(virNodeDevicePtr device) const { virNodeDeviceFree(device); }
};
using DevicePtr = std::unique_ptr<virNodeDevice, DeviceFree>;

struct ConnectionClose {
  void operator()(virConnectPtr connection) const { virConnectClose(connection); }
};
using ConnectionRef = std::unique_ptr<virConnect, ConnectionClose>;

// libvirt's last error on this thread as a Status of the project's kinds, then cleared.
Status LastError(const std::string& context, ErrorCode otherwise = ErrorCode::kIo) {
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

struct ListedMdev {
  LibvirtMdev mdev;
  bool persistent = false;
};

}  // namespace

struct LibvirtBackend::Impl {
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

namespace {

using WeakImpl = std::weak_ptr<LibvirtBackend::Impl>;

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

void LibvirtBackend::Impl::Notify(const std::string& what) {
  std::function<void(const std::string&)> callback;
  {
    std::lock_guard lock(changed_mutex);
    callback = changed;
  }
  if (callback) callback(what);
}

Result<ConnectionRef> LibvirtBackend::Impl::Acquire() {
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

void LibvirtBackend::Impl::DropLocked() {
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

void LibvirtBackend::Impl::RegisterEventsLocked() {
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

void LibvirtBackend::Impl::Check(const Status& status) {
  if (status.ok() || status.code() != ErrorCode::kTransport) return;
  std::lock_guard lock(mutex);
  lost = true;
  last_error = status.message();
}

void LibvirtBackend::Impl::ReadDescription(const LibvirtParent& parent, VgpuType& type) {
  if (parent.sysfs_path.empty()) return;
  std::filesystem::path relative = std::filesystem::path(parent.sysfs_path).relative_path();
  auto description = ReadAttribute(
      io, options.sysfs_root / relative / "mdev_supported_types" / type.id / "description");
  if (description.ok() && !description->empty()) type.description = *description;
  FillNvidiaDetails(type);
}

Result<std::vector<LibvirtParent>> LibvirtBackend::Impl::ListParents(
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

Result<std::vector<ListedMdev>> LibvirtBackend::Impl::ListMdevs(
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

namespace {

// An mdev in the model's terms; the parent is found by libvirt's device name, else by the
// address libvirt records.
std::optional<Vgpu> ToVgpu(const ListedMdev& listed, const std::vector<LibvirtParent>& parents) {
  const LibvirtParent* parent = nullptr;
  for (const LibvirtParent& candidate : parents) {
    if (candidate.device_name == listed.mdev.parent_device ||
        candidate.parent.name == listed.mdev.parent_address) {
      parent = &candidate;
      break;
    }
  }
  if (parent == nullptr) return std::nullopt;
  Vgpu vgpu;
  vgpu.id = listed.mdev.uuid;
  vgpu.flavour = Flavour::kMdev;
  vgpu.parent = parent->parent.name;
  vgpu.physical_gpu = parent->parent.physical_gpu;
  vgpu.type_id = listed.mdev.type_id;
  for (const VgpuType& type : parent->parent.types) {
    if (type.id == vgpu.type_id) vgpu.type_name = type.name;
  }
  vgpu.iommu_group = listed.mdev.iommu_group;
  vgpu.vfio_device = internal::VfioDevicePath(vgpu.iommu_group);
  vgpu.persistent = listed.persistent;
  return vgpu;
}

}  // namespace

LibvirtBackend::LibvirtBackend(LibvirtOptions options, SysfsIo& io)
    : impl_(std::make_shared<Impl>(std::move(options), io)) {
  impl_->self = impl_;
}

LibvirtBackend::~LibvirtBackend() {
  std::lock_guard lock(impl_->changed_mutex);
  impl_->changed = nullptr;
}

Status LibvirtBackend::Connect() {
  Result<ConnectionRef> connection = impl_->Acquire();
  return connection.ok() ? Status::Ok() : connection.status();
}

Result<Inventory> LibvirtBackend::Scan() {
  Result<ConnectionRef> connection = impl_->Acquire();
  if (!connection.ok()) return connection.status();
  Inventory inventory;
  Result<std::vector<LibvirtParent>> parents =
      impl_->ListParents(connection->get(), inventory.warnings);
  impl_->Check(parents.status());
  if (!parents.ok()) return parents.status();
  Result<std::vector<ListedMdev>> mdevs = impl_->ListMdevs(connection->get(), inventory.warnings);
  impl_->Check(mdevs.status());
  if (!mdevs.ok()) return mdevs.status();
  for (const ListedMdev& listed : *mdevs) {
    std::optional<Vgpu> vgpu = ToVgpu(listed, *parents);
    if (!vgpu) {
      inventory.warnings.push_back("mdev " + listed.mdev.uuid + " skipped: its parent " +
                                   listed.mdev.parent_device + " offers no mdev types in libvirt");
      continue;
    }
    inventory.vgpus.push_back(std::move(*vgpu));
  }
  for (LibvirtParent& parent : *parents) inventory.parents.push_back(std::move(parent.parent));
  std::sort(inventory.parents.begin(), inventory.parents.end(),
            [](const Parent& a, const Parent& b) { return a.name < b.name; });
  std::sort(inventory.vgpus.begin(), inventory.vgpus.end(),
            [](const Vgpu& a, const Vgpu& b) { return a.id < b.id; });
  return inventory;
}

Result<Vgpu> LibvirtBackend::Create(const CreateRequest& request) {
  if (request.parent.empty() || request.type_id.empty()) {
    return Status::Error(ErrorCode::kInvalid, "create needs a parent and a type");
  }
  Result<std::string> checked = internal::MdevUuid(request.uuid);
  if (!checked.ok()) return checked.status();
  const std::string& uuid = *checked;
  Result<ConnectionRef> connection = impl_->Acquire();
  if (!connection.ok()) return connection.status();
  virConnectPtr conn = connection->get();
  std::vector<std::string> warnings;
  Result<std::vector<LibvirtParent>> parents = impl_->ListParents(conn, warnings);
  impl_->Check(parents.status());
  if (!parents.ok()) return parents.status();

  auto find_type = [&](const std::vector<LibvirtParent>& list) -> const VgpuType* {
    for (const LibvirtParent& parent : list) {
      if (parent.parent.name != request.parent) continue;
      for (const VgpuType& type : parent.parent.types) {
        if (type.id == request.type_id) return &type;
      }
    }
    return nullptr;
  };
  auto parent = std::find_if(parents->begin(), parents->end(), [&](const LibvirtParent& p) {
    return p.parent.name == request.parent;
  });
  if (parent == parents->end()) {
    return Status::Error(ErrorCode::kUnknownParent,
                         "no vGPU-capable parent '" + request.parent +
                             "' in libvirt (see `vgpuctl types --backend libvirt` or `virsh "
                             "nodedev-list --cap mdev_types`)");
  }
  const VgpuType* type = find_type(*parents);
  if (type == nullptr) {
    return Status::Error(ErrorCode::kUnknownType, "parent " + request.parent + " has no type '" +
                                                      request.type_id + "' (see `vgpuctl types`)");
  }
  std::string what = "vGPU " + uuid;
  if (type->available_instances == 0) {
    return internal::CreateFailed(Status::Error(ErrorCode::kNoRoom, "availableInstances is 0"),
                                  what, request.type_id, request.parent);
  }
  Result<std::vector<ListedMdev>> existing = impl_->ListMdevs(conn, warnings);
  impl_->Check(existing.status());
  if (!existing.ok()) return existing.status();
  for (const ListedMdev& listed : *existing) {
    if (listed.mdev.uuid == uuid) {
      return internal::CreateFailed(Status::Error(ErrorCode::kExists, "libvirt lists it"), what,
                                    request.type_id, request.parent);
    }
  }

  std::string xml = LibvirtMdevCreateXml(parent->device_name, request.type_id, uuid);
  DevicePtr created(virNodeDeviceCreateXML(conn, xml.c_str(), 0));
  if (!created) {
    Status failed = LastError("virNodeDeviceCreateXML");
    impl_->Check(failed);
    // Another creator may have taken the last instance since the check above: say so plainly.
    if (failed.code() == ErrorCode::kIo) {
      std::vector<std::string> ignored;
      auto now = impl_->ListParents(conn, ignored);
      if (now.ok()) {
        const VgpuType* again = find_type(*now);
        if (again != nullptr && again->available_instances == 0) {
          failed = Status::Error(ErrorCode::kNoRoom, failed.message());
        }
      }
    }
    return internal::CreateFailed(failed, what, request.type_id, request.parent);
  }
  // libvirt returns the device as soon as it lists it; its IOMMU group follows from udev.
  Result<Vgpu> out = Status::Error(ErrorCode::kTimeout, "");
  bool shown = internal::WaitFor(impl_->options.settle_timeout, impl_->options.settle_poll, [&] {
    std::string now = TakeString(virNodeDeviceGetXMLDesc(created.get(), 0));
    if (now.empty()) {
      virResetLastError();
      return false;
    }
    Result<LibvirtMdev> mdev = ParseLibvirtMdev(now);
    if (!mdev.ok() || !mdev->iommu_group) return false;
    mdev->uuid = NormalizeUuid(mdev->uuid);
    std::optional<Vgpu> vgpu = ToVgpu({*mdev, false}, *parents);
    if (!vgpu) return false;
    out = *vgpu;
    return true;
  });
  if (!shown) {
    return Status::Error(ErrorCode::kTimeout, "created " + uuid +
                                                  " through libvirt but libvirt does not show "
                                                  "its IOMMU group");
  }
  return out;
}

Status LibvirtBackend::Remove(const std::string& id) {
  if (!IsValidUuid(id)) {
    return Status::Error(ErrorCode::kMalformedUuid,
                         "'" + id +
                             "' is not an mdev UUID (the libvirt backend manages mdevs "
                             "only; vendor-VFIO vGPUs need the sysfs backend)");
  }
  std::string uuid = NormalizeUuid(id);
  Result<ConnectionRef> connection = impl_->Acquire();
  if (!connection.ok()) return connection.status();
  virConnectPtr conn = connection->get();
  std::vector<std::string> warnings;
  Result<std::vector<ListedMdev>> mdevs = impl_->ListMdevs(conn, warnings);
  impl_->Check(mdevs.status());
  if (!mdevs.ok()) return mdevs.status();
  auto listed = std::find_if(mdevs->begin(), mdevs->end(),
                             [&](const ListedMdev& m) { return m.mdev.uuid == uuid; });
  if (listed == mdevs->end()) {
    return internal::RemoveFailed(Status::Error(ErrorCode::kGone, "libvirt does not list it"),
                                  uuid);
  }
  if (listed->persistent) {
    return Status::Error(ErrorCode::kPermission,
                         "vGPU " + uuid + " is defined persistently in libvirt (" +
                             listed->mdev.device_name +
                             "): someone else's, left alone; `virsh nodedev-undefine` it there if "
                             "it should go");
  }
  DevicePtr device(virNodeDeviceLookupByName(conn, listed->mdev.device_name.c_str()));
  if (!device) {
    Status failed = LastError("virNodeDeviceLookupByName");
    impl_->Check(failed);
    return internal::RemoveFailed(failed, uuid);
  }
  if (virNodeDeviceDestroy(device.get()) < 0) {
    Status failed = LastError("virNodeDeviceDestroy");
    impl_->Check(failed);
    return internal::RemoveFailed(failed, uuid);
  }
  bool gone = internal::WaitFor(impl_->options.settle_timeout, impl_->options.settle_poll, [&] {
    DevicePtr again(virNodeDeviceLookupByName(conn, listed->mdev.device_name.c_str()));
    if (!again) {
      virResetLastError();
      return true;
    }
    return virNodeDeviceIsActive(again.get()) == 0;
  });
  if (!gone) {
    return Status::Error(ErrorCode::kTimeout,
                         "removed " + uuid + " through libvirt but libvirt still lists it");
  }
  return Status::Ok();
}

namespace {

class LibvirtSubscription : public EventSubscription {
 public:
  explicit LibvirtSubscription(std::shared_ptr<LibvirtBackend::Impl> impl)
      : impl_(std::move(impl)) {}
  ~LibvirtSubscription() override {
    {
      std::lock_guard lock(impl_->mutex);
      impl_->watching = false;
      if (impl_->connection != nullptr && impl_->event_id >= 0) {
        virConnectNodeDeviceEventDeregisterAny(impl_->connection, impl_->event_id);
        impl_->event_id = -1;
      }
    }
    std::lock_guard lock(impl_->changed_mutex);
    impl_->changed = nullptr;
  }

 private:
  std::shared_ptr<LibvirtBackend::Impl> impl_;
};

}  // namespace

Result<std::unique_ptr<EventSubscription>> LibvirtBackend::WatchChanges(
    std::function<void(const std::string& what)> changed) {
  {
    std::lock_guard lock(impl_->changed_mutex);
    impl_->changed = std::move(changed);
  }
  {
    std::lock_guard lock(impl_->mutex);
    impl_->watching = true;
    impl_->RegisterEventsLocked();
  }
  // Not connected yet (or libvirtd away): events start with the connection.
  return std::unique_ptr<EventSubscription>(std::make_unique<LibvirtSubscription>(impl_));
}

BackendHealth LibvirtBackend::Health() const {
  std::lock_guard lock(impl_->mutex);
  return {.connected = impl_->connection != nullptr && !impl_->lost,
          .reconnects = impl_->reconnects,
          .last_error = impl_->last_error};
}

}  // namespace kvgpu::mdev
