// `vgpuctl list --json` against Debian's mdevctl 1.2.0, an independent reader of the same sysfs:
// both must name the same mdevs with the same parent and type, whichever tool made them.
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "mdev/uuid.h"
#include "tests/vm/lab_support.h"

namespace kvgpu::vmtest {
namespace {

using Row = std::tuple<std::string, std::string, std::string>;  // uuid, parent, type

class MdevctlPeerVmTest : public LabTest {
 protected:
  void SetUp() override {
    LabTest::SetUp();
    // mdevctl refuses to work without its (empty) script dirs; the guest's /etc is a RAM overlay.
    fs::create_directories("/etc/mdevctl.d/scripts.d/callouts");
    fs::create_directories("/etc/mdevctl.d/scripts.d/notifiers");
  }

  static std::set<Row> VgpuctlRows() {
    ProcessResult run = RunProcess({VgpuctlPath(), "list", "--json"});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::set<Row> rows;
    auto json = nlohmann::json::parse(run.out);
    for (const auto& vgpu : json.at("vgpus")) {
      rows.emplace(vgpu.at("uuid").get<std::string>(), vgpu.at("parent").get<std::string>(),
                   vgpu.at("type_id").get<std::string>());
    }
    return rows;
  }

  // mdevctl's shape: [{"<parent>": [{"<uuid>": {"mdev_type": "<type>", ...}}, ...]}, ...]
  static std::set<Row> MdevctlRows() {
    ProcessResult run = RunProcess({"mdevctl", "list", "--dumpjson"});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::set<Row> rows;
    if (run.out.find_first_not_of(" \n") == std::string::npos) return rows;  // nothing to list
    for (const auto& by_parent : nlohmann::json::parse(run.out)) {
      for (const auto& [parent, devices] : by_parent.items()) {
        for (const auto& device : devices) {
          for (const auto& [uuid, config] : device.items()) {
            rows.emplace(uuid, parent, config.at("mdev_type").get<std::string>());
          }
        }
      }
    }
    return rows;
  }

  static std::string VgpuctlCreate(const std::string& parent, const std::string& type) {
    ProcessResult run = RunProcess({VgpuctlPath(), "create", "--parent", parent, "--type", type});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::string uuid = run.out.substr(0, run.out.find('\n'));
    EXPECT_TRUE(mdev::IsValidUuid(uuid)) << run.out;
    return uuid;
  }

  static std::string MdevctlStart(const std::string& parent, const std::string& type) {
    std::string uuid = mdev::NewUuid();
    ProcessResult run = RunProcess({"mdevctl", "start", "-u", uuid, "-p", parent, "-t", type});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return uuid;
  }
};

TEST_F(MdevctlPeerVmTest, BothToolsListTheSameMdevsWhoeverMadeThem) {
  std::set<Row> want;
  for (const auto& [parent, type] : std::vector<std::pair<std::string, std::string>>{
           {"mtty", "mtty-1"}, {"mtty", "mtty-2"}, {"mdpy", "mdpy-vga"}}) {
    want.emplace(VgpuctlCreate(parent, type), parent, type);
  }
  for (const auto& [parent, type] : std::vector<std::pair<std::string, std::string>>{
           {"mtty", "mtty-2"}, {"mbochs", "mbochs-small"}}) {
    want.emplace(MdevctlStart(parent, type), parent, type);
  }
  ASSERT_EQ(want.size(), 5u);
  EXPECT_EQ(VgpuctlRows(), want);
  EXPECT_EQ(MdevctlRows(), want);
}

TEST_F(MdevctlPeerVmTest, EachToolRemovesWhatTheOtherMadeAndBothSeeIt) {
  std::string by_vgpuctl = VgpuctlCreate("mtty", "mtty-1");
  std::string by_mdevctl = MdevctlStart("mdpy", "mdpy-xga");
  ASSERT_EQ(VgpuctlRows(), MdevctlRows());

  ProcessResult stop = RunProcess({"mdevctl", "stop", "-u", by_vgpuctl});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  std::set<Row> one_left = {{by_mdevctl, "mdpy", "mdpy-xga"}};
  EXPECT_EQ(VgpuctlRows(), one_left);
  EXPECT_EQ(MdevctlRows(), one_left);

  ProcessResult remove = RunProcess({VgpuctlPath(), "remove", by_mdevctl});
  EXPECT_EQ(remove.exit_code, 0) << remove.err;
  EXPECT_TRUE(VgpuctlRows().empty());
  EXPECT_TRUE(MdevctlRows().empty());
}

}  // namespace
}  // namespace kvgpu::vmtest
