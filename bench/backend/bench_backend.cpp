// Allocate latency through the sysfs and libvirt backends, side by side, on the VM lab's real
// kernel and real libvirtd: kubelet's Allocate end to end (gRPC from the fake kubelet to the
// device plugin, the vGPU made and its IOMMU group shown) and the removal of each vGPU.
//
// Runs inside the lab, after libvirt-lab.sh's setup (bench/backend/run.sh does both):
//   kvgpu-bench-backend [allocations]    (default 20; at most what mttypci-1 has room for)
// Prints one markdown table row per backend.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/cross_program.h"
#include "deviceplugin/daemon.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "mdev/make_backend.h"
#include "mdev/sysfs_backend.h"
#include "mdev/uuid.h"

namespace kvgpu {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kResource = std::string(kVgpuResourcePrefix) + "mttypci-1";

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::string Stats(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
  };
  char line[96];
  std::snprintf(line, sizeof line, "%.1f | %.1f | %.1f", at(0.5), at(0.9), ms.back());
  return line;
}

// Every mdev but the persistent one (libvirt-lab.sh's), by raw sysfs: a clean start per backend.
void RemoveOthers(const std::string& persistent) {
  mdev::PosixSysfsIo io;
  mdev::SysfsBackend node("/", io);
  auto inventory = node.Scan();
  if (!inventory.ok()) return;
  for (const mdev::Vgpu& vgpu : inventory->vgpus) {
    if (vgpu.id != persistent) (void)node.Remove(vgpu.id);
  }
}

int RunBackend(const std::string& name, int allocations) {
  std::string persistent = mdev::NormalizeUuid(Env("KVGPU_PERSISTENT_MDEV"));
  RemoveOthers(persistent);
  fs::path dir = fs::temp_directory_path() / ("kvgpu-bench-backend-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir / "kubelet" / "device-plugins");
  testing::FakeKubelet kubelet(dir / "kubelet" / "device-plugins");
  if (!kubelet.Start()) return 1;

  deviceplugin::DaemonOptions options;
  options.args.sysfs_root = "/";
  options.args.kubelet_dir = dir / "kubelet";
  options.args.state_dir = dir / "state";
  options.args.node_readiness_check = false;
  deviceplugin::Config config;
  config.backend = {.name = name, .libvirt_uri = Env("KVGPU_LIBVIRT_URI")};
  config.lifecycle.watch_pods = false;
  config.lifecycle.events = false;
  config.lifecycle.grace_period = 1h;  // the bench removes; the lifecycle stays out of it
  config.scheduler_state.publish = false;
  options.config = config;
  deviceplugin::Daemon daemon(options);
  if (Status started = daemon.Start(); !started.ok()) {
    std::cerr << name << ": " << started.ToString() << "\n";
    return 1;
  }
  if (!kubelet.WaitUntil([&] { return kubelet.Devices(kResource).size() >= 2; })) {
    std::cerr << name << ": " << kResource << " not registered\n";
    return 1;
  }
  std::vector<std::string> ids;
  for (const auto& [id, health] : kubelet.Devices(kResource)) ids.push_back(id);
  allocations = std::min<int>(allocations, static_cast<int>(ids.size()));

  std::vector<double> allocate_ms;
  std::vector<std::string> made;
  for (int i = 0; i < allocations; ++i) {
    v1beta1::AllocateResponse response;
    auto start = Clock::now();
    grpc::Status status = kubelet.Allocate(kResource, {{ids[static_cast<size_t>(i)]}}, &response);
    allocate_ms.push_back(Ms(Clock::now() - start));
    if (!status.ok()) {
      std::cerr << name << ": Allocate " << i << ": " << status.error_message() << "\n";
      return 1;
    }
    for (const auto& [key, value] : response.container_responses(0).envs()) {
      if (key.starts_with("KVGPU_VGPU_") && key.ends_with("_UUIDS")) made.push_back(value);
    }
  }
  daemon.Stop();

  // The removals, through the same backend as the plugin's lifecycle would make them.
  mdev::PosixSysfsIo io;
  auto backend = mdev::MakeBackend(config.backend, "/", io);
  if (!backend.ok()) return 1;
  std::vector<double> remove_ms;
  for (const std::string& uuid : made) {
    auto start = Clock::now();
    Status removed = (*backend)->Remove(uuid);
    remove_ms.push_back(Ms(Clock::now() - start));
    if (!removed.ok()) {
      std::cerr << name << ": remove " << uuid << ": " << removed.ToString() << "\n";
      return 1;
    }
  }
  std::cout << "| " << name << " | " << allocations << " | " << Stats(allocate_ms) << " | "
            << Stats(remove_ms) << " |" << std::endl;
  fs::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace kvgpu

int main(int argc, char** argv) {
  int allocations = argc > 1 ? std::atoi(argv[1]) : 20;
  if (allocations < 1) {
    std::cerr << "usage: kvgpu-bench-backend [allocations]\n";
    return 2;
  }
  if (kvgpu::Env("KVGPU_PERSISTENT_MDEV").empty()) {
    std::cerr << "runs inside the VM lab after tests/vm/libvirt-lab.sh's setup: "
                 "bench/backend/run.sh\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  std::cout << "| backend | allocations | Allocate p50 ms | p90 | max | remove p50 ms | p90 | max "
               "|\n|---|---|---|---|---|---|---|---|"
            << std::endl;
  for (const char* backend : {"sysfs", "libvirt"}) {
    if (int rc = kvgpu::RunBackend(backend, allocations); rc != 0) return rc;
  }
  return 0;
}
