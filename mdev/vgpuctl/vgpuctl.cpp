#include "mdev/vgpuctl/vgpuctl.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <ostream>

#include "common/clock.h"
#include "doctor/doctor.h"
#include "mdev/make_backend.h"
#include "mdev/vgpuctl/format.h"

namespace kvgpu::vgpuctl {

namespace {

constexpr int kFailed = 1;
constexpr int kUsage = 2;

// The doctor's subcommand: its flags, and the run, which only reads and needs no backend.
struct DoctorCommand {
  doctor::Options options;
  std::string root;
  std::string kata_version_file;
  std::string gpu_mode_probe = mdev::GpuModeProbeChoiceName(options.gpu_mode_probe);
  CLI::App* command;

  DoctorCommand(CLI::App& app, bool& json) {
    command = app.add_subcommand(
        "doctor", "check, read-only, every node precondition of docs/install.md (docs/vgpuctl.md)");
    command->add_flag("--json", json, "machine-readable output (docs/vgpuctl.md)");
    command->add_option("--root", root,
                        "directory every node path is read under (default: --sysfs-root)");
    struct PathFlag {
      const char* flag;
      std::filesystem::path* value;
      const char* help;
    };
    for (const auto& [flag, value, help] : {
             PathFlag{"--containerd-config", &options.containerd_config,
                      "containerd's config.toml"},
             PathFlag{"--kubelet-dir", &options.kubelet_dir,
                      "kubelet's root: device-plugins/ holds its and the plugin's sockets"},
             PathFlag{"--state-dir", &options.state_dir,
                      "the device plugin's --state-dir (device-plugin-state.json)"},
             PathFlag{"--licensing-dir", &options.licensing_dir,
                      "the device plugin's --licensing-dir (gridd.conf, ClientConfigToken/)"},
             PathFlag{"--kata-dir", &options.kata_dir, "where Kata Containers is installed"},
             PathFlag{"--prefix", &options.install_prefix,
                      "where kata-config/install.sh and guest-image/build.sh install put their "
                      "files"},
         }) {
      command->add_option(flag, *value, help)->capture_default_str();
    }
    command->add_option("--kata-version-file", kata_version_file,
                        "a file with the output of 'kata-runtime --version' (default: run "
                        "<kata-dir>/bin/kata-runtime --version under the root)");
    command
        ->add_option("--gpu-mode-probe", gpu_mode_probe,
                     "where MIG mode and the GPU instances are read: nvml (libnvidia-ml.so.1), "
                     "sim (<root>/sim-gpu-modes.json, the simulator's) or none")
        ->capture_default_str()
        ->check(CLI::IsMember({"nvml", "sim", "none"}));
  }

  int Run(const std::string& sysfs_root, bool json, mdev::SysfsIo& io, std::ostream& out) {
    options.root = root.empty() ? sysfs_root : root;
    if (!kata_version_file.empty()) options.kata_version_file = kata_version_file;
    options.now_unix_s = UnixNowMs() / 1000;
    options.gpu_mode_probe = *mdev::ParseGpuModeProbeChoice(gpu_mode_probe);
    doctor::Report report = doctor::Diagnose(options, io);
    out << (json ? doctor::ReportJson(report).dump(2) + "\n" : doctor::ReportTable(report));
    return report.ExitCode();
  }
};

void PrintWarnings(const mdev::Inventory& inventory, std::ostream& err) {
  for (const auto& warning : inventory.warnings) err << "vgpuctl: warning: " << warning << "\n";
}

// The subcommands that go through a backend: types, list, create, remove.
struct BackendCommands {
  CLI::App* types;
  CLI::App* list;
  CLI::App* create;
  CLI::App* remove;
  mdev::CreateRequest request;
  std::string uuid;
  std::string remove_id;

  BackendCommands(CLI::App& app, bool& json) {
    types = app.add_subcommand("types", "vGPU types each parent can create, with availability");
    types->add_flag("--json", json, "machine-readable output (docs/vgpuctl.md)");
    list = app.add_subcommand("list", "existing vGPUs");
    list->add_flag("--json", json, "machine-readable output (docs/vgpuctl.md)");
    create = app.add_subcommand("create", "create one vGPU and print its id");
    create->add_option("--parent", request.parent, "parent device (PCI address, or e.g. mtty)")
        ->required();
    create->add_option("--type", request.type_id, "type id (nvidia-222, mtty-2, 1414)")->required();
    create->add_option("--uuid", uuid, "UUID for the new mdev (default: a random one)");
    remove = app.add_subcommand("remove", "remove one vGPU");
    remove->add_option("ID", remove_id, "mdev UUID, or the VF address of a vendor-VFIO vGPU")
        ->required();
  }

  int Run(mdev::Backend& node, bool json, std::ostream& out, std::ostream& err) {
    auto fail = [&](const Status& status) {
      err << "vgpuctl: " << status.message() << "\n";
      return kFailed;
    };
    if (types->parsed() || list->parsed()) {
      auto inventory = node.Scan();
      if (!inventory.ok()) return fail(inventory.status());
      if (json) {
        out << (types->parsed() ? TypesJson(*inventory) : VgpusJson(*inventory)).dump(2) << "\n";
      } else {
        PrintWarnings(*inventory, err);
        out << (types->parsed() ? TypesTable(*inventory) : VgpusTable(*inventory));
      }
      return 0;
    }
    if (create->parsed()) {
      if (!uuid.empty()) request.uuid = uuid;
      auto vgpu = node.Create(request);
      if (!vgpu.ok()) return fail(vgpu.status());
      out << vgpu->id << "\n";
      return 0;
    }
    if (remove->parsed()) {
      Status status = node.Remove(remove_id);
      return status.ok() ? 0 : fail(status);
    }
    return kUsage;
  }
};

}  // namespace

int Run(const std::vector<std::string>& args, mdev::SysfsIo& io, std::ostream& out,
        std::ostream& err) {
  CLI::App app{
      "vgpuctl: list, create and remove the vGPUs (mdevs and vendor-VFIO VFs) of this node"};
  app.name("vgpuctl");
  app.fallthrough();
  app.require_subcommand(1);
  std::string sysfs_root = "/";
  app.add_option("--sysfs-root", sysfs_root,
                 "directory holding sys/ (the real node: /, a simulated node: its tree)")
      ->capture_default_str();
  mdev::BackendChoice choice;
  app.add_option("--backend", choice.name,
                 "where vGPUs are made: sysfs (the kernel's files) or libvirt (its node-device "
                 "API, on hosts where libvirt owns the mdevs)")
      ->check(CLI::IsMember({"sysfs", "libvirt"}))
      ->capture_default_str();
  app.add_option("--libvirt-uri", choice.libvirt_uri,
                 "the libvirt connection for --backend libvirt")
      ->capture_default_str();
  bool json = false;
  BackendCommands commands(app, json);
  DoctorCommand doctor(app, json);

  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      out << app.help();
      return 0;
    }
    err << "vgpuctl: " << e.what() << " (see vgpuctl --help)\n";
    return kUsage;
  }
  if (doctor.command->parsed()) return doctor.Run(sysfs_root, json, io, out);
  auto made = mdev::MakeBackend(choice, sysfs_root, io);
  if (!made.ok()) {
    err << "vgpuctl: " << made.status().message() << "\n";
    return kUsage;
  }
  return commands.Run(**made, json, out, err);
}

}  // namespace kvgpu::vgpuctl
