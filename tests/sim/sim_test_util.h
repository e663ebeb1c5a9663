// Helpers for the kernel model's own tests: a temp root per test and the sysfs paths the
// library under test will use (through the /sys/class and /sys/bus links, as a real caller).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "fakes/common/temp_dir.h"
#include "sim/kernel_model.h"

namespace kvgpu::sim::testing {

namespace fs = std::filesystem;

// The two T4s of the t4x2 profiles (sim/profiles.cpp), and the first line of NVIDIA's
// vgpu-type listings (creatable_vgpu_types, supported_vgpu_types).
inline constexpr const char* kT4a = "0000:3b:00.0";
inline constexpr const char* kT4b = "0000:af:00.0";
inline constexpr const char* kTypeListHeader = "ID    : vGPU Name\n";

// A temp root per test: fakes/common's TempDir (under ctest, TMPDIR is tmpfs when the machine
// has one: a model lays out ~1500 entries per node, and on a disk mounted with `discard` each
// unlink costs milliseconds).
using kvgpu::testing::TempDir;

// A model of a built-in profile under a fresh temp root.
class ModelTest : public ::testing::Test {
 protected:
  void Load(const std::string& profile_name) {
    auto profile = ProfileByName(profile_name);
    ASSERT_TRUE(profile.ok()) << profile.status().ToString();
    Load(std::move(profile).value());
  }
  void Load(NodeProfile profile) {
    // A fresh directory per load, so a table-driven test can load once per case.
    fs::path dir = root_.path() / ("node-" + std::to_string(loads_++));
    auto model = KernelModel::Create(dir, std::move(profile));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
  }

  fs::path Sys() const { return model_->root() / "sys"; }
  fs::path TypeDir(const std::string& parent, const std::string& type) const {
    return Sys() / "class" / "mdev_bus" / parent / "mdev_supported_types" / type;
  }
  fs::path NvidiaDir(const std::string& vf) const {
    return Sys() / "bus" / "pci" / "devices" / vf / "nvidia";
  }
  fs::path MdevDir(const std::string& uuid) const {
    return Sys() / "bus" / "mdev" / "devices" / uuid;
  }

  Status CreateMdev(const std::string& parent, const std::string& type, const std::string& data) {
    return model_->WriteFile(TypeDir(parent, type) / "create", data);
  }
  Status RemoveMdev(const std::string& uuid, const std::string& data = "1") {
    return model_->WriteFile(MdevDir(uuid) / "remove", data);
  }
  Status SetVfType(const std::string& vf, const std::string& data) {
    return model_->WriteFile(NvidiaDir(vf) / "current_vgpu_type", data);
  }

  // Attribute content through the model (the SysfsIo path), "" plus a test failure if absent.
  std::string Read(const fs::path& path) {
    auto content = model_->ReadFile(path);
    EXPECT_TRUE(content.ok()) << content.status().ToString();
    return content.ok() ? content.value() : "";
  }
  std::string Available(const std::string& parent, const std::string& type) {
    return Read(TypeDir(parent, type) / "available_instances");
  }

  TempDir root_;
  int loads_ = 0;
  std::unique_ptr<KernelModel> model_;
};

// The errno a Status carries, 0 for OK: the tests' single way to compare kernel answers.
inline int ErrnoOf(const Status& status) {
  return status.ok() ? 0 : status.sys_errno();
}

inline std::string Uuid(int n) {
  std::ostringstream out;
  out << "9b2c4e1a-0d3f-4a5b-8c6d-" << std::hex;
  out.width(12);
  out.fill('0');
  out << n;
  return out.str();
}

}  // namespace kvgpu::sim::testing
