"""Where the layer kinds and the skeleton come from: the ones shipped with imgbuild, then the site's.

Shipped: the checkout's top level (layers/, Dockerfile.j2) when imgbuild runs from a checkout or an
editable install; else the copy that a wheel carries in builder/_shipped/ (setup.py puts it there at
build time, nothing is duplicated in git). `shipped_root()` is the one place that decides.

Site: folders of extra kinds, highest priority first: the --kinds folders in the order given (default
$IMGBUILD_KINDS, os.pathsep-separated), then layers/ beside the stacks file. They ADD to the shipped
kinds; a kind with the name of a lower one overrides it, and `imgbuild check` says so. A Dockerfile.j2
beside the stacks file replaces the shipped skeleton. Shared templates (macros.j2) are looked up in the
same order as the kinds. Folder paths never enter a content key: only the rendered text and the
kinds' files/ (relative path, bytes, mode) do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from builder.errors import SpecError

PACKAGE = Path(__file__).resolve().parent.parent   # builder/
PACKAGED = PACKAGE / "_shipped"   # where a wheel carries layers/ and Dockerfile.j2
SKELETON = "Dockerfile.j2"
ENV = "IMGBUILD_KINDS"


def _holds_kinds(folder: Path) -> bool:
    return (folder / "layers").is_dir() and (folder / SKELETON).is_file()


def shipped_root() -> Path:
    """The folder holding the shipped layers/ and Dockerfile.j2: the checkout's top level when
    running from a checkout (or an editable install of one), else the packaged copy."""
    checkout = PACKAGE.parent
    if (checkout / "pyproject.toml").is_file() and _holds_kinds(checkout):
        return checkout
    if _holds_kinds(PACKAGED):
        return PACKAGED
    raise SpecError("this imgbuild installation carries no layer kinds (no layers/ and Dockerfile.j2 in "
                    "the checkout nor in the package)", file=str(PACKAGED),
                    hint="install imgbuild from a wheel built from the repository (pip install . or "
                         "pip wheel . --no-deps), or run it from a checkout")


def env_kinds() -> list[Path]:
    """The folders named by $IMGBUILD_KINDS (os.pathsep-separated; empty entries ignored)."""
    return [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]


@dataclass(frozen=True)
class KindFolder:
    path: Path    # a folder holding <kind>/kind.yaml, <kind>/fragment.j2, ...
    origin: str   # "site" or "shipped"

    def __str__(self) -> str:
        return f"{self.origin}: {self.path}"


@dataclass(frozen=True)
class Templates:
    """What the one Jinja environment loads from (hashable, so that environments are cached)."""

    skeleton: Path     # Dockerfile.j2
    fragments: tuple   # (kind name, kind folder): NAME/fragment.j2 comes from the kind that won NAME
    search: tuple      # kind folders, highest priority first: macros.j2 and any other shared template


class Kinds(dict):
    """name -> Kind (the winner of each name), with where each was found and what it overrides."""

    def __init__(self, kinds: dict, folders: tuple, skeleton: KindFolder, root: Path, shadowed: dict):
        super().__init__(sorted(kinds.items()))
        self.folders = folders      # KindFolder, highest priority first
        self.skeleton = skeleton    # KindFolder whose path is the Dockerfile.j2 used
        self.root = root            # the site folder if it holds layers/ or Dockerfile.j2, else the shipped root
        self.shadowed = shadowed    # name -> [KindFolder whose kind of that name lost]

    def origin(self, name: str) -> KindFolder:
        folder = self[name].folder.parent
        return next(f for f in self.folders if f.path == folder)

    @property
    def templates(self) -> Templates:
        return Templates(skeleton=self.skeleton.path,
                         fragments=tuple((name, kind.folder) for name, kind in self.items()),
                         search=tuple(f.path for f in self.folders))

    def describe(self, names: Iterable[str]) -> list[str]:
        """Lines for `check`: each kind used, grouped by the folder it came from, and the skeleton."""
        names = set(names)
        groups = []
        for folder in self.folders:
            used = []
            for name in sorted(n for n in names if self.origin(n) == folder):
                lost = self.shadowed.get(name, [])
                used.append(name + (" [overrides " + ", ".join(
                    "shipped" if f.origin == "shipped" else str(f.path) for f in lost) + "]" if lost else ""))
            if used:
                groups.append(f"{', '.join(used)} ({folder})")
        lines = ["kinds: " + "; ".join(groups)]
        over = " [overrides shipped]" if self.skeleton.origin == "site" else ""
        lines.append(f"skeleton: {SKELETON}{over} ({self.skeleton})")
        return lines


def kind_folders(site: Path, extra: Iterable[Path] | None = None) -> tuple[KindFolder, ...]:
    """The kind folders, highest priority first: extra (default $IMGBUILD_KINDS), site/layers when
    present, the shipped layers/. A folder named twice counts once, at its first place; the shipped
    folder always counts as shipped (a stacks file in the checkout adds nothing)."""
    shipped = (shipped_root() / "layers").resolve()
    out: list[KindFolder] = []
    seen = {shipped}
    for path in env_kinds() if extra is None else extra:
        path = Path(path)
        if not path.is_dir():
            raise SpecError("kinds folder not found", file=str(path),
                            hint=f"--kinds and ${ENV} name folders holding <kind>/kind.yaml and <kind>/fragment.j2")
        path = path.resolve()
        if path not in seen:
            seen.add(path)
            out.append(KindFolder(path, "site"))
    beside = (site / "layers").resolve()
    if beside.is_dir() and beside not in seen:
        out.append(KindFolder(beside, "site"))
    out.append(KindFolder(shipped, "shipped"))
    return tuple(out)


def find_kinds(site: Path, extra: Iterable[Path] | None, load: Callable[[Path], dict]) -> Kinds:
    """Load every kind folder with load (kinds.load_kinds: one folder) and merge them by priority."""
    site = site.resolve()
    folders = kind_folders(site, extra)
    kinds: dict = {}
    shadowed: dict = {}
    for folder in folders:
        for name, kind in load(folder.path).items():
            if name in kinds:
                shadowed.setdefault(name, []).append(folder)
            else:
                kinds[name] = kind
    shipped = shipped_root().resolve()
    if (site / SKELETON).is_file() and site != shipped:
        skeleton = KindFolder(site / SKELETON, "site")
    else:
        skeleton = KindFolder(shipped / SKELETON, "shipped")
    root = site if (site / "layers").is_dir() or (site / SKELETON).is_file() else shipped
    return Kinds(kinds, folders, skeleton, root, shadowed)


__all__ = ["shipped_root", "env_kinds", "kind_folders", "find_kinds", "Kinds", "KindFolder", "Templates", "ENV"]
