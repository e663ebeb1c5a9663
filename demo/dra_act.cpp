// The DRA act: the node of the earlier acts moved to the DRA front end the documented way (config
// dra.allGPUs, daemon restarted), then one claim through what Kubernetes 1.34+ does with it: the
// ResourceSlices the daemon publishes, kube-scheduler's allocation from them (fakes/dra_allocator,
// the structured-parameters allocator written from upstream's), kubelet's NodePrepareResources and
// NodeUnprepareResources (fakes/kubelet/dra_test_kubelet.h, from upstream's protos). Every file
// and object shown is read back from where the daemon put it, and checked against the simulator.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "common/cross_program.h"
#include "demo/narration.h"
#include "demo/node_demo.h"
#include "demo/pod_view.h"
#include "fakes/dra_allocator/allocator.h"
#include "fakes/dra_allocator/claim_api.h"
#include "fakes/dra_allocator/pools.h"

namespace kvgpu::demo {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::string kDriver(kDraDriverName);
constexpr const char* kClaim = "t4-1q";
constexpr const char* kRequest = "gpu";
// deploy/components/dra/device-classes.yaml: the class of the type, as the cluster has it.
const std::string kClassName = "vgpu-230." + kDriver;
const std::string kClassSelector = "device.driver == \"" + kDriver + "\" && device.attributes[\"" +
                                   kDriver + "\"].type == \"nvidia-230\"";

// The same daemon, now with every GPU on DRA. CDI specs go to the scratch directory instead of
// the host's /var/run/cdi; the device metadata keeps its default place under --kubelet-dir.
std::string DraConfig(const fs::path& cdi_dir) {
  return "resourceDomain: tencent.com\n"
         "udevEvents: false\n"
         "rescanInterval: 1s\n"
         "cdi:\n"
         "  dir: " +
         cdi_dir.string() +
         "\n"
         "dra:\n"
         "  allGPUs: true\n";
}

std::string TypeOf(const json& device) {
  return device.value("attributes", json::object())
      .value("type", json::object())
      .value("string", "");
}

// Devices per vGPU type id in the pools the scheduler sees for the node.
std::map<std::string, int> DevicesByType(const std::vector<testing::dra::Pool>& pools) {
  std::map<std::string, int> out;
  for (const auto& pool : pools) {
    for (const auto& d : pool.devices) ++out[TypeOf(d.device)];
  }
  return out;
}

// Per vGPU type, the devices the device plugin listed in act a) (tencent.com/vgpu-<N> is the
// type nvidia-<N>).
std::map<std::string, int> OfferedInA(const std::vector<testing::NodeResource>& resources) {
  std::map<std::string, int> out;
  for (const auto& r : resources) {
    out["nvidia-" + r.name.substr(r.name.find("vgpu-") + 5)] = r.capacity;
  }
  return out;
}

std::string Describe(const std::map<std::string, int>& counts) {
  std::string out;
  for (const auto& [type, n] : counts) out += type + ": " + std::to_string(n) + "; ";
  return out;
}

// What `kubectl get resourceslices -o yaml` prints, cut to the pool's first two slices (its
// counter sets, then the first slice of devices with its first device); the rest counted.
std::string TrimmedSlices(const std::vector<json>& slices) {
  json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array()}};
  std::ostringstream notes;
  for (json slice : slices) {
    const std::string name = slice["metadata"].value("name", "");
    const size_t devices = slice["spec"].value("devices", json::array()).size();
    notes << "  " << name << ": "
          << (devices == 0 ? "counter sets" : std::to_string(devices) + " devices") << "\n";
    if (list["items"].size() == 2) continue;
    if (devices > 1) slice["spec"]["devices"] = json::array({slice["spec"]["devices"][0]});
    list["items"].push_back(slice);
  }
  return ToYaml(list) + "(trimmed to two slices and one device; the pool's slices:\n" +
         notes.str() + ")\n";
}

std::string Rfc3339Now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

Result<json> ReadJson(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return Status::Error(ErrorCode::kIo, "cannot read " + path.string());
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    return Status::Error(ErrorCode::kInvalid, path.string() + ": " + e.what());
  }
}

// The CDI spec file in `dir` that defines CDI id `id` ("<vendor>/<class>=<name>").
fs::path SpecDefining(const fs::path& dir, const std::string& id) {
  const auto eq = id.find('=');
  if (eq == std::string::npos) return {};
  const std::string kind = id.substr(0, eq);
  const std::string name = id.substr(eq + 1);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    auto spec = ReadJson(entry.path());
    if (!spec.ok() || spec->value("kind", "") != kind) continue;
    for (const auto& device : spec->value("devices", json::array())) {
      if (device.value("name", "") == name) return entry.path();
    }
  }
  return {};
}

// A KEP-5304 metadata file: a stream of DeviceMetadata objects, newest API version first.
std::vector<json> ReadStream(const fs::path& path) {
  std::ifstream in(path);
  std::vector<json> out;
  try {
    while (in >> std::ws && in.peek() != EOF) {
      json object;
      in >> object;
      out.push_back(std::move(object));
    }
  } catch (const std::exception&) {
    out.push_back(nullptr);  // what follows is not JSON: the check shows the count is off
  }
  return out;
}

}  // namespace

void NodeDemo::SwitchToDra() {
  Step("f) The same node on DRA: the daemon restarted with dra.allGPUs: true");
  Say("On Kubernetes 1.34+ (and wherever no scheduler extender can be installed) the vGPUs go\n"
      "through Dynamic Resource Allocation. A GPU moves between front ends by config and a\n"
      "restart, with no vGPU on it (docs/dra-kubelet-plugin.md, \"One mode per GPU\").");
  Check(sim_->State().find("\nvgpu ") == std::string::npos, "no vGPU on the node before the switch",
        sim_->State());
  plugin_->process().Stop();
  children_.at(1) = 0;
  const fs::path cdi_dir = dir_ / "cdi";
  fs::create_directories(cdi_dir);
  plugin_ = std::make_unique<testing::PluginProcess>(programs_.device_plugin, sim_->mount(),
                                                     dir_ / "plugin", *node_, DraConfig(cdi_dir));
  plugin_->process().set_own_process_group(true);
  // No device plugin resource to wait for: DRA's registration below is the sign of life.
  auto started = plugin_->Start(*node_, 0);
  Started(1, plugin_->process().pid());
  if (auto failed = started) throw CheckFailed("kvgpu-device-plugin to start: " + *failed);
  Say("Restarted kvgpu-device-plugin (pid " + std::to_string(plugin_->process().pid()) +
      ") with the same state directory and plugin.yaml:");
  Indented(DraConfig(cdi_dir));

  dra_kubelet_ = std::make_unique<testing::DraTestKubelet>(node_->kubelet_dir());
  const auto registration = dra_kubelet_->Register(kDriver);
  Check(registration.has_value() && registration->type == "DRAPlugin",
        "kubelet's plugin watcher to register the DRA plugin " + std::string(kDriver),
        plugin_->process().Log());
  std::string versions;
  for (const auto& v : registration->supported_versions) versions += " " + v;
  Say("kubelet's plugin watcher found " + registration->socket + "\n  GetInfo: type " +
      registration->type + ", driver " + registration->driver + ", services" + versions +
      "\n  kubelet calls " + registration->chosen + " at " + registration->endpoint);

  // The slices are complete once every type the device plugin offered in a) is there in the same
  // number: the room of both GPUs, now published as DRA devices.
  const std::map<std::string, int> expected = OfferedInA(initial_);
  std::map<std::string, int> published;
  std::vector<testing::dra::Pool> pools;
  const bool complete = testing::WaitFor(
      [&] {
        auto gathered = testing::dra::GatherPools(node_->api().resource_slices(), kNode);
        if (!gathered.ok()) return false;
        pools = gathered.value();
        published = DevicesByType(pools);
        return pools.size() == 1 && pools[0].complete && published == expected;
      },
      10s);
  Say("\n$ kubectl get resourceslices -o yaml");
  Indented(TrimmedSlices(node_->api().resource_slices()));
  Check(complete && pools[0].driver == kDriver && pools[0].name == kNode,
        "one complete pool " + std::string(kNode) + " of driver " + kDriver +
            " offering per type what the device plugin offered in a): " + Describe(expected),
        Describe(published));
  Say("One pool, " + std::to_string(pools[0].devices.size()) +
      " devices: per type the same room as in a) (" + std::to_string(published[kType]) +
      " of type " + kType +
      ").\nEach device consumes its GPU's framebuffer counter, so no allocation promises more\n"
      "than a GPU holds; that a time-sliced T4 takes one type at a time, the daemon confirms\n"
      "per allocation (binding condition OccupancyConfirmed, next step).");
}

void NodeDemo::AllocateClaim() {
  Step("g) A claim for one T4-1Q vGPU, allocated by the scheduler from those slices");
  json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", kClaim}, {"namespace", kNamespace}}},
      {"spec",
       {{"devices",
         {{"requests", {{{"name", kRequest}, {"exactly", {{"deviceClassName", kClassName}}}}}}}}}}};
  Say("The claim as its author writes it (a pod names it in spec.resourceClaims):");
  Indented(ToYaml(claim));

  auto client = kube::ApiClient::Create(node_->api().ClientConfig());
  Check(client.ok(), "a client of the API server", client.ok() ? "" : client.status().ToString());
  api_client_ = std::move(client).value();
  testing::dra::HttpClaimApi claims(*api_client_);
  auto created = claims.Create(claim);
  Check(created.ok(), "the claim to be created", created.ok() ? "" : created.status().ToString());

  const json class_object = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "DeviceClass"},
      {"metadata", {{"name", kClassName}}},
      {"spec",
       {{"selectors", {{{"cel", {{"expression", kClassSelector}}}}}},
        {"extendedResourceName", std::string(kVgpuResourcePrefix) + "230"}}}};
  auto device_class = testing::dra::ParseDeviceClass(class_object);
  Check(device_class.ok(), "the DeviceClass to parse");
  auto slices = claims.ListSlices();
  Check(slices.ok(), "the slices to list", slices.ok() ? "" : slices.status().ToString());
  auto pools = testing::dra::GatherPools(slices.value(), kNode);
  Check(pools.ok(), "the pools to gather", pools.ok() ? "" : pools.status().ToString());
  auto listed = claims.List();
  Check(listed.ok(), "the claims to list");
  auto allocated = testing::dra::Allocate(created.value(), {device_class.value()}, pools.value(),
                                          testing::dra::AllocatedDevices(listed.value()));
  Check(allocated.ok() && allocated->has_value() && (*allocated)->size() == 1,
        "the allocator to fit the claim on " + std::string(kNode),
        allocated.ok() ? "no fit" : allocated.status().ToString());
  const auto& result = (*allocated)->front();
  const json allocation = testing::dra::AllocationJson(**allocated, kNode, Rfc3339Now());
  const json reserved_for = json::array({{{"resource", "pods"},
                                          {"name", "cuda-dra"},
                                          {"uid", "5e1f0a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"}}});
  auto written =
      claims.WriteStatus(kNamespace, kClaim, created->at("metadata").value("resourceVersion", ""),
                         allocation, reserved_for);
  Check(written.ok(), "the allocation to be written",
        written.ok() ? "" : written.status().ToString());
  claim_ = written.value();
  dra_device_ = result.id.device;
  Say("\nkube-scheduler (played by the demo: fakes/dra_allocator) matched DeviceClass " +
      std::string(kClassName) + "\n(" + kClassSelector +
      ")\nagainst the slices and wrote the allocation. $ kubectl get resourceclaim " + kClaim +
      " -o yaml (status):");
  Indented(ToYaml(json{{"status", claim_.value("status", json::object())}}));

  const testing::dra::PoolDevice* picked = nullptr;
  for (const auto& d : pools.value().front().devices) {
    if (d.name == dra_device_) picked = &d;
  }
  Check(result.id.driver == kDriver && result.id.pool == kNode && picked != nullptr &&
            TypeOf(picked->device) == kType,
        "a device of type " + std::string(kType) + " from pool " + std::string(kNode), dra_device_);

  // With binding conditions (the default) the scheduler binds the pod only once the daemon has
  // confirmed the vGPU fits the GPU: the daemon's answer is on the claim.
  if (!result.binding_conditions.empty()) {
    const std::string condition = result.binding_conditions.front();
    json devices;
    const bool confirmed = testing::WaitFor(
        [&] {
          devices = node_->api().resource_claim(kNamespace, kClaim)["status"].value("devices",
                                                                                    json::array());
          for (const auto& d : devices) {
            for (const auto& c : d.value("conditions", json::array())) {
              if (d.value("device", "") == dra_device_ && c.value("type", "") == condition &&
                  c.value("status", "") == "True") {
                return true;
              }
            }
          }
          return false;
        },
        10s);
    Check(confirmed, "the daemon to confirm " + condition + " on " + dra_device_, devices.dump());
    Say("\nThe device carries binding condition " + condition +
        ": the daemon confirmed it on the claim\n(status.devices), so the scheduler binds the "
        "pod:");
    Indented(ToYaml(json{{"devices", devices}}));
  }
}

void NodeDemo::PrepareClaim() {
  Step("h) kubelet starts the pod: NodePrepareResources creates the vGPU");
  const std::string uid = claim_["metadata"].value("uid", "");
  std::string rpc_error;
  auto answers = dra_kubelet_->Prepare({{kNamespace, uid, kClaim}}, &rpc_error);
  Check(rpc_error.empty(), "NodePrepareResources to answer", rpc_error);
  const auto& answer = answers[uid];
  Check(answer.error.empty() && answer.devices.size() == 1, "the claim prepared with one device",
        answer.error);
  const auto& device = answer.devices.front();
  std::string ids;
  for (const auto& id : device.cdi_device_ids) ids += " " + id;
  Say("NodePrepareResources(" + std::string(kNamespace) + "/" + kClaim + ") answered:\n  request " +
      (device.request_names.empty() ? "" : device.request_names[0]) + ", pool " + device.pool +
      ", device " + device.device + "\n  CDI ids" + ids);
  Check(device.device == dra_device_ && device.cdi_device_ids.size() == 2,
        "the allocated device with two CDI ids (the vGPU, its metadata)", device.device);

  const std::string listed = Vgpuctl("list");
  std::istringstream rows(listed);
  std::string vfio;
  for (std::string row; std::getline(rows, row);) {
    if (row.find(kType) == std::string::npos) continue;
    std::istringstream fields(row);
    std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
    mdev_uuid_ = f.front();
    vfio = f.back();
  }
  Check(!mdev_uuid_.empty() && vfio.rfind("/dev/vfio/", 0) == 0,
        "one " + std::string(kType) + " vGPU with its VFIO group in vgpuctl list", listed);

  const std::string cdi_spec = SpecDefining(dir_ / "cdi", device.cdi_device_ids[0]).string();
  Check(!cdi_spec.empty(),
        "a CDI spec in " + (dir_ / "cdi").string() + " defining " + device.cdi_device_ids[0]);
  auto spec = ReadJson(cdi_spec);
  Check(spec.ok(), "the CDI spec to be JSON", spec.ok() ? "" : spec.status().ToString());
  Say("\nThe CDI spec the runtime applies for " + device.cdi_device_ids[0] + " (" + cdi_spec +
      "):");
  Indented(spec->dump(2));
  Check(spec->dump().find("\"" + vfio + "\"") != std::string::npos,
        "the spec to hand the VM " + vfio);

  metadata_spec_ = SpecDefining(dir_ / "cdi", device.cdi_device_ids[1]).string();
  Check(!metadata_spec_.empty(),
        "a CDI spec in " + (dir_ / "cdi").string() + " defining " + device.cdi_device_ids[1]);
  const fs::path metadata = node_->kubelet_dir() / "plugins" / kDriver / "dra-device-metadata" /
                            (std::string(kNamespace) + "_" + kClaim) / kRequest / "metadata.json";
  const auto stream = ReadStream(metadata);
  Check(stream.size() == 2 && stream[0].is_object() && stream[1].is_object(),
        "two DeviceMetadata objects in " + metadata.string());
  const json& first = stream[0];
  Say("\nKEP-5304 device metadata (" + metadata.string() +
      "), bind-mounted read-only\ninto the pod by " + device.cdi_device_ids[1] + ". The first of " +
      "its two objects (" + first.value("apiVersion", "") + ";\nthe second, " +
      stream[1].value("apiVersion", "") + ", the same for KubeVirt v1.9):");
  Indented(ToYaml(first));
  std::string told;
  for (const auto& request : first.value("requests", json::array())) {
    for (const auto& d : request.value("devices", json::array())) {
      if (d.value("name", "") != dra_device_) continue;
      told = d.value("attributes", json::object())
                 .value("mdevUUID", json::object())
                 .value("string", "");
    }
  }
  Check(told == mdev_uuid_, "mdevUUID " + mdev_uuid_ + " (the vGPU vgpuctl lists)", told);
  Check(stream[1].value("apiVersion", "") == "metadata.resource.k8s.io/v1alpha1" &&
            stream[1].value("requests", json()) == first.value("requests", json()),
        "the v1alpha1 copy with the same requests", stream[1].dump());
}

void NodeDemo::UnprepareClaim() {
  Step("i) The pod is gone: NodeUnprepareResources removes the vGPU");
  const std::string uid = claim_["metadata"].value("uid", "");
  std::string rpc_error;
  auto errors = dra_kubelet_->Unprepare({{kNamespace, uid, kClaim}}, &rpc_error);
  Check(rpc_error.empty() && errors.count(uid) == 1 && errors[uid].empty(),
        "NodeUnprepareResources to succeed", rpc_error + errors[uid]);
  Say("NodeUnprepareResources(" + std::string(kNamespace) + "/" + kClaim + ") answered OK.");
  Check(sim_->State().find("\nvgpu ") == std::string::npos, "no vGPU on the node", sim_->State());
  Vgpuctl("list");
  const fs::path metadata_dir = node_->kubelet_dir() / "plugins" / kDriver / "dra-device-metadata" /
                                (std::string(kNamespace) + "_" + kClaim);
  Check(!fs::exists(metadata_spec_) && !fs::exists(metadata_dir),
        "the claim's device metadata and its CDI spec removed", metadata_spec_);
  Say("\nThe claim's device metadata and its CDI spec are gone too. The claim is deleted with its\n"
      "pod; the slices offer both GPUs' full room again, as in f).");
  node_->api().DeleteResourceClaim(kNamespace, kClaim);
  const std::map<std::string, int> expected = OfferedInA(initial_);
  std::map<std::string, int> published;
  const bool back = testing::WaitFor(
      [&] {
        auto pools = testing::dra::GatherPools(node_->api().resource_slices(), kNode);
        if (!pools.ok()) return false;
        published = DevicesByType(pools.value());
        return published == expected;
      },
      10s);
  Check(back, "per type what the device plugin offered in a): " + Describe(expected),
        Describe(published));
}

}  // namespace kvgpu::demo
