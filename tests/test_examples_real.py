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
