// The wire-format fixtures of tests/extender/fixtures (their sources: fixtures/SOURCES.md), read
// as JSON.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace kvgpu::extender {

inline nlohmann::json Fixture(const std::string& name) {
  std::ifstream in(std::string(KVGPU_EXTENDER_FIXTURES) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

}  // namespace kvgpu::extender
