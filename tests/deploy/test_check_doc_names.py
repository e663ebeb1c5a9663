"""check_doc_names.py bites: a doc naming a flag, path, metric, config key or test that does not
exist fails, naming each; the same doc with real names passes; an allowlist entry needs a reason."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(HERE, "check_doc_names.py")


def run(text, allow=None):
    with tempfile.TemporaryDirectory() as tmp:
        doc = os.path.join(tmp, "doc.md")
        with open(doc, "w") as f:
            f.write(text)
        args = [sys.executable, CHECK, "--repo", REPO, doc]
        if allow is not None:
            path = os.path.join(tmp, "allow.txt")
            with open(path, "w") as f:
                f.write(allow)
            args[2:2] = ["--allow", path]
        return subprocess.run(args, capture_output=True, text=True, check=False)


REAL = """\
Run `kvgpu-device-plugin --licensing-dir DIR`; see `deploy/base/policy/vgpu-pods.yaml`,
`kata-config/configuration-kata-vgpu{,-vf}.toml`, `kvgpu_node_ready`,
`kvgpu_webhook_request_duration_seconds_bucket` and `vm_attach_driver_test`.

| key | default | meaning |
|---|---|---|
| `lifecycle.gracePeriod` | `30s` | x |
"""

MADE_UP = """\
Run `kvgpu-device-plugin --licence-dir DIR`; see `deploy/base/policy/nothing.yaml`,
`kvgpu_node_readiness` and `vm_attach_everything_test`.

| key | default | meaning |
|---|---|---|
| `lifecycle.graceTime` | `30s` | x |
"""


class CheckDocNames(unittest.TestCase):
    def test_real_names_pass(self):
        result = run(REAL)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_each_made_up_name_is_reported(self):
        result = run(MADE_UP)
        self.assertEqual(result.returncode, 1, result.stdout)
        for expected in ("flag --licence-dir", "path deploy/base/policy/nothing.yaml",
                         "metric kvgpu_node_readiness", "test vm_attach_everything_test",
                         "config key lifecycle.graceTime"):
            self.assertIn(expected, result.stdout)
        self.assertIn("5 unknown names", result.stdout)

    def test_the_allowlist_excuses_a_name_with_its_reason_only(self):
        self.assertEqual(run("`--licence-dir`\n", allow="--licence-dir  a peer's flag\n").returncode, 0)
        result = run("`--licence-dir`\n", allow="--licence-dir\n")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("has no reason", result.stderr)


if __name__ == "__main__":
    unittest.main()
