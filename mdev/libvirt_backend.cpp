// The libvirt backend's scan, create and remove (the connection is libvirt_connection.cpp's).
#include "mdev/libvirt_backend.h"

#include <libvirt/virterror.h>

#include <algorithm>
#include <thread>

#include "mdev/backend_kit.h"
#include "mdev/libvirt_internal.h"
#include "mdev/nvidia.h"
#include "mdev/uuid.h"

namespace kvgpu::mdev {

using namespace libvirt_detail;

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
  vgpu.vfio_device = kit::VfioDevicePath(vgpu.iommu_group);
  vgpu.persistent = listed.persistent;
  return vgpu;
}

}  // namespace

LibvirtBackend::LibvirtBackend(LibvirtOptions options, SysfsIo& io)
    : impl_(std::make_shared<libvirt_detail::Impl>(std::move(options), io)) {
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

namespace {

const VgpuType* FindType(const std::vector<LibvirtParent>& parents, const std::string& parent,
                         const std::string& type_id) {
  for (const LibvirtParent& candidate : parents) {
    if (candidate.parent.name != parent) continue;
    for (const VgpuType& type : candidate.parent.types) {
      if (type.id == type_id) return &type;
    }
  }
  return nullptr;
}

// The parent to create on, once libvirt shows it with the type, an instance free, and no mdev
// of this UUID yet; else the error a caller can act on.
Result<const LibvirtParent*> CreatableOn(libvirt_detail::Impl& impl, virConnectPtr conn,
                                         const CreateRequest& request, const std::string& uuid,
                                         const std::vector<LibvirtParent>& parents) {
  auto parent = std::find_if(parents.begin(), parents.end(), [&](const LibvirtParent& p) {
    return p.parent.name == request.parent;
  });
  if (parent == parents.end()) {
    return Status::Error(ErrorCode::kUnknownParent,
                         "no vGPU-capable parent '" + request.parent +
                             "' in libvirt (see `vgpuctl types --backend libvirt` or `virsh "
                             "nodedev-list --cap mdev_types`)");
  }
  const VgpuType* type = FindType(parents, request.parent, request.type_id);
  if (type == nullptr) {
    return Status::Error(ErrorCode::kUnknownType, "parent " + request.parent + " has no type '" +
                                                      request.type_id + "' (see `vgpuctl types`)");
  }
  const std::string what = "vGPU " + uuid;
  if (type->available_instances == 0) {
    return kit::CreateFailed(Status::Error(ErrorCode::kNoRoom, "availableInstances is 0"), what,
                             request.type_id, request.parent);
  }
  std::vector<std::string> warnings;
  Result<std::vector<ListedMdev>> existing = impl.ListMdevs(conn, warnings);
  impl.Check(existing.status());
  if (!existing.ok()) return existing.status();
  for (const ListedMdev& listed : *existing) {
    if (listed.mdev.uuid == uuid) {
      return kit::CreateFailed(Status::Error(ErrorCode::kExists, "libvirt lists it"), what,
                               request.type_id, request.parent);
    }
  }
  return &*parent;
}

// libvirt returns the device as soon as it lists it; its IOMMU group follows from udev.
Result<Vgpu> WaitUntilShown(const libvirt_detail::Impl& impl, virNodeDevicePtr created,
                            const std::vector<LibvirtParent>& parents, const std::string& uuid) {
  Result<Vgpu> out = Status::Error(ErrorCode::kTimeout, "");
  bool shown = kit::WaitFor(impl.options.settle_timeout, impl.options.settle_poll, [&] {
    std::string now = TakeString(virNodeDeviceGetXMLDesc(created, 0));
    if (now.empty()) {
      virResetLastError();
      return false;
    }
    Result<LibvirtMdev> mdev = ParseLibvirtMdev(now);
    if (!mdev.ok() || !mdev->iommu_group) return false;
    mdev->uuid = NormalizeUuid(mdev->uuid);
    std::optional<Vgpu> vgpu = ToVgpu({*mdev, false}, parents);
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

}  // namespace

Result<Vgpu> LibvirtBackend::Create(const CreateRequest& request) {
  if (request.parent.empty() || request.type_id.empty()) {
    return Status::Error(ErrorCode::kInvalid, "create needs a parent and a type");
  }
  Result<std::string> checked = kit::MdevUuid(request.uuid);
  if (!checked.ok()) return checked.status();
  const std::string& uuid = *checked;
  Result<ConnectionRef> connection = impl_->Acquire();
  if (!connection.ok()) return connection.status();
  virConnectPtr conn = connection->get();
  std::vector<std::string> warnings;
  Result<std::vector<LibvirtParent>> parents = impl_->ListParents(conn, warnings);
  impl_->Check(parents.status());
  if (!parents.ok()) return parents.status();
  Result<const LibvirtParent*> parent = CreatableOn(*impl_, conn, request, uuid, *parents);
  if (!parent.ok()) return parent.status();

  std::string xml = LibvirtMdevCreateXml((*parent)->device_name, request.type_id, uuid);
  DevicePtr created(virNodeDeviceCreateXML(conn, xml.c_str(), 0));
  if (!created) {
    Status failed = LastError("virNodeDeviceCreateXML");
    impl_->Check(failed);
    // Another creator may have taken the last instance since the check above: say so plainly.
    if (failed.code() == ErrorCode::kIo) {
      std::vector<std::string> ignored;
      auto now = impl_->ListParents(conn, ignored);
      const VgpuType* again = now.ok() ? FindType(*now, request.parent, request.type_id) : nullptr;
      if (again != nullptr && again->available_instances == 0) {
        failed = Status::Error(ErrorCode::kNoRoom, failed.message());
      }
    }
    return kit::CreateFailed(failed, "vGPU " + uuid, request.type_id, request.parent);
  }
  return WaitUntilShown(*impl_, created.get(), *parents, uuid);
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
    return kit::RemoveFailed(Status::Error(ErrorCode::kGone, "libvirt does not list it"), uuid);
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
    return kit::RemoveFailed(failed, uuid);
  }
  if (virNodeDeviceDestroy(device.get()) < 0) {
    Status failed = LastError("virNodeDeviceDestroy");
    impl_->Check(failed);
    return kit::RemoveFailed(failed, uuid);
  }
  bool gone = kit::WaitFor(impl_->options.settle_timeout, impl_->options.settle_poll, [&] {
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
  explicit LibvirtSubscription(std::shared_ptr<libvirt_detail::Impl> impl)
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
  std::shared_ptr<libvirt_detail::Impl> impl_;
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
