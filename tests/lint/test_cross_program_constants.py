"""cross_program_constants.py bites: on a copy of the checkout's constants, deploy/ and docs/, a
second literal in production C++ and a manifest or doc that drifted are each reported, and what
the rule allows (tests' literals, comments, longer names that merely contain a value) is not."""
import pathlib
import shutil
import tempfile
import unittest

import cross_program_constants as lint

REPO = pathlib.Path(__file__).resolve().parents[2]


class CrossProgramConstantsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        (self.root / "common").mkdir()
        shutil.copy(REPO / lint.HOME, self.root / lint.HOME)
        shutil.copytree(REPO / "deploy", self.root / "deploy")
        shutil.copytree(REPO / "docs", self.root / "docs")

    def tearDown(self):
        self.tmp.cleanup()

    def plant(self, relative, text):
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def test_the_copy_alone_is_clean(self):
        self.assertEqual(lint.problems(self.root), [])

    def test_what_the_rule_allows_is_not_reported(self):
        self.plant("tests/x/a_test.cpp", 'const char* k = "tencent.com/vgpu-222";\n')
        self.plant("extender/a.h", '// "tencent.com/vgpu-222" as the wire has it\n'
                   'const char* k = "kvgpu.tencent.com/vgpu-state";\n'
                   '/* "/var/lib/kata-vgpu/licensing" */\n')
        self.assertEqual(lint.problems(self.root), [])

    def test_a_second_literal_is_reported_with_file_and_line(self):
        cases = [
            ('x\nstd::string p = "tencent.com/vgpu-";\n', "kVgpuResourcePrefix"),
            ('x\nauto r = "tencent.com/vgpu-222";\n', "kVgpuResourcePrefix"),
            ('x\nfs::path d = "/var/lib/kata-vgpu/licensing";\n', "kLicensingDir"),
            ('x\nauto p = root / "var/lib/kata-vgpu/licensing/gridd.conf";\n', "kLicensingDir"),
            ('x\nconstexpr auto y = R"(\nresourcePrefixes: ["tencent.com/vgpu-"]\n)";\n',
             "kVgpuResourcePrefix"),
            ('x\nstd::string driver = "vgpu.tencent.com";\n', "kDraDriverName"),
        ]
        for text, name in cases:
            with self.subTest(text=text):
                self.plant("webhook/a.cpp", text)
                found = lint.problems(self.root)
                self.assertEqual(len(found), 1, found)
                self.assertTrue(found[0].startswith("webhook/a.cpp:2: "), found[0])
                self.assertIn(name, found[0])

    def test_a_drifted_manifest_or_doc_is_reported(self):
        cases = [
            ("deploy/base/device-plugin/daemonset.yaml", "--licensing-dir=/var/lib/kata-vgpu/licensing",
             "--licensing-dir=/var/lib/elsewhere"),
            ("deploy/base/webhook/config.yaml", 'resourcePrefixes: ["tencent.com/vgpu-"]',
             'resourcePrefixes: ["example.com/vgpu-"]'),
            ("deploy/scheduler/kube-scheduler-config.yaml", "tencent.com/vgpu-222",
             "example.com/vgpu-222"),
            ("docs/vgpuctl.md", "| `/var/lib/kata-vgpu/licensing` |", "| `/var/lib/elsewhere` |"),
            ("deploy/components/dra/device-plugin-config.yaml", "driverName: vgpu.tencent.com",
             "driverName: gpu.example.com"),
            ("deploy/components/dra/device-classes.yaml", "name: vgpu-1414.vgpu.tencent.com",
             "name: vgpu-1414.gpu.example.com"),
            ("docs/webhook.md", "deviceClassDomain: vgpu.tencent.com", "deviceClassDomain: example.com"),
        ]
        for relative, before, after in cases:
            with self.subTest(file=relative):
                path = self.root / relative
                original = path.read_text()
                self.assertIn(before, original)
                path.write_text(original.replace(before, after, 1))
                found = lint.problems(self.root)
                path.write_text(original)
                self.assertEqual(len(found), 1, found)
                self.assertTrue(found[0].startswith(relative + ":"), found[0])

    def test_the_checkout_writes_each_value_once(self):
        self.assertEqual(lint.problems(REPO), [])


if __name__ == "__main__":
    unittest.main()
