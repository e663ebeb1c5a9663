// The DRA path to a Kata guest, on a real kernel: kubelet's NodePrepareResources (over gRPC, from
// the test kubelet written from upstream's protos) makes the vGPU of an allocated claim on the
// lab's mtty parent and answers CDI device IDs; the CDI spec is resolved as a container runtime
// does (kind and name to containerEdits); the VFIO group device it names is turned into the mdev as
// the Kata runtime does (/sys/kernel/iommu_groups/<group>/devices/: a UUID-named entry is an mdev)
// and hot-plugged into a QEMU through QMP `device_add` onto a pcie-root-port (hot_plug_vfio =
// "root-port"); the guest's PCI bus must show the mtty card. Then NodeUnprepareResources removes
// the vGPU. Kata's cold plug ignores DRA devices today (kata-containers#13322), which is why the
// hot-plug class is the one shown.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>

#include "deviceplugin/dra/device_name.h"
#include "fakes/common/dra_node.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "mdev/sysfs_backend.h"
#include "mdev/sysfs_io.h"
#include "tests/vm/lab_support.h"
#include "tests/vm/qemu_qmp.h"

namespace kvgpu::vmtest {
namespace {

using nlohmann::json;
using std::chrono::seconds;

constexpr const char* kParent = "mtty";
constexpr const char* kType = "mtty-2";

// The API server's answer for the one claim of this test; nothing else is asked.
class OneClaim : public kube::ApiTransport {
 public:
  explicit OneClaim(json claim) : claim_(std::move(claim)) {}
  Result<json> Get(const std::string& path, Canceller*) override {
    if (path != "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/vm-claim") {
      return Status::Error(ErrorCode::kHttp, "not found", 0);
    }
    return claim_;
  }
  Result<json> Post(const std::string&, const json&, Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }
  Result<json> Patch(const std::string&, const json&, const std::string&, Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }

 private:
  json claim_;
};

// A CDI device ID "<vendor>/<class>=<name>" resolved against the specs in `dir` as a runtime
// does: the spec of that kind, the device of that name; its edits and the spec's own, merged.
struct CdiEdits {
  std::vector<std::string> device_nodes;
  std::vector<std::string> env;
};
std::optional<CdiEdits> ResolveCdi(const fs::path& dir, const std::string& id) {
  const size_t eq = id.find('=');
  if (eq == std::string::npos) return std::nullopt;
  const std::string kind = id.substr(0, eq);
  const std::string name = id.substr(eq + 1);
  auto add = [](const json& edits, CdiEdits& out) {
    for (const json& node : edits.value("deviceNodes", json::array())) {
      out.device_nodes.push_back(node.at("path"));
    }
    for (const json& var : edits.value("env", json::array())) out.env.push_back(var);
  };
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    json spec = json::parse(in, nullptr, false);
    if (spec.is_discarded() || spec.value("kind", "") != kind) continue;
    for (const json& device : spec.value("devices", json::array())) {
      if (device.value("name", "") != name) continue;
      CdiEdits edits;
      add(device.value("containerEdits", json::object()), edits);
      add(spec.value("containerEdits", json::object()), edits);
      return edits;
    }
  }
  return std::nullopt;
}

// What the Kata runtime does with a /dev/vfio/<group> device: the group's members; a UUID-named
// member is an mdev, attached as sysfsdev=/sys/bus/mdev/devices/<uuid>.
std::vector<std::string> MdevsOfGroupDevice(const std::string& device_node) {
  const std::string group = fs::path(device_node).filename().string();
  std::vector<std::string> out;
  const std::regex uuid("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  std::error_code ec;
  for (const auto& member :
       fs::directory_iterator(fs::path("/sys/kernel/iommu_groups") / group / "devices", ec)) {
    const std::string name = member.path().filename().string();
    if (std::regex_match(name, uuid)) out.push_back(name);
  }
  return out;
}

class DraKataAttachVmTest : public LabTest {};

TEST_F(DraKataAttachVmTest, APreparedClaimsCdiDeviceHotPlugsIntoTheGuestAndUnprepareRemovesIt) {
  // The guest's /tmp: kubelet's sockets need a local filesystem (not the 9p share).
  const fs::path dir = fs::path("/tmp") / ("kvgpu-dra-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string device = deviceplugin::dra::DraDeviceName(kParent, kType, 0);
  OneClaim api(testing::MakeAllocatedClaim(
      "ns", "vm-claim", "uid-vm", {{"vgpu", testing::kDraDriver, testing::kDraNode, device}}));
  mdev::PosixSysfsIo io;
  mdev::SysfsBackend kernel("/", io);
  auto stack =
      testing::StartDra(kernel, api, testing::TestDraOptions(dir, {kParent}, /*serve=*/true));

  testing::DraTestKubelet kubelet(dir / "kubelet");
  ASSERT_TRUE(kubelet.Register(testing::kDraDriver).has_value());
  std::string rpc_error;
  auto answers = kubelet.Prepare({{"ns", "uid-vm", "vm-claim"}}, &rpc_error);
  ASSERT_EQ(rpc_error, "");
  const testing::DraClaimAnswer& answer = answers["uid-vm"];
  ASSERT_EQ(answer.error, "");
  ASSERT_EQ(answer.devices.size(), 1u);
  EXPECT_EQ(answer.devices[0].device, device);
  ASSERT_FALSE(answer.devices[0].cdi_device_ids.empty());
  ASSERT_EQ(MdevUuids().size(), 1u) << "the prepare made no mdev";
  const std::string made = MdevUuids()[0];

  // The runtime's side: the CDI ID to its device nodes, the group node to the mdev.
  std::optional<CdiEdits> edits = ResolveCdi(dir / "cdi", answer.devices[0].cdi_device_ids[0]);
  ASSERT_TRUE(edits.has_value()) << answer.devices[0].cdi_device_ids[0] << " not in the specs";
  std::vector<std::string> groups;
  for (const std::string& node : edits->device_nodes) {
    if (node != "/dev/vfio/vfio") groups.push_back(node);
  }
  ASSERT_EQ(groups.size(), 1u) << "one VFIO group device for one vGPU";
  EXPECT_TRUE(fs::exists(groups[0])) << groups[0] << " is not a device on this host";
  EXPECT_NE(std::find(edits->device_nodes.begin(), edits->device_nodes.end(), "/dev/vfio/vfio"),
            edits->device_nodes.end())
      << "the VFIO container device is missing";
  const std::vector<std::string> mdevs = MdevsOfGroupDevice(groups[0]);
  ASSERT_EQ(mdevs, std::vector<std::string>{made}) << "the group names another device";
  EXPECT_NE(std::find(edits->env.begin(), edits->env.end(), "KVGPU_VGPU_ID=" + made),
            edits->env.end());

  Qemu qemu({"pcie-root-port,id=rp0,bus=pcie.0,chassis=1,slot=1"});
  ASSERT_TRUE(qemu.Connect(seconds(60))) << "QMP never answered; QEMU said:\n" << Qemu::Log();
  const auto start = std::chrono::steady_clock::now();
  json added = qemu.Execute("device_add", {{"driver", "vfio-pci"},
                                           {"sysfsdev", (kMdevDevices / mdevs[0]).string()},
                                           {"id", "vgpu0"},
                                           {"bus", "rp0"}});
  ASSERT_TRUE(added.contains("return")) << added.dump();
  std::optional<json> card = qemu.WaitForPciDevice("vgpu0", seconds(60));
  ASSERT_TRUE(card.has_value()) << "the claim's vGPU never showed on the guest's PCI bus";
  EXPECT_EQ(card->at("id").at("vendor").get<int>(), kMttyVendor);
  EXPECT_EQ(card->at("id").at("device").get<int>(), kMttyDevice);
  EXPECT_NE(card->at("bus").get<int>(), 0) << "not behind the root port";
  std::cout << "dra: prepare to card on the guest's bus behind the root port "
            << MillisecondsSince(start) << " ms after device_add\n";
  EXPECT_EQ(qemu.Quit(seconds(30)), 0);

  // The pod is gone: kubelet unprepares and the vGPU goes.
  auto unprepared = kubelet.Unprepare({{"ns", "uid-vm", "vm-claim"}}, &rpc_error);
  EXPECT_EQ(rpc_error, "");
  EXPECT_EQ(unprepared["uid-vm"], "");
  EXPECT_TRUE(MdevUuids().empty()) << "the unprepare left the mdev";
  stack->Stop();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvgpu::vmtest
