#include "deviceplugin/publish/node_readiness.h"

#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <system_error>

namespace kvgpu::deviceplugin {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, std::string>> NodePrerequisiteItems(const FrontEndFacts& facts) {
  std::vector<std::pair<std::string, std::string>> items = {
      {kWholeNode, "kvm"}, {kWholeNode, "vhost-vsock"}, {kWholeNode, "iommu"}};
  if (facts.device_plugin_offers) items.emplace_back(kDevicePluginFrontEnd, "vgpu");
  if (facts.dra) {
    items.emplace_back(kDraFrontEnd, "vgpu");
    items.emplace_back(kDraFrontEnd, "registration");
    items.emplace_back(kDraFrontEnd, "slices");
  }
  return items;
}

std::vector<MissingPrerequisite> CheckNodeReadiness(const fs::path& root,
                                                    const FrontEndFacts& facts) {
  std::vector<MissingPrerequisite> missing;
  std::error_code ec;
  if (!fs::exists(root / "dev" / "kvm", ec)) {
    missing.push_back({kWholeNode, "kvm",
                       (root / "dev" / "kvm").string() +
                           " is missing: load kvm_intel or kvm_amd and turn virtualisation "
                           "on in the firmware (Kata runs each pod in a KVM VM)"});
  }
  if (!fs::exists(root / "dev" / "vhost-vsock", ec)) {
    missing.push_back({kWholeNode, "vhost-vsock",
                       (root / "dev" / "vhost-vsock").string() +
                           " is missing: load the vhost_vsock module (the Kata "
                           "agent in the VM is reached over vsock)"});
  }
  const fs::path groups = root / "sys" / "kernel" / "iommu_groups";
  bool any_group = fs::is_directory(groups, ec) && !fs::is_empty(groups, ec) && !ec;
  if (!any_group) {
    missing.push_back({kWholeNode, "iommu",
                       groups.string() +
                           " is empty: turn the IOMMU on (intel_iommu=on or amd_iommu=on "
                           "on the kernel command line, VT-d/AMD-Vi in the firmware); "
                           "VFIO cannot hand a vGPU to a VM without it"});
  }
  if (facts.device_plugin_offers && !*facts.device_plugin_offers) {
    missing.push_back({kDevicePluginFrontEnd, "vgpu",
                       "no GPU of the device plugin offers a vGPU type (mdev_supported_types or "
                       "NVIDIA vendor-VFIO VFs): install NVIDIA's vGPU manager, enable the VFs "
                       "(sriov-manage), and check allowedTypes/pinning in the plugin's config"});
  }
  if (facts.dra) {
    const DraFacts& dra = *facts.dra;
    if (!dra.offers_vgpus) {
      missing.push_back({kDraFrontEnd, "vgpu",
                         "no GPU of DRA (config dra) offers a vGPU type: install NVIDIA's vGPU "
                         "manager, enable the VFs (sriov-manage), and check dra.gpus and "
                         "allowedTypes/pinning in the plugin's config"});
    }
    if (!dra.settling && dra.registered != std::optional<bool>(true)) {
      missing.push_back(
          {kDraFrontEnd, "registration",
           dra.registered
               ? "kubelet refused the DRA plugin " + dra.driver + ": " + dra.registration_error
               : "kubelet has not registered the DRA plugin " + dra.driver + " (nothing called " +
                     dra.registration_socket +
                     "): check that --kubelet-dir is kubelet's --root-dir and that kubelet is "
                     "1.34 or later (resource.k8s.io/v1)"});
    }
    if (!dra.settling && !dra.published) {
      missing.push_back({kDraFrontEnd, "slices",
                         "the node's ResourceSlices of " + dra.driver +
                             " are not published: see the log's ResourceSlice errors (API server "
                             "unreachable, RBAC for resourceslices, resource.k8s.io/v1 off)"});
    }
  }
  return missing;
}

bool FrontEndReady(const std::vector<MissingPrerequisite>& missing, const std::string& frontend) {
  return std::none_of(missing.begin(), missing.end(), [&](const MissingPrerequisite& m) {
    return m.frontend == kWholeNode || m.frontend == frontend;
  });
}

std::string DescribeMissing(const std::vector<MissingPrerequisite>& missing) {
  std::string text;
  for (const MissingPrerequisite& m : missing) {
    if (!text.empty()) text += "; ";
    text += m.frontend + ": " + m.item + " (" + m.reason + ")";
  }
  return text;
}

namespace {

// "device-plugin not ready, dra ready": which front end a log line or Event speaks of.
std::string FrontEndStates(const std::map<std::string, prometheus::Gauge*>& frontends,
                           const std::vector<MissingPrerequisite>& missing) {
  std::string text;
  for (const auto& [frontend, gauge] : frontends) {
    if (!text.empty()) text += ", ";
    text += frontend + (FrontEndReady(missing, frontend) ? " ready" : " not ready");
  }
  return text;
}

}  // namespace

NodeReadinessReporter::NodeReadinessReporter(prometheus::Registry& registry,
                                             kube::EventRecorder* events, std::string node,
                                             const FrontEndFacts& runs)
    : events_(events), node_(std::move(node)) {
  ready_ = &prometheus::BuildGauge()
                .Name("kvgpu_node_ready")
                .Help(
                    "1 when the node has what vGPU pods need (KVM, vhost-vsock, IOMMU) and every "
                    "front end it runs is ready (kvgpu_frontend_ready); 0 otherwise")
                .Register(registry)
                .Add({});
  auto& frontends = prometheus::BuildGauge()
                        .Name("kvgpu_frontend_ready")
                        .Help(
                            "1 while a front end this node runs can serve vGPUs: device-plugin "
                            "(advertising a vGPU type), dra (a vGPU type, the DRA plugin "
                            "registered with kubelet, the ResourceSlices published)")
                        .Register(registry);
  if (runs.device_plugin_offers) {
    frontend_ready_[kDevicePluginFrontEnd] = &frontends.Add({{"frontend", kDevicePluginFrontEnd}});
  }
  if (runs.dra) frontend_ready_[kDraFrontEnd] = &frontends.Add({{"frontend", kDraFrontEnd}});
  auto& family = prometheus::BuildGauge()
                     .Name("kvgpu_node_prerequisite_missing")
                     .Help(
                         "1 for each prerequisite of vGPU pods this node lacks; frontend says "
                         "what it keeps from serving (node: every front end)")
                     .Register(registry);
  for (const auto& [frontend, item] : NodePrerequisiteItems(runs)) {
    missing_[{frontend, item}] = &family.Add({{"frontend", frontend}, {"item", item}});
  }
}

bool NodeReadinessReporter::Update(const std::vector<MissingPrerequisite>& missing) {
  for (auto& [key, gauge] : missing_) {
    bool lacking = std::any_of(missing.begin(), missing.end(), [&](const MissingPrerequisite& m) {
      return m.frontend == key.first && m.item == key.second;
    });
    gauge->Set(lacking ? 1 : 0);
  }
  for (auto& [frontend, gauge] : frontend_ready_) gauge->Set(FrontEndReady(missing, frontend));
  ready_->Set(missing.empty() ? 1 : 0);
  const bool advertise = FrontEndReady(missing, kDevicePluginFrontEnd);
  if (last_ && *last_ == missing) return advertise;
  const bool first = !last_;
  last_ = missing;
  const std::string states = FrontEndStates(frontend_ready_, missing);
  if (missing.empty()) {
    spdlog::info("node ready for vGPU pods ({})", states);
    if (!first && events_ != nullptr && !node_.empty()) {
      (void)events_->Record(kube::ObjectRef::Node(node_), kube::EventType::kNormal,
                            "NodeReadyForVgpu",
                            "the node has what vGPU pods need again (" + states + ")");
    }
    return true;
  }
  const std::string why = DescribeMissing(missing);
  const std::string what = !advertise && frontend_ready_.contains(kDevicePluginFrontEnd)
                               ? "; the device plugin advertises no vGPUs until fixed"
                               : "";
  spdlog::error("NODE NOT READY for vGPU pods ({}){}: {}", states, what, why);
  if (events_ != nullptr && !node_.empty()) {
    (void)events_->Record(kube::ObjectRef::Node(node_), kube::EventType::kWarning,
                          "NodeNotReadyForVgpu", states + what + ": " + why);
  }
  return advertise;
}

void NodeReadinessReporter::Disabled() {
  ready_->Set(1);
  for (auto& [frontend, gauge] : frontend_ready_) gauge->Set(1);
  if (!last_) spdlog::warn("node readiness check off (--node-readiness-check=false)");
  last_.emplace();
}

}  // namespace kvgpu::deviceplugin
