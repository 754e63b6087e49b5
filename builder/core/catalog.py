"""The compatibility catalog shipped with imgbuild (builder/core/data/catalog.yaml), read once into typed records.

Every record keeps its source and whether it was verified. A field the catalog does not hold is
unknown: lookups return None and preflight reports the rule it blocks as unknown, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from builder.core.yamlsrc import load_file

CATALOG_FILE = Path(__file__).parent / "data" / "catalog.yaml"
# An NGC framework image, wherever it is mirrored: .../pytorch:25.09-py3, .../jax:25.10-py3
NGC_TAG = re.compile(r"(?:^|/)(pytorch|jax):(\d\d\.\d\d)-py3\Z")
NGC_FRAMEWORK = {"ngc-pytorch": "pytorch", "ngc-jax": "jax"}
FRAMEWORK_NAME = {"pytorch": "PyTorch", "jax": "JAX"}
# NVIDIA's CUDA images name their toolkit in the tag: .../cuda:12.8.1-cudnn-runtime-ubuntu24.04
CUDA_TAG = re.compile(r"(?:^|/)cuda:(\d+\.\d+\.\d+)-(?:cudnn\d*-)?(?:base|runtime|devel)-[a-z]+\d")


@dataclass(frozen=True)
class Known:
    """One fact from the catalog and where it comes from."""

    value: Any
    source: str
    verified: bool


@dataclass(frozen=True)
class Gpu:
    name: str
    cc: str
    min_cuda: Version
    max_cuda_major: int | None
    source: str
    verified: bool
    datacenter: bool = True   # forward compatibility works on data-center GPUs only
    unverified: frozenset = frozenset()

    @property
    def sm(self) -> str:
        return self.cc.replace(".", "")

    def known(self, field: str) -> Known:
        return Known(getattr(self, field), self.source, self.verified and field not in self.unverified)


@dataclass(frozen=True)
class NgcRelease:
    release: str
    facts: tuple              # sorted (name, str) pairs: torch, cuda, python, cudnn, nccl, numpy, ...
    min_driver: str | None    # as NVIDIA's notes state it
    fwd_compat: tuple         # minimum driver on each forward-compatible branch, e.g. ("470.57", "525.85")
    min_cc: str | None
    source: str
    unverified: frozenset
    framework: str = "pytorch"   # pytorch | jax: nvcr.io/nvidia/<framework>:<release>-py3

    @property
    def label(self) -> str:
        return f"NGC {FRAMEWORK_NAME[self.framework]} {self.release}"

    def fact(self, name: str) -> Known | None:
        value = dict(self.facts).get(name)
        return None if value is None else Known(value, f"{self.label}: {self.source}", name not in self.unverified)


@dataclass(frozen=True)
class SiteBase:
    """A base image a site catalog describes (`bases: {IMAGE: {python: ..., source: ...}}`)."""

    image: str
    facts: tuple
    source: str
    unverified: frozenset = frozenset()
    release = None   # no NGC month

    def fact(self, name: str) -> Known | None:
        value = dict(self.facts).get(name)
        return None if value is None else Known(value, self.source, name not in self.unverified)


@dataclass(frozen=True)
class CudaImage:
    """What the tag of one of NVIDIA's CUDA images says: its toolkit release."""

    cuda: str

    def fact(self, name: str) -> Known | None:
        if name != "cuda":
            return None
        return Known(self.cuda, "the image's tag (NVIDIA's CUDA images are tagged by their toolkit release: "
                                "cuda:12.8.1-cudnn-runtime-ubuntu24.04)", True)


@dataclass(frozen=True)
class Incompat:
    """A known DeepSpeed incompatibility: releases `deepspeed` break when every `when` condition holds."""

    rule: str
    deepspeed: SpecifierSet
    when: tuple               # (condition, specifier or op name) pairs, in the catalog's order
    symptom: str
    fixed: str | None
    source: str
    verified: bool
    only_known: bool = False  # an unknown fact cannot trigger it (pip resolves it unless a pin prevents that)


@dataclass(frozen=True)
class MegatronRelease:
    version: Version
    commit: str
    python: SpecifierSet | None
    torch: SpecifierSet | None
    numpy: SpecifierSet | None
    te_dev: SpecifierSet | None
    source: str
    verified: bool
    tag_object: str | None = None   # the annotated tag's own object, where core_vX.Y.Z is annotated: never a pin


@dataclass(frozen=True)
class TeRequirement:
    versions: SpecifierSet
    cuda: Version | None
    cudnn: Version | None
    torch: Version | None
    source: str
    verified: bool


def spec_set(text: str | None) -> SpecifierSet | None:
    # NGC versions are pre-releases (2.9.0a0+sha, TE 2.9.0a0 ranges): let specifiers consider them.
    return None if text is None else SpecifierSet(text, prereleases=True)


# Every reader of the catalog whose answer is cached (here and in builder.core.cpubaseline): cleared when the
# site catalog in use changes.
_CACHED: list = []


def cached(fn):
    """functools.cache, cleared with the rest of the catalog's answers when another site catalog is used."""
    wrapped = cache(fn)
    _CACHED.append(wrapped)
    return wrapped


# The site catalog in use: site.catalog of the stacks file read last (None: the shipped catalog alone).
_SITE: dict = {"ident": None, "file": None, "data": None}


def use(site_file: Path | None) -> None:
    """Judge by the shipped catalog and the site's file (builder.core.sitecatalog), or by the shipped one alone
    (None). builder.load.spec.load_spec calls it for every stacks file it reads; the site file is read and
    validated here (again where it changed), and a malformed one refused (SpecError) with file, line and key."""
    site = None if site_file is None else Path(site_file).resolve()
    stat = site.stat() if site is not None else None
    ident = None if site is None else (site, stat.st_mtime_ns, stat.st_size)
    if ident == _SITE["ident"]:
        return
    from builder.core import sitecatalog
    data = sitecatalog.read(site, _shipped()) if site is not None else None
    _SITE.update(ident=ident, file=site, data=data)
    for fn in _CACHED:
        fn.cache_clear()


def site_file() -> Path | None:
    """The site catalog in use, or None."""
    return _SITE["file"]


@cache
def _shipped() -> dict:
    # Through yamlsrc: a release or GPU written twice in this hand-kept file is refused, not overwritten.
    return load_file(CATALOG_FILE).data


@cached
def _data() -> dict:
    if _SITE["data"] is None:
        return _shipped()
    from builder.core import sitecatalog
    return sitecatalog.merged(_shipped(), _SITE["data"])


def section(name: str) -> dict:
    """One top-level section of the catalog as written (cpu_levels, gpu_host_cpus, nccl_busbw): for the
    modules that type their own records (builder.core.cpubaseline, builder.nodecheck.busbw)."""
    return _data().get(name) or {}


@cached
def gpus() -> dict[str, Gpu]:
    return {name: Gpu(name=name, cc=rec["cc"], min_cuda=Version(rec["min_cuda"]),
                      max_cuda_major=rec.get("max_cuda_major"), source=rec["source"],
                      verified=bool(rec.get("verified")), datacenter=rec.get("datacenter", True),
                      unverified=frozenset(rec.get("unverified", ())))
            for name, rec in _data()["gpus"].items()}


def gpu_host(name: str) -> Known:
    """The CPU architecture of the nodes a GPU sits in: aarch64 for a Grace superchip's, else x86_64."""
    rec = _data()["gpu_hosts"]
    return Known("aarch64" if name in rec["aarch64"] else "x86_64", rec["source"], bool(rec["verified"]))


@cached
def gpu_generations() -> dict[str, tuple]:
    """{generation: compute capabilities}: volta, turing, ampere, ada, hopper, blackwell."""
    return {name: tuple(ccs) for name, ccs in _data()["gpu_generations"].items() if name != "source"}


def gpu_generation(gpu: Gpu) -> str | None:
    return next((name for name, ccs in gpu_generations().items() if gpu.cc in ccs), None)


def ngc_arm64(release: str) -> Known | None:
    """Whether NGC PyTorch `release` publishes a linux/arm64 (SBSA) image in its plain tag, with the source
    that shows it; None where no source says (not that it has none)."""
    rec = _data()["ngc_pytorch_arm64"]["months"].get(release)
    return Known(True, rec["source"], bool(rec["verified"])) if rec else None


@cached
def ngc_releases(framework: str = "pytorch") -> dict[str, NgcRelease]:
    out = {}
    for release, rec in _data()[f"ngc_{framework}"]["releases"].items():
        facts = {k: str(v) for k, v in rec.items()
                 if k not in ("min_driver", "fwd_compat", "min_cc", "source", "unverified")}
        out[release] = NgcRelease(release=release, facts=tuple(sorted(facts.items())),
                                  min_driver=rec.get("min_driver"), fwd_compat=tuple(rec.get("fwd_compat", ())),
                                  min_cc=rec.get("min_cc"), source=rec["source"],
                                  unverified=frozenset(rec.get("unverified", ())), framework=framework)
    return out


def ngc_release(image: str) -> NgcRelease | None:
    """The catalog's record for an NGC PyTorch or JAX image reference, or None (not NGC, or a month it lacks)."""
    m = NGC_TAG.search(image)
    return ngc_releases(m.group(1)).get(m.group(2)) if m else None


def base_record(family: str, image: str) -> NgcRelease | CudaImage | SiteBase | None:
    """What the catalog knows of a base image of a family: a site catalog's record of that image (`bases:`,
    an image built in house), an NGC month's record (of that family's framework), or a CUDA image's toolkit
    from its tag; None where it knows nothing."""
    rec = (_data().get("bases") or {}).get(image)
    if rec is not None:
        return SiteBase(image=image, facts=tuple(sorted((k, str(v)) for k, v in rec.items()
                                                        if k not in ("source", "verified", "unverified"))),
                        source=rec["source"], unverified=frozenset(rec.get("unverified", ())))
    if family in NGC_FRAMEWORK:
        rel = ngc_release(image)
        return rel if rel is not None and rel.framework == NGC_FRAMEWORK[family] else None
    if family == "cuda":
        m = CUDA_TAG.search(image)
        return CudaImage(m.group(1)) if m else None
    return None


def ngc_apex(release: str) -> Known | None:
    rec = _data()["ngc_pytorch"]["apex"]
    if Version(release) > Version(rec["through"]):
        return None
    return Known("present", rec["source"], bool(rec["verified"]))


def driver_tuple(text: str) -> tuple:
    return tuple(int(p) for p in str(text).split("."))


def toolkit_driver(cuda: Version) -> Known | None:
    """The minimum driver of the newest toolkit row at or below this CUDA (same major.minor), as
    Known(("12.8.1", "570.124.06")). Without an update number the GA row is used, the lower bound."""
    rec = _data()["cuda_driver"]["toolkit"]
    rows = [(Version(v), d) for v, d in rec["rows"].items()]
    patch = Version(".".join(map(str, cuda.release[:3])))
    same = [(v, d) for v, d in rows if v.release[:2] == cuda.release[:2] and v <= patch]
    if not same:
        return None
    row, driver = max(same)
    return Known((str(row), driver), rec["source"], bool(rec["verified"]))


def minor_version_floor(major: int) -> Known | None:
    rec = _data()["cuda_driver"]["minor_version_compat"]
    floor = rec["floors"].get(str(major))
    return None if floor is None else Known(floor, rec["source"], bool(rec["verified"]))


def forward_compat_source() -> str:
    return _data()["cuda_driver"]["forward_compat"]["source"]


def _ranged(rec: dict, version: Version, field: str) -> Known | None:
    for r in rec["ranges"]:
        if version in spec_set(r["versions"]):
            return Known(r[field], rec["source"], bool(rec["verified"]))
    return None


def ds_max_python(version: Version) -> Known | None:
    return _ranged(_data()["deepspeed"]["python_classifiers"], version, "max_python")


def ds_mismatch_ok(version: Version) -> Known | None:
    """The CUDA versions between which DeepSpeed's op builder tolerates nvcc != torch's CUDA."""
    return _ranged(_data()["deepspeed"]["cuda_minor_mismatch_ok"], version, "cuda")


def ds_requires(version: Version) -> list[tuple[str, SpecifierSet, Known]]:
    """(package, specifier, where from) that `pip install deepspeed==version` asks pip for."""
    return [(r["package"], spec_set(r["spec"]), Known(r["spec"], r["source"], bool(r["verified"])))
            for r in _data()["deepspeed"]["requires"] if version in spec_set(r["versions"])]


@cached
def ds_incompatibilities() -> tuple[Incompat, ...]:
    return tuple(Incompat(rule=r["rule"], deepspeed=spec_set(r["deepspeed"]),
                          when=tuple((k, str(v)) for k, v in r["when"].items()), symptom=r["symptom"],
                          fixed=r.get("fixed"), source=r["source"], verified=bool(r["verified"]),
                          only_known=bool(r.get("only_known")))
                 for r in _data()["deepspeed"]["incompatibilities"])


def ds_arch_variant() -> dict:
    return dict(_data()["deepspeed"]["arch_variant"])


def prebuilt_fetchers() -> Known:
    """{distribution: the variable that makes its setup.py compile instead of downloading a prebuilt wheel}."""
    rec = _data()["prebuilt_fetchers"]
    return Known(dict(rec["packages"]), rec["source"], bool(rec["verified"]))


def newest_known(field: str) -> Known | None:
    """The newest release the catalog knows of a version field (deepspeed, megatron, ...), or None."""
    rec = _data()["newest_known"].get(field)
    return Known(rec["version"], rec["source"], bool(rec["verified"])) if rec else None


def releases(field: str) -> Known | None:
    """Every published release of a version field (deepspeed, megatron, transformer_engine, flash_attn) as
    Versions, oldest first, with where the list was read; None where the catalog keeps no list."""
    rec = _data().get("releases", {}).get(field)
    if not rec:
        return None
    return Known(tuple(sorted(Version(v) for v in rec["versions"])), rec["source"], bool(rec["verified"]))


def ds_host_ops() -> Known:
    """The DeepSpeed ops built from host C++ alone (no CUDA, no arch list), as op names."""
    rec = _data()["deepspeed"]["host_ops"]
    return Known(tuple(rec["ops"]), rec["source"], bool(rec["verified"]))


def ds_build_var(op: str) -> str:
    """The DS_BUILD_* variable of an op, as the deepspeed kind's fragment writes it."""
    return "DS_BUILD_" + {"async_io": "AIO", "deepspeed_shm_comm": "SHM_COMM"}.get(op, op.upper())


def ds_accelerator() -> dict:
    return dict(_data()["deepspeed"]["accelerator"])


@cached
def megatron_releases() -> tuple[MegatronRelease, ...]:
    rec = _data()["megatron_core"]
    return tuple(MegatronRelease(version=Version(r["version"]), commit=r["commit"], python=spec_set(r.get("python")),
                                 torch=spec_set(r.get("torch")), numpy=spec_set(r.get("numpy")),
                                 te_dev=spec_set(r.get("te_dev")),
                                 source=r.get("source") or f"{rec['source']} (core_v{r['version']})",
                                 verified=bool(r.get("verified", rec["verified"])),
                                 tag_object=r.get("tag_object"))
                 for r in rec["releases"])


def megatron_release(version: Version | None = None, commit: str | None = None,
                     tag_object: str | None = None) -> MegatronRelease | None:
    for rel in megatron_releases():
        if (version is not None and rel.version == version) or (commit is not None and rel.commit == commit) \
                or (tag_object is not None and rel.tag_object == tag_object):
            return rel
    return None


def te_requirements(version: Version) -> list[TeRequirement]:
    out = []
    for r in _data()["transformer_engine"]["requirements"]:
        if version in spec_set(r["versions"]):
            out.append(TeRequirement(versions=spec_set(r["versions"]),
                                     **{k: Version(r[k]) if k in r else None for k in ("cuda", "cudnn", "torch")},
                                     source=r["source"], verified=bool(r["verified"])))
    return out


def te_fp8() -> Known:
    rec = _data()["transformer_engine"]["fp8"]
    return Known(rec["min_cc"], rec["source"], bool(rec["verified"]))


def torch_replacers() -> Known:
    rec = _data()["torch_replacement"]
    return Known(tuple(rec["always"]), rec["source"], bool(rec["verified"]))


def torch_pins() -> dict[str, tuple[dict[str, str], str]]:
    """Packages whose releases require one torch exactly (Requires-Dist: torch==X in their published
    metadata): name -> ({release: torch version}, source). Installed over a base's torch, pip replaces it."""
    rec = _data().get("torch_pins") or {}
    return {name: ({str(k): str(v) for k, v in entry["releases"].items()}, entry["source"])
            for name, entry in (rec.get("packages") or {}).items()}


def base_env(image: str) -> dict[str, str | None]:
    """The environment a base image sets itself, where the catalog knows the image (nvidia/cuda by its tag,
    NGC PyTorch and JAX by month): NAME -> value, or None where the image sets it to a value not recorded.
    A template value names what the image reference says ({cuda}: the CUDA of the tag) or the NGC month's
    record ({ngc.cuda}, {ngc.python})."""
    image = image.split("@", 1)[0]
    out: dict[str, str | None] = {}
    for entry in _data().get("base_env") or ():
        m = re.search(entry["images"], image)
        if not m:
            continue
        values = {k: v for k, v in m.groupdict().items() if v}
        ngc = ngc_release(image)
        if ngc is not None:
            values.update({f"ngc.{k}": v for k, v in ngc.facts})
        for name, template in (entry.get("env") or {}).items():
            text = None if template is None else str(template)
            names = re.findall(r"\{([a-z_.]+)\}", text or "")
            out[name] = None if text is None or any(n not in values for n in names) else \
                re.sub(r"\{([a-z_.]+)\}", lambda t: values[t.group(1)], text)
    return out


def torch_nccl_source() -> str:
    return _data()["torch_nccl"]["source"]


def torch_nccl(torch: Version) -> Known | None:
    """The NCCL that torch's Linux CUDA wheels of this major.minor pin (nvidia-nccl-cuXX)."""
    rec = _data()["torch_nccl"]
    minor = ".".join(map(str, torch.release[:2]))
    for pin in rec["pins"]:
        if pin["torch"] == minor:
            return Known(pin["nccl"], rec["source"], bool(pin["verified"]))
    return None


# -- JAX ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JaxPlugin:
    """What JAX's CUDA plugin of one major requires, for a range of JAX releases."""

    versions: SpecifierSet
    cuda: int                   # the CUDA major it is built for
    cudnn: Version              # the oldest cuDNN it accepts
    cudnn_below: Version | None  # cuDNN it does not accept from (8.9-era jaxlibs: < 9.0)
    cuda_runtime: Version
    nccl: Version
    source: str
    verified: bool


@cached
def jax_plugins() -> tuple[JaxPlugin, ...]:
    rec = _data()["jax"]["plugins"]
    return tuple(JaxPlugin(versions=spec_set(r["versions"]), cuda=int(r["cuda"]), cudnn=Version(r["cudnn"]),
                           cudnn_below=Version(r["cudnn_below"]) if r.get("cudnn_below") else None,
                           cuda_runtime=Version(r["cuda_runtime"]), nccl=Version(r["nccl"]),
                           source=rec["source"], verified=bool(rec["verified"]))
                 for r in rec["ranges"])


def jax_plugin(jax: Version, major: int) -> JaxPlugin | None:
    """The plugin of CUDA `major` for this JAX release, or None where PyPI has none."""
    return next((p for p in jax_plugins() if p.cuda == major and jax in p.versions), None)


def jax_plugin_majors(jax: Version) -> list[int]:
    return sorted({p.cuda for p in jax_plugins() if jax in p.versions})


def jax_plugins_source() -> Known:
    rec = _data()["jax"]["plugins"]
    return Known(None, rec["source"], bool(rec["verified"]))


def jax_extra_removed(extra: str) -> Known | None:
    """The JAX release that removed a pip extra (cuda12-pip: 0.6.0), with its source; None if none did."""
    rec = _data()["jax"]["extras"]
    since = rec["removed"].get(extra.lower().replace("_", "-"))
    return None if since is None else Known(since, rec["source"], bool(rec["verified"]))


def jax_cuda_default() -> Known:
    """The CUDA major of plain `jax[cuda]` (12 in every release read), with its source."""
    rec = _data()["jax"]["extras"]
    return Known(rec["cuda_default"], rec["source"], bool(rec["verified"]))


def jax_driver(jax: Version | None, major: int) -> Known | None:
    """The driver JAX's installation guide asks for with the CUDA `major` plugin of this release."""
    rec = _data()["jax"]["driver"]
    for row in rec["rows"]:
        if int(row["cuda"]) == major and (jax is None or jax in spec_set(row["versions"])):
            return Known(row["driver"], rec["source"], bool(rec["verified"]))
    return None


def jax_min_cc(major: int) -> Known | None:
    rec = _data()["jax"]["min_cc"]
    cc = rec["by_cuda"].get(str(major))
    return None if cc is None else Known(cc, rec["source"], bool(rec["verified"]))

