"""Intent and truth: what stacks.yaml may leave floating, and how the lock file pins it.

A recipe says `transformers>=4.40,<5`, a git tag, a wheel URL without a hash. An image needs one exact
answer for each. stacks.yaml may state the intent where a lock file stands beside it; `imgbuild lock`
turns each into its exact form and records both, and check, plan, render and build use only that form:

- a floating requirement (a range, a bare name, a git requirement at a tag or branch, a wheel URL
  without #sha256=) is resolved by pip with the layer's other requirements (`lock python=LAYER`); the
  layer's lock entry holds the exact version and artifact hash, and the build installs only those;
- a git source at `ref:` (a tag or a branch) is resolved to its 40-hex commit on the host
  (`git ls-remote`), recorded under the lock file's `sources:`, and read back when stacks.yaml loads:
  from then on the layer is pinned to that commit like any other.
- a file by URL without its sha256 (`downloads:`) is fetched on the host and hashed, recorded under the lock
  file's `downloads:` and read back the same way: from then on it is pinned by that sha256 like any other.

Without a lock file the old strict refusals stand: every pin exact, every commit full.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable

from packaging.requirements import Requirement

from builder.core.lockfile import lock_path

# A git ref a site may float on: a tag or branch name as `git check-ref-format` allows it (plain names
# and slashes; no '..', no leading '-', no '@{', no control or glob characters), at most 200 characters.
REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*@\{)(?!.*//)[A-Za-z0-9._+/-]{1,200}(?<![./])\Z")
SHA40 = re.compile(r"^[0-9a-f]{40}\Z")
SHA256_FRAGMENT = re.compile(r"#sha256=[0-9a-f]{64}\Z")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}\Z")


@dataclass
class Intents:
    """How the loader treats intent: `accept` (a lock file stands beside stacks.yaml, or `imgbuild lock`
    is reading it) or not; `refs` maps (repo, ref) to the commit the lock file recorded; `resolve`, where
    set (`imgbuild lock`), resolves a ref the lock file lacks, and what it resolved is kept in `found`."""
    accept: bool = False
    refs: dict = field(default_factory=dict)
    resolve: Callable[[str, str], str] | None = None
    found: dict = field(default_factory=dict)   # (repo, ref) -> commit, what this loading resolved
    stamps: dict = field(default_factory=dict)  # (repo, ref) -> when the lock file recorded it
    used: set = field(default_factory=set)      # (repo, ref) named by stacks.yaml now
    lock_file: str = "stacks.lock.yaml"
    # Files by URL without a sha256, as refs are: url -> sha256 recorded, the resolver `imgbuild lock` sets (it
    # fetches and hashes on the host), what this loading resolved, when each was recorded, the URLs named now.
    digests: dict = field(default_factory=dict)
    fetch: Callable[[str], str] | None = None
    found_digests: dict = field(default_factory=dict)
    digest_stamps: dict = field(default_factory=dict)
    used_urls: set = field(default_factory=set)
    # Take refs, digests and their stamps from the lock file load_spec reads (the one read of it), rather
    # than from the fields given here.
    pinned_by_lock: bool = False

    def commit(self, repo: str, ref: str) -> str | None:
        self.used.add((repo, ref))
        if self.resolve is not None and (repo, ref) not in self.refs:
            if (repo, ref) not in self.found:
                self.found[(repo, ref)] = self.resolve(repo, ref)
            return self.found[(repo, ref)]
        return self.refs.get((repo, ref))

    def sha256(self, url: str) -> str | None:
        self.used_urls.add(url)
        if self.fetch is not None and url not in self.digests:
            if url not in self.found_digests:
                self.found_digests[url] = self.fetch(url)
            return self.found_digests[url]
        return self.digests.get(url)


INTENTS: ContextVar[Intents] = ContextVar("INTENTS", default=Intents())


@contextmanager
def reading(intents: Intents):
    token = INTENTS.set(intents)
    try:
        yield intents
    finally:
        INTENTS.reset(token)


def floating(req: Requirement) -> str | None:
    """Why a requirement is intent rather than a pin: None for NAME==X.Y.Z, NAME @ git+URL@<40-hex commit>
    and a wheel URL with #sha256=."""
    if req.url:
        if req.url.startswith("git+"):
            ref = (git_requirement(req.url) or {}).get("ref")
            return None if ref and SHA40.match(ref) else (f"a git ref ({ref})" if ref else "a git default branch")
        return None if SHA256_FRAGMENT.search(req.url) else "a wheel URL without #sha256="
    specs = list(req.specifier)
    if not specs:
        return "no version"
    if len(specs) == 1 and specs[0].operator == "==" and not specs[0].version.endswith(".*"):
        return None
    return f"a range ({req.specifier})"


# Parameters that name requirements files (pip's -r): a file beside stacks.yaml, or files of the project's source.
REQUIREMENT_FILES = ("requirements", "requirements_files")


UNPINNED_REF = "a git ref the lock file records no commit for"
UNPINNED_DOWNLOAD = "a download the lock file records no sha256 for"
HOST_PINNED = (UNPINNED_REF, UNPINNED_DOWNLOAD)   # what `imgbuild lock` pins on the host, not by resolving pip


def unresolved_refs(layer) -> list[tuple[str, str, str]]:
    """What of a layer `imgbuild lock` pins on the host, not yet pinned: git sources at a ref the lock file has
    no commit for, and files by URL it has no sha256 for."""
    return [i for i in layer_intents(layer) if i[2] in HOST_PINNED]


def layer_intents(layer) -> list[tuple[str, str, str]]:
    """What of a layer's parameters floats until the lock file resolves it: (parameter, requirement, file or
    git source, why). A requirements file (its lines are read by pip, not by imgbuild) is intent as a whole;
    a git source at a ref is intent until the lock file's `sources:` records its commit."""
    out = []
    for name, value in layer.params:
        ptype = layer.kind.params[name].type if name in layer.kind.params else None
        if getattr(value, "ref", None) and not getattr(value, "commit", ""):
            out.append((name, f"{value.repo}@{value.ref}", UNPINNED_REF))
        elif ptype == "downloads" and any(not d.sha256 for d in value or ()):
            out += [(name, d.url, UNPINNED_DOWNLOAD) for d in value if not d.sha256]
        elif ptype == "requirements":
            for raw in value or ():
                why = floating(Requirement(raw))
                if why:
                    out.append((name, raw, why))
        elif getattr(value, "requirements_files", None):   # a bound tree's files (builder.load.params.BoundTree)
            for file in value.requirements_files:
                out.append((name, f"{value.repo}@{value.commit[:12]}:{file}",
                            "a requirements file of the bound tree (pip reads its lines)"))
        elif name in REQUIREMENT_FILES and value:
            for item in (value if isinstance(value, tuple) else (value,)):
                out.append((name, str(getattr(item, "path", item)), "a requirements file (pip reads its lines)"))
    return out


def git_requirement(url: str) -> dict | None:
    """git+URL[@REF][#subdirectory=DIR] as {url, ref, sub} (None where it is not of that shape): REF is what
    follows the last '@' after the host (an scp-like USER@HOST:PATH keeps its user)."""
    body, _, fragment = url[len("git+"):].partition("#")
    if not url.startswith("git+") or (fragment and not re.fullmatch(r"subdirectory=[A-Za-z0-9._/-]+", fragment)):
        return None
    head, sep, path = body.partition("://")
    if not sep:
        head, path = "", body
    host, _, tail = path.partition("/" if sep else ":")
    repo, ref = (tail.rsplit("@", 1) + [None])[:2] if "@" in tail else (tail, None)
    return {"url": f"{head}{sep}{host}{'/' if sep else ':'}{repo}", "ref": ref,
            "sub": fragment[len("subdirectory="):] if fragment else None}


def pins(lock) -> dict:
    """What the lock file (a Lock, or None) pins on the host, as Intents takes it: from `sources:` (repo, ref)
    -> commit and -> when it was recorded, from `downloads:` url -> sha256 and -> when."""
    sources, downloads = (lock.sources, lock.downloads) if lock is not None else ((), ())
    return {"refs": {(s.repo, s.ref): s.commit for s in sources},
            "stamps": {(s.repo, s.ref): s.resolved for s in sources},
            "digests": {d.url: d.sha256 for d in downloads},
            "digest_stamps": {d.url: d.resolved for d in downloads}}


__all__ = ["HOST_PINNED", "INTENTS", "Intents", "REF", "floating", "git_requirement", "layer_intents", "lock_path", "pins",
           "reading", "unresolved_refs"]
