// vgpuctl's contract: subcommands, aligned human tables, the documented JSON, exit codes and one
// clear line on stderr for failures.
#include "mdev/vgpuctl/vgpuctl.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "mdev/vgpuctl/format.h"
#include "tests/mdev/node_test_support.h"

namespace kvgpu::mdev {
namespace {

constexpr const char* kUuid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

class Vgpuctl : public ::testing::Test {
 protected:
  Outcome Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--sysfs-root", sim_.root().string()});
    std::ostringstream out, err;
    int code = vgpuctl::Run(args, sim_.model(), out, err);
    return {code, out.str(), err.str()};
  }
  std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  SimulatedNode sim_{"t4x2"};
  std::string gpu0_ = sim_.model().profile().gpus.at(0).address;
};

TEST_F(Vgpuctl, TypesTableHasAHeaderAndOneAlignedRowPerType) {
  Outcome r = Run({"types"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty());
  auto lines = Lines(r.out);
  size_t types = 0;
  for (const auto& gpu : sim_.model().profile().gpus) types += gpu.types.size();
  ASSERT_EQ(lines.size(), types + 1);
  EXPECT_EQ(lines[0].rfind("PARENT", 0), 0u);
  // Every row's TYPE column starts where the header's does.
  size_t column = lines[0].find("TYPE");
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].substr(column, 7), "nvidia-") << lines[i];
  }
  EXPECT_NE(r.out.find("GRID T4-1B"), std::string::npos);
  EXPECT_NE(r.out.find("T4-1B"), std::string::npos);
}

TEST_F(Vgpuctl, TypesJsonFollowsTheDocumentedShape) {
  Outcome r = Run({"types", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["parents"].size(), 2u);
  const auto& parent = doc["parents"][0];
  EXPECT_EQ(parent["flavour"], "mdev");
  EXPECT_EQ(parent["pci"], true);
  EXPECT_EQ(parent["virtual_function"], false);
  EXPECT_EQ(parent["vendor_id"], "0x10de");
  bool found = false;
  for (const auto& type : parent["types"]) {
    if (type["id"] != "nvidia-222") continue;
    found = true;
    EXPECT_EQ(type["name"], "GRID T4-1B");
    EXPECT_EQ(type["device_api"], "vfio-pci");
    EXPECT_EQ(type["available_instances"], 16);
    EXPECT_EQ(type["profile"]["profile"], "T4-1B");
    EXPECT_EQ(type["profile"]["series"], "B");
    EXPECT_EQ(type["nvidia"]["framebuffer_mib"], 1024);
    EXPECT_EQ(type["nvidia"]["max_instance"], 16);
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(doc["warnings"].empty());
}

TEST_F(Vgpuctl, CreatePrintsTheUuidAndListShowsIt) {
  Outcome created = Run({"create", "--parent", gpu0_, "--type", "nvidia-222", "--uuid", kUuid});
  ASSERT_EQ(created.code, 0) << created.err;
  EXPECT_EQ(created.out, std::string(kUuid) + "\n");

  Outcome table = Run({"list"});
  ASSERT_EQ(table.code, 0);
  auto lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("ID", 0), 0u);
  EXPECT_NE(lines[1].find(kUuid), std::string::npos);
  EXPECT_NE(lines[1].find("/dev/vfio/"), std::string::npos);

  auto doc = nlohmann::json::parse(Run({"list", "--json"}).out);
  ASSERT_EQ(doc["vgpus"].size(), 1u);
  const auto& vgpu = doc["vgpus"][0];
  EXPECT_EQ(vgpu["uuid"], kUuid);
  EXPECT_EQ(vgpu["id"], kUuid);
  EXPECT_EQ(vgpu["flavour"], "mdev");
  EXPECT_EQ(vgpu["parent"], gpu0_);
  EXPECT_EQ(vgpu["physical_gpu"], gpu0_);
  EXPECT_EQ(vgpu["type_id"], "nvidia-222");
  EXPECT_EQ(vgpu["type_name"], "GRID T4-1B");
  EXPECT_TRUE(vgpu["iommu_group"].is_number());
  EXPECT_EQ(vgpu["vfio_device"], "/dev/vfio/" + std::to_string(vgpu["iommu_group"].get<int>()));

  Outcome removed = Run({"remove", kUuid});
  EXPECT_EQ(removed.code, 0) << removed.err;
  EXPECT_TRUE(nlohmann::json::parse(Run({"list", "--json"}).out)["vgpus"].empty());
}

TEST_F(Vgpuctl, FailuresExitNonZeroWithOneClearLine) {
  struct Case {
    const char* description;
    std::vector<std::string> args;
    int code;
    const char* message_part;
  };
  const Case cases[] = {
      {"malformed uuid",
       {"create", "--parent", gpu0_, "--type", "nvidia-222", "--uuid", "x"},
       1,
       "not a UUID"},
      {"unknown parent",
       {"create", "--parent", "0000:99:00.0", "--type", "nvidia-222"},
       1,
       "vgpuctl types"},
      {"remove what is gone", {"remove", kUuid}, 1, "already removed"},
      {"missing --type", {"create", "--parent", gpu0_}, 2, "--type"},
      {"no subcommand", {}, 2, "vgpuctl --help"},
      {"unknown subcommand", {"frobnicate"}, 2, "vgpuctl --help"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Outcome r = Run(c.args);
    EXPECT_EQ(r.code, c.code);
    EXPECT_TRUE(r.out.empty()) << r.out;
    auto lines = Lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("vgpuctl: ", 0), 0u);
    EXPECT_NE(lines[0].find(c.message_part), std::string::npos) << lines[0];
  }
}

TEST_F(Vgpuctl, HelpListsEverySubcommandAndExitsZero) {
  Outcome r = Run({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* word : {"types", "list", "create", "remove", "--sysfs-root"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
}

TEST(VgpuctlVendorVfio, ListShowsTheVirtualFunctionAsTheDevice) {
  // MIG on: the MIG-backed 1414 leaves the card room, so the other VFs still name it.
  SimulatedNode sim("h200-mig");
  std::string vf = sim.Scan().parents.at(0).name;
  std::ostringstream out, err;
  std::vector<std::string> create = {
      "--sysfs-root", sim.root().string(), "create", "--parent", vf, "--type", "1414"};
  ASSERT_EQ(vgpuctl::Run(create, sim.model(), out, err), 0) << err.str();
  EXPECT_EQ(out.str(), vf + "\n");
  std::ostringstream listed;
  vgpuctl::Run({"--sysfs-root", sim.root().string(), "list", "--json"}, sim.model(), listed, err);
  auto vgpu = nlohmann::json::parse(listed.str())["vgpus"].at(0);
  EXPECT_EQ(vgpu["flavour"], "vendor-vfio");
  EXPECT_TRUE(vgpu["uuid"].is_null());
  EXPECT_EQ(vgpu["id"], vf);
  EXPECT_EQ(vgpu["type_name"], "NVIDIA H200X-1-18C");
}

TEST(RenderTable, PadsColumnsToTheWidestCell) {
  EXPECT_EQ(vgpuctl::RenderTable({{"A", "BB"}, {"CCC", "D"}}), "A    BB\nCCC  D\n");
}

}  // namespace
}  // namespace kvgpu::mdev
