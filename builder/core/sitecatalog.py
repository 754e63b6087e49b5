"""A site's own catalog: a file of the shipped catalog's schema (builder/core/data/catalog.yaml) that adds or
overrides facts, named by `site.catalog` in stacks.yaml (docs/site-catalog.md).

A Megatron release the shipped catalog lacks, an NGC month it does not know yet, a base image built in house:
a site writes the record with its source, and every rule judges with it. Each record the file brings names
its `source`, shown in findings as `site catalog FILE:LINE: SOURCE`, so a finding says whose fact it judged by.

How the two are merged, key by key:
- a mapping merges into the shipped one (a new GPU, a new NGC month, a new base);
- a record (a mapping with a `source`) replaces the shipped record of that name whole, except a release
  list (`releases.<field>`), whose `versions` are added to the shipped ones;
- `megatron_core.releases` merges by version: a site's record of a version replaces the shipped one;
- any other list or value replaces the shipped one.

The file is validated when read: a section the catalog has not, a record without its source, a version that
is not PEP 440, a commit that is not 40 hex digits, each refused with file, line and key, all in one run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from builder.errors import SpecError, SpecErrors, did_you_mean
from builder.core.yamlsrc import Doc, load_file

HEX40 = re.compile(r"^[0-9a-f]{40}\Z")
MONTH = re.compile(r"^\d{2}\.\d{2}\Z")
# What a site may declare of a base it builds in house (bases: IMAGE -> record).
BASE_FACTS = ("python", "torch", "cuda", "cudnn", "nccl", "numpy", "os", "transformer_engine", "jax", "jaxlib")


def read(path: Path, shipped: dict) -> dict:
    """The site file at `path`, validated against the shipped catalog's sections, with each record's source
    marked as the site's; SpecErrors (every refusal) where it is malformed."""
    doc = load_file(path)
    data = doc.data
    refusals: list[SpecError] = []
    if not isinstance(data, dict):
        raise SpecError("a site catalog is a mapping of catalog sections", file=str(path),
                        hint="e.g. megatron_core: {releases: [{version: ..., commit: ..., source: ...}]}")
    sections = set(shipped) | {"bases"}
    for key, value in data.items():
        if key not in sections:
            refusals.append(doc.error((key,), f"unknown catalog section {key!r}" + did_you_mean(key, sections),
                                      hint="sections: " + ", ".join(sorted(sections))))
            continue
        check = CHECKS.get(key)
        if check is not None:
            refusals.extend(check(doc, (key,), value))
    if refusals:
        raise SpecErrors(refusals) if len(refusals) > 1 else refusals[0]
    return _marked(doc, (), {k: v for k, v in data.items()})


def merged(shipped: dict, site: dict) -> dict:
    """The shipped catalog with the site's records merged in (the rules above)."""
    out = dict(shipped)
    for key, value in site.items():
        out[key] = _merge(shipped.get(key), value, (key,))
    return out


def _merge(ours: Any, theirs: Any, path: tuple) -> Any:
    if path == ("megatron_core", "releases") and isinstance(ours, list) and isinstance(theirs, list):
        by_version = {str(r.get("version")): r for r in ours}
        by_version.update({str(r.get("version")): r for r in theirs})
        return list(by_version.values())
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if "source" in theirs:
            if isinstance(theirs.get("versions"), list) and isinstance(ours.get("versions"), list):
                # A release list extended: the shipped versions stay, and so does their source.
                return {**ours, **theirs, "versions": list(dict.fromkeys([*ours["versions"], *theirs["versions"]])),
                        "source": f"{ours.get('source')}; {theirs['source']}"}
            return theirs   # a record: the site's replaces the shipped one whole
        out = dict(ours)
        for key, value in theirs.items():
            out[key] = _merge(ours.get(key), value, path + (key,))
        return out
    return theirs


def _marked(doc: Doc, path: tuple, value: Any) -> Any:
    """The value with every `source` in it prefixed by where the site wrote it."""
    if isinstance(value, dict):
        out = {k: _marked(doc, path + (k,), v) for k, v in value.items()}
        if isinstance(out.get("source"), str):
            line = doc.line(path + ("source",))
            out["source"] = f"site catalog {doc.file}{':' + str(line) if line else ''}: {out['source']}"
        return out
    if isinstance(value, list):
        return [_marked(doc, path + (i,), v) for i, v in enumerate(value)]
    return value


# -- validation of the sections a site most often extends ----------------------------------------------

def _record(doc: Doc, path: tuple, value: Any, required: tuple = (), versions: tuple = (), specs: tuple = (),
            commits: tuple = (), allowed: tuple | None = None) -> list[SpecError]:
    """A record: a mapping with a source, its required keys, PEP 440 versions, specifier sets and commits."""
    if not isinstance(value, dict):
        return [doc.error(path, "expected a mapping (a record with its source)")]
    out = []
    if not isinstance(value.get("source"), str) or not value.get("source", "").strip():
        out.append(doc.error(path, "a record of a site catalog names its source (where the fact was read)",
                             hint="source: \"NVIDIA/Megatron-LM core_v0.20.0 tag and pyproject.toml\""))
    for key in required:
        if key not in value:
            out.append(doc.error(path, f"missing {key!r}"))
    if allowed is not None:
        for key in value:
            if key not in allowed and key not in ("source", "verified", "unverified"):
                out.append(doc.error(path + (key,), f"unknown key {key!r}" + did_you_mean(key, allowed),
                                     hint="allowed: " + ", ".join(allowed) + ", source, verified"))
    for key in versions:
        if key in value:
            try:
                Version(str(value[key]))
            except InvalidVersion:
                out.append(doc.error(path + (key,), f"{str(value[key])[:40]!r} is not a version (PEP 440)"))
    for key in specs:
        if key in value:
            try:
                SpecifierSet(str(value[key]))
            except InvalidSpecifier:
                out.append(doc.error(path + (key,), f"{str(value[key])[:40]!r} is not a version range (PEP 440)"))
    for key in commits:
        if key in value and not HEX40.match(str(value[key])):
            out.append(doc.error(path + (key,), f"{str(value[key])[:44]!r} is not a full commit (40 hex digits)",
                                 hint="git rev-parse TAG^{commit}: the commit, not an annotated tag's object"))
    return out


def _megatron(doc: Doc, path: tuple, value: Any) -> list[SpecError]:
    if not isinstance(value, dict):
        return [doc.error(path, "expected a mapping with releases")]
    releases = value.get("releases", [])
    if not isinstance(releases, list):
        return [doc.error(path + ("releases",), "expected a list of releases")]
    out = []
    for i, rec in enumerate(releases):
        out += _record(doc, path + ("releases", i), rec, required=("version", "commit"), versions=("version",),
                       specs=("python", "torch", "numpy", "te_dev"), commits=("commit", "tag_object"),
                       allowed=("version", "commit", "tag_object", "python", "torch", "numpy", "te_dev"))
    return out


def _ngc(doc: Doc, path: tuple, value: Any) -> list[SpecError]:
    if not isinstance(value, dict):
        return [doc.error(path, "expected a mapping with releases")]
    out = []
    for month, rec in (value.get("releases") or {}).items():
        if not MONTH.match(str(month)):
            out.append(doc.error(path + ("releases", month), f"{str(month)[:20]!r} is not an NGC month (YY.MM)"))
            continue
        out += _record(doc, path + ("releases", month), rec, versions=("torch", "cuda", "python", "numpy"))
    return out


def _releases(doc: Doc, path: tuple, value: Any) -> list[SpecError]:
    if not isinstance(value, dict):
        return [doc.error(path, "expected a mapping of release lists")]
    out = []
    for field, rec in value.items():
        out += _record(doc, path + (field,), rec, required=("versions",), allowed=("versions",))
        for i, v in enumerate((rec or {}).get("versions", []) if isinstance(rec, dict) else []):
            try:
                Version(str(v))
            except InvalidVersion:
                out.append(doc.error(path + (field, "versions", i), f"{str(v)[:40]!r} is not a version (PEP 440)"))
    return out


def _newest(doc: Doc, path: tuple, value: Any) -> list[SpecError]:
    if not isinstance(value, dict):
        return [doc.error(path, "expected a mapping of fields")]
    return [e for field, rec in value.items()
            for e in _record(doc, path + (field,), rec, required=("version",), versions=("version",),
                             allowed=("version",))]


def _bases(doc: Doc, path: tuple, value: Any) -> list[SpecError]:
    if not isinstance(value, dict):
        return [doc.error(path, "expected a mapping of image references to what each provides")]
    return [e for image, rec in value.items()
            for e in _record(doc, path + (image,), rec, versions=("python", "torch", "cuda", "numpy"),
                             allowed=BASE_FACTS)]


CHECKS = {"megatron_core": _megatron, "ngc_pytorch": _ngc, "ngc_jax": _ngc, "releases": _releases,
          "newest_known": _newest, "bases": _bases}

__all__ = ["BASE_FACTS", "merged", "read"]
