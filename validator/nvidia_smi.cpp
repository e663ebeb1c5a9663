#include "validator/nvidia_smi.h"

#include <sstream>

namespace kvgpu::validator {

namespace {

std::string Trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

}  // namespace

bool SmiQuery::Licensed() const {
  return license_status == "Licensed" || license_status.rfind("Licensed ", 0) == 0;
}

SmiQuery ParseSmiQuery(const std::string& text) {
  SmiQuery query;
  bool in_licence = false;
  size_t licence_indent = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos) continue;
    const auto colon = line.find(':');
    const std::string key = Trim(line.substr(0, colon));
    if (colon == std::string::npos) {
      // A section heading; the licence section ends at the next heading not deeper than it.
      if (key == "vGPU Software Licensed Product") {
        in_licence = true;
        licence_indent = indent;
      } else if (in_licence && indent <= licence_indent) {
        in_licence = false;
      }
      continue;
    }
    if (in_licence && indent <= licence_indent) in_licence = false;
    const std::string value = Trim(line.substr(colon + 1));
    if (in_licence) {
      if (key == "Product Name") query.licensed_product = value;
      if (key == "License Status") query.license_status = value;
    } else if (key == "Attached GPUs") {
      try {
        query.attached_gpus = std::stoi(value);
      } catch (const std::exception&) {
        query.attached_gpus.reset();
      }
    } else if (key == "Product Name" && query.gpu_product.empty()) {
      query.gpu_product = value;
    } else if (key == "Driver Version") {
      query.driver_version = value;
    }
  }
  return query;
}

}  // namespace kvgpu::validator
