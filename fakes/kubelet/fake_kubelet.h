// A kubelet, as far as a device plugin can see one: it serves Registration on
// <dir>/kubelet.sock and, for every accepted registration, does what kubelet's device manager
// does: validates the request (version, extended resource name), dials the plugin's endpoint,
// asks GetDevicePluginOptions, and keeps a ListAndWatch stream open, remembering the latest list.
// Tests then call GetPreferredAllocation and Allocate through it, naming the device IDs: which
// IDs kubelet would pick, and its in-use set that a PodResources List can rebuild without an
// allocation in flight (so two pods get one ID), are the peer kubelet's to model
// (tests/deviceplugin/peer/kubelet_peer.py).
//
// Restart() behaves like a kubelet restart: the Registration server goes away, every other socket
// in the directory is deleted (kubelet clears the directory when it starts), then kubelet.sock is
// created again and plugins must register anew.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fakes/common/eventually.h"
#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace kvgpu::testing {

class FakeKubelet {
 public:
  explicit FakeKubelet(std::filesystem::path plugin_dir);
  ~FakeKubelet();
  FakeKubelet(const FakeKubelet&) = delete;
  FakeKubelet& operator=(const FakeKubelet&) = delete;

  // Serves Registration; false when the socket cannot be served.
  bool Start();
  // Kubelet dies: no more kubelet.sock, plugin streams dropped.
  void Stop();
  // Stop, clear the directory as kubelet does at start, Start.
  bool Restart();

  std::filesystem::path socket_path() const { return plugin_dir_ / "kubelet.sock"; }

  // Every Register call received, accepted or not, in order.
  std::vector<v1beta1::RegisterRequest> Registrations() const;
  // Resource -> device ID -> health, from the newest ListAndWatch message.
  std::map<std::string, std::string> Devices(const std::string& resource) const;
  // The same devices with the health kubelet's device manager holds for them: all "Unhealthy"
  // while the resource's endpoint is gone (ManagerImpl.PluginDisconnected marks them so at once,
  // and only the list of a new registration makes them healthy again). What admission counts.
  std::map<std::string, std::string> HeldDevices(const std::string& resource) const;
  // Resource -> device ID -> the NUMA nodes of its topology, for devices sent with one.
  std::map<std::string, std::vector<int64_t>> NumaNodes(const std::string& resource) const;
  // Number of ListAndWatch messages received for the resource since its last registration.
  int Updates(const std::string& resource) const;
  // Options kubelet got from GetDevicePluginOptions after the registration.
  v1beta1::DevicePluginOptions Options(const std::string& resource) const;
  bool Connected(const std::string& resource) const;
  // Resources with an accepted registration, whose ListAndWatch stream is open.
  std::vector<std::string> ConnectedResources() const;

  // Waits until `done` holds (checked on every change and every 10 ms) or `timeout` passes.
  bool WaitUntil(const std::function<bool()>& done,
                 std::chrono::milliseconds timeout = kEventDeadline) const;

  grpc::Status Allocate(const std::string& resource,
                        const std::vector<std::vector<std::string>>& containers,
                        v1beta1::AllocateResponse* response);
  // A fresh GetDevicePluginOptions call (kubelet makes one per registration).
  grpc::Status GetDevicePluginOptions(const std::string& resource,
                                      v1beta1::DevicePluginOptions* options);
  grpc::Status GetPreferredAllocation(const std::string& resource,
                                      const v1beta1::PreferredAllocationRequest& request,
                                      v1beta1::PreferredAllocationResponse* response);

  // Called from the Registration service.
  grpc::Status HandleRegister(const v1beta1::RegisterRequest& request);

 private:
  struct Endpoint;
  class RegistrationService;

  void DropEndpoints();
  std::shared_ptr<Endpoint> FindEndpoint(const std::string& resource) const;

  std::filesystem::path plugin_dir_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<v1beta1::RegisterRequest> registrations_;
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_;
};

}  // namespace kvgpu::testing
