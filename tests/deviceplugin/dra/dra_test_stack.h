// The DRA front end as the daemon builds it, over any backend and directories, for tests and the
// benchmark: a model that sees only the DRA GPUs, its record and the claim checkpoint on disk, the
// plugin, and (optionally) kubelet's sockets. Destroying it and building it again over the same
// directories is a daemon restart.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "deviceplugin/dra/device_name.h"
#include "deviceplugin/dra/dra_plugin.h"
#include "deviceplugin/dra/kubelet_dra_server.h"
#include "deviceplugin/dra/prepared_store.h"
#include "deviceplugin/model/resource_manager.h"
#include "deviceplugin/model/state_store.h"
#include "mdev/gpu_filter_backend.h"

namespace kvgpu::testing {

inline constexpr const char* kDraDriver = "vgpu.tencent.com";
inline constexpr const char* kDraNode = "node-a";

struct DraStack {
  DraStack(mdev::Backend& raw, std::set<std::string> dra_gpus, const std::filesystem::path& dir,
           kube::ApiTransport& api, bool serve, deviceplugin::ManagerObserver* observer = nullptr)
      : filter(raw, std::move(dra_gpus), true),
        model_store(MakeDir(dir / "state" / "model")),
        claims(dir / "state"),
        holders(claims),
        manager(filter, Options(dir), model_store, holders, observer),
        plugin(manager, claims, api, {kDraDriver, deviceplugin::dra::DraPoolName(kDraNode), {}}) {
    Check(claims.Load());
    Check(manager.Start());
    Check(plugin.RollBackUnfinished());
    if (serve) {
      server = std::make_unique<deviceplugin::dra::KubeletDraServer>(
          plugin, deviceplugin::dra::DraServerOptions{dir / "kubelet", kDraDriver,
                                                      std::chrono::milliseconds(50)});
      Check(server->Start());
    }
  }

  static deviceplugin::ModelOptions Options(const std::filesystem::path& dir) {
    deviceplugin::ModelOptions o;
    o.naming.domain = kDraDriver;
    o.cdi_enabled = true;
    o.cdi_dir = dir / "cdi";
    return o;
  }
  static std::filesystem::path MakeDir(const std::filesystem::path& p) {
    std::filesystem::create_directories(p);
    return p;
  }
  static void Check(const Status& s) {
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }

  mdev::GpuFilterBackend filter;
  deviceplugin::JsonFileStateStore model_store;
  deviceplugin::dra::PreparedStore claims;
  deviceplugin::dra::PreparedClaimHolders holders;
  deviceplugin::ResourceManager manager;
  deviceplugin::dra::DraPlugin plugin;
  std::unique_ptr<deviceplugin::dra::KubeletDraServer> server;
};

struct DraResult {
  std::string request;
  std::string driver;
  std::string pool;
  std::string device;
};

// A resource.k8s.io/v1 ResourceClaim allocated with `results` (status.allocation.devices).
inline nlohmann::json MakeAllocatedClaim(const std::string& ns, const std::string& name,
                                         const std::string& uid,
                                         const std::vector<DraResult>& results) {
  nlohmann::json list = nlohmann::json::array();
  for (const DraResult& r : results) {
    list.push_back(
        {{"request", r.request}, {"driver", r.driver}, {"pool", r.pool}, {"device", r.device}});
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"namespace", ns}, {"name", name}, {"uid", uid}}},
          {"spec", {{"devices", {{"requests", nlohmann::json::array()}}}}},
          {"status", {{"allocation", {{"devices", {{"results", list}}}}}}}};
}

// The DRA name of vGPU number `slot` of `type` on physical GPU `gpu`, as the slices publish it.
inline std::string DraName(const std::string& gpu, const std::string& type, uint32_t slot) {
  return deviceplugin::dra::DraDeviceName(gpu, type, slot);
}

}  // namespace kvgpu::testing
