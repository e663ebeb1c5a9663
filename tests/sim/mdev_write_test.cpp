// Writes to `create` and `remove` on mdev parents: the errno of every failure, the device that
// appears, and the availability accounting of each driver (one type, or one framebuffer size in
// equal-size mode, per time-sliced GPU; one vGPU per VF; mtty's shared port pool).
#include <cerrno>
#include <map>
#include <set>

#include "sim_test_util.h"

namespace kvgpu::sim::testing {
namespace {

using MdevWriteTest = ModelTest;

constexpr const char* kVf0 = "0000:41:00.4";
constexpr const char* kVf1 = "0000:41:00.5";
constexpr const char* kVf2 = "0000:41:00.6";

struct Step {
  std::string parent;
  std::string type;
  std::string data;
};

struct CreateCase {
  std::string description;
  std::string profile;
  std::vector<Step> before;  // must all succeed
  Step write;
  int want_errno;
};

TEST_F(MdevWriteTest, CreateAnswersWithTheKernelsErrno) {
  const std::string u = Uuid(1);
  std::string upper = u;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::vector<Step> twelve_pairs;
  for (int i = 0; i < 12; ++i) twelve_pairs.push_back({"mtty", "mtty-2", Uuid(100 + i)});

  const CreateCase cases[] = {
      {"a UUID", "t4x2", {}, {kT4a, "nvidia-230", u}, 0},
      {"a trailing newline is accepted", "t4x2", {}, {kT4a, "nvidia-230", u + "\n"}, 0},
      {"upper-case hex is accepted", "t4x2", {}, {kT4a, "nvidia-230", upper}, 0},
      {"not hex", "t4x2", {}, {kT4a, "nvidia-230", "zb2c4e1a-0d3f-4a5b-8c6d-000000000001"}, EINVAL},
      {"too short", "t4x2", {}, {kT4a, "nvidia-230", u.substr(0, 35)}, EINVAL},
      {"dash misplaced",
       "t4x2",
       {},
       {kT4a, "nvidia-230", "9b2c4e1a0-d3f-4a5b-8c6d-000000000001"},
       EINVAL},
      {"two characters after the UUID", "t4x2", {}, {kT4a, "nvidia-230", u + "\n\n"}, EINVAL},
      {"empty write", "t4x2", {}, {kT4a, "nvidia-230", ""}, EINVAL},
      {"UUID taken on the same type",
       "t4x2",
       {{kT4a, "nvidia-230", u}},
       {kT4a, "nvidia-230", u},
       EEXIST},
      {"UUID taken on the other GPU",
       "t4x2",
       {{kT4a, "nvidia-230", u}},
       {kT4b, "nvidia-222", u},
       EEXIST},
      {"UUID taken, spelled in upper case",
       "t4x2",
       {{kT4a, "nvidia-230", u}},
       {kT4a, "nvidia-230", upper},
       EEXIST},
      {"UUID taken by another driver's parent",
       "mixed",
       {{"mtty", "mtty-1", u}},
       {kT4a, "nvidia-230", u},
       EEXIST},
      {"UUID check comes before the room check",
       "t4x2",
       {{kT4a, "nvidia-234", u}},
       {kT4a, "nvidia-234", u},
       EEXIST},
      {"T4-16Q: the GPU is full",
       "t4x2",
       {{kT4a, "nvidia-234", Uuid(2)}},
       {kT4a, "nvidia-234", u},
       ENOSPC},
      {"T4 locked to 1Q refuses 2Q",
       "t4x2",
       {{kT4a, "nvidia-230", Uuid(2)}},
       {kT4a, "nvidia-231", u},
       ENOSPC},
      {"the other T4 is not locked",
       "t4x2",
       {{kT4a, "nvidia-230", Uuid(2)}},
       {kT4b, "nvidia-231", u},
       0},
      {"SR-IOV: a VF holds one vGPU",
       "a100-sriov",
       {{kVf0, "nvidia-692", Uuid(2)}},
       {kVf0, "nvidia-692", u},
       ENOSPC},
      {"SR-IOV: the lock spans the GPU's VFs",
       "a100-sriov",
       {{kVf0, "nvidia-692", Uuid(2)}},
       {kVf1, "nvidia-693", u},
       ENOSPC},
      {"SR-IOV: same type on another VF",
       "a100-sriov",
       {{kVf0, "nvidia-697", Uuid(2)}},
       {kVf1, "nvidia-697", u},
       0},
      {"mtty: port pool used up", "mtty", twelve_pairs, {"mtty", "mtty-1", u}, ENOSPC},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load(c.profile);
    for (const auto& step : c.before) {
      ASSERT_TRUE(CreateMdev(step.parent, step.type, step.data).ok()) << step.data;
    }
    auto ids_before = model_->VgpuIds();
    std::string available_before = Available(c.write.parent, c.write.type);
    Status status = CreateMdev(c.write.parent, c.write.type, c.write.data);
    EXPECT_EQ(ErrnoOf(status), c.want_errno) << status.ToString();
    if (c.want_errno == 0) {
      EXPECT_EQ(model_->VgpuIds().size(), ids_before.size() + 1);
      EXPECT_TRUE(model_->IsDirectory(MdevDir(u))) << "the device is named in lower case";
    } else {
      EXPECT_EQ(model_->VgpuIds(), ids_before) << "a failed create changes nothing";
      EXPECT_EQ(Available(c.write.parent, c.write.type), available_before);
    }
  }
}

TEST_F(MdevWriteTest, TheMdevCoresOwnLimitAnswersEusers) {
  // mdpy and mbochs leave the count to the mdev core (max_instances), which says EUSERS.
  NodeProfile profile = ProfileByName("mtty").value();
  profile.gpus[0].address = "mdpy";
  profile.gpus[0].pool = 0;
  profile.gpus[0].types = {TypeSpec{}};
  profile.gpus[0].types[0].id = "mdpy-vga";
  profile.gpus[0].types[0].max_instances = 4;
  profile.gpus[0].types[0].mdev_core_limit = true;
  Load(profile);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(CreateMdev("mdpy", "mdpy-vga", Uuid(i)).ok());
  EXPECT_EQ(ErrnoOf(CreateMdev("mdpy", "mdpy-vga", Uuid(9))), EUSERS);
}

TEST_F(MdevWriteTest, CreatedMdevIsLinkedWhereKataAndTheLibraryLook) {
  Load("t4x2");
  ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(7)).ok());
  fs::path parent = fs::canonical(Sys() / "bus" / "pci" / "devices" / kT4a);
  fs::path device = parent / Uuid(7);

  EXPECT_EQ(model_->Canonical(MdevDir(Uuid(7))).value(), device);
  EXPECT_EQ(model_->ReadLink(MdevDir(Uuid(7))).value(),
            fs::path("../../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0/" + Uuid(7)));
  EXPECT_EQ(model_->ReadLink(device / "mdev_type").value(),
            fs::path("../mdev_supported_types/nvidia-230"));
  EXPECT_EQ(model_->Canonical(TypeDir(kT4a, "nvidia-230") / "devices" / Uuid(7)).value(), device);
  EXPECT_TRUE(model_->Exists(device / "remove"));

  auto group_link = model_->ReadLink(device / "iommu_group");
  ASSERT_TRUE(group_link.ok());
  EXPECT_EQ(group_link->parent_path(), fs::path("../../../../../kernel/iommu_groups"));
  std::string group = group_link->filename().string();
  // Kata looks up /sys/kernel/iommu_groups/<group>/devices/ and finds a UUID-named entry.
  auto members = model_->ListDir(Sys() / "kernel" / "iommu_groups" / group / "devices");
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members.value(), std::vector<std::string>{Uuid(7)});
  EXPECT_EQ(
      model_->Canonical(Sys() / "kernel" / "iommu_groups" / group / "devices" / Uuid(7)).value(),
      device);
}

TEST_F(MdevWriteTest, EachMdevGetsAFreshGroupAndFreedNumbersAreReused) {
  Load("t4x2");  // groups 0..3: root ports and GPUs
  auto group_of = [&](const std::string& uuid) {
    return model_->ReadLink(MdevDir(uuid) / "iommu_group").value().filename().string();
  };
  ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok());
  ASSERT_TRUE(CreateMdev(kT4b, "nvidia-230", Uuid(2)).ok());
  EXPECT_EQ(group_of(Uuid(1)), "4");
  EXPECT_EQ(group_of(Uuid(2)), "5");
  ASSERT_TRUE(RemoveMdev(Uuid(1)).ok());
  EXPECT_FALSE(model_->Exists(Sys() / "kernel" / "iommu_groups" / "4"));
  ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(3)).ok());
  EXPECT_EQ(group_of(Uuid(3)), "4") << "the kernel takes the lowest free group number";
}

struct AvailabilityCase {
  std::string description;
  std::string profile;
  std::vector<Step> creates;
  std::map<std::pair<std::string, std::string>, std::string> want;  // (parent, type) -> value
};

TEST_F(MdevWriteTest, AvailableInstancesFollowEachDriversRules) {
  const AvailabilityCase cases[] = {
      {"T4: the first vGPU locks the GPU to its type",
       "t4x2",
       {{kT4a, "nvidia-230", Uuid(1)}},
       {{{kT4a, "nvidia-230"}, "15\n"},
        {{kT4a, "nvidia-222"}, "0\n"},
        {{kT4a, "nvidia-234"}, "0\n"},
        {{kT4a, "nvidia-319"}, "0\n"},
        {{kT4b, "nvidia-230"}, "16\n"},
        {{kT4b, "nvidia-234"}, "1\n"}}},
      {"T4: its own type counts down",
       "t4x2",
       {{kT4a, "nvidia-232", Uuid(1)}, {kT4a, "nvidia-232", Uuid(2)}},
       {{{kT4a, "nvidia-232"}, "2\n"}, {{kT4a, "nvidia-231"}, "0\n"}}},
      {"T4 in equal-size mode: the first vGPU locks the GPU to its size, any series may join",
       "t4x2-equal-size",
       {{kT4a, "nvidia-230", Uuid(1)}, {kT4a, "nvidia-222", Uuid(2)}},
       {{{kT4a, "nvidia-230"}, "14\n"},
        {{kT4a, "nvidia-222"}, "14\n"},
        {{kT4a, "nvidia-225"}, "14\n"},
        {{kT4a, "nvidia-231"}, "0\n"},
        {{kT4a, "nvidia-234"}, "0\n"},
        {{kT4b, "nvidia-231"}, "8\n"}}},
      {"T4 in equal-size mode: another size is refused",
       "t4x2-equal-size",
       {{kT4a, "nvidia-232", Uuid(1)}},
       {{{kT4a, "nvidia-319"}, "3\n"}, {{kT4a, "nvidia-233"}, "0\n"}}},
      {"A100: the VF that holds one offers nothing",
       "a100-sriov",
       {{kVf0, "nvidia-697", Uuid(1)}},
       {{{kVf0, "nvidia-697"}, "0\n"},
        {{kVf0, "nvidia-692"}, "0\n"},
        {{kVf1, "nvidia-697"}, "1\n"},
        {{kVf1, "nvidia-692"}, "0\n"}}},
      {"A100: 40C twice fills the GPU on every VF",
       "a100-sriov",
       {{kVf0, "nvidia-697", Uuid(1)}, {kVf1, "nvidia-697", Uuid(2)}},
       {{{kVf2, "nvidia-697"}, "0\n"}, {{"0000:41:02.7", "nvidia-697"}, "0\n"}}},
      {"mixed: a T4 lock leaves the A100 and mtty alone",
       "mixed",
       {{kT4a, "nvidia-230", Uuid(1)}},
       {{{kT4a, "nvidia-222"}, "0\n"},
        {{kVf0, "nvidia-692"}, "1\n"},
        {{kVf0, "nvidia-698"}, "1\n"},
        {{"mtty", "mtty-1"}, "24\n"}}},
      {"mtty: one mtty-2 takes two ports",
       "mtty",
       {{"mtty", "mtty-2", Uuid(1)}},
       {{{"mtty", "mtty-2"}, "11\n"}, {{"mtty", "mtty-1"}, "22\n"}}},
      {"mtty: types mix, an odd port left over",
       "mtty",
       {{"mtty", "mtty-2", Uuid(1)}, {"mtty", "mtty-1", Uuid(2)}},
       {{{"mtty", "mtty-2"}, "10\n"}, {{"mtty", "mtty-1"}, "21\n"}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load(c.profile);
    for (const auto& step : c.creates) {
      ASSERT_TRUE(CreateMdev(step.parent, step.type, step.data).ok()) << step.data;
    }
    for (const auto& [where, value] : c.want) {
      EXPECT_EQ(Available(where.first, where.second), value) << where.first << " " << where.second;
    }
  }
}

TEST_F(MdevWriteTest, RemovingTheLastVgpuUnlocksTheGpu) {
  const struct {
    std::string description;
    std::string profile;
    std::vector<Step> creates;
  } cases[] = {
      {"T4", "t4x2", {{kT4a, "nvidia-230", Uuid(1)}, {kT4a, "nvidia-230", Uuid(2)}}},
      {"A100 across VFs",
       "a100-sriov",
       {{kVf0, "nvidia-697", Uuid(1)}, {kVf1, "nvidia-697", Uuid(2)}}},
      {"mtty pool", "mtty", {{"mtty", "mtty-2", Uuid(1)}, {"mtty", "mtty-1", Uuid(2)}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load(c.profile);
    auto snapshot = [&] {
      std::map<std::string, std::string> values;
      auto parents = model_->ListDir(Sys() / "class" / "mdev_bus");
      EXPECT_TRUE(parents.ok());
      for (const auto& parent : *parents) {
        auto types =
            model_->ListDir(Sys() / "class" / "mdev_bus" / parent / "mdev_supported_types");
        EXPECT_TRUE(types.ok());
        for (const auto& type : *types) values[parent + "/" + type] = Available(parent, type);
      }
      return values;
    };
    auto initial = snapshot();
    for (const auto& step : c.creates)
      ASSERT_TRUE(CreateMdev(step.parent, step.type, step.data).ok());
    ASSERT_NE(snapshot(), initial);
    ASSERT_TRUE(RemoveMdev(c.creates[0].data).ok());
    EXPECT_NE(snapshot(), initial) << "one vGPU still holds the GPU";
    ASSERT_TRUE(RemoveMdev(c.creates[1].data).ok());
    EXPECT_EQ(snapshot(), initial);
    EXPECT_TRUE(model_->VgpuIds().empty());
  }
}

struct RemoveCase {
  std::string description;
  std::string data;
  bool busy;
  int want_errno;
  bool still_there;
};

TEST_F(MdevWriteTest, RemoveAnswersWithTheKernelsErrno) {
  const RemoveCase cases[] = {
      {"1 removes", "1", false, 0, false},
      {"1 and a newline removes", "1\n", false, 0, false},
      {"any non-zero number removes", "0x2", false, 0, false},
      {"0 is accepted and does nothing", "0", false, 0, true},
      {"not a number", "yes", false, EINVAL, true},
      {"nothing", "", false, EINVAL, true},
      {"a number and more", "1 now", false, EINVAL, true},
      {"a VM holds it", "1", true, EBUSY, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load("t4x2");
    ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok());
    model_->SetBusy(Uuid(1), c.busy);
    Status status = RemoveMdev(Uuid(1), c.data);
    EXPECT_EQ(ErrnoOf(status), c.want_errno) << status.ToString();
    EXPECT_EQ(model_->Exists(MdevDir(Uuid(1))), c.still_there);
    EXPECT_EQ(Available(kT4a, "nvidia-230"), c.still_there ? "15\n" : "16\n");
  }
}

TEST_F(MdevWriteTest, ReleasedDeviceCanBeRemoved) {
  Load("t4x2");
  ASSERT_TRUE(CreateMdev(kT4a, "nvidia-230", Uuid(1)).ok());
  model_->SetBusy(Uuid(1), true);
  ASSERT_EQ(ErrnoOf(RemoveMdev(Uuid(1))), EBUSY);
  model_->SetBusy(Uuid(1), false);
  EXPECT_TRUE(RemoveMdev(Uuid(1)).ok());
}

TEST_F(MdevWriteTest, RemovingAGoneDeviceFailsToOpenWithEnoent) {
  Load("mtty");
  ASSERT_TRUE(CreateMdev("mtty", "mtty-1", Uuid(1)).ok());
  ASSERT_TRUE(RemoveMdev(Uuid(1)).ok());
  EXPECT_EQ(ErrnoOf(RemoveMdev(Uuid(1))), ENOENT);
  for (const fs::path& gone : {MdevDir(Uuid(1)), TypeDir("mtty", "mtty-1") / "devices" / Uuid(1),
                               model_->root() / "sys/devices/virtual/mtty/mtty" / Uuid(1)}) {
    EXPECT_FALSE(model_->Exists(gone)) << gone;
  }
}

struct AccessCase {
  std::string description;
  std::string path;  // under <root>/sys
  bool write;
  int want_errno;
};

TEST_F(MdevWriteTest, OtherAttributesRefuseAsSysfsDoes) {
  const std::string type = "class/mdev_bus/0000:3b:00.0/mdev_supported_types/nvidia-230/";
  const AccessCase cases[] = {
      {"create is write-only", type + "create", false, EACCES},
      {"available_instances is read-only", type + "available_instances", true, EACCES},
      {"name is read-only", type + "name", true, EACCES},
      {"description is read-only", type + "description", true, EACCES},
      {"vendor is read-only", "bus/pci/devices/0000:3b:00.0/vendor", true, EACCES},
      {"a directory", type.substr(0, type.size() - 1), true, EISDIR},
      {"no such type", "class/mdev_bus/0000:3b:00.0/mdev_supported_types/nvidia-999/create", true,
       ENOENT},
      {"no such parent", "class/mdev_bus/0000:3c:00.0/mdev_supported_types/nvidia-230/create", true,
       ENOENT},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Load("t4x2");
    fs::path path = Sys() / c.path;
    Status status = c.write ? model_->WriteFile(path, Uuid(1)) : model_->ReadFile(path).status();
    EXPECT_EQ(ErrnoOf(status), c.want_errno) << status.ToString();
    EXPECT_EQ(ErrnoOf(model_->CheckOpen(path, c.write)), c.want_errno) << "open(2) agrees";
    EXPECT_TRUE(model_->VgpuIds().empty());
  }
}

TEST_F(MdevWriteTest, CheckOpenLetsThroughWhatTheDriverServes) {
  Load("mixed");
  const std::string type = "class/mdev_bus/0000:3b:00.0/mdev_supported_types/nvidia-230/";
  ASSERT_TRUE(CreateMdev("mtty", "mtty-1", Uuid(1)).ok());
  const std::pair<std::string, bool> open_ok[] = {
      {type + "create", true},
      {type + "available_instances", false},
      {type + "name", false},
      {"bus/mdev/devices/" + Uuid(1) + "/remove", true},
  };
  for (const auto& [path, write] : open_ok) {
    SCOPED_TRACE(path);
    EXPECT_TRUE(model_->CheckOpen(Sys() / path, write).ok());
  }
  EXPECT_EQ(model_->VgpuIds().size(), 1u) << "CheckOpen only asks";
}

}  // namespace
}  // namespace kvgpu::sim::testing
