"""The package layout shows the path of data, bottom to top: the foundations (builder.core, errors,
textsafe, redact) that loading and planning stand on; load; plan (pure: it never reaches an engine or a
registry); the judges (rules); the side that talks to engines and registries (ship); and what is built on
all of them (the prepared plan, ci, export; node check, diff; the catalog; the command line). A module imports
only from its own rank or below, so that the split cannot erode one import at a time; lazy imports inside
functions count too (ast.walk sees them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "builder"
PLAN = PACKAGE / "plan"
# What talking to an engine or a registry takes: the ship side, the clients, processes, sockets.
SIDE_EFFECTS = ("builder.ship", "docker", "httpx", "subprocess", "socket", "urllib.request", "http.client")

# Each part of builder and its rank: an import of a part ranked above the importer's own is upward.
# Parts of one rank above the foundations may not import each other either (what two peers both need sits
# below both).
RANKS = {
    "builder": 0, "builder.core": 0, "builder.errors": 0, "builder.textsafe": 0, "builder.redact": 0,
    "builder.load": 1,
    "builder.plan": 2,
    "builder.rules": 3,
    "builder.ship": 4,
    "builder.prepared": 5, "builder.ci": 5, "builder.export": 5, "builder.reference": 5,
    "builder.nodecheck": 6, "builder.diff": 6,
    "builder.catalog": 7,
    "builder.cli": 8,
}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def part_of(name: str) -> str | None:
    """The ranked part a dotted module name belongs to (the longest prefix in RANKS), or None."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANKS:
            return ".".join(parts[:n])
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def upward(path: Path, name: str | None = None) -> list[str]:
    """The imports of `path` (module `name`) that reach a part ranked above its own, or a peer part."""
    own = part_of(name or module_name(path))
    bad = []
    for imported in sorted(imports_of(path)):
        if not imported.startswith("builder.") or imported == "builder.__version__":
            continue
        other = part_of(imported)
        if other is None or other == own or other == "builder":
            continue
        if RANKS[other] > RANKS[own] or (RANKS[other] == RANKS[own] and RANKS[own] != 0):
            bad.append(imported)
    return bad


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_rank():
    assert [m for m in MODULES if part_of(module_name(m)) is None] == []


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_layer_above_its_own(module):
    bad = upward(module)
    assert not bad, (f"{module_name(module)} (rank {RANKS[part_of(module_name(module))]}) imports {bad}: what both "
                     "need belongs in the lower layer")


@pytest.mark.parametrize("module", sorted(PLAN.glob("*.py")) + sorted((PACKAGE / "rules").glob("*.py"))
                         + sorted((PACKAGE / "load").glob("*.py")) + sorted((PACKAGE / "core").glob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_plan_and_the_judges_never_import_the_side_that_talks_to_engines(module):
    bad = sorted(n for n in imports_of(module) for s in SIDE_EFFECTS if n == s or n.startswith(s + "."))
    assert not bad, f"{module_name(module)} imports {bad}: move that code to builder/ship"


def test_the_check_sees_a_forbidden_import(tmp_path):
    """Positive control: the reader above does find such an import, a lazy one inside a function too."""
    bad = tmp_path / "x.py"
    bad.write_text("from builder.ship.engine import Engine\nimport subprocess\n")
    assert {"builder.ship.engine", "subprocess"} <= imports_of(bad)


def test_the_check_flags_an_upward_import(tmp_path):
    """Positive control: a loader module that plans (lazily, inside a function) is flagged; one that reads
    the foundations is not; ship reaching the node check (a peer) is flagged."""
    up = tmp_path / "up.py"
    up.write_text("from builder.core.lockfile import Lock\n\ndef f():\n    from builder.plan.keys import make_plan\n")
    assert upward(up, "builder.load.spec") == ["builder.plan.keys", "builder.plan.keys.make_plan"]
    assert upward(up, "builder.rules.review") == []
    peer = tmp_path / "peer.py"
    peer.write_text("from builder.nodecheck import run\n")
    assert upward(peer, "builder.ship.card") == ["builder.nodecheck", "builder.nodecheck.run"]
    assert upward(peer, "builder.diff.specdiff") == ["builder.nodecheck", "builder.nodecheck.run"]   # a peer
    assert upward(peer, "builder.cli") == []


def calls_of(name: str) -> list[str]:
    """Where in builder/ a function called `name` is called (module:line), by its name or as an attribute."""
    out = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) == name:
                    out.append(f"{module_name(path)}:{node.lineno}")
    return out


def test_the_plan_is_made_once_and_the_lock_read_once():
    """One prepared plan (builder.prepared; both sides of a spec diff take one each); `imgbuild lock` plans
    again as it writes, in one place. The lock file is read by the loader alone, with stacks.yaml."""
    assert [c.split(":")[0] for c in calls_of("make_plan")] == ["builder.prepared", "builder.ship.lock"]
    assert [c.split(":")[0] for c in calls_of("load_lock")] == ["builder.load.spec"]


def test_the_call_counter_sees_a_call(tmp_path):
    """Positive control for the counter above."""
    assert calls_of("prepare")   # the CLI and the spec diff call it


def test_no_folder_named_build_in_the_package():
    """Tools and .gitignore files take a folder called build/ for output and skip it."""
    assert not (PLAN.parent / "build").exists()
