"""stacks.lock.yaml: what each base resolved to (its digest) and what `imgbuild lock` measured inside it,
the same for layers whose image is a base in all but name (`lock layer=NAME`), and every distribution
each layer's pip commands install, resolved and hashed (`lock python=NAME`, builder.ship.resolve).

Only the model and its reading live here, beneath loading (which reads it once, with stacks.yaml);
what of it is stale for a stacks file is builder.load.intent, probing and writing `builder.ship.lock`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import re

import yaml
from packaging.utils import canonicalize_name
from packaging.version import Version

from builder.errors import SpecError
from builder.core.platforms import DEFAULT as DEFAULT_PLATFORM, PLATFORMS

LOCK_VERSION = 1


def lock_path(spec_file: str | Path) -> Path:
    """stacks.lock.yaml beside stacks.yaml (NAME.lock.yaml beside NAME.yaml)."""
    spec_file = Path(spec_file)
    return spec_file.with_name(spec_file.stem + ".lock.yaml")


@dataclass(frozen=True)
class LockedBase:
    image: str
    digest: str
    probed: str
    facts: dict     # name -> str, or None: measured and not installed; a missing name was not measured
    # Where the image is an index: platform -> LockedPlatform, each entry's own digest and measurements
    # (NGC's arm64 image has its own digest, and may hold other versions than its amd64 one).
    platforms: dict = field(default_factory=dict)
    # What decides pip's answer on it (builder.ship.measure.environment): os, python, dists. A base made again
    # with the same keeps the entries above it. None in a lock written before it was recorded.
    environment: dict | None = None

    def digests(self):
        """What plan keys a chain on: {platform: digest} of an index's entries, else the one digest."""
        return {p: e.digest for p, e in self.platforms.items()} if self.platforms else self.digest

    def facts_for(self, platform: str) -> dict:
        entry = self.platforms.get(platform)
        return entry.facts if entry is not None else self.facts


@dataclass(frozen=True)
class LockedPlatform:
    digest: str
    facts: dict
    environment: dict | None = None


@dataclass(frozen=True)
class LockedLayer:
    """A layer whose image makes a base of its own (CUDA and torch from PyPI on Debian): measured like a
    base, valid while `definition` (builder.plan.keys.layer_definition) is what stacks.yaml defines now."""
    image: str      # the registry reference of the image probed (its repository and key tag)
    digest: str
    probed: str
    definition: str
    facts: dict


@dataclass(frozen=True)
class LockedDist:
    name: str
    version: str
    sha256: str | None   # None: a local source folder the layer builds (no artifact to hash)
    url: str
    requested: bool
    replaces: str | None = None   # the version of the image beneath that this one replaces (IB097)
    required_by: tuple = ()       # what in the set asks for it: "name (requirement)"
    direct: bool = False          # named by URL (a wheel URL, git+URL@commit), not by name on an index


@dataclass(frozen=True)
class LockedPython:
    """What a layer's pip commands install, each command's set in order, as pip resolved it on `parent`
    (the image beneath the layer in `stack`). Valid while `definition` is what stacks.yaml defines now."""
    stack: str
    parent: str
    definition: str
    resolved: str
    steps: tuple    # tuple (per pip command) of tuple of LockedDist
    intents: tuple = ()   # ((intent, locked), ...): each floating value of stacks.yaml and its exact form
    platform: str = DEFAULT_PLATFORM   # resolved for this platform: wheels and hashes differ between them
    # What decided pip's answer (python, platform, beneath: NAME==VERSION the image beneath held); None in
    # an entry written before it was recorded.
    environment: dict | None = None

    def dists(self) -> dict:
        """Every distribution the layer installs: canonical name -> LockedDist (a later command wins)."""
        return {canonicalize_name(d.name): d for step in self.steps for d in step}


@dataclass(frozen=True)
class LockedSource:
    """A git source's tag or branch (stacks.yaml `ref:`) and the commit it named when it was locked."""
    repo: str
    ref: str
    commit: str
    resolved: str


@dataclass(frozen=True)
class LockedDownload:
    """A file stacks.yaml names by URL without its sha256, and the sha256 it had when it was locked."""
    url: str
    sha256: str
    resolved: str


@dataclass(frozen=True)
class Lock:
    file: str
    bases: dict     # base name -> LockedBase
    layers: dict = field(default_factory=dict)   # layer name -> LockedLayer
    python: dict = field(default_factory=dict)   # layer name -> LockedPython (its first entry)
    # layer name -> every entry of it: a layer on several chains (a project on stacks with other layers beneath)
    # has one resolved set per chain, each valid for its own definition
    python_all: dict = field(default_factory=dict)
    sources: tuple = ()                          # LockedSource, sorted by repo and ref
    downloads: tuple = ()                        # LockedDownload, sorted by URL

    def python_for(self, name: str, definition: str, platform: str = DEFAULT_PLATFORM):
        """The entry of layer `name` resolved for this definition of it (its chain beneath) on this
        platform, or None."""
        return next((e for e in self.python_all.get(name, ())
                     if e.definition == definition and e.platform == platform), None)

    def base_digest(self, base, site) -> str | None:
        """The digest the lock resolved `base` to, where its entry is for the base as named now."""
        entry = self.bases.get(base.name)
        return entry.digest if entry is not None and base.locked_by(entry, site) else base.digest


def load_lock(spec_file: str | Path) -> Lock | None:
    """The lock file beside `spec_file`, or None where there is none. builder.load.spec.load_spec is its one
    reader: everything else takes Spec.lock."""
    path = lock_path(spec_file)
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise SpecError(f"not a lock file imgbuild wrote: {exc}", file=str(path),
                        hint="delete it and run imgbuild lock again") from None
    return parse_lock(data, path)


def parse_lock(data: dict, path: str | Path) -> Lock:
    """The lock file's data (as read, or as `imgbuild lock` writes it) as a Lock; refused as a SpecError."""
    try:
        if data.get("version") != LOCK_VERSION or not isinstance(data.get("bases"), dict):
            raise ValueError(f"expected version: {LOCK_VERSION} and a bases mapping")
        bases = {name: LockedBase(image=str(rec["image"]), digest=str(rec["digest"]), probed=str(rec["probed"]),
                                  facts=_facts(rec), platforms=_platforms(rec), environment=_environment(rec))
                 for name, rec in data["bases"].items()}
        layers = {name: LockedLayer(image=str(rec["image"]), digest=str(rec["digest"]), probed=str(rec["probed"]),
                                    definition=str(rec["definition"]), facts=_facts(rec))
                  for name, rec in (data.get("layers") or {}).items()}
        python_all = {str(name): tuple(_python(r) for r in (rec if isinstance(rec, list) else [rec]))
                      for name, rec in (data.get("python") or {}).items()}
        python = {name: entries[0] for name, entries in python_all.items() if entries}
        sources = tuple(_source(rec) for rec in data.get("sources") or [])
        downloads = tuple(_download(rec) for rec in data.get("downloads") or [])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SpecError(f"not a lock file imgbuild wrote: {exc}", file=str(path),
                        hint="delete it and run imgbuild lock again") from None
    return Lock(file=str(path), bases=bases, layers=layers, python=python, sources=sources, python_all=python_all,
                downloads=downloads)


SHA40 = re.compile(r"^[0-9a-f]{40}\Z")


def _source(rec: dict) -> LockedSource:
    commit = str(rec["commit"])
    if not SHA40.match(commit):
        raise ValueError(f"sources: {str(rec.get('repo'))[:120]} {str(rec.get('ref'))[:80]}: commit {commit[:80]!r} "
                         "is not 40 hex digits")
    return LockedSource(repo=str(rec["repo"]), ref=str(rec["ref"]), commit=commit, resolved=str(rec.get("resolved", "")))


SHA256 = re.compile(r"^[0-9a-f]{64}\Z")


def _download(rec: dict) -> "LockedDownload":
    digest = str(rec["sha256"])
    if not SHA256.match(digest):
        raise ValueError(f"downloads: {str(rec.get('url'))[:160]}: sha256 {digest[:80]!r} is not 64 hex digits")
    return LockedDownload(url=str(rec["url"]), sha256=digest, resolved=str(rec.get("resolved", "")))


def _python(rec: dict) -> LockedPython:
    steps = []
    for step in rec["steps"]:
        dists = []
        for d in step:
            name, version, digest = str(d["name"]), str(d["version"]), d.get("sha256")
            canonicalize_name(name, validate=True)
            Version(version)
            if digest is not None and not SHA256.match(str(digest)):
                raise ValueError(f"{name} {version}: sha256 {str(digest)[:80]!r} is not 64 hex digits")
            replaces = d.get("replaces")
            dists.append(LockedDist(name=name, version=version, sha256=digest, url=str(d["url"]),
                                    requested=bool(d.get("requested")),
                                    replaces=None if replaces is None else str(replaces),
                                    required_by=tuple(str(r) for r in d.get("required_by") or ()),
                                    direct=bool(d.get("direct"))))
        steps.append(tuple(dists))
    intents = tuple((str(i["intent"]), str(i["locked"])) for i in rec.get("intents") or [])
    platform = str(rec.get("platform", DEFAULT_PLATFORM))
    if platform not in PLATFORMS:
        raise ValueError(f"python: {str(rec.get('stack'))[:80]}: platform {platform[:40]!r} is not one imgbuild builds")
    env = rec.get("environment")
    if env is not None and (not isinstance(env, dict) or not isinstance(env.get("beneath", []), list)):
        raise ValueError(f"python: {str(rec.get('stack'))[:80]}: environment is not a mapping with a beneath list")
    return LockedPython(stack=str(rec["stack"]), parent=str(rec["parent"]), definition=str(rec["definition"]),
                        resolved=str(rec["resolved"]), steps=tuple(steps), intents=intents, platform=platform,
                        environment=None if env is None else {
                            "python": None if env.get("python") is None else str(env["python"]),
                            "platform": str(env.get("platform", platform)),
                            "beneath": [str(d) for d in env.get("beneath") or []]})


DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")


def _platforms(rec: dict) -> dict:
    out = {}
    for platform, entry in (rec.get("platforms") or {}).items():
        if platform not in PLATFORMS or not DIGEST.match(str(entry["digest"])):
            raise ValueError(f"bases: {str(rec.get('image'))[:120]}: platforms.{str(platform)[:40]} is not a platform "
                             "imgbuild builds with a sha256 digest")
        out[str(platform)] = LockedPlatform(digest=str(entry["digest"]), facts=_facts(entry),
                                            environment=_environment(entry))
    return out


def _environment(rec: dict) -> dict | None:
    env = rec.get("environment")
    if env is None:
        return None
    if not isinstance(env, dict) or not isinstance(env.get("dists", []), list):
        raise ValueError(f"bases: {str(rec.get('image'))[:120]}: environment is not a mapping with a dists list")
    out = {"os": str(env.get("os")), "python": None if env.get("python") is None else str(env["python"])}
    if "dists" in env:
        out["dists"] = [str(d) for d in env["dists"]]
        bad = [d for d in out["dists"] if "==" not in d]
        if bad:
            raise ValueError(f"bases: {str(rec.get('image'))[:120]}: environment.dists: {bad[0][:80]!r} is not NAME==VERSION")
    return out


def _facts(rec: dict) -> dict:
    return {k: None if v is None else str(v) for k, v in (rec.get("facts") or {}).items()}


__all__ = ["Lock", "LockedBase", "LockedPlatform", "LockedDist", "LockedLayer", "LockedPython", "LockedSource", "LOCK_VERSION", "load_lock", "lock_path", "parse_lock"]
