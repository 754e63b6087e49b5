"""site.node_check (and stacks.NAME.gpus_per_node) from stacks.yaml: what `imgbuild node-check` needs to know of
the site's GPU nodes to exercise them (issue 35).

    site:
      node_check:
        gpus_per_node: 8                          # the GPUs of each node (a stack may say its own)
        min_busbw_gbps: {intra: 360, inter: 40}   # all-reduce bus bandwidth a healthy node (pair) reaches

gpus_per_node is where a GPU stack's node check takes its GPUs from (emitted files included); without it, from
the catalog's systems of the stack's GPUs when they agree. min_busbw_gbps replaces the catalog's sourced
figures (builder/nodecheck/busbw.py) with the site's own measured baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from builder.load.params import type_name

KEYS = {"gpus_per_node", "min_busbw_gbps"}
SCOPES = ("intra", "inter")


@dataclass(frozen=True)
class NodeCheckSettings:
    gpus_per_node: int | None = None
    min_busbw_gbps: tuple = ()        # (scope, GB/s)

    def busbw(self, scope: str) -> float | None:
        return dict(self.min_busbw_gbps).get(scope)


def gpus(loader, path: tuple, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise loader.err(path, f"expected a whole number of GPUs from 1 to 64, got "
                               f"{value if isinstance(value, int) and not isinstance(value, bool) else type_name(value)}",
                         hint="the GPUs of one node: 8 on an HGX/DGX board, 4 on a GB200 compute tray")
    return value


def parse(loader, value: Any) -> NodeCheckSettings:
    """loader is spec._Loader (err, mapping)."""
    if value is None:
        return NodeCheckSettings()
    path = ("site", "node_check")
    raw = loader.mapping(path, value, KEYS, what="a mapping of node check settings")
    pairs = []
    if raw.get("min_busbw_gbps") is not None:
        found = loader.mapping(path + ("min_busbw_gbps",), raw["min_busbw_gbps"], set(SCOPES),
                               what="a mapping of intra and inter to GB/s")
        for scope in SCOPES:
            got = found.get(scope)
            if got is None:
                continue
            if isinstance(got, bool) or not isinstance(got, (int, float)) or not 0 < got < 10000:
                raise loader.err(path + ("min_busbw_gbps", scope), f"expected a bus bandwidth in GB/s (a number above "
                                 f"0), got {got if isinstance(got, (int, float)) and not isinstance(got, bool) else type_name(got)}")
            pairs.append((scope, float(got)))
    return NodeCheckSettings(gpus_per_node=gpus(loader, path + ("gpus_per_node",), raw.get("gpus_per_node")),
                             min_busbw_gbps=tuple(pairs))


__all__ = ["NodeCheckSettings", "parse", "gpus"]
