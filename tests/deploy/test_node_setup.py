"""deploy/node-setup/vgpu-modes.sh in --dry-run against a fake sysfs and a fake nvidia-smi: the
commands come in the order the driver needs (mixed-size: VFs, then -shm; MIG: -mig, VFs, then
GPU instances), nothing is touched on a GPU carrying a vGPU, a second run on set-up GPUs changes
nothing, and bad arguments are refused before anything runs."""

import os
import pathlib
import stat
import subprocess
import tempfile
import unittest

SCRIPT = pathlib.Path(os.environ.get("KVGPU_DEPLOY", pathlib.Path(__file__).parents[2] / "deploy")) / "node-setup" / "vgpu-modes.sh"
PF = "0000:41:00.0"


class NodeSetupTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        self.dev = self.root / "sys/bus/pci/devices" / PF
        self.dev.mkdir(parents=True)
        self.smi = self.root / "nvidia-smi"
        self.mig("Disabled")

    def tearDown(self):
        self.tmp.cleanup()

    def mig(self, state):
        self.smi.write_text("#!/bin/sh\necho %s\n" % state)
        self.smi.chmod(self.smi.stat().st_mode | stat.S_IEXEC)

    def enable_vfs(self, types=("0", "0")):
        for i, current in enumerate(types):
            vf = self.root / ("vf%d" % i)
            (vf / "nvidia").mkdir(parents=True)
            (vf / "nvidia/current_vgpu_type").write_text(current + "\n")
            (self.dev / ("virtfn%d" % i)).symlink_to(vf)

    def run_script(self, *args):
        return subprocess.run(
            ["sh", str(SCRIPT), "--sysfs-root", str(self.root), "--nvidia-smi", str(self.smi),
             "--sriov-manage", "/usr/lib/nvidia/sriov-manage", "--dry-run", "--pf", PF, *args],
            capture_output=True, text=True)

    def commands(self, result):
        self.assertEqual(result.returncode, 0, result.stderr)
        return [line[len("would run: "):] for line in result.stdout.splitlines()
                if line.startswith("would run: ")]

    def test_mixed_size_enables_vfs_then_sets_the_mode(self):
        self.assertEqual(self.commands(self.run_script("--mode", "mixed-size")), [
            "/usr/lib/nvidia/sriov-manage -e " + PF,
            f"{self.smi} vgpu -i {PF} -shm 1",
        ])

    def test_mixed_size_with_vfs_enabled_only_sets_the_mode(self):
        self.enable_vfs()
        self.assertEqual(self.commands(self.run_script("--mode", "mixed-size")),
                         [f"{self.smi} vgpu -i {PF} -shm 1"])

    def test_mig_turns_mig_on_before_the_vfs_and_makes_instances_last(self):
        self.assertEqual(self.commands(self.run_script("--mode", "mig", "--gi-profiles", "19,19,14")), [
            f"{self.smi} -i {PF} -mig 1",
            "/usr/lib/nvidia/sriov-manage -e " + PF,
            f"{self.smi} mig -i {PF} -cgi 19,19,14",
        ])

    def test_mig_off_with_vfs_enabled_disables_them_first(self):
        self.enable_vfs()
        self.assertEqual(self.commands(self.run_script("--mode", "mig", "--gi-profiles", "19"))[:2], [
            "/usr/lib/nvidia/sriov-manage -d " + PF,
            f"{self.smi} -i {PF} -mig 1",
        ])

    def test_a_second_run_on_a_set_up_mig_gpu_changes_nothing(self):
        self.enable_vfs()
        self.mig("Enabled")
        self.assertEqual(self.commands(self.run_script("--mode", "mig", "--gi-profiles", "19")), [])

    def test_a_gpu_carrying_a_vgpu_is_left_alone(self):
        self.enable_vfs(types=("0", "1414"))
        for args in (("--mode", "mixed-size"), ("--mode", "mig", "--gi-profiles", "19")):
            result = self.run_script(*args)
            self.assertEqual(self.commands(result), [], args)
            self.assertIn("carries a vGPU", result.stdout)

    def test_bad_arguments_are_refused(self):
        for args in (("--mode", "equal"), ("--mode", "mig"), ("--mode", "mig", "--gi-profiles", "19,x"),
                     ("--mode", "mixed-size", "--pf", "41:00.0")):
            result = self.run_script(*args)
            self.assertEqual(result.returncode, 2, args)
            self.assertNotIn("would run", result.stdout)


if __name__ == "__main__":
    unittest.main()
