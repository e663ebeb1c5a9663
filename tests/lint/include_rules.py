#!/usr/bin/env python3
"""The include walls of the house, written once: which code may include what.

Run: include_rules.py --repo <checkout>   (exit 1 and one line per violation when a wall is broken)

The rules (docs/architecture.md, "The device plugin's wings"):
  - the device plugin's model (deviceplugin/model/) is what every kubelet front end shares (the
    device plugin API today, DRA next), so it includes no gRPC, no kubelet protos, no kube client,
    no libvirt, no prometheus, no mdev backend and nothing of the daemon;
  - a wing of the device plugin includes the model and itself, never a sibling wing nor the
    daemon that wires them;
  - an mdev backend's private header (`<backend>_internal.h`) is its own: the other backend and
    everyone else use the shared kit (mdev/backend_kit.h) instead;
  - common/ is the ground floor: it includes nothing of the project outside common/.
"""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
SOURCE_SUFFIXES = {".h", ".hpp", ".cc", ".cpp"}

WINGS = ("model", "kubelet", "lifecycle", "publish")

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


def check_include(relative, included, project_tops):
    """The reason `relative` may not include `included`, or None when it may. `project_tops`: the
    checkout's top-level folders, which tell the project's includes from system ones."""
    parts = relative.parts
    top = included.split("/", 1)[0]
    if parts[0] == "common" and "/" in included and top != "common" and top in project_tops:
        return "common/ is the ground floor: it includes nothing of the project above it"
    if parts[0] == "deviceplugin" and len(parts) > 2 and parts[1] in WINGS:
        wing = parts[1]
        if wing == "model":
            for prefix, why in MODEL_FORBIDDEN:
                if included.startswith(prefix):
                    return why
        if included.startswith("deviceplugin/"):
            target = pathlib.PurePosixPath(included).parts
            if len(target) == 2:
                return "a wing never includes the daemon that wires it"
            if target[1] not in (wing, "model"):
                return f"the {wing} wing includes the model and itself, not the {target[1]} wing"
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


def violations(repo):
    project_tops = {p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")}
    found = []
    for path, relative in sources(repo):
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            why = check_include(relative, match.group(1), project_tops)
            if why:
                found.append(f"{relative}:{number}: includes {match.group(1)}: {why}")
    return found


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
