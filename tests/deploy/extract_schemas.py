#!/usr/bin/env python3
"""Makes tests/deploy/data/*.json from upstream API definitions (run by hand; see SOURCES.md).

  extract_schemas.py k8s OUT.json OPENAPI_V3.json...
      For each kind deploy/ uses, the schema of that kind and every schema it reaches through
      $ref, from Kubernetes' api/openapi-spec/v3 documents. Descriptions are dropped (they are
      most of the bytes); everything else is kept as upstream wrote it.
  extract_schemas.py crd OUT.json CRD.yaml...
      The openAPIV3Schema of each CRD's served storage version, keyed "group/version/Kind",
      descriptions dropped.
"""
import json
import sys

import yaml

# (apiVersion, kind) deploy/ renders, and the schema name upstream gives each.
K8S_KINDS = {
    ("v1", "Namespace"): "io.k8s.api.core.v1.Namespace",
    ("v1", "ServiceAccount"): "io.k8s.api.core.v1.ServiceAccount",
    ("v1", "Service"): "io.k8s.api.core.v1.Service",
    ("v1", "ConfigMap"): "io.k8s.api.core.v1.ConfigMap",
    ("v1", "Secret"): "io.k8s.api.core.v1.Secret",
    ("apps/v1", "DaemonSet"): "io.k8s.api.apps.v1.DaemonSet",
    ("apps/v1", "Deployment"): "io.k8s.api.apps.v1.Deployment",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "io.k8s.api.rbac.v1.ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "io.k8s.api.rbac.v1.ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "io.k8s.api.rbac.v1.Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "io.k8s.api.rbac.v1.RoleBinding",
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"):
        "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"):
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"):
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding",
    ("policy/v1", "PodDisruptionBudget"): "io.k8s.api.policy.v1.PodDisruptionBudget",
    ("node.k8s.io/v1", "RuntimeClass"): "io.k8s.api.node.v1.RuntimeClass",
    ("networking.k8s.io/v1", "NetworkPolicy"): "io.k8s.api.networking.v1.NetworkPolicy",
    ("resource.k8s.io/v1", "DeviceClass"): "io.k8s.api.resource.v1.DeviceClass",
}


def strip_descriptions(node):
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v.rsplit("/", 1)[1]
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def k8s(out, inputs):
    available = {}
    for path in inputs:
        with open(path) as f:
            available.update(json.load(f)["components"]["schemas"])
    wanted = sorted(set(K8S_KINDS.values()))
    schemas = {}
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in schemas:
            continue
        if name not in available:
            sys.exit("schema %s is in none of the inputs" % name)
        schemas[name] = strip_descriptions(available[name])
        todo.extend(refs(schemas[name]))
    kinds = {"%s %s" % key: value for key, value in sorted(K8S_KINDS.items())}
    with open(out, "w") as f:
        json.dump({"kinds": kinds, "components": {"schemas": dict(sorted(schemas.items()))}}, f,
                  indent=1, sort_keys=True)
        f.write("\n")


def crd(out, inputs):
    result = {}
    for path in inputs:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                spec = doc["spec"]
                for version in spec["versions"]:
                    if version.get("served") and version.get("storage"):
                        key = "%s/%s/%s" % (spec["group"], version["name"], spec["names"]["kind"])
                        result[key] = strip_descriptions(version["schema"]["openAPIV3Schema"])
    with open(out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in ("k8s", "crd"):
        sys.exit(__doc__)
    {"k8s": k8s, "crd": crd}[sys.argv[1]](sys.argv[2], sys.argv[3:])
