#!/usr/bin/env python3
"""Why each failed CTest test failed, in a few lines: read from a CTest run's LastTest.log.

CI keeps only the end of a failed run's output, and CTest prints a failed test's output where the
test ended, often far above that end: this digest is printed last (scripts/test.sh, .ci/run), so
the end names the checks that failed and not only the tests.

    failure-digest.py <ctest dir>/Testing/Temporary [--append FILE]
    failure-digest.py --self-test
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# A test's own words for a failure: our scenarios' "FAIL" lines, GoogleTest's failure header and
# summary, Python's unittest and tracebacks, the sanitizers' reports.
FAILURE_LINE = re.compile(r"^(FAIL\b|FAILED\b|ERROR\b|Traceback |AssertionError|\[  FAILED  \] (?!\d+ tests?,)"
                          r"|.*: Failure$|.*ERROR: (Address|Leak|Undefined)Sanitizer|.*WARNING: ThreadSanitizer"
                          r"|.*runtime error: |.*Timeout)")
# GoogleTest prints what was expected on the lines after "file:line: Failure".
EXPECTATION_LINES = 3
LINES_PER_TEST = 8
MAX_TESTS = 12
WIDTH = 300


def sections(log):
    """{test name: (its output lines, its ending lines)} from LastTest.log's text."""
    found = {}
    parts = re.split(r"^\d+/\d+ Testing: (.+)$", log, flags=re.M)
    for name, body in zip(parts[1::2], parts[2::2]):
        output = body.split("Output:\n" + "-" * 58 + "\n", 1)
        if len(output) != 2:
            continue
        text, _, tail = output[1].partition("<end of output>\n")
        ending = [line for line in tail.splitlines() if line.startswith(("Test time", "Test Failed"))]
        found[name.strip()] = (text.splitlines(), ending)
    return found


def why(lines):
    """The few lines that say why: the failure lines (with GoogleTest's expectation), else the end."""
    picked = []
    for i, line in enumerate(lines):
        if FAILURE_LINE.match(line):
            picked.append(line)
            if line.endswith(": Failure"):
                picked += lines[i + 1:i + 1 + EXPECTATION_LINES]
    if not picked:
        picked = ["(no failure line; its output ends:)"] + lines[-3:]
    if len(picked) > LINES_PER_TEST:
        more = len(picked) - LINES_PER_TEST + 1
        picked = picked[:LINES_PER_TEST - 1] + ["(%d more such lines)" % more]
    return [line if len(line) <= WIDTH else line[:WIDTH] + " [...]" for line in picked]


def digest(temporary):
    """The digest's lines for the run whose files are in `temporary`; empty when none failed."""
    failed_path = os.path.join(temporary, "LastTestsFailed.log")
    log_path = os.path.join(temporary, "LastTest.log")
    if not os.path.exists(failed_path):
        return []
    with open(failed_path, encoding="utf-8", errors="replace") as f:
        failed = [line.split(":", 1)[1].strip() for line in f if ":" in line]
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            found = sections(f.read())
    except FileNotFoundError:
        found = {}
    out = ["=== why the failed tests failed (%s) ===" % os.path.dirname(os.path.dirname(os.path.abspath(temporary)))]
    for name in failed[:MAX_TESTS]:
        lines, ending = found.get(name, ([], []))
        out.append("--- %s%s" % (name, (" (" + ending[0].strip() + ")") if ending else ""))
        out += ["    " + line for line in (why(lines) if name in found else ["(not in LastTest.log)"])]
    if len(failed) > MAX_TESTS:
        out.append("--- and %d more failed tests (LastTestsFailed.log)" % (len(failed) - MAX_TESTS))
    return out


def self_test():
    """The digest on a planted CTest run: a scenario's FAIL line, a GoogleTest failure with its
    expectation, a test without a failure line, and a passed test left out."""
    rule = "-" * 58
    entry = ("{n}/4 Testing: {name}\n{n}/4 Test: {name}\nCommand: x\nDirectory: /d\n"
             "\"{name}\" start time: now\nOutput:\n" + rule + "\n{out}<end of output>\n"
             "Test time =   {t} sec\n" + rule + "\nTest {verdict}.\n\n")
    log = "".join(entry.format(n=i + 1, name=name, out=out, t=t, verdict=verdict) for i, (name, out, t, verdict) in
                  enumerate([("k8s.scenario", "ok  one\nFAIL two: " + "x" * 400 + "\nok  three\n", "12.00", "Failed"),
                             ("unit.Gtest", "[ RUN      ] A.B\na.cpp:7: Failure\nExpected: 1\n  Actual: 2\n"
                              "Which is: 2\nnoise\n[  FAILED  ] A.B (1 ms)\n[  FAILED  ] 1 test, listed below:\n",
                              "0.10", "Failed"),
                             ("quiet", "one\ntwo\nthree\nfour\n", "3.00", "Failed"),
                             ("passed", "FAIL not a failure of a failed test\n", "1.00", "Passed")]))
    with tempfile.TemporaryDirectory() as temporary:
        with open(os.path.join(temporary, "LastTest.log"), "w") as f:
            f.write(log)
        with open(os.path.join(temporary, "LastTestsFailed.log"), "w") as f:
            f.write("1:k8s.scenario\n2:unit.Gtest\n3:quiet\n9:gone\n")
        text = "\n".join(digest(temporary))
    expected = ["--- k8s.scenario (Test time =   12.00 sec)", "    FAIL two: " + "x" * 290, "[...]",
                "--- unit.Gtest", "    a.cpp:7: Failure", "    Expected: 1", "      Actual: 2",
                "    Which is: 2", "    [  FAILED  ] A.B (1 ms)",
                "--- quiet", "(no failure line; its output ends:)", "    two", "    four",
                "--- gone", "(not in LastTest.log)"]
    missing = [piece for piece in expected if piece not in text]
    unwanted = [piece for piece in ("ok  one", "noise", "1 test, listed below", "    one\n", "passed", "x" * 301)
                if piece in text]
    if missing or unwanted:
        print("self-test FAILED\nmissing: %r\nunwanted: %r\n%s" % (missing, unwanted, text))
        return 1
    return self_test_real_ctest()


def self_test_real_ctest():
    """The same on what this machine's CTest really writes: a failed test's FAIL line found, a
    passed test's left out."""
    with tempfile.TemporaryDirectory() as top:
        with open(os.path.join(top, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.20)\nproject(digest NONE)\nenable_testing()\n"
                    "add_test(NAME passes COMMAND sh -c \"echo FAIL but passed\")\n"
                    "add_test(NAME fails COMMAND sh -c \"echo ok  first; echo FAIL the second check; exit 1\")\n")
        build = os.path.join(top, "build")
        for argv in (["cmake", "-S", top, "-B", build], ["ctest", "--test-dir", build]):
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        text = "\n".join(digest(os.path.join(build, "Testing", "Temporary")))
    if "--- fails" not in text or "    FAIL the second check" not in text or "passed" in text:
        print("self-test FAILED on a real CTest run:\n%s" % text)
        return 1
    print("self-test passed (a planted log and a real CTest run)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("temporary", nargs="?", help="a CTest run's Testing/Temporary directory")
    parser.add_argument("--append", help="also append the digest to this file")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.temporary:
        parser.error("the Testing/Temporary directory is required")
    lines = digest(args.temporary)
    if lines:
        print("\n".join(lines), flush=True)
        if args.append:
            with open(args.append, "a", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
