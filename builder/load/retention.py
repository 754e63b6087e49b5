"""site.retention from stacks.yaml: what `imgbuild gc` keeps (builder.ship.gc applies it).

    site:
      retention:
        keep_releases: 3     # the newest N released images of each stack (default 3)
        keep_tags: [prod, "*-stable"]   # every image one of these release tags names (globs; default none)
        keep_days: 14        # everything built or released in the last D days (default 14)
        grace_hours: 24      # the keys of a build or release started in the last H hours (its lease; default 24)

A policy that keeps no release at all (keep_releases 0, no keep_tags, keep_days 0) is refused: a gc under
it would delete every release of the site.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from builder.load.params import type_name

KEYS = {"keep_releases", "keep_tags", "keep_days", "grace_hours"}
TAG_GLOB = re.compile(r"^[A-Za-z0-9_*?\[\]][A-Za-z0-9_.*?\[\]-]{0,127}\Z")
LIMITS = {"keep_releases": (0, 10_000), "keep_days": (0, 36_500), "grace_hours": (1, 8_760)}


@dataclass(frozen=True)
class Retention:
    keep_releases: int = 3
    keep_tags: tuple = ()
    keep_days: int = 14
    grace_hours: int = 24

    def named(self, tag: str) -> bool:
        return any(fnmatch.fnmatchcase(tag, glob) for glob in self.keep_tags)


def parse(loader, value: Any) -> Retention:
    """loader is spec._Loader (err, mapping, string)."""
    if value is None:
        return Retention()
    path = ("site", "retention")
    raw = loader.mapping(path, value, KEYS, what="a mapping of retention settings")
    out: dict = {}
    for key, (low, high) in LIMITS.items():
        if key in raw:
            number = raw[key]
            if isinstance(number, bool) or not isinstance(number, int):
                raise loader.err(path + (key,), f"expected a whole number, got {type_name(number)}")
            if not low <= number <= high:
                raise loader.err(path + (key,), f"{number} is not between {low} and {high}"
                                 + (" (0 would let gc delete what a running build is about to use)"
                                    if key == "grace_hours" else ""))
            out[key] = number
    if "keep_tags" in raw:
        tags = raw["keep_tags"]
        if not isinstance(tags, list):
            raise loader.err(path + ("keep_tags",), f"expected a list of release tags (globs allowed), got "
                             f"{type_name(tags)}", hint='e.g. keep_tags: [prod, "*-stable"]')
        for i, tag in enumerate(tags):
            text = loader.string(path + ("keep_tags", i), tag)
            if not TAG_GLOB.match(text):
                raise loader.err(path + ("keep_tags", i), f"{text[:70]!r} is not a tag or a glob of tags")
        out["keep_tags"] = tuple(str(t) for t in tags)
    policy = Retention(**out)
    if policy.keep_releases == 0 and not policy.keep_tags and policy.keep_days == 0:
        raise loader.err(path, "this policy keeps nothing: keep_releases 0, no keep_tags and keep_days 0 would "
                         "let gc delete every release of the site",
                         hint="keep at least the newest release of each stack (keep_releases: 1)")
    return policy


__all__ = ["Retention", "parse"]
