// Writes the ResourceSlices and DeviceClasses this project would publish for each simulated node
// (free, and with vGPUs that narrow it) as JSON files into the directory given, for
// resource_slices_schema.py to judge against the upstream OpenAPI schema with tools that share
// no code with the builder.
#include <fstream>
#include <iostream>

#include "deviceplugin/dra/device_classes.h"
#include "deviceplugin/dra/resource_slices.h"
#include "fakes/common/sim_node.h"
#include "sim/kernel_model.h"

using kvgpu::deviceplugin::GpuRules;
using nlohmann::json;
namespace dra = kvgpu::deviceplugin::dra;

namespace {

bool Write(const std::string& path, const json& doc) {
  std::ofstream out(path);
  out << doc.dump(1) << "\n";
  return static_cast<bool>(out);
}

bool Dump(const std::string& dir, const std::string& name,
          const kvgpu::mdev::Inventory& inventory) {
  dra::SliceOptions options;
  options.node_name = "node-" + name;
  const GpuRules rules(inventory, options.model.occupancy);
  auto slices = dra::BuildResourceSlices(inventory, rules, options, 3);
  if (!slices.ok()) {
    std::cerr << name << ": " << slices.status().ToString() << "\n";
    return false;
  }
  json list = json::array();
  for (json slice : *slices) {
    slice["metadata"]["ownerReferences"] = json::array(
        {{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", options.node_name}, {"uid", "u-1"}}});
    list.push_back(slice);
  }
  return Write(dir + "/slices-" + name + ".json", list);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: dra_dump_slices DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<kvgpu::mdev::VgpuType> types;
  for (const std::string& profile : kvgpu::sim::ProfileNames()) {
    kvgpu::testing::SimNode node(profile);
    auto free = node.node().Scan();
    if (!free.ok()) return 1;
    for (const auto& parent : free->parents) {
      types.insert(types.end(), parent.types.begin(), parent.types.end());
    }
    dra::TypeMemory memory;
    if (!Dump(dir, profile, memory.Remember(*free))) return 1;
    // One vGPU of the first type on the first GPU: the narrowed pool.
    const auto& parent = free->parents.front();
    if (parent.types.empty()) continue;
    if (!node.node().Create({parent.name, parent.types.front().id, std::nullopt}).ok()) return 1;
    auto used = node.node().Scan();
    if (!used.ok() || !Dump(dir, profile + "-used", memory.Remember(*used))) return 1;
  }
  auto classes = dra::TypeDeviceClasses(dra::kDefaultDriverName, {}, types);
  if (!classes.ok()) return 1;
  classes->push_back(dra::DriverDeviceClass(dra::kDefaultDriverName));
  return Write(dir + "/device-classes.json", *classes) ? 0 : 1;
}
