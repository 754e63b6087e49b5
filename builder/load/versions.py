"""The versions imgbuild reads off an image, puts in tags and compares: one table, built from the
platform's own facts and from what each loaded layer kind declares (kind.yaml `versions:`).

A new framework kind adds its {field}, manifest version, image-diff row and preflight fact by
declaring `versions: {flash_attn: [flash-attn]}` in its folder: no Python list names it.
"""

from __future__ import annotations

from typing import Iterable

# What every image is measured for, whatever its kinds: Python itself, torch and what torch was built
# with (read from torch by the probe), and numpy, which half of the ecosystem pins against.
PLATFORM = {"python": (), "torch": ("torch",), "cuda": (), "cudnn": (), "nccl": (), "numpy": ("numpy",)}
# Fields of a release tag that are not versions (builder.load.tags fills them).
TAG_ONLY = ("stack", "date", "project_commit")


def fields(kinds: Iterable) -> dict[str, tuple]:
    """{field: distribution names} of the platform, then of the kinds (in name order)."""
    out = dict(PLATFORM)
    for kind in sorted(kinds, key=lambda k: k.name):
        for field, dists in kind.versions:
            out.setdefault(field, tuple(dists))
    return out


def tag_fields(kinds: Iterable) -> tuple[str, ...]:
    return TAG_ONLY + tuple(fields(kinds))


def measured(facts: dict, kinds: Iterable) -> dict:
    """{field: version} from the probe's measurements of one image (fields with no value left out)."""
    dists = facts.get("dists", {})
    torch = facts.get("torch") or {}
    out = {"python": facts.get("python"), "cuda": torch.get("cuda"), "cudnn": torch.get("cudnn"),
           "nccl": torch.get("nccl")}
    for field, names in fields(kinds).items():
        if names:
            out[field] = next((dists[n.lower().replace("_", "-")] for n in names
                               if n.lower().replace("_", "-") in dists), None)
    out["torch"] = out.get("torch") or torch.get("version")
    return {k: v for k, v in out.items() if v}


__all__ = ["PLATFORM", "fields", "tag_fields", "measured"]
