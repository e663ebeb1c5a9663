#!/usr/bin/python3
"""Scenario 1 (Deploy), against the real control plane of one pinned release:

  - every overlay of deploy/overlays (and deploy/monitoring) applied with
    `kubectl apply --server-side -k` is accepted by the real kube-apiserver: its validation, its
    admission, its CEL for the ValidatingAdmissionPolicy, the DeviceClasses of resource.k8s.io/v1,
    with no warning printed. The overlays are applied one after the other to one API server; before
    the next, every object of the previous one but its Namespace is deleted, so each overlay is
    judged on its own objects. Read back, every object holds every field the manifest sets (a
    field this release drops, e.g. behind a feature gate that is off, fails). cert-manager's and
    prometheus-operator's kinds are served by CRDs made from the schemas tests/deploy already
    checks against (tests/deploy/data/SOURCES.md).
  - each of our programs that the overlay deploys gets a token of the ServiceAccount its workload
    names (`kubectl create token`), and the API server's SelfSubjectAccessReview, asked with that
    token, allows every API call the program makes with the flags and config the overlay gives it
    (the *_needs functions below, read from the C++ clients). A missing RBAC rule, binding or
    ServiceAccount fails.

usage: scenario_deploy.py --release 1.36 [--deploy DIR] [--bite]
  --bite: instead, a deploy/ with one RBAC verb removed, on an API server that drops a field the
  overlay sets, must fail exactly those two checks (the checks are shown able to fail).
Exit status 0 when every check passed, 1 otherwise, 77 (skipped) only when the release's programs
are not built and Go, which builds them (tests/k8s/build-peers.sh), is not installed.
"""
import argparse
import base64
import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "deploy"))

import check_deploy  # noqa: E402  (tests/deploy: rendering with certificates, Report)
import controlplane  # noqa: E402
import yaml  # noqa: E402

TENANT = "tenant-a"  # a namespace of users' pods: the programs' rules must cover any namespace
FIELD_MANAGER = "kata-vgpu-deploy-test"


class Need:
    """One API call a program makes: a SelfSubjectAccessReview's resourceAttributes."""

    def __init__(self, verb, group, resource, subresource="", namespace="", name="", where=""):
        self.attributes = {"verb": verb, "group": group, "resource": resource}
        if subresource:
            self.attributes["subresource"] = subresource
        if namespace:
            self.attributes["namespace"] = namespace
        if name:
            self.attributes["name"] = name
        self.where = where

    def __str__(self):
        a = self.attributes
        text = "%s %s%s%s" % (a["verb"], a["resource"], "/" + a["subresource"] if "subresource" in a else "",
                              "." + a["group"] if a["group"] else "")
        if "name" in a:
            text += " " + a["name"]
        return text + (" in %s" % a["namespace"] if "namespace" in a else " in every namespace"
                       if a["resource"] not in ("nodes", "resourceslices") else "")


def device_plugin_needs(config):
    """kvgpu-device-plugin with the given config (the ConfigMap's config.yaml)."""
    needs = [
        Need("list", "", "pods", where="kube/pod_watcher.cpp: the pods of its node, by field selector"),
        Need("watch", "", "pods", where="kube/pod_watcher.cpp"),
        Need("create", "", "events", namespace=TENANT, where="kube/events.cpp: Events on a vGPU's pod"),
        Need("patch", "", "nodes", where="deviceplugin/publish/state_publisher.cpp: the vGPU state annotation"),
    ]
    dra = (config or {}).get("dra")
    if dra:
        r = "resource.k8s.io"
        needs += [
            Need("list", r, "resourceslices", where="deviceplugin/dra/slice_publisher.cpp: its node's slices"),
            Need("create", r, "resourceslices", where="slice_publisher.cpp (also the dry-run create)"),
            Need("patch", r, "resourceslices", where="slice_publisher.cpp"),
            Need("delete", r, "resourceslices", where="slice_publisher.cpp"),
            Need("get", "", "nodes", where="slice_publisher.cpp: the Node for the owner reference"),
            Need("get", r, "resourceclaims", namespace=TENANT,
                 where="deviceplugin/dra/claim_reader.cpp, dra_plugin.cpp: the claims it prepares"),
        ]
        if dra.get("bindingConditions"):
            needs += [
                Need("list", r, "resourceclaims", where="deviceplugin/dra/occupancy_confirmer.cpp"),
                Need("watch", r, "resourceclaims", where="occupancy_confirmer.cpp"),
                Need("patch", r, "resourceclaims", "status", namespace=TENANT,
                     where="occupancy_confirmer.cpp: binding conditions in status.devices"),
                # Since 1.36 a write of status.devices is also authorized against this synthetic
                # subresource, per driver name (DRAResourceClaimGranularStatusAuthorization).
                Need("associated-node:patch", r, "resourceclaims", "driver", namespace=TENANT,
                     name=dra.get("driverName", "vgpu.tencent.com"), where="the API server's check of that write"),
            ]
    return needs


def extender_needs(args):
    needs = [
        Need("list", "", "nodes", where="extender/service.cpp: the Nodes' vGPU state"),
        Need("watch", "", "nodes", where="extender/service.cpp"),
        Need("list", "", "pods", where="extender/service.cpp: the bound pods (spec.nodeName!=)"),
        Need("watch", "", "pods", where="extender/service.cpp"),
        Need("get", "", "pods", namespace=TENANT, where="extender/extender.cpp: the pod to bind"),
        Need("get", "", "nodes", where="extender/extender.cpp: the Node's bind ledger"),
    ]
    if "--bind" in args:
        needs += [
            Need("patch", "", "nodes", where="extender/extender.cpp: the bind ledger annotation"),
            Need("create", "", "pods", "binding", namespace=TENANT, where="extender/extender.cpp: the bind"),
        ]
    if any(a.startswith("--scheduler-config") for a in args):
        needs.append(Need("create", "", "events", namespace="default",
                          where="extender: VgpuResourceBypassesExtender on a Node"))
    return needs


def webhook_needs(args):
    if "--in-cluster" not in args:
        return []  # without API access it reads nothing
    r = "resource.k8s.io"
    return [Need("get", r, "resourceclaims", namespace=TENANT, where="webhook/claim_lookup.cpp"),
            Need("get", r, "resourceclaimtemplates", namespace=TENANT, where="webhook/claim_lookup.cpp")]


def validator_needs(args):
    ns = next((a.split("=", 1)[1] for a in args if a.startswith("--namespace=")), "default")
    return [
        Need("get", "", "nodes", where="kube/node.cpp: its Node"),
        Need("patch", "", "nodes", where="kube/node.cpp: the kata-vgpu.io/validated label"),
        Need("patch", "", "nodes", "status", where="kube/node.cpp: the KataVgpuValidated condition"),
        Need("create", "", "events", namespace="default", where="kube/events.cpp: the Event on its Node"),
        Need("create", "", "pods", namespace=ns, where="validator/validator.cpp: the probe pod"),
        Need("get", "", "pods", namespace=ns, where="validator/validator.cpp"),
        Need("delete", "", "pods", namespace=ns, where="validator/validator.cpp"),
        Need("get", "", "pods", "log", namespace=ns, where="validator/validator.cpp: the probe's log"),
    ]


def container_args(workload):
    c = check_deploy.pod_spec(workload)["containers"][0]
    return (c.get("command") or []) + (c.get("args") or [])


def programs(objects):
    """(program, workload, needs) of each of our programs the overlay deploys."""
    out = []
    for workload in objects:
        if workload["kind"] not in ("DaemonSet", "Deployment"):
            continue
        name, args = workload["metadata"]["name"], container_args(workload)
        if name == "kvgpu-device-plugin":
            config = None
            for cm in check_deploy.find(objects, "ConfigMap"):
                if cm["metadata"]["name"].startswith("kvgpu-device-plugin-config"):
                    config = yaml.safe_load(cm["data"]["config.yaml"])
            out.append((name, workload, device_plugin_needs(config)))
        elif name == "kvgpu-scheduler-extender":
            out.append((name, workload, extender_needs(args)))
        elif name == "kvgpu-webhook":
            out.append((name, workload, webhook_needs(args)))
        elif name == "kvgpu-validator":
            out.append((name, workload, validator_needs(args)))
    return out


def third_party_crds(testdata):
    """CRDs serving the kinds of cert-manager and prometheus-operator the overlays use."""
    crds = []
    for path in ("cert-manager-v1-schemas.json", "prometheus-operator-v1-schemas.json"):
        with open(os.path.join(testdata, path)) as f:
            schemas = json.load(f)
        for gvk, schema in schemas.items():
            group, version, kind = gvk.split("/")
            plural = kind.lower() + "s"
            crds.append({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "%s.%s" % (plural, group)},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"kind": kind, "listKind": kind + "List", "plural": plural,
                                   "singular": kind.lower()},
                         "versions": [{"name": version, "served": True, "storage": True,
                                       "schema": {"openAPIV3Schema": schema},
                                       "subresources": {"status": {}}}]}})
    return crds


QUANTITY = re.compile(r"^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
SCALE = {None: 1, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
         "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}


def same_scalar(want, got):
    if want == got or str(want) == str(got):
        return True
    a, b = QUANTITY.match(str(want)), QUANTITY.match(str(got))  # "1000m" is stored as "1"
    return bool(a and b) and abs(float(a.group(1)) * SCALE[a.group(2)] - float(b.group(1)) * SCALE[b.group(2)]) < 1e-9


def dropped(want, got, path=""):
    """Paths of what the manifest sets that the stored object lacks or holds otherwise: a field
    the API server drops (a feature gate off, a field unknown to this release) is accepted by the
    apply and lost all the same."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [path or "/"]
        out = []
        for k, v in want.items():
            if k not in got:
                if v not in (None, {}, [], False, ""):
                    out.append("%s/%s" % (path, k))
            else:
                out += dropped(v, got[k], "%s/%s" % (path, k))
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return [path]
        return [p for i, (w, g) in enumerate(zip(want, got)) for p in dropped(w, g, "%s/%d" % (path, i))]
    return [] if same_scalar(want, got) else ["%s (%.60r stored as %.60r)" % (path, want, got)]


def stored_as_applied(cp, report, name, objects):
    got = cp.kubectl("get", "-o", "json", "-f", "-", input=yaml.safe_dump_all(objects), check=False)
    if not report.check(got.returncode == 0, "%s: its objects can be read back" % name, got.stderr.strip()):
        return
    items = json.loads(got.stdout)
    items = items.get("items", [items])
    stored = {check_deploy.key(o): o for o in items}
    lost = []
    for obj in objects:
        want, got = dict(obj), dict(stored.get(check_deploy.key(obj), {}))
        if obj["kind"] == "Secret":
            # Compared decoded: a manifest may wrap its base64, and stringData is stored in data.
            def decoded(data):
                return {k: base64.b64decode("".join(v.split())) for k, v in (data or {}).items()}
            want["data"] = dict(decoded(want.get("data")),
                                **{k: v.encode() for k, v in (want.pop("stringData", None) or {}).items()})
            got["data"] = decoded(got.get("data"))
        lost += ["%s %s" % (check_deploy.key(obj), p) for p in dropped(want, got)]
    report.check(not lost, "%s: the API server stores every field its objects set" % name, "\n".join(lost))


def check_overlay(cp, report, name, directory, kubectl):
    objects, error = check_deploy.render(kubectl, directory)
    if not report.check(objects is not None, "%s renders with this release's kubectl kustomize" % name, error):
        return
    applied = cp.kubectl("apply", "--server-side", "--field-manager", FIELD_MANAGER, "-k", directory, check=False)
    ok = report.check(applied.returncode == 0, "%s: kubectl apply --server-side -k is accepted" % name,
                      applied.stderr.strip())
    warnings = [line for line in applied.stderr.splitlines() if line.startswith("Warning")]
    report.check(not warnings, "%s: the API server answers its objects without a warning" % name, "\n".join(warnings))
    if ok:
        lines = [line for line in applied.stdout.splitlines() if line.strip()]
        report.check(len(lines) == len(objects), "%s: every one of its %d objects is applied" % (name, len(objects)),
                     applied.stdout)
        stored_as_applied(cp, report, name, objects)

    for program, workload, needs in programs(objects):
        spec = check_deploy.pod_spec(workload)
        account = spec.get("serviceAccountName", "default")
        namespace = workload["metadata"].get("namespace", "default")
        if not needs:
            continue
        token = cp.kubectl("create", "token", account, "-n", namespace, "--duration", "10m", check=False)
        if not report.check(token.returncode == 0, "%s: %s's ServiceAccount %s/%s gets a token"
                            % (name, program, namespace, account), token.stderr.strip()):
            continue
        denied = []
        for need in needs:
            status, answer = cp.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                        {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                                         "spec": {"resourceAttributes": need.attributes}},
                                        token=token.stdout.strip())
            allowed = status == 201 and answer.get("status", {}).get("allowed") is True
            report.check(allowed, "%s: %s may %s (%s)" % (name, program, need, need.where),
                         "HTTP %d %s" % (status, json.dumps(answer.get("status", answer)
                                                            if isinstance(answer, dict) else answer)))
            if not allowed:
                denied.append(need)
        if denied:
            listed = cp.kubectl("auth", "can-i", "--list", "-n", TENANT, token=token.stdout.strip(), check=False)
            print("  what %s's token may do in %s (kubectl auth can-i --list):\n%s"
                  % (program, TENANT, listed.stdout + listed.stderr))

    # The next overlay starts from no object of this one but its Namespace (deleting a Namespace
    # needs the namespace controller and takes time; applying it again changes nothing).
    leftovers = [o for o in objects if o["kind"] != "Namespace"] if ok else []
    if leftovers:
        deleted = cp.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                             input=yaml.safe_dump_all(leftovers), check=False)
        if deleted.returncode != 0:
            raise controlplane.ControlPlaneError("deleting %s's objects failed: %s" % (name, deleted.stderr))


# A feature gate per release that can be switched off and makes the API server drop a field
# overlays/dra sets. In 1.37 DRAExtendedResource is GA and locked on, and overlays/dra sets no
# field behind a gate that release lets be switched off: there only the RBAC half bites.
DROP_GATES = {"1.36": ("DRAExtendedResource", "/spec/extendedResourceName")}


def bite(args, bin_dir):
    """The checks above can fail: overlays/dra from a copy of deploy/ whose device-plugin role lacks
    `watch` on pods, applied to an API server with DROP_GATES' gate off (it then drops the
    DeviceClasses' extendedResourceName), must fail exactly those two checks."""
    report = check_deploy.Report()
    gate, field = DROP_GATES.get(args.release.lstrip("v"), (None, None))
    with tempfile.TemporaryDirectory(prefix="kvgpu-bite-") as tmp:
        copy = os.path.join(tmp, "deploy")
        shutil.copytree(args.deploy, copy, symlinks=True)
        rbac = os.path.join(copy, "base", "device-plugin", "rbac.yaml")
        with open(rbac) as f:
            text = f.read()
        broken = text.replace("resources: [pods]\n  verbs: [get, list, watch]",
                              "resources: [pods]\n  verbs: [get, list]")
        if not report.check(broken != text, "the device plugin's role grants watch on pods, to be removed"):
            return report.finish()
        with open(rbac, "w") as f:
            f.write(broken)
        inner = check_deploy.Report()
        with controlplane.ControlPlane(bin_dir, feature_gates={gate: "false"} if gate else None) as cp:
            with check_deploy.scratch_deploy(copy) as deploy:
                print("--- the broken deploy/, where FAIL is expected:")
                check_overlay(cp, inner, "overlays/dra", os.path.join(deploy, "overlays", "dra"),
                              os.path.join(bin_dir, "kubectl"))
                print("---")
    watch = [f for f in inner.failures if "kvgpu-device-plugin may watch pods" in f]
    report.check(watch, "a role without a verb its program uses fails the RBAC check")
    if gate:
        dropped_field = [f for f in inner.failures if "stores every field" in f and field in f]
        report.check(dropped_field, "a field the API server drops (%s off) fails the read-back check" % gate)
    else:
        print("(no gate of %s drops a field overlays/dra sets: the read-back check's bite is shown on %s)"
              % (args.release, ", ".join(sorted(DROP_GATES))))
    report.check(len(inner.failures) == (2 if gate else 1), "nothing else fails", "\n".join(inner.failures))
    return report.finish()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", required=True, help="a release pinned in tests/k8s/peers, e.g. 1.36")
    parser.add_argument("--deploy", default=os.path.join(REPO, "deploy"))
    parser.add_argument("--testdata", default=os.path.join(REPO, "tests", "deploy", "data"))
    parser.add_argument("--bite", action="store_true", help="show that the checks fail on a broken deploy/ instead")
    args = parser.parse_args()

    bin_dir, status = controlplane.peers_or_exit_code(args.release)
    if bin_dir is None:
        return status
    kubectl = os.path.join(bin_dir, "kubectl")
    if args.bite:
        return bite(args, bin_dir)

    report = check_deploy.Report()
    started = time.monotonic()
    with controlplane.ControlPlane(bin_dir) as cp:
        print("control plane of %s up in %.1f s (%s)" % (args.release, time.monotonic() - started, cp.dir))
        version = cp.request("GET", "/version")[1]
        print("kube-apiserver says it is %s" % (version.get("gitVersion") if isinstance(version, dict) else version))
        crds = third_party_crds(args.testdata)
        cp.kubectl("apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", "-",
                   input=yaml.safe_dump_all(crds))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=120s",
                   *["crd/" + c["metadata"]["name"] for c in crds])
        with check_deploy.scratch_deploy(args.deploy) as deploy:
            dirs = {n: d for n, d in check_deploy.kustomize_dirs(deploy).items() if n != "base"}
            dirs["monitoring"] = os.path.join(deploy, "monitoring")
            for name, directory in dirs.items():
                check_overlay(cp, report, name, directory, kubectl)
    print("(%.1f s in all)" % (time.monotonic() - started))
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
