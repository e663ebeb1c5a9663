// How the libvirt backend (libvirt_backend.h) connects and waits. Apart from the backend so that
// its own pieces (libvirt_internal.h) need not include the backend that includes them.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

namespace kvgpu::mdev {

struct LibvirtOptions {
  std::string uri = "qemu:///system";
  // libvirt's XML names each type but not its description (an NVIDIA type's framebuffer and
  // instance limit): that one attribute is read from the sysfs path libvirt gives, under this
  // root. Only read, never written.
  std::filesystem::path sysfs_root = "/";
  std::chrono::milliseconds reconnect_initial{500};
  std::chrono::milliseconds reconnect_max{30000};
  // How long a created vGPU may take to show its IOMMU group, and a removed one to go, in
  // libvirt's view (which follows udev).
  std::chrono::milliseconds settle_timeout{10000};
  std::chrono::milliseconds settle_poll{20};
  // libvirt's keepalive: a libvirtd that stops answering for interval * count is given up on.
  int keepalive_interval_s = 5;
  unsigned keepalive_count = 3;
};

}  // namespace kvgpu::mdev
