// DRA device metadata (KEP-5304; deviceplugin/dra/device_metadata.h): the files the plugin writes
// at NodePrepareResources, checked against upstream's layout and schema (k8s.io/
// dynamic-resource-allocation kubeletplugin/metadata.go and api/metadata at kubernetes-1.36.2,
// api/metadata/v1beta1 in kubernetes/kubernetes master; docs/dra-kubelet-plugin.md, "Device
// metadata"), driven through kubelet's DRA gRPC (dra_test_kubelet.h) over a simulated node, the
// claims served by the fake API server.
#include "deviceplugin/dra/device_metadata.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "deviceplugin/config.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/common/dra_node.h"
#include "fakes/common/sim_node.h"
#include "fakes/common/temp_dir.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "kube/api_client.h"

namespace kvgpu::testing {
namespace {

using nlohmann::json;
namespace dra = deviceplugin::dra;

constexpr const char* kType = "nvidia-222";  // GRID T4-1B
constexpr const char* kContainerDir = "/var/run/kubernetes.io/dra-device-attributes";

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A JSON stream (upstream's metadata file): every top-level value in order.
std::vector<json> ReadStream(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  while ((in >> std::ws).peek() != std::char_traits<char>::eof()) {
    json j;
    in >> j;
    out.push_back(std::move(j));
  }
  return out;
}

// The front end as the daemon builds it (dra_node.h), with the metadata options the daemon passes
// from config dra.deviceMetadata, serving kubelet's sockets; what each metadata write was told.
struct MetaStack {
  MetaStack(mdev::Backend& raw, std::set<std::string> dra_gpus, const std::filesystem::path& dir,
            kube::ApiTransport& api, bool metadata_on) {
    dra::DraFrontEndOptions options = TestDraOptions(dir, std::move(dra_gpus), true);
    options.device_metadata = metadata_on;
    dra::DraObservers observers;
    observers.on_metadata_write = [this](bool ok, std::chrono::nanoseconds, size_t files) {
      std::lock_guard lock(writes_mutex);
      writes.emplace_back(ok, files);
    };
    front_end = StartDra(raw, api, std::move(options), std::move(observers));
  }

  dra::PreparedStore& claims() { return front_end->claims(); }
  dra::DraPlugin& plugin() { return front_end->plugin(); }
  deviceplugin::ResourceManager& manager() { return front_end->manager(); }

  std::mutex writes_mutex;
  std::vector<std::pair<bool, size_t>> writes;  // what on_write was told, in order
  std::unique_ptr<dra::DraFrontEnd> front_end;
};

class DraDeviceMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_server_.Start());
    auto client = kube::ApiClient::Create(api_server_.ClientConfig());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    api_ = std::move(client).value();
  }

  void StartDaemon(bool metadata_on = true) {
    stack_ = std::make_unique<MetaStack>(sim_->node(), std::set<std::string>{sim_->gpu(0)},
                                         dir_.path(), *api_, metadata_on);
    ASSERT_TRUE(kubelet_.Register(kDraDriver));
  }
  void StopDaemon() { stack_.reset(); }
  void UseNode(const std::string& profile) { sim_ = std::make_unique<SimNode>(profile); }

  DraClaim Claim(const std::string& name, const std::string& uid,
                 const std::vector<DraResult>& results, const json& annotations = nullptr) {
    json claim = MakeAllocatedClaim("ns", name, uid, results);
    if (!annotations.is_null()) claim["metadata"]["annotations"] = annotations;
    api_server_.SetResourceClaim(claim);
    return {"ns", uid, name};
  }
  DraResult Ours(const std::string& device, const std::string& request = "gpu") {
    return {request, kDraDriver, kDraNode, device};
  }
  std::string Gpu0Device(uint32_t slot, const std::string& type = kType) const {
    return DraName(sim_->gpu(0), type, slot);
  }

  std::filesystem::path MetaDir() const {
    return dir_.path() / "state" / std::string(dra::kMetadataHostSubDir);
  }
  std::filesystem::path HostFile(const std::string& claim, const std::string& request) const {
    return MetaDir() / ("ns_" + claim) / request / "metadata.json";
  }
  std::filesystem::path CdiSpec(const std::string& uid, const std::string& request) const {
    return dir_.path() / "cdi" /
           (std::string(kDraDriver) + "_metadata_" + uid + "_" + request + ".json");
  }
  std::string CdiId(const std::string& uid, const std::string& request) const {
    return std::string(kDraDriver) + "/metadata=" + uid + "_" + request;
  }
  // Every metadata file and metadata CDI spec there is.
  std::vector<std::string> MetadataFiles() const {
    std::vector<std::string> out;
    std::error_code ec;
    if (std::filesystem::exists(MetaDir())) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(MetaDir(), ec)) {
        if (!e.is_directory()) out.push_back(e.path().string());
      }
    }
    if (std::filesystem::exists(dir_.path() / "cdi")) {
      for (const auto& e : std::filesystem::directory_iterator(dir_.path() / "cdi", ec)) {
        if (e.path().filename().string().find("_metadata_") != std::string::npos) {
          out.push_back(e.path().string());
        }
      }
    }
    return out;
  }
  size_t Vgpus() { return sim_->model().VgpuIds().size(); }

  std::unique_ptr<SimNode> sim_ = std::make_unique<SimNode>("t4x2");
  TempDir dir_;
  FakeApiServer api_server_;
  std::unique_ptr<kube::ApiClient> api_;
  DraTestKubelet kubelet_{dir_.path() / "kubelet"};
  std::unique_ptr<MetaStack> stack_;
};

TEST_F(DraDeviceMetadataTest, FileCarriesTheUpstreamSchemaTheMdevUuidAndThePublishedAttributes) {
  StartDaemon();
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  auto answers = kubelet_.Prepare({c});
  ASSERT_EQ(answers["uid-1"].error, "");
  ASSERT_EQ(Vgpus(), 1u);
  const std::string mdev_uuid = sim_->model().VgpuIds().at(0);

  const std::string text = Read(HostFile("c1", "gpu"));
  ASSERT_FALSE(text.empty()) << HostFile("c1", "gpu");
  // Upstream's pretty serializer: TypeMeta first, kind before apiVersion, two-space indent.
  EXPECT_EQ(text.rfind("{\n  \"kind\": \"DeviceMetadata\",\n  \"apiVersion\": ", 0), 0u) << text;
  const std::vector<json> stream = ReadStream(text);
  ASSERT_EQ(stream.size(), 2u) << text;
  // Newest first: 1.37's beta, then the alpha 1.36 readers and KubeVirt v1.9 decode.
  EXPECT_EQ(stream[0]["apiVersion"], "metadata.resource.k8s.io/v1beta1");
  EXPECT_EQ(stream[1]["apiVersion"], "metadata.resource.k8s.io/v1alpha1");
  json beta = stream[0];
  beta["apiVersion"] = stream[1]["apiVersion"];
  EXPECT_EQ(beta, stream[1]) << "the versions carry the same metadata";

  const json& m = stream[1];
  EXPECT_EQ(m["kind"], "DeviceMetadata");
  EXPECT_EQ(m["metadata"],
            (json{{"name", "c1"}, {"namespace", "ns"}, {"uid", "uid-1"}, {"generation", 1}}));
  EXPECT_FALSE(m.contains("podClaimName")) << "a claim referenced by name has none";
  ASSERT_EQ(m["requests"].size(), 1u);
  EXPECT_EQ(m["requests"][0]["name"], "gpu");
  ASSERT_EQ(m["requests"][0]["devices"].size(), 1u);
  const json& d = m["requests"][0]["devices"][0];
  EXPECT_EQ(d["driver"], kDraDriver);
  EXPECT_EQ(d["pool"], kDraNode);
  EXPECT_EQ(d["name"], Gpu0Device(0));
  const json& a = d["attributes"];
  // What KubeVirt's virt-launcher reads for a mediated device: the vGPU the model made.
  EXPECT_EQ(a["mdevUUID"], (json{{"string", mdev_uuid}}));
  // The attributes the slices publish for the device, with their values (docs/dra.md).
  EXPECT_EQ(a["type"], (json{{"string", kType}}));
  EXPECT_EQ(a["typeName"], (json{{"string", "GRID T4-1B"}}));
  EXPECT_EQ(a["profile"], (json{{"string", "T4-1B"}}));
  EXPECT_EQ(a["gpuModel"], (json{{"string", "T4"}}));
  EXPECT_EQ(a["physicalGpu"], (json{{"string", sim_->gpu(0)}}));
  EXPECT_EQ(a["backend"], (json{{"string", "mdev"}}));
  EXPECT_EQ(a["resource.kubernetes.io/pciBusID"], (json{{"string", sim_->gpu(0)}}));
  EXPECT_TRUE(a.contains("occupancy"));
  EXPECT_TRUE(a.contains("pciDeviceId"));
  // v1beta1's limit (api/metadata/v1beta1/types.go, +k8s:maxProperties=32); each value one kind.
  EXPECT_LE(a.size(), 32u);
  for (const auto& [name, value] : a.items()) EXPECT_EQ(value.size(), 1u) << name;

  // The answer mounts it: the vGPU's CDI device, then the metadata's.
  ASSERT_EQ(answers["uid-1"].devices.size(), 1u);
  const auto& ids = answers["uid-1"].devices[0].cdi_device_ids;
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].rfind(std::string(kDraDriver) + "/vgpu-222=", 0), 0u) << ids[0];
  EXPECT_EQ(ids[1], CdiId("uid-1", "gpu"));
  EXPECT_EQ(std::filesystem::status(HostFile("c1", "gpu")).permissions() &
                std::filesystem::perms::others_read,
            std::filesystem::perms::others_read)
      << "virt-launcher reads it as a non-root user";
}

TEST_F(DraDeviceMetadataTest, CdiSpecMountsItReadOnlyAtTheUpstreamContainerPath) {
  StartDaemon();
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  ASSERT_EQ(kubelet_.Prepare({c})["uid-1"].error, "");
  const json spec = json::parse(Read(CdiSpec("uid-1", "gpu")), nullptr, false);
  ASSERT_TRUE(spec.is_object()) << CdiSpec("uid-1", "gpu");
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], std::string(kDraDriver) + "/metadata");
  ASSERT_EQ(spec["devices"].size(), 1u);
  EXPECT_EQ(spec["devices"][0]["name"], "uid-1_gpu");
  const json& mounts = spec["devices"][0]["containerEdits"]["mounts"];
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0]["hostPath"], HostFile("c1", "gpu").string());
  EXPECT_EQ(mounts[0]["containerPath"],
            std::string(kContainerDir) + "/resourceclaims/c1/gpu/" + kDraDriver + "-metadata.json");
  EXPECT_EQ(mounts[0]["options"], (json{"ro", "bind"}));
}

TEST_F(DraDeviceMetadataTest, ATemplateClaimIsMountedUnderItsPodClaimName) {
  StartDaemon();
  DraClaim c = Claim("pod-x-my-gpu-7k2q", "uid-t", {Ours(Gpu0Device(0), "gpu/small")},
                     {{"resource.kubernetes.io/pod-claim-name", "my-gpu"}});
  auto answers = kubelet_.Prepare({c});
  ASSERT_EQ(answers["uid-t"].error, "");
  // The path takes the base request; the file records the request with its subrequest.
  const json spec = json::parse(Read(CdiSpec("uid-t", "gpu")), nullptr, false);
  ASSERT_TRUE(spec.is_object());
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
            std::string(kContainerDir) + "/resourceclaimtemplates/my-gpu/gpu/" + kDraDriver +
                "-metadata.json");
  const std::vector<json> stream = ReadStream(Read(HostFile("pod-x-my-gpu-7k2q", "gpu")));
  ASSERT_EQ(stream.size(), 2u);
  EXPECT_EQ(stream[1]["podClaimName"], "my-gpu");
  EXPECT_EQ(stream[1]["metadata"]["name"], "pod-x-my-gpu-7k2q");
  EXPECT_EQ(stream[1]["requests"][0]["name"], "gpu/small");
  EXPECT_EQ(answers["uid-t"].devices[0].cdi_device_ids.back(), CdiId("uid-t", "gpu"));
}

TEST_F(DraDeviceMetadataTest, EachRequestGetsItsOwnFileMountedOnItsFirstDevice) {
  StartDaemon();
  DraClaim c =
      Claim("c1", "uid-1",
            {Ours(Gpu0Device(0), "a"), Ours(Gpu0Device(1), "a"), Ours(Gpu0Device(2), "b")});
  auto answers = kubelet_.Prepare({c});
  ASSERT_EQ(answers["uid-1"].error, "");
  ASSERT_EQ(answers["uid-1"].devices.size(), 3u);
  EXPECT_EQ(answers["uid-1"].devices[0].cdi_device_ids.back(), CdiId("uid-1", "a"));
  EXPECT_EQ(answers["uid-1"].devices[1].cdi_device_ids.size(), 1u) << "once per request";
  EXPECT_EQ(answers["uid-1"].devices[2].cdi_device_ids.back(), CdiId("uid-1", "b"));
  const std::vector<json> a = ReadStream(Read(HostFile("c1", "a")));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(a[1]["requests"][0]["devices"].size(), 2u);
  EXPECT_NE(a[1]["requests"][0]["devices"][0]["attributes"]["mdevUUID"],
            a[1]["requests"][0]["devices"][1]["attributes"]["mdevUUID"]);
  const std::vector<json> b = ReadStream(Read(HostFile("c1", "b")));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1]["requests"][0]["devices"][0]["name"], Gpu0Device(2));
}

TEST_F(DraDeviceMetadataTest, ARePreparedClaimKeepsItsFilesAndAnswer) {
  StartDaemon();
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  auto first = kubelet_.Prepare({c});
  ASSERT_EQ(first["uid-1"].error, "");
  const std::string file = Read(HostFile("c1", "gpu"));
  const std::string spec = Read(CdiSpec("uid-1", "gpu"));
  const int gets = api_server_.resource_claim_gets();
  auto again = kubelet_.Prepare({c});
  ASSERT_EQ(again["uid-1"].error, "");
  EXPECT_EQ(again["uid-1"].devices[0].cdi_device_ids, first["uid-1"].devices[0].cdi_device_ids);
  EXPECT_EQ(Read(HostFile("c1", "gpu")), file);
  EXPECT_EQ(Read(CdiSpec("uid-1", "gpu")), spec);
  EXPECT_EQ(api_server_.resource_claim_gets(), gets) << "answered from the checkpoint";
  EXPECT_EQ(Vgpus(), 1u);
}

TEST_F(DraDeviceMetadataTest, APrepareAnsweredFromTheCheckpointRestoresWipedFiles) {
  StartDaemon();
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))},
                     {{"resource.kubernetes.io/pod-claim-name", "my-gpu"}});
  auto first = kubelet_.Prepare({c});
  ASSERT_EQ(first["uid-1"].error, "");
  const std::string file = Read(HostFile("c1", "gpu"));
  const std::string spec = Read(CdiSpec("uid-1", "gpu"));
  std::filesystem::remove_all(MetaDir());
  std::filesystem::remove(CdiSpec("uid-1", "gpu"));
  StopDaemon();  // and across a restart
  StartDaemon();
  auto again = kubelet_.Prepare({c});
  ASSERT_EQ(again["uid-1"].error, "");
  EXPECT_EQ(again["uid-1"].devices[0].cdi_device_ids, first["uid-1"].devices[0].cdi_device_ids);
  EXPECT_EQ(Read(HostFile("c1", "gpu")), file);
  EXPECT_EQ(Read(CdiSpec("uid-1", "gpu")), spec) << "same pod claim name, same mount";
  EXPECT_EQ(Vgpus(), 1u);
}

TEST_F(DraDeviceMetadataTest, UnprepareRemovesExactlyTheClaimsFiles) {
  StartDaemon();
  DraClaim a = Claim("a", "uid-a", {Ours(Gpu0Device(0))});
  DraClaim b = Claim("b", "uid-b", {Ours(Gpu0Device(1))});
  auto answers = kubelet_.Prepare({a, b});
  ASSERT_EQ(answers["uid-a"].error, "");
  ASSERT_EQ(answers["uid-b"].error, "");
  ASSERT_EQ(MetadataFiles().size(), 4u);
  EXPECT_EQ(kubelet_.Unprepare({a})["uid-a"], "");
  EXPECT_FALSE(std::filesystem::exists(MetaDir() / "ns_a"));
  EXPECT_FALSE(std::filesystem::exists(CdiSpec("uid-a", "gpu")));
  EXPECT_TRUE(std::filesystem::exists(HostFile("b", "gpu")));
  EXPECT_TRUE(std::filesystem::exists(CdiSpec("uid-b", "gpu")));
  EXPECT_EQ(kubelet_.Unprepare({a})["uid-a"], "") << "again: nothing there is success";
  EXPECT_EQ(kubelet_.Unprepare({b})["uid-b"], "");
  EXPECT_EQ(MetadataFiles(), std::vector<std::string>{});
  EXPECT_EQ(Vgpus(), 0u);
}

TEST_F(DraDeviceMetadataTest, AnUnprepareAfterARestartRemovesThem) {
  StartDaemon();
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  ASSERT_EQ(kubelet_.Prepare({c})["uid-1"].error, "");
  ASSERT_EQ(MetadataFiles().size(), 2u);
  StopDaemon();
  StartDaemon();
  EXPECT_EQ(kubelet_.Unprepare({c})["uid-1"], "");
  EXPECT_EQ(MetadataFiles(), std::vector<std::string>{});
  EXPECT_EQ(Vgpus(), 0u);
}

TEST_F(DraDeviceMetadataTest, SwitchedOffAfterAPrepareTheUnprepareStillRemovesThem) {
  StartDaemon(true);
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  ASSERT_EQ(kubelet_.Prepare({c})["uid-1"].error, "");
  StopDaemon();
  StartDaemon(false);
  EXPECT_EQ(kubelet_.Unprepare({c})["uid-1"], "");
  EXPECT_EQ(MetadataFiles(), std::vector<std::string>{});
}

TEST_F(DraDeviceMetadataTest, SwitchedOffNothingIsWrittenAndOnlyTheVgpuIsAnswered) {
  StartDaemon(false);
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  auto answers = kubelet_.Prepare({c});
  ASSERT_EQ(answers["uid-1"].error, "");
  EXPECT_EQ(answers["uid-1"].devices[0].cdi_device_ids.size(), 1u);
  EXPECT_EQ(MetadataFiles(), std::vector<std::string>{});
}

TEST_F(DraDeviceMetadataTest, UnsafeNamesAreRefusedBeforeAnythingIsMade) {
  StartDaemon();
  struct Case {
    std::string what;
    std::string uid;
    std::string request;
    json annotations;
  };
  const std::vector<Case> cases = {
      {"a request that climbs out", "uid-1", "../../../../etc", nullptr},
      {"a request with a slash too many", "uid-2", "gpu/a/b", nullptr},
      {"a pod claim name that climbs out",
       "uid-3",
       "gpu",
       {{"resource.kubernetes.io/pod-claim-name", "../../x"}}},
      {"a UID that is a path", "uid-4/../../x", "gpu", nullptr},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    DraClaim c = Claim("c1", k.uid, {Ours(Gpu0Device(0), k.request)}, k.annotations);
    auto answers = kubelet_.Prepare({c});
    EXPECT_NE(answers[k.uid].error.find("device metadata:"), std::string::npos)
        << answers[k.uid].error;
    EXPECT_EQ(Vgpus(), 0u);
    EXPECT_FALSE(stack_->claims().Find(k.uid)) << "nothing checkpointed";
    EXPECT_EQ(MetadataFiles(), std::vector<std::string>{});
    api_server_.DeleteResourceClaim("ns", "c1");
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "etc"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "state" / "x"));
}

TEST_F(DraDeviceMetadataTest, AFileThatCannotBeWrittenFailsTheClaimAndLeavesNoFile) {
  StartDaemon();
  // The metadata directory cannot be made (a file is in its place; root ignores modes).
  std::filesystem::create_directories(MetaDir().parent_path());
  std::ofstream(MetaDir()) << "not a directory";
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0))});
  auto answers = kubelet_.Prepare({c});
  EXPECT_NE(answers["uid-1"].error.find("device metadata not written"), std::string::npos)
      << answers["uid-1"].error;
  {
    std::lock_guard lock(stack_->writes_mutex);
    EXPECT_EQ(stack_->writes, (std::vector<std::pair<bool, size_t>>{{false, 0}}))
        << "the failed write is told (write_errors_total)";
  }
  EXPECT_FALSE(std::filesystem::exists(CdiSpec("uid-1", "gpu")));
  // All or nothing per claim: the vGPU made before the failure is gone, the claim forgotten.
  EXPECT_EQ(Vgpus(), 0u);
  EXPECT_FALSE(stack_->claims().Find("uid-1"));

  // Fixed, kubelet's retry does the whole job ...
  std::filesystem::remove(MetaDir());
  auto again = kubelet_.Prepare({c});
  ASSERT_EQ(again["uid-1"].error, "");
  EXPECT_EQ(Vgpus(), 1u);
  EXPECT_EQ(again["uid-1"].devices[0].cdi_device_ids.back(), CdiId("uid-1", "gpu"));
  EXPECT_EQ(MetadataFiles().size(), 2u);
  EXPECT_EQ(stack_->plugin().MetadataFilesActive(), 1u);
  {
    std::lock_guard lock(stack_->writes_mutex);
    ASSERT_EQ(stack_->writes.size(), 2u);
    EXPECT_EQ(stack_->writes[1], (std::pair<bool, size_t>{true, 1}));
  }
  // ... and a CDI spec that cannot be put in place is refused the same way (a directory where
  // it goes: the rename fails).
  EXPECT_EQ(kubelet_.Unprepare({c})["uid-1"], "");
  std::filesystem::create_directories(CdiSpec("uid-2", "gpu") / "occupied");
  auto third = kubelet_.Prepare({Claim("c2", "uid-2", {Ours(Gpu0Device(0))})});
  EXPECT_NE(third["uid-2"].error.find("not written"), std::string::npos) << third["uid-2"].error;
  EXPECT_FALSE(std::filesystem::exists(HostFile("c2", "gpu"))) << "the half written is undone";
  EXPECT_EQ(Vgpus(), 0u) << "and so is the vGPU made for it";
}

TEST_F(DraDeviceMetadataTest, AVendorVfioVgpuIsNamedByItsVf) {
  UseNode("h200-vfio");
  StartDaemon();
  DraClaim c = Claim("c1", "uid-1", {Ours(Gpu0Device(0, "1428"))});
  auto answers = kubelet_.Prepare({c});
  ASSERT_EQ(answers["uid-1"].error, "");
  const auto records = stack_->manager().Snapshot().records;
  ASSERT_EQ(records.size(), 1u);
  const std::vector<json> stream = ReadStream(Read(HostFile("c1", "gpu")));
  ASSERT_EQ(stream.size(), 2u);
  const json& a = stream[1]["requests"][0]["devices"][0]["attributes"];
  // Not the GPU (the slot's slice names it): the VF the workload is given.
  EXPECT_EQ(a["resource.kubernetes.io/pciBusID"], (json{{"string", records[0].vgpu_id}}));
  EXPECT_NE(records[0].vgpu_id, sim_->gpu(0));
  EXPECT_EQ(a["physicalGpu"], (json{{"string", sim_->gpu(0)}}));
  EXPECT_EQ(a["backend"], (json{{"string", "vendor-vfio"}}));
  EXPECT_FALSE(a.contains("mdevUUID"));
}

TEST(DraDeviceMetadataConfig, OnByDefaultInUpstreamsPlaceAndSwitchable) {
  auto defaults = deviceplugin::ParseConfig("dra:\n  allGPUs: true\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_TRUE(defaults->dra.device_metadata);
  EXPECT_EQ(defaults->dra.device_metadata_dir, "");
  auto set = deviceplugin::ParseConfig(
      "dra:\n  allGPUs: true\n  deviceMetadata: false\n  deviceMetadataDir: /var/lib/m\n");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_FALSE(set->dra.device_metadata);
  EXPECT_EQ(set->dra.device_metadata_dir, "/var/lib/m");
  auto relative = deviceplugin::ParseConfig("dra:\n  deviceMetadataDir: meta\n");
  ASSERT_FALSE(relative.ok());
  EXPECT_NE(relative.status().message().find("dra.deviceMetadataDir"), std::string::npos);
  EXPECT_FALSE(deviceplugin::ParseConfig("dra:\n  deviceMetadata: maybe\n").ok());
}

}  // namespace
}  // namespace kvgpu::testing
