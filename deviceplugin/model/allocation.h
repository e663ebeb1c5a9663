// kubelet's Allocate for one resource as one transaction: what kubelet never sends is refused
// first; every device ID is planned before anything changes; the vGPUs are created (each recorded
// before the kernel is asked); on any failure the ones made are removed again; and each container
// is answered with its device nodes, env (allocation_env.h, the one definition that recovery also
// reads) and CDI names. Locking and waiting for removals stay with the resource manager.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deviceplugin/model/device_catalogue.h"
#include "deviceplugin/model/holders.h"
#include "deviceplugin/model/manager_observer.h"
#include "deviceplugin/model/model_options.h"
#include "deviceplugin/model/node_state.h"
#include "mdev/backend.h"

namespace kvgpu::deviceplugin {

// More device IDs than this in one Allocate is no real request (kubelet asks per container).
inline constexpr size_t kMaxDevicesPerRequest = 4096;

// What one container gets.
struct AllocatedVgpu {
  std::string device_id;
  std::string vgpu_id;  // mdev UUID, or the VF address for vendor VFIO
  std::string type_id;
  std::string parent;
  uint32_t iommu_group = 0;
  std::string vfio_device;  // "/dev/vfio/<group>"
  bool reused = false;      // handed back to the pod that holds it, not made by this Allocate
};

struct DeviceNode {
  std::string host_path;
  std::string container_path;
  std::string permissions;
};

struct ContainerAllocation {
  std::vector<AllocatedVgpu> vgpus;
  std::vector<DeviceNode> devices;
  std::map<std::string, std::string> envs;
  std::vector<std::string> cdi_devices;  // "<resource>=<deviceID>", when CDI is on
};

// Who holds the earlier vGPU of a requested device ID, asked before the transaction.
struct EarlierVgpu {
  std::string vgpu_id;  // the vGPU the verdict is about
  Verdict verdict;
};
using EarlierVgpus = std::map<std::string, EarlierVgpu>;  // by device ID

// What the transaction will do for one device ID, decided before anything changes.
struct AllocationPlan {
  Device device;
  mdev::Flavour flavour = mdev::Flavour::kMdev;
  std::string physical_gpu;
  std::optional<std::string> replace_vgpu;  // our earlier vGPU, free to remove and make anew
  std::optional<std::string> reuse_vgpu;    // our vGPU the same pod holds: handed back as it is
};
using ContainerPlans = std::vector<std::vector<AllocationPlan>>;

// Sizes kubelet never sends (IDs over 63 characters, more devices than any node has): refused
// before anything is looked up.
Status CheckRequestShape(const std::string& resource,
                         const std::vector<std::vector<std::string>>& containers);

// Plans every device ID of the request, or says why the request is refused (unknown, unhealthy,
// repeated or no longer free IDs; an earlier vGPU whose holder nobody can name).
Result<ContainerPlans> PlanAllocation(const DeviceCatalogue& catalogue, const NodeState& state,
                                      const std::string& resource,
                                      const std::vector<std::vector<std::string>>& containers,
                                      const EarlierVgpus& earlier);

// The answer for one container: /dev/vfio/vfio and each IOMMU group once, the env, CDI names.
ContainerAllocation AnswerContainer(const std::string& resource, std::vector<AllocatedVgpu> vgpus,
                                    bool cdi_enabled);

// The CDI spec of `resource`: one device per vGPU of ours the kernel shows.
Status WriteCdiSpecs(const NodeState& state, const std::string& cdi_dir,
                     const std::string& resource);

class AllocationTransaction {
 public:
  AllocationTransaction(mdev::Backend& backend, NodeState& state, ManagerObserver* observer)
      : backend_(backend), state_(state), observer_(observer) {}

  // Carries out one plan: hands back a held vGPU, or removes the earlier one and creates anew.
  Result<AllocatedVgpu> Realize(const AllocationPlan& plan);
  // Removes every vGPU this transaction created, newest first. One that cannot be removed keeps
  // its record, so the lifecycle collects it later.
  void RollBack(const std::string& resource);

 private:
  mdev::Backend& backend_;
  NodeState& state_;
  ManagerObserver* observer_;
  std::vector<std::pair<std::string, std::string>> created_;  // device ID, vGPU
};

}  // namespace kvgpu::deviceplugin
