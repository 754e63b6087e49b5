"""Preflight: refuse impossible stacks in seconds, before anything is built.

Each rule is a small function registered with its id; it reads the stack's facts (builder.rules.facts:
measured, then declared, then catalog) and returns findings that name the stack, the key in
stacks.yaml, the rule and the source of every fact behind it. A rule that needs a fact nobody knows
says so (severity unknown) instead of guessing. Nothing here touches Docker or the network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from builder.core import catalog, cpubaseline
from builder.core import platforms as plat
from builder.load import tags as tag_templates, versions
from builder.load.params import Download, GitPin, WheelPin, WheelPins
from builder.core.catalog import Known, driver_tuple
from builder.rules.facts import agree, ORIGINS, Fact, StackFacts, major_minor, resolve
from builder.rules.findings import Finding, ordered, strict as make_strict
from builder.rules.lint import ARCH_VARIANT
from builder.load.spec import LayerDef, Spec, Stack
from builder.core.yamlsrc import dotted

@dataclass(frozen=True)
class Rule:
    id: str     # the id its findings carry (IB030 reports the catalog's IB031-IB039; IB060 also IB061-IB067)
    name: str
    check: Callable[["Ctx"], Iterable[Finding]]


RULES: list[Rule] = []


def rule(rule_id: str, name: str):
    def register(fn):
        RULES.append(Rule(rule_id, name, fn))
        return fn
    return register


def release(v: Version) -> Version:
    """Compatibility facts compare releases: NGC's torch 2.6.0a0+sha is torch 2.6 for them (pip
    resolution is another matter: see IB070)."""
    return Version(v.base_version)


@dataclass
class Ctx:
    spec: Spec
    stack: Stack
    facts: StackFacts
    lock: object = None   # the lock file (builder.core.lockfile.Lock), where there is one

    def stack_key(self, *rest) -> tuple:
        """Where in stacks.yaml this stack's `rest[0]` is written: the stack itself or one it extends."""
        stacks = (self.spec.doc.data.get("stacks") or {}) if self.spec.doc else {}
        name = self.stack.name
        while name in stacks and isinstance(stacks[name], dict):
            if rest[0] in stacks[name]:
                return ("stacks", name) + rest
            name = stacks[name].get("extends")
        return ("stacks", self.stack.name)

    def layer_key(self, layer: LayerDef, *rest) -> tuple:
        return (layer.section, layer.name) + ((("params",) + rest) if rest else ())

    def gpu_key(self, gpu) -> tuple:
        index = [g.name for g in self.stack.gpus].index(gpu.name)
        return self.stack_key("gpus", index)

    def targets(self) -> Iterator[tuple]:
        """(gpu, key) of every GPU something in the stack compiles for: the stack's, and those of layers
        with their own `gpus` parameter (cuda-source, flash-attn)."""
        for gpu in self.stack.gpus:
            yield gpu, self.gpu_key(gpu)
        for layer in self.stack.chain:
            own = dict(layer.params).get("gpus") if "gpus" in layer.kind.params else None
            for i, name in enumerate(own or ()):
                yield catalog.gpus()[name], self.layer_key(layer, "gpus", i)

    def find(self, rule_id: str, severity: str, key: tuple, message: str, facts: Iterable[Fact | None] = (),
             known: Known | None = None, source: str = "", fix: str = "") -> Finding:
        facts = [f for f in facts if f is not None]
        parts = [f"{f.value if f.value is not None else 'not installed'} ({f.origin}: {f.source})" for f in facts]
        if known is not None:
            parts.append(known.source)
        if source:
            parts.append(source)
        flags = [f.verified for f in facts if f.verified is not None] + ([known.verified] if known else [])
        origins = [o for o in ORIGINS if any(f.origin == o for f in facts)]
        return Finding(rule=rule_id, severity=severity, message=message, file=self.spec.file,
                       line=self.spec.doc.line(key) if self.spec.doc else None, key=dotted(key),
                       stack=self.stack.name, source="; ".join(parts), origin="+".join(origins),
                       verified=all(flags) if flags else None, fix=fix)

    def unknown(self, rule_id: str, key: tuple, what: str, fix: str = "") -> Finding:
        return self.find(rule_id, "unknown", key, what, fix=fix or "measure the base: imgbuild lock "
                         "(preflight then uses the measured facts)")


def _cc(gpu) -> Version:
    return Version(gpu.cc)


# -- driver and GPU architectures -------------------------------------------------------------------

@rule("IB001", "driver floor vs the base's CUDA")
def driver_floor(ctx: Ctx) -> Iterator[Finding]:
    """The oldest driver on the site's nodes must run the base's CUDA: the toolkit's own minimum, or
    the floor of CUDA minor-version compatibility for its major (imgbuild compiles native code for
    every target, no PTX, so that mode's PTX-JIT limit does not apply), or, on data-center GPUs
    only, a forward-compatible branch NVIDIA lists for that NGC month."""
    cuda = ctx.facts.get("cuda")
    if cuda is None or cuda.value is None:
        if ctx.stack.base.family in ("ngc-pytorch", "ngc-jax", "cuda"):
            yield ctx.unknown("IB001", ("bases", ctx.stack.base.name), "the CUDA of this base is not known, "
                              "so the driver floor cannot be checked against it")
        return
    floor = ctx.stack.driver_floor
    if floor is None:
        yield ctx.unknown("IB001", ("site",), f"no driver_floor declared, so CUDA {cuda.value} cannot be checked "
                          "against the driver of the site's nodes", fix="declare site.driver_floor (or the "
                          "stack's): the oldest driver on the GPU nodes, as nvidia-smi prints it")
        return
    own = ctx.stack_key("driver_floor")
    key = own if own[-1] == "driver_floor" else ("site", "driver_floor")
    drv = driver_tuple(floor)
    row, mvc = catalog.toolkit_driver(cuda.value), catalog.minor_version_floor(cuda.value.major)
    if (row and drv >= driver_tuple(row.value[1])) or (mvc and drv >= driver_tuple(mvc.value)):
        return
    if row is None and mvc is None:
        yield ctx.unknown("IB001", key, f"the minimum driver for CUDA {cuda.value} is not in the catalog")
        return
    need = f"CUDA {cuda.value} needs " + " or ".join(
        ([f"driver {row.value[1]} (toolkit {row.value[0]})"] if row else [])
        + ([f"R{mvc.value}+ under minor-version compatibility"] if mvc else []))
    ngc = catalog.ngc_release(ctx.stack.base.image)
    branch = [b for b in (ngc.fwd_compat if ngc else ()) if driver_tuple(b)[0] == drv[0] and drv >= driver_tuple(b)]
    geforce = [g.name for g in ctx.stack.gpus if not g.datacenter]
    if branch and ctx.stack.gpus and not geforce:
        fwd = Known(branch, f"forward-compatible branches of {ngc.label} (same notes); "
                    f"{catalog.forward_compat_source()}", "fwd_compat" not in ngc.unverified)
        yield ctx.find("IB001", "warning", key, f"driver floor {floor} is below what the base needs ({need}); "
                       f"it runs only through CUDA forward compatibility (branch R{drv[0]} >= {branch[0]}, "
                       "data-center GPUs, the cuda-compat package)", [cuda], fwd,
                       fix="raise the site's driver, or accept forward compatibility knowingly")
        return
    why = f"; forward compatibility does not cover GeForce GPUs ({', '.join(geforce)})" if branch and geforce else ""
    if ngc is not None and ngc.min_driver:
        why += f" (NVIDIA's notes for {ngc.label} state {ngc.min_driver})"
    lowest = mvc.value if mvc else row.value[1]
    yield ctx.find("IB001", "error", key, f"driver floor {floor} cannot run base {ctx.stack.base.name}: {need}{why}",
                   [cuda], row or mvc, source=mvc.source if row and mvc else "",
                   fix=f"use a base whose CUDA this driver runs, or raise the driver to {lowest} or newer")


@rule("IB002", "a version newer than the catalog knows")
def newer_than_known(ctx: Ctx) -> Iterator[Finding]:
    """A declared version beyond the newest release the catalog knows may not exist (a typo such as 0.19.99 or
    0.42.0 passed `check --strict` in silence), and no fact of the catalog speaks for it: an unknown, not a pass.
    The newest known is the newer of the release list's newest and newest_known (read at other times). A listed
    release beyond what the catalog's facts were read through (newest_known) exists, but no fact speaks for it
    either: an unknown that says so. A version inside the list's range but not on it is IB003's error alone."""
    for name, fact in sorted(ctx.facts.facts.items()):
        if fact.origin != "declared" or not isinstance(fact.value, Version):
            continue
        facts_through = catalog.newest_known(name)
        listed = catalog.releases(name)
        value = Version(fact.value.base_version)
        if listed is not None and value in listed.value:
            if facts_through is not None and value > Version(facts_through.value):
                yield ctx.find("IB002", "unknown", fact.key, f"{name} {fact.value} is a published release, newer "
                               f"than the catalog's facts were read through ({facts_through.value}): no known fact "
                               "speaks for it", known=facts_through,
                               fix=f"use {facts_through.value} or older, or add what you know of {fact.value} to the "
                                   "site's catalog (site.catalog: newest_known, and its records)")
            continue
        tops = [(Version(facts_through.value), facts_through)] if facts_through else []
        tops += [(listed.value[-1], listed)] if listed is not None else []
        if not tops:
            continue
        top, known = max(tops, key=lambda t: t[0])
        if value.release > top.release:
            yield ctx.find("IB002", "unknown", fact.key, f"{name} {fact.value} is newer than any release the "
                           f"catalog knows (up to {top}): it may not exist, and no known fact speaks for it",
                           known=known, fix="check the version on the index (imgbuild lock resolves it there); a "
                           "release the catalog lacks goes in the site's catalog (site.catalog: releases, newest_known)")


@rule("IB005", "a tag field not known before the build")
def tag_fields_known(ctx: Ctx) -> Iterator[Finding]:
    """A version field of a release tag is filled from what the image measures at release; where nothing the
    stack declares (a layer's version, a known commit, the base's month) says its value before the build,
    `plan` and `diff` cannot show the tag, and a reviewer approves a tag nobody has read."""
    known = {name for name, fact in ctx.facts.facts.items() if fact is not None and fact.value is not None}
    known |= set(versions.TAG_ONLY)
    for i, template in enumerate(ctx.stack.tags):
        unknown = [name for name, _ in tag_templates.fields(template) if name not in known]
        for name in dict.fromkeys(unknown):
            yield ctx.find("IB005", "warning", ctx.stack_key("tags", i),
                           f"tag {template!r}: {{{name}}} is not known before the build (nothing the stack declares "
                           "gives it); it is read from the image at release, so plan and diff show it unfilled",
                           source="release tags are filled from the versions measured in the image (docs/stacks-reference.md, "
                                  "tags); before the build only what the stack declares or the catalog knows fills them",
                           fix=f"declare the version that gives {{{name}}} (a layer's params.version, a commit "
                               "the catalog knows), or tag by {project_commit} or {date}")


@rule("IB003", "a version that was never released")
def never_released(ctx: Ctx) -> Iterator[Finding]:
    """A declared version inside the range of the catalog's release list but not on it was never published
    (deepspeed 0.16.99, megatron-core 0.13.99 passed `check --strict` and failed at build, after the base was
    pulled): an error, with the nearest real releases. Beyond the list's newest it is IB002's unknown."""
    for name, fact in sorted(ctx.facts.facts.items()):
        known = catalog.releases(name)
        if known is None or fact.origin != "declared" or not isinstance(fact.value, Version):
            continue
        published = known.value
        # A pre-release or a local build (0.14.0rc0, 2.9.0a0+git) is judged by the release it leads to.
        value = Version(fact.value.base_version) if fact.value.is_prerelease or fact.value.local else fact.value
        if value in published or value > published[-1] or value < published[0]:
            continue
        below = [v for v in published if v < fact.value][-2:]
        above = [v for v in published if v > fact.value][:2]
        yield ctx.find("IB003", "error", fact.key, f"{name} {fact.value} was never released: the nearest releases "
                       f"are {', '.join(map(str, below + above))}", known=known,
                       fix=f"use a released version ({', '.join(map(str, below[-1:] + above[:1]))})")


@rule("IB010", "target GPU newer than the base's CUDA")
def gpu_too_new(ctx: Ctx) -> Iterator[Finding]:
    cuda = ctx.facts.get("cuda")
    if cuda is None or cuda.value is None:
        return
    for gpu, key in ctx.targets():
        if Version(major_minor(cuda.value)) < gpu.min_cuda:
            yield ctx.find("IB010", "error", key, f"{gpu.name} (sm_{gpu.sm}) needs CUDA {gpu.min_cuda} "
                           f"or newer; base {ctx.stack.base.name} has CUDA {cuda.value}, which cannot build for it",
                           [cuda], gpu.known("min_cuda"),
                           fix=f"use a base with CUDA {gpu.min_cuda}+ for {gpu.name}")


@rule("IB011", "target GPU dropped by the base's CUDA")
def gpu_dropped(ctx: Ctx) -> Iterator[Finding]:
    cuda = ctx.facts.get("cuda")
    if cuda is None or cuda.value is None:
        return
    for gpu, key in ctx.targets():
        if gpu.max_cuda_major is not None and cuda.value.major > gpu.max_cuda_major:
            yield ctx.find("IB011", "error", key, f"{gpu.name} (sm_{gpu.sm}) cannot be targeted by "
                           f"CUDA {cuda.value.major}: CUDA {gpu.max_cuda_major} is the last that builds for it",
                           [cuda], gpu.known("max_cuda_major"),
                           fix=f"use a CUDA {gpu.max_cuda_major} base for {gpu.name} (e.g. NGC 24.xx)")


@rule("IB012", "target GPU below the base's minimum compute capability")
def gpu_below_base(ctx: Ctx) -> Iterator[Finding]:
    """Measured: the archs torch was built for. Else the catalog's minimum CC of the NGC month, an
    error where verified and a warning where it is an inference."""
    archs = ctx.facts.get("torch_archs")
    if archs is not None and isinstance(archs.value, str):
        built = {a for a in archs.value.replace(",", ";").split(";") if a}
        for gpu in ctx.stack.gpus:
            ptx = [int(a[8:].rstrip("a")) for a in built if a.startswith("compute_")]  # PTX JIT-compiles upwards
            if f"sm_{gpu.sm}" not in built and not any(p <= int(gpu.sm) for p in ptx):
                yield ctx.find("IB012", "error", ctx.gpu_key(gpu), f"the base's torch has no kernels for {gpu.name} "
                               f"(sm_{gpu.sm}); it was built for {archs.value}", [archs],
                               fix=f"use a base whose torch supports sm_{gpu.sm}")
        return
    ngc = catalog.ngc_release(ctx.stack.base.image) if ctx.stack.base.family == "ngc-pytorch" else None
    if ngc is None or ngc.min_cc is None:
        return
    verified = "min_cc" not in ngc.unverified
    for gpu in ctx.stack.gpus:
        if _cc(gpu) < Version(ngc.min_cc):
            yield ctx.find("IB012", "error" if verified else "warning", ctx.gpu_key(gpu),
                           f"{gpu.name} (cc {gpu.cc}) is below NGC {ngc.release}'s minimum compute capability "
                           f"{ngc.min_cc}",
                           known=Known(ngc.min_cc, f"NGC PyTorch {ngc.release}: {ngc.source}", verified),
                           fix=f"use an NGC month that still supports cc {gpu.cc} (24.xx), or measure this one "
                               "(imgbuild lock records torch's arch list)")


@rule("IB013", "a GPU whose nodes run a CPU the stack is not built for")
def gpu_host_cpu(ctx: Ctx) -> Iterator[Finding]:
    """A GH200, GB200 or GB300 node's CPU is Grace (aarch64), every other catalog GPU's node is x86: an image
    built only for the other CPU does not start there. A stack without `platforms:` is built for its GPUs'
    hosts, so this refuses only a `platforms:` that leaves one out."""
    for gpu in ctx.stack.gpus:
        host = catalog.gpu_host(gpu.name)
        need = plat.of_cpu(host.value)
        if need in ctx.stack.platforms:
            continue
        cpu = "an NVIDIA Grace CPU" if host.value == "aarch64" else "an x86 CPU"
        yield ctx.find("IB013", "error", ctx.gpu_key(gpu),
                       f"{gpu.name}'s nodes run {cpu} ({host.value}, {need} images); this stack is built for "
                       f"{plat.label(ctx.stack.platforms)} only, so its image would not start there",
                       known=host,
                       fix=f"add {need} to platforms: (platforms: [linux/amd64, linux/arm64] releases one index for "
                           "both partitions), or name the GPU of the nodes it is for")


@rule("IB016", "CPU ops prebuilt with no CPU baseline known")
def cpu_baseline_unknown(ctx: Ctx) -> Iterator[Finding]:
    """DeepSpeed's CPU ops (cpu_adam, async_io, ...) are compiled for one instruction-set level. Where neither
    the stack nor the site names it and none of the stack's GPUs has a known host CPU, they are compiled for
    the platform's default level: safe on most nodes, but a guess, so it is said."""
    host_ops = catalog.ds_host_ops()
    for layer in ctx.stack.chain:
        if layer.kind.name != "deepspeed":
            continue
        ops = sorted(set(layer.param("ops")) & set(host_ops.value))
        if not ops:
            continue
        for platform in ctx.stack.platforms:
            chosen = ctx.stack.cpu_baseline(platform)
            if chosen.how != "default":   # declared, or derived from the known hosts of its GPUs
                continue
            yield ctx.find("IB016", "warning", ctx.layer_key(layer, "ops"),
                           f"layer {layer.name!r} prebuilds the CPU op{'s' if len(ops) > 1 else ''} {', '.join(ops)} "
                           f"with no CPU baseline known for {platform}: compiled for {chosen.name}, "
                           f"{chosen.origin.split(':')[0]}",
                           known=host_ops, source=cpubaseline.source(),
                           fix="name the level every node shares: site.cpu_baseline (or stacks.NAME.cpu_baseline), "
                               "e.g. x86-64-v3 for AVX2 nodes, x86-64-v4 for AVX-512 nodes, neoverse-v2 for Grace")


@rule("IB015", "an NGC month not known to publish an arm64 image, for an arm64 stack")
def ngc_arm64(ctx: Ctx) -> Iterator[Finding]:
    """NGC PyTorch tags are indexes of linux/amd64 and, in later months, linux/arm64 (SBSA) images. The
    catalog records the months a source shows with an arm64 image; for another month it is not known. A lock
    entry that resolved the tag for linux/arm64 (imgbuild lock) settles it, and a build on a base that has no
    arm64 image is refused when its digest is resolved."""
    base = ctx.stack.base
    if plat.ARM64 not in ctx.stack.platforms or base.family != "ngc-pytorch":
        return
    entry = ctx.lock.bases.get(base.name) if ctx.lock is not None else None
    if entry is not None and base.locked_by(entry, ctx.spec.site) and plat.ARM64 in entry.platforms:
        return
    ngc = catalog.ngc_release(base.image)
    known = catalog.ngc_arm64(ngc.release) if ngc is not None else None
    if known is not None and known.verified:
        return
    month = f"NGC {ngc.release}" if ngc is not None else base.ref(ctx.spec.site)
    yield ctx.find("IB015", "unknown", ctx.stack_key("base"),
                   f"{month} is not known to publish a linux/arm64 image"
                   + (" (a source says so, unconfirmed)" if known is not None else "")
                   + f"; stack {ctx.stack.name!r} is built for linux/arm64",
                   known=known, source="" if known is not None else
                   "catalog ngc_pytorch_arm64: the months a source shows with an arm64 (SBSA) image",
                   fix="imgbuild lock base=NAME resolves the tag's index for each platform (and refuses one without "
                       "an arm64 image); or use a month known to have one (25.09, 25.11)")


@rule("IB014", "an artifact built for another platform than the layer")
def artifact_platform(ctx: Ctx) -> Iterator[Finding]:
    """A wheel's platform tag (manylinux_2_28_x86_64), a download's CPU word (linux-aarch64, _sbsa): such an
    artifact runs on one platform only, and every layer of a stack is built for each of the stack's
    platforms. A list of wheels (one per platform) must name a wheel for each."""
    want = ctx.stack.platforms
    for layer in ctx.stack.chain:
        for pname, value in layer.params:
            if isinstance(value, WheelPins):
                # A wheel for a platform the stack is not built for is never installed (a layer shared by an
                # amd64 stack and a two-platform one names both); a platform without its wheel cannot build.
                have = {plat.wheel_platform(p.file) for p in value.pins}
                for platform in want:
                    if platform not in have:
                        yield ctx.find("IB014", "error", ctx.layer_key(layer, pname),
                                       f"names no {platform} wheel, and stack {ctx.stack.name!r} is built for "
                                       f"{platform} too ({', '.join(p.file for p in value.pins)})", source=WHEEL_TAGS,
                                       fix=f"add the {platform} wheel (its tag: manylinux_2_28_{plat.CPU[platform]})")
                continue
            for key, name in _artifacts(pname, value):
                platform = plat.artifact_platform(name)
                wrong = [p for p in want if platform is not None and p != platform]
                if wrong:
                    yield ctx.find("IB014", "error", ctx.layer_key(layer, *key),
                                   f"{name.split('#', 1)[0].rsplit('/', 1)[-1][:120]} is built for {platform} "
                                   f"({plat.CPU[platform]}); "
                                   f"stack {ctx.stack.name!r} builds this layer for {plat.label(wrong)} too",
                                   source=WHEEL_TAGS if name.split("#", 1)[0].endswith(".whl") else NAME_WORDS,
                                   fix=("for a stack of several platforms, name one wheel per platform as a list"
                                        if isinstance(value, WheelPin) else
                                        f"use the {plat.label(wrong)} artifact, or build the stack for {platform} only"))


WHEEL_TAGS = ("the wheel's platform tag (PEP 425/600: manylinux_2_28_x86_64 runs on linux x86_64 only, "
              "manylinux_2_28_aarch64 on linux aarch64 only)")
NAME_WORDS = "the CPU its file name names (x86_64/amd64/x64: linux/amd64; aarch64/arm64/sbsa: linux/arm64)"


def _artifacts(pname: str, value) -> Iterator[tuple]:
    """(key under params, file name or URL) of each artifact a parameter value names: a wheel, a download,
    a requirement by URL."""
    if isinstance(value, WheelPin):
        yield (pname, "file"), value.file
    elif isinstance(value, Download):
        yield (pname,), value.url
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            if isinstance(item, Download):
                yield (pname, i, "url"), item.url
            elif isinstance(item, str) and "://" in item:
                yield (pname, i), item.split(" @ ", 1)[-1].strip()


# -- Transformer Engine -----------------------------------------------------------------------------

@rule("IB020", "Transformer Engine build requirements: CUDA, cuDNN, torch")
def te_requirements(ctx: Ctx) -> Iterator[Finding]:
    layer = ctx.facts.providers.get("transformer_engine")
    if layer is None or not ctx.stack.compiles_cuda(layer):
        return
    te = Version(str(layer.param("version")))
    key = ctx.layer_key(layer, "version")
    for req in catalog.te_requirements(te):
        known = Known(req.versions, req.source, req.verified)
        for name, rid, need in (("cuda", "IB020", req.cuda), ("cudnn", "IB021", req.cudnn),
                                ("torch", "IB023", req.torch)):
            if need is None:
                continue
            fact = ctx.facts.get(name)
            if fact is None or fact.value is None:
                yield ctx.unknown(rid, key, f"Transformer Engine {te} needs {name} {need}+ to build; the base's "
                                  f"{name} is not known")
            elif isinstance(fact.value, Version) and release(fact.value) < need:
                yield ctx.find(rid, "error", key, f"Transformer Engine {te} needs {name} {need} or newer to build; "
                               f"the stack has {fact.value}", [fact], known,
                               fix=f"use a base with {name} {need}+ (Transformer Engine {req.versions} needs it), "
                                   "or an older Transformer Engine")


@rule("IB022", "FP8 needs compute capability 8.9")
def te_fp8(ctx: Ctx) -> Iterator[Finding]:
    if "transformer_engine" not in ctx.facts.providers:
        return
    fp8 = catalog.te_fp8()
    for gpu in ctx.stack.gpus:
        if _cc(gpu) < Version(fp8.value):
            yield ctx.find("IB022", "warning", ctx.gpu_key(gpu), f"{gpu.name} (cc {gpu.cc}) has no FP8: Transformer "
                           f"Engine runs there only in BF16/FP16 (FP8 needs cc {fp8.value}+)", known=fp8,
                           fix="target Ada/Hopper/Blackwell GPUs for FP8 training, or accept BF16")


@rule("IB025", "Transformer Engine as shipped, but the base ships none")
def te_missing(ctx: Ctx) -> Iterator[Finding]:
    layer = ctx.facts.providers.get("transformer_engine")
    te = ctx.facts.get("transformer_engine")
    if layer is not None and not ctx.stack.compiles_cuda(layer) and te is not None and te.value is None:
        yield ctx.find("IB025", "error", ctx.layer_key(layer), f"layer {layer.name!r} keeps the Transformer Engine "
                       "of the base, but the base has none", [te], fix="give the layer a version to build")


# -- DeepSpeed --------------------------------------------------------------------------------------

def _condition(ctx: Ctx, layer: LayerDef, name: str, want: str) -> tuple[bool | None, list[Fact]]:
    """(holds?, facts used): None when the fact it needs is not known."""
    if name == "op":
        return want in layer.param("ops"), []
    if name == "gpu_cc":
        return any(_cc(g) in SpecifierSet(want) for g in ctx.stack.gpus), []
    fact = ctx.facts.get(name)
    if fact is None or not isinstance(fact.value, Version):
        return None, []
    return release(fact.value) in SpecifierSet(want), [fact]


@rule("IB030", "DeepSpeed known incompatibilities (IB031-IB039, from the catalog)")
def ds_incompatibilities(ctx: Ctx) -> Iterator[Finding]:
    layer = ctx.facts.providers.get("deepspeed")
    ds = ctx.facts.version("deepspeed")
    if layer is None or ds is None:
        return
    key = ctx.layer_key(layer, "version")
    for inc in catalog.ds_incompatibilities():
        if ds not in inc.deepspeed:
            continue
        results = [_condition(ctx, layer, name, want) for name, want in inc.when]
        if any(ok is False for ok, _ in results):
            continue
        used = [f for _, facts in results for f in facts]
        when = " and ".join({"op": f"op {w} prebuilt", "gpu_cc": f"a target GPU of cc {w}"}.get(n, f"{n} {w}")
                            for n, w in inc.when)
        fix = f"use deepspeed {inc.fixed} or newer" if inc.fixed else "leave the op out of params.ops"
        if any(ok is None for ok, _ in results):
            if inc.only_known:
                continue
            missing = [n for (n, _), (ok, _) in zip(inc.when, results) if ok is None]
            yield ctx.unknown(inc.rule, key, f"DeepSpeed {ds} breaks when {when} ({inc.symptom}); the stack's "
                              f"{', '.join(missing)} is not known")
            continue
        yield ctx.find(inc.rule, "error" if inc.verified else "warning", key,
                       f"DeepSpeed {ds} with {when}: {inc.symptom}" + (f" (fixed in {inc.fixed})" if inc.fixed else ""),
                       used, Known(inc.deepspeed, inc.source, inc.verified), fix=fix)


@rule("IB040", "DeepSpeed and an arch-specific TORCH_CUDA_ARCH_LIST entry")
def ds_arch_variant(ctx: Ctx) -> Iterator[Finding]:
    layer = ctx.facts.providers.get("deepspeed")
    ds = ctx.facts.version("deepspeed")
    value = ctx.facts.env.get("TORCH_CUDA_ARCH_LIST")
    if layer is None or ds is None or value is None or not ARCH_VARIANT.search(value[0]):
        return
    fact = catalog.ds_arch_variant()
    measured = Version(fact["measured"]) == ds
    yield ctx.find("IB040", "error" if measured else "warning", value[1],
                   f"TORCH_CUDA_ARCH_LIST={value[0]!r} has an arch-specific entry; DeepSpeed {ds}'s op builder "
                   f"fails on it at the first JIT build: {fact['symptom']}"
                   + ("" if measured else f" (measured on {fact['measured']}; not known for {ds})"),
                   known=Known(fact["measured"], fact["source"], bool(fact["verified"])),
                   fix="write the arch without the suffix (9.0 instead of 9.0a) for DeepSpeed")


@rule("IB044", "DS_ACCELERATOR above DeepSpeed")
def ds_accelerator(ctx: Ctx) -> Iterator[Finding]:
    """The deepspeed kind names the accelerator it built its ops for (DS_ACCELERATOR=cuda in a CUDA stack);
    a layer above that sets it again decides what DeepSpeed uses at run time: "cpu" over CUDA ops means
    the CPU op builders and gloo/oneCCL on a GPU node (deepspeed/accelerator/cpu_accelerator.py), and an
    unknown name fails DeepSpeed's first get_accelerator()."""
    layer, ds = ctx.facts.providers.get("deepspeed"), ctx.facts.version("deepspeed")
    value = ctx.facts.env.get("DS_ACCELERATOR")
    if layer is None or value is None:
        return
    name, key, writer = value
    chain = [each.name for each in ctx.stack.chain]
    beneath = writer.name in chain and layer.name in chain and chain.index(writer.name) < chain.index(layer.name)
    if beneath and ctx.stack.compiles_cuda(layer):
        return   # the deepspeed layer's own ENV DS_ACCELERATOR=cuda, above it, is what the image has
    fact = catalog.ds_accelerator()
    known = Known(f"DS_ACCELERATOR in {fact['names']}", fact["source"], bool(fact["verified"]))
    read = ds == Version(fact["read"])
    if name not in fact["names"]:
        yield ctx.find("IB044", "error" if read else "warning", key,
                       f"DS_ACCELERATOR={name!r} is not an accelerator DeepSpeed knows: {fact['symptom']}"
                       + ("" if read else f" (list read on {fact['read']}, not {ds or 'this version'})"),
                       known=known, fix="write one of " + ", ".join(fact["names"]) + " (lower case)")
    elif name != "cuda" and ctx.stack.compiles_cuda(layer):
        yield ctx.find("IB044", "error", key, f"DS_ACCELERATOR={name!r} above layer {layer.name!r}, whose ops are "
                       f"compiled for CUDA: DeepSpeed would use its {name} accelerator on the GPU nodes (that "
                       "accelerator's op builders, not the CUDA ops built here; for cpu, gloo or oneCCL, not NCCL)",
                       known=known,
                       fix="remove DS_ACCELERATOR from this layer (the deepspeed layer sets cuda), or set it to cuda")


@rule("IB045", "DeepSpeed CUDA ops on a stack without CUDA")
def ds_cuda_ops_without_cuda(ctx: Ctx) -> Iterator[Finding]:
    """An op built from CUDA kernels (fused_adam, transformer, ...) asked of DeepSpeed where no CUDA toolkit
    is beneath it: nvcc is not there to compile it. The real reason, not the arch list lint would miss
    (IB104), which no stacks.yaml value could supply on a CPU stack."""
    host = catalog.ds_host_ops()
    for layer in ctx.stack.chain:
        if "deepspeed" not in layer.kind.provides or "ops" not in dict(layer.params):
            continue
        cuda_ops = [op for op in layer.param("ops") if op not in host.value]
        if not cuda_ops or ctx.stack.cuda_beneath(layer):
            continue
        yield ctx.find("IB045", "error", ctx.layer_key(layer, "ops"),
                       f"{', '.join(cuda_ops)} {'needs' if len(cuda_ops) == 1 else 'need'} CUDA: DeepSpeed builds "
                       f"{'it' if len(cuda_ops) == 1 else 'them'} from CUDA kernels with nvcc, and stack "
                       f"{ctx.stack.name!r} has no CUDA toolkit beneath layer {layer.name!r} (a CPU stack)",
                       known=host, fix="leave them out of ops (built from host code: " + ", ".join(host.value)
                       + "), or build on a base with CUDA or above a cuda-toolkit-pip layer")


@rule("IB041", "DeepSpeed and Python (setup.py classifiers)")
def ds_python(ctx: Ctx) -> Iterator[Finding]:
    layer, ds, python = ctx.facts.providers.get("deepspeed"), ctx.facts.version("deepspeed"), ctx.facts.get("python")
    if layer is None or ds is None or python is None or not isinstance(python.value, Version):
        return
    top = catalog.ds_max_python(ds)
    py = Version(major_minor(python.value))
    if top is None:
        if py > Version("3.12"):
            yield ctx.unknown("IB041", ctx.layer_key(layer, "version"), f"whether DeepSpeed {ds} supports Python "
                              f"{py} is not known (classifiers read up to 0.19.5, listing 3.12 at most)")
    elif py > Version(top.value):
        # Classifiers lag what works (0.16.0 runs on 3.12): they are no evidence of a breakage, so this is
        # an unknown, not a warning that --strict fails on. Known breakages are IB037 and its kin.
        yield ctx.find("IB041", "unknown", ctx.layer_key(layer, "version"), f"whether DeepSpeed {ds} supports "
                       f"Python {python.value} is not known: its classifiers list Python up to {top.value} (metadata "
                       "only, pip does not enforce it) and the catalog knows of no breakage of the two",
                       [python], top, fix="run its checks in the image (imgbuild build validates the import); "
                       "0.16.3+ lists 3.12")


@rule("IB042", "DeepSpeed op builds: nvcc vs torch's CUDA")
def ds_nvcc(ctx: Ctx) -> Iterator[Finding]:
    layer, ds = ctx.facts.providers.get("deepspeed"), ctx.facts.version("deepspeed")
    if layer is None or ds is None or not ctx.stack.compiles_cuda(layer):
        return
    yield from _nvcc_match(ctx, layer, "IB042", f"DeepSpeed {ds}", catalog.ds_mismatch_ok(ds))


@rule("IB043", "torch's extension builder: nvcc's CUDA major vs torch's")
def torch_ext_nvcc(ctx: Ctx) -> Iterator[Finding]:
    """Layers that compile CUDA against torch (Transformer Engine, flash-attn, ...) go through
    torch.utils.cpp_extension, which refuses a different CUDA major and only warns on a minor (DeepSpeed
    and Apex have stricter rules of their own, IB042 and IB050)."""
    nvcc, tcuda = ctx.facts.get("nvcc"), ctx.facts.get("torch_cuda")
    if nvcc is None or tcuda is None or tcuda.value is None or not isinstance(nvcc.value, Version):
        return
    known = Known("same CUDA major (a minor difference warns)", "pytorch torch/utils/cpp_extension.py "
                  "_check_cuda_version: RuntimeError(CUDA_MISMATCH_MESSAGE) when the majors differ", True)
    for layer in ctx.stack.chain:
        # Only kinds that build against torch (needs: torch); a CMake or plain-nvcc build has no such check.
        if ({"deepspeed", "apex"} & set(layer.kind.provides) or "torch" not in layer.kind.needs
                or not ctx.stack.compiles_cuda(layer) or nvcc.value.major == tcuda.value.major):
            continue
        yield ctx.find("IB043", "error", ctx.layer_key(layer), f"layer {layer.name!r} compiles CUDA with nvcc "
                       f"{major_minor(nvcc.value)}, but torch was built with CUDA {major_minor(tcuda.value)}: torch's "
                       "extension builder refuses a different major", [nvcc, tcuda], known,
                       fix=f"use a toolkit of CUDA {tcuda.value.major}.x (the torch wheel's)")


@rule("IB050", "Apex: nvcc must equal torch's CUDA")
def apex_nvcc(ctx: Ctx) -> Iterator[Finding]:
    layer = ctx.facts.providers.get("apex")
    if layer is not None and ctx.stack.compiles_cuda(layer):
        yield from _nvcc_match(ctx, layer, "IB050", "Apex", None)


def _nvcc_match(ctx: Ctx, layer: LayerDef, rule_id: str, what: str, tolerated: Known | None) -> Iterator[Finding]:
    """Extensions built from source: nvcc major.minor against torch's CUDA. Apex tolerates no
    difference (setup.py check_cuda_torch_binary_vs_bare_metal); DeepSpeed tolerates one between two
    versions that are both in its release's cuda_minor_mismatch_ok list."""
    nvcc, tcuda = ctx.facts.get("nvcc"), ctx.facts.get("torch_cuda")
    key = ctx.layer_key(layer)
    if tcuda is not None and tcuda.value is None:
        yield ctx.find(rule_id, "error", key, f"{what} compiles CUDA extensions, but the stack's torch is a CPU "
                       "build", [tcuda], fix="use a CUDA build of torch")
        return
    if nvcc is None or tcuda is None:
        yield ctx.unknown(rule_id, key, f"{what} builds against torch's CUDA with nvcc; "
                          f"{'nvcc' if nvcc is None else 'torch CUDA'} of the base is not known")
        return
    a, b = major_minor(nvcc.value), major_minor(tcuda.value)
    if a == b:
        return
    if tolerated is not None and a in tolerated.value and b in tolerated.value:
        return
    if rule_id == "IB042" and tolerated is None and nvcc.value.major != tcuda.value.major:
        # Whatever a release's list holds, it lists minors of one major: another major never passes.
        tolerated = Known("nvcc major.minor equal to torch's, or both in one CUDA major's cuda_minor_mismatch_ok",
                          "DeepSpeed op_builder/builder.py assert_no_cuda_mismatch (v0.12.0..v0.19.5)", True)
    elif rule_id == "IB042" and tolerated is None:
        yield ctx.unknown(rule_id, key, f"nvcc {a} differs from torch's CUDA {b}; which pairs {what} tolerates is "
                          "not known")
        return
    apex = Known("exact major.minor match", "NVIDIA/apex setup.py check_cuda_torch_binary_vs_bare_metal "
                 "(tags 23.05..25.09, HEAD)", True)
    yield ctx.find(rule_id, "error", key, f"{what} refuses to build: nvcc {a} does not match the CUDA torch was "
                   f"built with ({b})", [nvcc, tcuda], tolerated or apex,
                   fix="use a base whose nvcc matches torch's CUDA (NGC images always do)")


# -- Megatron-Core ----------------------------------------------------------------------------------

@rule("IB060", "Megatron-Core against Python, torch, numpy, TE and its commit")
def megatron(ctx: Ctx) -> Iterator[Finding]:
    layer = ctx.facts.providers.get("megatron")
    if layer is None:
        return
    pinned = dict(layer.params)["source"].commit
    tagged = catalog.megatron_release(tag_object=pinned)
    if tagged is not None:
        yield ctx.find("IB066", "error", ctx.layer_key(layer, "source"),
                       f"{pinned[:12]} is the annotated tag object of core_v{tagged.version}, not a commit: the image's "
                       f"source-commit check reads the commit it points to, {tagged.commit[:12]}, and fails after the "
                       "build", known=Known(tagged.commit, tagged.source, tagged.verified),
                       fix=f"pin commit {tagged.commit} (git rev-parse core_v{tagged.version}^{{commit}})")
        return
    fact = ctx.facts.get("megatron")
    key = ctx.layer_key(layer, "version") if fact and fact.origin == "declared" else ctx.layer_key(layer, "source")
    if fact is None:
        yield ctx.unknown("IB060", key, "which megatron-core this commit is is not known (no params.version, and "
                          "the commit is not a release in the catalog)", fix="give params.version")
        return
    rel = catalog.megatron_release(version=fact.value)
    if rel is None:
        yield ctx.unknown("IB060", key, f"megatron-core {fact.value} is not in the catalog: its Python and torch "
                          "requirements are not known", fix="add the release to the site's catalog (site.catalog: "
                          "docs/site-catalog.md), with its commit and pyproject's requirements")
        return
    known = Known(rel.version, rel.source, rel.verified)
    by_commit = catalog.megatron_release(commit=pinned)
    if by_commit is not None and by_commit.version != fact.value:
        yield ctx.find("IB064", "error", key, f"commit {pinned[:12]} is megatron-core {by_commit.version}, not "
                       f"{fact.value}: the image's version check would fail after the build",
                       [fact], Known(by_commit.version, by_commit.source, by_commit.verified),
                       fix=f"set params.version to {by_commit.version}, or pin the commit of core_v{fact.value}")
    elif by_commit is None and fact.origin == "declared" and pinned != rel.commit:
        # Not the release's commit: an annotated tag's own object the catalog does not list (whose checkout
        # works but whose source-commit check fails after the build), or a commit after the release that still
        # declares its version. Which one cannot be told without the repository: a warning (--strict refuses).
        yield ctx.find("IB067", "warning", ctx.layer_key(layer, "source"),
                       f"{pinned[:12]} is not core_v{fact.value}'s commit ({rel.commit[:12]}): if it is the tag's own "
                       "object, the image's source-commit check fails after the build; if it is a later commit, "
                       f"its declared version {fact.value} is unchecked until then",
                       [fact], Known(rel.commit, rel.source, rel.verified),
                       fix=f"pin {rel.commit} (git rev-parse core_v{fact.value}^{{commit}}), or waive IB067 with "
                           "the reason for another commit")
    for name, rid, spec in (("python", "IB061", rel.python), ("torch", "IB062", rel.torch),
                            ("numpy", "IB063", rel.numpy)):
        if spec is None:
            continue
        value = ctx.facts.get(name)
        if value is None or not isinstance(value.value, Version):
            yield ctx.unknown(rid, key, f"megatron-core {fact.value} needs {name} {spec}; the stack's {name} "
                              "is not known")
        elif release(value.value) not in spec:
            yield ctx.find(rid, "error", key, f"megatron-core {fact.value} needs {name} {spec}; the stack has "
                           f"{value.value}", [fact, value], known,
                           fix=f"use a megatron-core release that supports {name} {value.value}, or another base")
    te = ctx.facts.get("transformer_engine")
    if rel.te_dev is not None and "transformer_engine" in ctx.facts.providers and not (te and te.value is None):
        if te is None or not isinstance(te.value, Version):
            yield ctx.unknown("IB065", key, f"megatron-core {fact.value}'s [dev] extra wants Transformer Engine "
                              f"{rel.te_dev}; the stack's Transformer Engine version is not known")
        elif te.value not in rel.te_dev:
            yield ctx.find("IB065", "warning", key, f"megatron-core {fact.value} is tested with Transformer Engine "
                           f"{rel.te_dev}; the stack has {te.value} (its feature gates turn features off)",
                           [fact, te], known, fix="build a Transformer Engine in that range")


# -- project installs -------------------------------------------------------------------------------

@rule("IB080", "extras that pip installs without their dependencies")
def extras_without_deps(ctx: Ctx) -> Iterator[Finding]:
    """An extra only adds dependencies: with install pip-no-deps (pip --no-deps) or pythonpath (no pip)
    it would install nothing, silently. Any kind with `extras` and `install` parameters."""
    for layer in ctx.stack.chain:
        params = dict(layer.params)
        if params.get("extras") and params.get("install") in ("pip-no-deps", "pythonpath"):
            yield ctx.find("IB080", "error", ctx.layer_key(layer, "extras"), f"layer {layer.name!r} asks for extras "
                           f"{', '.join(params['extras'])} but installs with {params['install']}, which installs "
                           "none of their dependencies", source="an extra names optional dependencies "
                           "(PEP 508, core metadata Provides-Extra); pip --no-deps installs no dependency",
                           fix="install: pip (or pip-editable), or list the "
                           "dependencies under packages instead of extras")


def _project_claims(layer: LayerDef) -> tuple[dict, dict]:
    """What a project layer takes for itself: ({path: parameter} it writes, {distribution: (what, parameter)} it
    installs). Its checkout (`path`) and, with uv-sync, its virtual environment; the distributions its kind
    installs (megatron: megatron-core); the repository it installs (two commits of one repository install one
    distribution); and each of its pinned `packages`, as written."""
    params = dict(layer.params)
    install = params.get("install")
    paths = {params[p]: p for p in ("path",) if isinstance(params.get(p), str)}
    if install == "uv-sync" and isinstance(params.get("venv"), str):
        paths[params["venv"]] = "venv"
    dists: dict = {}
    # Installed or only put on PYTHONPATH (which comes first on import), the code is the project's either way.
    for _, names in layer.kind.versions:
        for name in names:
            dists[canonicalize_name(name)] = (name, "source")
    source = params.get("source")
    if isinstance(source, GitPin):
        dists["repo:" + source.repo.rstrip("/").removesuffix(".git")] = (f"the project of {source.repo}", "source")
    for raw in params.get("packages") or ():
        try:
            req = Requirement(str(raw))
        except InvalidRequirement:
            continue
        dists.setdefault(canonicalize_name(req.name), (str(raw), "packages"))
    return paths, dists


LAYER_CHANGESETS = ("an image's layers are applied in order, and a path an upper layer writes replaces the lower "
                    "layer's (OCI image spec, layer.md: changesets)")
ONE_VERSION = ("an environment holds one version of a distribution: installing another uninstalls the first (pip's "
               "user guide; import system: the first match on sys.path wins)")


@rule("IB081", "two projects that install the same distribution or write the same path")
def projects_collide(ctx: Ctx) -> Iterator[Finding]:
    """Projects are layers of one image, installed one over the other: a second that writes the first's
    checkout path or virtual environment, or installs a distribution the first installed (megatron-core from
    another commit, another pin of a package), replaces it without a word, and the first project's checks
    then run the second's code. A second team's project is a second stack (`extends:` the first)."""
    projects = [layer for layer in ctx.stack.chain if layer.section == "projects"]
    claims = [(layer, *_project_claims(layer)) for layer in projects]
    for i, (second, paths, dists) in enumerate(claims):
        for first, first_paths, first_dists in claims[:i]:
            for path in sorted(set(paths) & set(first_paths)):
                yield ctx.find("IB081", "error", ctx.layer_key(second, paths[path]),
                               f"projects {first.name!r} and {second.name!r} both write {path} "
                               f"({first.name}.{first_paths[path]}, {second.name}.{paths[path]}): the second "
                               "replaces the first", source=LAYER_CHANGESETS, fix=f"give {second.name} another {paths[path]}, or make it a "
                               f"second stack (extends: {ctx.stack.name})")
            for key in sorted(set(dists) & set(first_dists)):
                mine, theirs = dists[key], first_dists[key]
                if mine[1] == theirs[1] == "packages" and mine[0] == theirs[0]:
                    continue   # one pin written twice: the second install changes nothing
                what = theirs[0] if key.startswith("repo:") else f"{key} ({theirs[0]}; {mine[0]})"
                yield ctx.find("IB081", "error", ctx.layer_key(second, mine[1]),
                               f"projects {first.name!r} and {second.name!r} both install {what}: the second "
                               "replaces the first's, whose checks then test the second's", source=ONE_VERSION,
                               fix=f"one stack per team's project: a second stack that extends {ctx.stack.name} "
                               f"with project: {second.name}")


# -- torch replaced, NCCL skew, base facts ----------------------------------------------------------

@rule("IB070", "a pip requirement that replaces the base's torch")
def torch_replaced(ctx: Ctx) -> Iterator[Finding]:
    """NGC's torch is a PEP 440 pre-release (2.9.0a0+sha): a requirement such as torch>=2.9 is not
    satisfied by it, so pip would pull a PyPI torch over it (imgbuild's constraint makes that install
    fail instead). Everything compiled against the base's torch depends on it staying."""
    torch = ctx.facts.get("torch")
    if torch is None or not isinstance(torch.value, Version):
        return
    replacers, pins = catalog.torch_replacers(), catalog.torch_pins()
    for name, (pinned, key, layer) in ctx.facts.pins.items():
        if name not in replacers.value and name not in pins or (name == "torch" and pinned == torch.value):
            continue
        if dict(layer.params).get("replace_torch"):
            continue   # a declared swap (pip kind): its reason is shown by plan --explain
        wants = pins[name][0].get(str(pinned)) if name in pins else None
        if wants is not None:
            # The release's own Requires-Dist on torch (its published metadata): pip keeps the base's torch
            # only where that satisfies it (a pre-release satisfies no == and sorts below its release).
            if SpecifierSet(wants).contains(torch.value, prereleases=True):
                continue
            yield ctx.find("IB070", "error", key, f"layer {layer.name!r} pins {name}=={pinned}, which requires "
                           f"torch{wants}: pip would replace the base's torch {torch.value}", [torch],
                           Known(wants, pins[name][1], True),
                           fix=f"pin the {name} release made for torch {torch.value.public}, or declare the swap: a pip "
                               "layer with replace_torch and the reason")
            continue
        if not (torch.value.is_prerelease or torch.value.local):
            # torch is a release (a swap declared beneath): a package pinning the same torch keeps it, and
            # which torch this one pins is not in the catalog. The constraint stops the build if they differ.
            yield ctx.unknown("IB070", key, f"layer {layer.name!r} pins {name}=={pinned}, which pins a torch of its "
                              f"own; whether that is the stack's torch {torch.value} is not known (the constraint "
                              "that keeps torch stops the build if not)",
                              fix=f"read which torch {name} {pinned} requires (Requires-Dist in its METADATA); "
                                  "if it is another one, declare the swap in that layer with replace_torch")
            continue
        yield ctx.find("IB070", "error", key, f"layer {layer.name!r} pins {name}=={pinned}, which brings its own "
                       f"torch over the base's {torch.value}", [torch], replacers,
                       fix=f"drop {name} from packages, or declare the swap: a pip layer with replace_torch "
                           "and the reason (everything compiled beneath it must be compiled again)")
    layer, ds = ctx.facts.providers.get("deepspeed"), ctx.facts.version("deepspeed")
    if layer is None or ds is None:
        return
    for package, spec, known in catalog.ds_requires(ds):
        if package == "torch" and torch.value not in spec:
            yield ctx.find("IB070", "error", ctx.layer_key(layer, "version"), f"deepspeed {ds} requires torch{spec}, "
                           f"which the base's torch {torch.value} does not satisfy (a PEP 440 pre-release sorts "
                           "below its release): pip would replace torch", [torch], known,
                           fix="use a base whose torch satisfies it, or a DeepSpeed without that requirement")


@rule("IB071", "code compiled against torch beneath a declared torch swap")
def compiled_beneath_swap(ctx: Ctx) -> Iterator[Finding]:
    """C++/CUDA extensions link against the torch they were built with (its ABI, its c10 symbols): a
    torch replaced above them leaves them loading against another one, which fails at import or, worse,
    at the first call."""
    chain = ctx.stack.chain
    for i, swap in enumerate(chain):
        reason = dict(swap.params).get("replace_torch")
        if not reason:
            continue
        for layer in chain[:i]:
            if "torch" in layer.kind.needs and ctx.stack.compiles_cuda(layer):
                yield ctx.find("IB071", "warning", ctx.layer_key(swap, "replace_torch"),
                               f"layer {swap.name!r} replaces torch ({reason}), but {layer.name!r} beneath it was "
                               "compiled against the torch it replaces", [ctx.facts.get("torch")],
                               fix=f"put {layer.name!r} above {swap.name!r} so it is compiled against the new torch, "
                                   "or waive IB071 for this stack with the reason the ABI still matches")


@rule("IB075", "NCCL from a pip wheel beside torch's")
def nccl_skew(ctx: Ctx) -> Iterator[Finding]:
    torch = ctx.facts.get("torch")
    for name, (pinned, key, layer) in ctx.facts.pins.items():
        if not re.fullmatch(r"nvidia-nccl-cu\d+", name) or torch is None or not isinstance(torch.value, Version):
            continue
        if ctx.stack.base.family == "ngc-pytorch":
            nccl = ctx.facts.get("nccl")
            yield ctx.find("IB075", "warning", key, f"{name}=={pinned} beside the NGC torch, which uses the "
                           f"container's NCCL{f' {nccl.value}' if nccl else ''}: two NCCLs in one environment",
                           [nccl], source=catalog.torch_nccl_source(),
                           fix="leave NCCL to the base image")
            continue
        tcuda = ctx.facts.get("torch_cuda")
        pin = catalog.torch_nccl(torch.value) if tcuda is not None and tcuda.value is not None else None
        if pin is not None and Version(pin.value) != pinned:
            yield ctx.find("IB075", "warning", key, f"torch {torch.value} wheels pin NCCL {pin.value}; "
                           f"{name}=={pinned} replaces it", [torch], pin, fix=f"pin {name}=={pin.value} or leave it to torch")


# -- JAX -------------------------------------------------------------------------------------------

def _jax_cuda(ctx: Ctx) -> tuple[Fact | None, int | None]:
    jc = ctx.facts.get("jax_cuda")
    if jc is None or not isinstance(jc.value, Version):
        return None, None
    return jc, jc.value.major


def _ngc_built(ctx: Ctx) -> bool:
    """JAX as NVIDIA built it into an NGC JAX image, against the container's own CUDA, cuDNN and NCCL:
    PyPI's plugins and their floors do not apply to it (a layer that installs JAX again from the index does)."""
    return ctx.stack.base.family == "ngc-jax" and not ctx.facts.jax_cuda


def _local(ctx: Ctx) -> bool:
    """Whether JAX runs on the base's CUDA libraries (a -local install) rather than on CUDA wheels it brought."""
    return any(j.local for j in ctx.facts.jax_cuda)


@rule("IB085", "jaxlib's CUDA plugin against the base's CUDA and the JAX release")
def jax_cuda_major(ctx: Ctx) -> Iterator[Finding]:
    """jaxlib runs on one CUDA major through its plugin (jax-cuda12-plugin, jax-cuda13-plugin): a -local
    plugin must be of the base's major (one that brings its CUDA wheels beside a base of another major is a
    warning: two CUDAs in one image), a JAX release must publish a plugin of that major, a -local install
    needs a base with CUDA, and an extra the release does not have installs jax with no CUDA at all."""
    jc, major = _jax_cuda(ctx)
    if jc is None or _ngc_built(ctx):
        return
    plugins = catalog.jax_plugins_source()
    for j in ctx.facts.jax_cuda:
        if j.major != major:
            yield ctx.find("IB085", "error", j.key, f"{j.text} installs JAX's CUDA {j.major} build, but the stack "
                           f"declares CUDA {major} for jaxlib", [jc], plugins,
                           fix=f"write the extra and the layer's cuda for one CUDA major (jax[cuda{major}])")
    cuda = ctx.facts.get("cuda")
    base = ctx.stack.base
    if cuda is not None and isinstance(cuda.value, Version) and cuda.value.major != major:
        if _local(ctx):
            yield ctx.find("IB085", "error", jc.key, f"jaxlib's CUDA plugin is built for CUDA {major} and runs on the "
                           f"base's libraries (-local), but base {base.name} has CUDA {cuda.value}", [jc, cuda], plugins,
                           fix=f"use the cuda{cuda.value.major} plugin (jax[cuda{cuda.value.major}-local]) or a CUDA "
                               f"{major} base")
        else:
            yield ctx.find("IB085", "warning", jc.key, f"jaxlib's CUDA {major} plugin brings its own CUDA {major} wheels "
                           f"onto base {base.name}, which has CUDA {cuda.value}: two CUDA majors in one image (code "
                           "built with the base's nvcc and JAX's kernels differ)", [jc, cuda], plugins,
                           fix=f"use jax[cuda{cuda.value.major}-local] on this base, or a base without CUDA")
    local = [j for j in ctx.facts.jax_cuda if j.local]
    if local and (cuda is None or cuda.value is None) and not base.has_cuda:
        yield ctx.find("IB085", "error", local[0].key, f"{local[0].text} uses the CUDA of the base (a -local "
                       f"install brings no CUDA wheels), and base {base.name} has none", [], plugins,
                       fix=f"use jax[cuda{major}] (CUDA, cuDNN and NCCL as pip wheels), or a CUDA base")
    jax = ctx.facts.version("jax")
    if jax is None:
        return
    # The catalog reads the plugins from 0.4.26 (the first release without CUDA 11) on.
    if release(jax) >= Version("0.4.26") and catalog.jax_plugin(release(jax), major) is None:
        have = catalog.jax_plugin_majors(release(jax))
        yield ctx.find("IB085", "error", jc.key, f"jax {jax} has no CUDA {major} plugin on PyPI"
                       + (f" (it has CUDA {', '.join(map(str, have))})" if have else " (it has none)"),
                       [jc, ctx.facts.get("jax")], plugins,
                       fix=(f"use the CUDA {have[-1]} build (jax[cuda{have[-1]}]) or a JAX release with a CUDA "
                            f"{major} plugin" if have else f"use a JAX release with a CUDA {major} plugin"))
    for j in ctx.facts.jax_cuda:
        gone = catalog.jax_extra_removed(j.extra) if j.extra else None
        if gone is not None and release(jax) >= Version(gone.value):
            yield ctx.find("IB085", "error", j.key, f"jax {jax} has no extra [{j.extra}] (removed in {gone.value}): pip "
                           "warns and installs jax without any CUDA plugin, a CPU-only image", [ctx.facts.get("jax")],
                           gone, fix=f"write jax[cuda{j.major}]")


@rule("IB086", "cuDNN, CUDA and NCCL below what jaxlib's CUDA plugin requires")
def jax_cuda_floors(ctx: Ctx) -> Iterator[Finding]:
    """The plugin's wheel requires a cuDNN, a CUDA runtime and an NCCL (its with-cuda extra pins them). With
    a -local install they are the base's, and an older one fails at the first convolution or collective,
    not at import; where the plugin brings its wheels, pip resolves them, and only what a layer declares
    they are is judged."""
    jc, major = _jax_cuda(ctx)
    jax = ctx.facts.version("jax")
    if jc is None or jax is None or _ngc_built(ctx):
        return
    plugin = catalog.jax_plugin(release(jax), major)
    if plugin is None:
        return
    local = _local(ctx)

    def judged(fact: Fact | None) -> bool:   # the base's libraries matter only to a -local install
        return fact is not None and isinstance(fact.value, Version) and (local or fact.key[:1] != ("bases",))

    known = Known(plugin.versions, plugin.source, plugin.verified)
    cudnn = ctx.facts.get("cudnn")
    if judged(cudnn):
        if release(cudnn.value) < plugin.cudnn:
            yield ctx.find("IB086", "error", cudnn.key, f"jax {jax}'s CUDA {major} plugin needs cuDNN {plugin.cudnn} or "
                           f"newer; the stack has {cudnn.value}", [cudnn, ctx.facts.get("jax")], known,
                           fix=f"use a base with cuDNN {plugin.cudnn}+, or a JAX release that accepts this cuDNN")
        elif plugin.cudnn_below is not None and release(cudnn.value) >= plugin.cudnn_below:
            yield ctx.find("IB086", "error", cudnn.key, f"jax {jax}'s CUDA {major} plugin needs cuDNN below "
                           f"{plugin.cudnn_below}; the stack has {cudnn.value}", [cudnn, ctx.facts.get("jax")], known,
                           fix="use a JAX release built for this cuDNN (0.4.29 and newer take cuDNN 9)")
    elif local:
        yield ctx.unknown("IB086", jc.key, f"jax {jax}'s CUDA {major} plugin needs cuDNN {plugin.cudnn}+ from the base "
                          "(a -local install); the base's cuDNN is not known",
                          fix="declare the base's cudnn under provides, or measure it (imgbuild lock)")
    cuda = ctx.facts.get("cuda")
    if local and judged(cuda) and cuda.value.major == major \
            and Version(major_minor(cuda.value)) < Version(major_minor(plugin.cuda_runtime)):
        yield ctx.find("IB086", "error", cuda.key, f"jax {jax}'s CUDA {major} plugin needs the CUDA runtime "
                       f"{plugin.cuda_runtime} or newer; base {ctx.stack.base.name} has {cuda.value}", [cuda], known,
                       fix=f"use a base with CUDA {major_minor(plugin.cuda_runtime)}+")
    nccl = ctx.facts.get("nccl")
    if judged(nccl) and release(nccl.value) < plugin.nccl:
        yield ctx.find("IB086", "error", nccl.key, f"jax {jax}'s CUDA {major} plugin needs NCCL {plugin.nccl} or "
                       f"newer; the stack has {nccl.value}", [nccl], known, fix=f"use NCCL {plugin.nccl}+")


@rule("IB088", "driver floor vs the CUDA of jaxlib's plugin")
def jax_driver_floor(ctx: Ctx) -> Iterator[Finding]:
    """JAX's installation guide names the driver each CUDA major's plugin needs. Where CUDA comes as pip
    wheels (jax[cuda12] on a plain base) this is the only driver check; on a CUDA base IB001 checks the
    base's toolkit as well."""
    jc, major = _jax_cuda(ctx)
    floor = ctx.stack.driver_floor
    if jc is None or floor is None:
        return
    need = catalog.jax_driver(ctx.facts.version("jax"), major)
    if need is None:
        return
    if driver_tuple(floor) < driver_tuple(need.value):
        own = ctx.stack_key("driver_floor")
        key = own if own[-1] == "driver_floor" else ("site", "driver_floor")
        yield ctx.find("IB088", "error", key, f"driver floor {floor} cannot run jaxlib's CUDA {major} plugin: JAX "
                       f"asks for driver {need.value} or newer", [jc], need,
                       fix=f"raise the driver to {need.value}+" + (", or use the CUDA 12 plugin (jax[cuda12], "
                                                                   "driver 525+)" if major == 13 else ""))


@rule("IB089", "target GPU below JAX's minimum compute capability")
def jax_min_cc(ctx: Ctx) -> Iterator[Finding]:
    jc, major = _jax_cuda(ctx)
    if jc is None:
        return
    need = catalog.jax_min_cc(major)
    if need is None:
        return
    for gpu in ctx.stack.gpus:
        if _cc(gpu) < Version(need.value):
            yield ctx.find("IB089", "error", ctx.gpu_key(gpu), f"{gpu.name} (cc {gpu.cc}) is below what JAX's CUDA "
                           f"{major} build supports (cc {need.value}+)", [jc], need,
                           fix=(f"use the CUDA 12 plugin (jax[cuda12]) for {gpu.name}" if major == 13 else
                                f"target GPUs of cc {need.value} or newer"))


@rule("IB090", "the base's facts disagree (measured, declared, catalog)")
def base_facts(ctx: Ctx) -> Iterator[Finding]:
    base = ctx.stack.base
    if ctx.facts.lock_note:
        yield ctx.find("IB091", "warning", ("bases", base.name), f"measured facts ignored: {ctx.facts.lock_note}",
                       source=f"the lock file's image and digest for {base.name} against bases.{base.name}",
                       fix="imgbuild lock")
    for name in versions.fields(ctx.spec.kinds.values()):   # every version a base can hold, in two origins
        options = ctx.facts.options.get(name, [])
        used = options[0] if options else None
        for other in options[1:]:
            if not agree(used.value, other.value):
                yield ctx.find("IB090", "warning", used.key if used.origin == "declared" else other.key,
                               f"base {base.name}: {name} is {used.value} ({used.origin}) but {other.value} "
                               f"({other.origin}); preflight uses the {used.origin} value", [used, other],
                               fix=f"correct bases.{base.name}.provides.{name}, or run imgbuild lock to measure it")
    # Layers that make a base of their own (CUDA and torch from PyPI), measured with `lock layer=NAME`.
    for layer, note in ctx.facts.layer_notes:
        yield ctx.find("IB091", "warning", (layer.section, layer.name), f"measured facts of layer {layer.name} "
                       f"ignored: {note}", source=f"the lock file's definition of layer {layer.name}",
                       fix=f"imgbuild lock layer={layer.name}")
    for layer, name, declared, measured in ctx.facts.layer_disagreements:
        yield ctx.find("IB093", "warning", declared.key, f"layer {layer.name}: {name} is declared {declared.value} "
                       f"but measured {measured.value} in its image; preflight uses the measured value",
                       [declared, measured], fix=f"correct {dotted(declared.key)}")


# -- running the rules ------------------------------------------------------------------------------

GPU_KEY = re.compile(r"^stacks\.[^.\[]+\.gpus\[(\d+)\]")


def _judged_on(stack: Stack, finding: Finding, platform: str) -> bool:
    """Whether a finding of the pass over `platform`'s facts stands: one about a GPU of the stack only on the
    platform of that GPU's nodes (on the first platform where the stack is not built for them: IB013)."""
    m = GPU_KEY.match(finding.key or "")
    if len(stack.platforms) == 1 or not m or int(m.group(1)) >= len(stack.gpus):
        return True
    host = plat.of_cpu(catalog.gpu_host(stack.gpus[int(m.group(1))].name).value)
    return host == platform or (host not in stack.platforms and platform == stack.platforms[0])


def preflight(spec: Spec, stacks: Iterable[Stack], lock=None, strict: bool = False) -> list[Finding]:
    """Findings of every rule for the stacks; lock: a builder.core.lockfile.Lock, else the one read with the
    spec (Spec.lock). strict: warnings become errors."""
    lock = lock if lock is not None else spec.lock
    out: list[Finding] = []
    for stack in stacks:
        # Each platform's facts (the lock measures each image of an index); a finding on both is said once,
        # and one about a GPU only where that GPU's nodes are (an H100 is judged by the amd64 image's facts).
        said: list[Finding] = []
        for i, platform in enumerate(stack.platforms):
            ctx = Ctx(spec, stack, resolve(spec, stack, lock, platform=platform), lock)
            found = [f for r in RULES for f in r.check(ctx) if _judged_on(stack, f, platform)]
            said += found if i == 0 else [f for f in found if f not in said]
        out += said
    return ordered(make_strict(out) if strict else out)
