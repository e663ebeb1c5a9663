#!/usr/bin/env python3
"""CI's sanitizer stage builds the target kvgpu_unit_tests alone and then runs `ctest -L unit`.

A unit-labelled test that runs a program of the build which kvgpu_unit_tests does not depend on
passes in a full build and fails in CI's clean one (it happened: dra_dump_slices). This check
reads the unit tests' commands from CTest and the target's dependencies from Ninja and names
every program that is run but not built by the target.

usage: unit_target_covers_unit_tests.py BUILD_DIR
       unit_target_covers_unit_tests.py --self-test
"""
import json
import os
import subprocess
import sys


def missing_programs(tests, build_dir, built):
    """(program, test) pairs: programs under build_dir that a test runs and `built` lacks."""
    prefix = os.path.join(os.path.abspath(build_dir), "")
    found = set()
    for test in tests:
        for arg in test.get("command", []):
            if arg.startswith(prefix) and os.path.relpath(arg, build_dir) not in built:
                found.add((os.path.relpath(arg, build_dir), test["name"]))
    return sorted(found)


def unit_tests(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1", "-L", "unit"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tests"]


def target_inputs(build_dir):
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "query", "kvgpu_unit_tests"], check=True,
                         capture_output=True, text=True).stdout
    inputs, in_inputs = set(), False
    for line in out.splitlines():
        if line.strip().startswith("input:"):
            in_inputs = True
        elif line.strip().startswith("outputs:"):
            in_inputs = False
        elif in_inputs and line.startswith("    "):
            inputs.add(line.strip())
    return inputs


def self_test():
    build = "/b"
    tests = [{"name": "t1", "command": ["/b/tests/x/x_test"]},
             {"name": "t2", "command": ["/usr/bin/python3", "check.py", "/b/tests/y/dump"]}]
    assert missing_programs(tests, build, {"tests/x/x_test", "tests/y/dump"}) == []
    assert missing_programs(tests, build, {"tests/x/x_test"}) == [("tests/y/dump", "t2")]
    print("self-test passed: a planted program missing from the target is named")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    build_dir = sys.argv[1]
    missing = missing_programs(unit_tests(build_dir), build_dir, target_inputs(build_dir))
    for program, test in missing:
        print(f"{test} runs {program}, which kvgpu_unit_tests does not build: "
              f"add kvgpu_unit_tests_need(<its target>) beside the test")
    if missing:
        return 1
    print("every program a unit test runs is built by kvgpu_unit_tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
