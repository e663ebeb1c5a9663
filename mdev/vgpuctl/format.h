// Rendering of inventories as aligned tables and as the JSON documented in docs/vgpuctl.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mdev/model.h"

namespace kvgpu::vgpuctl {

// Rows of cells printed with each column as wide as its widest cell, two spaces apart.
std::string RenderTable(const std::vector<std::vector<std::string>>& rows);

std::string TypesTable(const mdev::Inventory& inventory);
std::string VgpusTable(const mdev::Inventory& inventory);
nlohmann::json TypesJson(const mdev::Inventory& inventory);
nlohmann::json VgpusJson(const mdev::Inventory& inventory);
nlohmann::json VgpuJson(const mdev::Vgpu& vgpu);

}  // namespace kvgpu::vgpuctl
