#include "deviceplugin/model/occupancy.h"

#include <list>
#include <set>
#include <vector>

#include "mdev/nvidia.h"

namespace kvgpu::deviceplugin {

namespace {

using scheduling::Occupancy;

constexpr const char* kNvidiaVendor = "0x10de";

// One physical GPU as the kernel shows it: its parents' types and the vGPUs on it.
struct GpuView {
  bool nvidia = false;
  std::vector<const mdev::VgpuType*> types;
  std::vector<const mdev::Vgpu*> vgpus;
  // Types only a vGPU names: a vendor-VFIO VF lists what is creatable now, so a held type may be
  // listed by none (the card full of it). Its name (remembered by the backend from an earlier
  // listing) still gives its size; without it the size lock and the mode evidence are lost.
  std::list<mdev::VgpuType> held_only;
};

const mdev::VgpuType* TypeOn(const GpuView& view, const std::string& type_id) {
  for (const mdev::VgpuType* type : view.types) {
    if (type->id == type_id) return type;
  }
  return nullptr;
}

std::map<std::string, GpuView> ViewsOf(const mdev::Inventory& inventory) {
  std::map<std::string, GpuView> views;
  for (const mdev::Parent& parent : inventory.parents) {
    GpuView& view = views[parent.physical_gpu];
    view.nvidia = view.nvidia || parent.vendor_id == kNvidiaVendor;
    for (const mdev::VgpuType& type : parent.types) view.types.push_back(&type);
  }
  for (const mdev::Vgpu& vgpu : inventory.vgpus) {
    GpuView& view = views[vgpu.physical_gpu];
    view.vgpus.push_back(&vgpu);
    if (TypeOn(view, vgpu.type_id) != nullptr || !vgpu.type_name) continue;
    mdev::VgpuType held;
    held.id = vgpu.type_id;
    held.name = vgpu.type_name;
    held.profile = mdev::ParseNvidiaProfile(*vgpu.type_name);
    view.types.push_back(&view.held_only.emplace_back(std::move(held)));
  }
  return views;
}

// What the counts beside the vGPUs on a GPU show; nullopt when they show nothing (no vGPU, or
// sizes not known).
std::optional<Occupancy> Evidence(const GpuView& view) {
  std::set<uint64_t> sizes;
  std::set<std::string> held;
  for (const mdev::Vgpu* vgpu : view.vgpus) {
    const mdev::VgpuType* type = TypeOn(view, vgpu->type_id);
    const uint64_t size = type != nullptr ? FramebufferMib(*type) : 0;
    if (size == 0) return std::nullopt;
    sizes.insert(size);
    held.insert(vgpu->type_id);
  }
  if (sizes.empty()) return std::nullopt;
  if (sizes.size() > 1) return Occupancy::kMixedSize;
  if (held.size() > 1) return Occupancy::kEqualSize;
  const uint64_t size = *sizes.begin();
  bool own_creatable = false;
  bool same_size_other = false;
  bool same_size_creatable = false;
  for (const mdev::VgpuType* type : view.types) {
    const uint64_t other = FramebufferMib(*type);
    if (held.contains(type->id)) {
      own_creatable = own_creatable || type->available_instances > 0;
      continue;
    }
    if (other != size) {
      // Another size beside them outranks any same-size sibling: a mixed-size GPU lists both.
      if (other > 0 && type->available_instances > 0) return Occupancy::kMixedSize;
      continue;
    }
    same_size_creatable = same_size_creatable || type->available_instances > 0;
    same_size_other = true;
  }
  if (same_size_creatable) return Occupancy::kEqualSize;
  if (own_creatable && same_size_other) return Occupancy::kStrict;
  return std::nullopt;
}

bool MigBacked(const GpuView& view) {
  for (const mdev::VgpuType* type : view.types) {
    if (type->profile && type->profile->mig_slices > 0) return true;
  }
  return false;
}

}  // namespace

const char* OccupancySettingName(OccupancySetting setting) {
  switch (setting) {
    case OccupancySetting::kStrict:
      return "strict";
    case OccupancySetting::kEqualSize:
      return "equal-size";
    case OccupancySetting::kAuto:
      break;
  }
  return "auto";
}

std::optional<OccupancySetting> ParseOccupancySetting(std::string_view name) {
  for (OccupancySetting s :
       {OccupancySetting::kAuto, OccupancySetting::kStrict, OccupancySetting::kEqualSize}) {
    if (name == OccupancySettingName(s)) return s;
  }
  return std::nullopt;
}

uint64_t FramebufferMib(const mdev::VgpuType& type) {
  if (type.nvidia && type.nvidia->framebuffer_mib) return *type.nvidia->framebuffer_mib;
  if (type.profile && type.profile->size_gib > 0) return uint64_t{type.profile->size_gib} * 1024;
  return 0;
}

GpuRules::GpuRules(const mdev::Inventory& inventory, OccupancySetting setting,
                   const GpuModeProbe* probe, const GpuModeProbe* limits) {
  const std::map<std::string, GpuView> views = ViewsOf(inventory);
  std::map<std::string, std::optional<Occupancy>> seen;
  std::set<Occupancy> node_evidence;
  for (const auto& [gpu, view] : views) {
    for (const mdev::VgpuType* type : view.types) {
      TypeFacts& facts = types_[{gpu, type->id}];
      facts.framebuffer_mib = FramebufferMib(*type);
      if (type->nvidia && type->nvidia->max_instance) {
        facts.max_instances = *type->nvidia->max_instance;
      }
    }
    if (!view.nvidia) continue;
    if (probe == nullptr && limits != nullptr) {
      if (std::optional<GpuShapeFacts> facts =
              limits->Probe(gpu, mdev::SysfsTypesOf(inventory, gpu))) {
        TakeMaxInstances(gpu, *facts);
      }
    }
    std::optional<Occupancy> evidence = MigBacked(view) ? Occupancy::kMig : Evidence(view);
    if (probe != nullptr) {
      if (std::optional<GpuShapeFacts> facts =
              probe->Probe(gpu, mdev::SysfsTypesOf(inventory, gpu))) {
        // The probe's word over the counts: MIG, then mixed-size; a mode it says is off is not
        // taken from the counts either.
        if (facts->mig == true) {
          evidence = Occupancy::kMig;
        } else if (facts->heterogeneous == true) {
          evidence = Occupancy::kMixedSize;
        } else if ((evidence == Occupancy::kMig && facts->mig == false) ||
                   (evidence == Occupancy::kMixedSize && facts->heterogeneous == false)) {
          evidence = std::nullopt;
        }
        TakeMaxInstances(gpu, *facts);
        shapes_[gpu] = std::move(*facts);
      }
    }
    if (evidence == Occupancy::kStrict || evidence == Occupancy::kEqualSize) {
      node_evidence.insert(*evidence);
    }
    seen[gpu] = evidence;
  }
  // One driver per node: what one GPU showed holds for the GPUs that showed nothing; when GPUs
  // disagree, the stricter rule.
  Occupancy node_default = node_evidence.contains(Occupancy::kStrict) || node_evidence.empty()
                               ? Occupancy::kStrict
                               : Occupancy::kEqualSize;
  for (const auto& [gpu, view] : views) {
    if (!view.nvidia) {
      occupancy_[gpu] = Occupancy::kUnknown;
      continue;
    }
    const std::optional<Occupancy>& evidence = seen[gpu];
    if (evidence == Occupancy::kMig || evidence == Occupancy::kMixedSize) {
      occupancy_[gpu] = *evidence;
    } else if (setting == OccupancySetting::kStrict) {
      occupancy_[gpu] = Occupancy::kStrict;
    } else if (setting == OccupancySetting::kEqualSize) {
      occupancy_[gpu] = Occupancy::kEqualSize;
    } else {
      occupancy_[gpu] = evidence.value_or(node_default);
    }
  }
}

void GpuRules::TakeMaxInstances(const std::string& physical_gpu, const GpuShapeFacts& facts) {
  for (const auto& [id, type] : facts.types) {
    auto known = types_.find({physical_gpu, id});
    if (known != types_.end() && known->second.max_instances == 0) {
      known->second.max_instances = type.max_instances;
    }
  }
}

Occupancy GpuRules::OccupancyOf(const std::string& physical_gpu) const {
  auto it = occupancy_.find(physical_gpu);
  return it == occupancy_.end() ? Occupancy::kUnknown : it->second;
}

const GpuRules::TypeFacts* GpuRules::Facts(const std::string& physical_gpu,
                                           const std::string& type_id) const {
  auto it = types_.find({physical_gpu, type_id});
  return it == types_.end() ? nullptr : &it->second;
}

uint64_t GpuRules::FramebufferOf(const std::string& physical_gpu,
                                 const std::string& type_id) const {
  const TypeFacts* facts = Facts(physical_gpu, type_id);
  return facts != nullptr ? facts->framebuffer_mib : 0;
}

uint32_t GpuRules::MaxInstancesOf(const std::string& physical_gpu,
                                  const std::string& type_id) const {
  const TypeFacts* facts = Facts(physical_gpu, type_id);
  return facts != nullptr ? facts->max_instances : 0;
}

void GpuRules::FillType(const std::string& physical_gpu, const std::string& type_id,
                        scheduling::ResourceSlots& slots) const {
  auto shape = shapes_.find(physical_gpu);
  if (shape == shapes_.end()) return;
  auto type = shape->second.types.find(type_id);
  if (type == shape->second.types.end()) return;
  slots.placements = {type->second.placement_size, type->second.placement_ids};
  slots.gi_profile = type->second.gi_profile;
  slots.max_per_gi = type->second.max_per_gi;
}

scheduling::GpuSlots GpuRules::ShapeOf(const std::string& physical_gpu,
                                       const std::vector<mdev::Vgpu>& vgpus) const {
  scheduling::GpuSlots gpu;
  gpu.id = physical_gpu;
  gpu.occupancy = OccupancyOf(physical_gpu);
  auto shape = shapes_.find(physical_gpu);
  if (shape == shapes_.end()) return gpu;
  const GpuShapeFacts& facts = shape->second;
  if (facts.gpu_instances_known) {
    for (const GpuShapeFacts::GpuInstance& gi : facts.gpu_instances) {
      gpu.gpu_instances.push_back({gi.id, gi.profile, 0, 0});
    }
  }
  auto slots_of = [&](const std::string& type_id) {
    scheduling::ResourceSlots slots;
    slots.type_id = type_id;
    slots.framebuffer_mib = FramebufferOf(physical_gpu, type_id);
    FillType(physical_gpu, type_id, slots);
    return slots;
  };
  // The probe's vGPUs are the kernel's now (it is asked when these rules are made); the listed
  // ones it does not show are either made since (the driver gives them what TakeModeRoom takes)
  // or gone since (counting them is stricter, never looser).
  for (const auto& [id, vgpu] : facts.vgpus) {
    const scheduling::ResourceSlots slots = slots_of(vgpu.type);
    if (vgpu.placement && !slots.placements.ids.empty()) {
      gpu.used_slots.push_back({*vgpu.placement, slots.placements.size});
    }
    for (scheduling::GpuInstanceSlots& gi : gpu.gpu_instances) {
      if (!vgpu.gpu_instance || gi.id != *vgpu.gpu_instance) continue;
      gi.vgpu_framebuffer_mib = slots.framebuffer_mib;
      ++gi.vgpus;
    }
  }
  for (const mdev::Vgpu& vgpu : vgpus) {
    if (vgpu.physical_gpu != physical_gpu || facts.vgpus.contains(vgpu.id)) continue;
    (void)scheduling::TakeModeRoom(gpu, slots_of(vgpu.type_id));
  }
  return gpu;
}

std::optional<uint32_t> GpuRules::Cap(const std::string& physical_gpu, const std::string& type_id,
                                      const std::vector<mdev::Vgpu>& vgpus) const {
  const uint32_t max = MaxInstancesOf(physical_gpu, type_id);
  const uint64_t size = FramebufferOf(physical_gpu, type_id);
  uint32_t own = 0;
  uint32_t sharing = 0;  // vGPUs of its size, or of its type where its size is not known
  for (const mdev::Vgpu& vgpu : vgpus) {
    if (vgpu.physical_gpu != physical_gpu) continue;
    own += vgpu.type_id == type_id ? 1u : 0u;
    const bool same =
        size > 0 ? FramebufferOf(physical_gpu, vgpu.type_id) == size : vgpu.type_id == type_id;
    sharing += same ? 1u : 0u;
  }
  const Occupancy occupancy = OccupancyOf(physical_gpu);
  if (occupancy == Occupancy::kMig || occupancy == Occupancy::kMixedSize) {
    scheduling::GpuSlots shape = ShapeOf(physical_gpu, vgpus);
    scheduling::ResourceSlots slots;
    slots.type_id = type_id;
    slots.framebuffer_mib = size;
    FillType(physical_gpu, type_id, slots);
    std::optional<uint32_t> room = scheduling::ModeRoom(shape, slots);
    if (room && max > 0) room = std::min(*room, max > own ? max - own : 0);
    return room;
  }
  if (max == 0) return std::nullopt;
  return max > sharing ? max - sharing : 0;
}

std::string GpuRules::LockKey(const std::string& physical_gpu, const std::string& type_id) const {
  return scheduling::LockKey(OccupancyOf(physical_gpu), type_id,
                             FramebufferOf(physical_gpu, type_id));
}

}  // namespace kvgpu::deviceplugin
