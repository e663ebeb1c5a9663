// Parsing of NVIDIA type names, descriptions and vendor-VFIO type lists, from the shapes real
// drivers print (see tests/data/nvidia-sysfs.md for sources).
#include "mdev/nvidia.h"

#include <gtest/gtest.h>

namespace kvgpu::mdev {
namespace {

struct ProfileCase {
  const char* description;
  const char* name;
  std::optional<NvidiaProfile> want;
};

TEST(NvidiaProfile, ParsesGridAndNvidiaNamesWithSizeAndSlicesAndRejectsOthers) {
  const ProfileCase cases[] = {
      {"older GRID naming", "GRID T4-1Q", NvidiaProfile{"T4-1Q", "T4", 'Q', 1, 0}},
      {"B series", "GRID T4-1B", NvidiaProfile{"T4-1B", "T4", 'B', 1, 0}},
      {"B series with head count suffix", "GRID T4-2B4", NvidiaProfile{"T4-2B4", "T4", 'B', 2, 0}},
      {"newer NVIDIA naming", "NVIDIA A10-24Q", NvidiaProfile{"A10-24Q", "A10", 'Q', 24, 0}},
      {"SR-IOV compute profile", "GRID A100D-4C", NvidiaProfile{"A100D-4C", "A100D", 'C', 4, 0}},
      {"MIG-backed profile", "NVIDIA H200X-1-18C",
       NvidiaProfile{"H200X-1-18C", "H200X", 'C', 18, 1}},
      {"apps series", "GRID T4-8A", NvidiaProfile{"T4-8A", "T4", 'A', 8, 0}},
      {"surrounding blanks", "  GRID T4-16Q \n", NvidiaProfile{"T4-16Q", "T4", 'Q', 16, 0}},
      {"mtty name", "Single port serial", std::nullopt},
      {"no size part", "GRID T4-", std::nullopt},
      {"no series letter", "GRID T4-16", std::nullopt},
      {"size starts with a letter", "GRID T4-Q", std::nullopt},
      {"empty", "", std::nullopt},
      {"punctuation in gpu", "GRID T*4-1Q", std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    auto got = ParseNvidiaProfile(c.name);
    ASSERT_EQ(got.has_value(), c.want.has_value());
    if (!got) continue;
    EXPECT_EQ(got->profile, c.want->profile);
    EXPECT_EQ(got->gpu, c.want->gpu);
    EXPECT_EQ(got->series, c.want->series);
    EXPECT_EQ(got->size_gib, c.want->size_gib) << "the framebuffer the name gives";
    EXPECT_EQ(got->mig_slices, c.want->mig_slices) << "MIG-backed: the instance's slices";
  }
}

TEST(NvidiaDescription, ParsesTheDriversFormat) {
  auto got = ParseNvidiaDescription(
      "num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, max_instance=16");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->num_heads, 4u);
  EXPECT_EQ(got->frl_config, 45u);
  EXPECT_EQ(got->framebuffer_mib, 1024u);
  EXPECT_EQ(got->max_resolution, "5120x2880");
  EXPECT_EQ(got->max_instance, 16u);
}

struct DescriptionCase {
  const char* description;
  const char* text;
  bool ok;
  std::optional<uint64_t> framebuffer_mib;
};

TEST(NvidiaDescription, HandlesUnitsUnknownKeysAndGarbage) {
  const DescriptionCase cases[] = {
      {"gigabyte unit", "framebuffer=16G", true, 16384},
      {"no unit means MiB", "framebuffer=2048", true, 2048},
      {"unknown keys are ignored", "framebuffer=1024M, new_key=abc", true, 1024},
      {"empty description", "", true, std::nullopt},
      {"trailing comma", "framebuffer=1024M,", true, 1024},
      {"garbage framebuffer", "framebuffer=lots", false, std::nullopt},
      {"negative count", "max_instance=-1", false, std::nullopt},
      {"item without =", "num_heads 4", false, std::nullopt},
      {"bad resolution", "max_resolution=big", false, std::nullopt},
      {"overflowing count", "max_instance=99999999999", false, std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    auto got = ParseNvidiaDescription(c.text);
    ASSERT_EQ(got.ok(), c.ok) << got.status().ToString();
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), ErrorCode::kInvalid);
      continue;
    }
    EXPECT_EQ(got->framebuffer_mib, c.framebuffer_mib);
  }
}

TEST(CreatableVgpuTypes, ParsesHeaderAndTypes) {
  auto got = ParseCreatableVgpuTypes(
      "ID    : vGPU Name\n1428  : NVIDIA H200X-141C\n1414  : NVIDIA H200X-1-18C\n");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0], (std::pair<std::string, std::string>{"1428", "NVIDIA H200X-141C"}));
  EXPECT_EQ((*got)[1], (std::pair<std::string, std::string>{"1414", "NVIDIA H200X-1-18C"}));
}

TEST(CreatableVgpuTypes, HeaderOnlyMeansTheCardIsFull) {
  auto got = ParseCreatableVgpuTypes("ID    : vGPU Name\n");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty());
}

TEST(CreatableVgpuTypes, RejectsGarbageLinesWithTheirNumber) {
  for (const char* text : {"ID : vGPU Name\nfoo\n", "ID : vGPU Name\nabc : NVIDIA X-1C\n",
                           "ID : vGPU Name\n1414 :\n"}) {
    SCOPED_TRACE(text);
    auto got = ParseCreatableVgpuTypes(text);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), ErrorCode::kInvalid);
    EXPECT_NE(got.status().message().find("line 2"), std::string::npos);
  }
}

TEST(NvidiaMdevType, RecognisesNvidiaTypeIds) {
  EXPECT_TRUE(IsNvidiaMdevType("nvidia-222"));
  EXPECT_FALSE(IsNvidiaMdevType("nvidia-"));
  EXPECT_FALSE(IsNvidiaMdevType("nvidia-22x"));
  EXPECT_FALSE(IsNvidiaMdevType("mtty-2"));
  EXPECT_FALSE(IsNvidiaMdevType("i915-GVTg_V5_4"));
}

}  // namespace
}  // namespace kvgpu::mdev
