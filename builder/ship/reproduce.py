"""`imgbuild verify --rebuild`: build a released image's chain again on a clean engine and say, layer by
layer, whether the same content key gave the same bytes.

Each layer is rebuilt on its released parent (by digest), not on the rebuilt one: a layer that drifts does
not make every layer above it drift too, so each verdict is about that layer's own recipe. A layer is
identical when its layer digests (the uncompressed tars' diff_ids in the image config) are the released
ones; otherwise both tars are read and every path that differs is named with its likely cause
(builder.diff.layerdiff). Where the engine cannot fix file times (Docker's BuildKit before 0.13), that is
said first and differences of time alone are counted apart, not reported as drift of the recipe.

The result can be stored beside the release (an artifact tagged sha256-DIGEST.rebuild in the release's
repository); the catalog shows it.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from builder.core import layerdiff
from builder.errors import ImgbuildError
from builder.plan.layout import layer_repo, release_repo
from builder.ship.engines import choose
from builder.ship.hostconf import HostConf
from builder.ship.oci import put_document, stored_document
from builder.ship.registry import Ref, Registry

ARTIFACT = "application/vnd.imgbuild.rebuild.v1+json"


class RebuildError(ImgbuildError):
    exit_code = 7
    label = "verify --rebuild"


@dataclass
class LayerVerdict:
    layer: str
    key: str
    released: str                  # the released image's digest
    released_layers: list          # its own diff_ids (above its parent's)
    rebuilt_layers: list
    identical: bool
    time_only: bool = False        # differs only in file times the engine could not fix
    causes: dict = field(default_factory=dict)   # cause -> paths
    changes: list = field(default_factory=list)  # [{path, what, cause, detail}]
    seconds: float = 0.0


@dataclass
class RebuildReport:
    target: str
    stack: str
    digest: str
    engine: str
    file_times: str | None         # why the engine cannot fix file times, or None
    epoch: int
    layers: list = field(default_factory=list)
    when: str = ""

    @property
    def identical(self) -> int:
        return sum(1 for v in self.layers if v.identical)

    def to_json(self) -> dict:
        return {"target": self.target, "stack": self.stack, "digest": self.digest, "engine": self.engine,
                "file_times": self.file_times, "source_date_epoch": self.epoch, "when": self.when,
                "identical": self.identical, "total": len(self.layers), "layers": [asdict(v) for v in self.layers]}


def rebuild_tag(digest: str) -> str:
    return digest.replace(":", "-") + ".rebuild"


def rebuild(prepared, target: str, say, engine_kind: str | None = None, docker: str | None = None,
            scratch: Path | None = None, layers: tuple = ()) -> RebuildReport:
    """Rebuild the chain of `target` (stack=NAME, or an image imgbuild built from this spec) on a clean engine;
    layers: only these layers of it (each still on its released parent)."""
    spec = prepared.spec
    plan = prepared.require()
    registry = Registry(spec.site.registry)
    engine = choose(engine_kind, spec.site.engine, docker)
    ref, digest, stack = _released(prepared, plan, registry, target)
    _, config = _image(registry, Ref.parse(ref).repo, digest)
    key = (config.get("config") or {}).get("Labels", {}).get("io.imgbuild.key", "")
    top = plan.nodes.get(key)
    if top is None:
        raise RebuildError(f"{ref} was built from another revision of {spec.file}: its key {key[:16] or '(none)'} is no "
                           "layer of this checkout's plan", hint="check out the revision the release was built from "
                           "(imgbuild verify IMAGE prints it where the site signs), and its stacks.lock.yaml")
    chain = []
    node = top
    while node is not None:
        chain.append(node)
        node = plan.nodes.get(node.parent) if node.parent else None
    chain.reverse()
    unknown = set(layers) - {n.name for n in chain}
    if unknown:
        raise RebuildError(f"--layer {', '.join(sorted(unknown))}: not a layer of {ref} (its layers: "
                           f"{', '.join(n.name for n in chain)})")
    chain = [n for n in chain if not layers or n.name in layers]
    version = engine.ping()
    why_times = engine.file_times(version)
    report = RebuildReport(target=target, stack=stack, digest=digest, engine=f"{engine.kind} {version}",
                           file_times=why_times, epoch=spec.site.source_date_epoch,
                           when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    say(f"rebuilding {len(chain)} layer(s) of {ref} on a clean {engine.kind} engine ({version}), each on its "
        f"released parent")
    if why_times:
        say(f"note: {why_times}; differences of file times alone are counted apart, not as drift of the recipe")
    from builder.ship.pipeline import Builder   # the build path of `imgbuild build` itself, step for step
    scratch = Path(scratch or os.environ.get("IMGBUILD_SCRATCH") or tempfile.gettempdir())
    with engine.clean(scratch) as clean, tempfile.TemporaryDirectory(prefix="imgbuild-rebuild-", dir=scratch) as tmp:
        builder = Builder(spec, clean, registry, HostConf.from_env(), say, gpu=False)
        with builder.hostconf.secrets() as secrets:
            for i, node in enumerate(chain, 1):
                report.layers.append(_one(builder, plan, node, secrets, registry, clean, Path(tmp),
                                          f"[{i}/{len(chain)}] {node.name} {node.short[:12]}", bool(why_times), say))
    return report


def _released(prepared, plan, registry: Registry, target: str) -> tuple[str, str, str]:
    """(reference, digest, stack name) of what is verified."""
    spec = prepared.spec
    if target.startswith("stack="):
        name = target.split("=", 1)[1]
        stack = spec.stacks.get(name)
        if stack is None:
            raise RebuildError(f"no stack {name!r} in {spec.file}")
        top = plan.top(name)
        repo = layer_repo(spec.site.namespace, top.name)
        digest = registry.manifest_digest(repo, top.short)
        if not digest:
            raise RebuildError(f"stack {name!r} is not built: {spec.site.registry}/{repo}:{top.short} is not in the registry",
                               hint=f"imgbuild build stack={name}")
        return f"{spec.site.registry}/{repo}@{digest}", digest, name
    ref = Ref.parse(target)
    digest = ref.digest or Registry(ref.registry).manifest_digest(ref.repo, ref.reference)
    if not digest:
        raise RebuildError(f"{target} is not in the registry")
    stacks = [s for s in prepared.names if release_repo(spec.site.namespace, s) == ref.repo] or ["?"]
    return f"{ref.registry}/{ref.repo}@{digest}", digest, stacks[0]


def _image(registry: Registry, repo: str, digest: str) -> tuple[dict, dict]:
    """(manifest, config) of one image in the registry."""
    found = registry.get_manifest(repo, digest)
    if not found:
        raise RebuildError(f"{registry.host}/{repo}@{digest} is not in the registry")
    manifest = found[0]
    if "config" not in manifest:
        raise RebuildError(f"{registry.host}/{repo}@{digest} is an index, not one image: name one platform's digest")
    return manifest, json.loads(registry.get_blob(repo, manifest["config"]["digest"]))


def _diff_ids(config: dict) -> list:
    return list((config.get("rootfs") or {}).get("diff_ids") or [])


def _one(builder, plan, node, secrets, registry: Registry, engine, tmp: Path, prefix: str, times_unfixed: bool,
         say) -> LayerVerdict:
    spec = builder.spec
    started = time.time()
    repo = layer_repo(spec.site.namespace, node.name)
    digest = registry.manifest_digest(repo, node.short)
    if not digest:
        raise RebuildError(f"{node.name} ({node.short[:12]}) is not in the registry: nothing to compare with")
    manifest, config = _image(registry, repo, digest)
    released = _diff_ids(config)
    blobs = dict(zip(released, manifest.get("layers") or []))   # diff_id -> its blob's descriptor
    if node.parent:
        parent = plan.nodes[node.parent]
        prepo = layer_repo(spec.site.namespace, parent.name)
        parent_ref = f"{spec.site.registry}/{prepo}@{registry.manifest_digest(prepo, parent.short)}"
    else:
        parent_ref = node.base_ref
    local, _ = builder.build_image(plan, node, parent_ref, secrets, prefix, then="comparing with the release")
    try:
        # The parent as the clean engine holds it (a base by index digest: this platform's image). BuildKit
        # keeps what it pulled for a build to itself, so the Docker engine may need to pull it.
        if engine.inspect(parent_ref) is None:
            engine.pull(parent_ref, node.platform)
        below = len(((engine.inspect(parent_ref) or {}).get("RootFS") or {}).get("Layers") or [])
        info = engine.inspect(local) or {}
        rebuilt = list((info.get("RootFS") or {}).get("Layers") or [])
        if not below or rebuilt[:below] != released[:below]:
            raise RebuildError(f"{node.name}: the rebuild does not stand on the released parent's layers "
                               f"({parent_ref})")
        mine, theirs = rebuilt[below:], released[below:]
        verdict = LayerVerdict(node.name, node.key, digest, theirs, mine, identical=mine == theirs)
        if verdict.identical:
            say(f"{prefix}: identical ({len(mine)} layer(s): {', '.join(d[7:19] for d in mine) or 'none'})")
        else:
            diff = _file_diff(registry, repo, digest, {d: blobs.get(d) for d in theirs}, engine, local, mine, tmp)
            if times_unfixed:
                verdict.time_only = all(set(c.what) == {"time"} for c in diff.changes)
            verdict.changes = [{"path": c.path, "what": list(c.what), "cause": c.cause, "detail": c.detail}
                               for c in diff.changes]
            verdict.causes = dict(diff.causes.most_common())
            head = ("differs in file times only, which this engine cannot fix" if verdict.time_only
                    else f"DRIFTS: {len(diff.changes)} path(s) differ")
            say(f"{prefix}: {head}")
            for line in diff.summary():
                say(f"      {line}")
    finally:
        engine.remove(local)
    verdict.seconds = round(time.time() - started, 1)
    return verdict


def _file_diff(registry: Registry, repo: str, digest: str, theirs: dict, engine, local: str, mine: list,
               tmp: Path) -> layerdiff.LayerDiff:
    """The file-level difference of a node's own layers (all of them, merged in order, as a reader sees them);
    theirs: each released layer's diff_id and its blob's descriptor."""
    folder = tmp / "released"
    blobs = _fetch_own_layers(registry, repo, digest, theirs, folder)
    archive = tmp / "rebuilt.tar"
    engine.save(local, archive)
    try:
        released, rebuilt = _released_entries(blobs, list(theirs)), _archive_entries(archive, mine)
        diff = layerdiff.compare(released, rebuilt)
        keep = layerdiff.small_changed(diff, released, rebuilt)
        if keep:   # a second read, of the few small files that differ, to show how
            layerdiff.show_contents(diff, _released_entries(blobs, list(theirs), keep),
                                    _archive_entries(archive, mine, keep))
        return diff
    finally:
        archive.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


def _fetch_own_layers(registry: Registry, repo: str, digest: str, layers: dict, folder: Path) -> dict:
    """{diff_id: file} of the released node's own layers ({diff_id: blob descriptor}), their blobs as stored
    (compressed), fetched from the registry one by one and checked against their digests. The layers beneath
    (torch's gigabytes under a project layer) are not fetched: they are the parent's, which the rebuild stood
    on unchanged."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for diff_id, layer in layers.items():
        if layer is None:
            raise RebuildError(f"{registry.host}/{repo}@{digest}: its config names layer {diff_id[:19]}, its manifest "
                               "has no blob for it")
        path = folder / layer["digest"].replace(":", "-")
        registry.download_blob(repo, layer["digest"], int(layer["size"]), path)
        out[diff_id] = path
    return out


def _released_entries(blobs: dict, diff_ids: list, keep: frozenset = frozenset()) -> dict:
    """The released node's own layers, read from their fetched blobs ({diff_id: file})."""
    entries: dict = {}
    for diff_id in diff_ids:
        with open(blobs[diff_id], "rb") as blob:
            entries.update(layerdiff.read_layer(blob, keep))   # later layers win; whiteouts are entries
    return entries


def _archive_entries(archive: Path, diff_ids: list, keep: frozenset = frozenset()) -> dict:
    """The rebuilt node's own layers from `docker save` / `podman save` (docker-archive: manifest.json names
    each layer's tar in order, the config its diff_id)."""
    entries: dict = {}
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))[0]
        config = json.load(tar.extractfile(manifest["Config"]))
        by_id = dict(zip(_diff_ids(config), manifest["Layers"]))
        for diff_id in diff_ids:
            with tar.extractfile(by_id[diff_id]) as layer:
                entries.update(layerdiff.read_layer(layer, keep))
    return entries


def record(registry: Registry, report: RebuildReport, repo: str) -> str:
    """Store the result beside the released image: an OCI artifact tagged sha256-DIGEST.rebuild."""
    put_document(registry, repo, rebuild_tag(report.digest), report.to_json(), ARTIFACT, report.digest)
    return f"{registry.host}/{repo}:{rebuild_tag(report.digest)}"


def recorded(registry: Registry, repo: str, digest: str) -> dict | None:
    """The rebuild result stored beside an image, or None."""
    return stored_document(registry, repo, rebuild_tag(digest), ARTIFACT, "the rebuild result")
