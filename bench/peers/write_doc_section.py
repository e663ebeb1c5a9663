#!/usr/bin/python3
"""Puts a bench/peers script's generated section into docs/bench-peers.md: between that script's
begin and end markers where they stand, else right under the section's heading, else as a new
section at the end. The prose around the markers is never touched.

usage: write_doc_section.py DOC SECTION_FILE HEADING SCRIPT
  SCRIPT names the markers: <!-- SCRIPT: begin --> ... <!-- SCRIPT: end -->
"""
import os
import sys


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    doc, section_file, heading, script = sys.argv[1:]
    with open(section_file) as f:
        section = f.read()
    begin, end = "<!-- %s: begin -->" % script, "<!-- %s: end -->" % script
    block = "%s\n%s\n%s" % (begin, section.rstrip(), end)
    text = "# Benchmarks against peers\n"
    if os.path.exists(doc):
        with open(doc) as f:
            text = f.read()
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    elif heading in text:
        at = text.index(heading) + len(heading)
        text = text[:at] + "\n\n" + block + text[at:]
    else:
        text = text.rstrip() + "\n\n%s\n\n%s\n" % (heading, block)
    with open(doc, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
