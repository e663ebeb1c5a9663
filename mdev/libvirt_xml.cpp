#include "mdev/libvirt_xml.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <pugixml.hpp>
#include <sstream>

#include "common/ascii.h"
#include "mdev/nvidia.h"

namespace kvgpu::mdev {

namespace {

Status Malformed(const std::string& what) {
  return Status::Error(ErrorCode::kInvalid, "libvirt node-device XML: " + what);
}

Result<pugi::xml_node> ParseDevice(pugi::xml_document& doc, const std::string& xml) {
  // No entity expansion and no DTD processing beyond pugixml's defaults (it never fetches).
  pugi::xml_parse_result parsed = doc.load_string(xml.c_str(), pugi::parse_default);
  if (!parsed) return Malformed(std::string("not XML: ") + parsed.description());
  pugi::xml_node device = doc.child("device");
  if (!device) return Malformed("no <device> element");
  return device;
}

std::string Text(const pugi::xml_node& node) {
  std::string text = node.text().as_string();
  size_t begin = text.find_first_not_of(" \t\r\n");
  size_t end = text.find_last_not_of(" \t\r\n");
  return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
}

std::optional<std::string> OptionalText(const pugi::xml_node& node) {
  if (!node) return std::nullopt;
  std::string text = Text(node);
  if (text.empty()) return std::nullopt;
  return text;
}

// A number as libvirt writes it: decimal in <domain>/<bus>, "0x.." in attributes.
std::optional<uint32_t> Number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  unsigned long value = 0;
  try {
    value = std::stoul(text, &used, 0);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || value > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(value);
}

std::string PciAddress(uint32_t domain, uint32_t bus, uint32_t slot, uint32_t function) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%04x:%02x:%02x.%x", domain, bus, slot, function);
  return buffer;
}

// <domain>0</domain><bus>59</bus>... as child elements (the pci capability) or as attributes
// (<address domain='0x0000' .../> of phys_function).
Result<std::string> AddressOf(const pugi::xml_node& node, bool attributes) {
  uint32_t parts[4];
  const char* names[4] = {"domain", "bus", "slot", "function"};
  for (int i = 0; i < 4; ++i) {
    std::string text =
        attributes ? node.attribute(names[i]).as_string() : Text(node.child(names[i]));
    std::optional<uint32_t> value = Number(text);
    if (!value)
      return Malformed(std::string("PCI ") + names[i] + " '" + text + "' is not a number");
    parts[i] = *value;
  }
  return PciAddress(parts[0], parts[1], parts[2], parts[3]);
}

std::optional<uint32_t> IommuGroup(const pugi::xml_node& capability) {
  pugi::xml_node group = capability.child("iommuGroup");
  if (!group) return std::nullopt;
  return Number(group.attribute("number").as_string());
}

pugi::xml_node Capability(const pugi::xml_node& parent, const char* type) {
  return parent.find_child_by_attribute("capability", "type", type);
}

Result<VgpuType> ParseType(const pugi::xml_node& node) {
  VgpuType type;
  type.id = node.attribute("id").as_string();
  if (type.id.empty()) return Malformed("an mdev type without an id");
  type.name = OptionalText(node.child("name"));
  type.device_api = Text(node.child("deviceAPI"));
  std::string available = Text(node.child("availableInstances"));
  std::optional<uint32_t> count = Number(available);
  if (!count) {
    return Malformed("type " + type.id + ": availableInstances '" + available + "' is not a count");
  }
  type.available_instances = *count;
  return type;
}

}  // namespace

Result<LibvirtParent> ParseLibvirtParent(const std::string& xml) {
  pugi::xml_document doc;
  Result<pugi::xml_node> device = ParseDevice(doc, xml);
  if (!device.ok()) return device.status();
  LibvirtParent out;
  out.device_name = Text(device->child("name"));
  out.sysfs_path = Text(device->child("path"));
  if (out.device_name.empty()) return Malformed("a device without a <name>");
  Parent& parent = out.parent;
  parent.flavour = Flavour::kMdev;
  parent.driver = OptionalText(device->child("driver").child("name"));
  pugi::xml_node types;
  if (pugi::xml_node pci = Capability(*device, "pci")) {
    Result<std::string> address = AddressOf(pci, false);
    if (!address.ok()) return Malformed(out.device_name + ": " + address.status().message());
    parent.name = *address;
    parent.is_pci = true;
    parent.physical_gpu = parent.name;
    std::string vendor = pci.child("vendor").attribute("id").as_string();
    std::string product = pci.child("product").attribute("id").as_string();
    if (!vendor.empty()) parent.vendor_id = vendor;
    if (!product.empty()) parent.device_id = product;
    // libvirt writes <numa node='N'/> when the kernel knows the device's node (not for -1).
    if (pugi::xml_attribute node = pci.child("numa").attribute("node")) {
      if (int value = node.as_int(-1); value >= 0) parent.numa_node = value;
    }
    parent.pcie_root = PcieRootOfPath(out.sysfs_path);
    if (pugi::xml_node pf = Capability(pci, "phys_function")) {
      Result<std::string> pf_address = AddressOf(pf.child("address"), true);
      if (!pf_address.ok()) {
        return Malformed(out.device_name + " physical function: " + pf_address.status().message());
      }
      parent.is_virtual_function = true;
      parent.physical_gpu = *pf_address;
    }
    types = Capability(pci, "mdev_types");
  } else {
    // A virtual parent (the kernel's mtty sample): libvirt lists its types in a top-level
    // capability, itself nested once (<capability type='mdev_types'> twice, as libvirt 9.0
    // writes it). Its sysfs name is the parent's name, as under /sys/class/mdev_bus.
    types = Capability(*device, "mdev_types");
    if (!types) return Malformed(out.device_name + " is neither a PCI device nor an mdev parent");
    if (pugi::xml_node inner = Capability(types, "mdev_types")) types = inner;
    parent.name = std::filesystem::path(out.sysfs_path).filename().string();
    if (parent.name.empty()) return Malformed(out.device_name + ": a parent without a <path>");
    parent.physical_gpu = parent.name;
  }
  for (pugi::xml_node node : types.children("type")) {
    Result<VgpuType> type = ParseType(node);
    if (!type.ok()) return Malformed(out.device_name + ": " + type.status().message());
    parent.types.push_back(std::move(*type));
  }
  return out;
}

Result<LibvirtMdev> ParseLibvirtMdev(const std::string& xml) {
  pugi::xml_document doc;
  Result<pugi::xml_node> device = ParseDevice(doc, xml);
  if (!device.ok()) return device.status();
  LibvirtMdev out;
  out.device_name = Text(device->child("name"));
  out.parent_device = Text(device->child("parent"));
  pugi::xml_node mdev = Capability(*device, "mdev");
  if (!mdev) return Malformed(out.device_name + " is not an mdev");
  out.uuid = Text(mdev.child("uuid"));
  out.type_id = mdev.child("type").attribute("id").as_string();
  out.parent_address = Text(mdev.child("parent_addr"));
  out.iommu_group = IommuGroup(mdev);
  if (out.uuid.empty()) return Malformed(out.device_name + ": an mdev without a <uuid>");
  if (out.type_id.empty()) return Malformed(out.device_name + ": an mdev without a type id");
  return out;
}

std::optional<ErrorCode> LibvirtFailureKind(const std::string& message) {
  std::string lower = AsciiLower(message);
  // mdevctl 1.2's words (seen from libvirt 9.0 in the VM lab), then the kernel's errno texts.
  static const std::pair<const char*, ErrorCode> kWords[] = {
      {"no available instances", ErrorCode::kNoRoom},
      {"no space left on device", ErrorCode::kNoRoom},
      {"already exists", ErrorCode::kExists},
      {"does not support mdev type", ErrorCode::kUnknownType},
      {"invalid parent device", ErrorCode::kUnknownParent},
      {"device or resource busy", ErrorCode::kBusy},
      {"permission denied", ErrorCode::kPermission},
      {"operation not permitted", ErrorCode::kPermission},
  };
  for (const auto& [words, kind] : kWords) {
    if (lower.find(words) != std::string::npos) return kind;
  }
  return std::nullopt;
}

std::string LibvirtMdevCreateXml(const std::string& parent_device, const std::string& type_id,
                                 const std::string& uuid) {
  pugi::xml_document doc;
  pugi::xml_node device = doc.append_child("device");
  device.append_child("parent").text().set(parent_device.c_str());
  pugi::xml_node mdev = device.append_child("capability");
  mdev.append_attribute("type").set_value("mdev");
  mdev.append_child("type").append_attribute("id").set_value(type_id.c_str());
  mdev.append_child("uuid").text().set(uuid.c_str());
  std::ostringstream out;
  doc.save(out, "  ", pugi::format_indent | pugi::format_no_declaration);
  return out.str();
}

}  // namespace kvgpu::mdev
