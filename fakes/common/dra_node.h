// The DRA front end (deviceplugin/dra/dra_front_end.h) over a test's directory, as the DRA tests
// and benchmarks build it, and the claims they hand it: the same construction path as the daemon's
// (DraFrontEnd::Start), with its state under <dir>/state, kubelet's directory at <dir>/kubelet and
// its CDI specs in <dir>/cdi, and no slices published (no test of the plugin reads them; the
// daemon's tests do, through the daemon). Destroying it and starting one again over the same
// directory is a daemon restart.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "deviceplugin/dra/device_name.h"
#include "deviceplugin/dra/dra_front_end.h"

namespace kvgpu::testing {

inline constexpr const char* kDraDriver = kDraDriverName.data();  // a literal: NUL-terminated
inline constexpr const char* kDraNode = "node-a";

// `serve`: kubelet's DRA sockets are served (a kubelet client drives it); else the test calls the
// plugin itself.
inline deviceplugin::dra::DraFrontEndOptions TestDraOptions(const std::filesystem::path& dir,
                                                            std::set<std::string> dra_gpus,
                                                            bool serve) {
  deviceplugin::dra::DraFrontEndOptions o;
  o.driver = kDraDriver;
  o.node_name = kDraNode;
  o.kubelet_dir = dir / "kubelet";
  o.state_dir = dir / "state";
  o.gpus = std::move(dra_gpus);
  o.model.cdi_dir = dir / "cdi";
  o.socket_recheck = std::chrono::milliseconds(50);
  o.serve_kubelet = serve;
  o.publish_slices = false;
  return o;
}

// Built and started; a failed start throws (a test's set-up, or a crash test's child, ends there).
inline std::unique_ptr<deviceplugin::dra::DraFrontEnd> StartDra(
    mdev::Backend& backend, kube::ApiTransport& api, deviceplugin::dra::DraFrontEndOptions options,
    deviceplugin::dra::DraObservers observers = {}) {
  auto front_end = std::make_unique<deviceplugin::dra::DraFrontEnd>(
      backend, api, std::move(options), std::move(observers));
  if (Status started = front_end->Start(); !started.ok()) {
    throw std::runtime_error(started.ToString());
  }
  return front_end;
}

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
