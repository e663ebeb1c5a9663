#include "validator/validator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "scheduling/node_vgpu_state.h"
#include "validator/command.h"
#include "validator/nvidia_smi.h"

namespace kvgpu::validator {

namespace {

using Clock = std::chrono::steady_clock;

std::string Seconds(milliseconds ms) {
  return std::to_string(ms.count() / 1000) + "s";
}

// The last non-empty line of a command's output: what a failing sample says last.
std::string LastLine(const std::string& text) {
  std::istringstream lines(text);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

// Five characters of [a-z0-9], as the API server's generateName adds: runs in the same second
// (a Job re-run, a restart) must not meet the previous run's pod or its log.
std::string RandomSuffix() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device random;
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
  std::string out;
  for (int i = 0; i < 5; ++i) out.push_back(kAlphabet[pick(random)]);
  return out;
}

// A count from an allocatable quantity ("16"); 0 for anything else.
long Count(const std::string& quantity) {
  if (quantity.empty() || quantity.size() > 9 ||
      quantity.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return std::stol(quantity);
}

// Framebuffer (MiB) per type id from `vgpuctl types --json`; empty when it cannot tell.
std::map<std::string, uint64_t> Framebuffers(const ValidatorOptions& o) {
  std::map<std::string, uint64_t> out;
  auto run =
      RunCommand({o.vgpuctl, "--sysfs-root", o.sysfs_root, "types", "--json"}, o.timeouts.doctor);
  if (!run.ok() || run->exit_code != 0) return out;
  const auto doc = nlohmann::json::parse(run->out, nullptr, false);
  if (!doc.is_object()) return out;
  for (const auto& parent : doc.value("parents", nlohmann::json::array())) {
    for (const auto& type : parent.value("types", nlohmann::json::array())) {
      const auto nvidia = type.value("nvidia", nlohmann::json());
      if (nvidia.is_object() && nvidia.value("framebuffer_mib", nlohmann::json()).is_number()) {
        out[type.value("id", "")] = nvidia["framebuffer_mib"].get<uint64_t>();
      }
    }
  }
  return out;
}

}  // namespace

// Each step's name (logs, metrics) and the condition's reason when it fails, in kSteps order.
constexpr std::pair<const char*, const char*> kStepNames[] = {
    {"doctor", "Doctor"},   {"schedule", "Schedule"}, {"attach", "Attach"},  {"driver", "Driver"},
    {"licence", "Licence"}, {"cuda", "Cuda"},         {"cleanup", "Cleanup"}};

const char* StepName(Step step) {
  return kStepNames[static_cast<size_t>(step)].first;
}

const char* StepReason(Step step) {
  return kStepNames[static_cast<size_t>(step)].second;
}

bool Outcome::validated() const {
  return !steps.empty() && failed() == nullptr && steps.back().step == Step::kCleanup;
}

const StepResult* Outcome::failed() const {
  for (const auto& step : steps) {
    if (!step.ok) return &step;
  }
  return nullptr;
}

Validator::Validator(kube::ApiTransport& api, ValidatorOptions options)
    : api_(api), options_(std::move(options)) {
  if (options_.sysfs_root.empty()) options_.sysfs_root = options_.host_root;
  // The guest's tries fit in the licence bound, so the script has ended when the bound passes.
  const long tries = options_.timeouts.licence.count() /
                     std::max<long>(options_.guest.licence_interval.count(), 1);
  options_.guest.licence_tries = static_cast<int>(std::clamp<long>(tries - 1, 1, 10000));
}

Outcome Validator::Run() {
  Outcome outcome;
  using Member = Verdict (Validator::*)();
  const std::pair<Step, Member> flow[] = {
      {Step::kDoctor, &Validator::Doctor},   {Step::kSchedule, &Validator::Schedule},
      {Step::kAttach, &Validator::Attach},   {Step::kDriver, &Validator::Driver},
      {Step::kLicence, &Validator::Licence}, {Step::kCuda, &Validator::Cuda}};
  for (const auto& [step, member] : flow) {
    const auto start = Clock::now();
    const Verdict verdict = (this->*member)();
    outcome.steps.push_back({step, verdict.ok, verdict.message,
                             std::chrono::duration_cast<milliseconds>(Clock::now() - start)});
    spdlog::info("validator: {} {}: {}", StepName(step), verdict.ok ? "passed" : "FAILED",
                 verdict.message);
    if (pod_made_) NoteVgpus();
    if (!verdict.ok) break;
  }
  // The probe pod goes whatever failed: a vGPU left held would be a fault of the validator's own.
  if (pod_made_) {
    outcome.pod = options_.namespace_name + "/" + pod_name_;
    const auto start = Clock::now();
    const Verdict verdict = Cleanup();
    outcome.steps.push_back({Step::kCleanup, verdict.ok, verdict.message,
                             std::chrono::duration_cast<milliseconds>(Clock::now() - start)});
    spdlog::info("validator: cleanup {}: {}", verdict.ok ? "passed" : "FAILED", verdict.message);
  }
  return outcome;
}

Validator::Verdict Validator::Poll(milliseconds bound, const Look& look,
                                   const std::string* waiting) {
  const auto deadline = Clock::now() + bound;
  while (true) {
    if (auto verdict = look()) return *verdict;
    if (Clock::now() >= deadline) {
      return {false, "not within " + Seconds(bound) + (waiting->empty() ? "" : ": " + *waiting)};
    }
    std::this_thread::sleep_for(std::min<milliseconds>(
        options_.poll,
        std::chrono::duration_cast<milliseconds>(deadline - Clock::now()) + milliseconds(1)));
  }
}

Validator::Verdict Validator::Doctor() {
  auto run = RunCommand({options_.vgpuctl, "--sysfs-root", options_.host_root, "doctor", "--json"},
                        options_.timeouts.doctor);
  if (!run.ok()) return {false, run.status().message()};
  const auto report = nlohmann::json::parse(run->out, nullptr, false);
  if (!report.is_object() || !report.contains("checks")) {
    return {false,
            "vgpuctl doctor exited " + std::to_string(run->exit_code) + " without its JSON report"};
  }
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  for (const auto& check : report["checks"]) {
    for (const auto& finding : check.value("findings", nlohmann::json::array())) {
      const std::string what = finding.value("id", "") + " (" + finding.value("seen", "") + ")";
      const std::string severity = finding.value("severity", "");
      if (severity == "error") errors.push_back(what);
      if (severity == "warning") warnings.push_back(what);
    }
  }
  auto join = [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : "; ") + item;
    return out;
  };
  if (!errors.empty()) return {false, join(errors)};
  if (run->exit_code != 0 && run->exit_code != 3) {
    return {false, "vgpuctl doctor exited " + std::to_string(run->exit_code)};
  }
  // Warnings do not stop the run: the pod proves whether they matter here.
  return {true, warnings.empty() ? "no findings" : "warnings: " + join(warnings)};
}

Result<std::string> Validator::PickResource(const kube::NodeInfo& node) {
  std::vector<std::string> candidates;
  for (const auto& [resource, quantity] : node.allocatable) {
    if (resource.rfind(options_.resource_prefix, 0) == 0 && Count(quantity) > 0) {
      candidates.push_back(resource);
    }
  }
  if (candidates.empty()) {
    return Status::Error(ErrorCode::kInvalid,
                         "the node has no allocatable " + options_.resource_prefix + "* resource");
  }
  // The smallest framebuffer: resource -> type from the plugin's state annotation, type ->
  // framebuffer from the node's sysfs. A resource neither tells comes last, by name.
  std::map<std::string, std::string> type_of;
  const auto annotation = node.annotations.find(scheduling::kNodeStateAnnotation);
  if (annotation != node.annotations.end()) {
    if (auto state = scheduling::ParseNodeState(annotation->second); state.ok()) {
      for (const auto& gpu : state->gpus) {
        for (const auto& [resource, slots] : gpu.resources) type_of[resource] = slots.type_id;
      }
    }
  }
  const auto framebuffers = Framebuffers(options_);
  auto size = [&](const std::string& resource) {
    const auto type = type_of.find(resource);
    if (type == type_of.end()) return UINT64_MAX;
    const auto fb = framebuffers.find(type->second);
    return fb == framebuffers.end() ? UINT64_MAX : fb->second;
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const auto& a, const auto& b) { return size(a) < size(b); });
  return candidates.front();
}

Validator::Verdict Validator::Schedule() {
  auto node = kube::GetNode(api_, options_.node);
  if (!node.ok()) return {false, "cannot read the Node: " + node.status().message()};
  const auto mode = node->labels.find("kata-vgpu.io/vgpu-mode");
  if (mode == node->labels.end() || (mode->second != "mdev" && mode->second != "vf")) {
    return {false, "the node has no kata-vgpu.io/vgpu-mode label of mdev or vf"};
  }
  auto resource = PickResource(*node);
  if (!resource.ok()) return {false, resource.status().message()};
  pod_name_ = "kvgpu-validator-" + options_.node.substr(0, 200) + "-" + RandomSuffix();
  PodSpec spec{options_.namespace_name,
               pod_name_,
               options_.node,
               *resource,
               mode->second == "vf" ? "kata-vgpu-vf" : "kata-vgpu",
               options_.image,
               "",
               options_.guest};
  pod_made_unix_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  auto created =
      api_.Post("/api/v1/namespaces/" + options_.namespace_name + "/pods", BuildPod(spec));
  if (!created.ok()) return {false, "cannot create the probe pod: " + created.status().message()};
  pod_made_ = true;
  return {true,
          "pod " + pod_name_ + " asks for one " + *resource + " (" + spec.runtime_class + ")"};
}

std::string Validator::PodPath() const {
  return "/api/v1/namespaces/" + options_.namespace_name + "/pods/" + pod_name_;
}

Validator::Verdict Validator::Attach() {
  std::string waiting;
  return Poll(
      options_.timeouts.attach,
      [&]() -> std::optional<Verdict> {
        auto pod = api_.Get(PodPath());
        if (!pod.ok()) {
          if (pod.status().http_status() == 404) return Verdict{false, "the pod was deleted"};
          waiting = pod.status().message();
          return std::nullopt;
        }
        const auto status = pod.value().value("status", nlohmann::json::object());
        const std::string phase = status.value("phase", "");
        if (phase == "Running" || phase == "Succeeded") return Verdict{true, "pod " + phase};
        if (phase == "Failed") {
          return Verdict{false, "pod Failed: " + status.value("reason", "") + " " +
                                    status.value("message", "")};
        }
        waiting = "pod still " + (phase.empty() ? std::string("without a phase") : phase);
        return std::nullopt;
      },
      &waiting);
}

std::optional<GuestLog> Validator::ReadLog(std::string* waiting) {
  auto log = api_.GetText(PodPath() + "/log");
  if (!log.ok()) {
    *waiting = log.status().message();
    return std::nullopt;
  }
  return ParseGuestLog(log.value());
}

Validator::Verdict Validator::Driver() {
  std::string waiting = "no nvidia-smi output yet";
  return Poll(
      options_.timeouts.driver,
      [&]() -> std::optional<Verdict> {
        auto log = ReadLog(&waiting);
        if (!log || !log->driver || !log->driver->rc) return std::nullopt;
        const SmiQuery query = ParseSmiQuery(log->driver->output);
        if (*log->driver->rc != 0) {
          return Verdict{false, "nvidia-smi -q exited " + std::to_string(*log->driver->rc) + ": " +
                                    LastLine(log->driver->output)};
        }
        if (query.attached_gpus.value_or(0) < 1) {
          return Verdict{false, "nvidia-smi -q shows no attached GPU"};
        }
        return Verdict{true, query.gpu_product + ", driver " + query.driver_version};
      },
      &waiting);
}

Validator::Verdict Validator::Licence() {
  std::string waiting = "no licence check yet";
  return Poll(
      options_.timeouts.licence + options_.guest.licence_interval,
      [&]() -> std::optional<Verdict> {
        auto log = ReadLog(&waiting);
        if (!log) return std::nullopt;
        for (const auto& attempt : log->licence) {
          const SmiQuery query = ParseSmiQuery(attempt.output);
          if (attempt.rc && query.Licensed()) {
            return Verdict{true, query.licensed_product + ": " + query.license_status};
          }
          waiting = "License Status: " +
                    (query.license_status.empty() ? "(none shown)" : query.license_status);
        }
        if (log->licence_done) return Verdict{false, waiting};
        return std::nullopt;
      },
      &waiting);
}

Validator::Verdict Validator::Cuda() {
  std::string waiting = "the sample has not finished";
  return Poll(
      options_.timeouts.cuda,
      [&]() -> std::optional<Verdict> {
        auto log = ReadLog(&waiting);
        if (!log || !log->cuda || !log->cuda->rc) return std::nullopt;
        const bool passed = log->cuda->output.find("Test PASSED") != std::string::npos;
        if (*log->cuda->rc == 0 && passed) return Verdict{true, "Test PASSED"};
        return Verdict{false, options_.guest.cuda_sample + " exited " +
                                  std::to_string(*log->cuda->rc) + ": " +
                                  LastLine(log->cuda->output)};
      },
      &waiting);
}

Validator::StateView Validator::ProbeVgpusInState() const {
  StateView view;
  std::ifstream in(options_.state_file);
  const auto state = nlohmann::json::parse(in, nullptr, false);
  if (!state.is_object()) return view;
  const std::string owner = options_.namespace_name + "/" + pod_name_;
  for (const auto& entry : state.value("vgpus", nlohmann::json::array())) {
    if (!entry.is_object()) continue;
    const std::string id = entry.value("vgpu", "");
    if (entry.contains("ownerPod")) {
      if (entry.value("ownerPod", "") == owner) view.owned.insert(id);
      continue;
    }
    // createdMs; a state file from before it has only `created`, in seconds.
    const int64_t created = entry.value("createdMs", entry.value("created", int64_t{0}) * 1000);
    if (created >= pod_made_unix_ms_) view.unattributed.insert(id);
  }
  return view;
}

void Validator::NoteVgpus() {
  const auto owned = ProbeVgpusInState().owned;
  vgpus_.insert(owned.begin(), owned.end());
}

Result<std::set<std::string>> Validator::VgpusOnNode() {
  auto run = RunCommand({options_.vgpuctl, "--sysfs-root", options_.sysfs_root, "list", "--json"},
                        options_.timeouts.doctor);
  if (!run.ok()) return run.status();
  const auto doc = nlohmann::json::parse(run->out, nullptr, false);
  if (run->exit_code != 0 || !doc.is_object()) {
    return Status::Error(ErrorCode::kInvalid,
                         "vgpuctl list exited " + std::to_string(run->exit_code));
  }
  std::set<std::string> ids;
  for (const auto& vgpu : doc.value("vgpus", nlohmann::json::array())) {
    ids.insert(vgpu.value("id", ""));
  }
  return ids;
}

Validator::Verdict Validator::Cleanup() {
  auto deleted = api_.Delete(PodPath());
  if (!deleted.ok() && deleted.status().http_status() != 404) {
    return {false, "cannot delete pod " + pod_name_ + ": " + deleted.status().message()};
  }
  std::string waiting;
  return Poll(
      options_.timeouts.cleanup,
      [&]() -> std::optional<Verdict> {
        if (api_.Get(PodPath()).status().http_status() != 404) {
          waiting = "pod " + pod_name_ + " still exists";
          return std::nullopt;
        }
        const auto view = ProbeVgpusInState();
        vgpus_.insert(view.owned.begin(), view.owned.end());
        if (!view.owned.empty()) {
          waiting = "the plugin's state still holds a vGPU of " + pod_name_;
          return std::nullopt;
        }
        if (!view.unattributed.empty()) {
          waiting = "the plugin's state holds vGPU " + *view.unattributed.begin() +
                    ", made since " + pod_name_ + " was created and attributed to no pod yet";
          return std::nullopt;
        }
        auto on_node = VgpusOnNode();
        if (!on_node.ok()) {
          waiting = on_node.status().message();
          return std::nullopt;
        }
        for (const auto& id : vgpus_) {
          if (on_node->count(id) != 0) {
            waiting = "vGPU " + id + " is still on the node";
            return std::nullopt;
          }
        }
        return Verdict{true, vgpus_.empty() ? "pod gone; the plugin never attributed a vGPU to it"
                                            : "pod and its vGPU gone"};
      },
      &waiting);
}

}  // namespace kvgpu::validator
