"""Which digest each base image resolves to: the one resolver that plan, build, diff, lock and the
benchmarks share, so that they compute one content key for one set of inputs.

Order of trust: a digest declared in stacks.yaml, then the digest `imgbuild lock` recorded for the same
image reference (stacks.lock.yaml), then the registry's answer now. A locked digest the site registry no
longer holds is a base made again (the mirrored Debian base gets a new digest on every machine that makes it): the
tag's digest now is used, marked `rebuilt`, and the lock holds only if the image's Python environment is the
one locked (builder.ship.measure.rebuilt_bases, before anything is built on it). Never guessed: a base that none of
them answers stays unresolved, with the reason; its keys are provisional (plan says so), and build,
which must know, refuses.

How far a caller may look: "all" asks whichever registry the base names (build, lock); "site" asks
only the site's own registry, where mirrored bases live (plan, diff: cheap, and no wait on a public
registry that is not reachable); "none" asks nobody.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from builder.errors import RegistryError
from builder.ship.oci import platform_digests
from builder.ship.registry import Ref, Registry
from builder.load.spec import Spec

LOOKUPS = ("all", "site", "none")


@dataclass
class Resolved:
    # base name -> sha256 digest, or {platform: digest} for the entries of an index (builder.plan.keys.base_ref)
    digests: dict = field(default_factory=dict)
    origins: dict = field(default_factory=dict)      # base name -> declared | lock | registry | rebuilt
    references: dict = field(default_factory=dict)   # base name -> the digest its reference names (an index's own)
    unresolved: dict = field(default_factory=dict)   # base name -> why no digest is known
    # base name -> the digest the lock recorded, where the registry no longer holds it and the tag names another
    # image now (origin "rebuilt"): its environment decides whether the lock's entries hold
    rebuilt: dict = field(default_factory=dict)

    def require(self) -> dict:
        """The digests, or a RegistryError naming the first base that has none (for build and lock)."""
        for name, why in self.unresolved.items():
            raise RegistryError(f"cannot resolve base {name!r}: {why}",
                                hint="mirror it into the site registry, run `imgbuild lock`, or record its digest "
                                     f"under bases.{name}.digest")
        return self.digests


def lock_digests(spec: Spec) -> dict:
    """Base name -> digest recorded in the lock file (or {platform: digest} where it locked an index), for
    bases whose image reference is unchanged."""
    locked = spec.lock
    if not locked:
        return {}
    return {name: rec.digests() for name, rec in locked.bases.items()
            if name in spec.bases and rec.image == spec.bases[name].ref(spec.site)}


def _missing(found, need: set) -> list:
    """The platforms in `need` that a per-platform answer lacks (a single digest serves any: BuildKit picks)."""
    return sorted(need - set(found)) if isinstance(found, dict) else []


def resolve(spec: Spec, stacks: Iterable[str] | None = None, *, lookup: str = "all", use_lock: bool = True,
            registry: Callable[[str], Registry] = Registry) -> Resolved:
    """Digests of the bases used by `stacks` (every base when None). `registry` makes a client for a
    host (tests pass an in-memory one)."""
    assert lookup in LOOKUPS, lookup
    names = sorted({spec.stack(s).base.name for s in stacks} if stacks is not None else set(spec.bases))
    # The platforms each base is needed for: an index must have an image for every one of them.
    need: dict = {}
    for stack in (spec.stack(s) for s in (stacks if stacks is not None else spec.stacks)):
        need.setdefault(stack.base.name, set()).update(stack.platforms)
    locked = lock_digests(spec) if use_lock else {}
    out = Resolved()
    clients: dict = {}
    for name in names:
        base = spec.bases[name]
        if base.digest:
            out.digests[name], out.origins[name] = base.digest, "declared"
            continue
        ref = Ref.parse(base.ref(spec.site))
        may_ask = not (lookup == "none" or lookup == "site" and ref.registry != spec.site.registry)
        if name in locked and not _missing(locked[name], need.get(name, set())):
            # Only the site's own registry is asked: that is where bases are made again (the mirrored Debian
            # base, a site's own base image); a public registry's digests stay, and is not asked on every run.
            gone = may_ask and ref.registry == spec.site.registry and \
                _gone(clients.setdefault(ref.registry, registry(ref.registry)), ref, spec.lock.bases[name].digest)
            if not gone:
                out.digests[name], out.origins[name] = locked[name], "lock"
                continue
            out.rebuilt[name] = spec.lock.bases[name].digest
        if not may_ask:
            out.unresolved[name] = (f"{ref} is neither pinned by digest nor locked"
                                    + ("" if lookup == "none" else " (only the site registry is asked here)"))
            continue
        try:
            client = clients.setdefault(ref.registry, registry(ref.registry))
            # Key inputs: every manifest hashed, not believed; an index read for each platform's image.
            found = platform_digests(client, ref.repo, ref.reference, str(ref))
        except RegistryError as exc:
            out.unresolved[name] = f"{ref}: {exc.message}"
            continue
        if not found:
            out.unresolved[name] = f"{ref} is not in the registry (scripts/setup-host.sh seeds the mirrored Debian base)"
            continue
        lacking = _missing(found[1], need.get(name, set()))
        if lacking:
            out.unresolved[name] = (f"{ref} has no {', '.join(lacking)} image (it holds "
                                    f"{', '.join(sorted(found[1])) or 'no platform image'})")
            continue
        out.digests[name], out.origins[name], out.references[name] = \
            found[1], "rebuilt" if name in out.rebuilt else "registry", found[0]
    return out


def _gone(client: Registry, ref: Ref, digest: str) -> bool:
    """Whether the registry answers that it no longer holds the locked digest of `ref`'s repository. A
    registry that cannot be asked is no answer: the lock stands, and pulling it says what is wrong."""
    try:
        return client.manifest_digest(ref.repo, digest) is None
    except RegistryError:
        return False


__all__ = ["resolve", "Resolved", "LOOKUPS"]
