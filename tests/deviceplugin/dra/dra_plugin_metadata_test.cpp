// The DRA plugin's device-metadata files (deviceplugin/dra/dra_plugin_metadata.cpp), the plugin
// called directly: the files its prepared claims hold, each write told to the observer, wiped
// files of a claim the API server no longer has, and an unprepare that leaves the files of a newer
// claim of the same name. The files' contents and layout: device_metadata_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/deviceplugin/dra/dra_front_end_fixture.h"

namespace kvgpu::testing {
namespace {

using DraPluginMetadataTest = DraFrontEndTest;

DraFrontEndTest::Options WithMetadata(DraFrontEndTest::Options options, bool on = true) {
  options.device_metadata = on;
  return options;
}

TEST_F(DraPluginMetadataTest, TheFilesActiveAreOnePerRequestOfEachPreparedClaim) {
  ASSERT_NO_FATAL_FAILURE(Start(WithMetadata(Defaults())));
  EXPECT_EQ(plugin().MetadataFilesActive(), 0u);
  const auto a = Claim("a", "uid-a", {Ours(0, "first"), Ours(1, "second"), Ours(2, "second")});
  ASSERT_EQ(plugin().Prepare(a).error, "");
  EXPECT_EQ(plugin().MetadataFilesActive(), 2u) << "two requests, three devices";
  const auto b = Claim("b", "uid-b", {Ours(3)});
  ASSERT_EQ(plugin().Prepare(b).error, "");
  EXPECT_EQ(plugin().MetadataFilesActive(), 3u);
  ASSERT_EQ(plugin().Unprepare(a), "");
  EXPECT_EQ(plugin().MetadataFilesActive(), 1u);
}

TEST_F(DraPluginMetadataTest, SwitchedOffNoFileIsActive) {
  ASSERT_NO_FATAL_FAILURE(Start(WithMetadata(Defaults(), false)));
  ASSERT_EQ(plugin().Prepare(Claim("a", "uid-a", {Ours(0)})).error, "");
  EXPECT_EQ(plugin().MetadataFilesActive(), 0u);
  EXPECT_EQ(metadata_writes(), (std::vector<std::pair<bool, size_t>>{}));
}

TEST_F(DraPluginMetadataTest, EachWriteIsToldWithItsFilesAndAPrepareFromTheRecordWritesNone) {
  ASSERT_NO_FATAL_FAILURE(Start(WithMetadata(Defaults())));
  const auto a = Claim("a", "uid-a", {Ours(0, "first"), Ours(1, "second")});
  ASSERT_EQ(plugin().Prepare(a).error, "");
  EXPECT_EQ(metadata_writes(), (std::vector<std::pair<bool, size_t>>{{true, 2}}));
  ASSERT_EQ(plugin().Prepare(a).error, "");  // kubelet's retry: the files are there
  EXPECT_EQ(metadata_writes().size(), 1u);
}

TEST_F(DraPluginMetadataTest, AnswersTheMetadataDeviceOnceOnTheFirstDeviceOfItsRequest) {
  ASSERT_NO_FATAL_FAILURE(Start(WithMetadata(Defaults())));
  const auto answer = plugin().Prepare(Claim("a", "uid-a", {Ours(0), Ours(1)}));
  ASSERT_EQ(answer.error, "");
  ASSERT_EQ(answer.devices.size(), 2u);
  const std::string metadata = std::string(kDraDriver) + "/metadata=uid-a_gpu";
  ASSERT_EQ(answer.devices[0].cdi_device_ids.size(), 2u);
  EXPECT_EQ(answer.devices[0].cdi_device_ids[1], metadata);
  EXPECT_EQ(answer.devices[1].cdi_device_ids.size(), 1u) << "the vGPU's own id only";
}

TEST_F(DraPluginMetadataTest, WipedFilesOfAClaimTheApiServerNoLongerHasFailItsRePrepare) {
  ASSERT_NO_FATAL_FAILURE(Start(WithMetadata(Defaults())));
  const auto a = Claim("a", "uid-a", {Ours(0)});
  ASSERT_EQ(plugin().Prepare(a).error, "");
  std::filesystem::remove_all(MetadataDir());
  std::filesystem::remove(CdiSpec("uid-a", "gpu"));
  api_server_.DeleteResourceClaim("ns", "a");
  const auto again = plugin().Prepare(a);
  EXPECT_NE(again.error.find("device metadata gone and not restored"), std::string::npos)
      << again.error;
  EXPECT_FALSE(std::filesystem::exists(HostFile("a", "gpu")));
  EXPECT_EQ(Vgpus(), 1u) << "the claim's vGPU stays until kubelet unprepares it";
  std::optional<deviceplugin::dra::PreparedClaim> kept = front_end().claims().Find("uid-a");
  ASSERT_TRUE(kept.has_value());
  EXPECT_TRUE(kept->prepared);
  EXPECT_EQ(plugin().Unprepare(a), "");
  EXPECT_EQ(Vgpus(), 0u);
}

TEST_F(DraPluginMetadataTest, AnUnprepareLeavesTheFilesOfANewerClaimOfTheSameName) {
  ASSERT_NO_FATAL_FAILURE(Start(WithMetadata(Defaults())));
  const auto old_claim = Claim("a", "uid-old", {Ours(0)});
  ASSERT_EQ(plugin().Prepare(old_claim).error, "");
  // The claim is made anew under its name (a pod recreated) and prepared before the old one is
  // unprepared: both write under the claim's namespace and name.
  api_server_.DeleteResourceClaim("ns", "a");
  const auto new_claim = Claim("a", "uid-new", {Ours(1)});
  ASSERT_EQ(plugin().Prepare(new_claim).error, "");
  ASSERT_EQ(plugin().Unprepare(old_claim), "");
  EXPECT_FALSE(std::filesystem::exists(CdiSpec("uid-old", "gpu")));
  EXPECT_TRUE(std::filesystem::exists(CdiSpec("uid-new", "gpu")));
  EXPECT_TRUE(std::filesystem::exists(HostFile("a", "gpu"))) << "the newer claim's file stays";
  ASSERT_EQ(plugin().Unprepare(new_claim), "");
  EXPECT_FALSE(std::filesystem::exists(MetadataDir() / "ns_a"));
}

}  // namespace
}  // namespace kvgpu::testing
