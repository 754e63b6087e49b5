"""`imgbuild gc`: which manifests of a namespace no release, lease or retention rule needs, and deleting them.

What is kept (site.retention, builder.load.retention), everything else of the namespace is a candidate:
  - of each stack (NAMESPACE/STACK), the newest keep_releases released images (an image or index of
    imgbuild's that some release tag names, newest by when it was last released, from its stack card: a
    rollback is the newest), every image a keep_tags tag names or a lease names, and every release
    younger than keep_days;
  - the whole chain of every kept release: each layer image from the top down to the base, found through
    the labels imgbuild writes into every image (io.imgbuild.parent names the parent by digest);
  - every layer image (and its chain) younger than keep_days, and every key a lease younger than
    grace_hours names (a build or release that is running: builder.ship.leases);
  - beside each kept image: its measured manifest (sha256-HEX.imgbuild), its SBOM, and the release records
    of the tags that still name it.
Nothing outside the namespace is touched, and in it nothing imgbuild did not write is a candidate: an
image without imgbuild's labels, a tag of a shape imgbuild never writes (a signature, `latest`), nor a
manifest such a tag shares with one of imgbuild's (deleting by digest would delete that tag too).

A dry run (the default) lists the candidates and the bytes they free: the blobs that only candidates
reference, counted over every repository of the registry (a layer shared with a kept image, or with
another namespace's, frees nothing). `apply` reads the registry a second time and deletes, by digest
through the registry's API, what is a candidate in both readings, tops before what lies beneath; the
registry's own garbage collection, run offline, then frees the bytes (docs/retention.md).

Safe under concurrent work: a build or release holds a lease on every key of its plan from before its
first lookup until after its release, and each reading starts with the leases. An image pushed after the
first reading is in no candidate list of it; a run that leased, released or pushed between the readings
is seen by the second. What is left is a run that starts after the second reading and reuses a key in
the instant before gc deletes it: it fails on the missing image, or releases a chain missing that layer
image (the release itself still pulls, from its own repository); either way the next build of the stack
builds the key again.
"""

from __future__ import annotations

import calendar
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Callable

from builder.errors import ImgbuildError, RegistryError
from builder.load.retention import Retention
from builder.plan.keys import KEY_LEN
from builder.plan.layout import LAYERS, lease_repo, parent_of
from builder.ship import card as card_mod
from builder.ship import leases as lease_mod
from builder.ship.registry import DIGEST, Registry, json_object

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
IMAGE_CONFIGS = ("application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json")
KEY_TAG = re.compile(rf"^[0-9a-f]{{{KEY_LEN}}}\Z")
PENDING_TAG = re.compile(rf"^([0-9a-f]{{{KEY_LEN}}})\.pending-[0-9a-f]+\Z")
BESIDE_TAG = re.compile(r"^(sha256)-([0-9a-f]{64})\.(imgbuild|sbom|stack|att)\Z")   # measured manifest, SBOM, stack card, attestation
RECORD_TAG = re.compile(r"^imgbuild-release-[0-9a-f]{24}\Z")
DAY = 86400.0


class GcError(ImgbuildError):
    exit_code = 6
    label = "gc"


@dataclass
class Item:
    """One manifest of one repository, with every tag that names it there."""
    repo: str
    digest: str
    tags: list
    kind: str               # release | child | layer | pending | beside | record | lease | foreign | other
    media_type: str = ""
    size: int = 0           # the manifest's own bytes
    blobs: dict = field(default_factory=dict)     # digest -> size: its config and layers
    children: list = field(default_factory=list)  # an index's manifests (digests, in the same repository)
    created: float | None = None
    released: float | None = None   # a release: when it was last released (its stack card), else built
    labels: dict = field(default_factory=dict)
    subject: str | None = None   # beside: the image digest; record: the tag it records; lease: the run
    keep: str = ""          # why it is kept; "" for a candidate

    @property
    def ref(self) -> str:
        return f"{self.repo}:{','.join(self.tags)}" if self.tags else f"{self.repo}@{self.digest[:19]}"


@dataclass
class GcPlan:
    registry: str
    namespace: str
    policy: Retention
    items: list               # every Item of the namespace (candidates and kept)
    freed_blobs: dict         # digest -> bytes: the blobs (and manifests) only candidates reference
    missing: list             # chains of kept releases that lack a layer image: "repo@digest (needed by ...)"
    unread: list = field(default_factory=list)   # other namespaces' repositories that could not be read
    deletes_allowed: bool | None = None

    @property
    def freed(self) -> int:
        return sum(self.freed_blobs.values())

    @property
    def candidates(self) -> list:
        return [i for i in self.items if not i.keep]

    def to_json(self) -> dict:
        return {"registry": self.registry, "namespace": self.namespace, "policy": {
                    "keep_releases": self.policy.keep_releases, "keep_tags": list(self.policy.keep_tags),
                    "keep_days": self.policy.keep_days, "grace_hours": self.policy.grace_hours},
                "deletes_allowed": self.deletes_allowed, "bytes_freed": self.freed, "missing": self.missing,
                "unread": self.unread,
                "blobs_freed": sorted(self.freed_blobs),
                "candidates": [_row(i) for i in self.candidates],
                "kept": [_row(i) for i in self.items if i.keep]}


def _row(i: Item) -> dict:
    return {"repository": i.repo, "digest": i.digest, "tags": i.tags, "kind": i.kind, "created": i.created,
            "bytes": i.size + sum(i.blobs.values()), "kept": i.keep or None}


def _created(text) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(str(text)[:19], "%Y-%m-%dT%H:%M:%S")))
    except (TypeError, ValueError):
        return None


class _Reader:
    """Reads the registry once: every repository's tags and manifests, and the config of each image."""

    def __init__(self, reg: Registry, namespace: str):
        self.reg, self.ns = reg, namespace
        self.items: dict = {}      # (repo, digest) -> Item
        self.unread: list = []     # foreign repositories that could not be read (their blobs are unknown)

    def kind_of(self, repo: str, tag: str) -> str:
        if not repo.startswith(self.ns + "/"):
            return "foreign"
        if repo == lease_repo(self.ns):
            return "lease" if tag.startswith(lease_mod.PREFIX) else "other"
        if BESIDE_TAG.match(tag):
            return "beside"
        if tag.startswith("sha256-"):
            return "other"     # a signature or attestation (cosign's .sig, .att): not imgbuild's
        if repo.startswith(f"{self.ns}/{LAYERS}/"):
            return "layer" if KEY_TAG.match(tag) else "pending" if PENDING_TAG.match(tag) else "other"
        return "record" if RECORD_TAG.match(tag) else "release"

    def read(self) -> None:
        # The leases first, and only then the list of repositories. A run takes its lease before it pushes or
        # releases anything, and drops it only after its release: a run whose lease is gone here has released
        # already, so what is read after sees its release, and a run whose lease is read here has its keys
        # kept. (Read last, a run could release after its stack's repository was read and drop its lease
        # before the leases were.)
        self.repo(lease_repo(self.ns))
        for repo in self.reg.repositories():
            if repo == lease_repo(self.ns):
                continue
            if repo.startswith(self.ns + "/"):
                self.repo(repo)
                continue
            try:   # another namespace: read only for the blobs it shares; unreadable is not fatal
                self.repo(repo)
            except (ImgbuildError, KeyError, TypeError, ValueError, AttributeError) as exc:
                self.unread.append(f"{repo} ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})")

    def repo(self, repo: str) -> None:
        by_digest: dict = {}
        for tag in self.reg.tags(repo):
            digest = self.reg.manifest_digest(repo, tag)
            if digest:
                by_digest.setdefault(digest, []).append(tag)
        for digest, tags in by_digest.items():
            kinds = {self.kind_of(repo, t) for t in tags}
            # One manifest, several kinds of tag (a key and its pending tag): the image's kind wins. A tag
            # imgbuild never writes on the same manifest keeps it (deleting by digest would delete that tag).
            kind = next(k for k in ("foreign", "release", "layer", "pending", "lease", "record", "beside", "other")
                        if k in kinds)
            item = self.add(repo, digest, tags, kind)
            if item is not None and "other" in kinds and kind != "other":
                item.keep = "also named by " + next(t for t in tags if self.kind_of(repo, t) == "other") + \
                            " (a tag imgbuild does not write)"

    def add(self, repo: str, digest: str, tags: list, kind: str) -> Item | None:
        found = self.reg.get_manifest(repo, digest)
        if not found:
            return None   # deleted since it was listed
        manifest, media_type, _ = found
        item = Item(repo=repo, digest=digest, tags=sorted(tags), kind=kind, media_type=media_type)
        if media_type in INDEX_TYPES:
            item.children = [m["digest"] for m in manifest.get("manifests") or []
                             if isinstance(m, dict) and isinstance(m.get("digest"), str) and DIGEST.match(m["digest"])]
        else:
            descriptors = [manifest.get("config") or {}] + list(manifest.get("layers") or [])
            item.blobs = {d["digest"]: d["size"] for d in descriptors if isinstance(d, dict)
                          and isinstance(d.get("digest"), str) and isinstance(d.get("size"), int)}
        config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
        if kind != "foreign" and config.get("mediaType") in IMAGE_CONFIGS and isinstance(config.get("digest"), str):
            body = json_object(self.reg.get_blob(repo, config["digest"], limit=1 << 24), f"the config of {repo}@{digest}")
            inner = body.get("config") if isinstance(body.get("config"), dict) else {}
            labels = inner.get("Labels") if isinstance(inner.get("Labels"), dict) else {}
            item.labels = {str(k): v for k, v in labels.items() if isinstance(v, str)}
            # When imgbuild built it: its label. The config's own "created" is the parent's for a layer that
            # adds no files (BuildKit keeps it), so it is only the fallback.
            item.created = _created(item.labels.get("org.opencontainers.image.created")) or _created(body.get("created"))
        annotations = manifest.get("annotations") if isinstance(manifest.get("annotations"), dict) else {}
        if kind == "record":
            item.subject = annotations.get("io.imgbuild.tag")
        elif kind == "beside":
            m = next(BESIDE_TAG.match(t) for t in tags if BESIDE_TAG.match(t))
            item.subject = f"{m.group(1)}:{m.group(2)}"
        self.items[(repo, digest)] = item
        for child in item.children:   # stored by digest only: no tag lists them
            if (repo, child) not in self.items:
                self.add(repo, child, [], "foreign" if kind == "foreign" else "child")
        return item


def plan_gc(reg: Registry, namespace: str, policy: Retention, now: float | None = None,
            say: Callable[[str], None] = lambda _: None) -> GcPlan:
    """What the policy keeps and what it does not, read from the registry now; deletes nothing."""
    now = time.time() if now is None else now
    reader = _Reader(reg, namespace)
    say(f"gc: reading every repository of {reg.host} ...")
    reader.read()
    items = reader.items
    mine = [i for i in items.values() if i.kind != "foreign"]
    for i in mine:
        if i.kind == "other":
            i.keep = "not a tag imgbuild writes"
    missing: list = []
    # A layer image by digest and by each of its tags: a parent label names one or the other.
    by_ref = {(i.repo, r): i for i in mine if i.kind in ("layer", "pending") for r in [i.digest, *i.tags]}

    def chain(item: Item, why: str) -> None:
        """Keep the layer image `item` copies (or is) and every one beneath it, by their labels. Where the
        copied layer image is gone, the chain is followed from the item's own parent label."""
        title = item.labels.get("org.opencontainers.image.title")
        here = items.get((f"{namespace}/{LAYERS}/{title}", item.digest)) if title else None
        if title and here is None and item.kind not in ("layer", "pending"):
            missing.append(f"{namespace}/{LAYERS}/{title}@{item.digest[:19]} (the image of {item.ref})")
        here = here or item
        seen: set = set()
        while here is not None and (here.repo, here.digest) not in seen:
            seen.add((here.repo, here.digest))
            if not here.keep:
                here.keep = why
            repo, ref = _parent(here)
            if not repo.startswith(f"{namespace}/{LAYERS}/"):
                return   # the base: not ours
            here = by_ref.get((repo, ref))
            if here is None:
                missing.append(f"{repo}:{ref[:19]} (beneath {item.ref})")

    # Leases: a young one protects its keys; an old one is a candidate itself.
    live_keys = {}
    for i in list(mine):
        if i.kind == "lease":
            lease = _lease_of(reg, i)
            if lease is None:   # the run ended and deleted it since the listing
                mine.remove(i)
                items.pop((i.repo, i.digest), None)
                continue
            if now - (lease.started or 0) < policy.grace_hours * 3600:
                i.keep = f"a lease of a run started {_age(now - lease.started)} ago"
                live_keys.update({k: i.subject for k in lease.keys})
    # What the reader kept (a manifest also named by a tag imgbuild does not write) keeps its chain.
    for i in mine:
        if i.keep.startswith("also named by") and i.kind in ("layer", "pending", "release"):
            chain(i, f"beneath {i.ref}")
    # Releases, stack by stack: imgbuild's images only, ordered by when each was last released.
    by_repo: dict = {}
    for i in mine:
        if i.kind == "release":
            by_repo.setdefault(i.repo, []).append(i)
    for repo, releases in by_repo.items():
        for r in releases:   # an index: built when its newest image was
            if r.children:
                kids = [items.get((repo, c)) for c in r.children]
                r.created = max((k.created for k in kids if k and k.created), default=None)
                r.labels = next((k.labels for k in kids if k and k.labels), {})
        ours = []
        for r in releases:
            if "io.imgbuild.key" not in r.labels:
                r.keep = r.keep or "not an image imgbuild released (no io.imgbuild label)"
            else:
                r.released = _released(reg, r) or r.created
                ours.append(r)
        ours.sort(key=lambda r: (r.released or 0, r.digest), reverse=True)
        for rank, r in enumerate(ours):
            named = [t for t in r.tags if policy.named(t)]
            leased = r.labels.get("io.imgbuild.key", "")[:KEY_LEN] in live_keys
            if rank < policy.keep_releases:
                r.keep = r.keep or f"one of the newest {policy.keep_releases} releases of {repo.rsplit('/', 1)[-1]}"
            elif named:
                r.keep = r.keep or f"named by keep_tags ({named[0]})"
            elif leased:
                r.keep = r.keep or "a run holds a lease on its key (it may be releasing it again)"
            elif r.released is not None and now - r.released < policy.keep_days * DAY:
                r.keep = r.keep or f"released {_age(now - r.released)} ago, within keep_days {policy.keep_days}"
            elif r.released is None:
                r.keep = r.keep or "its age cannot be read"
            if r.keep:
                for c in r.children:
                    child = items.get((repo, c))
                    if child is not None:
                        child.keep = child.keep or f"an image of {r.ref}"
                        chain(child, f"beneath release {r.ref}")
                if not r.children:
                    chain(r, f"beneath release {r.ref}")
    # Layer images: young ones and leased keys, with their chains.
    for i in mine:
        if i.kind in ("layer", "pending") and not i.keep:
            keys = {t if KEY_TAG.match(t) else PENDING_TAG.match(t).group(1) for t in i.tags
                    if KEY_TAG.match(t) or PENDING_TAG.match(t)}
            leased = keys & set(live_keys)
            if leased:
                chain(i, f"a lease holds {sorted(leased)[0][:12]}")
            elif i.created is not None and now - i.created < policy.keep_days * DAY:
                chain(i, f"built {_age(now - i.created)} ago, within keep_days {policy.keep_days}")
            elif i.created is None:
                chain(i, "its age cannot be read")
    # What sits beside images, and the release records of tags that stay.
    kept_digests = {(i.repo, i.digest) for i in mine if i.keep and i.kind in ("release", "child", "layer", "pending")}
    staying_tags = {(i.repo, t) for i in mine if i.keep and i.kind == "release" for t in i.tags}
    for i in mine:
        if i.kind == "beside" and not i.keep and (i.repo, i.subject) in kept_digests:
            i.keep = f"beside {i.subject[:19]}"
        elif i.kind == "record" and not i.keep and (i.repo, i.subject) in staying_tags:
            i.keep = f"the release record of {i.subject}"
    return GcPlan(registry=reg.host, namespace=namespace, policy=policy, items=mine,
                  freed_blobs=_freed(reg, items), missing=sorted(set(missing)), unread=reader.unread)


def _released(reg: Registry, item: Item) -> float | None:
    """When a release was last made: the time its stack card records (promote writes it at every release, a
    rollback to an older image included); None for a release made before cards had one."""
    try:
        found = card_mod.read(reg, item.repo, item.digest)
    except RegistryError:
        return None
    return _created((found or {}).get("released"))


def _parent(item: Item) -> tuple[str, str]:
    return parent_of(item.labels) or ("", "")


def _lease_of(reg: Registry, item: Item) -> lease_mod.Lease | None:
    """The lease an item holds; None when it is gone. One whose document is not a lease's counts as expired;
    a registry that fails to answer stops gc (a lease it cannot read may protect a running build)."""
    found = reg.get_manifest(item.repo, item.digest)
    if found is None:
        return None
    manifest = found[0]
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    if not isinstance(config.get("digest"), str) or not DIGEST.match(config["digest"]):
        return lease_mod.Lease(tag="", digest=item.digest, started=0.0, keys={})
    body = reg.get_blob(item.repo, config["digest"], limit=1 << 20)
    try:
        data = json.loads(body)
        item.subject = str(data.get("run"))
        return lease_mod.Lease(tag=item.tags[0] if item.tags else "", digest=item.digest,
                               started=float(data.get("started") or 0),
                               keys={str(k): str(v) for k, v in dict(data.get("keys") or {}).items()})
    except (AttributeError, TypeError, ValueError):
        return lease_mod.Lease(tag="", digest=item.digest, started=0.0, keys={})


def _freed(reg: Registry, items: dict) -> dict:
    """The bytes only candidates reference: their blobs and their own manifests, less what anything kept
    (of any namespace) references."""
    kept: set = set()
    for i in items.values():
        if i.kind == "foreign" or i.keep:
            kept |= set(i.blobs) | {i.digest}
    freed: dict = {}
    for i in items.values():
        if i.kind != "foreign" and not i.keep:
            if i.digest not in kept and i.digest not in freed:
                try:
                    freed[i.digest] = len(reg.manifest_bytes(i.repo, i.digest, i.media_type))
                except RegistryError:
                    continue   # deleted since the listing (a run's lease as the run ends): it frees nothing more
            for blob, size in i.blobs.items():
                if blob not in kept:
                    freed[blob] = size
    return freed


ORDER = ("release", "child", "record", "layer", "pending", "beside", "lease")


def apply(reg: Registry, plan: GcPlan, say: Callable[[str], None], now: float | None = None) -> list:
    """Delete the candidates of plan that are candidates still, by a second reading of the registry made now:
    what a run leased, released or pushed since the plan was made stays. Returns the (repo, digest) deleted."""
    if not deletes_allowed(reg, plan.namespace):
        raise GcError(f"registry {reg.host} does not allow deleting manifests: nothing was deleted",
                      hint="enable deletes in its configuration (Distribution: storage.delete.enabled: true, or "
                           "REGISTRY_STORAGE_DELETE_ENABLED=true), restart it, and run gc again")
    again = plan_gc(reg, plan.namespace, plan.policy, now=now)
    still = {(i.repo, i.digest) for i in again.candidates}
    spared = [i for i in plan.candidates if (i.repo, i.digest) not in still]
    if spared:
        say(f"gc: {len(spared)} candidate(s) kept: needed since the listing (a run leased, released or pushed them)")
    candidates = [i for i in again.candidates if (i.repo, i.digest) in {(c.repo, c.digest) for c in plan.candidates}]
    done = []
    for kind in ORDER:
        batch = [i for i in candidates if i.kind == kind]
        if kind in ("release", "layer", "pending"):   # the leases once more, just before: a run started meanwhile
            leased = {k for lease in lease_mod.read(reg, plan.namespace)
                      if time.time() - lease.started < plan.policy.grace_hours * 3600 for k in lease.keys}
            held = [i for i in batch if {t[:KEY_LEN] for t in i.tags} & leased
                    or i.labels.get("io.imgbuild.key", "")[:KEY_LEN] in leased]
            if held:
                say(f"gc: {len(held)} candidate(s) kept: a run leased them just now")
                batch = [i for i in batch if i not in held]
        if kind == "layer":   # tops first: a gc stopped half way leaves no image above a deleted one
            depth = _depths(again)
            batch.sort(key=lambda i: -depth.get((i.repo, i.digest), 0))
        for i in batch:
            if reg.delete_manifest(i.repo, i.digest):
                done.append((i.repo, i.digest))
                say(f"deleted {i.ref} ({i.kind})")
            else:
                say(f"already gone: {i.ref}")
    return done


def _depths(plan: GcPlan) -> dict:
    """(repo, digest) -> how many layer images of the namespace lie at and beneath it."""
    at = {(i.repo, r): i for i in plan.items if i.kind in ("layer", "pending") for r in [i.digest, *i.tags]}
    out = {}
    for i in plan.items:
        n, here, seen = 0, i, set()
        while here is not None and (here.repo, here.digest) not in seen:
            seen.add((here.repo, here.digest))
            here = at.get(_parent(here))
            n += 1
        out[(i.repo, i.digest)] = n
    return out


def deletes_allowed(reg: Registry, namespace: str) -> bool:
    """Ask the registry, deleting nothing: a digest that cannot exist is refused 405 by a registry without
    deletes, 404 by one with them."""
    probe = "sha256:" + secrets.token_hex(32)
    try:
        reg.delete_manifest(lease_repo(namespace), probe)
    except RegistryError as exc:
        if "does not allow deleting" in str(exc):
            return False
        raise
    return True


def _age(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(0, int(seconds // 60))} min"
    if seconds < 2 * DAY:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / DAY:.0f} days"


__all__ = ["GcError", "GcPlan", "Item", "plan_gc", "apply", "deletes_allowed"]
