// A simulated node for tests and benchmarks: the kernel model of a built-in profile (sim/) laid
// out under a temp dir, and the mdev library's Node over it. Link kvgpu_sim and kvgpu_mdev.
#pragma once

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "fakes/common/temp_dir.h"
#include "mdev/sysfs_backend.h"
#include "sim/kernel_model.h"

namespace kvgpu::testing {

class SimNode {
 public:
  explicit SimNode(const std::string& profile_name, mdev::SysfsBackendOptions options = {}) {
    auto profile = sim::ProfileByName(profile_name);
    if (!profile.ok()) throw std::runtime_error(profile.status().ToString());
    auto model = sim::KernelModel::Create(dir_.path() / "root", *profile);
    if (!model.ok()) throw std::runtime_error(model.status().ToString());
    model_ = std::move(*model);
    node_ = std::make_unique<mdev::SysfsBackend>(model_->root(), *model_, options);
  }

  sim::KernelModel& model() { return *model_; }
  mdev::SysfsBackend& node() { return *node_; }
  const std::filesystem::path& dir() const { return dir_.path(); }
  const std::filesystem::path& root() const { return model_->root(); }
  std::string gpu(size_t index) const { return model_->profile().gpus.at(index).address; }

 private:
  TempDir dir_;
  std::unique_ptr<sim::KernelModel> model_;
  std::unique_ptr<mdev::SysfsBackend> node_;
};

}  // namespace kvgpu::testing
