// One mode per GPU: a Backend that shows its user only some physical GPUs. The daemon gives the
// device plugin's model a view without the GPUs the DRA front end serves, and the DRA model a view
// with only those, so no GPU is ever advertised by both (docs/dra-kubelet-plugin.md). A vGPU on a
// hidden GPU is not in the view at all: neither model can take it for its own or touch it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "mdev/backend.h"

namespace kvgpu::mdev {

class GpuFilterBackend : public Backend {
 public:
  // `keep_listed`: show only the GPUs in `gpus`; else show every GPU except them. A GPU is named
  // by its PCI address ("0000:3b:00.0"); for an SR-IOV VF, by its PF's (Parent::physical_gpu).
  GpuFilterBackend(Backend& inner, std::set<std::string> gpus, bool keep_listed);

  const char* Name() const override { return inner_.Name(); }
  Result<Inventory> Scan() override;
  // Refused (kInvalid) for a parent outside the view (as of the last scan; a parent never seen
  // is scanned for once); the kernel is not asked.
  Result<Vgpu> Create(const CreateRequest& request) override;
  Status Remove(const std::string& id) override { return inner_.Remove(id); }
  Status RemoveIfType(const std::string& id, const std::string& type_id) override {
    return inner_.RemoveIfType(id, type_id);
  }
  Result<std::unique_ptr<EventSubscription>> WatchChanges(
      std::function<void(const std::string& what)> changed) override {
    return inner_.WatchChanges(std::move(changed));
  }
  BackendHealth Health() const override { return inner_.Health(); }
  // The inner backend's, for a GPU in the view (kInvalid for another: the kernel is not asked).
  // Without it the model behind the filter never read a GPU again after its own create, and its
  // counts showed the GPU in a mode it was not in until the next rescan.
  Result<Inventory> ScanGpu(const std::string& physical_gpu) override;
  Result<Inventory> ScanGpuRoom(const std::string& physical_gpu, const Inventory& known) override;

  bool Shows(const std::string& physical_gpu) const;

 private:
  Backend& inner_;
  std::set<std::string> gpus_;
  bool keep_listed_;
  std::mutex mutex_;
  std::map<std::string, std::string> physical_gpu_;  // every parent of the last scan -> its GPU
};

}  // namespace kvgpu::mdev
