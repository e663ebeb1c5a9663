#include "mdev/gpu_filter_backend.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace kvgpu::mdev {

GpuFilterBackend::GpuFilterBackend(Backend& inner, std::set<std::string> gpus, bool keep_listed)
    : inner_(inner), gpus_(std::move(gpus)), keep_listed_(keep_listed) {}

bool GpuFilterBackend::Shows(const std::string& physical_gpu) const {
  return gpus_.contains(physical_gpu) == keep_listed_;
}

Result<Inventory> GpuFilterBackend::Scan() {
  Result<Inventory> scanned = inner_.Scan();
  if (!scanned.ok()) return scanned;
  Inventory inventory = std::move(scanned).value();
  {
    std::lock_guard lock(mutex_);
    physical_gpu_.clear();
    for (const Parent& p : inventory.parents) physical_gpu_[p.name] = p.physical_gpu;
  }
  std::erase_if(inventory.parents, [this](const Parent& p) { return !Shows(p.physical_gpu); });
  std::erase_if(inventory.vgpus, [this](const Vgpu& v) { return !Shows(v.physical_gpu); });
  return inventory;
}

Result<Vgpu> GpuFilterBackend::Create(const CreateRequest& request) {
  auto known = [&]() -> std::optional<std::string> {
    std::lock_guard lock(mutex_);
    auto it = physical_gpu_.find(request.parent);
    if (it == physical_gpu_.end()) return std::nullopt;
    return it->second;
  };
  std::optional<std::string> gpu = known();
  if (!gpu) {
    Result<Inventory> rescanned = Scan();
    if (!rescanned.ok()) return rescanned.status();
    gpu = known();
  }
  if (!gpu || !Shows(*gpu)) {
    return Status::Error(ErrorCode::kInvalid,
                         "parent " + request.parent + " is not served by this front end");
  }
  return inner_.Create(request);
}

Result<Inventory> GpuFilterBackend::ScanGpu(const std::string& physical_gpu) {
  if (!Shows(physical_gpu)) {
    return Status::Error(ErrorCode::kInvalid,
                         "GPU " + physical_gpu + " is not served by this front end");
  }
  return inner_.ScanGpu(physical_gpu);
}

Result<Inventory> GpuFilterBackend::ScanGpuRoom(const std::string& physical_gpu,
                                                const Inventory& known) {
  if (!Shows(physical_gpu)) {
    return Status::Error(ErrorCode::kInvalid,
                         "GPU " + physical_gpu + " is not served by this front end");
  }
  return inner_.ScanGpuRoom(physical_gpu, known);
}

}  // namespace kvgpu::mdev
