// The fixture of the DRA front end's tests: the front end (dra_node.h) on a simulated t4x2
// (GPU 0 in DRA mode, GPU 1 left to the device plugin), driven by a kubelet written from
// upstream's protos (dra_test_kubelet.h), the claims served by the fake API server.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/common/dra_node.h"
#include "fakes/common/sim_node.h"
#include "fakes/common/temp_dir.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "kube/api_client.h"

namespace kvgpu::testing {

inline constexpr const char* kType = "nvidia-222";  // GRID T4-1B, 16 per GPU

class DraFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_server_.Start());
    auto client = kube::ApiClient::Create(api_server_.ClientConfig());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    api_ = std::move(client).value();
    StartDaemon();
  }

  void StartDaemon() {
    stack_ = StartDra(sim_.node(), *api_, TestDraOptions(dir_.path(), {sim_.gpu(0)}, true));
    auto reg = kubelet_.Register(kDraDriver);
    ASSERT_TRUE(reg);
  }
  void StopDaemon() { stack_.reset(); }

  std::string Pool() const { return kDraNode; }
  std::string Gpu0Device(uint32_t slot) const { return DraName(sim_.gpu(0), kType, slot); }
  DraClaim Claim(const std::string& name, const std::string& uid,
                 const std::vector<DraResult>& results) {
    api_server_.SetResourceClaim(MakeAllocatedClaim("ns", name, uid, results));
    return {"ns", uid, name};
  }
  DraResult Ours(const std::string& device, const std::string& request = "gpu") {
    return {request, kDraDriver, Pool(), device};
  }
  size_t Vgpus() { return sim_.model().VgpuIds().size(); }

  SimNode sim_{"t4x2"};
  TempDir dir_;
  FakeApiServer api_server_;
  std::unique_ptr<kube::ApiClient> api_;
  DraTestKubelet kubelet_{dir_.path() / "kubelet"};
  std::unique_ptr<deviceplugin::dra::DraFrontEnd> stack_;
};

}  // namespace kvgpu::testing
