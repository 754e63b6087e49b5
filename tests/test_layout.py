"""The package layout shows the path of data: builder.plan is pure (it never reaches an engine or a
registry), builder.ship is the side that does. A test, so the split cannot erode one import at a time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLAN = Path(__file__).resolve().parent.parent / "builder" / "plan"
# What talking to an engine or a registry takes: the ship side, the clients, processes, sockets.
SIDE_EFFECTS = ("builder.ship", "docker", "httpx", "subprocess", "socket", "urllib.request", "http.client")


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


@pytest.mark.parametrize("module", sorted(PLAN.glob("*.py")), ids=lambda p: p.name)
def test_the_plan_never_imports_the_side_that_talks_to_engines(module):
    bad = sorted(n for n in imports_of(module) for s in SIDE_EFFECTS if n == s or n.startswith(s + "."))
    assert not bad, f"builder/plan/{module.name} imports {bad}: move that code to builder/ship"


def test_the_check_sees_a_forbidden_import(tmp_path):
    """Positive control: the reader above does find such an import."""
    bad = tmp_path / "x.py"
    bad.write_text("from builder.ship.engine import Engine\nimport subprocess\n")
    assert {"builder.ship.engine", "subprocess"} <= imports_of(bad)


def test_no_folder_named_build_in_the_package():
    """Tools and .gitignore files take a folder called build/ for output and skip it."""
    assert not (PLAN.parent / "build").exists()
