"""stacks.lock.yaml: what each base resolved to (its digest) and what `imgbuild lock` measured inside it,
and the same for layers whose image is a base in all but name (`lock layer=NAME`).

Only reading lives here (plan, preflight and the base resolver read it without an engine); probing
and writing are `builder.ship.lock`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from builder.errors import SpecError

LOCK_VERSION = 1


@dataclass(frozen=True)
class LockedBase:
    image: str
    digest: str
    probed: str
    facts: dict     # name -> str, or None: measured and not installed; a missing name was not measured


@dataclass(frozen=True)
class LockedLayer:
    """A layer whose image makes a base of its own (CUDA and torch from PyPI on Debian): measured like a
    base, valid while `definition` (Stack.layer_definition) is what stacks.yaml defines now."""
    image: str      # the registry reference of the image probed (its repository and key tag)
    digest: str
    probed: str
    definition: str
    facts: dict


@dataclass(frozen=True)
class Lock:
    file: str
    bases: dict     # base name -> LockedBase
    layers: dict = field(default_factory=dict)   # layer name -> LockedLayer

    def base_digest(self, base, site) -> str | None:
        """The digest the lock resolved `base` to, where its entry is for the base as named now."""
        entry = self.bases.get(base.name)
        return entry.digest if entry is not None and base.locked_by(entry, site) else base.digest


def lock_path(spec_file: str | Path) -> Path:
    spec_file = Path(spec_file)
    return spec_file.with_name(spec_file.stem + ".lock.yaml")


def load_lock(spec_file: str | Path) -> Lock | None:
    path = lock_path(spec_file)
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if data.get("version") != LOCK_VERSION or not isinstance(data.get("bases"), dict):
            raise ValueError(f"expected version: {LOCK_VERSION} and a bases mapping")
        bases = {name: LockedBase(image=str(rec["image"]), digest=str(rec["digest"]), probed=str(rec["probed"]),
                                  facts=_facts(rec))
                 for name, rec in data["bases"].items()}
        layers = {name: LockedLayer(image=str(rec["image"]), digest=str(rec["digest"]), probed=str(rec["probed"]),
                                    definition=str(rec["definition"]), facts=_facts(rec))
                  for name, rec in (data.get("layers") or {}).items()}
    except (yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SpecError(f"not a lock file imgbuild wrote: {exc}", file=str(path),
                        hint="delete it and run imgbuild lock again") from None
    return Lock(file=str(path), bases=bases, layers=layers)


def _facts(rec: dict) -> dict:
    return {k: None if v is None else str(v) for k, v in (rec.get("facts") or {}).items()}


__all__ = ["Lock", "LockedBase", "LockedLayer", "LOCK_VERSION", "load_lock", "lock_path"]
