// Helpers for tests that run inside the VM lab (tests/vm/run-in-vm.sh): raw sysfs writes that
// report the kernel's errno unfiltered, child processes with captured output, and a clean slate
// of mdevs between cases.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace kvgpu::vmtest {

namespace fs = std::filesystem;

inline const fs::path kMdevBus = "/sys/class/mdev_bus";
inline const fs::path kMdevDevices = "/sys/bus/mdev/devices";

// Path of the `create` file of a type.
fs::path CreateFile(const std::string& parent, const std::string& type);

// One write(2) of `data`, as `echo -n data > path` does: 0 on success, else the errno of open(2)
// or write(2). The kernel's own answer, with no library in between.
int RawWrite(const fs::path& path, const std::string& data);

// Trimmed content of a sysfs attribute; fails the test if it cannot be read.
std::string ReadAttr(const fs::path& path);
int AvailableInstances(const std::string& parent, const std::string& type);

// UUIDs of the mdevs the kernel shows now, sorted.
std::vector<std::string> MdevUuids();

// Removes every mdev (raw sysfs), so each case starts from the kernel's initial state.
void RemoveAllMdevs();

struct ProcessResult {
  int exit_code = -1;  // -1 when it did not exit normally
  std::string out;
  std::string err;
};
// Runs argv[0] (searched on PATH) with its stdin at /dev/null and waits for it.
ProcessResult RunProcess(const std::vector<std::string>& argv);

// The variable's value, or "" when unset.
std::string Env(const char* name);

// UUIDs of the mdevs libvirt at `uri` lists as active (`virsh nodedev-list --cap mdev`), read
// from their names "mdev_<uuid with _>_<parent>" (libvirt-lab.sh's tests).
std::set<std::string> VirshMdevs(const std::string& uri);

// Path of the vgpuctl binary built with this test (set by CMake).
std::string VgpuctlPath();

double MillisecondsSince(std::chrono::steady_clock::time_point start);

// Fails the whole binary early, with a clear message, when it runs outside the lab: on the host
// there is no mdev bus and every test would fail for the wrong reason.
class LabEnvironment : public ::testing::Environment {
 public:
  void SetUp() override;
};

// Each case starts and ends with no mdevs.
class LabTest : public ::testing::Test {
 protected:
  void SetUp() override { RemoveAllMdevs(); }
  void TearDown() override { RemoveAllMdevs(); }
};

}  // namespace kvgpu::vmtest
