"""include_rules.py bites: each wall, broken alone in a planted tree, is reported with its file
and line, and the includes each wall allows are not."""
import pathlib
import tempfile
import unittest

import include_rules


def plant(root, files):
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


ALLOWED = {
    "common/status.h": "#include <string>\n#include \"common/clock.h\"\n",
    "deviceplugin/model/a.cpp": "#include \"deviceplugin/model/b.h\"\n#include \"mdev/backend.h\"\n"
    "#include <nlohmann/json.hpp>\n",
    "deviceplugin/kubelet/server.cpp": "#include <grpcpp/grpcpp.h>\n"
    "#include \"deviceplugin/model/b.h\"\n#include \"deviceplugin/kubelet/c.h\"\n",
    "deviceplugin/daemon.cpp": "#include \"deviceplugin/kubelet/c.h\"\n"
    "#include \"deviceplugin/publish/d.h\"\n",
    "mdev/node_scan.cpp": "#include \"mdev/node_internal.h\"\n",
    "mdev/libvirt_backend.cpp": "#include \"mdev/backend_kit.h\"\n"
    "#include \"mdev/libvirt_internal.h\"\n",
    "kube/x.cpp": "",
}

# Each planted line alone, with the words its report must carry.
BROKEN = [
    ("deviceplugin/model/m.cpp", "#include <grpcpp/grpcpp.h>", "gRPC"),
    ("deviceplugin/model/m.cpp", '#include "kubelet/deviceplugin/v1beta1/api.pb.h"', "protos"),
    ("deviceplugin/model/m.cpp", '#include "kube/api_client.h"', "kube client"),
    ("deviceplugin/model/m.cpp", "#include <libvirt/libvirt.h>", "libvirt"),
    ("deviceplugin/model/m.cpp", "#include <prometheus/registry.h>", "metrics"),
    ("deviceplugin/model/m.h", '#include "mdev/node.h"', "mdev/backend.h only"),
    ("deviceplugin/model/m.h", '#include "mdev/make_backend.h"', "daemon's job"),
    ("deviceplugin/model/m.h", '#include "deviceplugin/config.h"', "daemon"),
    ("deviceplugin/model/m.h", '#include "deviceplugin/lifecycle/lifecycle.h"', "lifecycle wing"),
    ("deviceplugin/kubelet/k.cpp", '#include "deviceplugin/publish/metrics.h"', "publish wing"),
    ("deviceplugin/lifecycle/l.cpp", '#include "deviceplugin/kubelet/registrar.h"', "kubelet wing"),
    ("deviceplugin/publish/p.cpp", '#include "deviceplugin/daemon.h"', "daemon"),
    ("mdev/libvirt_backend.cpp", '#include "mdev/node_internal.h"', "sysfs backend's own"),
    ("mdev/vgpuctl/v.cpp", '#include "mdev/libvirt_internal.h"', "libvirt backend's own"),
    ("common/c.cpp", '#include "kube/x.h"', "ground floor"),
]


class IncludeRulesTest(unittest.TestCase):
    def test_what_each_wall_allows_is_not_reported(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            plant(root, ALLOWED)
            self.assertEqual(include_rules.violations(root), [])

    def test_each_broken_wall_alone_is_reported_with_its_file_line_and_reason(self):
        for relative, line, words in BROKEN:
            with self.subTest(file=relative, include=line), tempfile.TemporaryDirectory() as tmp:
                root = pathlib.Path(tmp)
                plant(root, ALLOWED)
                path = root / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                before = path.read_text() if path.exists() else ""
                path.write_text(before + "\n" + line + "\n")
                found = include_rules.violations(root)
                self.assertEqual(len(found), 1, found)
                number = len(before.splitlines()) + 2
                self.assertTrue(found[0].startswith(f"{relative}:{number}: "), found[0])
                self.assertIn(words, found[0])

    def test_the_checkout_keeps_every_wall(self):
        repo = pathlib.Path(__file__).resolve().parents[2]
        self.assertEqual(include_rules.violations(repo), [])


if __name__ == "__main__":
    unittest.main()
