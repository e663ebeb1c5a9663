#include "doctor/doctor.h"

#include <cstdio>
#include <regex>
#include <sstream>

#include "doctor/doctor_internal.h"

namespace kvgpu::doctor {

namespace internal {

NodeView::NodeView(const Options& options, mdev::SysfsIo& sysfs)
    : options_(options), sysfs_(sysfs) {}

fs::path NodeView::Path(const fs::path& node_path) const {
  return options_.root / node_path.relative_path();
}

std::optional<std::string> NodeView::Read(const fs::path& node_path) {
  auto text = mdev::ReadAttribute(host_, Path(node_path));
  if (!text.ok()) return std::nullopt;
  return *text;
}

std::optional<std::string> NodeView::ReadSys(const fs::path& relative) {
  auto text = mdev::ReadAttribute(sysfs_, Sys(relative));
  if (!text.ok()) return std::nullopt;
  return *text;
}

std::vector<std::string> NodeView::ListSys(const fs::path& relative) {
  auto names = sysfs_.ListDir(Sys(relative));
  return names.ok() ? *names : std::vector<std::string>{};
}

const mdev::Inventory* NodeView::Inventory() {
  if (!inventory_) {
    mdev::SysfsBackend node(options_.root, sysfs_);
    auto scanned = node.Scan();
    inventory_ = scanned.ok() ? std::optional<mdev::Inventory>(*scanned) : std::nullopt;
  }
  return *inventory_ ? &**inventory_ : nullptr;
}

const mdev::GpuModeProbe* NodeView::ModeProbe() {
  if (!probe_) probe_ = mdev::MakeGpuModeProbe(options_.gpu_mode_probe, options_.root);
  return probe_->get();
}

bool NodeView::HasFlavour(mdev::Flavour flavour) {
  const mdev::Inventory* inventory = Inventory();
  if (inventory == nullptr) return false;
  for (const auto& parent : inventory->parents) {
    if (parent.flavour == flavour) return true;
  }
  return false;
}

namespace {

// "kata-runtime  : 3.27.0" (kata-runtime --version) or "..., version: 3.27.0, commit: ..." (the
// shim), as kata-config/check-config.py reads them; or a bare "3.27.0".
std::optional<std::string> KataVersionIn(const std::string& text) {
  static const std::regex labelled(R"((?:kata-runtime\s*:|version:)\s*v?(\d+\.\d+\.\d+))");
  static const std::regex bare(R"(^\s*v?(\d+\.\d+\.\d+)\s*$)");
  std::smatch m;
  if (std::regex_search(text, m, labelled) || std::regex_match(text, m, bare)) return m[1];
  return std::nullopt;
}

// Runs `binary --version` and returns what it printed (stdout and stderr).
std::optional<std::string> RunVersion(const fs::path& binary) {
  std::string quoted = "'";
  for (char c : binary.string()) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  FILE* pipe = ::popen((quoted + "' --version 2>&1").c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string text;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) text.append(buffer, n);
  return ::pclose(pipe) == 0 ? std::optional<std::string>(text) : std::nullopt;
}

}  // namespace

const NodeView::KataVersion& NodeView::Kata() {
  if (kata_) return *kata_;
  kata_ = KataVersion{};
  if (options_.kata_version_file) {
    auto text = host_.ReadFile(*options_.kata_version_file);
    kata_->version = text.ok() ? KataVersionIn(*text) : std::nullopt;
    if (!kata_->version) {
      kata_->problem = "--kata-version-file " + options_.kata_version_file->string() +
                       (text.ok() ? " names no Kata release" : " cannot be read");
    }
    return *kata_;
  }
  // Reading the release runs Kata's own binaries with --version: it changes nothing.
  for (const char* name : {"kata-runtime", "containerd-shim-kata-v2"}) {
    fs::path binary = Path(options_.kata_dir / "bin" / name);
    if (!fs::exists(binary)) continue;
    auto output = RunVersion(binary);
    if (output) kata_->version = KataVersionIn(*output);
    if (kata_->version) return *kata_;
  }
  kata_->problem = "no Kata release from " + Path(options_.kata_dir / "bin").string() +
                   "/{kata-runtime,containerd-shim-kata-v2} --version";
  return *kata_;
}

std::vector<int> ParseVersion(const std::string& text) {
  // At most 6 digits a part: no stoi overflow on a garbage version file.
  static const std::regex shape(R"(\d{1,6}(\.\d{1,6})*)");
  if (!std::regex_match(text, shape)) return {};
  std::vector<int> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, '.');) parts.push_back(std::stoi(part));
  return parts;
}

}  // namespace internal

const char* SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kError:
      return "error";
  }
  return "error";
}

Severity Report::Worst() const {
  Severity worst = Severity::kInfo;
  for (const auto& check : checks) {
    for (const auto& finding : check.findings) worst = std::max(worst, finding.severity);
  }
  return worst;
}

int Report::ExitCode() const {
  switch (Worst()) {
    case Severity::kInfo:
      return 0;
    case Severity::kWarning:
      return kExitWarnings;
    case Severity::kError:
      return kExitErrors;
  }
  return kExitErrors;
}

Report Diagnose(const Options& options, mdev::SysfsIo& sysfs) {
  internal::NodeView node(options, sysfs);
  Report report;
  for (const auto& list :
       {internal::KernelChecks(), internal::ModeChecks(), internal::SoftwareChecks()}) {
    for (const auto& check : list) {
      CheckResult result{check.name, {}};
      check.run(node, result.findings);
      report.checks.push_back(std::move(result));
    }
  }
  return report;
}

std::string ReportTable(const Report& report) {
  std::ostringstream out;
  char line[64];
  std::snprintf(line, sizeof line, "%-8s %-20s %s\n", "STATUS", "CHECK", "FINDING");
  out << line;
  for (const auto& check : report.checks) {
    if (check.findings.empty()) {
      std::snprintf(line, sizeof line, "%-8s %-20s ", "ok", check.check.c_str());
      out << line << "-\n";
    }
    for (const auto& finding : check.findings) {
      std::snprintf(line, sizeof line, "%-8s %-20s ", SeverityName(finding.severity),
                    check.check.c_str());
      out << line << finding.seen << " [" << finding.id << "]\n";
      if (!finding.why.empty()) out << std::string(30, ' ') << "why: " << finding.why << "\n";
      if (!finding.fix.empty()) out << std::string(30, ' ') << "fix: " << finding.fix << "\n";
    }
  }
  return out.str();
}

nlohmann::json ReportJson(const Report& report) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& check : report.checks) {
    nlohmann::json findings = nlohmann::json::array();
    for (const auto& f : check.findings) {
      findings.push_back({{"id", f.id},
                          {"severity", SeverityName(f.severity)},
                          {"seen", f.seen},
                          {"why", f.why},
                          {"fix", f.fix}});
    }
    checks.push_back({{"check", check.check}, {"findings", std::move(findings)}});
  }
  // "ok" when nothing is above info, else the worst severity.
  Severity worst = report.Worst();
  return {{"status", worst == Severity::kInfo ? "ok" : SeverityName(worst)},
          {"exit_code", report.ExitCode()},
          {"checks", std::move(checks)}};
}

}  // namespace kvgpu::doctor
