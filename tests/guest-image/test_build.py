#!/usr/bin/env python3
"""Behaviour of guest-image/build.sh.

KernelConfig* run the real Kconfig of Debian's linux-source-6.1 (`make olddefconfig`), fetched
into the shared cache by debian-deb.sh. Driver, Bundle and Install run against a kernel output
laid out like `build.sh kernel` makes it, and a fake NVIDIA .run (fake-nvidia-installer.sh)."""

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUILD = REPO / "guest-image" / "build.sh"
FRAGMENTS = REPO / "guest-image" / "kernel" / "fragments"
KVER = "6.1.192-kvgpu1"


def sh(*args, env=None, check=False):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=check,
                          env={**os.environ, **(env or {})})


def build(*args, env=None):
    return sh("bash", BUILD, *args, env=env)


def config_values(path):
    values = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if m := re.fullmatch(r"(CONFIG_\w+)=(.*)", line):
            values[m.group(1)] = m.group(2)
        elif m := re.fullmatch(r"# (CONFIG_\w+) is not set", line):
            values[m.group(1)] = "n"
    return values


def required_symbols():
    """What the fragments ask for, read independently of build.sh's own parser."""
    wanted = {}
    for fragment in sorted(FRAGMENTS.glob("*.conf")):
        wanted.update(config_values(fragment))
    return wanted


class TempDir(unittest.TestCase):
    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp)


class LinuxSource:
    """Debian's linux-source .deb, and the Kconfig part of its tree unpacked once per run."""
    deb = None
    tree = None

    @classmethod
    def get(cls):
        if cls.deb is None:
            result = sh("bash", HERE / "debian-deb.sh", "linux-source-6.1", check=True)
            cls.deb = pathlib.Path(result.stdout.strip())
        return cls.deb

    @classmethod
    def kconfig_tree(cls, parent):
        """What `make olddefconfig` reads, so the slower cases skip a full xz pass each."""
        if cls.tree is None:
            tree = parent / "linux"
            tree.mkdir()
            script = ('dpkg-deb --fsys-tarfile "$1" | tar -xO --wildcards "./usr/src/linux-source-*.tar.xz" '
                      '| xz -d | tar -x --strip-components=1 -C "$2" --wildcards "*/Makefile" '
                      '"*/Kconfig*" "*/scripts/*" "*/arch/x86/configs/*" "*/arch/x86/Makefile*"')
            sh("bash", "-o", "pipefail", "-c", script, "unpack", cls.get(), tree, check=True)
            cls.tree = tree
        return cls.tree


class KernelConfigOnDebianSource(TempDir):
    @classmethod
    def setUpClass(cls):
        cls.shared = pathlib.Path(tempfile.mkdtemp())
        LinuxSource.tree = None

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared)

    def kernel(self, *args):
        return build("kernel", "--config-only", "--out", self.tmp / "out", *args)

    def assert_every_symbol_kept(self, config):
        got = config_values(config)
        for symbol, value in required_symbols().items():
            with self.subTest(symbol):
                self.assertEqual(got.get(symbol, "n"), value)

    def test_fragments_on_x86_64_defconfig_keep_every_symbol(self):
        result = self.kernel("--source", LinuxSource.get())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_every_symbol_kept(self.tmp / "out" / "config")
        self.assertEqual((self.tmp / "out" / "kernel-release").read_text().strip(),
                         f"6.1.192-kvgpu{(self.tmp / 'out' / 'config-version').read_text().strip()}")

    def test_fragments_on_debians_own_kernel_config_keep_every_symbol(self):
        image = sh("bash", HERE / "debian-deb.sh", "linux-image", check=True).stdout.strip()
        listing = sh("dpkg-deb", "-c", image, check=True).stdout
        config_member = re.search(r"\./boot/config-\S+", listing).group(0)
        base = self.tmp / "debian.config"
        with open(base, "wb") as f:
            tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", image], stdout=subprocess.PIPE)
            subprocess.run(["tar", "-xO", config_member], stdin=tar.stdout, stdout=f, check=True)
            tar.wait()
        result = self.kernel("--source", LinuxSource.kconfig_tree(self.shared), "--base", base)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_every_symbol_kept(self.tmp / "out" / "config")

    def bad_fragments(self, extra_name, extra_text):
        fragments = self.tmp / "fragments"
        shutil.copytree(FRAGMENTS, fragments)
        (fragments / extra_name).write_text(extra_text)
        return fragments

    def test_symbol_whose_dependency_is_off_fails_the_build(self):
        # HOTPLUG_PCI_PCIE depends on PCIEPORTBUS: switching the port driver off drops it.
        fragments = self.bad_fragments("zz-no-port-services.conf",
                                       "# test: no port services\n# CONFIG_PCIEPORTBUS is not set\n")
        result = self.kernel("--source", LinuxSource.kconfig_tree(self.shared), "--fragments", fragments)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("CONFIG_HOTPLUG_PCI_PCIE=y (pcie-hotplug.conf) is gone after olddefconfig",
                      result.stderr)
        self.assertFalse((self.tmp / "out").exists())

    def test_symbol_the_kernel_does_not_have_fails_the_build(self):
        fragments = self.bad_fragments("zz-typo.conf", "# test: misspelt\nCONFIG_VIRTIO_FSS=y\n")
        result = self.kernel("--source", LinuxSource.kconfig_tree(self.shared), "--fragments", fragments)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("CONFIG_VIRTIO_FSS=y (zz-typo.conf) is gone", result.stderr)
        self.assertFalse((self.tmp / "out").exists())


class KernelArguments(TempDir):
    CASES = [
        ("missing --out", ["--source", "/nonexistent"], "--source and --out are required"),
        ("source that does not exist", ["--source", "/nonexistent", "--out", "X"], "does not exist"),
        ("source of an unknown kind", ["--source", "SRCFILE", "--out", "X"], "want a directory, a .tar"),
        ("bad job count", ["--source", "SRCDIR", "--out", "X", "--jobs", "0"], "want a positive number"),
        ("base config that does not exist", ["--source", "SRCDIR", "--out", "X", "--base", "/nope"],
         "not 'defconfig' nor a file"),
    ]

    def test_bad_arguments_are_refused_before_any_work(self):
        (self.tmp / "src.zip").write_text("")
        (self.tmp / "src").mkdir()
        for description, args, message in self.CASES:
            with self.subTest(description):
                args = [str(self.tmp / "src.zip") if a == "SRCFILE" else
                        str(self.tmp / "src") if a == "SRCDIR" else
                        str(self.tmp / "out") if a == "X" else a for a in args]
                result = build("kernel", *args)
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertIn(message, result.stderr)
                self.assertFalse((self.tmp / "out").exists())

    def test_out_dir_in_use_is_refused(self):
        (self.tmp / "out").mkdir()
        (self.tmp / "out" / "keep").write_text("mine")
        result = build("kernel", "--source", self.tmp, "--out", self.tmp / "out")
        self.assertIn("exists and is not empty", result.stderr)
        self.assertEqual((self.tmp / "out" / "keep").read_text(), "mine")


class Fragments(TempDir):
    def copy(self):
        fragments = self.tmp / "fragments"
        shutil.copytree(FRAGMENTS, fragments)
        version = self.tmp / "config-version"
        shutil.copy(REPO / "guest-image" / "kernel" / "config-version", version)
        return fragments, version

    def check(self, fragments, version):
        return build("check", "--fragments", fragments, "--config-version", version)

    def test_shipped_fragments_pass(self):
        result = build("check")
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_option_without_a_comment_is_caught(self):
        fragments, version = self.copy()
        with open(fragments / "modules.conf", "a") as f:
            f.write("\nCONFIG_MODVERSIONS=y\n")
        result = self.check(fragments, version)
        self.assertEqual(result.returncode, 1)
        self.assertIn("modules.conf:", result.stderr)
        self.assertIn("CONFIG_MODVERSIONS=y has no comment saying why", result.stderr)

    def test_symbol_in_two_fragments_is_caught(self):
        fragments, version = self.copy()
        with open(fragments / "virtio-fs.conf", "a") as f:
            f.write("# duplicate\nCONFIG_MODULES=y\n")
        result = self.check(fragments, version)
        self.assertIn("CONFIG_MODULES is set twice (modules.conf, virtio-fs.conf)", result.stderr)

    def test_fragment_change_without_version_bump_is_caught(self):
        fragments, version = self.copy()
        with open(fragments / "virtio-fs.conf", "a") as f:
            f.write("# DAX window for the virtio-fs cache\nCONFIG_FUSE_DAX=y\n")
        result = self.check(fragments, version)
        self.assertEqual(result.returncode, 1)
        next_version = int(version.read_text().split()[-2]) + 1
        self.assertIn(f"the fragments changed; append the line '{next_version} ", result.stderr)
        suggested = re.search(rf"append the line '({next_version} [0-9a-f]{{64}})'", result.stderr).group(1)
        with open(version, "a") as f:
            f.write(suggested + "\n")
        result = self.check(fragments, version)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_versions_must_increase(self):
        fragments, version = self.copy()
        lines = version.read_text().splitlines()
        current = lines[-1].split()[1]
        version.write_text("\n".join(lines[:-1] + ["5 " + "0" * 64, "4 " + current]) + "\n")
        result = self.check(fragments, version)
        self.assertIn("versions must increase", result.stderr)


def fake_kernel(path, kver=KVER):
    """A directory shaped like `build.sh kernel` output."""
    (path / "headers" / "include" / "generated").mkdir(parents=True)
    (path / "headers" / "include" / "generated" / "utsrelease.h").write_text(
        f'#define UTS_RELEASE "{kver}"\n')
    (path / "headers" / "Makefile").write_text("# kernel\n")
    (path / "kernel-release").write_text(kver + "\n")
    (path / "config-version").write_text("1\n")
    (path / "config").write_text("CONFIG_MODULES=y\n")
    (path / "vmlinuz").write_bytes(b"MZ fake bzImage " + kver.encode())
    mods = path / "modules" / "lib" / "modules" / kver
    mods.mkdir(parents=True)
    (mods / "modules.order").write_text("kernel/fs/fuse/virtiofs.ko\n")
    (mods / "modules.builtin").write_text("kernel/drivers/pci/hotplug/pciehp.ko\n")
    return path


class DriverStep(TempDir):
    def setUp(self):
        super().setUp()
        self.kernel = fake_kernel(self.tmp / "kernel")
        self.run_file = self.tmp / "NVIDIA-Linux-x86_64-550.90.07-grid.run"
        shutil.copy(HERE / "fake-nvidia-installer.sh", self.run_file)
        self.args_file = self.tmp / "installer-args"
        self.staging = self.tmp / "staging"

    def driver(self, *extra, env=None):
        return build("driver", "--installer", self.run_file, "--kernel", self.kernel,
                     "--staging", self.staging, *extra,
                     env={"FAKE_NVIDIA_ARGS": str(self.args_file), **(env or {})})

    def test_installer_runs_non_interactively_into_the_staging_root(self):
        result = self.driver()
        self.assertEqual(result.returncode, 0, result.stderr)
        args = self.args_file.read_text().splitlines()
        staging_prefix = str(self.staging.parent) + "/.staging."
        for flag in ["--silent", "--no-kernel-module-source", "--no-install-libglvnd",
                     "--no-x-check", "--no-nouveau-check", "--no-distro-scripts", "--no-systemd",
                     "--skip-depmod", f"--kernel-name={KVER}",
                     f"--kernel-source-path={self.kernel}/headers"]:
            with self.subTest(flag):
                self.assertIn(flag, args)
        # Everything the installer writes goes below the (temporary) staging root.
        for flag in ("--utility-prefix=", "--kernel-install-path=", "--opengl-prefix=",
                     "--x-prefix=", "--documentation-prefix=", "--log-file-name=",
                     "--application-profile-path=", "--glvnd-egl-config-path="):
            with self.subTest(flag):
                value = next(a for a in args if a.startswith(flag))[len(flag):]
                self.assertTrue(value.startswith(staging_prefix), value)
        self.assertTrue((self.staging / "lib/modules" / KVER / "kernel/drivers/video/nvidia.ko").is_file())
        self.assertTrue(os.access(self.staging / "usr/bin/nvidia-smi", os.X_OK))
        self.assertEqual((self.staging / "driver-version").read_text().strip(), "550.90.07")
        self.assertIn("FeatureType=", (self.staging / "etc/nvidia/gridd.conf.template").read_text())
        self.assertEqual([p.name for p in self.tmp.iterdir() if p.name.startswith(".staging")], [])

    def test_failed_installer_stages_nothing(self):
        result = self.driver(env={"FAKE_NVIDIA_FAIL": "1"})
        self.assertEqual(result.returncode, 1)
        self.assertIn("the NVIDIA installer failed; nothing was staged", result.stderr)
        self.assertIn("Unable to build the NVIDIA kernel module", result.stderr)
        self.assertFalse(self.staging.exists())
        self.assertEqual([p.name for p in self.tmp.iterdir() if p.name.startswith(".staging")], [])

    def test_headers_of_another_kernel_are_refused_by_the_installer(self):
        (self.kernel / "headers/include/generated/utsrelease.h").write_text('#define UTS_RELEASE "6.1.0-other"\n')
        result = self.driver()
        self.assertEqual(result.returncode, 1)
        self.assertIn("Unable to find the kernel source tree", result.stderr)
        self.assertFalse(self.staging.exists())

    def test_non_empty_staging_is_refused(self):
        self.staging.mkdir()
        (self.staging / "other").write_text("x")
        result = self.driver()
        self.assertIn("exists and is not empty", result.stderr)
        self.assertFalse(self.args_file.exists())

    def test_version_is_read_from_the_file_name_or_given(self):
        renamed = self.tmp / "driver.run"
        self.run_file.rename(renamed)
        self.run_file = renamed
        self.assertIn("pass --driver-version", self.driver().stderr)
        result = self.driver("--driver-version", "535.183.06")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual((self.staging / "driver-version").read_text().strip(), "535.183.06")


class WithStaging(TempDir):
    """A fake kernel output and a driver staged from it by the fake installer."""

    def setUp(self):
        super().setUp()
        self.kernel = fake_kernel(self.tmp / "kernel")
        run_file = self.tmp / "NVIDIA-Linux-x86_64-550.90.07-grid.run"
        shutil.copy(HERE / "fake-nvidia-installer.sh", run_file)
        self.staging = self.tmp / "staging"
        result = build("driver", "--installer", run_file, "--kernel", self.kernel, "--staging",
                       self.staging)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.bundle = self.tmp / "bundle"

    def make_bundle(self):
        return build("bundle", "--staging", self.staging, "--kernel", self.kernel, "--out", self.bundle)


class BundleStep(WithStaging):
    def test_layout_matches_the_webhook_mount(self):
        self.assertEqual(self.make_bundle().returncode, 0)
        b = self.bundle
        self.assertTrue(os.access(b / "bin/nvidia-smi", os.X_OK))
        self.assertTrue(os.access(b / "bin/nvidia-gridd", os.X_OK))
        self.assertFalse((b / "bin/nvidia-installer").exists())
        self.assertTrue((b / "lib64/libcuda.so.550.90.07").is_file())
        self.assertEqual(os.readlink(b / "lib64/libcuda.so.1"), "libcuda.so.550.90.07")
        self.assertTrue((b / "etc/nvidia/gridd.conf.template").is_file())
        self.assertIn("driver-version=550.90.07\nkernel-release=" + KVER,
                      (b / "bundle-info").read_text())

    def test_modprobe_finds_the_driver_in_the_bundle(self):
        # What the driver init container runs: modprobe -d /usr/local/nvidia nvidia-uvm.
        self.assertEqual(self.make_bundle().returncode, 0)
        result = sh("modprobe", "-d", self.bundle, "-S", KVER, "--show-depends", "nvidia-uvm")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), [
            "insmod", f"{self.bundle}/lib/modules/{KVER}/kernel/drivers/video/nvidia.ko",
            "insmod", f"{self.bundle}/lib/modules/{KVER}/kernel/drivers/video/nvidia-uvm.ko"])

    def test_manifest_lists_every_file_with_its_checksum(self):
        self.assertEqual(self.make_bundle().returncode, 0)
        manifest = {}
        for line in (self.bundle / "MANIFEST.sha256").read_text().splitlines():
            digest, name = line.split("  ", 1)
            manifest[name] = digest
        files = {str(p.relative_to(self.bundle)) for p in self.bundle.rglob("*")
                 if p.is_file() and not p.is_symlink() and p.name != "MANIFEST.sha256"}
        self.assertEqual(set(manifest), files)
        for name, digest in manifest.items():
            with self.subTest(name):
                self.assertEqual(hashlib.sha256((self.bundle / name).read_bytes()).hexdigest(), digest)

    def test_staging_for_another_kernel_is_refused(self):
        (self.staging / "kernel-release").write_text("6.1.0-other\n")
        result = self.make_bundle()
        self.assertIn(f"the driver was built for kernel 6.1.0-other, not {KVER}", result.stderr)
        self.assertFalse(self.bundle.exists())


class InstallStep(WithStaging):
    def setUp(self):
        super().setUp()
        self.assertEqual(self.make_bundle().returncode, 0)
        self.root = self.tmp / "root"
        self.root.mkdir()

    def install(self, *extra):
        return build("install", "--kernel", self.kernel, "--bundle", self.bundle, "--root", self.root, *extra)

    def tree(self):
        return {str(p.relative_to(self.root)): (p.is_symlink() and os.readlink(p)) or
                (p.is_file() and p.read_bytes()) for p in sorted(self.root.rglob("*"))}

    def test_installs_where_kata_config_and_webhook_look(self):
        result = self.install()
        self.assertEqual(result.returncode, 0, result.stderr)
        prefix = self.root / "opt/kata-vgpu"
        # kata-config/configuration-kata-vgpu.toml: kernel = "/opt/kata-vgpu/guest/vmlinuz"
        self.assertEqual((prefix / "guest/vmlinuz").read_bytes(), (self.kernel / "vmlinuz").read_bytes())
        # the webhook's hostPath volume: /opt/kata-vgpu/driver
        self.assertEqual(os.readlink(prefix / "driver"), f"driver-550.90.07-{KVER}")
        self.assertTrue((prefix / "driver/bin/nvidia-smi").is_file())
        check = subprocess.run(["sha256sum", "--strict", "--quiet", "-c", "MANIFEST.sha256"],
                               cwd=prefix / "driver", capture_output=True, text=True, check=False)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)

    def test_second_install_changes_nothing(self):
        self.assertEqual(self.install().returncode, 0)
        before = self.tree()
        result = self.install()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("nothing to do", result.stderr)
        self.assertEqual(self.tree(), before)

    def test_dry_run_changes_nothing(self):
        result = self.install("--dry-run")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("would write", result.stderr)
        self.assertEqual(self.tree(), {})

    def test_tampered_bundle_is_refused(self):
        with open(self.bundle / "bin/nvidia-smi", "a") as f:
            f.write("# changed\n")
        result = self.install()
        self.assertEqual(result.returncode, 1)
        self.assertIn("does not match its MANIFEST.sha256", result.stderr)
        self.assertEqual(self.tree(), {})

    def test_unlisted_file_in_bundle_is_refused(self):
        (self.bundle / "bin/extra").write_text("x")
        result = self.install()
        self.assertIn("has files its manifest does not list: bin/extra", result.stderr)
        self.assertEqual(self.tree(), {})

    def test_bundle_for_another_kernel_is_refused(self):
        (self.kernel / "kernel-release").write_text("6.1.0-other\n")
        result = self.install()
        self.assertIn(f"the bundle is for kernel {KVER}, the kernel is 6.1.0-other", result.stderr)
        self.assertEqual(self.tree(), {})


if __name__ == "__main__":
    unittest.main()
