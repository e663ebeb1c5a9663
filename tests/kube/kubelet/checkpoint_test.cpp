// kubelet's device-manager checkpoint: both real formats read as kubelet wrote them, and every
// kind of damage refused with a message that says what is wrong.
#include "kube/kubelet/checkpoint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "fakes/common/temp_dir.h"

namespace kvgpu::kubelet {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(KVGPU_KUBE_TEST_DATA) + "/" + name, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CheckpointTest, ReadsThePre120ListFormat) {
  auto checkpoint = ParseCheckpoint(Fixture("checkpoint-v1-list.json"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->format, CheckpointFormat::kList);
  EXPECT_EQ(checkpoint->checksum, 229855270u);
  ASSERT_EQ(checkpoint->entries.size(), 1u);
  const auto& entry = checkpoint->entries[0];
  EXPECT_EQ(entry.pod_uid, "970a395d-bb3b-11e8-89df-408d5c537d23");
  EXPECT_EQ(entry.container_name, "appcntr1");
  EXPECT_EQ(entry.resource_name, "intel.com/sriov_net_A");
  EXPECT_EQ(entry.DeviceIds(), (std::vector<std::string>{"0000:03:02.3", "0000:03:02.0"}));
  EXPECT_EQ(entry.device_ids_by_numa.count(-1), 1u) << "a list lands on the no-topology node";
  // AllocResp is the ContainerAllocateResponse protobuf: field 1 (envs) is tag 0x0a.
  ASSERT_FALSE(entry.alloc_resp.empty());
  EXPECT_EQ(entry.alloc_resp[0], '\x0a');
  EXPECT_EQ(checkpoint->registered_devices.at("intel.com/sriov_net_B").size(), 4u);
}

TEST(CheckpointTest, ReadsThe120NumaMapFormat) {
  auto checkpoint = ParseCheckpoint(Fixture("checkpoint-v2-numa.json"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->format, CheckpointFormat::kNumaMap);
  EXPECT_EQ(checkpoint->checksum, 2530956716u);
  ASSERT_EQ(checkpoint->entries.size(), 1u);
  const auto& entry = checkpoint->entries[0];
  EXPECT_EQ(entry.resource_name, "nvidia.com/gpu");
  ASSERT_EQ(entry.device_ids_by_numa.count(1), 1u);
  EXPECT_EQ(entry.DeviceIds(),
            (std::vector<std::string>{"GPU-9b341c59-f96b-ba85-c137-78c3652fea65",
                                      "GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"}));
  EXPECT_NE(entry.alloc_resp.find("NVIDIA_VISIBLE_DEVICES"), std::string::npos);
  const auto holders =
      checkpoint->EntriesWith("nvidia.com/gpu", "GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841");
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0]->pod_uid, "9a15d2b5-c152-46b9-96e0-d57032629e1f");
  EXPECT_TRUE(
      checkpoint->EntriesWith("nvidia.com/gpu", "GPU-77a702db-e37f-3a74-d46d-c5713f66058c").empty())
      << "registered but not allocated";
  EXPECT_TRUE(
      checkpoint->EntriesWith("other.com/gpu", "GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841").empty());
}

TEST(CheckpointTest, AReusedIdShowsBothEntries) {
  const std::string text = R"({"Data":{"PodDeviceEntries":[
    {"PodUID":"old","ContainerName":"c","ResourceName":"r","DeviceIDs":{"-1":["d1"]},"AllocResp":null},
    {"PodUID":"new","ContainerName":"c","ResourceName":"r","DeviceIDs":{"-1":["d1"]},"AllocResp":""}],
    "RegisteredDevices":null},"Checksum":1})";
  auto checkpoint = ParseCheckpoint(text);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->EntriesWith("r", "d1").size(), 2u);
}

TEST(CheckpointTest, EmptyKubeletStateIsValid) {
  // What a fresh kubelet writes: Go's nil slice and map are null.
  auto checkpoint =
      ParseCheckpoint(R"({"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":0})");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->format, CheckpointFormat::kEmpty);
  EXPECT_TRUE(checkpoint->entries.empty());
}

TEST(CheckpointTest, DamageIsAClearError) {
  const std::string real = Fixture("checkpoint-v2-numa.json");
  const std::string entry_head = R"({"Data":{"PodDeviceEntries":[)";
  const std::string tail = R"(]},"Checksum":1})";
  struct Case {
    std::string description;
    std::string text;
    std::string expected_in_message;
  };
  const std::vector<Case> cases = {
      {"empty file", "", "empty"},
      {"truncated mid-write", real.substr(0, real.size() / 2), "not valid JSON"},
      {"garbage",
       "\x7f"
       "ELF\x02\x01",
       "not valid JSON"},
      {"not an object", "[]", "not a JSON object"},
      {"no Data", R"({"Checksum":1})", "no Data"},
      {"no Checksum", R"({"Data":{}})", "Checksum"},
      {"entries not a list", R"({"Data":{"PodDeviceEntries":{}},"Checksum":1})", "not a list"},
      {"entry without PodUID",
       entry_head + R"({"ContainerName":"c","ResourceName":"r","DeviceIDs":[]})" + tail,
       "PodDeviceEntries[0].PodUID"},
      {"entry without DeviceIDs",
       entry_head + R"({"PodUID":"u","ContainerName":"c","ResourceName":"r"})" + tail,
       "DeviceIDs is missing"},
      {"DeviceIDs a number",
       entry_head + R"({"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":3})" + tail,
       "neither a list nor a map"},
      {"NUMA key not a number",
       entry_head +
           R"({"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":{"x":["d"]}})" +
           tail,
       "NUMA node \"x\""},
      {"ID not a string",
       entry_head + R"({"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":[1]})" +
           tail,
       "other than strings"},
      {"mixed formats",
       entry_head +
           R"({"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":["a"]},)"
           R"({"PodUID":"v","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["b"]}})" +
           tail,
       "PodDeviceEntries[1] mixes"},
      {"AllocResp not base64",
       entry_head +
           R"({"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":[],"AllocResp":"%%"})" +
           tail,
       "AllocResp"},
      {"registered devices not lists", R"({"Data":{"RegisteredDevices":{"r":"d"}},"Checksum":1})",
       "RegisteredDevices[\"r\"]"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    auto checkpoint = ParseCheckpoint(c.text);
    ASSERT_FALSE(checkpoint.ok());
    EXPECT_EQ(checkpoint.status().code(), ErrorCode::kDecode);
    EXPECT_NE(checkpoint.status().message().find(c.expected_in_message), std::string::npos)
        << checkpoint.status().message();
  }
}

TEST(CheckpointTest, MissingFileIsNotFoundAndNamesThePath) {
  kvgpu::testing::TempDir dir;
  auto checkpoint = ReadCheckpoint(CheckpointPath(dir.path()));
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), ErrorCode::kGone);
  EXPECT_NE(checkpoint.status().message().find("device-plugins/kubelet_internal_checkpoint"),
            std::string::npos);
}

}  // namespace
}  // namespace kvgpu::kubelet
