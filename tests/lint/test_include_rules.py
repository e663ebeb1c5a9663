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
    "deviceplugin/dra/kubelet_dra_server.cpp": "#include <grpcpp/grpcpp.h>\n"
    "#include \"deviceplugin/dra/resource_slices.h\"\n#include \"deviceplugin/dra/device_name.h\"\n"
    "#include \"deviceplugin/model/b.h\"\n#include \"kube/api_client.h\"\n",
    "deviceplugin/dra/resource_slices.cpp": "#include \"deviceplugin/dra/device_name.h\"\n"
    "#include \"deviceplugin/model/b.h\"\n#include \"kube/api_client.h\"\n",
    "deviceplugin/dra/device_name.cpp": "#include \"deviceplugin/model/b.h\"\n#include \"mdev/backend.h\"\n",
    "sim/model.cpp": "#include \"sim/model_internal.h\"\n",
    "sim/fuse/sim_fs.cpp": "#include \"sim/model_internal.h\"\n",
    "doctor/doctor_kernel.cpp": "#include \"doctor/doctor_internal.h\"\n"
    "#include \"mdev/sysfs_backend.h\"\n#include \"common/base64.h\"\n#include <sys/stat.h>\n",
    "mdev/vgpuctl/vgpuctl.cpp": "#include \"doctor/doctor.h\"\n#include \"mdev/make_backend.h\"\n",
    "extender/a.cpp": "#include \"extender/b.h\"\n",
    "extender/b.cpp": "#include \"extender/c.h\"\n",
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
    ("deviceplugin/dra/claim_reader.cpp", '#include "deviceplugin/kubelet/registrar.h"', "kubelet wing"),
    ("deviceplugin/dra/dra_plugin.cpp", '#include "deviceplugin/daemon.h"', "daemon"),
    ("deviceplugin/dra/device_name.cpp", '#include "kube/api_client.h"', "kube client"),
    ("deviceplugin/dra/device_name.h", '#include "deviceplugin/dra/occupancy_decision.h"',
     "names library does not include the DRA slices"),
    ("deviceplugin/dra/resource_slices.cpp", "#include <grpcpp/grpcpp.h>", "not to the slices"),
    ("deviceplugin/dra/slice_publisher.h", '#include "kubelet/dra/v1/api.pb.h"', "not to the slices"),
    ("deviceplugin/dra/occupancy_decision.cpp", '#include "deviceplugin/dra/dra_plugin.h"',
     "slices library does not include the DRA plugin"),
    ("webhook/w.cpp", '#include "doctor/doctor_internal.h"', "private to doctor/"),
    ("mdev/vgpuctl/v.cpp", '#include "doctor/doctor_internal.h"', "private to doctor/"),
    ("doctor/d.cpp", '#include "kube/pod.h"', "through mdev/ and common/ only"),
    ("doctor/d.cpp", '#include "mdev/vgpuctl/format.h"', "below vgpuctl"),
    ("mdev/m.cpp", '#include "doctor/doctor.h"', "below the doctor"),
    ("tests/sim/t.cpp", '#include "sim/model_internal.h"', "private to sim/"),
]

# Units that include each other's headers, planted on top of ALLOWED (extender/a.cpp already
# includes extender/b.h): each way back, from the header or the source, is one report naming both.
MUTUAL = [
    ("extender/b.h", '#include "extender/a.h"'),
    ("extender/b.cpp", '#include "extender/a.h"'),
    ("extender/b.h", '#include "extender/a.hpp"'),
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

    def test_units_that_include_each_other_are_reported_once(self):
        for relative, line in MUTUAL:
            with self.subTest(file=relative, include=line), tempfile.TemporaryDirectory() as tmp:
                root = pathlib.Path(tmp)
                plant(root, ALLOWED)
                path = root / relative
                path.write_text((path.read_text() if path.exists() else "") + line + "\n")
                found = include_rules.violations(root)
                self.assertEqual(len(found), 1, found)
                self.assertIn("extender/a and extender/b include each other", found[0])

    def test_tests_may_include_each_other(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            plant(root, ALLOWED)
            plant(root, {"tests/x/a.h": '#include "tests/x/b.h"\n',
                         "tests/x/b.h": '#include "tests/x/a.h"\n'})
            self.assertEqual(include_rules.violations(root), [])

    def test_the_checkout_keeps_every_wall(self):
        repo = pathlib.Path(__file__).resolve().parents[2]
        self.assertEqual(include_rules.violations(repo), [])


if __name__ == "__main__":
    unittest.main()
