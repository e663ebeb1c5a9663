"""The kubelet API's messages for the Python tests and benchmarks, compiled by protoc on first use.

Upstream names every one of these files api.proto: each is compiled under a name of its own, so
that one process's descriptor pool holds them all. Only the messages are generated; the services
are called by their wire method names ("/v1beta1.DevicePlugin/Allocate"), which is how kubelet
routes them. protoc's output goes to a temporary directory that is removed once imported.
"""

import functools
import importlib.util
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Module name -> upstream file under proto/kubelet.
SOURCES = {
    "deviceplugin_v1beta1": "deviceplugin/v1beta1/api.proto",
    "podresources_v1": "podresources/v1/api.proto",
    "dra_v1": "dra/v1/api.proto",
    "registration_v1": "pluginregistration/v1/api.proto",
}


@functools.lru_cache(maxsize=None)
def load(name):
    """The generated message module for SOURCES[name]; compiled once a process (a second copy of a
    file in the descriptor pool is refused)."""
    out = tempfile.mkdtemp(prefix="kvgpu-proto-")
    try:
        shutil.copyfile(os.path.join(HERE, SOURCES[name]), os.path.join(out, name + ".proto"))
        subprocess.run(["protoc", "-I" + out, "--python_out=" + out, name + ".proto"], check=True)
        spec = importlib.util.spec_from_file_location(name + "_pb2", os.path.join(out, name + "_pb2.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        shutil.rmtree(out, ignore_errors=True)
