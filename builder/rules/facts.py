"""What a stack is made of, fact by fact, and how sure imgbuild is of each.

A base's facts come from, in order of trust: a measurement of the base image (stacks.lock.yaml,
written by `imgbuild lock`), what stacks.yaml declares under `provides`, then the catalog. Each
layer then adds what it installs: its framework's version, the packages it pins, the environment it
sets. Every fact keeps its origin, its source and the key path in stacks.yaml it belongs to, so a
finding can name both the key to change and the fact behind the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.core import catalog
from builder.load import versions
from builder.load.params import GitPin, Uninstall, WheelPin
from builder.load.spec import Base, LayerDef, Spec, Stack
from builder.plan.keys import layer_definition, python_entry

ORIGINS = ("measured", "declared", "catalog")
# Facts of a base that the probe measures beside the versions (builder.load.versions: the platform's and every
# kind's). Each is replaced one by one by the most trusted origin that has it (measured > declared > catalog).
PROBED = ("torch_cuda", "torch_archs", "nvcc", "pydantic", "pip_constraint", "os")


def base_fact_names(spec: Spec) -> tuple:
    return tuple(versions.fields(spec.kinds.values())) + PROBED
CU_LOCAL = re.compile(r"^cu(\d+)(\d)$")        # torch 2.7.1+cu126 -> CUDA 12.6
CP_TAG = re.compile(r"-cp(\d)(\d+)-")            # torch-...-cp311-... -> Python 3.11
# JAX's CUDA builds as pip names them: the extras of jax (cuda12, cuda12-local, cuda12_pip, cuda13, and plain
# `cuda`, which is the CUDA 12 plugin), the plugin and its PJRT package, and the monolithic jaxlibs of 0.4.x.
JAX_EXTRA = re.compile(r"^cuda(\d{2})?(?:[-_](pip|local|cudnn\d+))?\Z")
JAX_PLUGIN = re.compile(r"^jax-cuda(\d{2})-(plugin|pjrt)\Z")
JAXLIB_CUDA = re.compile(r"^cuda(\d{2})\.cudnn\d+\Z")
NGC_TORCH_CUDA = ("NGC builds torch with the container's nvcc, so torch's CUDA is the container's "
                  "(NVIDIA's PyTorch container release notes)")


@dataclass(frozen=True)
class Fact:
    value: Any            # a Version, a str, or None: measured and not installed
    origin: str           # measured | declared | catalog
    source: str
    verified: bool | None  # None: declared by the site, which imgbuild cannot verify
    key: tuple = ()       # the key path in stacks.yaml it belongs to


def as_version(value: Any) -> Any:
    if value is None or isinstance(value, Version):
        return value
    try:
        return Version(str(value))
    except InvalidVersion:
        return str(value)


def major_minor(v: Version) -> str:
    return ".".join(map(str, v.release[:2]))


def agree(a, b) -> bool:
    """Compared as versions (PEP 440), not as strings. Two values agree when their public versions are
    equal (2.1a0 and 2.1.0a0) and their local labels do not differ: a value without a local label names
    the public version and agrees with any build of it (declared 2.1.0a0, catalog 2.1.0a0+fe05266f), two
    labels must be equal (2.1.0a0+abc is another build). A final release also agrees with a more precise
    spelling of itself (3.12 and 3.12.3; 13.0.1 and 13.0.1.006); a pre-, post- or dev release does not."""
    if not (isinstance(a, Version) and isinstance(b, Version)):
        return str(a) == str(b)
    if a.local and b.local and a.local != b.local:
        return False
    pa, pb = Version(a.public), Version(b.public)
    if pa == pb:
        return True
    if pa.is_prerelease or pb.is_prerelease or pa.is_postrelease or pb.is_postrelease or pa.epoch != pb.epoch:
        return False
    n = min(len(pa.release), len(pb.release))
    return pa.release[:n] == pb.release[:n]


@dataclass(frozen=True)
class JaxCuda:
    """A requirement that installs a CUDA build of JAX: its CUDA major, and whether it uses the base's CUDA
    (`-local`, a plugin without its with-cuda wheels) instead of bringing CUDA as pip wheels."""

    major: int
    local: bool
    extra: str          # the extra as written ('' for a plugin or jaxlib by name)
    text: str           # the requirement as stacks.yaml writes it
    key: tuple
    layer: Any


def jax_cuda_of(text: str) -> list[tuple[int, bool, str]]:
    """[(CUDA major, local, extra)] of a requirement that installs JAX's CUDA build (one per CUDA extra it
    names: jax[cuda13,cuda12] names two); [] for anything else. local: it brings no CUDA wheels and runs on
    the base's CUDA (a -local extra, a plugin without with-cuda, the PJRT package alone)."""
    try:
        req = Requirement(text)
    except Exception:
        return []
    name = canonicalize_name(req.name)
    if name == "jax":
        out = []
        for extra in sorted(req.extras):
            m = JAX_EXTRA.match(extra.lower())
            if m:
                major = int(m.group(1) or catalog.jax_cuda_default().value)   # plain `cuda`: the CUDA 12 plugin
                out.append((major, m.group(2) == "local", extra))
        return out
    m = JAX_PLUGIN.match(name)
    if m:
        wheels = {canonicalize_name(e) for e in req.extras} & {"with-cuda"}
        return [(int(m.group(1)), not wheels, "")]
    if name == "jaxlib":
        local = next((sp.version.split("+", 1)[1] for sp in req.specifier if "+" in sp.version), "")
        m = JAXLIB_CUDA.match(local)
        if m:
            return [(int(m.group(1)), False, "")]
    return []


@dataclass
class StackFacts:
    stack: Stack
    facts: dict = field(default_factory=dict)      # name -> Fact (what the image will hold)
    options: dict = field(default_factory=dict)    # name -> [Fact] every origin that had a value for the base
    providers: dict = field(default_factory=dict)  # provided name -> LayerDef that installs it
    pins: dict = field(default_factory=dict)       # canonical package name -> (Version, key path, LayerDef)
    env: dict = field(default_factory=dict)        # variable -> (value, key path, LayerDef)
    lock_note: str = ""                            # why measured facts were not used, when they were not
    layer_notes: list = field(default_factory=list)           # (LayerDef, why its measurement was not used)
    layer_disagreements: list = field(default_factory=list)   # (LayerDef, fact, declared Fact, measured Fact)
    jax_cuda: list = field(default_factory=list)  # JaxCuda: every requirement that installs a CUDA build of JAX

    def get(self, name: str) -> Fact | None:
        return self.facts.get(name)

    def version(self, name: str) -> Version | None:
        fact = self.facts.get(name)
        return fact.value if fact is not None and isinstance(fact.value, Version) else None


def _catalog_facts(base: Base, names: tuple) -> dict[str, Fact]:
    rel = catalog.base_record(base.family, base.image)
    if rel is None:
        return {}
    key = ("bases", base.name, "image")
    out = {}
    for name in names:
        known = rel.fact(name)
        if known is not None:
            out[name] = Fact(as_version(known.value), "catalog", known.source, known.verified, key)
    apex = catalog.ngc_apex(rel.release) if base.family == "ngc-pytorch" and rel.release else None
    if apex is not None:
        out["apex"] = Fact(apex.value, "catalog", apex.source, apex.verified, key)
    return out


def _declared_facts(base: Base) -> dict[str, Fact]:
    source = f"stacks.yaml bases.{base.name}.provides" + (f" ({base.source})" if base.source else "")
    return {name: Fact(value, "declared", source, None, ("bases", base.name, "provides", name))
            for name, value in base.provides}


def _measured_facts(spec: Spec, base: Base, lock: Any, names: tuple,
                    platform: str | None = None) -> tuple[dict[str, Fact], str]:
    """What `imgbuild lock` measured in the base: in the image of `platform`, where the lock probed each
    platform of an index (NGC's arm64 image may hold another torch build than its amd64 one)."""
    entry = lock.bases.get(base.name) if lock is not None else None
    if entry is None:
        return {}, ""
    if not base.locked_by(entry, spec.site):
        return {}, (f"{lock.file} was probed from {entry.image}@{entry.digest}, not the base stacks.yaml names "
                    f"now; run `imgbuild lock` again")
    each = entry.platforms.get(platform) if platform else None
    source = (f"{lock.file}: probe of {entry.image}@{each.digest} ({platform}) on {entry.probed}" if each else
              f"{lock.file}: probe of {entry.image}@{entry.digest} on {entry.probed}")
    key = ("bases", base.name)
    return {name: Fact(as_version(value), "measured", source, True, key)
            for name, value in (each.facts if each else entry.facts).items() if name in names}, ""


def _derive(facts: dict[str, Fact], family: str) -> None:
    """torch's CUDA and nvcc, where only the toolkit's CUDA is known."""
    torch = facts.get("torch")
    if "torch_cuda" not in facts and torch is not None and isinstance(torch.value, Version) and torch.value.local:
        m = CU_LOCAL.match(torch.value.local)
        if m:
            facts["torch_cuda"] = Fact(Version(f"{m.group(1)}.{m.group(2)}"), torch.origin,
                                       f"local version label of torch {torch.value}", torch.verified, torch.key)
        elif torch.value.local.startswith("cpu"):
            facts["torch_cuda"] = Fact(None, torch.origin, f"torch {torch.value} is a CPU build", torch.verified,
                                       torch.key)
    cuda = facts.get("cuda")
    if cuda is not None and family == "ngc-jax":
        facts.setdefault("nvcc", cuda)   # NGC's JAX images carry the toolkit whose release they name
        facts.setdefault("jax_cuda", Fact(cuda.value, cuda.origin, f"{cuda.source}; NGC builds jaxlib with the "
                                          "container's CUDA", cuda.verified, cuda.key))
    if cuda is not None and family == "ngc-pytorch":
        facts.setdefault("nvcc", cuda)
        facts.setdefault("torch_cuda", Fact(cuda.value, cuda.origin, f"{cuda.source}; {NGC_TORCH_CUDA}",
                                            cuda.verified, cuda.key))


def resolve(spec: Spec, stack: Stack, lock: Any = None, below: str | None = None,
            platform: str | None = None) -> StackFacts:
    """The facts of one stack: its base's, then what every layer of its chain adds (only the layers
    beneath layer `below`, when given: what that layer is installed over). platform: whose measurements
    of the base count (default the stack's first platform)."""
    base = stack.base
    sf = StackFacts(stack=stack)
    names = base_fact_names(spec)
    measured, sf.lock_note = _measured_facts(spec, base, lock, names, platform or stack.platforms[0])
    by_origin = {"measured": measured, "declared": _declared_facts(base), "catalog": _catalog_facts(base, names)}
    for name in names:
        found = [by_origin[o][name] for o in ORIGINS if name in by_origin[o]]
        if found:
            sf.options[name] = found
            sf.facts[name] = found[0]
    _derive(sf.facts, base.family)
    for layer in stack.chain:
        if layer.name == below:
            break
        _apply(sf, layer, _locked_versions(spec, stack, layer, lock))
        _measured_layer(spec, sf, layer, lock, names)
    return sf


def _measured_layer(spec: Spec, sf: StackFacts, layer: LayerDef, lock: Any, names: tuple) -> None:
    """What `imgbuild lock layer=NAME` measured in the layer's image replaces what the layer and those
    beneath it declared, while the layer's definition (and everything beneath it) is the one measured."""
    entry = lock.layers.get(layer.name) if lock is not None and getattr(lock, "layers", None) else None
    if entry is None:
        return
    stack = sf.stack
    if entry.definition != layer_definition(spec, stack, layer.name, lock.base_digest(stack.base, spec.site)):
        sf.layer_notes.append((layer, f"{lock.file} measured {entry.image} as it was defined then; it or a layer "
                                      "beneath it, or the base, changed since"))
        return
    source = f"{lock.file}: probe of layer {layer.name} ({entry.image}, {entry.digest[:19]}) on {entry.probed}"
    for name, value in entry.facts.items():
        if name not in names:
            continue
        measured = Fact(as_version(value), "measured", source, True, (layer.section, layer.name))
        before = sf.facts.get(name)
        if before is not None and before.origin == "declared" and before.value is not None \
                and not agree(before.value, measured.value):
            sf.layer_disagreements.append((layer, name, before, measured))
        sf.facts[name] = measured


def _locked_versions(spec: Spec, stack: Stack, layer: LayerDef, lock: Any) -> dict:
    """canonical name -> version of what the lock file resolved for the layer as stacks.yaml defines it
    now ({} where it has no current entry): the exact answer to a floating requirement."""
    entry = python_entry(spec, lock, stack, layer, stack.platforms[0])
    if entry is None:
        return {}
    return {name: (Version(d.version), f"{lock.file}: python.{layer.name}") for name, d in entry.dists().items()}


def _apply(sf: StackFacts, layer: LayerDef, locked: dict | None = None) -> None:
    path = (layer.section, layer.name, "params")
    params = dict(layer.params)
    for name in layer.kind.provides:
        sf.providers[name] = layer
    version = params.get("version")
    for name, _ in layer.kind.versions:   # what the kind declares it installs, at its version parameter
        if version is not None:
            sf.facts[name] = Fact(version, "declared", f"stacks.yaml {layer.section}.{layer.name}.params.version",
                                  None, path + ("version",))
    for fname, pname in layer.kind.facts:   # what the kind says its layer brings (a toolkit's CUDA)
        if params.get(pname) is not None:
            sf.facts[fname] = Fact(as_version(params[pname]), "declared", f"stacks.yaml {layer.section}."
                                   f"{layer.name}.params.{pname}", None, path + (pname,))
    pinned_versions = {canonicalize_name(d): vfield for vfield, dists in layer.kind.versions for d in dists}
    for pname, value in params.items():
        if isinstance(value, WheelPin):
            _wheel(sf, layer, value, path + (pname, "file"))
        elif isinstance(value, GitPin) and "megatron" in layer.kind.provides and version is None:
            rel = catalog.megatron_release(commit=value.commit)
            if rel is not None:
                sf.facts["megatron"] = Fact(rel.version, "catalog", rel.source, rel.verified, path + (pname, "commit"))
        elif layer.kind.params[pname].type == "requirements":
            for i, text in enumerate(value):
                for jc in jax_cuda_of(text):
                    sf.jax_cuda.append(JaxCuda(*jc, text=text, key=path + (pname, i), layer=layer))
                    if params.get(dict(layer.kind.facts).get("jax_cuda")) is None:   # no `cuda` parameter says it
                        sf.facts["jax_cuda"] = Fact(Version(str(jc[0])), "declared", f"stacks.yaml {layer.section}."
                                                    f"{layer.name}.params.{pname} pins {text}", None, path + (pname, i))
                req = Requirement(text)
                name = canonicalize_name(req.name)
                exact = [sp for sp in req.specifier if sp.operator == "==" and not sp.version.endswith(".*")]
                if (req.url or len(exact) != 1 or len(req.specifier) != 1) and name in (locked or {}):
                    # Intent (a range, a tag): the lock file's answer is the fact.
                    pinned, where = locked[name]
                    text = f"{text} (locked: {pinned}, {where})"
                elif req.url or len(exact) != 1 or len(req.specifier) != 1:
                    continue   # a git pin, or intent not locked yet: its version is not known here
                else:
                    pinned = Version(exact[0].version)
                sf.pins[name] = (pinned, path + (pname, i), layer)
                if version is None and name in pinned_versions:   # torch==2.11.0 in a torch layer's packages
                    sf.facts[pinned_versions[name]] = Fact(pinned, "declared", f"stacks.yaml {layer.section}."
                                                           f"{layer.name}.params.{pname} pins {text}", None,
                                                           path + (pname, i))
                if name in ("numpy", "pydantic", "jax", "jaxlib"):   # whatever kind of layer pins them
                    sf.facts[name] = Fact(pinned, "declared", f"stacks.yaml {layer.section}.{layer.name}.params."
                                          f"{pname} pins {text}", None, path + (pname, i))
        elif layer.kind.params[pname].type in ("map", "env"):
            for var, val in value:
                sf.env[var] = (val, path + (pname, var), layer)
        elif isinstance(value, Uninstall):
            # What the parent shipped and this layer removes is no fact of the stack any more (a later
            # layer that installs it again says so itself).
            for dist in value.packages:
                sf.facts.pop(canonicalize_name(dist).replace("-", "_"), None)
                sf.providers.pop(canonicalize_name(dist).replace("-", "_"), None)
    if params.get("replace_torch"):
        # A declared torch replacement: torch is what this layer pins, or unknown.
        sf.facts.pop("torch_cuda", None)
        pin = sf.pins.get("torch")
        if pin is not None and pin[2] is layer:
            sf.facts["torch"] = Fact(pin[0], "declared", f"stacks.yaml {layer.section}.{layer.name}: replace_torch",
                                     None, pin[1])
            _derive(sf.facts, "")
        else:
            sf.facts.pop("torch", None)


def _wheel(sf: StackFacts, layer: LayerDef, wheel: WheelPin, key: tuple) -> None:
    """A wheel of a framework the layer provides: its version (and torch's CUDA, Python) from the file name."""
    dist, _, rest = wheel.file.partition("-")
    if dist not in layer.kind.provides:
        return
    source = f"stacks.yaml {layer.section}.{layer.name}: wheel {wheel.file}"
    version = as_version(rest.split("-")[0])
    sf.facts[dist] = Fact(version, "declared", source, None, key)
    if dist == "torch":
        sf.facts.pop("torch_cuda", None)
        _derive(sf.facts, "")
        m = CP_TAG.search(wheel.file)
        if m and "python" not in sf.facts:
            sf.facts["python"] = Fact(Version(f"{m.group(1)}.{m.group(2)}"), "declared", source, None, key)
