#!/usr/bin/env python3
"""Judges every patch the webhook produced with tools that share no code with it.

Each case file (written by webhook_dump_patches) holds a pod and a JSON Patch. The patch is
applied with python3-jsonpatch (RFC 6902), and the result must
  * validate against the Kubernetes OpenAPI schema (no violation the input did not have) of io.k8s.api.core.v1.Pod ($refs resolved),
  * pass the API server's checks that the schema cannot express: unique container and volume
    names, mounts that name existing volumes, no mount path or env var twice in a container,
  * carry the marker annotation.
Usage: validate_patches.py DUMP_TOOL OPENAPI_JSON
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import jsonpatch
import jsonschema


def pod_validator(openapi_path):
    with open(openapi_path) as f:
        openapi = json.load(f)
    schema = {"$ref": "#/components/schemas/io.k8s.api.core.v1.Pod", "components": openapi["components"]}
    resolver = jsonschema.RefResolver.from_schema(openapi)
    # OpenAPI 3.0 schemas are close to Draft 4; "format" is not asserted, as in kubectl-validate.
    return jsonschema.Draft4Validator(schema, resolver=resolver)


def api_server_checks(pod):
    problems = []
    spec = pod["spec"]
    volumes = [v["name"] for v in spec.get("volumes") or []]
    if len(volumes) != len(set(volumes)):
        problems.append("duplicate volume names: %s" % volumes)
    names = []
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            names.append(c["name"])
            mounts = c.get("volumeMounts") or []
            paths = [m["mountPath"] for m in mounts]
            if len(paths) != len(set(paths)):
                problems.append("%s: duplicate mountPath %s" % (c["name"], paths))
            for m in mounts:
                if m["name"] not in volumes:
                    problems.append("%s mounts unknown volume %s" % (c["name"], m["name"]))
            env = [e["name"] for e in c.get("env") or []]
            if len(env) != len(set(env)):
                problems.append("%s: duplicate env %s" % (c["name"], env))
            if c.get("restartPolicy") not in (None, "Always"):
                problems.append("%s: restartPolicy %s" % (c["name"], c["restartPolicy"]))
            # Only init containers may set restartPolicy, and only those that are sidecars
            # (restartPolicy: Always) may have probes.
            if kind == "containers" and "restartPolicy" in c:
                problems.append("%s: restartPolicy on an ordinary container" % c["name"])
            if kind == "initContainers" and c.get("restartPolicy") != "Always":
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    if probe in c:
                        problems.append("%s: %s on an init container that is no sidecar" % (c["name"], probe))
    if len(names) != len(set(names)):
        problems.append("duplicate container names: %s" % names)
    return problems


def hot_plug_checks(pod, patched):
    """On hot-plug the vGPU is attached when the container asking for it is created, which
    kubelet does only after every init container finished and every sidecar started (passed its
    startup probe). An injected init container that must finish, or a sidecar with a startup
    probe, waiting for that device deadlocks the pod."""
    problems = []
    users = {c["name"] for kind in ("initContainers", "containers", "ephemeralContainers")
             for c in pod["spec"].get(kind) or []}
    for c in patched["spec"].get("initContainers") or []:
        if c["name"] in users:
            continue
        if c.get("restartPolicy") != "Always":
            problems.append("hot-plug: injected init container %s must finish before the vGPU "
                            "arrives" % c["name"])
        if "startupProbe" in c:
            problems.append("hot-plug: injected sidecar %s has a startup probe the vGPU's "
                            "arrival waits for" % c["name"])
    return problems


def main():
    dump_tool, openapi_path = sys.argv[1], sys.argv[2]
    validator = pod_validator(openapi_path)
    failures = 0
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([dump_tool, out], check=True)
        files = sorted(glob.glob(os.path.join(out, "case-*.json")))
        for path in files:
            with open(path) as f:
                case = json.load(f)
            name = case["description"]
            try:
                patched = jsonpatch.apply_patch(case["pod"], case["patch"])
            except jsonpatch.JsonPatchException as e:
                print("FAIL %s: patch does not apply: %s" % (name, e))
                failures += 1
                continue
            # Some cases feed deliberately odd input (explicit nulls the API server would never
            # send); the patch must not add a violation of its own.
            def violations(doc):
                return {"schema: %s at %s" % (e.message, "/".join(map(str, e.absolute_path)))
                        for e in validator.iter_errors(doc)}
            before = violations(case["pod"])
            problems = sorted(violations(patched) - before)
            if before:
                print("note %s: the input pod itself has %d schema violation(s)" % (name, len(before)))
            problems += api_server_checks(patched)
            if patched["spec"].get("runtimeClassName") not in case["coldPlugRuntimeClassNames"]:
                problems += hot_plug_checks(case["pod"], patched)
            if patched["metadata"].get("annotations", {}).get(case["markerAnnotation"]) != "true":
                problems.append("marker annotation missing")
            if problems:
                failures += 1
                print("FAIL %s:\n  %s" % (name, "\n  ".join(problems)))
            else:
                print("ok   %s" % name)
        # A schema that accepts everything would make this test unable to fail; prove it bites.
        broken = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": 7}]}}
        if validator.is_valid(broken):
            print("FAIL the schema accepted a container whose name is a number")
            failures += 1
        # Likewise the hot-plug check: the cold-plug layout must fail it.
        cold = {"spec": {"initContainers": [{"name": "driver"}, {"name": "gridd", "restartPolicy": "Always",
                                                                 "startupProbe": {}}]}}
        if len(hot_plug_checks({"spec": {}}, cold)) != 2:
            print("FAIL the hot-plug check accepted the cold-plug layout")
            failures += 1
        print("%d passed, %d failed" % (len(files) - failures, failures))
    return 1 if failures or not files else 0


if __name__ == "__main__":
    sys.exit(main())
