"""CPU baselines (issue 35): the instruction-set level every node of a site shares, per platform, so that
compiled host code runs on each of them and not only on the machine that built it.

A level (x86-64-v3, neoverse-v2, ...) comes from the catalog (builder/core/data/catalog.yaml, cpu_levels):
how compilers are told (-march), which SIMD width DeepSpeed's CPU ops are compiled for, and which
extensions a binary may use. A stack's baseline on a platform is the one it or the site declares, else
the lowest level among the host CPUs of its GPUs' systems (gpu_host_cpus), else the platform's default;
`Baseline.origin` says which, so `check` can say why.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from builder.core import catalog


@dataclass(frozen=True)
class Level:
    name: str
    platform: str
    march: str                # the compiler flag: -march=x86-64-v3, -mcpu=neoverse-v2
    simd: str                 # DeepSpeed's SIMD define for its CPU ops: __AVX256__, __SVE__, ...
    features: frozenset       # every extension allowed, the levels before it included
    rank: int                 # order within the platform: a lower rank runs on more CPUs


@dataclass(frozen=True)
class Baseline:
    level: Level
    origin: str               # "declared by stacks.NAME.cpu_baseline", "derived from ...", "the ... default"
    how: str                  # declared | derived (from the GPUs' known hosts) | default (nothing known)

    @property
    def name(self) -> str:
        return self.level.name


@catalog.cached
def levels() -> dict[str, Level]:
    """Every level of the catalog, each with the features of the levels before it on its platform."""
    data = catalog.section("cpu_levels")["levels"]
    out, seen = {}, {}
    for name, rec in data.items():
        platform = rec["platform"]
        allowed = seen.get(platform, frozenset()) | frozenset(rec["features"])
        seen[platform] = allowed
        out[name] = Level(name=name, platform=platform, march=rec["march"], simd=rec["simd"], features=allowed,
                          rank=sum(1 for lv in out.values() if lv.platform == platform))
    return out


def level(name: str) -> Level | None:
    return levels().get(name)


def source() -> str:
    return catalog.section("cpu_levels")["source"]


@catalog.cached
def _rules() -> dict:
    return catalog.section("cpu_levels")


def beyond_every_level(feature: str) -> bool:
    return any(fnmatch.fnmatchcase(feature, pattern) for pattern in _rules()["beyond"])


def harmless(feature: str) -> bool:
    return feature in _rules()["harmless"]


def dispatch_instructions() -> tuple:
    return tuple(_rules()["dispatch_instructions"])


def dispatch_symbols() -> frozenset:
    return frozenset(_rules()["dispatch_symbols"])


def needs(feature: str, platform: str) -> Level | None:
    """The lowest level of the platform that allows the extension; None where it is beyond every level
    (AMX, AVX-512 VNNI, ...) or unknown to the catalog and not an extension (then it is the platform's base
    instruction set, see `judge`)."""
    for lv in sorted((lv for lv in levels().values() if lv.platform == platform), key=lambda lv: lv.rank):
        if feature in lv.features:
            return lv
    return None


def beyond(feature: str, lv: Level) -> bool:
    """Whether code with this extension may fail with SIGILL on a node of this level."""
    if harmless(feature) or feature in lv.features:
        return False
    return needs(feature, lv.platform) is not None or beyond_every_level(feature)


def pretty(feature: str) -> str:
    """The name people use: AVX512F -> AVX-512F, AVX512_VNNI -> AVX-512 VNNI, AMX_TILE -> AMX-TILE."""
    name = feature.replace("AVX512_", "AVX-512 ").replace("AVX512", "AVX-512").replace("AMX_", "AMX-")
    return {"SVE2BitPerm": "SVE2-BITPERM", "MatMulInt8": "I8MM", "FULLFP16": "FP16", "V8_1A": "Armv8.1-A",
            "V8_3A": "Armv8.3-A", "V8_4A": "Armv8.4-A"}.get(feature, name)


@dataclass(frozen=True)
class System:
    name: str
    gpus: tuple
    cpu: str
    level: str
    source: str
    verified: bool
    gpus_per_node: int | None = None


@catalog.cached
def systems() -> tuple[System, ...]:
    rec = catalog.section("gpu_host_cpus")["systems"]
    return tuple(System(name=name, gpus=tuple(r["gpus"]), cpu=r["cpu"], level=r["level"], source=r["source"],
                        verified=bool(r.get("verified")), gpus_per_node=r.get("gpus_per_node"))
                 for name, r in rec.items())


def default(platform: str) -> Level:
    return levels()[catalog.section("gpu_host_cpus")["defaults"][platform]]


def default_source() -> str:
    return catalog.section("gpu_host_cpus")["default_source"]


def derive(gpus: tuple, platform: str) -> Baseline:
    """The lowest level among the known host CPUs of the systems of these GPUs' generation (the GPUs of one
    compute capability share their boards and so their servers: H100 and H200 HGX boards sit beside the same
    CPUs) on this platform; the platform's default where none is known (or the stack names no GPU). By
    generation, so that moving a stack from H100 to H200 rebuilds nothing, as its arch list does not."""
    names = {g if isinstance(g, str) else g.name for g in gpus}
    ccs = {catalog.gpus()[n].cc for n in names if n in catalog.gpus()}
    kin = {n for n, g in catalog.gpus().items() if g.cc in ccs} | names
    found = [s for s in systems() if kin & set(s.gpus) and levels()[s.level].platform == platform]
    if not found:
        what = f"no system of {', '.join(sorted(names))} in the catalog" if names else "no GPUs named"
        return Baseline(default(platform), f"the {platform} default ({what}): {default_source()}", "default")
    low = min(found, key=lambda s: levels()[s.level].rank)
    systems_said = "; ".join(f"{s.name}: {s.cpu} -> {s.level}" for s in found)
    return Baseline(levels()[low.level], f"derived from the hosts of {', '.join(sorted(names))} ({systems_said}): "
                                         f"the lowest of them", "derived")


def choose(declared: tuple, gpus: tuple, platform: str, where: str) -> Baseline:
    """The baseline of one platform: the declared level of that platform (where: the key that declares
    them), else derived. `declared` holds level names already checked against the catalog."""
    for name in declared:
        lv = levels()[name]
        if lv.platform == platform:
            return Baseline(lv, f"declared by {where}", "declared")
    return derive(gpus, platform)


def platform_of(name: str) -> str:
    return levels()[name].platform


__all__ = ["Level", "Baseline", "levels", "level", "derive", "choose", "beyond", "needs", "pretty"]
