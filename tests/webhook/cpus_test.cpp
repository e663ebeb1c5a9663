// The default number of event loops: the CPUs the process may use, capped by a cgroup CPU limit.
#include "webhook/cpus.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <fstream>

#include "fakes/common/temp_dir.h"

namespace kvgpu::webhook {
namespace {

size_t AffinityCpus() {
  cpu_set_t set;
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return static_cast<size_t>(CPU_COUNT(&set));
}

class UsableCpusTest : public ::testing::Test {
 protected:
  std::filesystem::path Limit(const std::string& text) {
    std::ofstream(dir_.path() / "cpu.max") << text;
    return dir_.path() / "cpu.max";
  }
  kvgpu::testing::TempDir dir_;
};

TEST_F(UsableCpusTest, WithoutALimitEveryCpuOfTheAffinityMaskCounts) {
  EXPECT_EQ(UsableCpus(Limit("max 100000\n")), AffinityCpus());
  EXPECT_EQ(UsableCpus(dir_.path() / "absent"), AffinityCpus()) << "cgroup v1 or no cgroupfs";
}

TEST_F(UsableCpusTest, APodCpuLimitCapsTheCountRoundingUp) {
  EXPECT_EQ(UsableCpus(Limit("50000 100000\n")), 1u) << "limits.cpu: 500m";
  EXPECT_EQ(UsableCpus(Limit("100000 100000\n")), 1u);
  EXPECT_EQ(UsableCpus(Limit("150000 100000\n")), std::min<size_t>(2, AffinityCpus()));
  EXPECT_EQ(UsableCpus(Limit("6400000 100000\n")), AffinityCpus()) << "never above the mask";
}

TEST_F(UsableCpusTest, AnOddLimitFileCountsAsNoLimit) {
  for (const char* odd : {"", "garbage", "-5 100000", "100000 0", "1e5 100000", "100000",
                          "100000 100000 extra", "99999999999999999999999 100000"}) {
    EXPECT_EQ(UsableCpus(Limit(odd)), AffinityCpus()) << '"' << odd << '"';
  }
}

}  // namespace
}  // namespace kvgpu::webhook
