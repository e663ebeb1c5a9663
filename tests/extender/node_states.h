// Published node states for the extender's tests: T4 GPUs (222: 16 per GPU, 223: 8 per GPU).
#pragma once

#include <string>
#include <vector>

#include "scheduling/node_vgpu_state.h"

namespace kvgpu::extender::testing {

inline constexpr const char* k222 = "tencent.com/vgpu-222";
inline constexpr const char* k223 = "tencent.com/vgpu-223";
inline constexpr int64_t kNow = 1'764'130'000'000;

// A T4 locked to "222", "223" or free (""), with `used` vGPUs of ours of that type.
inline scheduling::GpuSlots T4(const std::string& id, const std::string& locked = "",
                               uint32_t used = 0) {
  scheduling::GpuSlots gpu;
  gpu.id = id;
  if (!locked.empty()) gpu.LockTo("nvidia-" + locked);
  if (locked.empty() || locked == "222") {
    const uint32_t u = locked == "222" ? used : 0;
    gpu.resources[k222] = {"nvidia-222", u, 16 - u};
  }
  if (locked.empty() || locked == "223") {
    const uint32_t u = locked == "223" ? used : 0;
    gpu.resources[k223] = {"nvidia-223", u, 8 - u};
  }
  return gpu;
}

inline scheduling::NodeVgpuState NodeOf(std::vector<scheduling::GpuSlots> gpus,
                                        int64_t published = kNow) {
  scheduling::NodeVgpuState state;
  state.node = "n";
  state.generation = 1;
  state.published_unix_ms = published;
  state.gpus = std::move(gpus);
  return state;
}

inline std::string Text(const scheduling::NodeVgpuState& state) {
  return scheduling::RenderNodeState(state);
}

}  // namespace kvgpu::extender::testing
