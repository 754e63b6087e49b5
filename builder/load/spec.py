"""stacks.yaml: the site's one source of truth, loaded once into frozen, typed models.

Every refusal names the file, the line, the key path, the reason and, where there is a closed set,
the allowed values. Nothing here touches Docker, the network or the registry.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import json
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from packaging.version import InvalidVersion, Version

from builder.core import catalog, cpubaseline
from builder.core import platforms
from builder.load import ciconf, k8sconf, nodeconf, retention, slurmconf, tags, trustconf, versions
from builder.load.ciconf import CiSettings
from builder.errors import SpecError, SpecErrors, did_you_mean
from builder.load.kinds import FAMILIES, NGC_FAMILIES, Kind, load_kinds
from builder.core.lockfile import load_lock
from builder.load.intent import Intents, lock_path, pins, reading
from builder.load.params import VERSION_RANGE, ParamError, WheelPins, files_root, not_exact, text, type_name, version
from builder.core.yamlsrc import Doc, load_file
from builder.redact import redact

NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*\Z")  # \Z: "$" would accept a trailing newline
# The OCI distribution grammar (distribution/reference): a registry host[:port], path components of
# lower case letters and digits joined by . _ __ or dashes, an optional tag. No '..', no '//', nothing
# starting with '-'. `{registry}` stands for the site registry.
_DOMAIN = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])(?:\.(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]))*"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*"
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
IMAGE_REF = re.compile(rf"^(?:\{{registry\}}/|{_DOMAIN}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
                       r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?\Z")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
REGISTRY = re.compile(rf"^{_DOMAIN}(?::[0-9]{{1,5}})?\Z")
EPOCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# 1980-01-01 UTC: the earliest time a ZIP entry can hold, so a wheel built under SOURCE_DATE_EPOCH can be written.
ZIP_EPOCH = 315532800
ENGINES = ("docker", "podman")
DRIVER = re.compile(r"^[0-9]{3}(?:\.[0-9]{1,3}){0,2}\Z")  # an NVIDIA Linux driver: 580, 580.65, 580.65.06
DEFAULT_TAGS = ("{stack}", "{stack}-{date}")
SECTIONS = {"layers": ("base", "layer"), "projects": ("project",), "runtimes": ("runtime",)}
TOP_KEYS = {"version", "site", "bases", "layers", "projects", "runtimes", "stacks"}
SITE_KEYS = {"registry", "namespace", "description", "driver_floor", "epoch", "source_date_epoch", "engine", "retention", "k8s", "ci", "trust", "catalog",
             "cpu_baseline", "node_check", "slurm", "partitions"}
BASE_KEYS = {"image", "digest", "family", "provides", "source", "description"}
LAYER_KEYS = {"kind", "params", "description"}
STACK_KEYS = {"extends", "description", "base", "layers", "project", "runtime", "above", "gpus", "tags",
              "driver_floor", "waivers", "platforms", "cpu_baseline",
              "gpus_per_node"}
WAIVER_KEYS = {"rule", "reason"}
RULE_ID = re.compile(r"^IB[0-9]{3}\Z")
KEY_SHOWN = re.compile(r"^[A-Za-z0-9_.+-]{1,64}\Z")   # an unknown key quoted in a message only if it looks like this
DEFAULT_REGISTRY = "127.0.0.1:5000"
UNKNOWN_CUDA = "unknown"   # a CUDA toolkit that is there, of a version nobody knows (Base.cuda)
DEFAULT_NAMESPACE = "imgbuild"


@dataclass(frozen=True)
class Site:
    registry: str = DEFAULT_REGISTRY
    namespace: str = DEFAULT_NAMESPACE
    driver_floor: str | None = None   # the oldest NVIDIA driver on the site's GPU nodes
    # A deliberate "rebuild everything": an input of every content key where set (builder.plan.keys).
    # Nothing else of imgbuild's own (its version, its code) is: see docs/keys.md.
    epoch: str | None = None
    # The one time every file of every layer carries where the engine can fix file times, and what pip's .pyc
    # are checked against (SOURCE_DATE_EPOCH): written into each rendered Dockerfile, so an input of every key.
    source_date_epoch: int = ZIP_EPOCH
    engine: str | None = None   # what builds: docker (BuildKit) or podman (Buildah); None: docker
    retention: retention.Retention = retention.Retention()   # what `imgbuild gc` keeps
    k8s: k8sconf.K8sSettings = k8sconf.K8sSettings()       # what node-check --emit-k8s writes
    ci: CiSettings = CiSettings()
    # Who may write proof (builder.load.trustconf); None: nothing is signed, one namespace holds all.
    trust: trustconf.TrustSettings | None = None
    # The CPU levels every node of the site shares, one per platform (builder.core.cpubaseline); () where
    # not said: each stack's is then derived from its GPUs.
    cpu_baseline: tuple = ()
    node_check: nodeconf.NodeCheckSettings = nodeconf.NodeCheckSettings()   # the GPU nodes node-check exercises
    # The site's own catalog file (builder.core.sitecatalog), as written (relative to the stacks file); None: none.
    catalog: str | None = None
    slurm: slurmconf.SlurmSettings = slurmconf.SlurmSettings()   # what node-check --emit-sbatch writes
    partitions: tuple = ()   # slurmconf.Partition of each of the site's partitions: per-partition runtime env

    def partition(self, name: str):
        """The site partition of that name (node-check --partition), or None."""
        return next((p for p in self.partitions if p.name == name), None)


@dataclass(frozen=True)
class Base:
    name: str
    image: str            # as written, '{registry}' not yet substituted
    digest: str | None    # sha256:..., or None until locked / resolved from the registry
    family: str
    provides: tuple       # sorted (name, Version | str) pairs
    source: str
    # The base's CUDA toolkit as the most trusted origin that knows it says (measured in the lock file >
    # declared under provides > the catalog's record of a known NGC image; the order of
    # builder.rules.facts), set by load_spec: (value or None, origin). None: nobody knows.
    cuda: tuple | None = None

    def fact(self, name: str) -> Any:
        return dict(self.provides).get(name)

    @property
    def has_cuda(self) -> bool:
        """The one answer to "does this base have CUDA", for render, plan and preflight alike: a known
        CUDA toolkit, from whichever origin knows it first. No CUDA where nobody knows."""
        return self.cuda is not None and self.cuda[0] is not None

    def locked_by(self, entry: Any, site: Site) -> bool:
        """Whether a lock file entry was probed from this base as stacks.yaml names it now (same image
        reference, and the same digest where one is declared): otherwise its measurements are stale."""
        return entry.image == self.ref(site) and not (self.digest and entry.digest != self.digest)

    def ref(self, site: Site) -> str:
        return self.image.replace("{registry}", site.registry)


@dataclass(frozen=True)
class LayerDef:
    name: str
    section: str
    kind: Kind
    params: tuple  # sorted (name, typed value) pairs, defaults filled in
    line: int | None

    def param(self, name: str) -> Any:
        return dict(self.params)[name]

    def for_platform(self, platform: str) -> "LayerDef":
        """The layer as one platform's chain builds it: a parameter that names one wheel per platform
        becomes the wheel of this one. A platform without its wheel is refused (preflight IB014 says so
        first, with the file and key)."""
        if not any(isinstance(v, WheelPins) for _, v in self.params):
            return self
        params = []
        for name, value in self.params:
            if isinstance(value, WheelPins):
                chosen = value.choose(platform)
                if chosen is None:
                    raise SpecError(f"layer {self.name!r}: {name} names no {platform} wheel "
                                    f"({', '.join(p.file for p in value.pins)})", line=self.line,
                                    key=f"{self.section}.{self.name}.params.{name}", rule="IB014",
                                    hint=f"add the {platform} wheel to the list, or build the stack for "
                                         "the platforms its wheels name")
                value = chosen
            params.append((name, value))
        return replace(self, params=tuple(params))


@dataclass(frozen=True)
class Waiver:
    """A finding a stack accepts knowingly: its rule id, why, and where the waiver is written (a stack it
    extends may hold it). Waives warnings and unknowns of that rule for the stack, never errors."""

    rule: str
    reason: str
    key: tuple   # stacks.NAME.waivers[i], NAME the stack that wrote it


@dataclass(frozen=True)
class Stack:
    name: str
    description: str
    base: Base
    chain: tuple   # LayerDef, bottom to top: base adapter, layers..., runtime, project
    gpus: tuple    # catalog.Gpu
    tags: tuple    # tag templates
    line: int | None
    driver_floor: str | None = None  # the stack's own, else the site's (preflight checks it against CUDA)
    waivers: tuple = ()              # Waiver: its own and those of the stacks it extends
    declared_platforms: tuple = ()   # `platforms:` as written (its own or a stack's it extends); () if none
    # The CPU levels declared for it (its own `cpu_baseline`, a stack's it extends, else the site's), and the
    # key that declares them; () where none is: then each platform's is derived from the GPUs.
    declared_baseline: tuple = ()
    baseline_key: str = ""
    gpus_per_node: int | None = None   # its own `gpus_per_node`, else site.node_check's (node-check's default)

    def cpu_baseline(self, platform: str) -> cpubaseline.Baseline:
        """The instruction-set level compiled host code is built for on a platform, and where it comes from."""
        return cpubaseline.choose(self.declared_baseline, self.gpus, platform, self.baseline_key)

    @property
    def platforms(self) -> tuple:
        """What the stack is built for: `platforms:` where given, else its GPUs' hosts (a Grace GPU's
        nodes are linux/arm64, every other GPU's linux/amd64; both where it names both), else linux/amd64."""
        if self.declared_platforms:
            return self.declared_platforms
        hosts = {platforms.of_cpu(catalog.gpu_host(g.name).value) for g in self.gpus}
        return tuple(p for p in platforms.PLATFORMS if p in hosts) or (platforms.DEFAULT,)

    def compiles_cuda(self, layer: LayerDef) -> bool:
        kind = layer.kind
        if kind.compiles_cuda == "never" or (kind.compiles_cuda == "if-cuda" and not self.cuda_beneath(layer)):
            return False
        return not kind.compiles_cuda_param or bool(layer.param(kind.compiles_cuda_param))

    def cuda_beneath(self, layer: LayerDef) -> bool:
        """Whether a CUDA toolkit is in the image a layer builds on: the base's, or one a layer beneath it
        installs (cuda-toolkit-pip on a base without one). A base adapter's `provides` restates its
        base's (ngc-pytorch says cuda): there the base's answer stands, a measured "none" included."""
        if self.base.has_cuda:
            return True
        for below in self.chain:
            if below.name == layer.name:
                return False
            if below.kind.role != "base" and "cuda" in below.kind.provides:
                return True
        return False

    @property
    def arch_list(self) -> str:
        """TORCH_CUDA_ARCH_LIST for the target GPUs, sorted numerically, e.g. '8.0;9.0'."""
        return arch_list(self.gpus)

    def runtime_env(self) -> dict:
        """The variables the stack's runtime layers set in the image (its NCCL and IB settings): a batch job
        exports them for every task, as a training job on those nodes would run; the stack card records them."""
        out = {}
        for layer in self.chain:
            if layer.kind.role != "runtime":
                continue
            for pname, param in layer.kind.params.items():
                if param.type == "env":
                    for var, value in dict(layer.params).get(pname) or ():
                        if isinstance(value, str):
                            out[var] = value
        return out

    def spec_hash(self) -> str:
        """Hash of everything stacks.yaml says about this stack (the 'spec hash' label)."""
        body = {"base": [self.base.image, self.base.digest, [list(map(str, p)) for p in self.base.provides]],
                "chain": [[d.name, d.kind.name, _jsonable(d.params)] for d in self.chain],
                "gpus": [g.name for g in self.gpus], "tags": list(self.tags)}
        if self.declared_platforms:   # only where written: the hashes of stacks without it stay what they were
            body["platforms"] = list(self.declared_platforms)
        if self.declared_baseline:
            body["cpu_baseline"] = list(self.declared_baseline)
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Spec:
    file: str
    root: Path
    site: Site
    bases: dict
    layers: dict   # every LayerDef by name (layers, projects and runtimes share one namespace)
    stacks: dict
    kinds: dict
    doc: Doc | None = field(default=None, compare=False, repr=False)  # lines of every key, for findings
    # The lock file beside it (builder.core.lockfile.Lock, None where there is none), read once with it:
    # planning, the judges, the base resolver and `imgbuild lock` take it from here.
    lock: Any = field(default=None, compare=False, repr=False)

    def stack(self, name: str) -> Stack:
        if name not in self.stacks:
            raise SpecError(f"no stack named {name!r}", file=self.file,
                            hint="stacks: " + ", ".join(sorted(self.stacks)))
        return self.stacks[name]


def arch_list(gpus) -> str:
    """TORCH_CUDA_ARCH_LIST for catalog GPUs: their compute capabilities, once each, sorted numerically."""
    ccs = sorted({g.cc for g in gpus}, key=lambda cc: tuple(int(p) for p in cc.split(".")))
    return ";".join(ccs)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "__dataclass_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    return str(value)


class Skipped(Exception):
    """A part of stacks.yaml left unchecked because something it depends on was refused (and reported):
    checking it would only report that refusal again in other words (a stack naming a refused layer would
    call the layer unknown)."""


class _Loader:
    def __init__(self, doc: Doc, kinds: dict[str, Kind]):
        self.doc, self.kinds = doc, kinds
        self.refused: list[SpecError] = []   # every refusal found, in the order found
        # Sections (site, bases, layers, projects, runtimes, stacks) refused whole or holding a refused entry:
        # a reference into one that finds nothing may mean the refused entry, so it is not reported.
        self.incomplete: set[str] = set()
        # Names of entries refused ("bases", or "layers" for the one namespace of layers, projects and runtimes):
        # a reference to one is not said to be unknown (its entry's refusal is what is wrong); any other is.
        self.refused_names: dict[str, set] = {"bases": set(), "layers": set()}
        self.resolved: dict = {}             # stack name -> merged with the stacks it extends (stack_raw)
        self.unread: set = set()             # stacks whose extends chain could not be read (stack_raw)
        # Mappings read past their unknown keys (known()): a required key missing there is not said, since
        # an unknown key may be it misspelt; a stack extending such a stack is one too.
        self.loose: set[tuple] = set()

    def attempt(self, fn: Callable, *args: Any) -> tuple[bool, Any]:
        """fn(*args) with a refusal recorded instead of raised, so that the parts after it are still
        checked: (True, its value), or (False, None) where it was refused or skipped."""
        try:
            return True, fn(*args)
        except Skipped:
            return False, None
        except SpecError as exc:
            self.refused.append(exc)
            return False, None

    def err(self, path: tuple, reason: str, hint: str | None = None) -> SpecError:
        return self.doc.error(path, reason, hint)

    def mapping(self, path: tuple, value: Any, allowed: set | None = None, what: str = "a mapping") -> dict:
        if not isinstance(value, dict):
            raise self.err(path, f"expected {what}, got {type_name(value)}")
        if allowed is not None:
            unknown = []   # every unknown key of the mapping is named, not only the first
            for key in value:
                if key not in allowed:
                    if not (isinstance(key, str) and KEY_SHOWN.match(key)):
                        # Not a name a site would write (a stray line of some other file, a secret): said,
                        # not quoted, since error messages reach CI logs.
                        unknown.append(self.err(path, f"an unknown key of {len(str(key))} characters that is not "
                                                "a name (not shown)", hint="allowed: " + ", ".join(sorted(allowed))))
                    else:
                        unknown.append(self.err(path + (key,), f"unknown key {key!r}" + did_you_mean(key, allowed),
                                                hint="allowed: " + ", ".join(sorted(allowed))))
            if unknown:
                self.refused.extend(unknown[:-1])
                raise unknown[-1]
        return value

    def string(self, path: tuple, value: Any) -> str:
        try:
            return text(value)
        except ParamError as exc:
            raise self.err(path, exc.reason) from None

    def free_text(self, path: tuple, value: Any) -> str:
        """A description or note: any text, but no control character (a newline would print as a line of
        its own: a forged log line or finding)."""
        return "" if value is None else self.string(path, value)

    def name(self, path: tuple, value: str) -> str:
        if not NAME.match(value):
            raise self.err(path, f"{value!r} is not a valid name: use lowercase letters, digits and . _ - "
                           "(it becomes part of image names)")
        return value

    def required(self, path: tuple, mapping: dict, key: str) -> Any:
        if key not in mapping or mapping[key] is None:
            if path in self.loose:
                raise Skipped   # beside an unknown key, which may be this one misspelt and is all that is said
            raise self.err(path, f"missing required key {key!r}")
        return mapping[key]

    def known(self, path: tuple, value: Any, allowed: set) -> dict:
        """A mapping's known keys, each unknown key refused (recorded) rather than ending the reading: the
        rest of the entry is still checked, so a stray key does not hide the entry's other mistakes."""
        try:
            return self.mapping(path, value, allowed)
        except SpecError as exc:
            if not isinstance(value, dict):
                raise
            self.refused.append(exc)   # the last unknown key; mapping() recorded the others
            self.loose.add(path)
            return {k: v for k, v in value.items() if k in allowed}

    # -- the file -------------------------------------------------------------------------------
    # Each entry of each section is checked on its own and its refusals recorded (self.refused), so that
    # one run reports every independent mistake. What depends on a refused entry is not checked: a
    # reference to it, a stack extending a stack with refusals of its own, the chain of a stack with a
    # part unread.

    def spec(self, file: Path, root: Path, lock: Any) -> Spec:
        """Raises only for what leaves nothing else readable: no mapping at the top, another version."""
        data = self.mapping((), self.doc.data, what="a mapping with bases, layers and stacks")
        if not self.attempt(self.mapping, (), data, TOP_KEYS)[0]:
            # An unknown key may be a section's name misspelt (`stack:`): every absent section is then taken
            # as refused, so that none is reported missing, nor any reference into one unknown.
            self.incomplete.update(TOP_KEYS - set(data))
        if data.get("version", 1) != 1:
            raise self.err(("version",), f"unsupported version {data.get('version')!r}", hint="allowed: 1")
        read, site = self.attempt(self.site, data)
        if not read:
            self.incomplete.add("site")
            site = Site()
        bases = self.bases(data, site, lock)
        with files_root(file.resolve().parent):   # `file` parameters (patches, configs) live beside stacks.yaml
            layers = self.layers(data)
        stacks = self.stacks(data, bases, layers, site)
        return Spec(file=str(file), root=root, site=site, bases=bases, layers=layers, stacks=stacks,
                    kinds=self.kinds, doc=self.doc, lock=lock)

    def section(self, data: dict, name: str, required: bool = False) -> dict:
        """A section's entries: {} where it is absent (refused where required) or taken as refused."""
        if name in self.incomplete:   # absent beside an unknown key at the top, which may be it misspelt
            return {}
        return self.mapping((name,), self.required((), data, name) if required else data.get(name) or {})

    def bases(self, data: dict, site: Site, lock: Any) -> dict:
        read, raw = self.attempt(self.section, data, "bases", True)
        if not read:
            self.incomplete.add("bases")
        out = {}
        for name, value in (raw or {}).items():
            named = self.attempt(self.name, ("bases", name), name)[0]
            read, base = self.attempt(self.base, name, value)
            if named and read:
                out[name] = replace(base, cuda=base_cuda(base, site, lock))
            else:
                self.refused_names["bases"].add(name)
        return out

    def layers(self, data: dict) -> dict:
        """Layers, projects and runtimes: one namespace."""
        out: dict[str, LayerDef] = {}
        for section in SECTIONS:
            read, raw = self.attempt(self.section, data, section)
            if not read:
                self.incomplete.add(section)
            for name, value in (raw or {}).items():
                read, layer = self.attempt(self.layer, section, name, value, out)
                if read:
                    out[name] = layer
                else:
                    self.refused_names["layers"].add(name)
        return out

    def stacks(self, data: dict, bases: dict, layers: dict, site: Site) -> dict:
        read, raw = self.attempt(self.section, data, "stacks", True)
        if not read:
            return {}
        named = {name for name in raw if self.attempt(self.name, ("stacks", name), name)[0]}
        if len(named) < len(raw):
            self.incomplete.add("stacks")   # an `extends` naming no stack may mean the one whose name is refused
        clean: dict[str, bool] = {}   # stack name -> checked with no refusal of its own
        out = {}
        for name in raw:
            if name in clean or name in self.unread or not self.attempt(self.stack_raw, raw, name)[0]:
                continue
            for each in self.lineage(raw, name, clean):   # a stack after the stacks it extends
                parent = raw[each].get("extends")
                if parent is not None and not clean[parent]:
                    clean[each] = False   # it inherits what was refused there: checked once that is fixed
                    continue
                before = len(self.refused)
                read, stack = self.attempt(self.stack, each, self.stack_raw(raw, each), bases, layers, site)
                clean[each] = len(self.refused) == before
                if read and each in named:
                    out[each] = stack
        return {name: out[name] for name in raw if name in out}   # in the order of the file

    # -- sections -------------------------------------------------------------------------------

    def site(self, data: dict) -> Site:
        # The site catalog first, whatever else the section holds: all that follows is judged with it, and a
        # file whose site is refused must not be judged with the catalog of the file read before it.
        given = data.get("site")
        read, site_catalog = self.attempt(self.site_catalog, given.get("catalog") if isinstance(given, dict) else None)
        raw = self.mapping(("site",), data.get("site", {}), SITE_KEYS)
        if not read:
            raise Skipped
        registry = self.string(("site", "registry"), raw.get("registry", DEFAULT_REGISTRY))
        if not isinstance(raw.get("registry", DEFAULT_REGISTRY), str):
            # YAML reads `registry: 5000` or `registry: 10.5` as a number: never a host anyone meant (a port
            # alone, a mistyped address), and str() would make it the host "5000".
            raise self.err(("site", "registry"), f"{registry!r} was read as a number, not a registry host[:port]",
                           hint="write the host and port, e.g. registry: 127.0.0.1:5000")
        if not REGISTRY.match(registry):
            raise self.err(("site", "registry"), f"{redact(registry)!r} is not a registry host[:port]",
                           hint="credentials come from the netrc secret ($IMGBUILD_NETRC)" if "@" in registry
                           else None)
        self.free_text(("site", "description"), raw.get("description"))
        namespace = self.string(("site", "namespace"), raw.get("namespace", DEFAULT_NAMESPACE))
        if not all(NAME.match(p) for p in namespace.split("/")):
            raise self.err(("site", "namespace"), f"{namespace!r} is not a valid repository path")
        return Site(registry=registry, namespace=namespace,
                    driver_floor=self.driver(("site", "driver_floor"), raw.get("driver_floor")),
                    epoch=self.epoch(("site", "epoch"), raw.get("epoch")),
                    source_date_epoch=self.source_date_epoch(raw.get("source_date_epoch")),
                    engine=self.engine(raw.get("engine")),
                    retention=retention.parse(self, raw.get("retention")), k8s=k8sconf.parse(self, raw.get("k8s")),
                    ci=ciconf.parse(self, raw.get("ci")), trust=trustconf.parse(self, raw.get("trust"), namespace),
                    cpu_baseline=tuple(self.cpu_levels(("site", "cpu_baseline"), raw.get("cpu_baseline"))),
                    node_check=nodeconf.parse(self, raw.get("node_check")), catalog=site_catalog,
                    slurm=slurmconf.parse_slurm(self, raw.get("slurm")),
                    partitions=tuple(slurmconf.parse_partitions(self, raw.get("partitions")).values()))

    def site_catalog(self, value: Any) -> str | None:
        """site.catalog: a file of the catalog's schema beside the stacks file (or by absolute path) whose records
        add to or override the shipped catalog's; read and validated here, and used for all that follows."""
        if value is None:
            catalog.use(None)
            return None
        where = ("site", "catalog")
        given = value if isinstance(value, str) else str(value)
        path = Path(self.doc.file).resolve().parent / given
        if not path.is_file():
            catalog.use(None)   # a refused site catalog judges nothing; nor does the one of the file read before
            raise self.err(where, f"{redact(given)[:80]!r} is not a file (a site catalog is a path relative to the "
                           "stacks file)", hint="e.g. catalog: site-catalog.yaml (docs/site-catalog.md)")
        try:
            catalog.use(path)
        except SpecError as exc:
            catalog.use(None)
            self.refused.extend(exc.errors if isinstance(exc, SpecErrors) else [exc])
            raise Skipped from None
        return given

    def cpu_levels(self, path: tuple, value: Any) -> list:
        """`cpu_baseline: x86-64-v3`, or one level per platform: [x86-64-v3, neoverse-v2]."""
        if value is None:
            return []
        given = [value] if isinstance(value, str) else value
        if not isinstance(given, list) or not given:
            raise self.err(path, f"expected a CPU level or a list of them (one per platform), got {type_name(value)}",
                           hint="e.g. cpu_baseline: x86-64-v3, or [x86-64-v3, neoverse-v2]")
        known = cpubaseline.levels()
        seen: dict = {}
        for i, item in enumerate(given):
            where = path if isinstance(value, str) else path + (i,)
            if not isinstance(item, str) or item not in known:
                near = difflib.get_close_matches(str(item).lower(), list(known), n=1, cutoff=0.6) if isinstance(item, (str, int, float)) else []
                raise self.err(where, f"{redact(str(item))[:40]!r} is not a CPU level imgbuild knows"
                               + (f" (did you mean {near[0]!r}?)" if near else ""),
                               hint="levels: " + ", ".join(known) + " (the catalog's cpu_levels; a site adds one in its site.catalog)")
            platform = known[item].platform
            if platform in seen:
                raise self.err(where, f"two levels for {platform}: {seen[platform]!r} and {item!r}",
                               hint="the baseline is the one level every node of that platform shares")
            seen[platform] = item
        return list(given)

    def source_date_epoch(self, value: Any) -> int:
        """Seconds since 1970, from 1980-01-01 (a wheel built beneath it could not be zipped) to now."""
        if value is None:
            return ZIP_EPOCH
        if isinstance(value, bool) or not isinstance(value, int) or not ZIP_EPOCH <= value <= time.time():
            raise self.err(("site", "source_date_epoch"), f"{redact(str(value))[:40]!r} is not a time for every file: "
                           f"give whole seconds since 1970, from {ZIP_EPOCH} (1980-01-01, the earliest a ZIP entry "
                           "holds) to now", hint="e.g. the time of the spec's first release: date -d 2026-01-01 +%s")
        return value

    def engine(self, value: Any) -> str | None:
        if value is None:
            return None
        if value not in ENGINES:
            near = difflib.get_close_matches(str(value).lower(), ENGINES, n=1, cutoff=0.5)
            raise self.err(("site", "engine"), f"{redact(str(value))[:40]!r} is not an engine imgbuild drives"
                           + (f" (did you mean {near[0]!r}?)" if near else ""),
                           hint="docker (BuildKit) or podman (Buildah; no daemon, rootless where the host allows)")
        return value

    def epoch(self, path: tuple, value: Any) -> str | None:
        """A whole number or a short word (2, 2026-12, a date): kept as text, so that 2 and "2" are one epoch."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, str, datetime.date)) or not EPOCH.match(str(value)):
            raise self.err(path, f"{redact(str(value))[:80]!r} is not an epoch: a whole number or a word of "
                                 "letters, digits, '.', '_' and '-' (at most 64)",
                           hint="raise it (e.g. 1 -> 2) to rebuild every layer of every stack on purpose")
        return str(value)

    def driver(self, path: tuple, value: Any) -> str | None:
        """A driver version kept as NVIDIA writes it (580.65.06): as a PEP 440 version it would print as
        580.65.6. Compared as integers by preflight."""
        if value is None:
            return None
        value = self.string(path, value)
        if not DRIVER.match(value):
            if VERSION_RANGE.search(value):
                raise self.err(path, not_exact(value, "an NVIDIA driver version, e.g. 580.65.06"),
                               hint="the floor is the oldest driver allowed: write that driver's version")
            raise self.err(path, f"{value!r} is not an NVIDIA driver version (e.g. 580.65.06)")
        return value

    def base(self, name: str, raw: Any) -> Base:
        path = ("bases", name)
        raw = self.mapping(path, raw, BASE_KEYS)
        image = self.string(path + ("image",), self.required(path, raw, "image"))
        if "@" in image or not IMAGE_REF.match(image):
            raise self.err(path + ("image",), f"{redact(image)!r} is not an image reference (name:tag; put the "
                           "digest under 'digest')",
                           hint="[REGISTRY/]PATH[:TAG]: path components of lower case letters and digits joined "
                                "by . _ or -")
        digest = raw.get("digest")
        if digest is not None and (not isinstance(digest, str) or not DIGEST.match(digest)):
            raise self.err(path + ("digest",), f"{digest!r} is not a digest (sha256: and 64 hex digits)")
        family = self.required(path, raw, "family")
        if family not in FAMILIES:
            raise self.err(path + ("family",), f"{family!r} is not a base family", hint="allowed: " + ", ".join(FAMILIES))
        provides = {}
        # A base may declare any version imgbuild knows (the platform's, and every kind's) and its OS.
        allowed = set(versions.fields(self.kinds.values())) | {"os"}
        for key, value in self.mapping(path + ("provides",), raw.get("provides", {}), allowed).items():
            try:
                provides[key] = text(value) if key == "os" else version(value)
            except ParamError as exc:
                raise self.err(path + ("provides", key), exc.reason, exc.hint) from None
        self.free_text(path + ("description",), raw.get("description"))
        return Base(name=name, image=image, digest=digest, family=family,
                    provides=tuple(sorted(provides.items())),
                    source=self.free_text(path + ("source",), raw.get("source")))

    def layer(self, section: str, name: str, raw: Any, defined: dict) -> LayerDef:
        """One entry of layers, projects or runtimes. Its name, its description and each parameter are
        checked on their own (refusals recorded, then Skipped); its keys, its kind and its params mapping,
        through which the rest is read, are refused at once."""
        path = (section, name)
        read = self.attempt(self.name, path, name)[0]
        if name in defined:   # one of the two is a mistake: this one is not read further
            raise self.err(path, f"name {name!r} is already used under {defined[name].section!r}; "
                           "layers, projects and runtimes share one namespace")
        raw = self.mapping(path, raw, LAYER_KEYS)
        read &= self.attempt(self.free_text, path + ("description",), raw.get("description"))[0]
        kind_name = self.required(path, raw, "kind")
        if not isinstance(kind_name, str) or kind_name not in self.kinds:
            raise self.err(path + ("kind",), f"unknown layer kind {kind_name!r}" + did_you_mean(kind_name, self.kinds),
                           hint="kinds (folders under layers/): " + ", ".join(sorted(self.kinds)))
        kind = self.kinds[kind_name]
        if kind.role not in SECTIONS[section]:
            raise self.err(path + ("kind",), f"kind {kind_name!r} has role {kind.role!r} and cannot be "
                           f"declared under {section!r}",
                           hint={"base": "layers", "layer": "layers", "project": "projects",
                                 "runtime": "runtimes"}[kind.role] + " is where it belongs")
        given = self.mapping(path + ("params",), raw.get("params", {}) or {})
        unknown = [key for key in given if key not in kind.params]
        for key in unknown:
            self.refused.append(self.err(path + ("params", key), f"unknown parameter {key!r} for kind {kind_name!r}"
                                         + did_you_mean(key, kind.params),
                                         hint="allowed: " + ", ".join(sorted(kind.params))))
        read &= not unknown
        params = {}
        for pname, pspec in kind.params.items():
            if pname in given and given[pname] is not None:
                converted, params[pname] = self.attempt(self.param, path + ("params", pname), pspec, given[pname])
                read &= converted
            elif pspec.required:
                read = False
                if not unknown:   # else an unknown one may be this one misspelt, and is all that is said
                    self.refused.append(self.err(path + ("params",), f"missing required parameter {pname!r} of "
                                                 f"kind {kind_name!r}" + (f" ({pspec.doc})" if pspec.doc else "")))
            else:
                params[pname] = pspec.default
        if not read:
            raise Skipped
        return LayerDef(name=name, section=section, kind=kind, params=tuple(sorted(params.items())),
                        line=self.doc.line(path))

    def param(self, path: tuple, pspec: Any, value: Any) -> Any:
        try:
            return pspec.convert(value)
        except ParamError as exc:
            first = self.err(path + exc.path, exc.reason, exc.hint)
            more = self.more_items(path, pspec, value, exc) if isinstance(value, list) else []
            if not more:
                raise first from None
        self.refused.extend([first, *more])
        raise Skipped

    def more_items(self, path: tuple, pspec: Any, value: list, exc: ParamError) -> list:
        """Every other bad item of a list parameter, not only the first: the list converted again without each
        item refused, until it converts or a refusal names no item (one the removals may have caused)."""
        index = list(range(len(value)))   # the original index of each item still in the list
        out: list = []
        while len(out) < SpecErrors.LIMIT and exc.path and isinstance(exc.path[0], int) and 0 <= exc.path[0] < len(index):
            del index[exc.path[0]]
            try:
                pspec.convert([value[i] for i in index])
                break
            except ParamError as again:
                if not again.path or not isinstance(again.path[0], int) or not 0 <= again.path[0] < len(index):
                    break
                out.append(self.err(path + (index[again.path[0]],) + again.path[1:], again.reason, again.hint))
                exc = again
        return out

    def stack_raw(self, stacks: dict, name: str) -> dict:
        """Merge a stack with the stacks it extends, refusing cycles with the whole loop named.
        Iterative, and each stack is merged once (memoised): a chain of any length costs linear time,
        where recursion stopped at Python's limit (a RecursionError at about 1000 stacks). A refusal here
        is about the stack last walked to; it and every stack walked on the way there are unread."""
        resolved = self.resolved
        chain: list[tuple[str, dict]] = []   # from `name` up to the first resolved (or root) stack
        on_chain: set = set()
        current: str | None = name
        try:
            while current is not None and current not in resolved:
                if current in self.unread:
                    raise Skipped
                path = ("stacks", current)
                raw = self.known(path, stacks[current], STACK_KEYS)
                chain.append((current, raw))
                on_chain.add(current)
                parent = raw.get("extends")
                if parent is None:
                    break
                if not isinstance(parent, str) or parent not in stacks:
                    if isinstance(parent, str) and "stacks" in self.incomplete:
                        raise Skipped   # it may name the stack whose name is refused
                    raise self.err(path + ("extends",), f"unknown stack {parent!r}",
                                   hint="stacks: " + ", ".join(sorted(stacks)))
                if parent in on_chain:
                    loop = " -> ".join([n for n, _ in chain] + [parent])
                    raise self.err(path + ("extends",), f"stacks extend each other in a cycle: {loop}")
                current = parent
        except (SpecError, Skipped):
            self.unread.update(on_chain | {current})
            raise
        merged = dict(resolved[current]) if current in resolved and current not in on_chain else {}
        loose = ("stacks", current) in self.loose
        for stack_name, raw in reversed(chain):
            loose = loose or ("stacks", stack_name) in self.loose
            if loose:   # it inherits what a stack it extends misspelt
                self.loose.add(("stacks", stack_name))
            merged.update({k: v for k, v in raw.items() if k not in ("extends", "waivers")})
            # Waivers add up along extends (a stack keeps its parent's), each with the stack that wrote it.
            mine = raw.get("waivers", [])
            mine = [(stack_name, i, w) for i, w in enumerate(mine)] if isinstance(mine, list) else [(stack_name, None, mine)]
            merged["waivers"] = list(merged.get("waivers", [])) + mine
            resolved[stack_name] = dict(merged)
        return dict(resolved[name])

    @staticmethod
    def lineage(stacks: dict, name: str, checked: dict) -> list:
        """name and the stacks it extends that are not checked yet, the one extended first (stack_raw has
        read the chain: it ends, without a cycle)."""
        chain = [name]
        while (parent := stacks[chain[-1]].get("extends")) is not None and parent not in checked:
            chain.append(parent)
        return chain[::-1]

    def stack(self, name: str, raw: dict, bases: dict, layers: dict, site: Site) -> Stack:
        """One stack, merged with those it extends. Its parts (base, layers, each GPU, each tag, ...) are
        checked on their own; the chain as a whole (check_chain) only when base, layers and GPUs were read,
        and the site, whose registry ties lock file measurements to bases. Refusals recorded, then Skipped."""
        path = ("stacks", name)
        parts = (("base", lambda: self.ref(path + ("base",), self.required(path, raw, "base"), "bases", bases)),
                 ("chain", lambda: self.chain(path, raw, layers)),
                 ("gpus", lambda: self.gpus(path, raw)),
                 ("tags", lambda: self.tags(path, name, raw)),
                 ("description", lambda: self.free_text(path + ("description",), raw.get("description"))),
                 ("driver_floor", lambda: self.driver(path + ("driver_floor",), raw.get("driver_floor"))),
                 ("waivers", lambda: self.waivers(raw.get("waivers", []))),
                 ("platforms", lambda: self.platforms(path, raw)),
                 ("cpu_baseline", lambda: self.cpu_levels(path + ("cpu_baseline",), raw.get("cpu_baseline"))),
                 ("gpus_per_node", lambda: nodeconf.gpus(self, path + ("gpus_per_node",), raw.get("gpus_per_node"))))
        got = {}   # part -> its value, for each part read
        for key, fn in parts:
            read, value = self.attempt(fn)
            if read:
                got[key] = value
        # The chain as a whole is judged only on a stack read whole: beside an unknown key (a misspelt `gpus`,
        # say) a judgement on what is absent would be a second report of the same mistake.
        if not {"base", "chain", "gpus"} <= set(got) or "site" in self.incomplete or path in self.loose:
            raise Skipped
        stack = Stack(name=name, description=got.get("description", ""), base=got["base"], chain=tuple(got["chain"]),
                      gpus=tuple(got["gpus"]), tags=tuple(got.get("tags", ())), line=self.doc.line(path),
                      driver_floor=got.get("driver_floor") or site.driver_floor, waivers=got.get("waivers", ()),
                      declared_platforms=tuple(got.get("platforms", ())),
                      declared_baseline=tuple(got.get("cpu_baseline") or site.cpu_baseline),
                      baseline_key=(f"stacks.{name}.cpu_baseline" if got.get("cpu_baseline") else "site.cpu_baseline"),
                      gpus_per_node=got.get("gpus_per_node") or site.node_check.gpus_per_node)
        if got.get("cpu_baseline"):
            self.check_baseline(stack, path + ("cpu_baseline",))
        self.check_chain(stack, path)
        self.check_tags(stack, path)
        if len(got) < len(parts):
            raise Skipped
        return stack

    def ref(self, where: tuple, value: Any, section: str, pool: dict) -> Any:
        """What a stack names: a base (pool: bases) or a layer, project or runtime (pool: every LayerDef)."""
        if not isinstance(value, str):
            raise self.err(where, f"expected a name, got {type_name(value)}")
        if value not in pool or (section != "bases" and pool[value].section != section):
            group = "bases" if section == "bases" else "layers"   # layers, projects and runtimes: one namespace
            if section in self.incomplete or value in self.refused_names[group]:
                raise Skipped   # it names an entry refused there (or may: a section refused whole)
            if value in pool:
                raise self.err(where, f"unknown {section[:-1]} {value!r}: it is a {pool[value].section[:-1]}",
                               hint="a stack names " + {"layers": "its layers under layers: (or above:)",
                                                        "projects": "its projects under project:",
                                                        "runtimes": "its runtime under runtime:"}[pool[value].section])
            names = sorted(n for n, d in pool.items() if section == "bases" or d.section == section)
            raise self.err(where, f"unknown {section[:-1]} {value!r}" + did_you_mean(value, names),
                           hint=f"{section}: " + ", ".join(names))
        return pool[value]

    def chain(self, path: tuple, raw: dict, layers: dict) -> list:
        names = raw.get("layers", [])
        if not isinstance(names, list) or not names:
            raise self.err(path + ("layers",), "expected a non-empty list of layer names")
        refs = [(path + ("layers", i), n, "layers") for i, n in enumerate(names)]
        # The runtime env sits beneath the project: projects move most often (a new pin every few
        # days), so a pin change rebuilds only the project layer.
        # A stack may hold several projects (Megatron-LM and a training repository): each is a layer of its
        # own, in the order given, so a new pin of the last rebuilds only that one.
        for key, section in (("runtime", "runtimes"), ("project", "projects")):
            value = raw.get(key)
            if key == "project" and isinstance(value, list):
                if not value:
                    raise self.err(path + (key,), "expected a project name or a non-empty list of them")
                refs.extend((path + (key, i), v, section) for i, v in enumerate(value))
            elif value is not None:
                refs.append((path + (key,), value, section))
        # Layers above the projects: steps a recipe takes after installing its project (a package into the
        # project's virtual environment, an adapter that needs the project). They rebuild with every pin of
        # the project, which is why they are named apart.
        above = raw.get("above", [])
        if not isinstance(above, list):
            raise self.err(path + ("above",), f"expected a list of layer names, got {type_name(above)}")
        refs.extend((path + ("above", i), n, "layers") for i, n in enumerate(above))
        found = [self.attempt(self.ref, where, value, section, layers) for where, value, section in refs]
        if not all(read for read, _ in found):
            raise Skipped
        return [layer for _, layer in found]

    def gpus(self, path: tuple, raw: dict) -> list:
        raw_gpus = raw.get("gpus", [])
        if not isinstance(raw_gpus, list):
            raise self.err(path + ("gpus",), f"expected a list of GPU names, got {type_name(raw_gpus)}")
        found = [self.attempt(self.gpu, path + ("gpus", i), gname) for i, gname in enumerate(raw_gpus)]
        if not all(read for read, _ in found):
            raise Skipped
        return [gpu for _, gpu in found]

    def gpu(self, where: tuple, gname: Any) -> Any:
        if not isinstance(gname, str) or gname not in catalog.gpus():
            raise self.err(where, f"unknown GPU {gname!r}" + did_you_mean(gname, catalog.gpus()),
                           hint="catalog GPUs: " + ", ".join(catalog.gpus()))
        return catalog.gpus()[gname]

    def check_baseline(self, stack: Stack, where: tuple) -> None:
        """A stack's own levels name only platforms it is built for (the site's may name more)."""
        for name in stack.declared_baseline:
            platform = cpubaseline.platform_of(name)
            if platform not in stack.platforms:
                raise self.err(where, f"{name!r} is a {platform} level, but the stack is built for "
                                      f"{', '.join(stack.platforms)} only",
                               hint="name a level of " + " or ".join(stack.platforms) + ", or add the platform "
                                    "to platforms:")

    def platforms(self, path: tuple, raw: dict) -> list:
        """`platforms: [linux/amd64, linux/arm64]`: each once, each one imgbuild builds."""
        given = raw.get("platforms")
        if given is None:
            return []
        where = path + ("platforms",)
        if not isinstance(given, list) or not given:
            raise self.err(where, f"expected a non-empty list of platforms, got {type_name(given)}",
                           hint="e.g. platforms: [linux/amd64, linux/arm64]")
        for i, item in enumerate(given):
            if item not in platforms.PLATFORMS:
                near = {"amd64": platforms.AMD64, "x86_64": platforms.AMD64, "arm64": platforms.ARM64,
                        "aarch64": platforms.ARM64}.get(str(item).lower().rsplit("/", 1)[-1])
                raise self.err(where + (i,), f"unknown platform {str(item)[:40]!r}"
                               + (f" (did you mean {near!r}?)" if near else ""),
                               hint="platforms imgbuild builds: " + ", ".join(platforms.PLATFORMS))
            if item in given[:i]:
                raise self.err(where + (i,), f"{item} is listed twice")
        return sorted(given, key=platforms.PLATFORMS.index)

    def tags(self, path: tuple, name: str, raw: dict) -> list:
        given = raw.get("tags", list(DEFAULT_TAGS))
        if not isinstance(given, list) or not given:
            raise self.err(path + ("tags",), "expected a non-empty list of tag templates")
        found = [self.attempt(self.tag, path + ("tags", i), name, tag) for i, tag in enumerate(given)]
        if not all(read for read, _ in found):
            raise Skipped
        return [tag for _, tag in found]

    def tag(self, where: tuple, name: str, tag: Any) -> str:
        tag = self.string(where, tag)
        tag_fields = versions.tag_fields(self.kinds.values())
        for fieldname, fmt in tags.fields(tag):
            if fieldname not in tag_fields:
                raise self.err(where, f"unknown tag field {{{fieldname}}}" + did_you_mean(fieldname, tag_fields),
                               hint="allowed: " + ", ".join("{%s}" % f for f in tag_fields) + "; the date takes a "
                                    "format: {date:%Y%m%d}")
            problem = tags.format_problem(fieldname, fmt)
            if problem:
                raise self.err(where, problem, hint="e.g. {date:%Y%m%d} or {date:%Y.%m}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]*", tags.FIELD.sub("", tag)):
            raise self.err(where, f"{tag!r} has characters a Docker tag cannot hold")
        # A stack name refused on its own stands in as a valid one here: its error is said once, not per tag.
        shown = name if NAME.match(name) else "stack"
        example, _ = tags.expand(tag, {"stack": shown, "project_commit": "0" * tags.SHORT_COMMIT,
                                       **{f: "1.0.0" for f in tag_fields}}, datetime.date(2025, 1, 31))
        if not TAG.match(example):
            raise self.err(where, f"{tag!r} can never be a valid tag (it expands to e.g. "
                           f"{example[:40] + '...' if len(example) > 40 else example!r}): an OCI tag starts with "
                           "a letter, digit or _ and has at most 128 characters",
                           hint="e.g. {stack}-{date}")
        return tag

    def check_tags(self, stack: Stack, path: tuple) -> None:
        """{project_commit} names one project's commit: a stack with none, or with several, cannot fill it."""
        if tags.project_commit(stack) is not None:
            return
        projects = [d.name for d in stack.chain if d.section == "projects"]
        for i, tag in enumerate(stack.tags):
            if "project_commit" in [f for f, _ in tags.fields(tag)]:
                raise self.err(path + ("tags", i), "{project_commit} needs one project with a git source; "
                               + (f"stack {stack.name!r} has {len(projects)}: " + ", ".join(projects) if projects
                                  else f"stack {stack.name!r} has none"),
                               hint="a second project is a second stack (extends:); or tag by {date}")

    def waivers(self, items: list) -> tuple:
        """[{rule: IB041, reason: "..."}] per stack: a known rule id and a reason (said in every report)."""
        out = {}
        for owner, i, raw in items:
            path = ("stacks", owner, "waivers") + ((i,) if i is not None else ())
            if i is None:
                raise self.err(path, f"expected a list of waivers, got {type_name(raw)}",
                               hint='e.g. waivers: [{rule: IB041, reason: "..."}]')
            raw = self.mapping(path, raw, WAIVER_KEYS, what="a mapping with rule and reason")
            rule = self.string(path + ("rule",), self.required(path, raw, "rule"))
            if not RULE_ID.match(rule):
                # Whether the id is one a finding can carry is checked by the review (rules.review), which
                # knows the rules; loading stays below them.
                raise self.err(path + ("rule",), f"{rule!r} is not a rule id (IB and three digits)")
            reason = self.string(path + ("reason",), self.required(path, raw, "reason")).strip()
            if not reason:
                raise self.err(path + ("reason",), "say why the finding is accepted (a non-empty reason)")
            out[rule] = Waiver(rule, reason, path)   # a stack's own waiver of a rule replaces its parent's
        return tuple(out.values())

    def check_chain(self, stack: Stack, path: tuple) -> None:
        first = stack.chain[0]
        if first.kind.role != "base":
            raise self.err(path + ("layers", 0), f"the first layer must adopt the base image (a layer of a "
                           f"kind with role 'base'); {first.name!r} is of kind {first.kind.name!r}")
        if stack.base.family not in first.kind.base_family:
            raise self.err(path + ("layers", 0), f"layer {first.name!r} adopts {' or '.join(first.kind.base_family)} bases "
                           f"but base {stack.base.name!r} is a {stack.base.family!r} image")
        provided = {k for k, _ in stack.base.provides} | ({"cuda"} if stack.base.has_cuda else set())
        seen = set()
        for i, layer in enumerate(stack.chain):
            if layer.name in seen:
                raise self.err(path + ("layers",), f"layer {layer.name!r} appears twice in the stack")
            seen.add(layer.name)
            if i and layer.kind.role == "base":
                raise self.err(path + ("layers", i), f"{layer.name!r} adopts a base image and can only be first")
            missing = [n for n in layer.kind.needs if n not in provided]
            if missing:
                raise self.err(path + ("layers",), f"layer {layer.name!r} (kind {layer.kind.name}) needs "
                               f"{', '.join(missing)}, which no layer beneath it nor the base provides")
            provided.update(layer.kind.provides)
            if stack.compiles_cuda(layer) and not stack.gpus:
                raise self.err(path + ("gpus",), f"layer {layer.name!r} compiles CUDA code but the stack names "
                               "no target GPU, so TORCH_CUDA_ARCH_LIST would be guessed from the build host",
                               hint="add gpus: [H100] (or the site's GPUs)")


def base_cuda(base: Base, site: Site, lock: Any) -> tuple | None:
    """(value, origin) of a base's CUDA: measured (a lock entry of this very image) > declared > catalog
    (a known NGC image). A measured None (no toolkit in the image) is an answer too; None: unknown."""
    entry = lock.bases.get(base.name) if lock is not None else None
    if entry is not None and base.locked_by(entry, site) and "cuda" in entry.facts:
        value = entry.facts["cuda"]
        return (_as_version(value), "measured")
    if base.fact("cuda") is not None:
        return (base.fact("cuda"), "declared")
    rel = catalog.base_record(base.family, base.image)
    known = rel.fact("cuda") if rel is not None else None
    if known is not None:
        return (_as_version(known.value), "catalog")
    # Every NGC framework image and every CUDA image carries a CUDA toolkit: one the catalog lacks has CUDA
    # of an unknown version, never none (taken for none, DeepSpeed was rendered without
    # TORCH_CUDA_ARCH_LIST and imgbuild refused its own Dockerfile, IB104).
    return (UNKNOWN_CUDA, "family") if base.family in NGC_FAMILIES + ("cuda",) else None


def _as_version(value: Any) -> Any:
    try:
        return None if value is None else Version(str(value))
    except InvalidVersion:
        return str(value)   # kept as measured; still a CUDA that is there


UNREAD = object()


def load_spec(file: str | Path, root: str | Path | None = None, kinds: Any = None,
              intents: Intents | None = None, lock: Any = UNREAD) -> Spec:
    """Load stacks.yaml and its layer kinds: the shipped ones (builder.load.kindpath.shipped_root), plus the
    site's. root is the site folder (default: the stacks file's): its layers/ adds kinds, its
    Dockerfile.j2 (if any) replaces the skeleton. kinds: more kind folders, highest priority first
    (default $IMGBUILD_KINDS). A site kind with the name of a shipped one overrides it.

    Every independent refusal of the file is raised at once: the one SpecError, or SpecErrors in the order
    of the file. A file that cannot be read as YAML, or a kind folder, is refused at its first mistake.

    intents: how floating values are read (builder.load.intent); by default they are accepted where a lock
    file stands beside the stacks file, and git refs take the commits it records.

    The lock file is read here, once, and kept as Spec.lock; lock: the one to take instead (`imgbuild lock`
    reading stacks.yaml again in one run)."""
    file = Path(file)
    if lock is UNREAD:
        lock = load_lock(file)
    if intents is None:
        intents = Intents(accept=lock is not None, lock_file=lock_path(file).name, pinned_by_lock=True)
    if intents.pinned_by_lock:
        for name, value in pins(lock).items():
            setattr(intents, name, value)
    with reading(intents):
        return _load(file, root, kinds, lock)


def _load(file: Path, root: str | Path | None, kinds: Any, lock: Any) -> Spec:
    from builder.load.kindpath import find_kinds
    site_dir = Path(root) if root is not None else file.resolve().parent
    kinds = find_kinds(site_dir, None if kinds is None else [Path(k) for k in kinds], load_kinds)
    loader = _Loader(load_file(file), kinds)
    try:
        spec = loader.spec(file, kinds.root, lock)
    except SpecError as exc:   # what everything after it depends on: reading stops here
        loader.refused.append(exc)
    if len(loader.refused) == 1:
        raise loader.refused[0]
    if loader.refused:
        raise SpecErrors(sorted(loader.refused, key=lambda e: e.line or 0))
    return spec


__all__ = ["Spec", "Stack", "Base", "LayerDef", "Site", "CiSettings", "load_spec", "Version"]
