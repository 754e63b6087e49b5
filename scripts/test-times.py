#!/usr/bin/env python3
"""The suite's time, from the JUnit XML files scripts/test.sh writes (one per part): each part's wall time and
test count, and the N slowest tests of the whole run, each with its setup (the module fixtures that build
images are charged to the first test that needs them), call and teardown together, as pytest's JUnit report
times a test. Standard library only: it runs before and after any venv.

    python3 scripts/test-times.py [-n 15] [--by-file] FILE.xml [FILE.xml ...]

--by-file adds each test file's total, longest first: the budget of docs/development.md is kept per file.
"""

import argparse
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=15, help="how many of the slowest tests to list (default 15)")
    ap.add_argument("--by-file", action="store_true", help="also each test file's total, longest first")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    cases = []
    for path in args.files:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as exc:
            print(f"test-times: {path}: not read ({exc})", file=sys.stderr)
            continue
        for suite in root.iter("testsuite"):
            print(f"test-times: {path}: {suite.get('tests')} tests, {suite.get('failures')} failed, "
                  f"{suite.get('errors')} errors, {suite.get('skipped')} skipped in {float(suite.get('time', 0)):.0f} s")
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            cases.append((float(case.get("time") or 0), name))
    cases.sort(reverse=True)
    print(f"test-times: the {min(args.n, len(cases))} slowest of {len(cases)} tests (setup + call + teardown):")
    for seconds, name in cases[:args.n]:
        print(f"  {seconds:8.1f} s  {name}")
    if args.by_file:
        files: dict = {}
        for seconds, name in cases:
            files[name.split("::")[0]] = files.get(name.split("::")[0], 0.0) + seconds
        print(f"test-times: each file's tests together ({len(files)} files):")
        for name, seconds in sorted(files.items(), key=lambda kv: -kv[1]):
            print(f"  {seconds:8.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
