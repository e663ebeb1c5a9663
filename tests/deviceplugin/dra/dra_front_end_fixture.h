// The DRA front end (deviceplugin/dra/dra_front_end.h) built by a test with the options it
// chooses, over a simulated t4x2 (GPU 0 in DRA mode) and claims served by the fake API server;
// the test calls the plugin itself unless it serves kubelet's sockets. What the observers were
// told is kept for the test to read.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/common/dra_node.h"
#include "fakes/common/sim_node.h"
#include "fakes/common/temp_dir.h"
#include "kube/api_client.h"
#include "tests/deviceplugin/dra/dra_flow_fixture.h"

namespace kvgpu::testing {

class DraFrontEndTest : public ::testing::Test {
 public:
  using Options = deviceplugin::dra::DraFrontEndOptions;

 protected:
  void SetUp() override {
    ASSERT_TRUE(api_server_.Start());
    auto client = kube::ApiClient::Create(api_server_.ClientConfig());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    api_ = std::move(client).value();
  }

  // Options as the DRA tests build them (dra_node.h), kubelet's sockets not served.
  Options Defaults() const { return TestDraOptions(dir_.path(), {sim_.gpu(0)}, false); }

  void Start(Options options) {
    deviceplugin::dra::DraObservers observers;
    observers.on_metadata_write = [this](bool ok, std::chrono::nanoseconds, size_t files) {
      std::lock_guard lock(mutex_);
      metadata_writes_.emplace_back(ok, files);
    };
    observers.on_claim = [this](deviceplugin::dra::DraCall call, std::chrono::nanoseconds, bool ok,
                                size_t claims, size_t files) {
      std::lock_guard lock(mutex_);
      claim_reports_.push_back({call, ok, claims, files});
    };
    observers.on_slices = [this](bool ok, bool wrote, int64_t, bool) {
      std::lock_guard lock(mutex_);
      if (ok && wrote) ++slice_writes_;
    };
    front_end_ = std::make_unique<deviceplugin::dra::DraFrontEnd>(sim_.node(), *api_,
                                                                  std::move(options), observers);
    Status started = front_end_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }

  deviceplugin::dra::DraFrontEnd& front_end() { return *front_end_; }
  deviceplugin::dra::DraPlugin& plugin() { return front_end_->plugin(); }

  deviceplugin::dra::ClaimRef Claim(const std::string& name, const std::string& uid,
                                    const std::vector<DraResult>& results) {
    api_server_.SetResourceClaim(MakeAllocatedClaim("ns", name, uid, results));
    return {"ns", uid, name};
  }
  DraResult Ours(uint32_t slot, const std::string& request = "gpu") const {
    return {request, kDraDriver, kDraNode, DraName(sim_.gpu(0), kType, slot)};
  }
  size_t Vgpus() { return sim_.model().VgpuIds().size(); }

  // Where the device metadata of a claim's request goes by default, and its CDI spec.
  std::filesystem::path MetadataDir() const {
    return dir_.path() / "state" / std::string(deviceplugin::dra::kMetadataHostSubDir);
  }
  std::filesystem::path HostFile(const std::string& claim, const std::string& request) const {
    return MetadataDir() / ("ns_" + claim) / request / "metadata.json";
  }
  std::filesystem::path CdiSpec(const std::string& uid, const std::string& request) const {
    return dir_.path() / "cdi" /
           (std::string(kDraDriver) + "_metadata_" + uid + "_" + request + ".json");
  }

  struct ClaimReport {
    deviceplugin::dra::DraCall call;
    bool ok;
    size_t claims;
    size_t metadata_files;
  };
  std::vector<std::pair<bool, size_t>> metadata_writes() const {
    std::lock_guard lock(mutex_);
    return metadata_writes_;
  }
  std::vector<ClaimReport> claim_reports() const {
    std::lock_guard lock(mutex_);
    return claim_reports_;
  }
  int slice_writes() const {
    std::lock_guard lock(mutex_);
    return slice_writes_;
  }

  SimNode sim_{"t4x2"};
  TempDir dir_;
  FakeApiServer api_server_;
  std::unique_ptr<kube::ApiClient> api_;

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<bool, size_t>> metadata_writes_;
  std::vector<ClaimReport> claim_reports_;
  int slice_writes_ = 0;
  std::unique_ptr<deviceplugin::dra::DraFrontEnd> front_end_;  // last: stopped before the rest
};

}  // namespace kvgpu::testing
