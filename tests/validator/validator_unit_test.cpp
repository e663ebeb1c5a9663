// The validator's pieces without a cluster: what it reads from nvidia-smi -q (NVIDIA's
// documented format, data/README.md), the guest script run by a real sh against the stand-ins and
// its log read back, the pod it asks for, the condition it writes, its metrics, and a bounded
// child process.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "validator/command.h"
#include "validator/guest.h"
#include "validator/nvidia_smi.h"
#include "validator/record.h"

namespace kvgpu::validator {
namespace {

using namespace std::chrono_literals;

const std::string kData = KVGPU_VALIDATOR_TEST_DATA;

std::string Read(const std::string& name) {
  std::ifstream in(kData + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(NvidiaSmi, ReadsTheGpuAndTheLicensedProductOfNvidiasFormat) {
  const SmiQuery query = ParseSmiQuery(Read("nvidia-smi-q-licensed.txt"));
  EXPECT_EQ(query.attached_gpus, 1);
  EXPECT_EQ(query.gpu_product, "GRID T4-1Q");
  EXPECT_EQ(query.driver_version, "550.90.07");
  EXPECT_EQ(query.licensed_product, "NVIDIA RTX Virtual Workstation");
  EXPECT_EQ(query.license_status, "Licensed (Expiry: 2025-6-18 16:49:5 GMT)");
  EXPECT_TRUE(query.Licensed());
}

TEST(NvidiaSmi, UnlicensedIsNotLicensedAndTheGpuNameIsNotTheLicensedProductName) {
  const SmiQuery query = ParseSmiQuery(Read("nvidia-smi-q-unlicensed.txt"));
  EXPECT_EQ(query.license_status, "Unlicensed (Unrestricted)");
  EXPECT_FALSE(query.Licensed());
  EXPECT_EQ(query.gpu_product, "GRID T4-1Q");
}

TEST(NvidiaSmi, AnOutputWithoutTheSectionsSaysNothingIsThere) {
  const SmiQuery query = ParseSmiQuery("NVIDIA-SMI has failed because it couldn't communicate\n");
  EXPECT_FALSE(query.attached_gpus.has_value());
  EXPECT_FALSE(query.Licensed());
  // A "License Status" outside the licensed product section is not the vGPU's licence.
  EXPECT_FALSE(ParseSmiQuery("License Status : Licensed\n").Licensed());
}

// The script as the container runs it, with the stand-ins first in PATH.
std::string RunScript(const GuestOptions& options, const std::string& smi_fixture,
                      const std::string& cuda) {
  auto run = RunCommand({"env", "PATH=" + kData + "/bin:/usr/bin:/bin",
                         "KVGPU_FAKE_SMI_OUTPUT=" + kData + "/" + smi_fixture,
                         "KVGPU_FAKE_CUDA=" + cuda, "sh", "-c", GuestScript(options)},
                        10s);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  return run.ok() ? run->out : "";
}

TEST(GuestScript, AHealthyGuestLogsEverySectionWithItsExitCode) {
  GuestOptions options{"nvidia-smi", "vectorAdd", 3, 10ms};
  const GuestLog log = ParseGuestLog(RunScript(options, "nvidia-smi-q-licensed.txt", "pass"));
  ASSERT_TRUE(log.driver && log.driver->rc);
  EXPECT_EQ(*log.driver->rc, 0);
  EXPECT_EQ(ParseSmiQuery(log.driver->output).attached_gpus, 1);
  ASSERT_EQ(log.licence.size(), 1u);  // licensed at once: no retry
  EXPECT_TRUE(log.licence_done);
  ASSERT_TRUE(log.cuda && log.cuda->rc);
  EXPECT_EQ(*log.cuda->rc, 0);
  EXPECT_NE(log.cuda->output.find("Test PASSED"), std::string::npos);
}

TEST(GuestScript, AnUnlicensedGuestRetriesItsTriesAndAFailingSampleKeepsItsExitCode) {
  GuestOptions options{"nvidia-smi", "vectorAdd", 3, 10ms};
  const GuestLog log = ParseGuestLog(RunScript(options, "nvidia-smi-q-unlicensed.txt", "fail"));
  ASSERT_EQ(log.licence.size(), 3u);
  EXPECT_FALSE(ParseSmiQuery(log.licence.back().output).Licensed());
  EXPECT_TRUE(log.licence_done);
  ASSERT_TRUE(log.cuda && log.cuda->rc);
  EXPECT_EQ(*log.cuda->rc, 1);
}

TEST(GuestLog, ASectionStillRunningHasNoExitCode) {
  const GuestLog log = ParseGuestLog("kvgpu-validator: driver begin\nAttached GPUs : 1\n");
  ASSERT_TRUE(log.driver);
  EXPECT_FALSE(log.driver->rc);
  EXPECT_FALSE(log.cuda);
}

TEST(ProbePod, IsPinnedNeverRestartedAndAsksForOneOfTheResource) {
  PodSpec spec{"kata-vgpu", "probe", "gpu-1", "tencent.com/vgpu-230", "kata-vgpu", "img", "", {}};
  const auto pod = BuildPod(spec);
  EXPECT_EQ(pod["spec"]["nodeName"], "gpu-1");
  EXPECT_EQ(pod["spec"]["runtimeClassName"], "kata-vgpu");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["tencent.com/vgpu-230"], "1");
  EXPECT_EQ(pod["spec"]["containers"][0]["command"][2], GuestScript(spec.guest));
}

TEST(Condition, NamesTheFirstFailedStepAsReason) {
  Outcome outcome;
  outcome.steps = {{Step::kDoctor, true, "no findings", 1ms},
                   {Step::kSchedule, true, "", 1ms},
                   {Step::kAttach, true, "", 1ms},
                   {Step::kDriver, true, "", 1ms},
                   {Step::kLicence, false, "License Status: Unlicensed (Unrestricted)", 1ms},
                   {Step::kCleanup, false, "vGPU x is still on the node", 1ms}};
  const auto condition = ConditionFor(outcome);
  EXPECT_EQ(condition.status, "False");
  EXPECT_EQ(condition.reason, "Licence");
  EXPECT_NE(condition.message.find("Unlicensed"), std::string::npos);
  EXPECT_FALSE(outcome.validated());
}

TEST(Condition, TrueOnlyWhenEveryStepToCleanupPassed) {
  Outcome outcome;
  for (const Step step : kSteps) outcome.steps.push_back({step, true, "", 1ms});
  EXPECT_EQ(ConditionFor(outcome).status, "True");
  outcome.steps.pop_back();  // cleanup never ran
  EXPECT_EQ(ConditionFor(outcome).status, "False");
}

TEST(Metrics, ShowEachStepsResultAndNotRunStepsAsMinusOne) {
  Outcome outcome;
  outcome.steps = {{Step::kDoctor, false, "vfio", 1500ms}};
  Metrics metrics;
  metrics.Observe(outcome, std::chrono::system_clock::time_point(100s));
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("kvgpu_validator_step_result{step=\"doctor\"} 0"), std::string::npos);
  EXPECT_NE(text.find("kvgpu_validator_step_result{step=\"cuda\"} -1"), std::string::npos);
  EXPECT_NE(text.find("kvgpu_validator_step_duration_seconds{step=\"doctor\"} 1.5"),
            std::string::npos);
  EXPECT_NE(text.find("kvgpu_validator_validated 0"), std::string::npos);
  EXPECT_NE(text.find("kvgpu_validator_runs_total{result=\"false\"} 1"), std::string::npos);
}

// The program would run a minute: the bound tells its kill at 100 ms from waiting it out, with
// room for a loaded machine.
TEST(Command, AHungProgramIsKilledAtItsBound) {
  const auto start = std::chrono::steady_clock::now();
  auto run = RunCommand({"sleep", "60"}, 100ms);
  EXPECT_EQ(run.status().code(), ErrorCode::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
}

TEST(Command, OutputAndExitCodeComeBackAndAMissingProgramIsAnError) {
  auto run = RunCommand({"sh", "-c", "echo hi; exit 3"}, 5s);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->out, "hi\n");
  EXPECT_EQ(run->exit_code, 3);
  EXPECT_FALSE(RunCommand({"/nonexistent/kvgpu-program"}, 5s).ok());
}

}  // namespace
}  // namespace kvgpu::validator
