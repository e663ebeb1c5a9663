// libvirt's node-device XML: what a real libvirtd wrote (fixtures/libvirt/captured, from the VM
// lab's libvirtd, SOURCES.md there), and the odd shapes a parser must refuse plainly.
#include "mdev/libvirt_xml.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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
      {"<device><name>css_0_0_0052</name><capability type='css'/></device>", "not a PCI device"},
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
