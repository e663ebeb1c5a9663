// A simulated node for the mdev tests: the kernel model (sim/) laid out in a temp dir.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "fakes/common/temp_dir.h"
#include "mdev/node.h"
#include "sim/kernel_model.h"

namespace kvgpu::mdev {

class SimulatedNode {
 public:
  explicit SimulatedNode(const std::string& profile_name, NodeOptions options = {}) {
    auto profile = sim::ProfileByName(profile_name);
    if (!profile.ok()) throw std::runtime_error(profile.status().ToString());
    auto model = sim::KernelModel::Create(dir_.path() / "root", *profile);
    if (!model.ok()) throw std::runtime_error(model.status().ToString());
    model_ = std::move(*model);
    node_ = std::make_unique<Node>(model_->root(), *model_, options);
  }

  sim::KernelModel& model() { return *model_; }
  Node& node() { return *node_; }
  const fs::path& root() const { return model_->root(); }

  Inventory Scan() {
    auto inventory = node_->Scan();
    EXPECT_TRUE(inventory.ok()) << inventory.status().ToString();
    return inventory.ok() ? *inventory : Inventory{};
  }

  // Available instances of `type_id` on `parent` as discovery reports them; -1 when absent.
  int Available(const std::string& parent, const std::string& type_id) {
    Inventory inventory = Scan();
    const Parent* p = inventory.FindParent(parent);
    if (p == nullptr) return -1;
    for (const auto& type : p->types) {
      if (type.id == type_id) return static_cast<int>(type.available_instances);
    }
    return -1;
  }

  // Overwrites a file of the tree behind the model's back, as a surprising kernel would show it.
  void Overwrite(const fs::path& relative, const std::string& content) {
    std::ofstream(root() / relative, std::ios::trunc) << content;
  }

 private:
  testing::TempDir dir_;
  std::unique_ptr<sim::KernelModel> model_;
  std::unique_ptr<Node> node_;
};

}  // namespace kvgpu::mdev
