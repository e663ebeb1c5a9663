// The doctor's checks of what a vGPU pod's VM is given: the kernel and driver bundle that
// guest-image/build.sh install puts in place, the guest driver's branch against the host's vGPU
// manager, and the licence token the device plugin publishes. Listed, in the doctor's order, by
// SoftwareChecks() (doctor_software.cpp).
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/base64.h"
#include "doctor/doctor_internal.h"

namespace kvgpu::doctor::internal {

namespace {

// docs/install.md step 4: guest-image/build.sh install puts <prefix>/guest/vmlinuz ->
// vmlinuz-<release> (the Kata configurations' `kernel`) and <prefix>/driver ->
// driver-<version>-<release> with bundle-info (driver-version=, kernel-release=).
std::optional<std::string> GuestKernelRelease(NodeView& node) {
  fs::path link = node.Path(node.options().install_prefix / "guest/vmlinuz");
  std::error_code ec;
  if (!fs::is_regular_file(link, ec)) return std::nullopt;
  std::string name = fs::canonical(link, ec).filename().string();
  if (ec || name.rfind("vmlinuz-", 0) != 0) return "";
  return name.substr(8);
}

std::map<std::string, std::string> BundleInfo(NodeView& node) {
  std::map<std::string, std::string> info;
  std::istringstream lines(
      node.Read(node.options().install_prefix / "driver/bundle-info").value_or(""));
  for (std::string line; std::getline(lines, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) info[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return info;
}

const char* kGuestBuild =
    "build them with guest-image/build.sh kernel/driver/bundle for the host's driver branch and "
    "run 'sudo guest-image/build.sh install --kernel out/kernel --bundle out/bundle' "
    "(docs/install.md step 4)";

}  // namespace

void CheckGuestImage(NodeView& node, std::vector<Finding>& out) {
  auto release = GuestKernelRelease(node);
  if (!release) {
    out.push_back({"guest.kernel-missing", Severity::kError,
                   node.Path(node.options().install_prefix / "guest/vmlinuz").string() +
                       " is missing or dangles",
                   "the Kata configurations boot every vGPU VM with this kernel", kGuestBuild});
  }
  auto info = BundleInfo(node);
  fs::path bundle = node.Path(node.options().install_prefix / "driver/bundle-info");
  if (info["driver-version"].empty() || info["kernel-release"].empty()) {
    out.push_back({"guest.bundle-missing", Severity::kError,
                   bundle.string() + " is missing or has no driver-version/kernel-release",
                   "the webhook mounts this driver bundle into every vGPU pod; without it the "
                   "guest has no NVIDIA driver",
                   kGuestBuild});
    return;
  }
  if (release && !release->empty() && info["kernel-release"] != *release) {
    out.push_back({"guest.bundle-kernel-mismatch", Severity::kError,
                   "the driver bundle is built for kernel " + info["kernel-release"] +
                       ", the guest kernel is " + *release,
                   "nvidia.ko refuses to load into a kernel it was not built for",
                   "rebuild the bundle against out/kernel of the installed kernel and install "
                   "both together: " +
                       std::string(kGuestBuild)});
  }
}

namespace {

// NVIDIA vGPU release branches, in order, with the long-term-support ones marked. From the
// "NVIDIA vGPU Software Driver Versions" tables of NVIDIA's vGPU release notes (docs.nvidia.com/
// vgpu); the LTS marks are less certain than the order: see docs/vgpuctl.md.
struct Branch {
  int driver;  // the driver version's first number: 535 for 535.161.05
  int vgpu;    // the vGPU software release: 16
  bool lts;
};
const std::vector<Branch>& Branches() {
  static const std::vector<Branch> branches = {
      {470, 13, true},  {510, 14, false}, {525, 15, false}, {535, 16, true},
      {550, 17, false}, {570, 18, false}, {580, 19, true},
  };
  return branches;
}

}  // namespace

// NVIDIA's rule ("Compatibility Requirements for the NVIDIA vGPU Manager and Guest VM Driver",
// vGPU 15 to 19 release notes): compatible are the same release, releases of the same major
// branch, a manager from a later branch with guest drivers from the previous branch, and (vGPU 19)
// a later LTS branch's manager with the previous LTS branch's guest drivers. Nothing else: an
// incompatible guest driver fails to load the vGPU.
void CheckGuestDriverBranch(NodeView& node, std::vector<Finding>& out) {
  auto host = node.HostDriverVersion();
  std::string guest = BundleInfo(node)["driver-version"];
  auto h = ParseVersion(host.value_or("")), g = ParseVersion(guest);
  if (h.empty() || g.empty()) {
    return Skipped(out,
                   "needs the host's driver version and the bundle's (the nvidia-driver "
                   "and guest-image checks)");
  }
  if (h[0] == g[0]) return;
  const auto& all = Branches();
  auto find = [&](int driver) {
    return std::find_if(all.begin(), all.end(),
                        [&](const Branch& b) { return b.driver == driver; });
  };
  auto hb = find(h[0]), gb = find(g[0]);
  std::string seen = "host vGPU manager " + *host + " (branch R" + std::to_string(h[0]) +
                     "), guest driver bundle " + guest + " (branch R" + std::to_string(g[0]) + ")";
  std::string fix =
      "build the guest driver bundle from the -grid.run of the host's release "
      "(same branch R" +
      std::to_string(h[0]) + "): " + kGuestBuild;
  if (hb == all.end() || gb == all.end()) {
    out.push_back({"guest.driver-branch-unknown", Severity::kWarning, seen,
                   "the doctor's branch table does not know one of these branches, so it cannot "
                   "tell whether NVIDIA supports the pair",
                   "check the pair in the release notes of the host's vGPU release; " + fix});
    return;
  }
  bool previous = gb + 1 == hb;
  bool previous_lts = hb->lts && gb->lts && gb < hb &&
                      std::none_of(gb + 1, hb, [](const Branch& b) { return b.lts; });
  if (previous || previous_lts) {
    out.push_back({"guest.driver-branch-older", Severity::kWarning, seen,
                   "NVIDIA supports a guest driver from the previous (LTS) branch, without the "
                   "newer release's features and fixes",
                   fix});
    return;
  }
  out.push_back({"guest.driver-branch-incompatible", Severity::kError, seen,
                 "NVIDIA supports only the same branch or the listed cross-branch pairs; the "
                 "guest driver fails to initialise the vGPU",
                 fix});
}

namespace {

std::optional<nlohmann::json> JwtClaims(const std::string& token) {
  auto first = token.find('.'), second = token.find('.', first + 1);
  if (first == std::string::npos || second == std::string::npos) return std::nullopt;
  std::string payload = token.substr(first + 1, second - first - 1);
  for (char& c : payload) c = c == '-' ? '+' : c == '_' ? '/' : c;  // base64url -> base64
  while (payload.size() % 4 != 0) payload += '=';
  auto decoded = Base64Decode(payload);
  if (!decoded.ok()) return std::nullopt;
  auto claims = nlohmann::json::parse(decoded.bytes, nullptr, /*allow_exceptions=*/false);
  if (claims.is_discarded() || !claims.is_object()) return std::nullopt;
  return claims;
}

}  // namespace

// docs/install.md step 8: the device plugin publishes gridd.conf and the NLS client
// configuration token to <licensing-dir>. The token is a JWT (NVIDIA's NLS hands it out as such;
// its `exp` claim is when the NLS service instance stops accepting it).
void CheckLicence(NodeView& node, std::vector<Finding>& out) {
  const fs::path& dir = node.options().licensing_dir;
  std::string publish =
      "put the token in the kvgpu-client-token Secret (docs/install.md step 8); "
      "the device plugin publishes it here within about 90 s";
  auto gridd = node.Read(dir / "gridd.conf");
  std::error_code exists_ec;
  if (!gridd && fs::exists(node.Path(dir / "gridd.conf"), exists_ec)) {
    out.push_back({"licence.unreadable", Severity::kWarning,
                   "cannot read " + node.Path(dir / "gridd.conf").string(),
                   "the licensing files cannot be checked (the plugin publishes them 0600, root "
                   "only)",
                   "run the doctor as root (sudo vgpuctl doctor)"});
    return;
  }
  if (!gridd) {
    out.push_back({"licence.gridd-conf-missing", Severity::kWarning,
                   node.Path(dir / "gridd.conf").string() + " is missing",
                   "vGPU pods stay in ContainerCreating until the device plugin has published it",
                   "apply deploy/ (docs/install.md step 9) so the device plugin runs and "
                   "publishes the kvgpu-gridd-conf ConfigMap"});
  }
  // A legacy licence server (ServerAddress) needs no token.
  if (gridd && gridd->find("ServerAddress=") != std::string::npos) return;
  std::vector<std::string> tokens;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(node.Path(dir / "ClientConfigToken"), ec)) {
    if (entry.path().extension() == ".tok") tokens.push_back(entry.path().filename());
  }
  // Absent is "missing" below; anything else (not root: the directory is 0700) must not read as
  // a missing token.
  if (ec && ec != std::errc::no_such_file_or_directory) {
    out.push_back(
        {"licence.unreadable", Severity::kWarning,
         "cannot list " + node.Path(dir / "ClientConfigToken").string() + ": " + ec.message(),
         "the token cannot be checked (the plugin publishes it 0700/0600, root only)",
         "run the doctor as root (sudo vgpuctl doctor)"});
    return;
  }
  if (tokens.empty()) {
    out.push_back({"licence.token-missing", Severity::kWarning,
                   "no *.tok in " + node.Path(dir / "ClientConfigToken").string(),
                   "nvidia-gridd cannot license the vGPUs: unlicensed vGPUs are throttled",
                   publish});
    return;
  }
  for (const auto& name : tokens) {
    std::string path = node.Path(dir / "ClientConfigToken" / name).string();
    auto claims = JwtClaims(node.Read(dir / "ClientConfigToken" / name).value_or(""));
    if (!claims) {
      out.push_back(
          {"licence.token-unparseable", Severity::kError,
           path + " is not a JWT (header.payload.signature, base64url JSON)",
           "nvidia-gridd rejects it and the vGPUs stay unlicensed",
           "download a new client configuration token from your NLS instance; " + publish});
      continue;
    }
    if (claims->contains("exp") && (*claims)["exp"].is_number() &&
        (*claims)["exp"].get<int64_t>() <= node.options().now_unix_s) {
      out.push_back(
          {"licence.token-expired", Severity::kError,
           path + " expired (exp " + std::to_string((*claims)["exp"].get<int64_t>()) + ", now " +
               std::to_string(node.options().now_unix_s) + ")",
           "nvidia-gridd can no longer obtain a licence with it",
           "download a new client configuration token from your NLS instance; " + publish});
    }
  }
}

}  // namespace kvgpu::doctor::internal
