#!/usr/bin/env python3
"""Behaviour of kata-config/install.sh against a node root in a temporary directory:
idempotent, dry-run changes nothing, edits containerd's config.toml minimally (a marked block
for config version 2, an `imports` entry plus drop-in for version 3), and refuses input it
cannot handle safely without changing anything. ContainerdLoadsIt runs Debian's containerd."""

import os
import pathlib
import shutil
import subprocess
import tempfile
import tomllib
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
INSTALL = REPO / "kata-config" / "install.sh"
KATA_DIR = "opt/kata-vgpu/share/defaults/kata-containers"
DROP_IN = "etc/containerd/conf.d/kata-vgpu.toml"
WRAPPER = "opt/kata-vgpu/bin/qemu-system-x86_64"
MAIN = "etc/containerd/config.toml"


def snapshot(root):
    """Every file under root with its bytes and mtime, to prove nothing changed."""
    state = {}
    for path in sorted(pathlib.Path(root).rglob("*")):
        if path.is_file():
            state[str(path.relative_to(root))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return state


class Node(unittest.TestCase):
    def setUp(self):
        self.root = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.root)

    def install(self, *args):
        return subprocess.run(["bash", str(INSTALL), "--root", str(self.root), *args],
                              capture_output=True, text=True, check=False)

    def main_config(self, text):
        path = self.root / MAIN
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


class Install(Node):
    def test_dry_run_lists_changes_and_writes_nothing(self):
        result = self.install("--dry-run", "--containerd-config-version", "3")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.count("would write"), 5, result.stdout)
        self.assertEqual(snapshot(self.root), {})

    def test_fresh_node_gets_every_file(self):
        result = self.install("--containerd-config-version", "3")
        self.assertEqual(result.returncode, 0, result.stderr)
        for name in ("configuration-kata-vgpu.toml", "configuration-kata-vgpu-vf.toml"):
            self.assertEqual((self.root / KATA_DIR / name).read_bytes(),
                             (REPO / "kata-config" / name).read_bytes())
        self.assertEqual((self.root / DROP_IN).read_bytes(),
                         (REPO / "kata-config/containerd/kata-vgpu.config-v3.toml").read_bytes())
        main = tomllib.loads((self.root / MAIN).read_text())
        self.assertEqual(main, {"version": 3, "imports": ["/" + DROP_IN]})
        self.assertEqual(oct((self.root / DROP_IN).stat().st_mode & 0o777), "0o644")
        self.assertEqual((self.root / WRAPPER).read_bytes(),
                         (REPO / "kata-config/qemu-vgpu.sh").read_bytes())
        self.assertEqual(oct((self.root / WRAPPER).stat().st_mode & 0o777), "0o755")
        self.assertIn("/opt/kata/bin/qemu-system-x86_64 not found", result.stderr,
                      "the wrapper runs Kata's QEMU: its absence is worth a warning")

    def test_second_run_changes_nothing(self):
        for version, files in (("2", 4), ("3", 5)):
            with self.subTest(version=version):
                shutil.rmtree(self.root)
                self.root.mkdir()
                self.assertEqual(self.install("--containerd-config-version", version).returncode, 0)
                before = snapshot(self.root)
                result = self.install()
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout.count("unchanged"), files, result.stdout)
                self.assertNotIn("wrote", result.stdout)
                self.assertEqual(snapshot(self.root), before)

    def test_imports_is_inserted_before_the_first_table(self):
        original = 'version = 3\nroot = "/var/lib/containerd"\n\n[plugins."io.containerd.cri.v1.images"]\n  snapshotter = "p"\n'
        self.main_config(original)
        self.assertEqual(self.install().returncode, 0)
        main = tomllib.loads((self.root / MAIN).read_text())
        self.assertEqual(main["imports"], ["/" + DROP_IN])
        self.assertEqual(main["plugins"]["io.containerd.cri.v1.images"]["snapshotter"], "p")
        self.assertEqual((self.root / (MAIN + ".kata-vgpu.orig")).read_text(), original)


class KataDeploy(Node):
    """Nodes whose Kata comes from kata-deploy: it registers the handlers and owns /opt/kata
    (its cleanup empties that), so only the wrapper under /opt/kata-vgpu is ours to install."""

    def test_only_the_wrapper_is_installed_and_containerd_is_left_alone(self):
        self.main_config("version = 3\n")
        before = (self.root / MAIN).read_bytes()
        result = self.install("--kata-deploy")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(oct((self.root / WRAPPER).stat().st_mode & 0o777), "0o755")
        self.assertEqual((self.root / MAIN).read_bytes(), before)
        self.assertFalse((self.root / DROP_IN).exists())
        self.assertFalse((self.root / KATA_DIR).exists())
        self.assertNotIn("restart", result.stdout)
        again = self.install("--kata-deploy")
        self.assertEqual(again.stdout.count("unchanged"), 1, again.stdout)

    def test_a_wrapper_with_a_loosened_mode_is_put_back(self):
        self.assertEqual(self.install("--kata-deploy").returncode, 0)
        (self.root / WRAPPER).chmod(0o777)
        result = self.install("--kata-deploy")
        self.assertIn("wrote", result.stdout)
        self.assertEqual(oct((self.root / WRAPPER).stat().st_mode & 0o777), "0o755")

    def test_containerd_flags_contradict_it(self):
        for flags in (["--containerd-config-version", "3"], ["--restart-containerd"]):
            with self.subTest(flags=flags):
                result = self.install("--kata-deploy", *flags)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn("leaves containerd to kata-deploy", result.stderr)
                self.assertEqual(snapshot(self.root), {})

    def test_nothing_of_ours_is_under_the_directory_kata_deploy_empties(self):
        self.assertEqual(self.install("--containerd-config-version", "3").returncode, 0)
        ours = [p for p in (self.root / "opt").rglob("*") if p.is_file()]
        self.assertTrue(ours)
        for path in ours:
            self.assertTrue(str(path.relative_to(self.root)).startswith("opt/kata-vgpu/"), path)


class ConfigVersion2(Node):
    """containerd 1.x lets an imported file replace a whole plugin section, so for version 2 the
    runtime tables go into config.toml itself, in a block a rerun replaces."""

    ORIGINAL = 'version = 2\nroot = "/var/lib/containerd"\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n'

    def test_block_is_appended_and_the_rest_kept_byte_for_byte(self):
        self.main_config(self.ORIGINAL)
        result = self.install()
        self.assertEqual(result.returncode, 0, result.stderr)
        text = (self.root / MAIN).read_text()
        self.assertTrue(text.startswith(self.ORIGINAL), text)
        self.assertFalse((self.root / DROP_IN).exists())
        cri = tomllib.loads(text)["plugins"]["io.containerd.grpc.v1.cri"]
        self.assertEqual(cri["sandbox_image"], "p")
        self.assertEqual(set(cri["containerd"]["runtimes"]), {"kata-vgpu", "kata-vgpu-vf"})

    def test_a_hand_edited_block_is_put_back(self):
        self.main_config(self.ORIGINAL)
        self.assertEqual(self.install().returncode, 0)
        wanted = (self.root / MAIN).read_text()
        (self.root / MAIN).write_text(wanted.replace("privileged_without_host_devices = true",
                                                     "privileged_without_host_devices = false"))
        result = self.install()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual((self.root / MAIN).read_text(), wanted)

    def test_a_handler_defined_elsewhere_is_refused(self):
        self.main_config(self.ORIGINAL + '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-vgpu]\n'
                         '  runtime_type = "io.containerd.kata.v2"\n')
        before = snapshot(self.root)
        result = self.install()
        self.assertEqual(result.returncode, 1)
        self.assertIn("already defines a kata-vgpu runtime outside the kata-vgpu block", result.stderr)
        self.assertEqual(snapshot(self.root), before)

    def test_existing_imports_are_kept_and_extended(self):
        self.main_config('version = 3\nimports = ["/etc/containerd/other.toml"]\n')
        self.assertEqual(self.install().returncode, 0)
        main = tomllib.loads((self.root / MAIN).read_text())
        self.assertEqual(main["imports"], ["/etc/containerd/other.toml", "/" + DROP_IN])

    def test_empty_imports_is_filled(self):
        self.main_config("version = 3\nimports = []\n")
        self.assertEqual(self.install().returncode, 0)
        self.assertEqual(tomllib.loads((self.root / MAIN).read_text())["imports"], ["/" + DROP_IN])

    def test_a_glob_that_covers_the_drop_in_leaves_config_untouched(self):
        text = 'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
        self.main_config(text)
        result = self.install()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual((self.root / MAIN).read_text(), text)
        self.assertFalse((self.root / (MAIN + ".kata-vgpu.orig")).exists())


class Refuses(Node):
    CASES = [
        ("a version 1 config cannot import drop-ins",
         '[plugins.cri]\n  sandbox_image = "p"\n', [], "has no 'version = 2|3' line"),
        ("a multi-line imports is left to the operator",
         'version = 3\nimports = [\n  "/a.toml",\n]\n', [], "cannot edit its multi-line 'imports'"),
        ("a version flag contradicting the file",
         "version = 2\n", ["--containerd-config-version", "3"], "but "),
        ("an unsupported version", "version = 4\n", [], "version 4 is not supported"),
        ("an unknown argument", "version = 2\n", ["--force"], "unknown argument: --force"),
    ]

    def test_each_refusal_changes_nothing(self):
        for description, text, args, message in self.CASES:
            with self.subTest(description):
                self.main_config(text)
                before = snapshot(self.root)
                result = self.install(*args)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(message, result.stderr)
                self.assertEqual(snapshot(self.root), before)

    def test_missing_config_without_version_flag(self):
        result = self.install()
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("say --containerd-config-version 2 or 3", result.stderr)
        self.assertEqual(snapshot(self.root), {})

    def test_root_must_exist(self):
        result = subprocess.run(["bash", str(INSTALL), "--root", os.path.join(self.root, "nope")],
                                capture_output=True, text=True, check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("not a directory", result.stderr)


class ContainerdLoadsIt(Node):
    """Debian 12's containerd (1.6, config version 2) reads what install.sh wrote, and the node's
    own CRI settings survive. Version 3 needs containerd 2.x, which Debian 12 does not package;
    the checker covers its keys."""

    def test_containerd_sees_both_handlers_and_keeps_node_settings(self):
        self.main_config('version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n')
        self.assertEqual(self.install().returncode, 0)
        main = self.root / MAIN
        result = subprocess.run(["containerd", "--config", str(main), "config", "dump"],
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)
        cri = tomllib.loads(result.stdout)["plugins"]["io.containerd.grpc.v1.cri"]
        self.assertEqual(cri["sandbox_image"], "p")
        runtimes = cri["containerd"]["runtimes"]
        for handler in ("kata-vgpu", "kata-vgpu-vf"):
            with self.subTest(handler):
                runtime = runtimes[handler]
                self.assertEqual(runtime["runtime_type"], f"io.containerd.{handler}.v2")
                self.assertTrue(runtime["privileged_without_host_devices"])
                # No pod annotation passes to Kata (sandbox_cgroup_only and friends).
                self.assertEqual(runtime.get("pod_annotations", []), [])
                self.assertEqual(runtime["options"]["ConfigPath"],
                                 f"/{KATA_DIR}/configuration-{handler}.toml")

    def test_why_not_a_drop_in_for_version_2(self):
        # containerd 1.x: the imported file's CRI section replaces the main file's whole section.
        self.main_config('version = 2\nimports = ["DROP"]\n\n[plugins."io.containerd.grpc.v1.cri"]\n'
                         '  sandbox_image = "p"\n')
        drop_in = self.root / DROP_IN
        drop_in.parent.mkdir(parents=True)
        shutil.copy(REPO / "kata-config/containerd/kata-vgpu.config-v2.toml", drop_in)
        main = self.root / MAIN
        main.write_text(main.read_text().replace("DROP", str(drop_in)))
        result = subprocess.run(["containerd", "--config", str(main), "config", "dump"],
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)
        cri = tomllib.loads(result.stdout)["plugins"]["io.containerd.grpc.v1.cri"]
        self.assertIn("kata-vgpu", cri["containerd"]["runtimes"])
        self.assertNotEqual(cri["sandbox_image"], "p")


if __name__ == "__main__":
    unittest.main()
