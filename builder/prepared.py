"""One prepared plan (docs/design.md): the spec and its lock read once (builder.load.spec.load_spec), the
bases resolved once, the plan made once. Every verb takes what `prepare` made: check and lint judge its
plan, plan and render show it, build and release ship it, validate checks its images, ci writes it.

Made at the edge (the command line, a test), handed down: nothing beneath plans or reads the lock again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from builder.load.spec import Spec, Stack, load_spec
from builder.plan.keys import Plan, make_plan
from builder.ship import bases as base_digests
from builder.ship.bases import Resolved


@dataclass(frozen=True)
class Prepared:
    spec: Spec
    stacks: tuple      # the selected Stacks, in the order given
    bases: Resolved    # the base digests (empty where none was asked for) and why some are unknown
    plan: Plan         # every selected stack on those digests; a layer of unresolved intent rendered from it

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stacks]

    @property
    def lock(self):
        """The lock file read with the spec (Spec.lock), or None."""
        return self.spec.lock

    def locked(self) -> Plan:
        """The plan, refusing a layer whose intent the lock file does not resolve (IB098): nothing is built,
        rendered or keyed from intent. check and lock judge or resolve intent and take `plan` itself."""
        self.plan.refuse_unlocked()
        return self.plan

    def require(self, stacks: Iterable[Stack] | None = None) -> Plan:
        """The locked plan, refusing (RegistryError) where a base of `stacks` (default every selected one) has
        no digest: build, release and validate must know every key."""
        need = {s.base.name for s in (self.stacks if stacks is None else stacks)}
        Resolved(unresolved={n: why for n, why in self.bases.unresolved.items() if n in need}).require()
        return self.locked()

    def narrowed(self, stacks: Iterable[Stack]) -> "Prepared":
        """The same preparation for some of its stacks (a CI node job's: those holding its node)."""
        chosen = tuple(stacks)
        return Prepared(self.spec, chosen, self.bases, self.plan.narrowed([s.name for s in chosen]))


def prepare(spec: Spec | str | Path, stacks: Iterable[Stack] | None = None, *,
            bases: str | Resolved | None = None, kinds=None) -> Prepared:
    """spec: a loaded Spec, or the stacks file to load (its lock read with it). stacks: the selected Stacks
    (default every stack, in file order). bases: how base digests are found: "none", "site" or "all" (how far
    builder.ship.bases.resolve may look), a Resolved already made, or None to ask nothing at all (declared
    digests only: render's Dockerfiles need none)."""
    if not isinstance(spec, Spec):
        spec = load_spec(spec, kinds=kinds)
    chosen = tuple(stacks) if stacks is not None else tuple(spec.stacks.values())
    names = [s.name for s in chosen]
    if bases is None:
        resolved = Resolved()
    elif isinstance(bases, Resolved):
        resolved = bases
    else:
        resolved = base_digests.resolve(spec, names, lookup=bases)
    return Prepared(spec, chosen, resolved, make_plan(spec, chosen, resolved.digests, intent=True))


__all__ = ["Prepared", "prepare"]
