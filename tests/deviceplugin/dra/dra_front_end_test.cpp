// The DRA front end as one object (deviceplugin/dra/dra_front_end.h): where Start puts its state,
// the model it builds (the driver's resource names, CDI always, only the DRA GPUs), the parts the
// options leave out or add (kubelet's sockets, the slices), where device metadata goes, what the
// observers are told, and a Stop that undoes the serving and may be called twice.
#include "deviceplugin/dra/dra_front_end.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "fakes/kubelet/dra_test_kubelet.h"
#include "tests/deviceplugin/dra/dra_front_end_fixture.h"

namespace kvgpu::testing {
namespace {

namespace dra = deviceplugin::dra;

TEST_F(DraFrontEndTest, WithoutAStateDirectoryTheStateGoesWithKubeletsPluginDirectory) {
  Options options = Defaults();
  options.state_dir.clear();
  ASSERT_NO_FATAL_FAILURE(Start(std::move(options)));
  const std::filesystem::path plugin_dir =
      dra::DraPluginDir(dra::DraServerOptions{dir_.path() / "kubelet", kDraDriver});
  EXPECT_TRUE(std::filesystem::is_directory(plugin_dir / "model")) << plugin_dir;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "state"));
}

TEST_F(DraFrontEndTest, AGivenStateDirectoryHoldsTheModelsRecord) {
  ASSERT_NO_FATAL_FAILURE(Start(Defaults()));
  EXPECT_TRUE(std::filesystem::is_directory(dir_.path() / "state" / "model"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "kubelet"))
      << "nothing under kubelet's directory when its sockets are not served";
}

TEST_F(DraFrontEndTest, TheModelNamesResourcesUnderTheDriverAndAlwaysWritesCdiSpecs) {
  Options options = Defaults();
  options.model.naming.domain = "example.com";
  options.model.cdi_enabled = false;
  ASSERT_NO_FATAL_FAILURE(Start(std::move(options)));
  EXPECT_EQ(front_end().manager().options().naming.domain, kDraDriver);
  EXPECT_TRUE(front_end().manager().options().cdi_enabled)
      << "DRA hands devices to the runtime by CDI id only";
  for (const std::string& resource : front_end().manager().Resources()) {
    EXPECT_EQ(resource.rfind(std::string(kDraDriver) + "/", 0), 0u) << resource;
  }
}

TEST_F(DraFrontEndTest, TheModelSeesTheListedGpusOrEveryOtherOne) {
  struct Case {
    std::string description;
    bool all_but_listed;
    std::string seen;
  };
  const Case cases[] = {{"the listed GPU", false, sim_.gpu(0)},
                        {"every GPU but the listed one", true, sim_.gpu(1)}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    Options options = Defaults();
    options.all_but_listed = c.all_but_listed;
    options.state_dir = dir_.path() / (c.all_but_listed ? "state-all-but" : "state-listed");
    ASSERT_NO_FATAL_FAILURE(Start(std::move(options)));
    const auto pairs = front_end().manager().GpuTypes();
    ASSERT_FALSE(pairs.empty());
    for (const auto& [gpu, type] : pairs) EXPECT_EQ(gpu, c.seen) << type;
  }
}

TEST_F(DraFrontEndTest, KubeletsSocketsAreServedOnlyWhenAskedAndStopTakesThemAway) {
  ASSERT_NO_FATAL_FAILURE(Start(Defaults()));
  EXPECT_FALSE(front_end().serving());
  EXPECT_EQ(front_end().server(), nullptr);
  EXPECT_FALSE(front_end().LastReport().has_value());
  EXPECT_FALSE(std::filesystem::exists(front_end().RegistrationSocket()));

  Options served = Defaults();
  served.serve_kubelet = true;
  ASSERT_NO_FATAL_FAILURE(Start(std::move(served)));
  EXPECT_TRUE(front_end().serving());
  EXPECT_TRUE(std::filesystem::exists(front_end().RegistrationSocket()));
  front_end().Stop();
  front_end().Stop();  // a second Stop changes nothing
  EXPECT_FALSE(std::filesystem::exists(front_end().RegistrationSocket()));
}

TEST_F(DraFrontEndTest, EachClaimOfAKubeletCallIsReportedWithWhatIsPreparedAfterIt) {
  Options options = Defaults();
  options.serve_kubelet = true;
  options.device_metadata = true;
  ASSERT_NO_FATAL_FAILURE(Start(std::move(options)));
  DraTestKubelet kubelet(dir_.path() / "kubelet");
  ASSERT_TRUE(kubelet.Register(kDraDriver));
  const dra::ClaimRef ref = Claim("c1", "uid-1", {Ours(0)});
  auto answers = kubelet.Prepare({{ref.namespace_, ref.uid, ref.name}});
  ASSERT_EQ(answers["uid-1"].error, "");
  EXPECT_EQ(kubelet.Unprepare({{ref.namespace_, ref.uid, ref.name}})["uid-1"], "");
  const auto reports = claim_reports();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].call, dra::DraCall::kPrepare);
  EXPECT_TRUE(reports[0].ok);
  EXPECT_EQ(reports[0].claims, 1u);
  EXPECT_EQ(reports[0].metadata_files, 1u);
  EXPECT_EQ(reports[1].call, dra::DraCall::kUnprepare);
  EXPECT_TRUE(reports[1].ok);
  EXPECT_EQ(reports[1].claims, 0u);
  EXPECT_EQ(reports[1].metadata_files, 0u);
}

TEST_F(DraFrontEndTest, DeviceMetadataGoesBesideTheCheckpointUnlessGivenADirectory) {
  Options options = Defaults();
  options.device_metadata = true;
  ASSERT_NO_FATAL_FAILURE(Start(std::move(options)));
  ASSERT_EQ(plugin().Prepare(Claim("c1", "uid-1", {Ours(0)})).error, "");
  EXPECT_TRUE(std::filesystem::exists(HostFile("c1", "gpu")));

  const std::filesystem::path elsewhere = dir_.path() / "metadata-elsewhere";
  Options moved = Defaults();
  moved.device_metadata = true;
  moved.device_metadata_dir = elsewhere;
  moved.state_dir = dir_.path() / "state-2";
  ASSERT_NO_FATAL_FAILURE(Start(std::move(moved)));
  ASSERT_EQ(plugin().Prepare(Claim("c2", "uid-2", {Ours(1)})).error, "");
  EXPECT_TRUE(std::filesystem::exists(elsewhere / "ns_c2" / "gpu" / "metadata.json"));
}

TEST_F(DraFrontEndTest, AskedToPublishItWritesTheDraGpusSlices) {
  // The slices name their Node as owner: it has to exist.
  api_server_.SetNode({{"metadata", {{"name", kDraNode}, {"uid", "node-uid-1"}}}});
  Options options = Defaults();
  options.publish_slices = true;
  ASSERT_NO_FATAL_FAILURE(Start(std::move(options)));
  ASSERT_TRUE(Eventually([&] { return front_end().published(); }));
  // Told to the observer right after published() turns true.
  EXPECT_TRUE(Eventually([&] { return slice_writes() >= 1; }));
  const auto slices = api_server_.resource_slices();
  ASSERT_FALSE(slices.empty());
  std::set<std::string> gpus;
  for (const nlohmann::json& slice : slices) {
    const nlohmann::json& spec = slice.at("spec");
    EXPECT_EQ(spec.at("driver"), kDraDriver);
    EXPECT_EQ(spec.at("pool").at("name"), kDraNode);
    if (!spec.contains("devices")) continue;  // a slice of shared counters only
    for (const nlohmann::json& device : spec.at("devices")) {
      if (device.contains("attributes") && device.at("attributes").contains("physicalGpu")) {
        gpus.insert(device.at("attributes").at("physicalGpu").at("string").get<std::string>());
      }
    }
  }
  EXPECT_EQ(gpus, std::set<std::string>{sim_.gpu(0)}) << "only the DRA GPU is published";
}

}  // namespace
}  // namespace kvgpu::testing
