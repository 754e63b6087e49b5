"""Collective bandwidth against what the hardware gives (issue 35): NCCL's own all_reduce_perf (nccl-tests)
read from its output, its peak bus bandwidth at message sizes where the peak is reached, judged against a
threshold per GPU system and interconnect.

nccl-tests prints one row per message size: size (B), count, type, redop, root, then out-of-place time (us),
algbw, busbw (GB/s), #wrong, then the same in place. busbw = algbw * 2 (n - 1) / n for all-reduce: the figure
comparable across rank counts, and the one NVIDIA quotes. The peak needs large messages: NCCL's maintainer on
nccl-tests#212: "256M is too small to reach peak bandwidth". A run whose largest size is below 1 GiB is
therefore refused as not comparable, never passed or failed on a figure that means nothing.

Thresholds are site data (site.node_check.min_busbw_gbps) where a site has measured its own; otherwise the
catalog's sourced figure for the GPU (builder/core/data/catalog.yaml, nccl_busbw) times FRACTION.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder.core import catalog

MIN_BYTES = 1 << 30            # the smallest message at which a peak figure is comparable
FRACTION = 0.9                 # of the catalog's figure: what a healthy node reaches run after run
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
                 r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")
DEVICE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$")


@dataclass(frozen=True)
class Row:
    bytes: int
    busbw_out: float
    busbw_in: float
    wrong: int

    @property
    def busbw(self) -> float:
        return max(self.busbw_out, self.busbw_in)


@dataclass(frozen=True)
class Run:
    rows: tuple          # Row, in the order printed
    hosts: tuple         # the nodes the ranks ran on, in rank order, each once
    gpus: int            # ranks (one GPU each)
    device: str          # the GPU's name as nccl-tests printed it

    @property
    def nodes(self) -> str:
        return " and ".join(self.hosts) if len(self.hosts) <= 2 else f"{', '.join(self.hosts[:3])} (+{len(self.hosts) - 3})"


def parse(text: str) -> Run:
    """The rows and the devices of one all_reduce_perf output (mpirun's [0] prefixes removed)."""
    rows, hosts, devices = [], [], set()
    gpus = 0
    for raw in text.splitlines():
        line = re.sub(r"\[\d+\]\s*", "", raw) if raw.lstrip().startswith("[") else raw
        m = DEVICE.match(line.strip())
        if m:
            gpus += 1
            if m.group(2) not in hosts:
                hosts.append(m.group(2))
            devices.add(m.group(4))
            continue
        m = ROW.match(line)
        if m:
            wrong = sum(int(x) if x.isdigit() else 1 for x in (m.group(9), m.group(13)))
            rows.append(Row(int(m.group(1)), float(m.group(8)), float(m.group(12)), wrong))
    return Run(tuple(rows), tuple(hosts), gpus, ", ".join(sorted(devices)))


@dataclass(frozen=True)
class Threshold:
    gbps: float
    source: str


def threshold(gpu: str | None, scope: str, site_gbps: float | None = None) -> Threshold | None:
    """The bus bandwidth a run must reach: the site's own figure, else FRACTION of the catalog's figure for
    this GPU and scope (intra: one node's NVLink; inter: across nodes). None: nobody knows one."""
    if site_gbps is not None:
        return Threshold(site_gbps, f"site.node_check.min_busbw_gbps.{scope}")
    rec = catalog.section("nccl_busbw").get(scope, {}).get(gpu or "")
    if not rec:
        return None
    return Threshold(round(rec["busbw_gbps"] * FRACTION, 1),
                     f"{FRACTION:.0%} of {rec['busbw_gbps']} GB/s ({rec['what']}; {rec['source']})")


def judge(run: Run, limit: Threshold | None, scope: str) -> tuple[str, str]:
    """(passed | failed | not comparable | unjudged, what was measured)."""
    if not run.rows:
        return "failed", "all_reduce_perf printed no result row"
    bad = [r for r in run.rows if r.wrong]
    if bad:
        return "failed", f"all_reduce_perf found wrong values at {bad[0].bytes} bytes on {run.nodes}"
    big = [r for r in run.rows if r.bytes >= MIN_BYTES]
    if not big:
        top = max(r.bytes for r in run.rows)
        return "not comparable", (f"the largest message was {top} bytes; the peak bus bandwidth is reached at "
                                  f"{MIN_BYTES >> 30} GiB and above (run all_reduce_perf -b 1G -e 8G -f 2)")
    peak = max(big, key=lambda r: r.busbw)
    said = (f"{scope}-node bus bandwidth {peak.busbw:.1f} GB/s at {peak.bytes} bytes on {run.nodes} "
            f"({run.gpus} GPUs{', ' + run.device if run.device else ''})")
    if limit is None:
        return "unjudged", said + "; no threshold known for this GPU (set site.node_check.min_busbw_gbps)"
    if peak.busbw < limit.gbps:
        return "failed", f"{said}, below the threshold {limit.gbps:.1f} GB/s ({limit.source})"
    return "passed", f"{said}, threshold {limit.gbps:.1f} GB/s ({limit.source})"
