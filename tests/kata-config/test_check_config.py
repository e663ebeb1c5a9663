#!/usr/bin/env python3
"""Behaviour of kata-config/check-config.py: it must reject what the Kata runtime or containerd
would silently ignore or refuse, and the API server would reject. Each case starts from the
shipped file, changes one thing, and names the error it expects."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
CHECK = REPO / "kata-config" / "check-config.py"
DATA = REPO / "tests" / "kata-config" / "data"
MDEV = (REPO / "kata-config" / "configuration-kata-vgpu.toml").read_text()
VF = (REPO / "kata-config" / "configuration-kata-vgpu-vf.toml").read_text()
CONTAINERD_V2 = (REPO / "kata-config" / "containerd" / "kata-vgpu.config-v2.toml").read_text()
CONTAINERD_V3 = (REPO / "kata-config" / "containerd" / "kata-vgpu.config-v3.toml").read_text()
RUNTIMECLASS = (REPO / "kata-config" / "runtimeclass.yaml").read_text()


def run(*args):
    return subprocess.run([sys.executable, str(CHECK), *map(str, args)],
                          capture_output=True, text=True, check=False)


def replace_once(text, old, new):
    assert text.count(old) == 1, f"fixture drifted: {old!r} is not in the shipped file once"
    return text.replace(old, new)


class Checked(unittest.TestCase):
    def write(self, text, suffix):
        f = tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False)
        f.write(text)
        f.close()
        self.addCleanup(pathlib.Path(f.name).unlink)
        return f.name

    def kata(self, text, attach=None):
        args = ["kata", self.write(text, ".toml"), "--keys", DATA / "kata-upstream-keys.txt",
                "--removed", DATA / "kata-removed-keys.txt"]
        return run(*args, *(["--attach", attach] if attach else []))

    def expect(self, result, code, message):
        self.assertEqual(result.returncode, code, result.stderr)
        self.assertIn(message, result.stderr)


class KataConfigRejects(Checked):
    CASES = [
        ("removed key hotplug_vfio_on_root_bus is caught and its replacement named",
         "hot_plug_vfio = \"root-port\"\n",
         "hot_plug_vfio = \"root-port\"\nhotplug_vfio_on_root_bus = true\n",
         "hotplug_vfio_on_root_bus: removed from Kata (removed 2023-07-20; use hot_plug_vfio"),
        ("removed key use_vsock is caught",
         "dial_timeout = 90\n", "dial_timeout = 90\nuse_vsock = true\n",
         "agent.kata.use_vsock: removed from Kata"),
        ("misspelt key is caught rather than silently ignored",
         "pcie_root_port = 4\n", "pcie_root_ports = 4\n",
         "hypervisor.qemu.pcie_root_ports: not a key the Kata runtime reads"),
        ("a key in the wrong table is caught",
         "vfio_mode = \"guest-kernel\"\n", "vfio_mode = \"guest-kernel\"\ndial_timeout = 5\n",
         "runtime.dial_timeout: not a key the Kata runtime reads"),
        ("a string where Kata decodes an integer is caught",
         "pcie_root_port = 4\n", "pcie_root_port = \"4\"\n",
         "pcie_root_port: is string, Kata decodes it as integer"),
        ("an unknown section is caught",
         "[runtime]\n", "[runtimes]\n", "runtimes: not a section the Kata runtime reads"),
        ("hot-plug and cold-plug together make Kata refuse to start",
         "cold_plug_vfio = \"no-port\"\n", "cold_plug_vfio = \"root-port\"\n",
         "hot_plug_vfio and cold_plug_vfio cannot both be set"),
        ("hot-plug onto root ports needs at least one root port",
         "pcie_root_port = 4\n", "pcie_root_port = 0\n",
         "pcie_root_port: must be 1..16 when VFIO devices go on a root-port, is 0"),
        ("more root ports than Kata creates is caught",
         "pcie_root_port = 4\n", "pcie_root_port = 17\n", "must be 1..16"),
        ("an unknown port type is caught",
         "hot_plug_vfio = \"root-port\"\n", "hot_plug_vfio = \"root_port\"\n",
         "hot_plug_vfio: 'root_port' is not one of"),
        ("a machine type without PCIe root ports is caught",
         "machine_type = \"q35\"\n", "machine_type = \"pc\"\n", "machine_type: must be \"q35\""),
        ("a second hypervisor table is caught",
         "[agent.kata]\n", "[hypervisor.clh]\npath = \"/x\"\n\n[agent.kata]\n",
         "want exactly [hypervisor.qemu]"),
    ]

    def test_each_bad_config_is_rejected(self):
        for description, old, new, message in self.CASES:
            with self.subTest(description):
                self.expect(self.kata(replace_once(MDEV, old, new)), 1, message)

    def test_invalid_toml_is_a_usage_error(self):
        self.expect(self.kata(MDEV + "\n[runtime\n"), 2, "not valid TOML")

    def test_mdev_attach_refuses_cold_plug(self):
        # Cold-plug builds host=<BDF>, which for an mdev names the parent GPU.
        self.expect(self.kata(VF, attach="mdev"), 1,
                    "mdevs need hot_plug_vfio = \"root-port\"")

    def test_vf_attach_needs_pod_resources_socket(self):
        text = replace_once(VF, 'pod_resource_api_sock = "/var/lib/kubelet/pod-resources/kubelet.sock"',
                            'pod_resource_api_sock = ""')
        self.expect(self.kata(text, attach="vf"), 1, "runtime.pod_resource_api_sock")


class ShippedKataConfigs(Checked):
    def test_mdev_config_passes_with_hot_plug(self):
        result = self.kata(MDEV, attach="mdev")
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_vf_config_passes_with_cold_plug(self):
        result = self.kata(VF, attach="vf")
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_vf_variant_differs_only_in_the_attach_path(self):
        import tomllib
        mdev, vf = tomllib.loads(MDEV), tomllib.loads(VF)
        differing = set()
        for section in set(mdev) | set(vf):
            a, b = mdev.get(section, {}), vf.get(section, {})
            for name in set(a) | set(b):
                if isinstance(a.get(name), dict) or isinstance(b.get(name), dict):
                    for key in set(a.get(name, {})) | set(b.get(name, {})):
                        if a.get(name, {}).get(key) != b.get(name, {}).get(key):
                            differing.add(f"{section}.{name}.{key}")
                elif a.get(name) != b.get(name):
                    differing.add(f"{section}.{name}")
        # The mdev class runs QEMU through qemu-vgpu.sh, which sizes the hot-plug ports' windows
        # (docs/kata-config.md, "BAR space"); a cold-plugged VF needs no such room.
        self.assertEqual(differing, {
            "hypervisor.qemu.hot_plug_vfio", "hypervisor.qemu.cold_plug_vfio",
            "runtime.pod_resource_api_sock", "hypervisor.qemu.path",
            "hypervisor.qemu.valid_hypervisor_paths"})


class ContainerdSnippet(Checked):
    def containerd(self, text):
        return run("containerd", self.write(text, ".toml"), "--keys",
                   DATA / "containerd-runtime-keys.txt")

    def test_shipped_snippets_pass(self):
        for name, text in (("v2", CONTAINERD_V2), ("v3", CONTAINERD_V3)):
            with self.subTest(name):
                result = self.containerd(text)
                self.assertEqual(result.returncode, 0, result.stderr)

    CASES = [
        ("host devices leak into the VM without privileged_without_host_devices",
         "the VM.\n  privileged_without_host_devices = true",
         "the VM.\n  privileged_without_host_devices = false",
         "runtimes.kata-vgpu.privileged_without_host_devices: must be true"),
        ("a v2 plugin id in a v3 file is caught",
         "version = 3", "version = 2", "plugins.io.containerd.cri.v1.runtime: belongs to another"),
        ("a key containerd does not read is caught",
         "runtime_type = \"io.containerd.kata-vgpu.v2\"",
         "runtime_type = \"io.containerd.kata-vgpu.v2\"\n  runtime_engine = \"\"",
         "runtimes.kata-vgpu.runtime_engine: not a key containerd reads"),
        ("a handler passing Kata's annotations lets pods leave their cgroup: caught",
         "runtime_type = \"io.containerd.kata-vgpu-vf.v2\"\n  runtime_path = \"/opt/kata/bin/containerd-shim-kata-v2\"\n"
         "  privileged_without_host_devices = true\n  pod_annotations = []",
         "runtime_type = \"io.containerd.kata-vgpu-vf.v2\"\n  runtime_path = \"/opt/kata/bin/containerd-shim-kata-v2\"\n"
         "  privileged_without_host_devices = true\n  pod_annotations = [\"io.katacontainers.*\"]",
         "runtimes.kata-vgpu-vf.pod_annotations: 'io.katacontainers.*' lets pods set "
         "io.katacontainers.config.runtime.sandbox_cgroup_only"),
        ("a catch-all annotation glob is caught too",
         "runtime_type = \"io.containerd.kata-vgpu-vf.v2\"\n  runtime_path = \"/opt/kata/bin/containerd-shim-kata-v2\"\n"
         "  privileged_without_host_devices = true\n  pod_annotations = []",
         "runtime_type = \"io.containerd.kata-vgpu-vf.v2\"\n  runtime_path = \"/opt/kata/bin/containerd-shim-kata-v2\"\n"
         "  privileged_without_host_devices = true\n  pod_annotations = [\"*\"]",
         "runtimes.kata-vgpu-vf.pod_annotations: '*' lets pods set"),
    ]

    def test_each_bad_snippet_is_rejected(self):
        for description, old, new, message in self.CASES:
            with self.subTest(description):
                self.expect(self.containerd(replace_once(CONTAINERD_V3, old, new)), 1, message)


class RuntimeClassSchema(Checked):
    def runtimeclass(self, text):
        return run("runtimeclass", self.write(text, ".yaml"), "--schema",
                   DATA / "runtimeclass-v1.schema.json")

    def test_shipped_runtimeclasses_validate(self):
        result = self.runtimeclass(RUNTIMECLASS)
        self.assertEqual(result.returncode, 0, result.stderr)

    CASES = [
        ("handler is required", "handler: kata-vgpu\n", "", "'handler' is a required property"),
        ("handler must be a DNS label", "handler: kata-vgpu\n", "handler: Kata_vGPU\n",
         "handler: 'Kata_vGPU' does not match"),
        ("a misspelt field fails as under strict validation", "scheduling:\n  nodeSelector:\n"
         "    kata-vgpu.io/vgpu-mode: mdev\n", "scheduling:\n  nodeSelectors:\n"
         "    kata-vgpu.io/vgpu-mode: mdev\n", "Additional properties are not allowed ('nodeSelectors'"),
        ("overhead quantities must parse", "memory: 4352Mi\n    cpu: 500m\nscheduling:\n"
         "  nodeSelector:\n    kata-vgpu.io/vgpu-mode: mdev\n", "memory: 4352MB\n    cpu: 500m\n"
         "scheduling:\n  nodeSelector:\n    kata-vgpu.io/vgpu-mode: mdev\n",
         "overhead.podFixed.memory"),
        ("the group version must be node.k8s.io/v1", "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\n"
         "metadata:\n  name: kata-vgpu\n", "apiVersion: node.k8s.io/v1beta1\nkind: RuntimeClass\n"
         "metadata:\n  name: kata-vgpu\n", "apiVersion: 'node.k8s.io/v1' was expected"),
    ]

    def test_each_bad_runtimeclass_is_rejected(self):
        for description, old, new, message in self.CASES:
            with self.subTest(description):
                self.expect(self.runtimeclass(replace_once(RUNTIMECLASS, old, new)), 1, message)


class CrossFileConsistency(unittest.TestCase):
    def copy_dir(self):
        import shutil
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        shutil.copytree(REPO / "kata-config", tmp, dirs_exist_ok=True)
        return pathlib.Path(tmp)

    def test_shipped_files_agree(self):
        result = run("consistency", REPO / "kata-config")
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_overhead_below_pinned_guest_memory_is_caught(self):
        d = self.copy_dir()
        rc = d / "runtimeclass.yaml"
        rc.write_text(rc.read_text().replace("memory: 4352Mi", "memory: 160Mi", 1))
        result = run("consistency", d)
        self.assertEqual(result.returncode, 1)
        self.assertIn("RuntimeClass kata-vgpu: overhead memory must cover", result.stderr)

    def test_handler_without_containerd_runtime_is_caught(self):
        d = self.copy_dir()
        rc = d / "runtimeclass.yaml"
        rc.write_text(rc.read_text().replace("handler: kata-vgpu-vf", "handler: kata-gpu", 1))
        result = run("consistency", d)
        self.assertEqual(result.returncode, 1)
        self.assertIn("no runtime for RuntimeClass handler 'kata-gpu'", result.stderr)


class RuntimeVersion(Checked):
    """`check-config.py runtime`: each class against the node's Kata release, at the edges of
    each minimum (kata_qemu.MINIMUM, kubelet_root_dir), from --version or the installed binary."""

    def runtime(self, *args, path=None, configs=(MDEV, VF)):
        files = [self.write(text, ".toml") for text in configs]
        # Neither PATH nor Kata's own directory of this machine may answer for the fake.
        env = dict(os.environ, PATH=path if path is not None else "/nonexistent",
                   KVGPU_KATA_BIN_DIR="/nonexistent")
        return subprocess.run([sys.executable, str(CHECK), "runtime", *args, *files],
                              capture_output=True, text=True, check=False, env=env)

    def fake_bin(self, name, output, code=0):
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        script = pathlib.Path(directory, name)
        # Shell builtins only: PATH holds nothing but this directory.
        script.write_text("#!/bin/sh\nwhile IFS= read -r line; do echo \"$line\"; done <<'EOF'\n"
                          f"{output}\nEOF\nexit {code}\n")
        script.chmod(0o755)
        return directory

    def test_each_minimum_is_served_and_the_release_before_it_refused(self):
        for version, configs, code, message in [
                ("3.2.0", [MDEV], 0, "serves it (needs 3.2 or later)"),
                ("3.1.3", [MDEV], 1, "needs Kata 3.2 or later"),
                ("3.24.0", [VF], 0, "serves it (needs 3.24 or later)"),
                ("3.23.9", [VF], 1, "cold plug of the devices kubelet assigned"),
                ("2.5.2", [MDEV, VF], 1, "needs Kata 3.24 or later")]:
            with self.subTest(version=version):
                result = self.runtime("--version", version, configs=configs)
                self.assertEqual(result.returncode, code, result.stdout + result.stderr)
                self.assertIn(message, result.stdout + result.stderr)

    def test_a_kubelet_root_elsewhere_needs_3_28(self):
        moved = replace_once(VF, 'kubelet_root_dir = "/var/lib/kubelet"',
                             'kubelet_root_dir = "/data/kubelet"')
        refused = self.runtime("--version", "3.27.0", configs=[moved])
        self.expect(refused, 1, "kubelet_root_dir = '/data/kubelet' (commit 0a73638744) needs Kata 3.28")
        self.assertEqual(self.runtime("--version", "3.28.0", configs=[moved]).returncode, 0)
        self.assertEqual(self.runtime("--version", "3.24.0", configs=[VF]).returncode, 0,
                         "the default kubelet root is what older releases use anyway")

    def test_a_release_newer_than_the_lab_proves_is_served_with_a_note(self):
        result = self.runtime("--version", "4.1.0")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("newest release the VM lab's attach test proves", result.stdout)

    def test_the_installed_version_comes_from_kata_runtime_or_the_shim(self):
        runtime = self.fake_bin("kata-runtime", "kata-runtime  : 3.27.0\n   commit   : 0123abc\n"
                                                "   OCI specs: 1.1.0")
        result = self.runtime(path=runtime)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("Kata 3.27.0 serves it", result.stdout)
        shim = self.fake_bin("containerd-shim-kata-v2",
                             'Kata Containers containerd shim (Golang): id: "io.containerd.kata.v2", '
                             "version: 3.23.0, commit: 0123abc")
        self.expect(self.runtime(path=shim), 1, "Kata 3.23.0 cannot serve it")

    def test_no_usable_version_is_a_usage_error_naming_the_way_out(self):
        garbled = self.fake_bin("kata-runtime", "something went wrong", code=1)
        for description, args, path, message in [
                ("nothing installed", [], "/nonexistent", "pass --version X.Y.Z"),
                ("unparsable output", [], garbled, "gave no Kata version"),
                ("a version that is not one", ["--version", "latest"], None, "is not a Kata release")]:
            with self.subTest(description):
                self.expect(self.runtime(*args, path=path), 2, message)


if __name__ == "__main__":
    unittest.main()
