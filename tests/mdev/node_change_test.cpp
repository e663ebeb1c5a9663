// Create and remove through the library against the kernel model: what appears, what the
// kernel's accounting shows afterwards, and the typed error of every failure class.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "mdev/uuid.h"
#include "tests/mdev/node_test_support.h"

namespace kvgpu::mdev {
namespace {

constexpr const char* kUuidA = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
constexpr const char* kUuidB = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002";

class T4Node : public ::testing::Test {
 protected:
  SimulatedNode sim_{"t4x2"};
  std::string gpu0_ = sim_.model().profile().gpus.at(0).address;
  std::string gpu1_ = sim_.model().profile().gpus.at(1).address;
};

TEST_F(T4Node, CreateShowsTheMdevWithItsGroupAndLocksTheGpuToItsType) {
  auto vgpu = sim_.node().Create({gpu0_, "nvidia-222", std::string(kUuidA)});
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  EXPECT_EQ(vgpu->id, kUuidA);
  EXPECT_EQ(vgpu->flavour, Flavour::kMdev);
  EXPECT_EQ(vgpu->parent, gpu0_);
  EXPECT_EQ(vgpu->physical_gpu, gpu0_);
  EXPECT_EQ(vgpu->type_id, "nvidia-222");
  EXPECT_EQ(vgpu->type_name, "GRID T4-1B");
  ASSERT_TRUE(vgpu->iommu_group.has_value());
  EXPECT_EQ(vgpu->vfio_device, "/dev/vfio/" + std::to_string(*vgpu->iommu_group));

  Inventory inventory = sim_.Scan();
  const Vgpu* listed = inventory.FindVgpu(kUuidA);
  ASSERT_NE(listed, nullptr);
  EXPECT_EQ(listed->iommu_group, vgpu->iommu_group);
  EXPECT_EQ(sim_.Available(gpu0_, "nvidia-222"), 15);
  EXPECT_EQ(sim_.Available(gpu0_, "nvidia-223"), 0) << "other types must be locked out";
  EXPECT_EQ(sim_.Available(gpu1_, "nvidia-223"), 8) << "the other GPU stays free";
}

TEST_F(T4Node, RemoveMakesTheMdevGoAndFreesTheGpu) {
  ASSERT_TRUE(sim_.node().Create({gpu0_, "nvidia-222", std::string(kUuidA)}).ok());
  Status removed = sim_.node().Remove(kUuidA);
  ASSERT_TRUE(removed.ok()) << removed.ToString();
  EXPECT_TRUE(sim_.Scan().vgpus.empty());
  EXPECT_EQ(sim_.Available(gpu0_, "nvidia-222"), 16);
  EXPECT_EQ(sim_.Available(gpu0_, "nvidia-223"), 8);
}

TEST_F(T4Node, CreateWithoutUuidPicksARandomOneAndUpperCaseIsNormalised) {
  auto random = sim_.node().Create({gpu0_, "nvidia-222", std::nullopt});
  ASSERT_TRUE(random.ok());
  EXPECT_TRUE(IsValidUuid(random->id));
  auto upper = sim_.node().Create(
      {gpu0_, "nvidia-222", std::string("83B8F4F2-509F-382F-3C1E-E6BFE0FA1001")});
  ASSERT_TRUE(upper.ok()) << upper.status().ToString();
  EXPECT_EQ(upper->id, kUuidA);
}

struct CreateErrorCase {
  const char* description;
  std::function<void(SimulatedNode&, const std::string&, const std::string&)> prepare;
  std::function<CreateRequest(const std::string&, const std::string&)> request;
  ErrorCode want;
  const char* message_part;
};

TEST(NodeCreate, EveryFailureClassIsTypedAndChangesNothing) {
  auto create = [](const char* type, const char* uuid) {
    return [=](const std::string& gpu0, const std::string&) {
      return CreateRequest{gpu0, type, uuid ? std::optional<std::string>(uuid) : std::nullopt};
    };
  };
  auto nothing = [](SimulatedNode&, const std::string&, const std::string&) {};
  auto existing = [](SimulatedNode& sim, const std::string& gpu0, const std::string&) {
    ASSERT_TRUE(sim.node().Create({gpu0, "nvidia-222", std::string(kUuidA)}).ok());
  };
  const CreateErrorCase cases[] = {
      {"malformed UUID", nothing, create("nvidia-222", "not-a-uuid"), ErrorCode::kMalformedUuid,
       "not a UUID"},
      {"path-like UUID", nothing, create("nvidia-222", "../../x"), ErrorCode::kMalformedUuid,
       "not a UUID"},
      {"UUID exists, same type", existing, create("nvidia-222", kUuidA), ErrorCode::kExists,
       "already exists"},
      {"UUID exists, on the other GPU", existing,
       [](const std::string&, const std::string& gpu1) {
         return CreateRequest{gpu1, "nvidia-223", std::string(kUuidA)};
       },
       ErrorCode::kExists, "already exists"},
      {"GPU locked to another type", existing, create("nvidia-223", kUuidB), ErrorCode::kNoRoom,
       "no room"},
      {"unknown parent", nothing,
       [](const std::string&, const std::string&) {
         return CreateRequest{"0000:99:00.0", "nvidia-222", std::nullopt};
       },
       ErrorCode::kUnknownParent, "vgpuctl types"},
      {"unknown type", nothing, create("nvidia-999", kUuidB), ErrorCode::kUnknownType,
       "no type 'nvidia-999'"},
      {"type that escapes the parent", nothing, create("../../x", kUuidB), ErrorCode::kUnknownType,
       "no type"},
      {"no permission",
       [](SimulatedNode& sim, const std::string&, const std::string&) {
         sim.model().InjectFault(sim::Op::kWrite, "nvidia-222/create", EACCES);
       },
       create("nvidia-222", kUuidB), ErrorCode::kPermission, "run as root"},
      {"busy parent",
       [](SimulatedNode& sim, const std::string&, const std::string&) {
         sim.model().InjectFault(sim::Op::kWrite, "nvidia-222/create", EBUSY);
       },
       create("nvidia-222", kUuidB), ErrorCode::kBusy, "busy"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    SimulatedNode sim("t4x2");
    const std::string gpu0 = sim.model().profile().gpus.at(0).address;
    const std::string gpu1 = sim.model().profile().gpus.at(1).address;
    c.prepare(sim, gpu0, gpu1);
    auto before = sim.model().VgpuIds();
    auto got = sim.node().Create(c.request(gpu0, gpu1));
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), c.want) << got.status().ToString();
    EXPECT_NE(got.status().message().find(c.message_part), std::string::npos)
        << got.status().message();
    EXPECT_EQ(sim.model().VgpuIds(), before);
  }
}

TEST_F(T4Node, FullTypeReportsNoRoom) {
  // A type that takes the whole GPU (T4-16Q) fits once.
  std::string whole_gpu;
  for (const auto& type : sim_.model().profile().gpus.at(0).types) {
    if (type.max_instances == 1) whole_gpu = type.id;
  }
  ASSERT_FALSE(whole_gpu.empty());
  ASSERT_TRUE(sim_.node().Create({gpu0_, whole_gpu, std::string(kUuidA)}).ok());
  auto second = sim_.node().Create({gpu0_, whole_gpu, std::string(kUuidB)});
  EXPECT_EQ(second.status().code(), ErrorCode::kNoRoom);
  EXPECT_EQ(second.status().sys_errno(), ENOSPC);
}

TEST_F(T4Node, RemoveErrorsAreTypedAndKeepTheDevice) {
  EXPECT_EQ(sim_.node().Remove(kUuidA).code(), ErrorCode::kGone);
  EXPECT_EQ(sim_.node().Remove("not-a-uuid").code(), ErrorCode::kMalformedUuid);
  EXPECT_EQ(sim_.node().Remove("../../../etc").code(), ErrorCode::kMalformedUuid);

  ASSERT_TRUE(sim_.node().Create({gpu0_, "nvidia-222", std::string(kUuidA)}).ok());
  sim_.model().SetBusy(kUuidA, true);
  Status busy = sim_.node().Remove(kUuidA);
  EXPECT_EQ(busy.code(), ErrorCode::kBusy);
  EXPECT_NE(busy.message().find("in use"), std::string::npos);
  EXPECT_NE(sim_.Scan().FindVgpu(kUuidA), nullptr);

  sim_.model().SetBusy(kUuidA, false);
  EXPECT_TRUE(sim_.node().Remove(kUuidA).ok());
  EXPECT_EQ(sim_.node().Remove(kUuidA).code(), ErrorCode::kGone);
}

// Wraps the model but drops writes, so the kernel never shows what was asked for.
class WriteSwallower : public SysfsIo {
 public:
  explicit WriteSwallower(SysfsIo& inner) : inner_(inner) {}
  Result<std::string> ReadFile(const fs::path& p) override { return inner_.ReadFile(p); }
  Status WriteFile(const fs::path&, std::string_view) override { return Status::Ok(); }
  Result<std::vector<std::string>> ListDir(const fs::path& p) override { return inner_.ListDir(p); }
  Result<fs::path> ReadLink(const fs::path& p) override { return inner_.ReadLink(p); }
  Result<fs::path> Canonical(const fs::path& p) override { return inner_.Canonical(p); }
  bool Exists(const fs::path& p) override { return inner_.Exists(p); }
  bool IsDirectory(const fs::path& p) override { return inner_.IsDirectory(p); }

 private:
  SysfsIo& inner_;
};

TEST_F(T4Node, CreateAndRemoveVerifyTheKernelsAnswerWithinABoundedWait) {
  WriteSwallower swallower(sim_.model());
  SysfsBackend node(sim_.root(), swallower,
                    {.settle_timeout = std::chrono::milliseconds(50),
                     .settle_poll = std::chrono::milliseconds(1),
                     .proc_root = {}});
  auto created = node.Create({gpu0_, "nvidia-222", std::string(kUuidA)});
  EXPECT_EQ(created.status().code(), ErrorCode::kTimeout);

  ASSERT_TRUE(sim_.node().Create({gpu0_, "nvidia-222", std::string(kUuidB)}).ok());
  EXPECT_EQ(node.Remove(kUuidB).code(), ErrorCode::kTimeout);
}

TEST(NodeCreate, SriovAllowsOneVgpuPerVirtualFunctionAndNamesThePhysicalGpu) {
  SimulatedNode sim("a100-sriov");
  const std::string pf = sim.model().profile().gpus.at(0).address;
  Inventory inventory = sim.Scan();
  const std::string vf = inventory.parents.at(0).name;
  auto vgpu = sim.node().Create({vf, "nvidia-692", std::string(kUuidA)});
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  EXPECT_EQ(vgpu->parent, vf);
  EXPECT_EQ(vgpu->physical_gpu, pf);
  EXPECT_EQ(sim.node().Create({vf, "nvidia-692", std::string(kUuidB)}).status().code(),
            ErrorCode::kNoRoom);
  EXPECT_EQ(sim.Scan().FindVgpu(kUuidA)->physical_gpu, pf);
}

TEST(NodeCreate, MttyTypesShareOnePool) {
  SimulatedNode sim("mtty");
  ASSERT_TRUE(sim.node().Create({"mtty", "mtty-2", std::string(kUuidA)}).ok());
  EXPECT_EQ(sim.Available("mtty", "mtty-2"), 11);
  EXPECT_EQ(sim.Available("mtty", "mtty-1"), 22);
}

class H200Node : public ::testing::Test {
 protected:
  void SetUp() override {
    Inventory inventory = sim_.Scan();
    for (const auto& parent : inventory.parents) vfs_.push_back(parent.name);
    ASSERT_GE(vfs_.size(), 2u);
  }
  // MIG on with GPU instances made: the MIG-backed 1414 goes on any free VF while one is free.
  SimulatedNode sim_{"h200-mig"};
  std::vector<std::string> vfs_;
};

TEST_F(H200Node, CreateWritesTheTypeAndTheVirtualFunctionIsTheDevice) {
  auto vgpu = sim_.node().Create({vfs_[0], "1414", std::nullopt});
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  EXPECT_EQ(vgpu->id, vfs_[0]);
  EXPECT_EQ(vgpu->flavour, Flavour::kVendorVfio);
  EXPECT_EQ(vgpu->type_name, "NVIDIA H200X-1-18C");
  ASSERT_TRUE(vgpu->iommu_group.has_value());
  EXPECT_EQ(vgpu->physical_gpu, sim_.model().profile().gpus.at(0).address);

  Inventory inventory = sim_.Scan();
  const Vgpu* listed = inventory.FindVgpu(vfs_[0]);
  ASSERT_NE(listed, nullptr);
  EXPECT_EQ(listed->type_id, "1414");
  EXPECT_EQ(inventory.FindParent(vfs_[0])->types.size(), 0u) << "an occupied VF creates nothing";

  EXPECT_TRUE(sim_.node().Remove(vfs_[0]).ok());
  EXPECT_TRUE(sim_.Scan().vgpus.empty());
  EXPECT_EQ(sim_.node().Remove(vfs_[0]).code(), ErrorCode::kGone);
}

TEST_F(H200Node, FailuresAreTyped) {
  ASSERT_TRUE(sim_.node().Create({vfs_[0], "1414", std::nullopt}).ok());
  EXPECT_EQ(sim_.node().Create({vfs_[0], "1414", std::nullopt}).status().code(),
            ErrorCode::kExists);
  EXPECT_EQ(sim_.node().Create({vfs_[1], "9999", std::nullopt}).status().code(),
            ErrorCode::kUnknownType);
  EXPECT_EQ(sim_.node().Create({vfs_[1], "abc", std::nullopt}).status().code(),
            ErrorCode::kUnknownType);
  EXPECT_EQ(sim_.node().Create({vfs_[1], "1414", std::string(kUuidA)}).status().code(),
            ErrorCode::kInvalid);
  // The time-sliced whole-GPU type with MIG on: no VF lists it.
  EXPECT_EQ(sim_.node().Create({vfs_[1], "1428", std::nullopt}).status().code(),
            ErrorCode::kUnknownType);
}

// The VF path outlives its vGPU and the next owner reuses it, so a release must not clear what
// is not ours: a process (a VM) holding the VF's group open keeps it (kBusy, nothing written), and
// a VF that now holds another type than the one we made is another owner's (kGone, untouched).
TEST_F(H200Node, AReleaseNeverClearsAVfHeldOpenOrTypedByAnotherOwner) {
  auto vgpu = sim_.node().Create({vfs_[0], "1414", std::nullopt});
  ASSERT_TRUE(vgpu.ok()) << vgpu.status().ToString();
  const std::filesystem::path fd_dir = sim_.root() / "proc" / "4242" / "fd";
  std::filesystem::create_directories(fd_dir);
  std::filesystem::create_directories(sim_.root() / "proc" / "self");  // not a pid: skipped
  std::filesystem::create_symlink("/dev/null", fd_dir / "0");
  std::filesystem::create_symlink(vgpu->vfio_device, fd_dir / "9");

  Status held = sim_.node().RemoveIfType(vfs_[0], "1414");
  EXPECT_EQ(held.code(), ErrorCode::kBusy) << held.ToString();
  EXPECT_NE(held.message().find("4242"), std::string::npos) << held.message();
  ASSERT_NE(sim_.Scan().FindVgpu(vfs_[0]), nullptr) << "a VF held open was cleared";

  std::filesystem::remove(fd_dir / "9");
  Status foreign = sim_.node().RemoveIfType(vfs_[0], "1428");
  EXPECT_EQ(foreign.code(), ErrorCode::kGone) << foreign.ToString();
  ASSERT_NE(sim_.Scan().FindVgpu(vfs_[0]), nullptr) << "another owner's type was cleared";

  EXPECT_TRUE(sim_.node().RemoveIfType(vfs_[0], "1414").ok());
  EXPECT_EQ(sim_.Scan().FindVgpu(vfs_[0]), nullptr);
}

TEST(H200WholeGpu, TypeNamesStayKnownWhenTheCardIsFull) {
  // MIG off: one whole-GPU vGPU fills the card, every creatable list shrinks to its header.
  SimulatedNode sim("h200-vfio");
  const std::string vf = sim.Scan().parents.at(0).name;
  ASSERT_TRUE(sim.node().Create({vf, "1428", std::nullopt}).ok());
  Inventory inventory = sim.Scan();
  for (const auto& parent : inventory.parents) EXPECT_TRUE(parent.types.empty()) << parent.name;
  const Vgpu* vgpu = inventory.FindVgpu(vf);
  ASSERT_NE(vgpu, nullptr);
  EXPECT_EQ(vgpu->type_name, "NVIDIA H200X-141C");
  EXPECT_EQ(sim.node().KnownTypeNames().at("1428"), "NVIDIA H200X-141C");

  // A fresh SysfsBackend (a restarted daemon) learns names only from what it is told or sees.
  SysfsBackend restarted(sim.root(), sim.model());
  auto blind = restarted.Scan();
  ASSERT_TRUE(blind.ok());
  EXPECT_FALSE(blind->FindVgpu(vf)->type_name.has_value());
  restarted.RememberTypeNames(sim.node().KnownTypeNames());
  EXPECT_EQ(restarted.Scan()->FindVgpu(vf)->type_name, "NVIDIA H200X-141C");
}

}  // namespace
}  // namespace kvgpu::mdev
