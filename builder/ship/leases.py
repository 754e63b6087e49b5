"""Leases: the keys a running build or release may still need, written to the registry so `imgbuild gc` keeps them.

A build looks a key up, decides to reuse it, and builds on it minutes later; a release reads every key of
its stacks, then copies the top. A key that no release names yet and that is older than the retention
period would be a gc candidate in between. So each run takes a lease before its first lookup: a small OCI
artifact at NAMESPACE/imgbuild-leases:lease-RUN whose config lists every key of its plan and when it
started. gc keeps every key of a lease younger than the policy's grace period (and everything beneath
them), and deletes older leases as those of runs that were killed. The run deletes its lease when it
ends, whatever the outcome. A registry that refuses the lease or its deletion does not fail the run: the
lease only narrows gc's window, and gc refuses to run against a registry without deletes.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from builder.errors import ImgbuildError
from builder.plan.layout import lease_repo
from builder.ship.registry import Registry, json_object

LEASE_TYPE = "application/vnd.imgbuild.lease.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
PREFIX = "lease-"


@dataclass(frozen=True)
class Lease:
    tag: str
    digest: str
    started: float          # unix time the run took it
    keys: dict              # short key -> layer name


def take(reg: Registry, namespace: str, run_id: str, keys: dict) -> str:
    """Write the lease of run_id for keys ({short key: layer}); returns its manifest digest."""
    repo = lease_repo(namespace)
    config = json.dumps({"run": run_id, "started": time.time(), "keys": keys}, sort_keys=True).encode()
    digest = reg.put_blob(repo, config)
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"mediaType": LEASE_TYPE, "digest": digest, "size": len(config)}, "layers": [],
                       "annotations": {"io.imgbuild.run": run_id}}, sort_keys=True).encode()
    return reg.put_manifest(repo, PREFIX + run_id, body, OCI_MANIFEST)


@contextlib.contextmanager
def held(reg: Registry, namespace: str, run_id: str, keys: dict, say: Callable[[str], None]) -> Iterator[None]:
    """Hold a lease on keys for the length of the block; a registry that refuses it is said, not fatal."""
    digest = None
    try:
        digest = take(reg, namespace, run_id, keys)
    except ImgbuildError as exc:
        say(f"note: no lease taken ({str(exc).splitlines()[0][:160]}): `imgbuild gc` running meanwhile may delete "
            "a key this run reuses, which then fails cleanly and a rerun rebuilds")
    try:
        yield
    finally:
        if digest:
            try:
                reg.delete_manifest(lease_repo(namespace), digest)
            except ImgbuildError:
                pass   # it expires: gc deletes leases older than its grace period


def read(reg: Registry, namespace: str) -> list[Lease]:
    """Every lease in the namespace; one that cannot be read is returned with started=0 (expired)."""
    repo = lease_repo(namespace)
    out = []
    for tag in reg.tags(repo):
        if not tag.startswith(PREFIX):
            continue
        found = reg.get_manifest(repo, tag)
        if not found:
            continue
        manifest, _, digest = found
        try:
            config = json_object(reg.get_blob(repo, manifest["config"]["digest"], limit=1 << 20), f"lease {tag}")
            keys = {str(k): str(v) for k, v in dict(config.get("keys") or {}).items()}
            started = float(config.get("started") or 0)
        except (ImgbuildError, KeyError, TypeError, ValueError):
            keys, started = {}, 0.0
        out.append(Lease(tag=tag, digest=digest, started=started, keys=keys))
    return out


__all__ = ["Lease", "take", "held", "read"]
