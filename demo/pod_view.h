// How the demo shows a Pod to a person: as the YAML `kubectl get pod -o yaml` would print, and
// the webhook's mutation as a unified diff of that YAML.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace kvgpu::demo {

// Block-style YAML, keys in the object's order; strings that YAML would read as another type
// (numbers, booleans, null, empty, leading/trailing blanks, special characters) are quoted.
std::string ToYaml(const nlohmann::json& value);

// `diff -u` of two texts, labelled; `scratch` holds the two files while diff runs.
// Empty when they are equal; throws std::runtime_error when diff cannot run.
std::string UnifiedDiff(const std::string& before, const std::string& after,
                        const std::string& label_before, const std::string& label_after,
                        const std::filesystem::path& scratch);

}  // namespace kvgpu::demo
