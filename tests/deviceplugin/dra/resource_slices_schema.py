#!/usr/bin/env python3
"""Judges the ResourceSlices and DeviceClasses the project builds against Kubernetes' own OpenAPI
schema of resource.k8s.io/v1 (data/SOURCES.md), with tools that share no code with the builder.

Runs DUMP_TOOL into a scratch directory; every object it writes, and the DRA objects deploy/
ships (DeviceClasses, the ResourceClaimTemplate examples), must validate against
io.k8s.api.resource.v1.{ResourceSlice,DeviceClass,ResourceClaimTemplate} with unknown fields refused (the API server's
strict field validation), as tests/deploy/check_deploy.py validates deploy/. First it proves the
validator bites: an unknown field, a wrong type and a missing required field must each fail.
Usage: resource_slices_schema.py DUMP_TOOL OPENAPI_JSON
"""
import copy
import glob
import json
import os
import subprocess
import sys
import tempfile

import jsonschema
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy"))
from check_deploy import strict  # noqa: E402  (the one rule for closing OpenAPI objects)

KINDS = {"ResourceSlice": "io.k8s.api.resource.v1.ResourceSlice",
         "DeviceClass": "io.k8s.api.resource.v1.DeviceClass",
         "ResourceClaimTemplate": "io.k8s.api.resource.v1.ResourceClaimTemplate"}
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
# What deploy/ ships for DRA: the DeviceClasses and the tenants' claim template examples.
SHIPPED = ["deploy/components/dra/device-classes.yaml",
           "deploy/components/dra/examples/claim-templates.yaml"]


def validators(openapi_path):
    with open(openapi_path) as f:
        root = {"components": strict(json.load(f)["components"])}
    resolver = jsonschema.RefResolver.from_schema(root)
    # OpenAPI 3.0 schemas are close to Draft 4; "format" is not asserted, as in kubectl-validate.
    return {kind: jsonschema.Draft4Validator({"$ref": "#/components/schemas/" + name},
                                             resolver=resolver)
            for kind, name in KINDS.items()}


def errors(checks, obj):
    validator = checks.get(obj.get("kind"))
    if validator is None:
        return ["no schema for kind %s" % obj.get("kind")]
    return ["%s at /%s" % (e.message, "/".join(map(str, e.absolute_path)))
            for e in validator.iter_errors(obj)]


def main():
    dump_tool, openapi_path = sys.argv[1], sys.argv[2]
    checks = validators(openapi_path)
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([dump_tool, scratch], check=True)
        objects = []
        for path in sorted(glob.glob(os.path.join(scratch, "*.json"))):
            with open(path) as f:
                objects.extend((os.path.basename(path), o) for o in json.load(f))
    for relative in SHIPPED:
        with open(os.path.join(REPO, relative)) as f:
            objects.extend((relative, o) for o in yaml.safe_load_all(f) if o)
    templates = [o for _, o in objects if o["kind"] == "ResourceClaimTemplate"]
    if len(templates) != 3:
        failures.append("expected the 3 claim template examples, found %d" % len(templates))
    if len(objects) < 10:
        failures.append("the dump tool wrote only %d objects" % len(objects))
    slices = [o for _, o in objects if o["kind"] == "ResourceSlice"]
    counters = [s for s in slices if "sharedCounters" in s["spec"]]
    devices = [s for s in slices if s["spec"].get("devices")]
    if not counters or not devices:
        failures.append("expected counter slices and device slices")
    for where, obj in objects:
        for e in errors(checks, obj):
            failures.append("%s %s %s: %s" % (where, obj["kind"], obj["metadata"]["name"], e))

    # The validator must bite, or passing proves nothing.
    sample = copy.deepcopy(devices[0]) if devices else {}
    bad = []
    unknown = copy.deepcopy(sample)
    unknown["spec"]["devices"][0]["consumesCounter"] = []
    bad.append(("an unknown field", unknown, "consumesCounter"))
    wrong_type = copy.deepcopy(sample)
    wrong_type["spec"]["pool"]["generation"] = "3"
    bad.append(("a string generation", wrong_type, "generation"))
    no_pool = copy.deepcopy(sample)
    del no_pool["spec"]["pool"]
    bad.append(("a spec without pool", no_pool, "pool"))
    bad_attribute = copy.deepcopy(sample)
    bad_attribute["spec"]["devices"][0]["attributes"]["type"] = {"text": "x"}
    bad.append(("an attribute of no known kind", bad_attribute, "text"))
    for what, obj, word in bad:
        found = " ".join(errors(checks, obj))
        if word not in found:
            failures.append("the schema accepts %s (%s)" % (what, found or "no error"))

    for f in failures:
        print("FAIL", f)
    print("%d objects checked, %d failures" % (len(objects), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
