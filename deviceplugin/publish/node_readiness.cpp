#include "deviceplugin/publish/node_readiness.h"

#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <system_error>

namespace kvgpu::deviceplugin {

namespace fs = std::filesystem;

const std::vector<std::string>& NodePrerequisiteItems() {
  static const std::vector<std::string> items = {"kvm", "vhost-vsock", "iommu", "vgpu"};
  return items;
}

std::vector<MissingPrerequisite> CheckNodeReadiness(const fs::path& root, bool offers_vgpus) {
  std::vector<MissingPrerequisite> missing;
  std::error_code ec;
  if (!fs::exists(root / "dev" / "kvm", ec)) {
    missing.push_back({"kvm", (root / "dev" / "kvm").string() +
                                  " is missing: load kvm_intel or kvm_amd and turn virtualisation "
                                  "on in the firmware (Kata runs each pod in a KVM VM)"});
  }
  if (!fs::exists(root / "dev" / "vhost-vsock", ec)) {
    missing.push_back({"vhost-vsock", (root / "dev" / "vhost-vsock").string() +
                                          " is missing: load the vhost_vsock module (the Kata "
                                          "agent in the VM is reached over vsock)"});
  }
  const fs::path groups = root / "sys" / "kernel" / "iommu_groups";
  bool any_group = fs::is_directory(groups, ec) && !fs::is_empty(groups, ec) && !ec;
  if (!any_group) {
    missing.push_back({"iommu", groups.string() +
                                    " is empty: turn the IOMMU on (intel_iommu=on or amd_iommu=on "
                                    "on the kernel command line, VT-d/AMD-Vi in the firmware); "
                                    "VFIO cannot hand a vGPU to a VM without it"});
  }
  if (!offers_vgpus) {
    missing.push_back({"vgpu",
                       "no GPU offers a vGPU type (mdev_supported_types or NVIDIA vendor-VFIO "
                       "VFs): install NVIDIA's vGPU manager, enable the VFs (sriov-manage), and "
                       "check allowedTypes/pinning in the plugin's config"});
  }
  return missing;
}

std::string DescribeMissing(const std::vector<MissingPrerequisite>& missing) {
  std::string text;
  for (const MissingPrerequisite& m : missing) {
    if (!text.empty()) text += "; ";
    text += m.item + " (" + m.reason + ")";
  }
  return text;
}

NodeReadinessReporter::NodeReadinessReporter(prometheus::Registry& registry,
                                             kube::EventRecorder* events, std::string node)
    : events_(events), node_(std::move(node)) {
  ready_ = &prometheus::BuildGauge()
                .Name("kvgpu_node_ready")
                .Help(
                    "1 when the node has what vGPU pods need (KVM, vhost-vsock, IOMMU, a "
                    "vGPU-capable GPU) and the plugin advertises vGPUs; 0 when it advertises none")
                .Register(registry)
                .Add({});
  auto& family = prometheus::BuildGauge()
                     .Name("kvgpu_node_prerequisite_missing")
                     .Help("1 for each prerequisite of vGPU pods this node lacks")
                     .Register(registry);
  for (const std::string& item : NodePrerequisiteItems()) {
    missing_[item] = &family.Add({{"item", item}});
  }
}

bool NodeReadinessReporter::Update(const std::vector<MissingPrerequisite>& missing) {
  for (auto& [item, gauge] : missing_) {
    bool lacking = std::any_of(missing.begin(), missing.end(),
                               [&](const MissingPrerequisite& m) { return m.item == item; });
    gauge->Set(lacking ? 1 : 0);
  }
  ready_->Set(missing.empty() ? 1 : 0);
  if (last_ && *last_ == missing) return missing.empty();
  const bool first = !last_;
  last_ = missing;
  if (missing.empty()) {
    spdlog::info("node ready for vGPU pods: advertising vGPUs");
    if (!first && events_ != nullptr && !node_.empty()) {
      (void)events_->Record(kube::ObjectRef::Node(node_), kube::EventType::kNormal,
                            "NodeReadyForVgpu", "the node has what vGPU pods need again");
    }
    return true;
  }
  const std::string why = DescribeMissing(missing);
  spdlog::error("NODE NOT READY for vGPU pods, advertising no vGPUs until fixed: {}", why);
  if (events_ != nullptr && !node_.empty()) {
    (void)events_->Record(kube::ObjectRef::Node(node_), kube::EventType::kWarning,
                          "NodeNotReadyForVgpu", "advertising no vGPUs: " + why);
  }
  return false;
}

void NodeReadinessReporter::Disabled() {
  ready_->Set(1);
  if (!last_) spdlog::warn("node readiness check off (--node-readiness-check=false)");
  last_.emplace();
}

}  // namespace kvgpu::deviceplugin
