// libvirt's node-device XML (virNodeDeviceGetXMLDesc; format: libvirt.org/formatnode.html), the
// parts a vGPU backend needs, and the XML that asks libvirt for a transient mdev. Pure functions:
// no connection, so they are tested on XML captured from a real libvirtd.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "mdev/model.h"

namespace kvgpu::mdev {

// A device offering mdev types: a PCI device (`<capability type='mdev_types'>` inside its PCI
// capability), as a GPU is, or a virtual parent such as the mtty sample.
struct LibvirtParent {
  std::string device_name;  // libvirt's name: "pci_0000_3b_00_0"
  std::string sysfs_path;   // <path>: "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"
  Parent parent;  // in the model's terms; `name` is the PCI address "0000:3b:00.0", or the sysfs
                  // name of a virtual parent ("mtty"), as the sysfs backend names them
};

// An mdev (`<capability type='mdev'>`).
struct LibvirtMdev {
  std::string device_name;     // "mdev_<uuid with _>_<parent address with _>" on libvirt >= 7.8
  std::string parent_device;   // <parent>: libvirt's name of the parent device
  std::string parent_address;  // <parent_addr> when libvirt gives it (mdevctl-era libvirt)
  std::string uuid;
  std::string type_id;
  std::optional<uint32_t> iommu_group;
};

// Errors (kInvalid) say what was missing or malformed. A PCI device without mdev types parses to
// a parent with no types; a device that is neither PCI nor has mdev types is kInvalid.
Result<LibvirtParent> ParseLibvirtParent(const std::string& xml);
Result<LibvirtMdev> ParseLibvirtMdev(const std::string& xml);

// The kind of a failure libvirt reports only in words: mdevctl's and the kernel's answers reach
// it as an internal error with their text inside ("Unable to start mediated device: Error: No
// available instances of ..."). nullopt when the words say nothing known.
std::optional<ErrorCode> LibvirtFailureKind(const std::string& message);

// <device> for virNodeDeviceCreateXML: a transient mdev of `type_id` with `uuid` on the parent
// libvirt knows as `parent_device`. Values are escaped.
std::string LibvirtMdevCreateXml(const std::string& parent_device, const std::string& type_id,
                                 const std::string& uuid);

}  // namespace kvgpu::mdev
