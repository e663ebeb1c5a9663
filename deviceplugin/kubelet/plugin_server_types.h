// What the device plugin server (plugin_server.h) shares with its owner and its ListAndWatch
// streams (list_and_watch.h): upstream's constants and the observers the server reports to. Apart
// from the server, so the streams use them without including plugin_server.h.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace kvgpu::deviceplugin {

// Upstream's constants (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go).
inline constexpr const char* kApiVersion = "v1beta1";
inline constexpr const char* kHealthy = "Healthy";
inline constexpr const char* kUnhealthy = "Unhealthy";
inline constexpr const char* kKubeletSocketName = "kubelet.sock";

// What a PluginServer tells its owner; either may be empty.
struct PluginObservers {
  // How long each push took, from the change notice (Notify) to the list written.
  std::function<void(const std::string& resource, std::chrono::nanoseconds)> on_push;
  // kubelet ended a ListAndWatch stream this server did not end: kubelet stopped or is restarting.
  // Its connections drop the moment it goes, well before a new kubelet answers on PodResources,
  // so this is the earliest word of a restart.
  std::function<void(const std::string& resource)> on_kubelet_left;
};

}  // namespace kvgpu::deviceplugin
