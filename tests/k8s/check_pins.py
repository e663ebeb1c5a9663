#!/usr/bin/python3
"""Each pin in tests/k8s/peers/v1.<minor>/ is what tests/k8s/build-peers.sh expects: its go.mod
requires k8s.io/kubernetes v1.<minor>.<patch> and go.etcd.io/etcd/server/v3, replaces every
staging module with the same release's v0.<minor>.<patch>, names the six programs as tools, and
its go.sum holds the checksums of both modules. A pin moved to another patch release without its
replace lines would build a mix of two releases. The containerd pin (tests/k8s/containerd/)
requires github.com/containerd/containerd/v2 at a v2 release, names its three programs as tools,
and its go.sum holds that module's checksum.

usage: check_pins.py PEERS_DIR [CONTAINERD_PIN_DIR]
"""
import os
import re
import sys

TOOLS = {"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
         "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kubectl", "go.etcd.io/etcd/server/v3",
         "k8s.io/kubernetes/cmd/kubelet"}


def block(text, keyword):
    m = re.search(r"^%s \((.*?)^\)" % keyword, text, re.S | re.M)
    return [line.split("//")[0].strip() for line in m.group(1).splitlines()] if m else []


def check(pin_dir, failures):
    before = len(failures)
    name = os.path.basename(pin_dir)
    minor = re.fullmatch(r"v1\.(\d+)", name)
    if not minor:
        failures.append("%s: not a pin directory name (v1.<minor>)" % name)
        return
    with open(os.path.join(pin_dir, "go.mod")) as f:
        mod = f.read()
    requires = dict(line.split()[:2] for line in block(mod, "require") if line)
    k8s = requires.get("k8s.io/kubernetes", "")
    m = re.fullmatch(r"v1\.(\d+)\.(\d+)", k8s)
    if not m or m.group(1) != minor.group(1):
        failures.append("%s: requires k8s.io/kubernetes %r, not a 1.%s release" % (name, k8s, minor.group(1)))
        return
    staging = "v0.%s.%s" % m.groups()
    if "go.etcd.io/etcd/server/v3" not in requires:
        failures.append("%s: does not require go.etcd.io/etcd/server/v3" % name)
    replaces = [line for line in block(mod, "replace") if line]
    if not replaces:
        failures.append("%s: no replace lines for the staging modules" % name)
    for line in replaces:
        r = re.fullmatch(r"(k8s\.io/\S+) => (k8s\.io/\S+) (\S+)", line)
        if not r or r.group(1) != r.group(2) or r.group(3) != staging:
            failures.append("%s: replace %r is not <staging module> => itself %s" % (name, line, staging))
    tools = set(line for line in block(mod, "tool") if line)
    if tools != TOOLS:
        failures.append("%s: tools %s, want %s" % (name, sorted(tools), sorted(TOOLS)))
    try:
        with open(os.path.join(pin_dir, "go.sum")) as f:
            summed = f.read()
    except OSError:
        failures.append("%s: no go.sum" % name)
        return
    for module in ("k8s.io/kubernetes", "go.etcd.io/etcd/server/v3"):
        if "%s %s h1:" % (module, requires.get(module)) not in summed:
            failures.append("%s: go.sum has no checksum of %s %s" % (name, module, requires.get(module)))
    if len(failures) == before:
        print("ok   %s: Kubernetes %s, etcd %s, staging modules at %s, %d replaced"
              % (name, k8s, requires.get("go.etcd.io/etcd/server/v3"), staging, len(replaces)))


CONTAINERD = "github.com/containerd/containerd/v2"
CONTAINERD_TOOLS = {CONTAINERD + "/cmd/containerd", CONTAINERD + "/cmd/ctr", CONTAINERD + "/cmd/containerd-shim-runc-v2"}


def check_containerd(pin_dir, failures):
    before = len(failures)
    with open(os.path.join(pin_dir, "go.mod")) as f:
        mod = f.read()
    requires = dict(line.split()[:2] for line in block(mod, "require") if line)
    version = requires.get(CONTAINERD, "")
    if not re.fullmatch(r"v2\.\d+\.\d+", version):
        failures.append("containerd: requires %s %r, not a v2 release" % (CONTAINERD, version))
        return
    tools = set(line for line in block(mod, "tool") if line)
    if tools != CONTAINERD_TOOLS:
        failures.append("containerd: tools %s, want %s" % (sorted(tools), sorted(CONTAINERD_TOOLS)))
    try:
        with open(os.path.join(pin_dir, "go.sum")) as f:
            summed = f.read()
    except OSError:
        failures.append("containerd: no go.sum")
        return
    if "%s %s h1:" % (CONTAINERD, version) not in summed:
        failures.append("containerd: go.sum has no checksum of %s %s" % (CONTAINERD, version))
    if len(failures) == before:
        print("ok   containerd: %s %s" % (CONTAINERD, version))


def main():
    peers = sys.argv[1]
    failures = []
    if len(sys.argv) > 2:
        check_containerd(sys.argv[2], failures)
    pins = sorted(d for d in os.listdir(peers) if os.path.isdir(os.path.join(peers, d)))
    for d in pins:
        check(os.path.join(peers, d), failures)
    for f in failures:
        print("FAIL " + f)
    if not pins:
        print("FAIL no pin in " + peers)
    return 1 if failures or not pins else 0


if __name__ == "__main__":
    sys.exit(main())
