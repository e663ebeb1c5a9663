#!/usr/bin/env python3
"""The include walls of the house, written once: which code may include what.

Run: include_rules.py --repo <checkout>   (exit 1 and one line per violation when a wall is broken)

The rules (docs/architecture.md, "The device plugin's wings"):
  - the device plugin's model (deviceplugin/model/) is what every kubelet front end shares (the
    device plugin API today, DRA next), so it includes no gRPC, no kubelet protos, no kube client,
    no libvirt, no prometheus, no mdev backend and nothing of the daemon;
  - a wing of the device plugin includes the model and itself, never a sibling wing nor the
    daemon that wires them. The DRA front end (deviceplugin/dra/) is such a wing, in three
    libraries: its device names (device_name) link the model alone and so keep the model's
    walls; its slices (resource slices, device classes, the occupancy decision and their
    publishers) add the kube client, never gRPC or kubelet's protos, nor the kubelet plugin's
    files; the kubelet plugin may use both;
  - a private header (`*_internal.h`) is included only by files of its own folder (or below it);
    in mdev/, each backend's is its own: the other backend and everyone else use the shared kit
    (mdev/backend_kit.h) instead;
  - common/ is the ground floor: it includes nothing of the project outside common/;
  - the doctor (doctor/) reads the node through the mdev library and common/ only; the mdev
    library sits below it, so of mdev/ only the vgpuctl program (mdev/vgpuctl/) includes doctor/,
    and the doctor includes nothing of vgpuctl;
  - no two units of production code (a header and its source: a.h + a.cpp) include each other's
    headers: the one that is used moves what both need to its own side or into a small header of
    its own, so either can be read, built and tested without the other.
"""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
SOURCE_SUFFIXES = {".h", ".hpp", ".cc", ".cpp"}

WINGS = ("model", "kubelet", "lifecycle", "publish", "dra")

# The DRA wing's libraries (deviceplugin/CMakeLists.txt), by file name without its suffix. A file
# not named here is the kubelet plugin's (kvgpu_deviceplugin_dra), which may include all three.
DRA_NAMES = {"device_name"}  # kvgpu_dra_device_name: the model alone
DRA_SLICES = {  # kvgpu_dra_slices: the model and the kube client
    "device_classes",
    "occupancy_confirmer",
    "occupancy_decision",
    "resource_slices",
    "resource_slices_validation",
    "slice_publisher",
}
DRA_SLICES_FORBIDDEN = (
    ("grpcpp/", "gRPC belongs to the DRA kubelet plugin, not to the slices"),
    ("grpc/", "gRPC belongs to the DRA kubelet plugin, not to the slices"),
    ("kubelet/", "kubelet's protos belong to the DRA kubelet plugin, not to the slices"),
    ("libvirt/", "libvirt belongs to its mdev backend"),
    ("prometheus/", "metrics belong to the wings that export them"),
)

# What the model must not include, by include-path prefix, with the reason a reader is shown.
MODEL_FORBIDDEN = (
    ("grpcpp/", "gRPC belongs to a front end"),
    ("grpc/", "gRPC belongs to a front end"),
    ("kubelet/", "kubelet's protos belong to a front end"),
    ("kube/", "the kube client belongs to the lifecycle and publish wings"),
    ("libvirt/", "libvirt belongs to its mdev backend"),
    ("prometheus/", "metrics belong to the wings that export them"),
    ("mdev/node.h", "the model sees backends through mdev/backend.h only"),
    ("mdev/sysfs_backend.h", "the model sees backends through mdev/backend.h only"),
    ("mdev/libvirt_", "the model sees backends through mdev/backend.h only"),
    ("mdev/make_backend.h", "choosing a backend is the daemon's job"),
)

# The mdev backends: the files of each, by name prefix under mdev/.
BACKENDS = {
    "sysfs": ("node", "sysfs_backend"),
    "libvirt": ("libvirt_",),
}


def backend_of(relative):
    """The mdev backend a file belongs to, or None."""
    if len(relative.parts) != 2 or relative.parts[0] != "mdev":
        return None
    for backend, prefixes in BACKENDS.items():
        if any(relative.name.startswith(prefix) for prefix in prefixes):
            return backend
    return None


def dra_library(stem):
    if stem in DRA_NAMES:
        return "names"
    if stem in DRA_SLICES:
        return "slices"
    return "plugin"


# What the doctor may include of the project, by top-level folder.
DOCTOR_MAY_INCLUDE = {"common", "mdev", "doctor"}


# What each DRA library may include of the others.
DRA_ALLOWED = {"names": {"names"}, "slices": {"names", "slices"}, "plugin": {"names", "slices", "plugin"}}


def check_include(relative, included, project_tops):
    """The reason `relative` may not include `included`, or None when it may. `project_tops`: the
    checkout's top-level folders, which tell the project's includes from system ones."""
    parts = relative.parts
    top = included.split("/", 1)[0]
    if parts[0] == "common" and "/" in included and top != "common" and top in project_tops:
        return "common/ is the ground floor: it includes nothing of the project above it"
    if parts[0] == "doctor" and "/" in included and top in project_tops:
        if top not in DOCTOR_MAY_INCLUDE:
            return f"the doctor reads the node through mdev/ and common/ only, not {top}/"
        if included.startswith("mdev/vgpuctl/"):
            return "the doctor sits below vgpuctl: it includes nothing of mdev/vgpuctl/"
    if parts[0] == "mdev" and parts[1] != "vgpuctl" and included.startswith("doctor/"):
        return "the mdev library sits below the doctor: of mdev/, only mdev/vgpuctl/ includes doctor/"
    if parts[0] == "deviceplugin" and len(parts) > 2 and parts[1] in WINGS:
        wing = parts[1]
        library = dra_library(relative.stem) if wing == "dra" else None
        if wing == "model" or library == "names":
            for prefix, why in MODEL_FORBIDDEN:
                if included.startswith(prefix):
                    return why
        if library == "slices":
            for prefix, why in DRA_SLICES_FORBIDDEN:
                if included.startswith(prefix):
                    return why
        if library is not None and included.startswith("deviceplugin/dra/"):
            theirs = dra_library(pathlib.PurePosixPath(included).stem)
            if theirs not in DRA_ALLOWED[library]:
                return f"the DRA {library} library does not include the DRA {theirs} library's files"
        if included.startswith("deviceplugin/"):
            target = pathlib.PurePosixPath(included).parts
            if len(target) == 2:
                return "a wing never includes the daemon that wires it"
            if target[1] not in (wing, "model"):
                return f"the {wing} wing includes the model and itself, not the {target[1]} wing"
    if included.endswith("_internal.h"):
        folder = pathlib.PurePosixPath(included).parent
        if folder.parts and tuple(relative.parts[: len(folder.parts)]) != folder.parts:
            return f"{included} is private to {folder}/: only files there include it"
    if included.startswith("mdev/") and included.endswith("_internal.h"):
        owner = backend_of(pathlib.PurePosixPath(included))
        if owner is not None and backend_of(relative) != owner:
            return f"{included} is the {owner} backend's own; share through mdev/backend_kit.h"
    return None


def sources(repo):
    for path in sorted(repo.rglob("*")):
        relative = path.relative_to(repo)
        if relative.parts[0].startswith(".") or relative.parts[0].startswith("build"):
            continue
        if path.suffix in SOURCE_SUFFIXES and path.is_file():
            yield path, relative


def unit_of(path):
    """A header and its source are one unit: "extender/node_fit" for node_fit.h and node_fit.cpp."""
    return pathlib.PurePosixPath(path).with_suffix("").as_posix()


def mutual_includes(includes):
    """Each pair of production units that include each other's headers, once, with where.
    `includes`: (file, line number, included path) of every project include."""
    by_unit = {}  # unit -> {unit it includes: first (file, line) that does}
    for relative, number, included in includes:
        if relative.parts[0] == "tests":
            continue
        unit, theirs = unit_of(relative), unit_of(included)
        if theirs != unit:
            by_unit.setdefault(unit, {}).setdefault(theirs, (relative, number))
    found = []
    for unit, uses in sorted(by_unit.items()):
        for theirs, (relative, number) in sorted(uses.items()):
            if unit < theirs and unit in by_unit.get(theirs, {}):
                back, back_number = by_unit[theirs][unit]
                found.append(f"{relative}:{number}: {unit} and {theirs} include each other "
                             f"({back}:{back_number} includes {unit}'s header): move what both need "
                             "to the side it belongs to, or into a small header of its own")
    return found


def violations(repo):
    project_tops = {p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")}
    found = []
    includes = []
    for path, relative in sources(repo):
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            included = match.group(1)
            if included.split("/", 1)[0] in project_tops:
                includes.append((relative, number, included))
            why = check_include(relative, included, project_tops)
            if why:
                found.append(f"{relative}:{number}: includes {included}: {why}")
    return found + mutual_includes(includes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=pathlib.Path, required=True)
    args = parser.parse_args()
    found = violations(args.repo.resolve())
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} include(s) break a wall (tests/lint/include_rules.py says why)")
        return 1
    print("include walls: kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
