"""`imgbuild build`: plan, skip what the registry has, build the rest with BuildKit, validate every
image from the inside, push it under its content key, and move release tags only if all passed.

Order of trust: an image reaches the registry under its content key only after its checks passed,
so a key found there is a validated image; a release tag moves only after every node of every
selected stack is such an image. Any failure stops before the first tag moves. A layer may be
built on its parent's local image while the parent is still checked and pushed (builder.ship.schedule),
but it reaches the registry only after its parent did.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from builder import __version__
from builder.ship.checks import CheckResult, run_checks
from builder.ship.engine import BuildRequest, Engine
from builder.ship.engines import PlatformEngine, choose, engines
from builder.errors import ImgbuildError, RegistryError, SourceError, SpecError, ValidationFailed
from builder.ship.hostconf import HostConf
from builder.ship.progress import Progress, env_progress
from builder.ship.manifest import build_manifest, push_manifest
from builder.plan.layout import layer_repo, pending_tag
from builder.plan.keys import KEY_LEN, Node, Plan, file_refs, sha256
from builder.rules.review import gate
from builder.ship.publish import PublishError, promote, release_serial
from builder.ship import leases, trust
from builder.ship.registry import Registry
from builder.plan.render import download_path, input_path
from builder.ship.schedule import Handoff, schedule
from builder.ship.sources import export
from builder.load.params import Download, FileRef
from builder.ship.downloads import place
from builder.load.ciconf import release_refusal
from builder.load.spec import Spec

Say = Callable[[str], None]


@dataclass
class NodeResult:
    key: str
    layer: str
    action: str                    # reuse | build | revalidate | blocked
    status: str = "pending"        # passed | failed | blocked | skipped-existing
    image: str | None = None
    digest: str | None = None
    seconds: float = 0.0
    log: str | None = None
    checks: list = field(default_factory=list)
    error: str | None = None


@dataclass
class BuildReport:
    run_dir: str
    nodes: dict = field(default_factory=dict)       # key -> NodeResult
    tags: dict = field(default_factory=dict)        # stack -> {tag: digest}
    ok: bool = False
    error: str | None = None
    held: str = ""                                  # why no tag was moved here (a branch's CI job)

    def write(self) -> Path:
        path = Path(self.run_dir) / "report.json"
        path.write_text(json.dumps({"ok": self.ok, "error": self.error, "tags": self.tags, "held": self.held,
                                    "nodes": {k: asdict(v) for k, v in self.nodes.items()}}, indent=2))
        return path


def state_dir() -> Path:
    return Path(os.environ.get("IMGBUILD_HOME", ".imgbuild"))


def copy_input(ref: FileRef, dest: Path) -> None:
    """A file beside stacks.yaml into the context, only if it still holds the bytes that were hashed
    into the content key when stacks.yaml was read."""
    data = Path(ref.source).read_bytes() if ref.source and Path(ref.source).is_file() else None
    if data is None or hashlib.sha256(data).hexdigest() != ref.sha256:
        raise SourceError(f"{ref.path} changed or vanished since stacks.yaml was read (sha256 was "
                          f"{ref.sha256[:12]}); nothing was built from it", hint="run the command again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)


def assemble_context(node: Node, hostconf: HostConf, dest: Path) -> Path:
    """The build context of one node: its Dockerfile, its kind's files/, its verified sources and
    wheels. Nothing else from the host is sent to the engine."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    (dest / "Dockerfile").write_text(node.dockerfile)
    kind_files = node.layer.kind.folder / "files"
    if kind_files.is_dir():
        shutil.copytree(kind_files, dest / "files")
    for name, pin in node.sources.items():
        export(pin, dest / "sources" / name)
    for ref in {r for _, v in node.layer.params for r in file_refs(v)}:
        copy_input(ref, dest / input_path(ref))
    for download in {d for _, v in node.layer.params if isinstance(v, tuple) for d in v if isinstance(d, Download)}:
        place(download, dest / download_path(download), hostconf.ca_bundle)
    if node.locked:   # the lock's requirements files, bind-mounted by the pinned pip commands
        (dest / "imgbuild-lock").mkdir()
        for n, text in enumerate(node.locked):
            (dest / "imgbuild-lock" / f"{n:02d}.txt").write_text(text)
    if node.wheels:
        if not hostconf.wheelhouse:
            raise SpecError(f"layer {node.name!r} installs a wheel from the wheelhouse, but no wheelhouse is set",
                            hint="set IMGBUILD_WHEELHOUSE (or pip's find-links) to the folder holding "
                                 + ", ".join(w.file for w in node.wheels.values()))
        (dest / "wheelhouse").mkdir()
        for wheel in node.wheels.values():
            src = hostconf.wheelhouse / wheel.file
            if not src.is_file():
                raise SpecError(f"wheel {wheel.file} is not in the wheelhouse {hostconf.wheelhouse}")
            try:
                os.link(src, dest / "wheelhouse" / wheel.file)
            except OSError:
                shutil.copy2(src, dest / "wheelhouse" / wheel.file)
    return dest


def node_spec_hash(plan: Plan, node: Node) -> str:
    """Hash of the definitions of this node and every node beneath it: the same in every stack that
    shares the prefix, so the label never ties a shared image to one stack."""
    chain, cur = [], node
    while cur is not None:
        chain.append([cur.name, cur.layer.kind.name, json.dumps(cur.layer.params, default=str, sort_keys=True)])
        cur = plan.nodes.get(cur.parent) if cur.parent else None
    chain.append(["base", node_root(plan, node).base_ref])
    return sha256(json.dumps(chain))


def node_root(plan: Plan, node: Node) -> Node:
    while node.parent:
        node = plan.nodes[node.parent]
    return node


class Builder:
    def __init__(self, spec: Spec, engine: Engine, registry: Registry, hostconf: HostConf, say: Say,
                 gpu: bool | None = None, progress: Progress | None = None):
        """progress: the shown log (builder.ship.progress) that `say` prints through; plain lines of `say`
        when not given."""
        self.spec, self.engine, self.registry, self.hostconf, self.say = spec, engine, registry, hostconf, say
        self.progress = progress or Progress(say)
        self.twins: set[str] = set()     # layer names that two nodes of the plan bear (other parents)
        self.gpu = engine.has_gpu() if gpu is None else gpu
        self.run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        # Set when the run is interrupted (Ctrl-C, SIGTERM): a node whose build ended just before the signal
        # must not go on to validate and publish in its worker thread while the run unwinds.
        self.stopping = threading.Event()
        # Names this run's staged images: CI jobs in containers on many hosts share pids and seconds.
        self.stage_id = secrets.token_hex(4)
        self.locals: list[tuple] = []    # (engine, local image) this run built and checked (removed when it ends)
        # platform -> PlatformEngine (builder.ship.engines): set by build() for the plan's platforms; the
        # engine itself, native, for any platform not named (unit tests, validate of one platform)
        self.engines: dict = {}
        self.run_dir = state_dir() / "runs" / self.run_id
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Where this run writes and what it may sign (site.trust): the release namespace and its signing key
        # for the protected pipeline, the staging namespace for everyone else.
        self.zone = trust.zone(spec)
        self.source: dict = {}           # key -> the repository its image was found in, where not self.repo's

    def repo(self, node: Node) -> str:
        """The repository this run writes a node's image to (its zone's namespace)."""
        return layer_repo(self.zone.namespace, node.name)

    def where(self, node: Node) -> str:
        """The repository a node's image is in: a staging run reuses the release namespace's images."""
        return self.source.get(node.key, self.repo(node))

    def proven(self, repo: str, node: Node, digest: str) -> str | None:
        return trust.proven(self.registry, self.zone, repo, node, digest, self.gpu)

    def on(self, node: Node) -> PlatformEngine:
        """The engine that builds and checks a node, and whether it emulates the node's platform."""
        return self.engines.get(node.platform) or PlatformEngine(node.platform, self.engine)

    def lookup(self, node: Node) -> tuple[str, str | None, str | None]:
        """(action, digest, why): reuse an image whose stored manifest proves it passed this node's checks,
        revalidate one that is there without that proof (and say why), or build one that is absent."""
        if self.zone.name == "staging":
            # The release namespace is staging's cache: an image the protected pipeline vouches for is reused
            # (read, never written); anything else is built again here.
            released = layer_repo(self.zone.release_namespace, node.name)
            digest = self.registry.manifest_digest(released, node.short)
            if digest and self.proven(released, node, digest) is None:
                self.source[node.key] = released
                return "reuse", digest, None
        repo = self.repo(node)
        digest = self.registry.manifest_digest(repo, node.short)
        if not digest:
            return "build", None, None
        why = self.proven(repo, node, digest)
        if why is None:
            return "reuse", digest, None
        if trust.signed_here(self.zone, repo):
            untrusted, _ = trust.vouched(self.registry, self.zone, repo, node, digest)
            if untrusted:
                # Bytes nobody trusted wrote (a branch's job, a registry writer): validating them again would
                # sign whatever they hold. They are built again from the reviewed spec, and the key tag moves.
                self.say(f"{node.name} ({node.short[:12]}): the key names {digest[:19]}, which the protected "
                         f"pipeline does not vouch for ({untrusted}); building it again")
                return "build", None, None
        return "revalidate", digest, why

    def labels(self, plan: Plan, node: Node, parent_ref: str) -> dict:
        root = node_root(plan, node)
        base = root.base_ref or ""
        return {
            "org.opencontainers.image.created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "org.opencontainers.image.title": node.name,
            "org.opencontainers.image.version": node.short,
            "org.opencontainers.image.vendor": "imgbuild",
            "org.opencontainers.image.base.name": base.split("@")[0],
            "org.opencontainers.image.base.digest": base.split("@")[1] if "@" in base else "",
            "io.imgbuild.builder-version": __version__,
            "io.imgbuild.key": node.key,
            "io.imgbuild.parent": parent_ref,
            "io.imgbuild.spec-hash": node_spec_hash(plan, node),
        }

    def run(self, plan: Plan, stacks: list[str], date: str | None = None, only: str | None = None,
            jobs: int = 1) -> BuildReport:
        """Build what the registry lacks, validate, and (for whole stacks) move the release tags.
        only: one node's key (CI's node job): its parent must already be in the registry with passing
        checks; nothing is released. jobs: how many independent nodes are built at once on the engine.
        The run holds a lease on its plan's keys from before its first lookup to its end (builder.ship.leases):
        `imgbuild gc` keeps them meanwhile."""
        with leases.held(self.registry, self.zone.namespace, f"{self.run_id}-{self.stage_id}",
                         {n.short: n.name for n in plan.nodes.values()}, self.say):
            return self._run(plan, stacks, date, only, jobs)

    def _run(self, plan: Plan, stacks: list[str], date: str | None, only: str | None, jobs: int) -> BuildReport:
        report = BuildReport(run_dir=str(self.run_dir))
        keys = list(plan.nodes)
        self.twins = {name for name, n in Counter(node.name for node in plan.nodes.values()).items() if n > 1}
        if only is not None:
            keys = [self.node_key(plan, only)]
        order = {key: i for i, key in enumerate(keys, 1)}
        # Look everything up first: the plan with its actions is shown before an hour of building.
        actions = {key: self.lookup(plan.nodes[key]) for key in keys}
        digests: dict[str, str] = {}
        if only is not None:
            self.parent_ready(plan, plan.nodes[keys[0]], digests)
        counts = {a: sum(1 for v in actions.values() if v[0] == a) for a in ("reuse", "revalidate", "build")}
        self.say(f"plan: {len(keys)} layer image(s): {counts['reuse']} reuse, {counts['revalidate']} revalidate, "
                 f"{counts['build']} build" + (f", {jobs} at a time" if jobs > 1 else "")
                 + f"  (run {self.run_id}, logs in {self.run_dir})")
        failed: set[str] = set()
        handoffs = {key: Handoff() for key in keys}
        with self.hostconf.secrets() as secrets, self.progress:
            def one(key: str, built: Callable[[], None]) -> NodeResult:
                prefix = f"[{order[key]}/{len(keys)}] {plan.nodes[key].name} {key[:12]}"
                return self.do_node(plan, plan.nodes[key], actions[key], digests, handoffs, secrets, prefix, built)

            def blocked(key: str) -> NodeResult:
                self.say(f"[{order[key]}/{len(keys)}] {plan.nodes[key].name} {key[:12]}: not built, a layer "
                         "beneath it failed")
                return NodeResult(key=plan.nodes[key].short, layer=plan.nodes[key].name, action="blocked",
                                  status="blocked")

            def abort() -> None:   # works waiting for a parent's outcome give up; none publishes any more
                self.stopping.set()
                for h in handoffs.values():
                    h.done.set()

            try:
                for key, res in schedule(keys, lambda k: plan.nodes[k].parent, one, blocked, lambda r: r.status,
                                         jobs, early=self.pipelined, abort=abort):
                    report.nodes[key] = res
                    if res.status == "passed":
                        digests[key] = res.digest
                    else:
                        failed.add(key)
                    report.write()
            finally:
                # Local images go at the end of the run: a child may still be building on one. Those
                # that failed their checks stay, for debugging (their failure message names them).
                for engine in {id(e): e for e, _ in self.locals}.values():
                    engine.remove(*[ref for e, ref in self.locals if e is engine])
        # A stack is released when every one of its layer images passed; one that holds a failed layer
        # moves no tag, and does not hold back the others.
        good = [name for name in stacks if not failed & set(plan.stacks[name])] if only is None else []
        held = release_refusal(self.spec.site.ci, os.environ) if good else None
        if good and not held and self.zone.name == "staging":
            held = (f"this run holds no signing key, so it is in the staging zone ({self.zone.namespace}); only the "
                    "protected pipeline releases")
        if held:
            # A branch's CI job builds and validates like the release branch's, and moves no tag.
            self.say(f"release: not here: {held}; built and validated, no tag was moved")
            report.held, good = held, []
        if good:
            # promote reads every node's recorded results again: it trusts the registry, not this loop.
            report.tags = promote(self.spec, self.registry, plan, good, date, self.say, expected=digests,
                                  serial=release_serial(self.spec), zone=self.zone)
        if failed:
            bad = [name for name in stacks if failed & set(plan.stacks[name])]
            report.error = (f"{len(failed)} layer image(s) failed or were blocked; no tag of "
                            f"{', '.join(bad) or 'the node job'} was moved"
                            + (f" (released: {', '.join(good)})" if good else ""))
            report.write()
            return report
        report.ok = True
        report.write()
        return report

    @staticmethod
    def node_key(plan: Plan, given: str) -> str:
        """The node a key names: the full key or a unique prefix of it (at least 12 hex digits)."""
        found = [k for k in plan.nodes if k.startswith(given.lower())] if len(given) >= 12 else []
        if len(found) != 1:
            raise SpecError(f"--node {given!r} names {'no' if not found else 'more than one'} layer image of the "
                            "selected stacks" + (" (give at least 12 hex digits)" if len(given) < 12 else ""),
                            hint="the keys are listed by `imgbuild plan` (or plan --json: nodes[].key)")
        return found[0]

    def parent_ready(self, plan: Plan, node: Node, digests: dict) -> None:
        """A node job builds on what the registry holds: its parent must be there with passing checks."""
        if not node.parent:
            return
        parent = plan.nodes[node.parent]
        action, digest, why = self.lookup(parent)
        if action != "reuse":
            raise ValidationFailed(
                f"the parent of {node.name} ({node.short[:12]}) is {parent.name} ({parent.short[:12]}), which the "
                "registry " + ("does not hold" if action == "build" else f"holds without passing checks ({why})"),
                hint=f"build it first: imgbuild build --node {parent.short}")
        digests[node.parent] = digest

    def do_node(self, plan: Plan, node: Node, found: tuple, digests: dict, handoffs: dict, secrets: dict,
                prefix: str, built: Callable[[], None]) -> NodeResult:
        """Reuse, revalidate or build one node; never raises an ImgbuildError. Its parent has passed, or
        (a build) has been built locally and is still being validated and pushed: see build_node."""
        action, digest, why = found
        res = NodeResult(key=node.short, layer=node.name, action=action)
        start = time.time()
        try:
            if action == "reuse":
                res.status, res.digest = "passed", digest
                self.say(f"{prefix}: in the registry, validated; reused")
                return res
            if action == "revalidate":
                self.say(f"{prefix}: in the registry, not validated for these checks ({why}): pulling to validate")
                ref = f"{self.spec.site.registry}/{self.repo(node)}@{digest}"
                with self.progress.task(self.label(node), "pulling"):
                    self.on(node).engine.pull(ref, node.platform)
                results, facts = self.validate(node, ref, prefix)
                res.checks = [asdict(r) for r in results]
                self.record(node, facts, results, digest, labels={})
                if not all(r.ok for r in results):
                    raise ValidationFailed(self.failures(node, results))
            else:
                digest, results, log = self.build_node(plan, node, digests, handoffs, secrets, prefix, built)
                res.log = str(log)
                res.checks = [asdict(r) for r in results]
            res.status, res.digest = "passed", digest
        except ParentFailed as exc:
            res.status, res.error = "blocked", exc.message
            self.say(f"{prefix}: {exc.message}")
        except ImgbuildError as exc:
            res.status, res.error = "failed", exc.message
            if isinstance(exc, ChecksFailed):   # the report shows which checks failed, and why
                res.checks = [asdict(r) for r in exc.results]
            self.say(f"{prefix}: FAILED: {exc.message}" + (f"\n    log: {res.log}" if res.log else ""))
        finally:
            res.seconds = round(time.time() - start, 1)
            handoffs[node.key].finish(res)
        return res

    def build_node(self, plan: Plan, node: Node, digests: dict, handoffs: dict, secrets: dict, prefix: str,
                   built: Callable[[], None]):
        """Build, validate and publish one node. When its parent was built by this run and is still being
        validated and pushed, the build goes on the parent's local image meanwhile (see pipelined), and
        publishing waits for the parent's outcome: a failed parent blocks it. If the parent's key ended
        up naming another builder's image (first writer wins), this one was built on the wrong parent
        and is built again on the registry's."""
        mine, up = handoffs[node.key], handoffs.get(node.parent)
        early = up is not None and up.local is not None and not up.done.is_set() and self.pipelined
        if up is not None and not early:
            self.parent_passed(plan, node, up)
        if early:
            parent = plan.nodes[node.parent]
            try:
                local, labels = self.build_image(plan, node, up.local, secrets, prefix,
                                                 label=f"{self.spec.site.registry}/{self.repo(parent)}:{parent.short}")
                mine.local = local
                built()
                results, facts = self.checked(node, local, labels, prefix)
            except ImgbuildError as exc:
                # Built on a parent that then failed, its own failure is likely the parent's: it is
                # blocked, and the report points at the layer to fix first.
                try:
                    self.parent_passed(plan, node, up)
                except ParentFailed as blocked:
                    raise ParentFailed(f"{blocked.message} (built on it early, it failed too: {exc.message})") from None
                raise
            self.parent_passed(plan, node, up)
        else:
            local, labels = self.build_image(plan, node, self.parent_ref(plan, node, digests, handoffs), secrets, prefix)
            mine.local = local
            built()
            results, facts = self.checked(node, local, labels, prefix)
        if early:
            if not up.own:
                self.say(f"{prefix}: the key beneath it names another builder's image; building again on that one")
                mine.local = None   # the children built on the first image must build again too
                local, labels = self.build_image(plan, node, self.parent_ref(plan, node, digests, handoffs), secrets,
                                                 prefix, again=True)
                results, facts = self.checked(node, local, labels, prefix)
        digest, own = self.publish_node(node, local, facts, results, labels, prefix)
        mine.own = own and mine.local is not None
        return digest, results, self.log_path(node)

    @staticmethod
    def parent_passed(plan: Plan, node: Node, up: Handoff) -> None:
        """Wait for the outcome of a parent built by this run; raise ParentFailed unless it passed."""
        up.done.wait()
        if up.result is None:
            raise ParentFailed("not published: the run was stopped")
        if up.result.status != "passed":
            raise ParentFailed(f"not published: {plan.nodes[node.parent].name} beneath it did not pass")

    def stop_point(self) -> None:
        """Between a node's steps: an interrupted run goes no further (its key stays absent)."""
        if self.stopping.is_set():
            raise ParentFailed("not published: the run was stopped")

    @property
    def pipelined(self) -> bool:
        """Whether a child may build on its parent's local image: the engine's built-in BuildKit reads
        the engine's images, as Buildah reads podman's store; a buildx builder may run in a container that
        cannot see them."""
        return self.engine.mode in ("builtin", "podman")

    def checked(self, node: Node, local: str, labels: dict, prefix: str):
        """Validate a freshly built image; a failure keeps it locally and is raised."""
        self.stop_point()
        results, facts = self.validate(node, local, prefix)
        if not all(r.ok for r in results):
            self.record(node, facts, results, None, labels)
            raise ChecksFailed(self.failures(node, results) + f" (image kept locally as {local})", results)
        self.locals.append((self.on(node).engine, local))
        return results, facts

    def parent_ref(self, plan: Plan, node: Node, digests: dict, handoffs: dict) -> str:
        """The registry image a node builds on: its parent's published digest, or the stack's base."""
        if not node.parent:
            return node.base_ref
        up = handoffs.get(node.parent)
        digest = up.result.digest if up is not None and up.result is not None else digests[node.parent]
        return f"{self.spec.site.registry}/{self.where(plan.nodes[node.parent])}@{digest}"

    def label(self, node: Node) -> str:
        """How the shown log names a node at work: its layer, with its key where two nodes bear that name."""
        return f"{node.name}@{node.short[:8]}" if node.name in self.twins else node.name

    def log_path(self, node: Node) -> Path:
        return self.run_dir / "logs" / f"{node.name}-{node.short[:12]}.log"

    def build_image(self, plan: Plan, node: Node, parent_ref: str, secrets: dict, prefix: str,
                    label: str | None = None, again: bool = False, then: str = "validating") -> tuple[str, dict]:
        """docker build of one node on parent_ref: (the local image, its labels). label: the parent as the
        image's label names it, when parent_ref is a local image. The local name is unique to this run:
        two builds of one key on one engine must not tag or remove each other's unvalidated image."""
        context = assemble_context(node, self.hostconf, self.run_dir / "context" / node.short)
        local = f"imgbuild.local/{node.name}:{node.short}-{self.run_id}" + ("-again" if again else "")
        labels = self.labels(plan, node, label or parent_ref)
        log = self.log_path(node)
        req = BuildRequest(context=context, dockerfile=context / "Dockerfile", tag=local,
                           build_args={"PARENT": parent_ref, **node.build_args}, labels=labels, secrets=secrets,
                           network=self.hostconf.network, platform=node.platform,
                           epoch=self.spec.site.source_date_epoch)
        emulated = self.on(node).emulated
        self.say(f"{prefix}: building" + (f" on {parent_ref} (whose checks and push go on meanwhile)"
                                          if label else "") + (f" under emulation ({emulated})" if emulated else "")
                 + f" (log {log})")
        started = time.time()
        try:
            with self.progress.task(self.label(node), "starting the build") as lines:
                self.on(node).engine.build(req, log, progress=lines)
        finally:
            shutil.rmtree(context, ignore_errors=True)
        self.say(f"{prefix}: built in {time.time() - started:.0f} s; {then}")
        return local, labels

    def publish_node(self, node: Node, local: str, facts: dict, results, labels: dict, prefix: str) -> tuple[str, bool]:
        """Push a validated image so that its key is absent or complete, never half, and one image holds
        it however many builders race (first writer wins):
          1. push under this run's staging tag KEY.pending-ID (the key tag does not move). Its own, not
             one shared by racing builders: on one engine they would tag and remove the same local name
             under each other's push, and across hosts one would read the other's digest as its own;
          2. store the measured manifest beside that digest;
          3. if the key tag already names an image with passing proof (another builder finished first),
             adopt that one; else point the key tag at ours (a manifest PUT of the same bytes).
        A job killed before 3 leaves the key absent; after 3 the key has its image and its proof.
        Returns (the digest the key names, whether it is ours)."""
        self.stop_point()
        repo = self.repo(node)
        staging = f"{self.spec.site.registry}/{repo}:{pending_tag(node.short, self.stage_id)}"
        engine = self.on(node).engine
        engine.tag(local, staging)
        with self.progress.task(self.label(node), "pushing"):
            engine.push(staging, on_retry=self.say)
        engine.remove(staging)
        digest = self.registry.manifest_digest(repo, pending_tag(node.short, self.stage_id))
        if not digest:
            raise RegistryError(f"{staging} was pushed but the registry does not show it")
        self.record(node, facts, results, digest, labels)
        other = self.other_builders_image(node, digest)
        if other:
            self.say(f"{prefix}: another builder stored this key first ({other[:19]}); using its image")
            return other, False
        found = self.registry.get_manifest(repo, digest)
        if not found:
            raise RegistryError(f"{repo}@{digest} vanished from the registry before its key was tagged")
        self.registry.put_manifest(repo, node.short, self.registry.manifest_bytes(repo, digest, found[1]), found[1])
        # Read the key back: a registry has no compare-and-set, so two builders that both found the key
        # empty both PUT it, and the later PUT holds it. The earlier one learns here that it lost.
        other = self.other_builders_image(node, digest)
        if other:
            self.say(f"{prefix}: another builder stored this key at the same moment ({other[:19]}); using its image")
            return other, False
        # The engine keeps the image under its key, as `docker build -t` and push would: a later build on
        # this runner (a pin change above it) starts from it instead of pulling gigabytes back.
        mine = f"{self.spec.site.registry}/{repo}:{node.short}"
        engine.tag(local, mine)
        self.say(f"{prefix}: pushed {mine} ({digest[:19]})")
        return digest, True

    def other_builders_image(self, node: Node, mine: str) -> str | None:
        """The digest the key names when that is not `mine` but another image with passing proof."""
        current = self.registry.manifest_digest(self.repo(node), node.short)
        if current and current != mine and self.proven(self.repo(node), node, current) is None:
            return current
        return None

    def validate(self, node: Node, image: str, prefix: str) -> tuple[list[CheckResult], dict]:
        with self.progress.task(self.label(node), "running checks"):
            on = self.on(node)
            results, facts = run_checks(on.engine, image, node.checks, self.gpu, node.platform, on.emulated)
        counts = {s: sum(1 for r in results if r.status == s) for s in ("passed", "failed", "skipped")}
        self.say(f"{prefix}: checks: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
        for r in results:
            if r.status != "passed":
                # A failure is shown whole enough to act on (a cpu-isa refusal names file, extension, address).
                width = 600 if r.status == "failed" else 160
                self.say(f"      {r.status:<7} {r.id}: {r.detail.splitlines()[0][:width] if r.detail else ''}")
        return results, facts

    def failures(self, node: Node, results: list[CheckResult]) -> str:
        bad = [r for r in results if not r.ok]
        return f"{node.name}: {len(bad)} check(s) failed: " + "; ".join(f"{r.id}: {r.detail[:300]}" for r in bad)

    def record(self, node: Node, facts: dict, results, digest: str | None, labels: dict) -> dict:
        """Keep the measured manifest in the run folder; store it beside the image in the registry only
        when every check passed. A failure is never written where `lookup` and `promote` read."""
        manifest = build_manifest(node, facts, results, digest, labels, node.checks, gpu=self.gpu,
                                  kinds=self.spec.kinds.values())
        passed = manifest["outcome"] == "passed" and digest is not None
        if passed:
            push_manifest(self.registry, self.repo(node), manifest)
            # The manifest as a reader will see it (JSON types), so the signed hash is the one read back.
            stored = json.loads(json.dumps(manifest))
            if trust.attest_layer(self.registry, self.spec, self.zone, self.repo(node), node, digest, stored,
                                  engine=f"{self.engine.cli} ({self.engine.mode})"):
                self.say(f"{node.name} ({node.short[:12]}): provenance signed with key {self.zone.signing.key_id}")
        (self.run_dir / "manifests").mkdir(exist_ok=True)
        name = f"{node.name}-{node.short[:12]}" + ("" if passed else ".failed")
        (self.run_dir / "manifests" / f"{name}.json").write_text(json.dumps(manifest, indent=1))
        return manifest

ENGINE_MODES = {"buildx": "buildx", "builtin": "built-in BuildKit", "podman": "Buildah, no daemon"}


def build(prepared, say: Say, docker: str | None = None, date: str | None = None,
          gpu: bool | None = None, node: str | None = None, jobs: int = 1, progress: str = "auto",
          out: TextIO | None = None, require_locked: bool = False, engine: str | None = None) -> BuildReport:
    """Build the prepared plan (builder.prepared; its bases resolved as far as any registry a base names).
    progress: auto | plain | tty, how the run is shown (builder.ship.progress) on `out`, the stream
    that `say` writes to (stdout if not given)."""
    view = env_progress(progress, say, out)
    say = view.say
    if node is not None:
        # A node job: the stacks are those that hold the node (the key is found among every selected
        # stack's, bases not resolvable here leave theirs provisional and unmatched).
        holders = prepared.plan.users[Builder.node_key(prepared.plan, node)]
        prepared = prepared.narrowed(s for s in prepared.stacks if s.name in holders)
    spec, stacks = prepared.spec, prepared.names
    # Impossible stacks fail here, in seconds and without Docker, not after an hour of compiling.
    gate(prepared, say, require_locked=require_locked, engine=engine)
    kind = engine
    engine = choose(kind, spec.site.engine, docker)
    registry = Registry(spec.site.registry, on_retry=say)
    registry.ping()
    registry.retries = True   # from here a registry that restarts is waited for (registry.BACKOFF)
    plan = prepared.require()
    if prepared.bases.rebuilt:   # a base made again: built on only where its environment is the one locked
        from builder.ship.measure import rebuilt_bases
        problems = rebuilt_bases(spec, prepared.bases, engine, say)
        if problems:
            raise SpecError("the lock no longer holds for a base made again: " + "\n  ".join(problems),
                            file=spec.lock.file, hint="imgbuild lock base=NAME, then imgbuild lock stack=NAME for "
                                                      "the stacks on it; nothing was built")
    builder = Builder(spec, engine, registry, HostConf.from_env(), say, gpu=gpu, progress=view)
    host = engine.env.get("DOCKER_HOST")   # which daemon, when it is not the default one
    say(f"engine: {engine.cli}{f' at {host}' if host else ''} ({ENGINE_MODES[engine.mode]}); registry "
        f"{spec.site.registry}; GPU for checks: {'yes' if builder.gpu else 'no (GPU checks are skipped)'}")
    if builder.zone.name != "open":
        say(builder.zone.describe())   # where this run writes, and whether it signs (site.trust)
    wanted = [p for p in dict.fromkeys(n.platform for n in plan.nodes.values())]
    builder.engines = engines(engine, wanted, say=say)
    report = builder.run(plan, stacks, date, only=node, jobs=jobs)
    if not report.ok:
        failed = [r for r in report.nodes.values() if r.status == "failed"]
        lines = [f"{r.layer} ({r.key[:12]}): {r.error}" + (f"\n    log: {r.log}" if r.log else "") for r in failed]
        # What a rerun starts from: each pushed key is complete (image and proof), the others absent.
        done = [f"{r.layer} ({r.key[:12]})" for r in report.nodes.values() if r.status == "passed"]
        undone = [f"{r.layer} ({r.key[:12]})" for r in report.nodes.values() if r.status != "passed"]
        lines.append("in the registry, validated: " + (", ".join(done) or "none"))
        lines.append("not pushed: " + (", ".join(undone) or "none"))
        raise BuildFailed("\n  ".join([report.error or "build failed"] + lines), report)
    return report


def refuse_release(spec: Spec) -> None:
    """Where the site's CI may not release (site.ci: not the release branch), say so before any registry is
    asked: a branch's job says why, not that a registry is down."""
    refusal = release_refusal(spec.site.ci, os.environ)
    if refusal:
        raise PublishError(f"release refused: {refusal}; no tag was moved")


def release(prepared, say: Say, date: str | None = None, require_gpu: bool = False) -> dict:
    """Move the release tags of the prepared stacks, already built (CI's release step): no engine, nothing
    built. The proof is read from the registry by promote, never taken from a job's exit code."""
    spec, stacks = prepared.spec, prepared.names
    refuse_release(spec)
    gate(prepared, say)
    # The bases were resolved when the plan was prepared: a registry that did not answer then is said now,
    # not waited for a second time.
    plan = prepared.require()
    registry = Registry(spec.site.registry, on_retry=say)
    registry.ping()
    registry.retries = True
    zone = trust.zone(spec)
    with leases.held(registry, spec.site.namespace, f"release-{secrets.token_hex(6)}",
                     {n.short: n.name for n in plan.nodes.values()}, say):
        return promote(spec, registry, plan, stacks, date, say, serial=release_serial(spec), gpu=require_gpu,
                       zone=zone)


class ChecksFailed(ValidationFailed):
    """A freshly built image failed its checks (they are kept for the run's report)."""

    def __init__(self, message: str, results: list[CheckResult]):
        super().__init__(message)
        self.results = results


class ParentFailed(ImgbuildError):
    """A node built on its parent's local image while the parent was checked, and the parent failed."""


class BuildFailed(ImgbuildError):
    exit_code = 7
    label = "build failed"

    def __init__(self, message: str, report: BuildReport):
        super().__init__(message, hint=f"report: {Path(report.run_dir) / 'report.json'}")
        self.report = report


__all__ = ["build", "release", "refuse_release", "validate", "BuildReport", "Builder", "BuildFailed", "KEY_LEN"]


def validate(prepared, stacks: list, images: list[str], say: Say, docker: str | None = None,
             gpu: bool | None = None, platform: str | None = None, engine: str | None = None) -> bool:
    """Re-run the checks of existing images: the top image of each of `stacks` (Stacks of the prepared plan;
    from the registry by content key; of each platform, or of `platform` only), or any image reference
    built by imgbuild from this spec (the prepared plan then holds every stack). Results are recorded
    beside the image."""
    spec = prepared.spec
    engine = choose(engine, spec.site.engine, docker)
    registry = Registry(spec.site.registry)
    gpu = engine.has_gpu() if gpu is None else gpu
    builder = Builder(spec, engine, registry, HostConf.from_env(), say, gpu=gpu)
    targets: list[tuple[str, Node]] = []
    if stacks:
        plan = prepared.require(stacks)
        for name in (s.name for s in stacks):
            tops = plan.tops(name)
            if platform is not None and platform not in tops:
                raise ValidationFailed(f"stack {name!r} is not built for {platform} (its platforms: "
                                       f"{', '.join(tops)})")
            for node in [tops[platform]] if platform else tops.values():   # each platform's image of a release
                repo = builder.repo(node)   # this run's zone: results are recorded beside the image it read
                digest = registry.manifest_digest(repo, node.short)
                if not digest:
                    raise ValidationFailed(f"stack {name!r}: its {node.platform} image {registry.host}/{repo}:{node.short} is not "
                                           "in the registry", hint=f"build it: imgbuild build stack={name}")
                targets.append((f"{spec.site.registry}/{repo}@{digest}", node))
    if images:
        by_key = dict(prepared.require().nodes)
        for ref in images:
            info = engine.inspect(ref)
            if info is None:
                engine.pull(ref)
                info = engine.inspect(ref)
            key = ((info or {}).get("Config") or {}).get("Labels", {}).get("io.imgbuild.key")
            if key not in by_key:
                raise ValidationFailed(f"{ref} was not built by imgbuild from {spec.file} (label io.imgbuild.key "
                                       f"{'missing' if not key else key[:KEY_LEN] + ' matches no layer of the spec'})")
            targets.append((ref, by_key[key]))
    ok = True
    builder.engines = engines(engine, dict.fromkeys(node.platform for _, node in targets), say=say)
    for ref, node in targets:
        on = builder.on(node)
        if "@" in ref and on.engine.inspect(ref) is None:
            on.engine.pull(ref, node.platform)
        results, facts = builder.validate(node, ref, f"{node.name} {node.short[:12]}")
        for r in results:
            if r.status == "passed":
                say(f"      passed  {r.id}: {r.detail.splitlines()[0][:160] if r.detail else ''}")
        digest = ref.split("@", 1)[1] if "@" in ref else None
        if digest:
            builder.record(node, facts, results, digest, labels={})
        ok = ok and all(r.ok for r in results)
    return ok
