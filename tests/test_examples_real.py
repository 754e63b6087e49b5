"""Every public recipe under examples/real/ (examples/real/README.md) passes `imgbuild check --strict`
and renders, or falls short only of its lock: the recipes keep their own ranges, bare names, git tags and
branches and unhashed wheel URLs (intent), which `imgbuild lock` resolves into stacks.lock.yaml on a
machine that can pull the NGC base. imgbuild accepts intent only beside a lock file, so each recipe has one
with nothing resolved yet (`version: 1`, `bases: {}`; a recipe without one is judged in a temporary copy beside
such an empty one), where check reports each floating layer as IB098 (and render may refuse it for the same
reason); any other error fails. No Docker and no network: check and render never fetch git sources or ask a
registry.

The same verdicts, one line per recipe, from `.venv/bin/python benchmarks/real_recipes.py`, whose judging
functions this test uses."""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RECIPES = sorted((REPO / "examples" / "real").glob("*/stacks.yaml"))

_spec = importlib.util.spec_from_file_location("real_recipes", REPO / "benchmarks" / "real_recipes.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@functools.lru_cache(maxsize=None)
def judged(stacks: Path) -> tuple:
    """(check --strict --json, render --all --json) of the recipe, beside an empty lock file where it has none."""
    check, render, _ = bench.run_both(REPO, stacks, True)
    return check, render


def test_there_are_at_least_ten_recipes():
    assert len(RECIPES) >= 10, [p.parent.name for p in RECIPES]


@pytest.mark.parametrize("stacks", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_checks_strict(stacks):
    """check --strict exits 0, or every error it reports is IB098 (unlocked intent)."""
    proc = judged(stacks)[0]
    verdict, rules, first = bench.verdict(proc)
    assert verdict in ("ok", "unlocked"), (rules, first, proc.stderr[-4000:])


@pytest.mark.parametrize("stacks", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_renders(stacks):
    """render --all exits 0 with Dockerfiles, or refuses only for unlocked intent (IB098): then skipped."""
    proc = judged(stacks)[1]
    verdict, rules, first = bench.verdict(proc)
    if verdict == "unlocked":
        pytest.skip(f"render refuses unlocked intent only ({len(rules)} x {bench.UNLOCKED}); one `imgbuild lock` away")
    assert verdict == "ok", (rules, first, proc.stderr[-4000:])
    assert json.loads(proc.stdout).get("ok") is True
    assert "FROM ${PARENT}" in proc.stdout


def _proc(rc: int, doc) -> subprocess.CompletedProcess:
    out = doc if isinstance(doc, str) else json.dumps(doc)
    return subprocess.CompletedProcess(["imgbuild"], rc, stdout=out, stderr="")


def _finding(rule: str, severity: str = "error", waived: str = "") -> dict:
    return {"rule": rule, "severity": severity, "waived": waived, "key": "layers.x", "message": "m"}


PREFLIGHT = {"kind": "preflight", "message": "1 error(s)"}


@pytest.mark.parametrize("rc, doc, expected", [
    (0, {"ok": True, "findings": []}, "ok"),
    (3, {"ok": False, "findings": [_finding("IB098"), _finding("IB001", "unknown")], "errors": [PREFLIGHT]},
     "unlocked"),
    (2, {"ok": False, "errors": [{"rule": "IB098", "key": "layers.x", "reason": "floats"}]}, "unlocked"),
    # any other error fails, beside IB098 or alone
    (3, {"ok": False, "findings": [_finding("IB098"), _finding("IB103")], "errors": [PREFLIGHT]}, "fail"),
    (2, {"ok": False, "errors": [{"rule": "IB098"}, {"rule": "IB211", "reason": "needs an exact version"}]}, "fail"),
    (2, {"ok": False, "errors": [{"rule": "IB299", "reason": "ref 'main' floats"}]}, "fail"),
    # a strict warning is an error; a waived one is not
    (3, {"ok": False, "findings": [_finding("IB098"), _finding("IB071", "warning", "why")], "errors": [PREFLIGHT]},
     "unlocked"),
    # a refusal that names no rule, or no error at all, or text instead of JSON, fails
    (4, {"ok": False, "errors": [{"kind": "git", "message": "a git pin"}]}, "fail"),
    (3, {"ok": False, "findings": [], "errors": [PREFLIGHT]}, "fail"),
    (1, {"ok": False}, "fail"),
    (2, "spec error[IB098]: not JSON", "fail"),
])
def test_verdict_accepts_only_unlocked_intent(rc, doc, expected):
    assert bench.verdict(_proc(rc, doc))[0] == expected


@pytest.mark.parametrize("stacks", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_has_notes_with_its_source(stacks):
    notes = stacks.parent / "NOTES.md"
    assert notes.is_file(), notes
    text = notes.read_text()
    assert "## Source" in text and "## Not expressible" in text
    assert text.rstrip().splitlines()[-1].startswith("## Expressible:"), "NOTES.md ends with its verdict line"


CATEGORY = {"yes": "yes", "not fully, by design only": "no: by design only", "no - ": "no: missing features"}


def notes_category(notes: Path) -> str:
    for line in notes.read_text().splitlines():
        if line.startswith("## Expressible:"):
            verdict = line.split(":", 1)[1].strip()
            for prefix, column in CATEGORY.items():
                if verdict.startswith(prefix):
                    return column
            raise AssertionError(f"{notes}: unknown verdict {verdict!r}")
    raise AssertionError(f"{notes}: no '## Expressible:' line")


@pytest.mark.parametrize("stacks", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_readme_table_agrees_with_notes(stacks):
    """The README table's "fully expressible" column says what the recipe's NOTES.md concludes."""
    name = stacks.parent.name
    rows = [ln for ln in (REPO / "examples" / "real" / "README.md").read_text().splitlines()
            if ln.startswith(f"| [{name}]({name}/NOTES.md)")]
    assert len(rows) == 1, rows
    column = rows[0].split(" | ")[3].strip()
    assert column == notes_category(stacks.parent / "NOTES.md"), (name, column)


@pytest.mark.parametrize("stacks", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_a_fully_expressible_recipe_has_no_stand_in(stacks):
    """A recipe NOTES.md calls fully expressible replaces no step: its stacks.yaml marks no STAND-IN."""
    if notes_category(stacks.parent / "NOTES.md") == "yes":
        assert "STAND-IN" not in stacks.read_text(), stacks
