#include "sim/host_software.h"

#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/base64.h"
#include "common/clock.h"
#include "common/cross_program.h"

namespace kvgpu::sim {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kYear = 365LL * 24 * 3600;

Status Put(const fs::path& file, const std::string& content, fs::perms mode) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  std::ofstream(file, std::ios::trunc) << content;
  fs::permissions(file, mode, ec);
  if (ec || !fs::exists(file))
    return Status::Error(ErrorCode::kIo, "cannot write " + file.string());
  return Status::Ok();
}

Status Symlink(const fs::path& link, const fs::path& target) {
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  fs::remove(link, ec);
  fs::create_symlink(target, link, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot link " + link.string());
  return Status::Ok();
}

// A unix socket file, as a listening server leaves it. mknod(2) makes one without binding
// (no sun_path length limit for deep test roots; unprivileged for sockets): the doctor only looks
// at the file's type.
Status Socket(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  fs::remove(path, ec);
  if (::mknod(path.c_str(), S_IFSOCK | 0600, 0) != 0) {
    return Status::FromErrno(errno, "cannot make socket " + path.string());
  }
  return Status::Ok();
}

std::string Base64Url(const std::string& bytes) {
  std::string out = Base64Encode(bytes);
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!out.empty() && out.back() == '=') out.pop_back();
  return out;
}

// kata-config/containerd/kata-vgpu.config-v2.toml's tables, inside install.sh's marked block.
std::string ContainerdConfig() {
  std::string text =
      "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n"
      "  sandbox_image = \"registry.k8s.io/pause:3.9\"\n\n"
      "# BEGIN kata-vgpu (written by the kata-config install script; rerun it "
      "instead of editing)\n";
  for (std::string handler : {"kata-vgpu", "kata-vgpu-vf"}) {
    std::string table = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes." + handler;
    text += table + "]\n  runtime_type = \"io.containerd." + handler +
            ".v2\"\n  runtime_path = \"/opt/kata/bin/containerd-shim-kata-v2\"\n"
            "  privileged_without_host_devices = true\n  pod_annotations = []\n" +
            table +
            ".options]\n    ConfigPath = \"/opt/kata-vgpu/share/defaults/kata-containers/"
            "configuration-" +
            handler + ".toml\"\n";
  }
  return text + "# END kata-vgpu\n";
}

}  // namespace

std::string ClientConfigToken(int64_t issued_unix_s, int64_t expires_unix_s) {
  nlohmann::json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  nlohmann::json claims = {{"iss", "NLS Service Instance"},
                           {"aud", "NLS Licensed Client"},
                           {"iat", issued_unix_s},
                           {"nbf", issued_unix_s},
                           {"exp", expires_unix_s}};
  return Base64Url(header.dump()) + "." + Base64Url(claims.dump()) + "." +
         Base64Url("simulated signature");
}

Status LayOutHostSoftware(const fs::path& root, const HostSoftware& spec) {
  const auto exec = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                    fs::perms::others_read | fs::perms::others_exec;
  const auto read = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                    fs::perms::others_read;
  const auto secret = fs::perms::owner_read | fs::perms::owner_write;
  fs::path kata = root / "opt/kata", ours = root / "opt/kata-vgpu";
  const fs::path licensing = root / fs::path(kLicensingDir).relative_path();
  std::string defaults = "share/defaults/kata-containers/";
  std::string kver = spec.guest_kernel_release;
  std::string bundle = "driver-" + spec.guest_driver_version + "-" + kver;
  int64_t now = UnixNowMs() / 1000;
  int64_t expiry = spec.token_expiry_unix_s != 0 ? spec.token_expiry_unix_s : now + kYear;
  for (auto [path, content, mode] :
       std::initializer_list<std::tuple<fs::path, std::string, fs::perms>>{
           {kata / "bin/kata-runtime",
            "#!/bin/sh\necho 'kata-runtime  : " + spec.kata_version +
                "'\necho '   commit   : "
                "<<unknown>>'\necho '   OCI specs: 1.1.0'\n",
            exec},
           {kata / "bin/containerd-shim-kata-v2", "#!/bin/sh\nexit 0\n", exec},
           {kata / "bin/qemu-system-x86_64", "#!/bin/sh\nexit 0\n", exec},
           {ours / "bin/qemu-system-x86_64",
            "#!/bin/sh\nexec /opt/kata/bin/qemu-system-x86_64 \"$@\"\n", exec},
           {ours / (defaults + "configuration-kata-vgpu.toml"),
            "[hypervisor.qemu]\npath = \"/opt/kata-vgpu/bin/qemu-system-x86_64\"\n"
            "kernel = \"/opt/kata-vgpu/guest/vmlinuz\"\nhot_plug_vfio = \"root-port\"\n",
            read},
           {ours / (defaults + "configuration-kata-vgpu-vf.toml"),
            "[hypervisor.qemu]\npath = \"/opt/kata/bin/qemu-system-x86_64\"\n"
            "kernel = \"/opt/kata-vgpu/guest/vmlinuz\"\ncold_plug_vfio = \"root-port\"\n",
            read},
           {root / "etc/containerd/config.toml", ContainerdConfig(), read},
           {ours / "guest" / ("vmlinuz-" + kver), "bzImage", read},
           {ours / bundle / "bundle-info",
            "driver-version=" + spec.guest_driver_version + "\nkernel-release=" + kver +
                "\nconfig-version=3\n",
            read},
           {licensing / "gridd.conf", "FeatureType=1\n", secret},
           {licensing / "ClientConfigToken/client_configuration_token.tok",
            ClientConfigToken(now - 3600, expiry), secret},
           {root / "var/lib/kata-vgpu/device-plugin-state.json",
            "{\"version\": 1, \"vgpus\": []}\n", secret},
       }) {
    if (Status s = Put(path, content, mode); !s.ok()) return s;
  }
  if (Status s = Symlink(ours / "guest/vmlinuz", "vmlinuz-" + kver); !s.ok()) return s;
  if (Status s = Symlink(ours / "driver", bundle); !s.ok()) return s;
  fs::path plugins = root / "var/lib/kubelet/device-plugins";
  if (Status s = Socket(plugins / "kubelet.sock"); !s.ok()) return s;
  return Socket(plugins / ("kata-vgpu-" + spec.plugin_resource + ".sock"));
}

}  // namespace kvgpu::sim
