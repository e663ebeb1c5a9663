#include "mdev/vgpuctl/vgpuctl.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <ostream>

#include "common/clock.h"
#include "mdev/make_backend.h"
#include "mdev/vgpuctl/doctor.h"
#include "mdev/vgpuctl/format.h"

namespace kvgpu::vgpuctl {

namespace {

constexpr int kFailed = 1;
constexpr int kUsage = 2;

std::string ReportJsonText(const doctor::Report& report) {
  return doctor::ReportJson(report).dump(2) + "\n";
}

void PrintWarnings(const mdev::Inventory& inventory, std::ostream& err) {
  for (const auto& warning : inventory.warnings) err << "vgpuctl: warning: " << warning << "\n";
}

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
  auto* types = app.add_subcommand("types", "vGPU types each parent can create, with availability");
  types->add_flag("--json", json, "machine-readable output (docs/vgpuctl.md)");
  auto* list = app.add_subcommand("list", "existing vGPUs");
  list->add_flag("--json", json, "machine-readable output (docs/vgpuctl.md)");

  mdev::CreateRequest request;
  std::string uuid;
  auto* create = app.add_subcommand("create", "create one vGPU and print its id");
  create->add_option("--parent", request.parent, "parent device (PCI address, or e.g. mtty)")
      ->required();
  create->add_option("--type", request.type_id, "type id (nvidia-222, mtty-2, 1414)")->required();
  create->add_option("--uuid", uuid, "UUID for the new mdev (default: a random one)");

  std::string remove_id;
  auto* remove = app.add_subcommand("remove", "remove one vGPU");
  remove->add_option("ID", remove_id, "mdev UUID, or the VF address of a vendor-VFIO vGPU")
      ->required();

  doctor::Options doctor_options;
  std::string doctor_root;
  auto* doctor = app.add_subcommand(
      "doctor", "check, read-only, every node precondition of docs/install.md (docs/vgpuctl.md)");
  doctor->add_flag("--json", json, "machine-readable output (docs/vgpuctl.md)");
  doctor->add_option("--root", doctor_root,
                     "directory every node path is read under (default: --sysfs-root)");
  doctor
      ->add_option("--containerd-config", doctor_options.containerd_config,
                   "containerd's config.toml")
      ->capture_default_str();
  doctor
      ->add_option("--kubelet-dir", doctor_options.kubelet_dir,
                   "kubelet's root: device-plugins/ holds its and the plugin's sockets")
      ->capture_default_str();
  doctor
      ->add_option("--state-dir", doctor_options.state_dir,
                   "the device plugin's --state-dir (device-plugin-state.json)")
      ->capture_default_str();
  doctor
      ->add_option("--licensing-dir", doctor_options.licensing_dir,
                   "the device plugin's --licensing-dir (gridd.conf, ClientConfigToken/)")
      ->capture_default_str();
  doctor->add_option("--kata-dir", doctor_options.kata_dir, "where Kata Containers is installed")
      ->capture_default_str();
  doctor
      ->add_option("--prefix", doctor_options.install_prefix,
                   "where kata-config/install.sh and guest-image/build.sh install put their files")
      ->capture_default_str();
  std::string kata_version_file;
  doctor->add_option("--kata-version-file", kata_version_file,
                     "a file with the output of 'kata-runtime --version' (default: run "
                     "<kata-dir>/bin/kata-runtime --version under the root)");

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

  if (doctor->parsed()) {
    // Only reads: the doctor needs no backend, and every node path is taken under the root.
    doctor_options.root = doctor_root.empty() ? sysfs_root : doctor_root;
    if (!kata_version_file.empty()) doctor_options.kata_version_file = kata_version_file;
    doctor_options.now_unix_s = UnixNowMs() / 1000;
    doctor::Report report = doctor::Diagnose(doctor_options, io);
    out << (json ? ReportJsonText(report) : doctor::ReportTable(report));
    return report.ExitCode();
  }

  auto made = mdev::MakeBackend(choice, sysfs_root, io);
  if (!made.ok()) {
    err << "vgpuctl: " << made.status().message() << "\n";
    return kUsage;
  }
  mdev::Backend& node = **made;
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
    if (!status.ok()) return fail(status);
    return 0;
  }
  return kUsage;
}

}  // namespace kvgpu::vgpuctl
