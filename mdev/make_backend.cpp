#include "mdev/make_backend.h"

#include "mdev/libvirt_backend.h"
#include "mdev/sysfs_backend.h"

namespace kvgpu::mdev {

Status ValidateBackendName(const std::string& name) {
  if (name == "sysfs" || name == "libvirt") return Status::Ok();
  return Status::Error(ErrorCode::kInvalid,
                       "backend \"" + name + "\" is not one of sysfs, libvirt");
}

Result<std::unique_ptr<Backend>> MakeBackend(const BackendChoice& choice,
                                             const std::filesystem::path& sysfs_root, SysfsIo& io) {
  if (Status valid = ValidateBackendName(choice.name); !valid.ok()) return valid;
  if (choice.name == "libvirt") {
    if (choice.libvirt_uri.empty()) {
      return Status::Error(ErrorCode::kInvalid, "the libvirt backend needs a URI");
    }
    LibvirtOptions options;
    options.uri = choice.libvirt_uri;
    options.sysfs_root = sysfs_root;
    return std::unique_ptr<Backend>(std::make_unique<LibvirtBackend>(options, io));
  }
  return std::unique_ptr<Backend>(std::make_unique<SysfsBackend>(sysfs_root, io));
}

}  // namespace kvgpu::mdev
