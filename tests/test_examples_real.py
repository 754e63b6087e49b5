"""Every public recipe under examples/real/ (examples/real/README.md) passes `imgbuild check --strict`
and renders. No Docker and no network: check and render never fetch git sources or ask a registry.

The same verdicts, one line per recipe, from `.venv/bin/python benchmarks/real_recipes.py`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RECIPES = sorted((REPO / "examples" / "real").glob("*/stacks.yaml"))


def imgbuild(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    env.pop("IMGBUILD_STACKS", None)
    env.pop("IMGBUILD_KINDS", None)
    return subprocess.run([sys.executable, "-m", "builder.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_there_are_at_least_ten_recipes():
    assert len(RECIPES) >= 10, [p.parent.name for p in RECIPES]


@pytest.mark.parametrize("stacks", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_checks_strict(stacks):
    proc = imgbuild("check", "--strict", "--file", str(stacks))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("stacks", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_renders(stacks):
    proc = imgbuild("render", "--all", "--file", str(stacks))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FROM ${PARENT}" in proc.stdout


@pytest.mark.parametrize("stacks", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_has_notes_with_its_source(stacks):
    notes = stacks.parent / "NOTES.md"
    assert notes.is_file(), notes
    text = notes.read_text()
    assert "## Source" in text and "## Not expressible" in text


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
