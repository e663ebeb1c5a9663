#!/usr/bin/env python3
"""Checks of deploy/: what `kubectl kustomize` renders, judged against the real Kubernetes
schemas, the project's deployment policy and the programs' own flags and config.

Every subcommand renders from a scratch copy of deploy/ in which deploy/gen-webhook-cert.sh has
made the certificates the default and development overlays read, so the working tree is never
touched and no real certificate is needed.

  check_deploy.py render      --kubectl K --deploy DIR
  check_deploy.py schema      --kubectl K --deploy DIR --k8s-schemas F --crd-schemas F
  check_deploy.py policy      --kubectl K --deploy DIR
  check_deploy.py consistency --kubectl K --deploy DIR --repo DIR
  check_deploy.py monitoring  --kubectl K --deploy DIR --repo DIR
  check_deploy.py kustomize-current --deploy DIR
Each prints one line per finding and ends with 'N passed, N failed'.
"""
import argparse
import contextlib
import copy
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                  "ValidatingWebhookConfiguration", "RuntimeClass", "PriorityClass",
                  "CustomResourceDefinition", "DeviceClass"}
NAMESPACE = "kata-vgpu"
WORKLOAD_KINDS = {"DaemonSet", "Deployment", "StatefulSet", "Job"}
# Kustomization fields kustomize v5 warns about on every build, and commonLabels, which
# `kustomize edit fix` rewrites (see data/SOURCES.md).
KUSTOMIZE_DEPRECATED_FIELDS = {"bases", "imageTags", "patchesStrategicMerge", "patchesJson6902",
                               "vars", "commonLabels"}
# Overlays that read certificates made by deploy/gen-webhook-cert.sh into <overlay>/CERT_DIR, a
# name that tells whoever sees kustomize's "lstat .../CERT_DIR: no such file" what to run.
CERT_OVERLAYS = ("default", "development")
CERT_DIR = "certs-by-gen-webhook-cert.sh"


class Report:
    """Counts and prints each check; keeps their names (a failure with its detail), so that a
    test of the checks themselves (a `--bite` run) can ask which failed and which passed."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.passes = []
        self.failures = []

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            self.passes.append(what)
            print("ok   %s" % what)
        else:
            self.failed += 1
            self.failures.append("%s: %s" % (what, detail))
            print("FAIL %s%s" % (what, (": " + detail) if detail else ""))
        return ok

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed or not self.passed else 0


# --- rendering ---------------------------------------------------------------------------------

@contextlib.contextmanager
def scratch_deploy(deploy):
    """A copy of deploy/ with fresh certificates for the overlays that need them."""
    with tempfile.TemporaryDirectory(prefix="kvgpu-deploy-") as tmp:
        copy_dir = os.path.join(tmp, "deploy")
        shutil.copytree(deploy, copy_dir, symlinks=True,
                        ignore=lambda d, names: [CERT_DIR, "certs"] if os.path.basename(d) in CERT_OVERLAYS else [])
        for overlay in CERT_OVERLAYS:
            subprocess.run([os.path.join(copy_dir, "gen-webhook-cert.sh"),
                            os.path.join(copy_dir, "overlays", overlay, CERT_DIR)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        yield copy_dir


def kustomize_dirs(deploy):
    dirs = {"base": os.path.join(deploy, "base")}
    overlays = os.path.join(deploy, "overlays")
    for name in sorted(os.listdir(overlays)):
        if os.path.isfile(os.path.join(overlays, name, "kustomization.yaml")):
            dirs["overlays/" + name] = os.path.join(overlays, name)
    return dirs


def render(kubectl, directory):
    """Returns (objects, error text)."""
    result = subprocess.run([kubectl, "kustomize", directory], capture_output=True, text=True)
    if result.returncode != 0:
        return None, result.stderr.strip() or "exit status %d" % result.returncode
    # kubectl prints kustomize's deprecation warnings on stderr and still succeeds: a user sees
    # them on every apply, so they fail the render.
    warnings = [line for line in result.stderr.splitlines() if "Warning" in line]
    if warnings:
        return None, "\n".join(warnings)
    return [d for d in yaml.safe_load_all(result.stdout) if d], None


def render_all(kubectl, deploy, report):
    """{name: objects} for every overlay (not the base) that renders; failures reported."""
    out = {}
    for name, directory in kustomize_dirs(deploy).items():
        objects, error = render(kubectl, directory)
        if report.check(objects is not None, "%s renders with kubectl kustomize" % name, error):
            if name != "base":
                out[name] = objects
    return out


def key(obj):
    return "%s %s/%s" % (obj["kind"], obj["metadata"].get("namespace", "-"), obj["metadata"]["name"])


def find(objects, kind, name=None):
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects, kind, name):
    found = find(objects, kind, name)
    if len(found) != 1:
        raise LookupError("expected one %s %s, found %d" % (kind, name, len(found)))
    return found[0]


# --- render ------------------------------------------------------------------------------------

def cmd_render(args):
    report = Report()
    with scratch_deploy(args.deploy) as deploy:
        rendered = render_all(args.kubectl, deploy, report)
        for name, objects in rendered.items():
            keys = [key(o) for o in objects]
            report.check(len(keys) == len(set(keys)), "%s: no object twice" % name,
                         str(sorted(k for k in keys if keys.count(k) > 1)))
            for obj in objects:
                scoped = obj["kind"] in CLUSTER_SCOPED
                ns = obj["metadata"].get("namespace")
                report.check(ns is None if scoped else ns == NAMESPACE,
                             "%s: %s %s" % (name, key(obj),
                                            "has no namespace" if scoped else "is in " + NAMESPACE),
                             "namespace is %r" % ns)
    # Before the one documented step, an overlay that needs certificates must say how to get them.
    with tempfile.TemporaryDirectory(prefix="kvgpu-deploy-") as tmp:
        copy_dir = os.path.join(tmp, "deploy")
        shutil.copytree(args.deploy, copy_dir, symlinks=True,
                        ignore=lambda d, names: [CERT_DIR, "certs"] if os.path.basename(d) in CERT_OVERLAYS else [])
        for overlay in CERT_OVERLAYS:
            objects, error = render(args.kubectl, os.path.join(copy_dir, "overlays", overlay))
            report.check(objects is None and "gen-webhook-cert.sh" in (error or ""),
                         "%s without certificates fails naming deploy/gen-webhook-cert.sh" % overlay,
                         error or "it rendered")
    return report.finish()


# --- schema ------------------------------------------------------------------------------------

def strict(schema):
    """Kubernetes rejects unknown fields (kubectl's and the API server's strict field
    validation); OpenAPI leaves them open, so close every object that lists its properties."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


class Validators:
    def __init__(self, k8s_path, crd_paths):
        import jsonschema
        self.jsonschema = jsonschema
        with open(k8s_path) as f:
            k8s = json.load(f)
        self.kinds = k8s["kinds"]
        self.root = {"components": strict(k8s["components"])}
        self.resolver = jsonschema.RefResolver.from_schema(self.root)
        self.crds = {}
        for crd_path in crd_paths:
            with open(crd_path) as f:
                self.crds.update({k: strict(v) for k, v in json.load(f).items()})

    def for_object(self, obj):
        ident = "%s %s" % (obj.get("apiVersion"), obj.get("kind"))
        if ident in self.kinds:
            schema = {"$ref": "#/components/schemas/" + self.kinds[ident]}
            # OpenAPI 3.0 schemas are close to Draft 4; "format" is not asserted, as in kubectl.
            return self.jsonschema.Draft4Validator(schema, resolver=self.resolver)
        crd_key = "%s/%s" % (obj.get("apiVersion"), obj.get("kind"))
        if crd_key in self.crds:
            schema = copy.deepcopy(self.crds[crd_key])
            # The API server fills these in for every custom resource; the CRD schema omits them.
            schema.setdefault("properties", {}).setdefault("metadata", {"type": "object"})
            schema["properties"].setdefault("apiVersion", {"type": "string"})
            schema["properties"].setdefault("kind", {"type": "string"})
            return self.jsonschema.Draft4Validator(schema)
        return None

    def errors(self, obj):
        validator = self.for_object(obj)
        if validator is None:
            return ["no schema for %s %s" % (obj.get("apiVersion"), obj.get("kind"))]
        return ["%s at /%s" % (e.message, "/".join(map(str, e.absolute_path)))
                for e in validator.iter_errors(obj)]


def cmd_schema(args):
    report = Report()
    validators = Validators(args.k8s_schemas, args.crd_schemas)
    # A validator that accepts everything would make this test unable to fail; prove it bites.
    bad = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x"},
           "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "imagePullPolicy": "Sometimes", "mountz": []}]}}}}
    found = " ".join(validators.errors(bad))
    report.check("mountz" in found, "the schema refuses an unknown field", found)
    bad_cert = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "x"},
                "spec": {"secretName": "s", "issuerRef": {"name": "i"}, "dnsName": ["x"]}}
    found = " ".join(validators.errors(bad_cert))
    report.check("dnsName" in found, "the cert-manager schema refuses an unknown field", found)
    bad_rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                "metadata": {"name": "x"}, "spec": {"groups": [{"name": "g", "rules": [{"alert": "a"}]}]}}
    found = " ".join(validators.errors(bad_rule))
    report.check("expr" in found, "the Prometheus Operator schema refuses a rule without expr", found)
    with scratch_deploy(args.deploy) as deploy:
        rendered = render_all(args.kubectl, deploy, report)
        monitoring, error = render(args.kubectl, os.path.join(deploy, "monitoring"))
        if report.check(monitoring is not None, "monitoring renders with kubectl kustomize", error):
            rendered["monitoring"] = monitoring
        for name, objects in rendered.items():
            for obj in objects:
                errors = validators.errors(obj)
                report.check(not errors, "%s: %s validates" % (name, key(obj)), "; ".join(errors[:5]))
    return report.finish()


# --- monitoring: the alerts ask for metrics the programs export ---------------------------------

def exported_metrics(repo):
    """Metric family names the C++ code registers (prometheus-cpp's `.Name("...")`)."""
    names = set()
    for folder in ("deviceplugin", "webhook", "https", "extender", "validator"):
        for path in sorted(glob.glob(os.path.join(repo, folder, "**", "*.cpp"), recursive=True)):
            with open(path) as f:
                names.update(re.findall(r'\.Name\("(kvgpu_[a-z0-9_]+)"\)', f.read()))
    return names


def cmd_monitoring(args):
    report = Report()
    exported = exported_metrics(args.repo)
    report.check(len(exported) > 5, "metric names found in the code", str(sorted(exported)))
    objects, error = render(args.kubectl, os.path.join(args.deploy, "monitoring"))
    if not report.check(objects is not None, "monitoring renders", error):
        return report.finish()
    alerts = []
    for rule_set in find(objects, "PrometheusRule"):
        for group in rule_set["spec"]["groups"]:
            for rule in group["rules"]:
                alerts.append(rule.get("alert", rule.get("record")))
                for metric in re.findall(r"\bkvgpu_[a-z0-9_]+", str(rule["expr"])):
                    # Counters and histograms are exported under suffixed series names.
                    family = re.sub(r"_(total|bucket|sum|count)$", "", metric)
                    report.check(metric in exported or family in exported,
                                 "%s: %s is a metric the programs export" % (rule.get("alert"), metric))
    # The Grafana dashboard's queries too (tests/monitoring asks a real Prometheus; this is the
    # quick check of the names).
    dashboard_path = os.path.join(args.deploy, "monitoring", "dashboards", "kata-vgpu.json")
    with open(dashboard_path) as f:
        dashboard = json.load(f)
    exprs = [v["definition"] for v in dashboard["templating"]["list"] if v.get("definition")]
    for panel in dashboard["panels"]:
        exprs += [t["expr"] for t in panel.get("targets", [])]
    report.check(len(exprs) > 10, "the dashboard has queries", dashboard_path)
    for expr in exprs:
        for metric in re.findall(r"\bkvgpu_[a-z0-9_]+", expr):
            family = re.sub(r"_(total|bucket|sum|count)$", "", metric)
            report.check(metric in exported or family in exported,
                         "dashboard: %s is a metric the programs export" % metric)
    for wanted in ("KataVgpuWebhookDown", "KataVgpuPluginMissing", "KataVgpuRegistrationFailing",
                   "KataVgpuLeaked"):
        report.check(wanted in alerts, "the rules alert on %s" % wanted)
    monitors = {m["metadata"]["name"]: m for m in find(objects, "PodMonitor")}
    with scratch_deploy(args.deploy) as deploy:
        rendered = render_all(args.kubectl, deploy, report)
    for overlay, objs in rendered.items():
        for workload in find(objs, "DaemonSet") + find(objs, "Deployment"):
            name = workload["metadata"]["name"]
            ports = {p.get("name") for c in containers(pod_spec(workload)) for p in c.get("ports") or []}
            monitor = monitors.get(name)
            if report.check(monitor is not None, "%s: %s has a PodMonitor" % (overlay, name)):
                selector = monitor["spec"]["selector"]["matchLabels"]
                labels = workload["spec"]["template"]["metadata"].get("labels") or {}
                report.check(all(labels.get(k) == v for k, v in selector.items()),
                             "%s: the PodMonitor %s selects its pods" % (overlay, name))
                for endpoint in monitor["spec"]["podMetricsEndpoints"]:
                    report.check(endpoint.get("port") in ports,
                                 "%s: the PodMonitor %s scrapes a port the pods name" % (overlay, name),
                                 str(sorted(p for p in ports if p)))
    return report.finish()


# --- policy ------------------------------------------------------------------------------------

def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def containers(spec):
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def flags(container):
    """--name=value arguments of a container as a dict (the manifests use that form only)."""
    out = {}
    for arg in (container.get("command") or []) + (container.get("args") or []):
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            out[name] = value
    return out


def mount_for(container, spec, path):
    """The (volumeMount, volume) through which `path` is reached in the container, if any: the
    deepest mount whose mountPath is path or one of its parents."""
    best = None
    for mount in container.get("volumeMounts") or []:
        mp = mount["mountPath"].rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/") or mp == "/":
            if best is None or len(mp) > len(best["mountPath"]):
                best = mount
    if best is None:
        return None, None
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    return best, volumes.get(best["name"])


def host_path_matches(container, spec, path, writable):
    """`path` inside the container is the same path on the host."""
    mount, volume = mount_for(container, spec, path)
    if mount is None or volume is None or "hostPath" not in volume:
        return False, "%s is not mounted from the host" % path
    relative = path[len(mount["mountPath"].rstrip("/")):]
    host = volume["hostPath"]["path"].rstrip("/") + relative
    if host.rstrip("/") != path.rstrip("/"):
        return False, "%s comes from host path %s" % (path, host)
    if writable and mount.get("readOnly"):
        return False, "%s is mounted read-only" % path
    return True, ""


def configmap_file(objects, container, spec, path):
    """The text a container sees at `path` when it comes from a ConfigMap volume, else None."""
    mount, volume = mount_for(container, spec, path)
    if mount is None or volume is None or "configMap" not in volume:
        return None
    if mount.get("subPath"):
        return None  # subPath mounts never see updates; the manifests do not use them
    key_name = path[len(mount["mountPath"].rstrip("/")) + 1:]
    cms = find(objects, "ConfigMap", volume["configMap"]["name"])
    if not cms:
        return None
    return (cms[0].get("data") or {}).get(key_name)


def secret_files(objects, container, spec, paths):
    """True when every path comes from one Secret volume with that key (or a cert-manager
    Certificate will write that Secret)."""
    names = set()
    for path in paths:
        mount, volume = mount_for(container, spec, path)
        if mount is None or volume is None or "secret" not in volume:
            return False, "%s is not mounted from a Secret" % path
        names.add((volume["secret"]["secretName"], path[len(mount["mountPath"].rstrip("/")) + 1:]))
    secret_names = {n for n, _ in names}
    if len(secret_names) != 1:
        return False, "the files come from several Secrets %s" % sorted(secret_names)
    secret_name = secret_names.pop()
    secrets = find(objects, "Secret", secret_name)
    certificates = [c for c in find(objects, "Certificate") if c["spec"].get("secretName") == secret_name]
    if secrets:
        data = secrets[0].get("data") or {}
        missing = [k for _, k in names if k not in data]
        return not missing, "Secret %s has no key %s" % (secret_name, missing)
    if certificates:
        # cert-manager writes tls.crt, tls.key and ca.crt.
        missing = [k for _, k in names if k not in ("tls.crt", "tls.key", "ca.crt")]
        return not missing, "cert-manager writes no key %s" % missing
    return False, "no Secret or Certificate makes Secret %s" % secret_name


def port_number(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return p["containerPort"]
    return None


def check_workloads(report, name, objects):
    for workload in [o for o in objects if o["kind"] in WORKLOAD_KINDS]:
        spec = pod_spec(workload)
        for c in containers(spec):
            where = "%s: %s container %s" % (name, key(workload), c["name"])
            res = c.get("resources") or {}
            report.check(all(k in (res.get("requests") or {}) for k in ("cpu", "memory"))
                         and "memory" in (res.get("limits") or {}),
                         where + " requests cpu+memory and limits memory", json.dumps(res))
            report.check("livenessProbe" in c and "readinessProbe" in c,
                         where + " has liveness and readiness probes")
            for probe_name in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = c.get(probe_name)
                if probe and "httpGet" in probe:
                    report.check(port_number(c, probe["httpGet"]["port"]) is not None,
                                 where + " %s port is a port of the container" % probe_name)
            sc = c.get("securityContext") or {}
            if workload["metadata"]["name"] == "kvgpu-validator":
                check_validator_container(report, where, spec, c)
            elif workload["metadata"]["name"] != "kvgpu-device-plugin":
                report.check(not sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False,
                             where + " is not privileged and cannot escalate", json.dumps(sc))
                report.check(sc.get("readOnlyRootFilesystem") is True, where + " has a read-only root filesystem")
                report.check("ALL" in ((sc.get("capabilities") or {}).get("drop") or []),
                             where + " drops all capabilities")
                psc = spec.get("securityContext") or {}
                report.check((sc.get("runAsNonRoot") or psc.get("runAsNonRoot")) is True
                             and (sc.get("runAsUser", psc.get("runAsUser")) or 0) != 0,
                             where + " runs as a non-root user")
                report.check(not spec.get("hostNetwork") and not spec.get("hostPID") and not any(
                    "hostPath" in v for v in spec.get("volumes") or []), where + " uses no host namespace or path")
        for c in spec.get("containers") or []:
            image = c.get("image", "")
            report.check(re.match(r"^[^:@]+(:[A-Za-z0-9_][A-Za-z0-9_.-]*)$", image.rsplit("/", 1)[-1]) is not None
                         and not image.endswith(":latest"),
                         "%s: %s image %s has a fixed tag" % (name, key(workload), image))


def check_validator_container(report, where, spec, c):
    """The validator reads the node (the doctor, vgpuctl list, the plugin's state) and changes
    nothing there: root for root-only files, but unprivileged, no capability, every host path
    mounted read-only, no host namespace (docs/validator.md)."""
    sc = c.get("securityContext") or {}
    report.check(not sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False
                 and sc.get("readOnlyRootFilesystem") is True
                 and (sc.get("capabilities") or {}).get("drop") == ["ALL"]
                 and not (sc.get("capabilities") or {}).get("add"),
                 where + " is unprivileged, cannot escalate, has no capability", json.dumps(sc))
    host_volumes = {v["name"] for v in spec.get("volumes") or [] if "hostPath" in v}
    report.check(all(m.get("readOnly") is True for m in c.get("volumeMounts") or []
                     if m["name"] in host_volumes),
                 where + " mounts host paths read-only")
    report.check(not spec.get("hostNetwork") and not spec.get("hostPID"), where + " uses no host namespace")


def check_validator_rbac(report, name, objects):
    if not find(objects, "ClusterRole", "kvgpu-validator"):
        return
    granted = set()
    for kind in ("ClusterRole", "Role"):
        role = one(objects, kind, "kvgpu-validator")
        granted |= {(kind, r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    wanted = ({("ClusterRole", "nodes", v) for v in ("get", "patch")} | {("ClusterRole", "nodes/status", "patch"),
              ("ClusterRole", "events", "create"), ("Role", "pods/log", "get")}
              | {("Role", "pods", v) for v in ("create", "get", "delete")})
    report.check(granted == wanted, "%s: the validator may read and patch nodes and their status, create "
                 "events, and create/get/delete pods and read their logs in its namespace, nothing else" % name,
                 str(sorted(granted ^ wanted)))
    role = one(objects, "Role", "kvgpu-validator")
    report.check(role["metadata"].get("namespace") == NAMESPACE, "%s: the validator's pod rights are in %s only"
                 % (name, NAMESPACE))


def check_device_plugin(report, name, objects):
    ds = one(objects, "DaemonSet", "kvgpu-device-plugin")
    spec = pod_spec(ds)
    c = [c for c in spec["containers"] if c["name"] == "device-plugin"][0]
    f = flags(c)
    where = "%s: device plugin" % name
    report.check(c.get("securityContext", {}).get("privileged") is True and len(spec["containers"]) == 1,
                 where + ": privileged only in its one container")
    # The udev monitor reads kernel uevents, which only the host network namespace receives.
    report.check(spec.get("hostNetwork") is True, where + " is on the host network (kernel uevents)")
    config_text = configmap_file(objects, c, spec, f.get("config", ""))
    config = yaml.safe_load(config_text or "") or {}
    # The sysfs backend writes sysfs; the libvirt backend only reads it and talks to the host's
    # libvirtd through its socket (docs/libvirt-backend.md).
    backend = config.get("backend", "sysfs")
    sysfs_root = f.get("sysfs-root", "/")
    ok, why = host_path_matches(c, spec, os.path.join(sysfs_root, "sys"), writable=backend == "sysfs")
    report.check(ok, where + " --sysfs-root: <root>/sys is the host's /sys%s (backend %s)"
                 % (", writable" if backend == "sysfs" else "", backend), why)
    if backend == "libvirt":
        ok, why = host_path_matches(c, spec, "/var/run/libvirt", writable=False)
        report.check(ok and config.get("libvirtURI", "qemu:///system").endswith(":///system"),
                     where + " reaches the host's libvirtd: /var/run/libvirt is the host's, the URI "
                     "a local system one", why)
    kubelet_dir = f.get("kubelet-dir", "/var/lib/kubelet")
    ok, why = host_path_matches(c, spec, os.path.join(kubelet_dir, "device-plugins"), writable=True)
    report.check(ok, where + " --kubelet-dir: device-plugins/ is the host's, writable (sockets)", why)
    ok, why = host_path_matches(c, spec, os.path.join(kubelet_dir, "pod-resources"), writable=False)
    report.check(ok, where + " --kubelet-dir: pod-resources/ is the host's", why)
    state_dir = f.get("state-dir", "/var/lib/kata-vgpu")
    ok, why = host_path_matches(c, spec, state_dir, writable=True)
    report.check(ok, where + " --state-dir is a writable host directory (survives restarts)", why)
    ok, why = host_path_matches(c, spec, "/dev/vfio", writable=False)
    report.check(ok, where + " sees the host's /dev/vfio", why)
    # Licence once per cluster: the source is the ConfigMap and Secret of this namespace, the
    # target a host directory the injected gridd mounts.
    ok, why = host_path_matches(c, spec, f.get("licensing-dir", ""), writable=True)
    report.check("licensing-dir" in f and ok,
                 where + " --licensing-dir is a writable host directory", why)
    source_mount, source_volume = mount_for(c, spec, f.get("licensing-source", "/nonexistent"))
    sources = (source_volume or {}).get("projected", {}).get("sources", [])
    report.check(source_mount is not None and
                 source_mount["mountPath"].rstrip("/") == f.get("licensing-source", "").rstrip("/") and
                 {"kvgpu-gridd-conf"} == {x["configMap"]["name"] for x in sources if "configMap" in x} and
                 {"kvgpu-client-token"} == {x["secret"]["name"] for x in sources if "secret" in x},
                 where + " --licensing-source is the projected kvgpu-gridd-conf + kvgpu-client-token")
    report.check("config" in f and config_text is not None,
                 where + " --config %s is a key of a mounted ConfigMap" % f.get("config"))
    cdi = config.get("cdi") or {}
    cdi_dir = cdi.get("dir", "/var/run/cdi")
    ok, why = host_path_matches(c, spec, cdi_dir, writable=True)
    report.check(ok, where + " config cdi.dir %s is the host's, writable (enabled: %s)"
                 % (cdi_dir, cdi.get("enabled", False)), why)
    # DRA (docs/dra-kubelet-plugin.md): kubelet finds the plugin in plugins_registry/ and calls it
    # on plugins/<driver>/dra.sock; the metadata files under plugins/ are mounted by their host path.
    dra = config.get("dra") or {}
    if dra.get("allGPUs") or dra.get("gpus"):
        for sub in ("plugins", "plugins_registry"):
            ok, why = host_path_matches(c, spec, os.path.join(kubelet_dir, sub), writable=True)
            report.check(ok, where + " serves DRA: %s/ is the host's, writable (sockets)" % sub, why)
    env = {e["name"]: e for e in c.get("env") or []}
    report.check(f.get("node-name") == "$(NODE_NAME)" and
                 env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
                 where + " --node-name is the node's name from the downward API")
    metrics_port = int(f.get("metrics-addr", ":0").rsplit(":", 1)[1])
    report.check(metrics_port != 0 and metrics_port in [p["containerPort"] for p in c.get("ports") or []]
                 and all(port_number(c, c[p]["httpGet"]["port"]) == metrics_port
                         for p in ("livenessProbe", "readinessProbe")),
                 where + " probes and port match --metrics-addr")
    report.check(all((c.get(p) or {}).get("httpGet", {}).get("path") == "/healthz"
                     for p in ("livenessProbe", "readinessProbe")),
                 where + " probes ask /healthz (the daemon loop turning), not /metrics")
    terms = (spec.get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", []))
    report.check(bool(terms) or bool(spec.get("nodeSelector")), where + " runs only on selected (vGPU) nodes")
    report.check(bool(spec.get("tolerations")), where + " tolerates GPU node taints")


def check_webhook(report, name, objects):
    where = "%s: webhook" % name
    deployment = one(objects, "Deployment", "kvgpu-webhook")
    spec = pod_spec(deployment)
    c = spec["containers"][0]
    f = flags(c)
    listen_port = int(f.get("listen", ":8443").rsplit(":", 1)[1])
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (c.get(probe) or {}).get("httpGet") or {}
        report.check(get.get("scheme") == "HTTPS" and get.get("path") == path
                     and port_number(c, get.get("port")) == listen_port,
                     where + " %s is HTTPS %s on the --listen port" % (probe, path), json.dumps(get))
    ok, why = secret_files(objects, c, spec, [f.get("tls-cert-file", ""), f.get("tls-key-file", "")])
    report.check(ok, where + " --tls-cert-file and --tls-key-file come from one Secret", why)
    report.check(configmap_file(objects, c, spec, f.get("config", "")) is not None,
                 where + " --config %s is a key of a mounted ConfigMap" % f.get("config"))
    sa = spec.get("serviceAccountName")
    bound = [b for b in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding")
             if any(s.get("kind") == "ServiceAccount" and s.get("name") == sa for s in b.get("subjects") or [])]
    if "--in-cluster" not in (c.get("args") or []):
        report.check(spec.get("automountServiceAccountToken") is False, where + " gets no API token")
        report.check(not bound, where + " service account %s is bound to no role (it calls no API)" % sa,
                     str([key(b) for b in bound]))
    else:
        # DRA claim lookups (docs/webhook.md, "DRA claims"): get on claims and templates, nothing else.
        report.check(spec.get("automountServiceAccountToken") is True, where + " --in-cluster gets a token")
        roles = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bound}
        granted = {(g, r, v) for kind, role in roles for o in find(objects, kind) if o["metadata"]["name"] == role
                   for rule in o.get("rules") or [] for g in rule["apiGroups"] for r in rule["resources"]
                   for v in rule["verbs"]}
        wanted = {("resource.k8s.io", r, "get") for r in ("resourceclaims", "resourceclaimtemplates")}
        report.check(granted == wanted,
                     where + " --in-cluster: may get resourceclaims and resourceclaimtemplates, nothing else",
                     str(sorted(granted ^ wanted)))

    services = [s for s in find(objects, "Service")
                if all(spec_labels_match(s["spec"].get("selector") or {}, deployment))]
    for config in find(objects, "MutatingWebhookConfiguration"):
        for hook in config["webhooks"]:
            hw = "%s: %s/%s" % (name, config["metadata"]["name"], hook["name"])
            report.check(hook.get("admissionReviewVersions") == ["v1"], hw + " admissionReviewVersions [v1]")
            report.check(hook.get("sideEffects") == "None", hw + " sideEffects None")
            report.check(0 < hook.get("timeoutSeconds", 10) <= 10, hw + " timeout at most 10 s")
            report.check(hook.get("reinvocationPolicy") == "IfNeeded", hw + " reinvocationPolicy IfNeeded")
            report.check(bool(hook.get("matchConditions")), hw + " is scoped by matchConditions")
            excluded = [v for e in (hook.get("namespaceSelector") or {}).get("matchExpressions") or []
                        if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
                        for v in e["values"]]
            report.check(NAMESPACE in excluded and "kube-system" in excluded,
                         hw + " never handles its own namespace or kube-system", str(excluded))
            ref = hook["clientConfig"].get("service") or {}
            target = [s for s in services if s["metadata"]["name"] == ref.get("name")
                      and s["metadata"].get("namespace") == ref.get("namespace")]
            ok = len(target) == 1 and any(
                p["port"] == ref.get("port", 443) and port_number(c, p.get("targetPort", p["port"])) == listen_port
                for p in target[0]["spec"]["ports"])
            report.check(ok, hw + " reaches the webhook's --listen port through its Service")
            report.check(ref.get("path") == "/mutate", hw + " calls /mutate")
            has_ca = bool(hook["clientConfig"].get("caBundle")) or \
                "cert-manager.io/inject-ca-from" in (config["metadata"].get("annotations") or {})
            report.check(has_ca, hw + " has a caBundle or cert-manager injects one")
            # failurePolicy defaults to Fail in admissionregistration.k8s.io/v1.
            if hook.get("failurePolicy", "Fail") == "Fail":
                replicas = deployment["spec"].get("replicas", 1)
                report.check(replicas >= 2, hw + " failurePolicy Fail: the webhook runs >= 2 replicas",
                             "replicas %d" % replicas)
                report.check(deployment["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxUnavailable") == 0,
                             hw + " failurePolicy Fail: a rollout keeps every replica until its successor is ready")
                pdbs = [p for p in find(objects, "PodDisruptionBudget")
                        if all(spec_labels_match(p["spec"]["selector"].get("matchLabels") or {}, deployment))]
                good = [p for p in pdbs if p["spec"].get("minAvailable", 0) >= 1 or
                        (isinstance(p["spec"].get("maxUnavailable"), int) and p["spec"]["maxUnavailable"] < replicas)]
                report.check(bool(good), hw + " failurePolicy Fail: a PodDisruptionBudget keeps a replica up")
                anti = spec.get("affinity", {}).get("podAntiAffinity") or spec.get("topologySpreadConstraints")
                report.check(bool(anti), hw + " failurePolicy Fail: replicas are spread over nodes")


def spec_labels_match(selector, workload):
    labels = workload["spec"]["template"]["metadata"].get("labels") or {}
    yield bool(selector)
    for k, v in selector.items():
        yield labels.get(k) == v


def check_rbac(report, name, objects):
    for role in find(objects, "ClusterRole") + find(objects, "Role"):
        for rule in role.get("rules") or []:
            report.check("*" not in rule.get("verbs", []) and "*" not in rule.get("resources", [])
                         and "*" not in rule.get("apiGroups", []),
                         "%s: %s has no wildcard rule" % (name, key(role)), json.dumps(rule))
    plugin = one(objects, "ClusterRole", "kvgpu-device-plugin")
    granted = {(g, r, v) for rule in plugin["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    wanted = ({("", "pods", v) for v in ("get", "list", "watch")} | {("", "events", v) for v in ("create", "patch")}
              | {("", "nodes", "patch")})
    report.check(granted == wanted, "%s: device plugin may get/list/watch pods, create/patch events and patch "
                 "nodes (its vGPU state), nothing else" % name,
                 str(sorted(granted ^ wanted)))
    binding = one(objects, "ClusterRoleBinding", "kvgpu-device-plugin")
    ds = one(objects, "DaemonSet", "kvgpu-device-plugin")
    report.check(binding["roleRef"]["name"] == "kvgpu-device-plugin" and
                 any(s["name"] == pod_spec(ds)["serviceAccountName"] and s.get("namespace") == NAMESPACE
                     for s in binding["subjects"]),
                 "%s: the role is bound to the device plugin's service account" % name)


def cmd_policy(args):
    report = Report()
    with scratch_deploy(args.deploy) as deploy:
        for name, objects in render_all(args.kubectl, deploy, report).items():
            for check in (check_workloads, check_device_plugin, check_webhook, check_rbac,
                          check_validator_rbac):
                try:
                    check(report, name, objects)
                except (LookupError, KeyError, IndexError, TypeError, ValueError) as e:
                    report.check(False, "%s: %s" % (name, check.__name__), "%s: %s" % (type(e).__name__, e))
    return report.finish()


# --- consistency with the rest of the repository -----------------------------------------------

def gridd_keys(text, commented_too):
    keys = set()
    for line in text.splitlines():
        line = line.strip()
        if commented_too and line.startswith("#"):
            line = line.lstrip("#").strip()
        m = re.match(r"^([A-Za-z][A-Za-z0-9]*)=", line)
        if m:
            keys.add(m.group(1))
    return keys


def webhook_default_config(repo):
    """The webhook's built-in defaults, from the YAML text in webhook/config.cpp."""
    with open(os.path.join(repo, "webhook", "config.cpp")) as f:
        source = f.read()
    m = re.search(r'kDefaultYaml\s*=\s*R"\((.*?)\)"', source, re.S)
    text = m.group(1)
    # The values the programs share stand in the text by name (DefaultYaml() in config.cpp).
    with open(os.path.join(repo, "common", "cross_program.h")) as f:
        shared = dict(re.findall(r'\b(k\w+) = "([^"]*)";', f.read()))
    text = text.replace("$VGPU_RESOURCE_PREFIX", shared["kVgpuResourcePrefix"])
    text = text.replace("$LICENSING_DIR", shared["kLicensingDir"])
    return yaml.safe_load(text)


def merged(base, overlay):
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for k, v in overlay.items():
            out[k] = merged(base.get(k), v)
        return out
    return overlay


def project_version(repo):
    with open(os.path.join(repo, "CMakeLists.txt")) as f:
        return re.search(r"project\(kata-vgpu VERSION ([0-9.]+)", f.read()).group(1)


def cmd_consistency(args):
    report = Report()
    repo = args.repo
    with open(os.path.join(repo, "kata-config", "runtimeclass.yaml"), "rb") as a, \
            open(os.path.join(args.deploy, "base", "runtime", "runtimeclass.yaml"), "rb") as b:
        report.check(a.read() == b.read(),
                     "deploy/base/runtime/runtimeclass.yaml is a byte-identical copy of kata-config/runtimeclass.yaml",
                     "copy it again: cp kata-config/runtimeclass.yaml deploy/base/runtime/")
    with open(os.path.join(repo, "guest-image", "driver", "gridd.conf.template")) as f:
        template_keys = gridd_keys(f.read(), commented_too=True)
    defaults = webhook_default_config(repo)
    version = project_version(repo)
    with open(os.path.join(args.deploy, "base", "device-plugin", "config.yaml")) as f:
        base_plugin_config = yaml.safe_load(f) or {}
    with scratch_deploy(args.deploy) as deploy:
        for name, objects in render_all(args.kubectl, deploy, report).items():
            webhook_cm = one(objects, "ConfigMap", "kvgpu-webhook-config")
            config = merged(defaults, yaml.safe_load(webhook_cm["data"]["webhook.yaml"]))
            classes = sorted(o["metadata"]["name"] for o in find(objects, "RuntimeClass"))
            report.check(sorted(config["runtimeClassNames"]) == classes,
                         "%s: webhook runtimeClassNames are the RuntimeClasses deployed" % name,
                         "%s vs %s" % (config["runtimeClassNames"], classes))
            report.check(config["runtimeClassToSet"] in classes, "%s: webhook runtimeClassToSet is deployed" % name)
            for hook in [h for m in find(objects, "MutatingWebhookConfiguration") for h in m["webhooks"]]:
                text = " ".join(c["expression"] for c in hook.get("matchConditions") or [])
                in_cel = sorted(set(re.findall(r"startsWith\('([^']*)'\)", text)))
                report.check(in_cel == sorted(config["resourcePrefixes"]),
                             "%s: matchConditions test exactly the webhook's resourcePrefixes" % name,
                             "%s vs %s" % (in_cel, config["resourcePrefixes"]))
                # Field names the expression reads must exist in the Pod schema, or the API server
                # refuses the configuration.
                for field in re.findall(r"\b(?:object\.spec|c\.resources|c)\.([a-zA-Z]+)", text):
                    report.check(field in ("containers", "initContainers", "resources", "limits", "requests",
                                           "resourceClaims"),
                                 "%s: matchConditions read the Pod field %s" % (name, field))
                excluded = {v for e in (hook.get("namespaceSelector") or {}).get("matchExpressions") or []
                            if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
                            for v in e["values"]}
                report.check(excluded == set(config["excludedNamespaces"]),
                             "%s: namespaceSelector and the webhook's excludedNamespaces agree" % name,
                             "%s vs %s" % (sorted(excluded), config["excludedNamespaces"]))
            gridd = one(objects, "ConfigMap", "kvgpu-gridd-conf")["data"]["gridd.conf"]
            keys = gridd_keys(gridd, commented_too=False)
            report.check(keys and keys <= template_keys,
                         "%s: gridd.conf sets only keys of guest-image's template" % name, str(keys - template_keys))
            token_path = re.search(r"^ClientConfigTokenPath=(.*)$", gridd, re.M)
            host_paths = {v["name"]: v["hostPath"]["path"] for v in config["volumes"] if "hostPath" in v}
            gridd_mounts = {m["mountPath"]: host_paths.get(m["name"]) for m in config["gridd"]["volumeMounts"]}
            plugin = one(objects, "DaemonSet", "kvgpu-device-plugin")
            plugin_config = yaml.safe_load(
                one(objects, "ConfigMap", "kvgpu-device-plugin-config")["data"]["config.yaml"]) or {}
            if "dra" in plugin_config:
                # components/dra carries a copy of the base config with `dra` added: nothing else
                # may drift from the base.
                report.check({k: v for k, v in plugin_config.items() if k != "dra"} == base_plugin_config,
                             "%s: the DRA device-plugin config is the base config plus `dra`" % name)
            licensing_dir = flags(pod_spec(plugin)["containers"][0]).get("licensing-dir", "")
            report.check(token_path is not None and
                         gridd_mounts.get(token_path.group(1)) == licensing_dir + "/ClientConfigToken",
                         "%s: gridd.conf's ClientConfigTokenPath is where the webhook mounts the token "
                         "the device plugin publishes" % name,
                         "%s vs %s" % (token_path and token_path.group(1), gridd_mounts))
            report.check(gridd_mounts.get("/etc/nvidia/gridd.conf") == licensing_dir + "/gridd.conf",
                         "%s: the webhook mounts the gridd.conf the device plugin publishes" % name,
                         str(gridd_mounts))
            report.check(all(m.get("readOnly") for m in config["gridd"]["volumeMounts"]
                             if host_paths.get(m["name"], "").startswith(licensing_dir + "/")),
                         "%s: gridd mounts the licensing files read-only" % name)
            report.check(find(objects, "ConfigMap", "kvgpu-gridd-conf") and find(objects, "Secret", "kvgpu-client-token"),
                         "%s: the gridd ConfigMap and token Secret the device plugin publishes are deployed" % name)
            images = [c["image"] for w in objects if w["kind"] in WORKLOAD_KINDS for c in containers(pod_spec(w))]
            images += [config["driverInit"]["image"], config["gridd"]["image"]]
            tags = {i.rsplit(":", 1)[1] for i in images}
            report.check(all(re.match(r"^kata-vgpu/(device-plugin|webhook|scheduler-extender|guest-tools):", i) for i in images),
                         "%s: every image is one deploy/build-images.sh builds" % name, str(images))
            wanted_tag = "dev" if name.endswith("development") else version
            report.check(tags == {wanted_tag}, "%s: every image has tag %s" % (name, wanted_tag), str(sorted(tags)))
    return report.finish()


# --- kustomize: current idioms only ---------------------------------------------------------

def cmd_kustomize_current(args):
    report = Report()
    for name, directory in kustomize_dirs(args.deploy).items():
        path = os.path.join(directory, "kustomization.yaml")
        with open(path) as f:
            k = yaml.safe_load(f.read())
        report.check(not set(k) & KUSTOMIZE_DEPRECATED_FIELDS,
                     "%s: no field kustomize v5 deprecates" % name,
                     str(sorted(set(k) & KUSTOMIZE_DEPRECATED_FIELDS)))
        report.check("namespace" not in k, "%s: no top-level namespace" % name)
    return report.finish()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("render", "schema", "policy", "consistency", "monitoring"):
        p = sub.add_parser(name)
        p.add_argument("--kubectl", required=True)
        p.add_argument("--deploy", required=True)
        if name == "schema":
            p.add_argument("--k8s-schemas", required=True)
            p.add_argument("--crd-schemas", required=True, nargs="+")
        if name in ("consistency", "monitoring"):
            p.add_argument("--repo", required=True)
    p = sub.add_parser("kustomize-current")
    p.add_argument("--deploy", required=True)
    args = parser.parse_args()
    return {"render": cmd_render, "schema": cmd_schema, "policy": cmd_policy,
            "consistency": cmd_consistency, "monitoring": cmd_monitoring,
            "kustomize-current": cmd_kustomize_current}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
