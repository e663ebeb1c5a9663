#!/usr/bin/env python3
"""Relative links in the given Markdown files point at files that exist and, with a #fragment,
at a heading there (GitHub's anchor rules). Ends with 'N passed, N failed'."""
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path):
    out = set()
    with open(path) as f:
        in_code = False
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*$", line)
            if m:
                text = m.group(1).lower().replace("`", "")
                out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def main(files):
    passed = failed = 0
    for doc in files:
        with open(doc) as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+://", target):
                continue
            path, _, fragment = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            ok = os.path.exists(full) and (not fragment or fragment in anchors(full))
            print("%s %s -> %s" % ("ok  " if ok else "FAIL", doc, target))
            passed += ok
            failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
