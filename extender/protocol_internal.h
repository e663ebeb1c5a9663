// What the extender protocol's files (protocol.cpp, protocol_preemption.cpp) share: Go's way of
// finding a JSON field. Private to extender/.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace kvgpu::extender {

// The member `name` of `object` as Go's encoding/json finds it (the exact name first, else the
// first case-insensitive match); nullptr when `object` is not an object or has no such member.
const nlohmann::json* Field(const nlohmann::json& object, std::string_view name);

}  // namespace kvgpu::extender
