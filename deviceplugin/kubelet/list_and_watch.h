// The ListAndWatch streams of one device plugin server (plugin_server.h): each kubelet stream is
// given the resource's device list when it opens and again after every change, one write at a time
// and never a list kubelet already has; Allocate's answer waits until every stream has written what
// it was offered. Apart from the server, which serves, registers and answers the unary calls.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "deviceplugin/kubelet/plugin_server_types.h"
#include "deviceplugin/model/resource_manager.h"
#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"

namespace kvgpu::deviceplugin {

// What kubelet sees of a device: its ID, health and NUMA node.
struct WireDevice {
  std::string id;
  bool healthy = true;
  std::optional<int32_t> numa_node;

  bool operator==(const WireDevice&) const = default;
};
using WireList = std::vector<WireDevice>;

class ListAndWatchStream;  // one kubelet stream (list_and_watch.cpp)

// The open ListAndWatch streams of one server. Opening a stream, notifying and ending all hold one
// lock, so lists reach every stream in the order they were read.
class ListAndWatchStreams {
 public:
  ListAndWatchStreams(std::string resource, ResourceManager& manager,
                      std::shared_ptr<const PluginObservers> observers,
                      std::shared_ptr<const std::atomic<bool>> withheld)
      : resource_(std::move(resource)),
        manager_(manager),
        observers_(std::move(observers)),
        withheld_(std::move(withheld)) {}

  // Made on the thread that serves, used on gRPC's pooled threads: gRPC hands a call over through
  // its own lock-free queues, which order the two in fact but are not instrumented, so
  // ThreadSanitizer would see this object's construction race with its first use. Serve() publishes
  // it under the lock and each use starts by taking it: an order both the language and
  // ThreadSanitizer see.
  void Publish() { std::lock_guard lock(mutex_); }

  grpc::ServerWriteReactor<::v1beta1::ListAndWatchResponse>* Open();
  void Notify();
  // Waits until each open stream has written every list offered to it so far; false when one
  // had not by `deadline`.
  bool WaitWritten(std::chrono::steady_clock::time_point deadline);
  void EndAll();

 private:
  void Prune();
  // An empty list while withheld: kubelet then counts no allocatable device of this resource.
  WireList Current() const;

  const std::string resource_;
  ResourceManager& manager_;
  const std::shared_ptr<const PluginObservers> observers_;
  const std::shared_ptr<const std::atomic<bool>> withheld_;
  std::mutex mutex_;  // guards the members below
  bool ended_ = false;
  std::vector<std::weak_ptr<ListAndWatchStream>> open_;
};

}  // namespace kvgpu::deviceplugin
