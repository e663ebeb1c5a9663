// SysfsBackend::ScanGpuRoom: what a create or remove moves on a GPU, read without re-reading the
// GPU whole. Against the kernel model of every simulated GPU shape, after each change the narrow
// read must give what a whole read of the GPU (ScanGpu) gives, and it must read only the files that
// change.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/mdev/node_test_support.h"

namespace kvgpu::mdev {
namespace {

// What a view is made of, in one comparable string per parent and per vGPU.
std::vector<std::string> Described(const Inventory& inventory) {
  std::vector<std::string> out;
  for (const Parent& p : inventory.parents) {
    std::string line = "parent " + p.name + " of " + p.physical_gpu + ":";
    for (const VgpuType& t : p.types) {
      line += " " + t.id + "=" + std::to_string(t.available_instances) + "(" +
              t.name.value_or("?") + ")";
    }
    out.push_back(line);
  }
  for (const Vgpu& v : inventory.vgpus) {
    out.push_back("vgpu " + v.id + " " + v.type_id + "(" + v.type_name.value_or("?") + ") on " +
                  v.parent + " of " + v.physical_gpu + " group " +
                  (v.iommu_group ? std::to_string(*v.iommu_group) : "none"));
  }
  return out;
}

// The view the model keeps: the last whole scan, then its own changes applied as NodeState
// applies them before it reads the GPU's room (the vGPU made added, the vGPU removed dropped).
class ModelView {
 public:
  explicit ModelView(Inventory scanned) : view_(std::move(scanned)) {}
  void Created(const Vgpu& vgpu) { view_.vgpus.push_back(vgpu); }
  void Removed(const std::string& id) {
    std::erase_if(view_.vgpus, [&](const Vgpu& v) { return v.id == id; });
  }
  // The GPU's part of the view replaced by what was read, as NodeState::RereadGpu does.
  void Take(const std::string& gpu, const Inventory& fresh) {
    std::erase_if(view_.parents, [&](const Parent& p) { return p.physical_gpu == gpu; });
    std::erase_if(view_.vgpus, [&](const Vgpu& v) { return v.physical_gpu == gpu; });
    view_.parents.insert(view_.parents.end(), fresh.parents.begin(), fresh.parents.end());
    view_.vgpus.insert(view_.vgpus.end(), fresh.vgpus.begin(), fresh.vgpus.end());
  }
  const Inventory& view() const { return view_; }

 private:
  Inventory view_;
};

void ExpectRoomIsWholeRead(SysfsBackend& node, ModelView& model, const std::string& gpu,
                           const std::string& after) {
  auto room = node.ScanGpuRoom(gpu, model.view());
  auto whole = node.ScanGpu(gpu);
  ASSERT_TRUE(room.ok()) << after << ": " << room.status().ToString();
  ASSERT_TRUE(whole.ok()) << after << ": " << whole.status().ToString();
  EXPECT_EQ(Described(*room), Described(*whole)) << after;
  model.Take(gpu, *room);
}

// A free type of one of `gpu`'s parents other than `except`'s, as the view shows it.
std::optional<CreateRequest> SomethingToMake(const Inventory& view, const std::string& gpu,
                                             const std::string& except_parent = "") {
  for (const Parent& p : view.parents) {
    if (p.physical_gpu != gpu || p.name == except_parent) continue;
    for (const VgpuType& t : p.types) {
      if (t.available_instances > 0) return CreateRequest{p.name, t.id, std::nullopt};
    }
  }
  return std::nullopt;
}

class EveryShape : public ::testing::TestWithParam<const char*> {};

TEST_P(EveryShape, AfterEachCreateAndRemoveTheRoomReadIsWhatAWholeReadOfTheGpuShows) {
  SimulatedNode sim(GetParam());
  SysfsBackend& node = sim.node();
  const std::string gpu = sim.model().profile().gpus.at(0).address;
  ModelView model(sim.Scan());

  std::vector<Vgpu> made;
  std::string last_parent;
  for (int round = 0; round < 3; ++round) {
    std::optional<CreateRequest> request = SomethingToMake(model.view(), gpu, last_parent);
    if (!request) break;
    auto vgpu = node.Create(*request);
    ASSERT_TRUE(vgpu.ok()) << request->parent << " " << request->type_id << ": "
                           << vgpu.status().ToString();
    model.Created(*vgpu);
    made.push_back(*vgpu);
    last_parent = request->parent;
    ExpectRoomIsWholeRead(node, model, gpu, "create " + request->type_id + " on " + last_parent);
  }
  ASSERT_FALSE(made.empty()) << "the shape offers nothing to make on " << gpu;
  for (const Vgpu& vgpu : made) {
    ASSERT_TRUE(node.Remove(vgpu.id).ok()) << vgpu.id;
    model.Removed(vgpu.id);
    ExpectRoomIsWholeRead(node, model, gpu, "remove " + vgpu.id);
  }
}

INSTANTIATE_TEST_SUITE_P(RoomRead, EveryShape,
                         ::testing::Values("t4x2", "t4x2-equal-size", "a100-sriov", "h200-vfio",
                                           "h200-mig", "l40s-vfio", "rtxpro6000-mig"),
                         [](const ::testing::TestParamInfo<const char*>& shape) {
                           std::string name = shape.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Counts the calls that reach the kernel.
class CountingIo : public SysfsIo {
 public:
  explicit CountingIo(SysfsIo& inner) : inner_(inner) {}
  Result<std::string> ReadFile(const fs::path& p) override {
    ++reads;
    return inner_.ReadFile(p);
  }
  Status WriteFile(const fs::path& p, std::string_view d) override {
    return inner_.WriteFile(p, d);
  }
  Result<std::vector<std::string>> ListDir(const fs::path& p) override {
    ++other;
    return inner_.ListDir(p);
  }
  Result<fs::path> ReadLink(const fs::path& p) override {
    ++other;
    return inner_.ReadLink(p);
  }
  Result<fs::path> Canonical(const fs::path& p) override {
    ++other;
    return inner_.Canonical(p);
  }
  bool Exists(const fs::path& p) override {
    ++other;
    return inner_.Exists(p);
  }
  bool IsDirectory(const fs::path& p) override {
    ++other;
    return inner_.IsDirectory(p);
  }
  int reads = 0;
  int other = 0;

 private:
  SysfsIo& inner_;
};

TEST(RoomRead, AnMdevGpuIsReadOneAvailableInstancesFilePerTypeAndNothingElse) {
  SimulatedNode sim("t4x2");
  const std::string gpu = sim.model().profile().gpus.at(0).address;
  CountingIo io(sim.model());
  SysfsBackend node(sim.root(), io);
  ModelView model(sim.Scan());
  auto vgpu = node.Create({gpu, "nvidia-222", std::nullopt});
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  model.Created(*vgpu);
  const size_t types = model.view().FindParent(gpu)->types.size();

  io.reads = io.other = 0;
  auto room = node.ScanGpuRoom(gpu, model.view());
  ASSERT_TRUE(room.ok()) << room.status().ToString();
  EXPECT_EQ(io.reads, static_cast<int>(types));
  EXPECT_EQ(io.other, 0) << "no listing, link or path walk beyond the files read";
  EXPECT_EQ(Described(*room), Described(*node.ScanGpu(gpu)));
}

TEST(RoomRead, AGpuTheViewDoesNotHoldOrThatChangedUnderItIsReadWhole) {
  SimulatedNode sim("t4x2");
  const std::string gpu = sim.model().profile().gpus.at(0).address;
  auto whole = sim.node().ScanGpu(gpu);
  ASSERT_TRUE(whole.ok());

  auto unknown = sim.node().ScanGpuRoom(gpu, Inventory{});
  ASSERT_TRUE(unknown.ok()) << unknown.status().ToString();
  EXPECT_EQ(Described(*unknown), Described(*whole)) << "an empty view";

  // A type the view holds that the kernel no longer shows (a driver reloaded with other types).
  Inventory stale = sim.Scan();
  for (Parent& p : stale.parents) {
    if (p.name != gpu) continue;
    VgpuType vanished;
    vanished.id = "nvidia-999";
    p.types.push_back(vanished);
  }
  auto reread = sim.node().ScanGpuRoom(gpu, stale);
  ASSERT_TRUE(reread.ok()) << reread.status().ToString();
  EXPECT_EQ(Described(*reread), Described(*whole)) << "a vanished type";

  // A count the kernel shows oddly, in a type the view holds.
  Inventory before = sim.Scan();
  sim.Overwrite(fs::path("sys/class/mdev_bus") / gpu / "mdev_supported_types/nvidia-223" /
                    "available_instances",
                "lots\n");
  auto odd = sim.node().ScanGpuRoom(gpu, before);
  auto odd_whole = sim.node().ScanGpu(gpu);
  ASSERT_TRUE(odd.ok() && odd_whole.ok());
  EXPECT_EQ(Described(*odd), Described(*odd_whole)) << "the whole read skips the odd type";
  EXPECT_FALSE(odd->warnings.empty()) << "and says so";
}

}  // namespace
}  // namespace kvgpu::mdev
