// The API server's rules for what the webhook writes into pods: names, annotation and resource
// keys, quantities, env var names, paths. The config is checked against them at load, so a
// config whose output the API server would refuse never serves a pod.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace kvgpu::webhook {

bool IsDnsLabel(std::string_view name);
bool IsDnsSubdomain(std::string_view name);
// An annotation or label key, or a resource name: [DNS subdomain/]name.
bool IsQualifiedName(std::string_view key);
// [-._a-zA-Z][-._a-zA-Z0-9]*, the API server's rule for env var names.
bool IsEnvName(const std::string& name);
bool IsAbsolutePath(const nlohmann::json& value);
// The value of a resource.Quantity (a number or text like "100m", "64Mi", "1e3"), for comparing
// a request with its limit; nullopt if it is not a quantity.
std::optional<long double> QuantityValue(const nlohmann::json& quantity);

// Pieces of the number grammar, shared with YAML's scalar typing.
bool IsDigits(std::string_view text);
std::string_view WithoutSign(std::string_view text);

}  // namespace kvgpu::webhook
