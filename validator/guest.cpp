#include "validator/guest.h"

#include <fmt/format.h>

#include <sstream>

namespace kvgpu::validator {

namespace {

constexpr const char* kMarker = "kvgpu-validator: ";

// Single-quotes `word` for sh.
std::string ShellQuote(const std::string& word) {
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

}  // namespace

std::string GuestScript(const GuestOptions& options) {
  const std::string smi = ShellQuote(options.nvidia_smi);
  const auto interval_ms = options.licence_interval.count();
  // The licence loop greps the same line ParseSmiQuery reads; the validator decides on the
  // parsed output, the grep only ends the loop early.
  return fmt::format(
      "m='{0}'\n"
      "echo \"${{m}}driver begin\"\n"
      "{1} -q 2>&1; echo \"${{m}}driver end rc=$?\"\n"
      "n=0\n"
      "while [ \"$n\" -lt {2} ]; do\n"
      "  n=$((n + 1))\n"
      "  echo \"${{m}}licence begin\"\n"
      "  out=$({1} -q 2>&1); rc=$?\n"
      "  echo \"$out\"; echo \"${{m}}licence end rc=$rc\"\n"
      "  if echo \"$out\" | grep -Eq '^ *License Status *: *Licensed'; then break; fi\n"
      "  [ \"$n\" -lt {2} ] && sleep {3}.{4:03d}\n"
      "done\n"
      "echo \"${{m}}licence done\"\n"
      "echo \"${{m}}cuda begin\"\n"
      "{5} 2>&1; echo \"${{m}}cuda end rc=$?\"\n",
      kMarker, smi, options.licence_tries, interval_ms / 1000, interval_ms % 1000,
      ShellQuote(options.cuda_sample));
}

GuestLog ParseGuestLog(const std::string& log) {
  GuestLog out;
  GuestSection* open = nullptr;
  std::istringstream lines(log);
  const std::string marker = kMarker;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(marker, 0) != 0) {
      if (open != nullptr) open->output += line + "\n";
      continue;
    }
    const std::string what = line.substr(marker.size());
    if (what == "driver begin") {
      open = &out.driver.emplace();
    } else if (what == "licence begin") {
      open = &out.licence.emplace_back();
    } else if (what == "cuda begin") {
      open = &out.cuda.emplace();
    } else if (what == "licence done") {
      out.licence_done = true;
    } else if (open != nullptr && what.find(" end rc=") != std::string::npos) {
      try {
        open->rc = std::stoi(what.substr(what.find(" end rc=") + 8));
      } catch (const std::exception&) {
        open->rc = -1;  // an end without a number is still an end, and not a success
      }
      open = nullptr;
    }
  }
  return out;
}

nlohmann::json BuildPod(const PodSpec& spec) {
  nlohmann::json container = {
      {"name", "validate"},
      {"image", spec.image},
      {"command", {"sh", "-c", GuestScript(spec.guest)}},
      {"resources", {{"limits", {{spec.resource, "1"}}}, {"requests", {{spec.resource, "1"}}}}},
      {"securityContext", {{"allowPrivilegeEscalation", false}}}};
  nlohmann::json pod_spec = {{"nodeName", spec.node},
                             {"runtimeClassName", spec.runtime_class},
                             {"restartPolicy", "Never"},
                             {"terminationGracePeriodSeconds", 5},
                             {"automountServiceAccountToken", false},
                             {"containers", {container}}};
  if (!spec.service_account.empty()) pod_spec["serviceAccountName"] = spec.service_account;
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", spec.name},
            {"namespace", spec.namespace_name},
            {"labels",
             {{"app.kubernetes.io/name", "kvgpu-validator-probe"},
              {"app.kubernetes.io/part-of", "kata-vgpu"}}}}},
          {"spec", pod_spec}};
}

}  // namespace kvgpu::validator
