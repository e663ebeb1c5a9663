// The webhook's YAML config as JSON: YAML 1.2 core-schema typing for plain scalars (quoted ones
// stay strings), and a user's file laid over the built-in defaults.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvgpu::webhook {

// A YAML mapping as a JSON object (empty text is an empty object); anything else is kConfig.
Result<nlohmann::json> ParseYamlMapping(std::string_view text, const std::string& what);

// Objects merge key by key (so `driverInit: {image: x}` keeps the default command); anything
// else replaces the default whole.
void MergeOver(nlohmann::json& base, const nlohmann::json& overlay);

}  // namespace kvgpu::webhook
