#!/usr/bin/env python3
"""Public LLM training recipes (examples/real/*/stacks.yaml): does each pass `check --strict` and render?

For every recipe folder under examples/real/ this runs, as subprocesses of the same Python,

    imgbuild check --strict --json --file examples/real/NAME/stacks.yaml
    imgbuild render --all --json   --file examples/real/NAME/stacks.yaml

and prints one line per recipe (pass/fail, both exit codes, how expressible NOTES.md says it is, the first
error line), then the totals. Each recipe has a stacks.lock.yaml of its own, with nothing resolved yet
(`version: 1`, `bases: {}`), because imgbuild accepts intent only beside a lock file and refuses it at load
otherwise (FINDINGS.md F8). A recipe without one is judged in a temporary copy beside such an empty one;
nothing is written into examples/real (`--no-stub-lock` judges the files as they are, `--without-lock` judges
a copy with the recipe's lock file removed: F8). A recipe passes when check exits 0, or when every error it reports is IB098
(a layer whose requirements or git refs float, as the recipe writes them, with no entry in
stacks.lock.yaml yet: its truth is one `imgbuild lock` away, on a machine that can pull the base), and
render exits 0 or refuses only for that same reason (then render is skipped, and the line says so). Any
other error, or an answer that is not the JSON document check and render print, fails the recipe.
"Expressible" comes from the recipe's `## Expressible:` line in NOTES.md:
`yes` (fully), `by design` (only deliberate refusals missing: mirrors, a tool's URL whose sha256 is not
known) or `missing` (features imgbuild lacks); see examples/real/README.md.
`--code DIR` runs the imgbuild found in DIR instead (a checkout or `git worktree` of another revision),
with PYTHONPATH=DIR and DIR as the working folder, so that the shipped kinds are that revision's:

    .venv/bin/python benchmarks/real_recipes.py                       # this checkout
    .venv/bin/python benchmarks/real_recipes.py --code /tmp/recipes-before   # e.g. `git worktree add /tmp/recipes-before 48e361f`
    .venv/bin/python benchmarks/real_recipes.py --json
    .venv/bin/python benchmarks/real_recipes.py --no-stub-lock        # no empty lock file supplied
    .venv/bin/python benchmarks/real_recipes.py --without-lock        # each recipe's lock file removed (in a copy)

A benchmark, not a test (tests/test_examples_real.py is the test, and uses judge() from here): the exit
status is 0 unless --fail is given, then it is 1 when any recipe fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


UNLOCKED = "IB098"   # a layer that floats (ranges, bare names, git refs, unhashed wheel URLs) with no lock entry


def error_rules(doc: dict) -> list[str]:
    """The rule of every error a check/render JSON document reports (an error without a rule is "?").

    Spec errors are `errors` entries with a `rule`; preflight and lint errors are the `findings` of
    severity error that are not waived (under --strict a warning is reported as an error). The
    `errors` entry of kind preflight only counts those findings, so it adds nothing."""
    rules = [str(f.get("rule") or "?") for f in doc.get("findings") or []
             if f.get("severity") == "error" and not f.get("waived")]
    for e in doc.get("errors") or []:
        if e.get("rule"):
            rules.append(str(e["rule"]))
        elif e.get("kind") == "preflight" and rules:
            continue
        else:
            rules.append("?")
    return rules


def first_other_error(doc: dict) -> str:
    """The first error of a JSON document that is not IB098, as one line (rule, key, message)."""
    for f in doc.get("findings") or []:
        if f.get("severity") == "error" and not f.get("waived") and f.get("rule") != UNLOCKED:
            return f"error[{f.get('rule')}] {f.get('key', '')}: {f.get('message', '')}"
    for e in doc.get("errors") or []:
        if e.get("rule") != UNLOCKED:
            what = e.get("reason") or e.get("message") or ""
            return f"error[{e.get('rule') or e.get('kind') or '?'}] {e.get('key', '')}: {what}".replace(" : ", ": ")
    return ""


def verdict(proc: subprocess.CompletedProcess) -> tuple[str, list[str], str]:
    """ok (exit 0), unlocked (exit non-zero, and every error is IB098) or fail; the error rules; the
    first other error as one line."""
    if proc.returncode == 0:
        return "ok", [], ""
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        return "fail", ["not JSON"], first_error(proc.stderr + proc.stdout)
    if not isinstance(doc, dict):
        return "fail", ["not a JSON object"], ""
    rules = error_rules(doc)
    if rules and all(r == UNLOCKED for r in rules):
        return "unlocked", rules, ""
    return "fail", rules or ["no error named"], first_other_error(doc) or first_error(proc.stderr)


STUB_LOCK = "version: 1\nbases: {}\n"   # a lock file with no entry: intent is accepted, and unresolved (IB098)


def lock_file(stacks: Path) -> Path:
    return stacks.with_name(stacks.stem + ".lock.yaml")


def run_both(code: Path, stacks: Path, stub_lock: bool, without_lock: bool = False) -> tuple:
    """check --strict and render --all of stacks, beside an empty lock file in a temporary copy of its folder
    where stub_lock is set and the recipe has no lock file of its own; with without_lock, in a temporary copy
    without the recipe's lock file (and no stub)."""
    if not without_lock and (not stub_lock or lock_file(stacks).is_file()):
        return (imgbuild(code, "check", "--strict", "--json", "--file", str(stacks)),
                imgbuild(code, "render", "--all", "--json", "--file", str(stacks)), False)
    with tempfile.TemporaryDirectory(prefix="imgbuild-recipe-") as tmp:
        copy = Path(tmp) / stacks.parent.name
        shutil.copytree(stacks.parent, copy)
        if without_lock:
            lock_file(copy / stacks.name).unlink(missing_ok=True)
        else:
            lock_file(copy / stacks.name).write_text(STUB_LOCK)
        return (imgbuild(code, "check", "--strict", "--json", "--file", str(copy / stacks.name)),
                imgbuild(code, "render", "--all", "--json", "--file", str(copy / stacks.name)), not without_lock)


def judge(code: Path, stacks: Path, stub_lock: bool = True, without_lock: bool = False) -> dict:
    check, render, stubbed = run_both(code, stacks, stub_lock, without_lock)
    check_v, check_rules, check_err = verdict(check)
    render_v, render_rules, render_err = verdict(render)
    if render_v == "ok":
        try:
            rendered = json.loads(render.stdout)
            render_ok = bool(rendered.get("ok")) and "FROM ${PARENT}" in render.stdout
        except ValueError:
            render_ok = False
        if not render_ok:
            render_v, render_rules, render_err = "fail", ["rendered no Dockerfile"], "render: no Dockerfile"
    ok = check_v in ("ok", "unlocked") and render_v in ("ok", "unlocked")
    err = "" if ok else (check_err if check_v == "fail" else render_err)
    return {"recipe": stacks.parent.name, "pass": ok, "check_rc": check.returncode,
            "render_rc": render.returncode, "check": check_v, "render": render_v, "stub_lock": stubbed,
            "unlocked": check_rules.count(UNLOCKED), "other_rules": sorted(set(check_rules + render_rules) - {UNLOCKED}),
            "expressible": expressible(stacks), "first_error": err[:300]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", type=Path, default=ROOT, help="the imgbuild checkout to run (default: this one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--fail", action="store_true", help="exit 1 when any recipe fails")
    ap.add_argument("--no-stub-lock", action="store_true",
                    help="judge the files as they are, with no empty lock file beside those that have none")
    ap.add_argument("--without-lock", action="store_true",
                    help="judge a copy of each recipe with its lock file removed (intent without a lock file: F8)")
    args = ap.parse_args()
    code = args.code.resolve()
    rows = [judge(code, p, stub_lock=not args.no_stub_lock, without_lock=args.without_lock) for p in recipes()]
    passed = sum(r["pass"] for r in rows)
    unlocked = sum(r["pass"] and r["check"] == "unlocked" for r in rows)
    kinds = {k: sum(r["expressible"] == k for r in rows) for k in ("yes", "by design", "missing", "?")}
    if args.json:
        print(json.dumps({"code": str(code), "recipes": rows, "passed": passed, "unlocked": unlocked,
                          "total": len(rows), "expressible": kinds}, indent=2))
    else:
        for r in rows:
            mark = "PASS" if r["pass"] else "FAIL"
            check = f"check={r['check_rc']}" + (f" (only {r['unlocked']} x {UNLOCKED}: unlocked intent)"
                                                if r["check"] == "unlocked" else "")
            render = (f"render={r['render_rc']}" if r["render"] != "unlocked"
                      else "render=skipped (refused only for unlocked intent)")
            rules = f" rules={','.join(r['other_rules'])}" if r["other_rules"] else ""
            print(f"{mark} {r['recipe']:<26} {check} {render} expressible={r['expressible']:<9}{rules}  "
                  f"{r['first_error']}")
        stubbed = sum(r["stub_lock"] for r in rows)
        print(f"total: {passed}/{len(rows)} recipes pass check --strict and render ({unlocked} of them with "
              f"only {UNLOCKED}, one `imgbuild lock` away) ({code})"
              + (f"; {stubbed} judged beside an empty lock file" if stubbed else ""))
        print(f"expressible (NOTES.md): {kinds['yes']} fully, {kinds['by design']} only deliberate refusals missing, "
              f"{kinds['missing']} missing features" + (f", {kinds['?']} not stated" if kinds["?"] else ""))
    return 1 if args.fail and passed < len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
