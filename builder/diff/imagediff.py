"""`imgbuild diff IMAGE_A IMAGE_B`: what differs between two built images, from registry metadata only.

Each side costs a few small requests: the image manifest, its config blob, and the measured manifest
imgbuild stores beside the image (builder.ship.manifest): packages, env, ds_report ops, check results,
arch coverage. No layer is ever pulled. An image without a stored manifest (built elsewhere) is still
compared by its config (env, labels, history) and its layer list, and the result says what could not
be compared. Versions are compared as versions, so every change has a direction.
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from packaging.version import InvalidVersion, Version

from builder.errors import DiffError
from builder.plan.layout import layer_of_release, release_repo
from builder.ship import oci, sbom
from builder.ship.manifest import VOLATILE_ENV, fetch_manifest
from builder.core import platforms as plat
from builder.ship.registry import Ref, Registry, json_object
from builder.load.spec import Site

CONFIG_MAX = 8 << 20     # an image config (labels, env, history); larger ones are refused, not read
INDEX_TYPES = oci.INDEX_TYPES
# What a reader of a training image looks at first: the platform (torch and what it was built with);
# every list is ordered by these, then by name. The frameworks (whatever kinds an image was built
# from) come from the image's own manifest, so no kind is named here.
KEY_VERSIONS = ("torch", "cuda", "cudnn", "nccl", "python", "numpy")
KEY_PACKAGES = ("torch", "nvidia-cuda", "nvidia-cudnn", "nvidia-nccl")
CONFIG_FIELDS = ("architecture", "os", "Entrypoint", "Cmd", "User", "WorkingDir", "Shell", "ExposedPorts")
RECORDED = (("versions", "versions"), ("python_packages", "python packages"), ("ds_report_ops", "ds_report ops"),
            ("arch_coverage", "compiled arch coverage"), ("checks", "checks"),
            ("debian_packages", "debian packages"))


@dataclass(frozen=True)
class Image:
    ref: str                     # as given
    location: str                # registry/repository@digest
    digest: str
    layers: tuple                # (digest, size) bottom to top
    config_size: int
    config: dict = field(hash=False)
    recorded: dict | None = field(default=None, hash=False)   # the imgbuild manifest, when stored
    sbom: dict | None = field(default=None, hash=False)       # {TYPE NAME: version} from its SBOM, when stored

    @property
    def size(self) -> int:
        return self.config_size + sum(size for _, size in self.layers)


@dataclass(frozen=True)
class Change:
    name: str
    old: str | None
    new: str | None
    direction: str               # added | removed | upgrade | downgrade | changed
    note: str = ""


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    changes: tuple = ()
    same: int = 0
    compared: bool = True
    note: str = ""


@dataclass(frozen=True)
class ImageDiff:
    a: Image
    b: Image
    versions: tuple              # (name, in A, in B), key versions first; empty without both manifests
    sections: tuple
    bytes_fetched: int
    seconds: float

    @property
    def different(self) -> bool:
        return self.a.digest != self.b.digest or any(s.changes for s in self.sections)

    @property
    def not_compared(self) -> list[str]:
        return [s.title for s in self.sections if not s.compared]

    @property
    def total_size(self) -> int:
        return self.a.size + self.b.size

    def to_json(self) -> dict:
        def image(i: Image) -> dict:
            return {"ref": i.ref, "location": i.location, "digest": i.digest, "size": i.size,
                    "imgbuild_manifest": i.recorded is not None,
                    "layers": [{"digest": d, "size": s} for d, s in i.layers]}
        return {
            "mode": "image", "different": self.different, "a": image(self.a), "b": image(self.b),
            "versions": [{"name": n, "a": va, "b": vb} for n, va, vb in self.versions],
            "sections": {s.id: {"title": s.title, "compared": s.compared, "note": s.note, "same": s.same,
                                "changes": [asdict(c) for c in s.changes]} for s in self.sections},
            "not_compared": self.not_compared,
            "transfer": {"bytes_fetched": self.bytes_fetched, "images_total_bytes": self.total_size,
                         "ratio": self.bytes_fetched / self.total_size if self.total_size else 0.0,
                         "seconds": round(self.seconds, 3)},
        }


# -- version order ---------------------------------------------------------------------------------

def _dpkg_order(c: str) -> int:
    return -1 if c == "~" else 0 if c.isdigit() else ord(c) if c.isalpha() else ord(c) + 256


def _verrevcmp(a: str, b: str) -> int:
    """dpkg's comparison of one version part: non-digit runs by the order above ('~' sorts before
    everything, even the end), digit runs as numbers."""
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _dpkg_order(a[i]) if i < len(a) else 0
            bc = _dpkg_order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        ni = i
        while ni < len(a) and a[ni].isdigit():
            ni += 1
        nj = j
        while nj < len(b) and b[nj].isdigit():
            nj += 1
        da, db = int(a[i:ni] or 0), int(b[j:nj] or 0)
        if da != db:
            return da - db
        i, j = ni, nj
    return 0


def dpkg_compare(a: str, b: str) -> int:
    """Order two Debian versions ([epoch:]upstream[-revision]) as dpkg does: <0, 0 or >0."""
    def split(v: str) -> tuple[int, str, str]:
        epoch, _, rest = v.partition(":") if ":" in v else ("0", "", v)
        upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
        return int(epoch or 0), upstream, revision
    (ea, ua, ra), (eb, ub, rb) = split(a), split(b)
    return (ea - eb) or _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


def _python_compare(a: str, b: str) -> int:
    va, vb = Version(a), Version(b)
    return (va > vb) - (va < vb)


def direction(old: str | None, new: str | None, compare: Callable[[str, str], int] | None) -> str:
    if old is None:
        return "added"
    if new is None:
        return "removed"
    try:
        order = compare(old, new) if compare else 0
    except (InvalidVersion, ValueError):
        order = 0
    return "upgrade" if order < 0 else "downgrade" if order > 0 else "changed"


def _rank(name: str, keys: tuple) -> tuple:
    return next((i for i, k in enumerate(keys) if name.lower().startswith(k)), len(keys)), name.lower()


def compare_maps(id_: str, title: str, old: dict, new: dict, compare=None, keys: tuple = ()) -> Section:
    changes = [Change(k, _text(old.get(k)), _text(new.get(k)), direction(_text(old.get(k)), _text(new.get(k)), compare))
               for k in sorted(set(old) | set(new), key=lambda k: _rank(k, keys)) if old.get(k) != new.get(k)]
    return Section(id_, title, tuple(changes), same=sum(1 for k in old if k in new and old[k] == new[k]))


def _text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


# -- fetching --------------------------------------------------------------------------------------

def resolve(text: str, site: Site | None) -> Ref:
    """REGISTRY/REPO:TAG, REGISTRY/REPO@sha256:..., or STACK@TAG (a release tag of the site)."""
    if "/" not in text and "@" in text:
        stack, _, tag = text.partition("@")
        if site is None or not stack or not tag:
            raise DiffError(f"cannot read {text!r} as STACK@TAG")
        repo = f"{site.registry}/{release_repo(site.namespace, stack)}"
        return Ref.parse(f"{repo}@{tag}" if tag.startswith("sha256:") else f"{repo}:{tag}")
    return Ref.parse(text)


def fetch_image(reg: Registry, text: str, ref: Ref, platform: str | None = None) -> Image:
    """The image a reference names, read as untrusted data: every manifest hashed to its digest (the
    client), every field checked for its shape before use (builder.ship.oci), a config that is not an
    object refused. An index (a release of several platforms) gives its `platform` entry: linux/amd64
    when none is named and it has one, else its only one."""
    found = reg.get_manifest(ref.repo, ref.reference)
    if not found:
        raise DiffError(f"{ref} is not in the registry")
    manifest, media_type, digest = found
    image_digest = digest
    if media_type in INDEX_TYPES or manifest.get("mediaType") in INDEX_TYPES:
        entries = {p: m for m in oci.index_entries(manifest, f"image index {ref}")
                   if (p := oci.platform_of(m)) is not None}
        want = platform or (plat.DEFAULT if plat.DEFAULT in entries or len(entries) != 1 else next(iter(entries)))
        entry = entries.get(want)
        if entry is None:
            raise DiffError(f"{ref} has no {want} image (its index holds {', '.join(entries) or 'no platform image'})",
                            hint="name one with --platform")
        # Read by the digest the index names: the client hashes the child to it.
        manifest, _, image_digest = reg.get_manifest(ref.repo, entry["digest"]) or ({}, "", "")
    if "config" not in manifest:
        raise DiffError(f"{ref} is not an image (no config in its manifest)")
    config_desc, layers = oci.image_manifest(manifest, f"manifest of {ref}")
    config = json_object(reg.get_blob(ref.repo, config_desc["digest"], limit=CONFIG_MAX), f"the config of {ref}")
    return Image(ref=text, location=f"{ref.registry}/{ref.repo}@{digest}", digest=digest,
                 layers=tuple((l["digest"], int(l.get("size") or 0)) for l in layers),
                 config_size=int(config_desc.get("size") or 0), config=config,
                 recorded=_beside(fetch_manifest, reg, ref.repo, digest, image_digest, config),
                 sbom=_sbom(reg, ref.repo, digest, image_digest, config))


def _beside(fetch, reg: Registry, repo: str, digest: str, image_digest: str, config: dict):
    """What imgbuild stored beside the image (its manifest, its SBOM): beside it, or, for a release tag,
    beside its layer image (NAMESPACE/STACK is a copy of NAMESPACE/layers/LAYER)."""
    layer = _dict(_dict(config.get("config")).get("Labels")).get("io.imgbuild.layer")
    copied = layer_of_release(repo, layer) if isinstance(layer, str) and layer else None
    repos = [repo] + ([copied] if copied else [])
    for where in dict.fromkeys(repos):
        for d in dict.fromkeys((digest, image_digest)):
            found = fetch(reg, where, d)
            if found:
                return found
    return None


def _sbom(reg: Registry, repo: str, digest: str, image_digest: str, config: dict) -> dict | None:
    doc = _beside(sbom.fetch, reg, repo, digest, image_digest, config)
    return sbom.packages(doc) if doc else None


def _sbom_section(a: Image, b: Image) -> Section:
    """Package changes from the two SBOMs (every ecosystem syft sees: deb, pypi, binaries), no layer read."""
    if a.sbom is None or b.sbom is None:
        missing = ", ".join(i.ref for i in (a, b) if i.sbom is None)
        return Section("sbom", "packages (SBOM)", compared=False, note=f"no SBOM stored beside {missing}")
    return compare_maps("sbom", "packages (SBOM)", a.sbom, b.sbom)


# -- comparing -------------------------------------------------------------------------------------

def _dict(value) -> dict:
    """A field that should be an object: itself, or {} when the registry sent something else."""
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _env(items) -> dict:
    return dict(item.partition("=")[::2] for item in _list(items) if isinstance(item, str))


def _history(config: dict) -> list[str]:
    steps = (h.get("created_by", h.get("comment", "")) for h in _list(config.get("history")) if isinstance(h, dict))
    return [(s if isinstance(s, str) else json.dumps(s)).removesuffix(" # buildkit") for s in steps]


def human_size(n: float) -> str:
    units = ("B", "kB", "MB", "GB")
    i = 0
    while abs(n) >= 1000 and i < len(units) - 1:
        n, i = n / 1000, i + 1
    return f"{n:.0f} B" if i == 0 else f"{n:.1f} {units[i]}"


def _layers(a: Image, b: Image) -> Section:
    """Layer by position: images built on the same parents share their lower layers byte for byte."""
    shared = 0
    while shared < min(len(a.layers), len(b.layers)) and a.layers[shared][0] == b.layers[shared][0]:
        shared += 1
    changes, same = [], shared
    for i in range(shared, max(len(a.layers), len(b.layers))):
        la = a.layers[i] if i < len(a.layers) else None
        lb = b.layers[i] if i < len(b.layers) else None
        if la and lb and la[0] == lb[0]:
            same += 1
            continue
        changes.append(Change(f"layer {i + 1}", la and la[0], lb and lb[0], direction(la and la[0], lb and lb[0], None),
                              " -> ".join(human_size(l[1]) for l in (la, lb) if l)))
    delta = b.size - a.size
    note = (f"{shared} shared from the bottom ({len(a.layers)} -> {len(b.layers)} layers); "
            f"{human_size(a.size)} -> {human_size(b.size)} ({'+' if delta >= 0 else '-'}{human_size(abs(delta))})")
    return Section("layers", "layers", tuple(changes), same=same, note=note)


def _history_section(a: Image, b: Image) -> Section:
    """The build steps, timestamps left out: what a rebuilt or foreign image did differently."""
    ha, hb = _history(a.config), _history(b.config)
    changes, same = [], 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=ha, b=hb, autojunk=False).get_opcodes():
        if op == "equal":
            same += i2 - i1
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            old = ha[i1 + k] if i1 + k < i2 else None
            new = hb[j1 + k] if j1 + k < j2 else None
            changes.append(Change(f"step {(j1 + k if new is not None else i1 + k) + 1}", old, new,
                                  direction(old, new, None)))
    return Section("history", "history", tuple(changes), same=same)


def _recorded_sections(a: Image, b: Image) -> dict[str, Section]:
    """What only the stored manifests hold, by section id."""
    ra, rb = a.recorded, b.recorded
    if ra is None or rb is None:
        why = "no imgbuild manifest for " + " and ".join(s for s, r in (("A", ra), ("B", rb)) if r is None)
        return {i: Section(i, t, compared=False, note=why) for i, t in RECORDED}

    def ops(r: dict) -> dict:
        return {op: f"[{'YES' if v.get('installed') else 'NO'}] [{'OKAY' if v.get('compatible') else 'NO'}]"
                for op, v in _dict(r.get("ds_report_ops")).items() if isinstance(v, dict)}

    def checks(r: dict) -> dict:
        return {c["id"]: _text(c.get("status")) for c in _list(r.get("checks"))
                if isinstance(c, dict) and isinstance(c.get("id"), str)}

    def archs(r: dict) -> dict:
        """torch's own archs, and the device code of each extension binary (named from site-packages on,
        so that one binary in two images is one line)."""
        out = {arch: "compiled" for arch in _list(r.get("arch_list")) if isinstance(arch, str)}
        for files in _dict(r.get("cuda_code")).values():
            for path, targets in _dict(files).items():
                out[path.split("site-packages/", 1)[-1]] = " ".join(t for t in _list(targets) if isinstance(t, str))
        return out

    out = {
        "versions": compare_maps("versions", "versions", _dict(ra.get("versions")), _dict(rb.get("versions")),
                                 _python_compare, KEY_VERSIONS),
        "python_packages": compare_maps("python_packages", "python packages", _dict(ra.get("python_packages")),
                                        _dict(rb.get("python_packages")), _python_compare, KEY_PACKAGES),
        "ds_report_ops": compare_maps("ds_report_ops", "ds_report ops", ops(ra), ops(rb)),
        "arch_coverage": compare_maps("arch_coverage", "compiled arch coverage", archs(ra), archs(rb)),
        "checks": compare_maps("checks", "checks", checks(ra), checks(rb)),
        "env": compare_maps("env", "env", _dict(ra.get("env")), _dict(rb.get("env"))),
        "debian_packages": compare_maps("debian_packages", "debian packages", _dict(ra.get("debian_packages")),
                                        _dict(rb.get("debian_packages")), dpkg_compare),
    }
    if not archs(ra) and not archs(rb):
        out["arch_coverage"] = Section("arch_coverage", "compiled arch coverage",
                                       note="no CUDA archs on either side")
    return out


def _config(image: Image) -> dict:
    inner = _dict(image.config.get("config"))
    return {k: v for k in CONFIG_FIELDS if (v := image.config.get(k, inner.get(k))) is not None}


def compare(a: Image, b: Image) -> tuple[tuple, tuple]:
    """(versions side by side, sections): most important first, as a reader of a training image wants."""
    recorded = _recorded_sections(a, b)
    va, vb = (_dict(_dict(i.recorded).get("versions")) for i in (a, b))
    rows = tuple((n, va.get(n), vb.get(n)) for n in sorted(set(va) | set(vb), key=lambda n: _rank(n, KEY_VERSIONS)))
    ca, cb = _dict(a.config.get("config")), _dict(b.config.get("config"))
    if "env" not in recorded:  # no measured env on one side: the env the image config declares
        recorded["env"] = compare_maps("env", "config env",
                                       {k: v for k, v in _env(ca.get("Env")).items() if k not in VOLATILE_ENV},
                                       {k: v for k, v in _env(cb.get("Env")).items() if k not in VOLATILE_ENV})
    sections = (
        recorded["versions"], recorded["python_packages"], recorded["ds_report_ops"], recorded["arch_coverage"],
        recorded["checks"], recorded["env"],
        compare_maps("labels", "labels", _dict(ca.get("Labels")), _dict(cb.get("Labels"))),
        _layers(a, b), recorded["debian_packages"],
        compare_maps("config", "config", _config(a), _config(b)),
        _history_section(a, b), _sbom_section(a, b),
    )
    return (rows if recorded["versions"].compared else ()), sections


def diff_images(text_a: str, text_b: str, site: Site | None = None, platform: str | None = None) -> ImageDiff:
    """Compare two images in their registries (of an index, its `platform` entry: fetch_image); counts
    every byte read (the benchmark's honesty)."""
    start = time.perf_counter()
    registries: dict[str, Registry] = {}
    images = []
    for text in (text_a, text_b):
        ref = resolve(text, site)
        reg = registries.setdefault(ref.registry, Registry(ref.registry))
        images.append(fetch_image(reg, text, ref, platform))
    versions, sections = compare(*images)
    return ImageDiff(images[0], images[1], versions, sections,
                     bytes_fetched=sum(r.bytes_in for r in registries.values()),
                     seconds=time.perf_counter() - start)


__all__ = ["diff_images", "ImageDiff", "Image", "Section", "Change", "dpkg_compare", "direction", "resolve", "human_size"]
