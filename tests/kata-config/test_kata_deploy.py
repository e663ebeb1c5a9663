#!/usr/bin/env python3
"""deploy/kata-deploy/values-kata-vgpu.yaml, read the way kata-deploy's chart reads it
(tools/packaging/kata-deploy/helm-chart/kata-deploy/templates/_helpers.tpl: the handler is the
RuntimeClass text's `handler:` line; config.d/50-overrides.toml is `dropIn`), registers exactly
the handlers and configurations kata-config/ ships, and is current."""

import pathlib
import subprocess
import sys
import tomllib
import unittest

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
VALUES = REPO / "deploy" / "kata-deploy" / "values-kata-vgpu.yaml"
GENERATOR = REPO / "kata-config" / "kata_deploy_values.py"


def chart_handler(runtime_class_text):
    """What the chart's customConfigsConfigMap helper takes as the handler."""
    handler = ""
    for line in runtime_class_text.split("\n"):
        if line.strip().startswith("handler:"):
            handler = line.strip()[len("handler:"):].strip()
    return handler


class KataDeployValues(unittest.TestCase):
    def setUp(self):
        self.values = yaml.safe_load(VALUES.read_text())["customRuntimes"]

    def test_the_chart_registers_our_two_handlers_with_our_configurations(self):
        self.assertIs(self.values["enabled"], True, "the chart ignores runtimes unless enabled")
        shipped = [d for d in yaml.safe_load_all((REPO / "kata-config/runtimeclass.yaml").read_text()) if d]
        self.assertEqual(sorted(self.values["runtimes"]), sorted(rc["handler"] for rc in shipped))
        for name, runtime in self.values["runtimes"].items():
            with self.subTest(name):
                self.assertEqual(chart_handler(runtime["runtimeClass"]), name)
                self.assertEqual(yaml.safe_load(runtime["runtimeClass"]),
                                 next(rc for rc in shipped if rc["handler"] == name))
                self.assertEqual(tomllib.loads(runtime["dropIn"]),
                                 tomllib.loads((REPO / f"kata-config/configuration-{name}.toml").read_text()))
                self.assertEqual(runtime["baseConfig"], "qemu")
                self.assertIs(runtime["inheritBaseOverhead"], False,
                              "our RuntimeClass overhead already counts the VM")

    def test_the_drop_in_points_at_files_kata_deploy_does_not_own(self):
        # kata-deploy's cleanup empties /opt/kata: what our classes need from the node must not
        # live there (Kata's own image and QEMU, which it manages, excepted).
        for name, runtime in self.values["runtimes"].items():
            qemu = tomllib.loads(runtime["dropIn"])["hypervisor"]["qemu"]
            with self.subTest(name):
                self.assertTrue(qemu["kernel"].startswith("/opt/kata-vgpu/"))
                if name == "kata-vgpu":
                    self.assertEqual(qemu["path"], "/opt/kata-vgpu/bin/qemu-system-x86_64")

    def test_the_file_is_what_the_generator_makes_now(self):
        result = subprocess.run([sys.executable, str(GENERATOR), "--check", str(VALUES)],
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_the_check_fails_on_a_stale_file(self):
        stale = pathlib.Path(self.id().replace(".", "_") + ".yaml")
        stale = pathlib.Path("/tmp") / stale
        stale.write_text(VALUES.read_text().replace("pcie_root_port = 4", "pcie_root_port = 2"))
        self.addCleanup(stale.unlink)
        result = subprocess.run([sys.executable, str(GENERATOR), "--check", str(stale)],
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("--write", result.stderr)


if __name__ == "__main__":
    unittest.main()
