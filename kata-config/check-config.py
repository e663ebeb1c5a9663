#!/usr/bin/env python3
"""Checks the files in kata-config/ before they reach a node.

  check-config.py kata FILE --keys KEYS --removed REMOVED [--attach mdev|vf]
  check-config.py containerd FILE --keys KEYS
  check-config.py runtimeclass FILE --schema SCHEMA
  check-config.py consistency DIR
  check-config.py runtime [--version X.Y.Z] [CONFIG...]

The Kata runtime only logs a warning for a key it does not know, so a misspelt or removed key
silently turns a setting off; here it is an error. `runtime` asks the node's Kata (or takes
--version) and refuses each class configuration that release cannot serve, naming the release
needed (docs/kata-config.md, "Versions"). Exit status 0 when clean, 1 with one line per
problem on stderr, 2 for bad usage or unreadable input.
"""

import argparse
import fnmatch
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import kata_qemu  # noqa: E402  (beside this file, here and where install.sh puts both)

# Values Kata accepts for hot_plug_vfio / cold_plug_vfio (src/runtime/pkg/device/config/config.go).
PCIE_PORTS = {"no-port", "bridge-port", "root-port", "switch-port"}
# Kata clamps pcie_root_port / pcie_switch_port to this (katautils/config.go maxPCIeRootPorts).
MAX_PCIE_PORTS = 16
CRI_PLUGIN_BY_VERSION = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


class Usage(Exception):
    pass


def load_toml(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise Usage(f"{path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise Usage(f"{path}: not valid TOML: {e}") from e


def read_lines(path):
    try:
        text = pathlib.Path(path).read_text()
    except OSError as e:
        raise Usage(f"{path}: {e.strerror}") from e
    return [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def toml_type(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        if all(isinstance(v, dict) for v in value) and value:
            return "array-of-table"
        return "array-of-string" if all(isinstance(v, str) for v in value) else "array"
    return "table"


def type_fits(actual, wanted):
    # Go's TOML decoder puts an integer into a float32 field, and an empty array into either kind.
    if actual == wanted:
        return True
    if wanted == "float" and actual == "integer":
        return True
    return actual == "array-of-string" and wanted == "array-of-table"


def check_kata(path, keys_file, removed_file, attach):
    config = load_toml(path)
    known = {}
    for fields in read_lines(keys_file):
        table, key, kind = fields
        known.setdefault(table, {})[key] = kind
    removed = {fields[0]: " ".join(fields[2:]) for fields in read_lines(removed_file)}
    problems = []

    def check_table(table_pattern, where, values):
        allowed = known.get(table_pattern, {})
        for key, value in values.items():
            if key in removed:
                problems.append(f"{where}.{key}: removed from Kata ({removed[key]})")
            elif key not in allowed:
                problems.append(f"{where}.{key}: not a key the Kata runtime reads")
            elif not type_fits(toml_type(value), allowed[key]):
                problems.append(
                    f"{where}.{key}: is {toml_type(value)}, Kata decodes it as {allowed[key]}")
            elif allowed[key] == "array-of-table":
                for i, item in enumerate(value):
                    check_table(f"{table_pattern}.{key}[]", f"{where}.{key}[{i}]", item)

    for section, body in config.items():
        if section in ("hypervisor", "agent") and isinstance(body, dict):
            for name, values in body.items():
                if not isinstance(values, dict):
                    problems.append(f"{section}.{name}: must be a table")
                    continue
                check_table(f"{section}.*", f"{section}.{name}", values)
        elif section in ("runtime", "factory") and isinstance(body, dict):
            check_table(section, section, body)
        else:
            problems.append(f"{section}: not a section the Kata runtime reads")

    hypervisors = config.get("hypervisor", {})
    if list(hypervisors) != ["qemu"]:
        problems.append(f"hypervisor: want exactly [hypervisor.qemu], found {sorted(hypervisors)}")
    qemu = hypervisors.get("qemu", {})
    problems += check_vfio_topology(qemu, config.get("runtime", {}), attach)
    return problems


def check_vfio_topology(qemu, runtime, attach):
    problems = []
    if qemu.get("machine_type") != "q35":
        problems.append("hypervisor.qemu.machine_type: must be \"q35\" (PCIe root ports)")
    hot = qemu.get("hot_plug_vfio", "no-port")
    cold = qemu.get("cold_plug_vfio", "no-port")
    for key, value in (("hot_plug_vfio", hot), ("cold_plug_vfio", cold)):
        if value not in PCIE_PORTS:
            problems.append(f"hypervisor.qemu.{key}: {value!r} is not one of {sorted(PCIE_PORTS)}")
    if hot != "no-port" and cold != "no-port":
        problems.append("hypervisor.qemu: hot_plug_vfio and cold_plug_vfio cannot both be set; "
                        "Kata refuses to start")
    for port, count_key in (("root-port", "pcie_root_port"), ("switch-port", "pcie_switch_port")):
        count = qemu.get(count_key, 0)
        if not isinstance(count, int):
            continue  # already reported as a type mismatch
        if port in (hot, cold) and not 1 <= count <= MAX_PCIE_PORTS:
            problems.append(f"hypervisor.qemu.{count_key}: must be 1..{MAX_PCIE_PORTS} when VFIO "
                            f"devices go on a {port}, is {count}")
    if attach == "mdev" and (hot != "root-port" or cold != "no-port"):
        problems.append("hypervisor.qemu: mdevs need hot_plug_vfio = \"root-port\" and "
                        "cold_plug_vfio = \"no-port\" (cold-plug would attach the parent GPU)")
    if attach == "vf":
        if cold == "no-port":
            problems.append("hypervisor.qemu.cold_plug_vfio: VFs are cold-plugged; set a port type")
        if not runtime.get("pod_resource_api_sock"):
            problems.append("runtime.pod_resource_api_sock: cold-plug in Kubernetes needs kubelet's "
                            "PodResources socket")
    return problems


def check_containerd(path, keys_file):
    config = load_toml(path)
    known = {fields[0] for fields in read_lines(keys_file)}
    problems = []
    version = config.get("version")
    plugin = CRI_PLUGIN_BY_VERSION.get(version)
    if plugin is None:
        return [f"version: want 2 (containerd 1.x) or 3 (containerd 2.x), found {version!r}"]
    plugins = config.get("plugins", {})
    for other in set(CRI_PLUGIN_BY_VERSION.values()) - {plugin}:
        if other in plugins:
            problems.append(f"plugins.{other}: belongs to another config version than {version}")
    runtimes = plugins.get(plugin, {}).get("containerd", {}).get("runtimes", {})
    if not runtimes:
        problems.append(f"plugins.\"{plugin}\".containerd.runtimes: no runtime defined")
    for name, runtime in runtimes.items():
        where = f"runtimes.{name}"
        for key in runtime:
            if key not in known:
                problems.append(f"{where}.{key}: not a key containerd reads")
        if not re.fullmatch(r"io\.containerd\.[a-z0-9-]+\.v2", str(runtime.get("runtime_type"))):
            problems.append(f"{where}.runtime_type: want io.containerd.<shim>.v2")
        if runtime.get("privileged_without_host_devices") is not True:
            problems.append(f"{where}.privileged_without_host_devices: must be true, else a "
                            "privileged container passes every host device into the VM")
        for glob in runtime.get("pod_annotations", []):
            passed = [key for key in KATA_POD_ANNOTATIONS if fnmatch.fnmatchcase(key, str(glob))]
            if passed:
                problems.append(f"{where}.pod_annotations: {glob!r} lets pods set {passed[0]} "
                                "(Kata applies runtime and agent annotations from any pod)")
        config_path = runtime.get("options", {}).get("ConfigPath", "")
        if not config_path.startswith("/"):
            problems.append(f"{where}.options.ConfigPath: want an absolute path")
    return problems


# Kata annotations a pod must not set. containerd passes a pod annotation to the runtime when one
# of pod_annotations matches its key (Go's filepath.Match; '*' spans any characters but '/', which
# these keys do not have). Kata checks only hypervisor annotations against enable_annotations.
KATA_POD_ANNOTATIONS = [
    "io.katacontainers.config.runtime.sandbox_cgroup_only",  # QEMU outside the pod's cgroup
    "io.katacontainers.config.runtime.vfio_mode",
    "io.katacontainers.config.runtime.disable_guest_seccomp",
    "io.katacontainers.config.agent.kernel_modules",
    "io.katacontainers.config.hypervisor.kernel_params",
]


def check_runtimeclass(path, schema_file):
    import jsonschema
    import yaml

    try:
        schema = json.loads(pathlib.Path(schema_file).read_text())
        docs = [d for d in yaml.safe_load_all(pathlib.Path(path).read_text()) if d is not None]
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise Usage(f"{e}") from e
    if not docs:
        return [f"{path}: no documents"]
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for doc in docs:
        name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc, dict) else "?"
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in error.path) or "(document)"
            problems.append(f"RuntimeClass {name}: {where}: {error.message}")
    return problems


def mebibytes(quantity):
    match = re.fullmatch(r"(\d+)(Mi|Gi)", str(quantity))
    if not match:
        return None
    return int(match.group(1)) * (1024 if match.group(2) == "Gi" else 1)


def check_consistency(directory):
    """The handler names, config paths and overheads agree across the files in kata-config/."""
    import yaml

    directory = pathlib.Path(directory)
    problems = []
    classes = [d for d in yaml.safe_load_all((directory / "runtimeclass.yaml").read_text()) if d]
    for snippet in sorted((directory / "containerd").glob("*.toml")):
        config = load_toml(snippet)
        plugin = CRI_PLUGIN_BY_VERSION.get(config.get("version"), "")
        runtimes = config.get("plugins", {}).get(plugin, {}).get("containerd", {}).get("runtimes", {})
        for rc in classes:
            if rc.get("handler") not in runtimes:
                problems.append(f"{snippet.name}: no runtime for RuntimeClass handler "
                                f"{rc.get('handler')!r}")
        for name, runtime in runtimes.items():
            config_path = runtime.get("options", {}).get("ConfigPath", "")
            local = directory / pathlib.PurePath(config_path).name
            if not local.is_file():
                problems.append(f"{snippet.name}: runtime {name} names {config_path}, which "
                                "kata-config/ does not ship")
                continue
            memory = load_toml(local).get("hypervisor", {}).get("qemu", {}).get("default_memory", 0)
            for rc in classes:
                if rc.get("handler") != name:
                    continue
                overhead = mebibytes(rc.get("overhead", {}).get("podFixed", {}).get("memory"))
                if overhead is None or overhead < memory:
                    problems.append(f"RuntimeClass {rc['metadata']['name']}: overhead memory must "
                                    f"cover the VM's pinned default_memory ({memory} MiB)")
    return problems


# Where Kata's own installs and kata-deploy put the binaries, after $PATH.
KATA_BINARIES = [("kata-runtime", ["--version"]), ("containerd-shim-kata-v2", ["--version"])]
KATA_BIN_DIR = os.environ.get("KVGPU_KATA_BIN_DIR", "/opt/kata/bin")  # tests point it elsewhere
# "kata-runtime  : 3.27.0" (kata-runtime) or "..., version: 3.27.0, commit: ..." (the shim).
RUNTIME_VERSION = re.compile(r"(?:kata-runtime\s*:|version:)\s*v?(\d+\.\d+\.\d+)")


def installed_kata_version():
    """The node's Kata release, from kata-runtime or the containerd shim."""
    tried = []
    for name, args in KATA_BINARIES:
        for binary in (shutil.which(name), shutil.which(name, path=KATA_BIN_DIR)):
            if not binary or binary in tried:
                continue
            tried.append(binary)
            try:
                out = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise Usage(f"{binary} --version failed: {e}")
            match = RUNTIME_VERSION.search(out.stdout + out.stderr)
            if out.returncode != 0 or not match:
                raise Usage(f"{binary} --version gave no Kata version (exit {out.returncode}): "
                            f"{(out.stdout + out.stderr).strip()[:200]!r}; pass --version X.Y.Z")
            return match.group(1)
    raise Usage(f"no kata-runtime or containerd-shim-kata-v2 on PATH or in {KATA_BIN_DIR}; "
                "install Kata or pass --version X.Y.Z")


def check_runtime(version_text, configs):
    """Problems for each configuration the release cannot serve; notes go to stdout."""
    if not re.fullmatch(r"v?\d+\.\d+(\.\d+)?", version_text):
        raise Usage(f"--version {version_text!r} is not a Kata release such as 3.27.0")
    version = kata_qemu.parse_version(version_text)
    problems = []
    for path in configs:
        config = load_toml(path)
        try:
            needs = kata_qemu.required_release(config)
        except (KeyError, ValueError) as e:
            problems.append(f"{path}: not a class configuration this checker knows: {e}")
            continue
        missing = [(release, why) for release, why in needs if version < release]
        for release, why in missing:
            problems.append(f"{pathlib.Path(path).name}: Kata {version_text} cannot serve it: "
                            f"{why} needs Kata {kata_qemu.version_text(release)} or later")
        if not missing:
            newest = max(release for release, _ in needs)
            print(f"check-config: {pathlib.Path(path).name}: Kata {version_text} serves it "
                  f"(needs {kata_qemu.version_text(newest)} or later)")
            if version > kata_qemu.NEWEST_PROVEN:
                print(f"check-config: {pathlib.Path(path).name}: note: newer than "
                      f"{kata_qemu.version_text(kata_qemu.NEWEST_PROVEN)}, the newest release "
                      "the VM lab's attach test proves (docs/kata-config.md)")
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    kata = sub.add_parser("kata", help="a Kata runtime configuration")
    kata.add_argument("file")
    kata.add_argument("--keys", required=True, help="upstream key list (tests/kata-config/data)")
    kata.add_argument("--removed", required=True, help="removed key list")
    kata.add_argument("--attach", choices=["mdev", "vf"], help="check the VFIO attach mode too")
    containerd = sub.add_parser("containerd", help="a containerd runtime drop-in")
    containerd.add_argument("file")
    containerd.add_argument("--keys", required=True, help="containerd runtime key list")
    runtimeclass = sub.add_parser("runtimeclass", help="RuntimeClass manifests")
    runtimeclass.add_argument("file")
    runtimeclass.add_argument("--schema", required=True)
    consistency = sub.add_parser("consistency", help="cross-file agreement in kata-config/")
    consistency.add_argument("dir")
    runtime = sub.add_parser("runtime", help="whether the node's Kata release serves each class")
    runtime.add_argument("configs", nargs="*", metavar="CONFIG",
                         help="class configurations (default: the configuration-*.toml beside "
                              "this script)")
    runtime.add_argument("--version", help="the Kata release instead of asking kata-runtime")
    args = parser.parse_args(argv)
    try:
        if args.what == "kata":
            problems = check_kata(args.file, args.keys, args.removed, args.attach)
        elif args.what == "containerd":
            problems = check_containerd(args.file, args.keys)
        elif args.what == "runtimeclass":
            problems = check_runtimeclass(args.file, args.schema)
        elif args.what == "runtime":
            configs = args.configs or sorted(
                pathlib.Path(__file__).resolve().parent.glob("configuration-*.toml"))
            if not configs:
                raise Usage("no class configurations given or found beside check-config.py")
            problems = check_runtime(args.version or installed_kata_version(), configs)
        else:
            problems = check_consistency(args.dir)
    except Usage as e:
        print(f"check-config: {e}", file=sys.stderr)
        return 2
    for problem in problems:
        where = "" if args.what == "runtime" else f"{getattr(args, 'file', args.what)}: "
        print(f"check-config: {where}{problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
