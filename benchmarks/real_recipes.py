#!/usr/bin/env python3
"""Public LLM training recipes (examples/real/*/stacks.yaml): does each pass `check --strict` and render?

For every recipe folder under examples/real/ this runs, as subprocesses of the same Python,

    imgbuild check --strict --file examples/real/NAME/stacks.yaml
    imgbuild render --all   --file examples/real/NAME/stacks.yaml

and prints one line per recipe (pass/fail, both exit codes, how expressible NOTES.md says it is, the first
error line), then the totals. "Expressible" comes from the recipe's `## Expressible:` line in NOTES.md:
`yes` (fully), `by design` (only deliberate refusals missing: floating pins, tags, unhashed wheel URLs) or
`missing` (features imgbuild lacks); see examples/real/README.md.
`--code DIR` runs the imgbuild found in DIR instead (a checkout or `git worktree` of another revision),
with PYTHONPATH=DIR and DIR as the working folder, so that the shipped kinds are that revision's:

    .venv/bin/python benchmarks/real_recipes.py                       # this checkout
    .venv/bin/python benchmarks/real_recipes.py --code /tmp/recipes-before   # e.g. `git worktree add /tmp/recipes-before 48e361f`
    .venv/bin/python benchmarks/real_recipes.py --json

A benchmark, not a test (tests/test_examples_real.py is the test): the exit status is 0 unless
--fail is given, then it is 1 when any recipe fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "examples" / "real"
RUN = "from builder.cli import main; main()"


def recipes() -> list[Path]:
    return sorted(p for p in RECIPES.glob("*/stacks.yaml") if p.is_file())


def imgbuild(code: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(code), NO_COLOR="1", COLUMNS="200")
    env.pop("IMGBUILD_STACKS", None)
    env.pop("IMGBUILD_KINDS", None)
    return subprocess.run([sys.executable, "-c", RUN, *args], cwd=code, env=env, capture_output=True,
                          text=True, timeout=120)


def first_error(text: str) -> str:
    keep = [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.startswith(("kinds:", "skeleton:", "unknown ", "    fix:", "    fact"))]
    for ln in keep:
        if ln.startswith(("error", "spec error", "warning", "internal error", "preflight:", "render")):
            return ln
    return keep[0] if keep else ""


def expressible(stacks: Path) -> str:
    """The category of the recipe's `## Expressible:` line in NOTES.md: yes, by design, missing or ?."""
    notes = stacks.parent / "NOTES.md"
    for line in (notes.read_text().splitlines() if notes.is_file() else []):
        if line.startswith("## Expressible:"):
            verdict = line.split(":", 1)[1].strip()
            if verdict.startswith("yes"):
                return "yes"
            if verdict.startswith("not fully, by design only"):
                return "by design"
            if verdict.startswith("no - "):
                return "missing"
    return "?"


def judge(code: Path, stacks: Path) -> dict:
    check = imgbuild(code, "check", "--strict", "--file", str(stacks))
    render = imgbuild(code, "render", "--all", "--file", str(stacks))
    ok = check.returncode == 0 and render.returncode == 0
    err = "" if ok else first_error(check.stdout + check.stderr if check.returncode else render.stdout + render.stderr)
    return {"recipe": stacks.parent.name, "pass": ok, "check_rc": check.returncode,
            "render_rc": render.returncode, "expressible": expressible(stacks), "first_error": err[:300]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", type=Path, default=ROOT, help="the imgbuild checkout to run (default: this one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--fail", action="store_true", help="exit 1 when any recipe fails")
    args = ap.parse_args()
    code = args.code.resolve()
    rows = [judge(code, p) for p in recipes()]
    passed = sum(r["pass"] for r in rows)
    kinds = {k: sum(r["expressible"] == k for r in rows) for k in ("yes", "by design", "missing", "?")}
    if args.json:
        print(json.dumps({"code": str(code), "recipes": rows, "passed": passed, "total": len(rows),
                          "expressible": kinds}, indent=2))
    else:
        for r in rows:
            mark = "PASS" if r["pass"] else "FAIL"
            print(f"{mark} {r['recipe']:<26} check={r['check_rc']} render={r['render_rc']} "
                  f"expressible={r['expressible']:<9}  {r['first_error']}")
        print(f"total: {passed}/{len(rows)} recipes pass check --strict and render ({code})")
        print(f"expressible (NOTES.md): {kinds['yes']} fully, {kinds['by design']} only deliberate refusals missing, "
              f"{kinds['missing']} missing features" + (f", {kinds['?']} not stated" if kinds["?"] else ""))
    return 1 if args.fail and passed < len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
