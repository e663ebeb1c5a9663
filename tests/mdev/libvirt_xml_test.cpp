// libvirt's node-device XML: what a real libvirtd wrote (fixtures/libvirt/captured, from the VM
// lab's libvirtd, SOURCES.md there), and the odd shapes a parser must refuse plainly.
#include "mdev/libvirt_xml.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kvgpu::mdev {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::filesystem::path(KVGPU_TEST_FIXTURES) / "libvirt" / name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(LibvirtXmlTest, ARealPciParentGivesItsAddressIdentityAndTypes) {
  Result<LibvirtParent> parsed = ParseLibvirtParent(Fixture("captured/pci_parent_mdev_types.xml"));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->device_name, "pci_0000_00_03_0");
  EXPECT_EQ(parsed->sysfs_path, "/sys/devices/pci0000:00/0000:00:03.0");
  const Parent& parent = parsed->parent;
  EXPECT_EQ(parent.name, "0000:00:03.0");
  EXPECT_EQ(parent.physical_gpu, "0000:00:03.0");
  EXPECT_TRUE(parent.is_pci);
  EXPECT_FALSE(parent.is_virtual_function);
  EXPECT_EQ(parent.flavour, Flavour::kMdev);
  EXPECT_EQ(parent.vendor_id, "0x1234");
  EXPECT_EQ(parent.device_id, "0x11e8");
  EXPECT_EQ(parent.driver, "mttypci");
  ASSERT_EQ(parent.types.size(), 2u);
  EXPECT_EQ(parent.types[0].id, "mttypci-1");
  EXPECT_EQ(parent.types[0].name, "Single port serial");
  EXPECT_EQ(parent.types[0].device_api, "vfio-pci");
  EXPECT_EQ(parent.types[0].available_instances, 24u);
  EXPECT_EQ(parent.types[1].id, "mttypci-2");
  EXPECT_EQ(parent.types[1].available_instances, 12u);
  // libvirt's XML carries no description: the backend reads it from sysfs.
  EXPECT_FALSE(parent.types[0].description.has_value());
  // The VM has no NUMA topology (no <numa>); its root complex is in the device's sysfs path.
  EXPECT_FALSE(parent.numa_node.has_value());
  EXPECT_EQ(parent.pcie_root, "pci0000:00");

  Result<LibvirtParent> full =
      ParseLibvirtParent(Fixture("captured/pci_parent_mdev_types_full.xml"));
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->parent.types[0].available_instances, 0u);
  EXPECT_EQ(full->parent.types[1].available_instances, 0u);
}

TEST(LibvirtXmlTest, APciParentsNumaNodeIsReadAndMinusOneIsNone) {
  std::string xml = Fixture("captured/pci_parent_mdev_types.xml");
  const std::string anchor = "<vendor id='0x1234'/>";
  ASSERT_NE(xml.find(anchor), std::string::npos);
  std::string on_node = xml;
  on_node.insert(on_node.find(anchor) + anchor.size(), "\n    <numa node='1'/>");
  Result<LibvirtParent> parsed = ParseLibvirtParent(on_node);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->parent.numa_node, 1);
  std::string none = xml;
  none.insert(none.find(anchor) + anchor.size(), "\n    <numa node='-1'/>");
  parsed = ParseLibvirtParent(none);
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->parent.numa_node.has_value());
}

TEST(LibvirtXmlTest, PcieRootIsTheHostBridgeInThePath) {
  EXPECT_EQ(PcieRootOfPath("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"), "pci0000:3a");
  EXPECT_EQ(PcieRootOfPath("/tmp/x/sys/devices/pci0001:00/0001:00:01.0/0001:01:00.4"),
            "pci0001:00");
  EXPECT_FALSE(PcieRootOfPath("/sys/devices/virtual/mtty/mtty").has_value());
  EXPECT_FALSE(PcieRootOfPath("/sys/devices/pci000g:00/0000:00:01.0").has_value());
  EXPECT_FALSE(PcieRootOfPath("").has_value());
}

TEST(LibvirtXmlTest, AVirtualParentIsNamedAsSysfsNamesIt) {
  // libvirt 9.0 lists the stock mtty's virtual parent with its types nested once more.
  Result<LibvirtParent> parsed = ParseLibvirtParent(Fixture("captured/mtty_virtual_parent.xml"));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->device_name, "mtty_mtty");
  EXPECT_EQ(parsed->parent.name, "mtty");
  EXPECT_FALSE(parsed->parent.is_pci);
  ASSERT_EQ(parsed->parent.types.size(), 2u);
  EXPECT_EQ(parsed->parent.types[0].id, "mtty-1");
  EXPECT_EQ(parsed->parent.types[1].available_instances, 12u);
}

TEST(LibvirtXmlTest, RealMdevsGiveUuidTypeParentAndGroupActiveOrDefined) {
  for (const char* name : {"captured/mdev_transient.xml", "captured/mdev_persistent.xml",
                           "captured/mdev_persistent_defined_inactive.xml"}) {
    Result<LibvirtMdev> parsed = ParseLibvirtMdev(Fixture(name));
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
    EXPECT_EQ(parsed->parent_device, "pci_0000_00_03_0") << name;
    EXPECT_EQ(parsed->parent_address, "0000:00:03.0") << name;
    EXPECT_EQ(parsed->type_id, "mttypci-2") << name;
    EXPECT_EQ(parsed->iommu_group, 0u) << name;
    EXPECT_EQ(
        parsed->device_name, "mdev_" +
                                 [&] {
                                   std::string uuid = parsed->uuid;
                                   std::replace(uuid.begin(), uuid.end(), '-', '_');
                                   return uuid;
                                 }() +
                                 "_0000_00_03_0")
        << name;
  }
  EXPECT_EQ(ParseLibvirtMdev(Fixture("captured/mdev_transient.xml"))->uuid,
            "88c5f623-dd30-4ab6-bcf3-bdebba187ea3");
}

TEST(LibvirtXmlTest, LibvirtsWordsForMdevctlsFailuresGiveTheirKinds) {
  // Each line libvirt 9.0 answered in the lab (captured/virsh-errors.txt), as its API gives it.
  std::istringstream lines(Fixture("captured/virsh-errors.txt"));
  std::map<std::string, std::optional<ErrorCode>> kinds;
  std::string section;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# ", 0) == 0) {
      section = line.substr(2);
    } else if (!kinds.contains(section)) {
      kinds[section] = LibvirtFailureKind(line.substr(line.find(": ") + 2));
    }
  }
  EXPECT_EQ(kinds.at("err_full_type"), ErrorCode::kNoRoom);
  EXPECT_EQ(kinds.at("err_unknown_type"), ErrorCode::kUnknownType);
  EXPECT_EQ(kinds.at("err_duplicate_uuid"), ErrorCode::kExists);
  EXPECT_EQ(kinds.at("err_nonexistent_parent"), ErrorCode::kUnknownParent);
  // Not found has its own error code (VIR_ERR_NO_NODE_DEVICE); its words say nothing more.
  EXPECT_EQ(kinds.at("err_destroy_nonexistent"), std::nullopt);
}

TEST(LibvirtXmlTest, MalformedDocumentsAreRefusedWithWhatWasWrong) {
  struct Case {
    const char* xml;
    const char* says;
  };
  const Case cases[] = {
      {"", "not XML"},
      {"<device><name>x</name>", "not XML"},
      {"<node/>", "no <device>"},
      {"<device><capability type='pci'/></device>", "without a <name>"},
      {"<device><name>css_0_0_0052</name><capability type='css'/></device>",
       "neither a PCI device nor an mdev parent"},
      {"<device><name>pci_x</name><capability type='pci'><domain>0</domain><bus>zz</bus>"
       "<slot>0</slot><function>0</function></capability></device>",
       "PCI bus 'zz' is not a number"},
      {"<device><name>pci_x</name><capability type='pci'><domain>0</domain><bus>1</bus>"
       "<slot>0</slot><function>0</function><capability type='mdev_types'><type id='t'>"
       "<availableInstances>-1</availableInstances></type></capability></capability></device>",
       "availableInstances '-1' is not a count"},
      {"<device><name>pci_x</name><capability type='pci'><domain>0</domain><bus>1</bus>"
       "<slot>0</slot><function>0</function><capability type='mdev_types'><type>"
       "<availableInstances>1</availableInstances></type></capability></capability></device>",
       "without an id"},
  };
  for (const Case& c : cases) {
    Result<LibvirtParent> parsed = ParseLibvirtParent(c.xml);
    ASSERT_FALSE(parsed.ok()) << c.xml;
    EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalid);
    EXPECT_NE(parsed.status().message().find(c.says), std::string::npos)
        << parsed.status().message();
  }
  EXPECT_NE(ParseLibvirtMdev("<device><name>m</name><capability type='mdev'><type id='t'/>"
                             "</capability></device>")
                .status()
                .message()
                .find("without a <uuid>"),
            std::string::npos);
  EXPECT_NE(ParseLibvirtMdev("<device><name>m</name><capability type='mdev'>"
                             "<uuid>1b6a0e3c-59a4-4a8e-9b0c-2f3f6a6a1d11</uuid></capability>"
                             "</device>")
                .status()
                .message()
                .find("without a type id"),
            std::string::npos);
  EXPECT_NE(ParseLibvirtMdev(Fixture("test-driver-node.xml")).status().message().find("<device>"),
            std::string::npos);
}

TEST(LibvirtXmlTest, APciDeviceWithoutMdevTypesIsAParentWithNone) {
  Result<LibvirtParent> parsed = ParseLibvirtParent(
      "<device><name>pci_0000_00_1f_2</name><capability type='pci'><domain>0</domain>"
      "<bus>0</bus><slot>31</slot><function>2</function></capability></device>");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->parent.name, "0000:00:1f.2");
  EXPECT_TRUE(parsed->parent.types.empty());
}

TEST(LibvirtXmlTest, TheCreateRequestEscapesWhatItCarriesAndParsesBack) {
  std::string xml = LibvirtMdevCreateXml("pci_0000_3b_00_0", "odd<&>'\"type",
                                         "1b6a0e3c-59a4-4a8e-9b0c-2f3f6a6a1d11");
  EXPECT_EQ(xml.find("<&>"), std::string::npos) << xml;
  Result<LibvirtMdev> back =
      ParseLibvirtMdev("<device><name>x</name>" + xml.substr(xml.find("<parent>")));
  // The request has no <name>: parse it as libvirt would after naming it.
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << xml;
  EXPECT_EQ(back->parent_device, "pci_0000_3b_00_0");
  EXPECT_EQ(back->type_id, "odd<&>'\"type");
  EXPECT_EQ(back->uuid, "1b6a0e3c-59a4-4a8e-9b0c-2f3f6a6a1d11");
}

}  // namespace
}  // namespace kvgpu::mdev
