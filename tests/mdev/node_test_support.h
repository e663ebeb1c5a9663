// A simulated node for the mdev tests: fakes/common/sim_node.h and discovery helpers.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "fakes/common/sim_node.h"
#include "mdev/sysfs_backend.h"
#include "sim/kernel_model.h"

namespace kvgpu::mdev {

// fakes/common's SimNode with what the mdev tests ask of it: discovery, and surprises.
class SimulatedNode : public kvgpu::testing::SimNode {
 public:
  using SimNode::SimNode;

  Inventory Scan() {
    auto inventory = node().Scan();
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
};

}  // namespace kvgpu::mdev
