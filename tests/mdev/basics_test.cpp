// UUIDs, errno mapping and the POSIX sysfs seam on plain files.
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <set>

#include "common/status.h"
#include "fakes/common/temp_dir.h"
#include "mdev/sysfs_io.h"
#include "mdev/uuid.h"

namespace kvgpu::mdev {
namespace {

TEST(Uuid, AcceptsWhatTheKernelParsesAndRejectsTheRest) {
  EXPECT_TRUE(IsValidUuid("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"));
  EXPECT_TRUE(IsValidUuid("83B8F4F2-509F-382F-3C1E-E6BFE0FA1001"));
  EXPECT_FALSE(IsValidUuid("83b8f4f2-509f-382f-3c1e-e6bfe0fa100"));
  EXPECT_FALSE(IsValidUuid("83b8f4f2509f-382f-3c1e-e6bfe0fa10011"));
  EXPECT_FALSE(IsValidUuid("83b8f4f2-509f-382f-3c1e-e6bfe0fa100g"));
  EXPECT_FALSE(IsValidUuid("../../../../etc/passwd-xxxxxxxxxxxxxx"));
  EXPECT_FALSE(IsValidUuid(""));
  EXPECT_EQ(NormalizeUuid("83B8F4F2-509F-382F-3C1E-E6BFE0FA1001"),
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001");
}

TEST(Uuid, NewUuidsAreValidVersion4AndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string uuid = NewUuid();
    ASSERT_TRUE(IsValidUuid(uuid)) << uuid;
    EXPECT_EQ(uuid[14], '4');
    EXPECT_NE(std::string("89ab").find(uuid[19]), std::string::npos);
    seen.insert(uuid);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(Status, MapsEachKernelErrnoToATypedError) {
  const std::pair<int, ErrorCode> cases[] = {
      {EINVAL, ErrorCode::kInvalid},   {EEXIST, ErrorCode::kExists},
      {ENOSPC, ErrorCode::kNoRoom},    {EUSERS, ErrorCode::kNoRoom},
      {ENOENT, ErrorCode::kGone},      {ENODEV, ErrorCode::kGone},
      {EBUSY, ErrorCode::kBusy},       {EACCES, ErrorCode::kPermission},
      {EPERM, ErrorCode::kPermission}, {EIO, ErrorCode::kIo},
  };
  for (const auto& [err, code] : cases) {
    SCOPED_TRACE(err);
    Status status = Status::FromErrno(err, "writing create");
    EXPECT_EQ(status.code(), code);
    EXPECT_EQ(status.sys_errno(), err);
    EXPECT_NE(status.message().find("writing create"), std::string::npos);
  }
}

class PosixSysfsIoTest : public ::testing::Test {
 protected:
  void Write(const fs::path& path, const std::string& content) { std::ofstream(path) << content; }
  testing::TempDir dir_;
  PosixSysfsIo io_;
};

TEST_F(PosixSysfsIoTest, ReadsAttributesWithoutTrailingNewline) {
  Write(dir_.path() / "available_instances", "16\n");
  auto value = ReadAttribute(io_, dir_.path() / "available_instances");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "16");
}

TEST_F(PosixSysfsIoTest, NeverCreatesAMissingAttributeOnWrite) {
  Status status = io_.WriteFile(dir_.path() / "create", "x");
  EXPECT_EQ(status.code(), ErrorCode::kGone);
  EXPECT_FALSE(fs::exists(dir_.path() / "create"));
}

TEST_F(PosixSysfsIoTest, ListsDirectoriesSortedAndReadsLinks) {
  fs::create_directory(dir_.path() / "b");
  fs::create_directory(dir_.path() / "a");
  fs::create_directory_symlink("../../kernel/iommu_groups/12", dir_.path() / "iommu_group");
  auto names = io_.ListDir(dir_.path());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "iommu_group"}));
  auto group = LinkName(io_, dir_.path() / "iommu_group");
  ASSERT_TRUE(group.ok());
  EXPECT_EQ(*group, "12");
  EXPECT_EQ(LinkName(io_, dir_.path() / "a").status().code(), ErrorCode::kInvalid);
  EXPECT_EQ(io_.ListDir(dir_.path() / "missing").status().code(), ErrorCode::kGone);
}

// sysfs names a device by relative links through several directories (class -> devices ->
// the PCI path): the kernel's one-walk resolution must give what the component-by-component one
// gives, from an absolute or a relative start, and fail as open(2) fails.
TEST_F(PosixSysfsIoTest, ResolvesLinkChainsAsCanonicalDoesAndFailsAsOpenDoes) {
  const fs::path root = fs::canonical(dir_.path());
  fs::create_directories(root / "sys/devices/pci0000:00/0000:3b:00.0/mdev_supported_types/t");
  fs::create_directories(root / "sys/class/mdev_bus");
  fs::create_directory_symlink("../../devices/pci0000:00/0000:3b:00.0",
                               root / "sys/class/mdev_bus/0000:3b:00.0");
  Write(root / "sys/devices/pci0000:00/0000:3b:00.0/mdev_supported_types/t/available_instances",
        "4\n");
  const fs::path through =
      root / "sys/class/mdev_bus/0000:3b:00.0/mdev_supported_types/t" / "available_instances";
  auto resolved = ResolvePath(through);
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(*resolved, fs::canonical(through));
  EXPECT_EQ(*io_.Canonical(root / "sys/class/mdev_bus/0000:3b:00.0"),
            root / "sys/devices/pci0000:00/0000:3b:00.0");

  const fs::path cwd = fs::current_path();
  fs::current_path(root / "sys/class");
  auto relative = ResolvePath("mdev_bus/0000:3b:00.0/..");
  fs::current_path(cwd);
  ASSERT_TRUE(relative.ok()) << relative.status().ToString();
  EXPECT_EQ(*relative, root / "sys/devices/pci0000:00") << "'..' after a link leaves its target";

  Status missing = ResolvePath(root / "sys/class/mdev_bus/0000:af:00.0").status();
  EXPECT_EQ(missing.code(), ErrorCode::kGone);
  EXPECT_EQ(missing.sys_errno(), ENOENT);
  fs::create_directory_symlink("../../devices/gone", root / "sys/class/mdev_bus/0000:af:00.0");
  EXPECT_EQ(ResolvePath(root / "sys/class/mdev_bus/0000:af:00.0").status().sys_errno(), ENOENT)
      << "a dangling link";
}

}  // namespace
}  // namespace kvgpu::mdev
