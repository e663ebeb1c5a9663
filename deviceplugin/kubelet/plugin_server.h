// One kubelet device plugin (v1beta1) server per resource, on its own unix socket in kubelet's
// device-plugins directory. Translates between the wire and the ResourceManager; errors become
// gRPC statuses only here. The servers use gRPC's callback API: every server of the process shares
// gRPC's own threads, and an open ListAndWatch stream holds no thread while it waits.
//
// plugin_server.cpp serves, registers and answers the unary calls (options, preferred allocation,
// Allocate); list_and_watch.cpp keeps the ListAndWatch streams and pushes each changed list.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/canceller.h"
#include "common/status.h"
#include "deviceplugin/kubelet/plugin_server_types.h"
#include "deviceplugin/model/resource_manager.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace kvgpu::deviceplugin {

class ListAndWatchStreams;  // list_and_watch.h

class PluginServer {
 public:
  PluginServer(std::string resource, std::filesystem::path plugin_dir, ResourceManager& manager,
               PluginObservers observers = {});
  ~PluginServer();
  PluginServer(const PluginServer&) = delete;
  PluginServer& operator=(const PluginServer&) = delete;

  // Serves on <plugin_dir>/<socket> (a stale file is replaced), then checks that the socket
  // answers by calling GetDevicePluginOptions on it. Serving again first stops the old server.
  Status Serve();
  // Ends ListAndWatch streams, stops the server and removes the socket.
  void Stop();
  // Registers with kubelet; fails fast when kubelet is not listening, at `timeout` when it
  // accepts and never answers, and at once when `cancel` fires (kCancelled).
  Status Register(const std::filesystem::path& kubelet_socket, std::chrono::milliseconds timeout,
                  Canceller* cancel = nullptr);
  // Some device list may have changed: the caller's thread reads this resource's list once and
  // starts the write on every open ListAndWatch stream whose kubelet does not have it yet. Must
  // not be called with the manager's lock held (the change listener is called outside it).
  void Notify();
  // Waits until every open ListAndWatch stream has written each list offered to it before the
  // call (a stream that ends counts as done); false when one had not by `deadline`, as with a
  // kubelet that stopped reading.
  bool WaitPushed(std::chrono::steady_clock::time_point deadline);
  // Withheld: every ListAndWatch stream is sent an empty list (the node is not ready for vGPU
  // pods, node_readiness.h) until this is set back; a change is pushed at once.
  void SetWithheld(bool withheld);

  const std::string& resource() const { return resource_; }
  const std::string& socket_name() const { return socket_name_; }
  std::filesystem::path socket_path() const { return plugin_dir_ / socket_name_; }
  bool serving() const;

 private:
  class Service;

  std::string resource_;
  std::filesystem::path plugin_dir_;
  std::string socket_name_;
  ResourceManager& manager_;
  std::shared_ptr<const PluginObservers> observers_;
  std::shared_ptr<std::atomic<bool>> withheld_ = std::make_shared<std::atomic<bool>>(false);

  mutable std::mutex mutex_;  // guards the members below
  std::shared_ptr<ListAndWatchStreams> streams_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace kvgpu::deviceplugin
