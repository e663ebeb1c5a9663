// DRA kubelet plugin benchmark on a simulated t4x2 (both GPUs in DRA mode): NodePrepareResources
// of a one-device claim through gRPC v1 on the plugin's unix socket, one kept connection as
// kubelet keeps it, p50/p99/max:
//   first      a new claim: API read, checkpoint, vGPU made, GPU's free room read again, CDI
//              spec, checkpoint again; the kernel's create time (the model's observer) subtracted
//   first, every sysfs call excluded
//              the same prepares less the time of every sysfs call made meanwhile (the create
//              and the reads after it): the plugin's own time
//   again      the same claim sent again (answered from the checkpoint)
// The claim is read from an in-memory API (`memory`) or from the fake API server over HTTPS
// (`https`, through the API client, which keeps idle connections for the next read). Every claim
// is unprepared after it is measured (not timed), so the node never fills.
//
// Usage: kvgpu-bench-dra [iterations [memory|https]]   (default 500 memory)
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

#include "bench/bench_stats.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/common/dra_node.h"
#include "fakes/common/sim_node.h"
#include "fakes/common/temp_dir.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "mdev/sysfs_backend.h"

namespace kvgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
namespace drav1 = k8s::io::kubelet::pkg::apis::dra::v1;

class KernelClock : public deviceplugin::ManagerObserver {
 public:
  void OnVgpuCreated(const std::string&, std::chrono::nanoseconds took, bool) override {
    kernel += took;
  }
  std::chrono::nanoseconds kernel{0};
};

// Every sysfs call's time, summed: the kernel's side of a prepare, whatever the call (the create
// and the reads of the GPU's free room after it). On this simulated node a read costs the
// simulator's path checks besides the tmpfs read; on a real node, the driver's show().
class SysfsClock : public mdev::SysfsIo {
  template <typename F>
  auto Timed(F&& call) {
    auto start = Clock::now();
    auto result = call();
    total_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    return result;
  }

 public:
  explicit SysfsClock(mdev::SysfsIo& inner) : inner_(inner) {}
  Result<std::string> ReadFile(const fs::path& p) override {
    return Timed([&] { return inner_.ReadFile(p); });
  }
  Status WriteFile(const fs::path& p, std::string_view d) override {
    return Timed([&] { return inner_.WriteFile(p, d); });
  }
  Result<std::vector<std::string>> ListDir(const fs::path& p) override {
    return Timed([&] { return inner_.ListDir(p); });
  }
  Result<fs::path> ReadLink(const fs::path& p) override {
    return Timed([&] { return inner_.ReadLink(p); });
  }
  Result<fs::path> Canonical(const fs::path& p) override {
    return Timed([&] { return inner_.Canonical(p); });
  }
  bool Exists(const fs::path& p) override {
    return Timed([&] { return inner_.Exists(p); });
  }
  bool IsDirectory(const fs::path& p) override {
    return Timed([&] { return inner_.IsDirectory(p); });
  }
  std::chrono::nanoseconds Total() const { return std::chrono::nanoseconds(total_ns_.load()); }

 private:
  mdev::SysfsIo& inner_;
  std::atomic<int64_t> total_ns_{0};
};

// Claims by path, for the in-memory API.
class MemoryClaims : public kube::ApiTransport {
 public:
  Result<nlohmann::json> Get(const std::string& path, Canceller*) override {
    std::lock_guard lock(mutex_);
    auto it = claims_.find(path);
    if (it == claims_.end()) return Status::Error(ErrorCode::kHttp, "not found", 0);
    return it->second;
  }
  Result<nlohmann::json> Post(const std::string&, const nlohmann::json&, Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }
  Result<nlohmann::json> Patch(const std::string&, const nlohmann::json&, const std::string&,
                               Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, Canceller*) override {
    return Status::Error(ErrorCode::kConfig, "not supported");
  }
  void Set(nlohmann::json claim) {
    std::lock_guard lock(mutex_);
    const auto& m = claim["metadata"];
    claims_["/apis/resource.k8s.io/v1/namespaces/" + m["namespace"].get<std::string>() +
            "/resourceclaims/" + m["name"].get<std::string>()] = claim;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, nlohmann::json> claims_;
};

int Run(int iterations, bool https) {
  spdlog::set_level(spdlog::level::warn);
  SimNode sim("t4x2");
  TempDir dir;
  MemoryClaims memory;
  FakeApiServer server;
  std::unique_ptr<kube::ApiClient> client;
  kube::ApiTransport* api = &memory;
  if (https) {
    server.EnableKeepAlive();  // as kube-apiserver keeps a client's connection open
    if (!server.Start()) return 1;
    auto made = kube::ApiClient::Create(server.ClientConfig());
    if (!made.ok()) return 1;
    client = std::move(made).value();
    api = client.get();
  }
  KernelClock kernel;
  SysfsClock sysfs(sim.model());
  mdev::SysfsBackend backend(sim.root(), sysfs);
  // As the daemon does (daemon.cpp ServeDra): the rescan after a create runs after the answer,
  // here between iterations, untimed.
  std::atomic<bool> rescan{false};
  deviceplugin::dra::DraObservers observers;
  observers.model = &kernel;
  observers.request_rescan = [&] { rescan = true; };
  auto stack = StartDra(backend, *api, TestDraOptions(dir.path(), {sim.gpu(0), sim.gpu(1)}, true),
                        std::move(observers));
  const deviceplugin::dra::DraServerOptions sockets{dir.path() / "kubelet", kDraDriver};
  auto channel =
      grpc::CreateChannel("unix://" + deviceplugin::dra::DraPluginSocket(sockets).string(),
                          grpc::InsecureChannelCredentials());
  auto stub = drav1::DRAPlugin::NewStub(channel);

  std::vector<double> first, first_own, again;
  for (int i = 0; i < iterations; ++i) {
    const std::string uid = "uid-" + std::to_string(i), name = "c" + std::to_string(i);
    const uint32_t slot = static_cast<uint32_t>(i % 16);
    nlohmann::json claim = MakeAllocatedClaim(
        "ns", name, uid, {{"gpu", kDraDriver, kDraNode, DraName(sim.gpu(0), "nvidia-222", slot)}});
    if (https) {
      server.SetResourceClaim(claim);
    } else {
      memory.Set(claim);
    }
    drav1::NodePrepareResourcesRequest request;
    auto* c = request.add_claims();
    c->set_namespace_("ns");
    c->set_uid(uid);
    c->set_name(name);
    for (int round = 0; round < 2; ++round) {
      drav1::NodePrepareResourcesResponse response;
      grpc::ClientContext context;
      auto kernel_before = kernel.kernel;
      auto sysfs_before = sysfs.Total();
      auto start = Clock::now();
      grpc::Status status = stub->NodePrepareResources(&context, request, &response);
      auto took = Clock::now() - start;
      auto own = took - (sysfs.Total() - sysfs_before);
      took -= kernel.kernel - kernel_before;
      if (!status.ok() || !response.claims().at(uid).error().empty()) {
        std::fprintf(stderr, "prepare %s failed: %s %s\n", uid.c_str(),
                     status.error_message().c_str(), response.claims().at(uid).error().c_str());
        return 1;
      }
      auto micros = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
      (round == 0 ? first : again).push_back(micros(took));
      if (round == 0) first_own.push_back(micros(own));
    }
    if (rescan.exchange(false)) (void)stack->manager().Refresh();
    drav1::NodeUnprepareResourcesRequest unprepare;
    *unprepare.add_claims() = *c;
    drav1::NodeUnprepareResourcesResponse unprepared;
    grpc::ClientContext context;
    if (!stub->NodeUnprepareResources(&context, unprepare, &unprepared).ok() ||
        !unprepared.claims().at(uid).error().empty()) {
      std::fprintf(stderr, "unprepare %s failed\n", uid.c_str());
      return 1;
    }
  }
  for (auto& [what, samples] : {std::pair{"first prepare (kernel create excluded)", &first},
                                std::pair{"first prepare (every sysfs call excluded)", &first_own},
                                std::pair{"prepare again (from the checkpoint)", &again}}) {
    const bench::Percentiles s = bench::Summarize(*samples);
    std::printf("%-42s %-6s n=%zu  p50 %8.1f us  p99 %8.1f us  max %8.1f us\n", what,
                https ? "https" : "memory", samples->size(), s.p50, s.p99, s.max);
  }
  return 0;
}

}  // namespace
}  // namespace kvgpu::testing

int main(int argc, char** argv) {
  int iterations = argc > 1 ? std::atoi(argv[1]) : 500;
  std::string mode = argc > 2 ? argv[2] : "memory";
  if (iterations < 2 || (mode != "memory" && mode != "https")) {
    std::fprintf(stderr, "usage: kvgpu-bench-dra [iterations >= 2 [memory|https]]\n");
    return 2;
  }
  return kvgpu::testing::Run(iterations, mode == "https");
}
