"""Builder.run, lookup, record and promote against an in-memory registry and engine (no Docker).

The promise under test: a release tag is proof. A failed check is never stored where `lookup` or
`promote` read it as a pass, so running a failing build again and again cannot turn into a release.
The engine here is a fake (argv and images as data); the checks are scripted per layer and check id.
The same scenario runs against the real engine and registry in test_docker_build.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import builder.ship.pipeline as build_mod
from builder.prepared import prepare
from builder.ship.bases import Resolved
from builder.ship.pipeline import Builder
from builder.ship.checks import CheckResult
from builder.ship.hostconf import HostConf
from builder.plan.layout import artifact_tag, layer_repo, release_repo
from builder.ship.manifest import build_manifest, fetch_manifest, push_manifest, verdict
from builder.plan.keys import make_plan
from builder.ship.publish import PublishError, promote
from builder.load.spec import load_spec

from conftest import REPO, shipped_data, write_stacks

BASE = {"debian-bookworm": "sha256:" + "ab" * 32}
DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"
TAGS = ("cpu-smoke", "cpu-smoke-2026.12.01", "cpu-smoke-torch2.13.0-cpu-ds0.19.8")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class MemRegistry:
    """The slice of the OCI distribution API that imgbuild uses, held in dicts. `puts` records every
    manifest PUT (repo, reference) so that a test sees each tag that moved."""

    host = "127.0.0.1:5000"

    def __init__(self):
        self.manifests: dict = {}   # (repo, reference) -> (body, media type, digest)
        self.blobs: dict = {}
        self.puts: list = []
        self.deletes: list = []

    def ping(self):
        pass

    def manifest_digest(self, repo, reference):
        found = self.manifests.get((repo, reference))
        return found[2] if found else None

    verified_digest = manifest_digest   # the bytes here are the ones put: their digest is computed

    def get_manifest(self, repo, reference):
        found = self.manifests.get((repo, reference))
        return (json.loads(found[0]), found[1], found[2]) if found else None

    def manifest_bytes(self, repo, digest, media_type):
        return self.manifests[(repo, digest)][0]

    def put_manifest(self, repo, reference, body, media_type):
        digest = _digest(body)
        self.manifests[(repo, reference)] = self.manifests[(repo, digest)] = (body, media_type, digest)
        self.puts.append((repo, reference))
        return digest

    def put_blob(self, repo, data):
        self.blobs[_digest(data)] = data
        return _digest(data)

    def get_blob(self, repo, digest, limit=None):
        return self.blobs[digest]

    def has_blob(self, repo, digest):
        return digest in self.blobs

    def mount_blob(self, repo, digest, from_repo):
        assert digest in self.blobs

    def tags(self, repo):
        return sorted(ref for r, ref in self.manifests if r == repo and not ref.startswith("sha256:"))

    def repositories(self, prefix=""):
        return sorted({r for r, _ in self.manifests if r.startswith(prefix)})

    def delete_manifest(self, repo, digest):
        """As Distribution does: the manifest and every tag of repo that names it."""
        gone = [(r, ref) for (r, ref), v in self.manifests.items() if r == repo and v[2] == digest]
        for k in gone:
            del self.manifests[k]
        self.deletes.append((repo, digest))
        return bool(gone)

    @property
    def stored(self) -> list:
        """Every manifest PUT but the leases (a run's own, deleted when it ends): what a run stored."""
        return [p for p in self.puts if not p[0].endswith("/imgbuild-leases")]

    def release_puts(self) -> list:
        """Manifest PUTs outside the layer repositories and the leases: the release tags, records and SBOMs."""
        return [p for p in self.puts if "/layers/" not in p[0] and not p[0].endswith("/imgbuild-leases")]


class FakeEngine:
    """Builds are recorded; an image is a dict of labels. Push writes a manifest into MemRegistry."""

    cli, mode = "/usr/bin/docker", "builtin"

    def __init__(self, registry: MemRegistry):
        self.registry = registry
        self.images: dict = {}
        self.built: list = []        # layer names, in build order
        self.validated: list = []    # layer names, in validation order
        self.failing: set = set()    # (layer name or "*", check id) that fail when judged
        self.platforms: list = []    # (layer name, platform) of each build, in build order

    def has_gpu(self):
        return False

    def build(self, req, log, progress=lambda line: None):
        self.built.append(req.labels["org.opencontainers.image.title"])
        self.platforms.append((req.labels["org.opencontainers.image.title"], req.platform))
        self.images[req.tag] = dict(req.labels)

    def tag(self, src, dst):
        self.images[dst] = self.images[src]

    def push(self, ref, on_retry=None):
        host, _, rest = ref.partition("/")
        repo, _, tag = rest.rpartition(":")
        config = self.registry.put_blob(repo, json.dumps({"config": {"Labels": self.images[ref]}}).encode())
        body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_V2,
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                      "digest": config, "size": 1}, "layers": []}).encode()
        self.registry.put_manifest(repo, tag, body, DOCKER_V2)

    def pull(self, ref, platform=None):
        pass

    def remove(self, *refs):
        for ref in refs:
            self.images.pop(ref, None)

    def inspect(self, ref):
        return None


def layer_of(image: str) -> str:
    """The layer name in a local tag (imgbuild.local/NAME:...) or a registry ref (.../layers/NAME@...)."""
    return image.split("/layers/")[-1].split("@")[0] if "/layers/" in image else image.split("/")[1].split(":")[0]


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A registry, an engine and a Builder factory, with checks scripted by FakeEngine.failing."""
    monkeypatch.setenv("IMGBUILD_HOME", str(tmp_path / "home"))
    reg = MemRegistry()
    engine = FakeEngine(reg)

    def run_checks(eng, image, checks, gpu, platform=None, emulated=None):
        name = layer_of(image)
        eng.validated.append(name)
        results = []
        for c in checks:
            if c.gpu and not gpu:
                results.append(CheckResult(c.id, "skipped", "skipped: needs a GPU", True))
            elif {(name, c.id), ("*", c.id), (name, c.id, platform)} & eng.failing:
                results.append(CheckResult(c.id, "failed", f"{c.id} failed in {name}", c.gpu))
            else:
                results.append(CheckResult(c.id, "passed", "ok", c.gpu))
        torch = eng.torch.get(platform, "2.13.0+cpu") if hasattr(eng, "torch") else "2.13.0+cpu"
        return results, {"dists": {"torch": torch, "deepspeed": "0.19.8"}, "python": "3.11.2"}

    monkeypatch.setattr(build_mod, "run_checks", run_checks)
    # syft reads images from a real registry (test_docker_nodecheck.py); here the SBOM is a fixed document.
    import builder.ship.sbom as sbom_mod
    monkeypatch.setattr(sbom_mod, "generate", lambda registry, repo, digest, timeout=0: json.dumps(
        {"bomFormat": "CycloneDX", "components": [{"name": "torch", "version": "2.13.0+cpu",
                                                   "purl": "pkg:pypi/torch@2.13.0%2Bcpu"}]}).encode())
    monkeypatch.setattr(build_mod, "assemble_context", lambda node, conf, dest: dest)
    conf = HostConf(ca_bundle=None, wheelhouse=None, netrc=None, pip_index_url=None)

    def builder(spec):
        return Builder(spec, engine, reg, conf, say=lambda line: None, gpu=False)

    return reg, engine, builder


def spec_for(tmp_path: Path, name: str, mutate=lambda data: None):
    data = shipped_data()
    mutate(data)
    return load_spec(write_stacks(tmp_path / name, data), root=REPO)


def require_aio(data):
    """The issue's case: an op the image cannot provide. The keys stay, only the checks change."""
    data["layers"]["ds-0.19.8-cpu"]["params"].update({"runtime_ops": ["async_io"], "libaio": False})


def run(builder, spec):
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    return builder(spec).run(plan, ["cpu-smoke"], date="2026.12.01"), plan


def released(reg: MemRegistry, spec) -> dict:
    return {t: reg.manifest_digest(release_repo(spec.site.namespace, "cpu-smoke"), t) for t in TAGS}


def test_a_fresh_build_validates_stores_and_releases(world, tmp_path):
    reg, engine, builder = world
    spec = spec_for(tmp_path, "ok")
    report, plan = run(builder, spec)
    assert report.ok, report.error
    assert engine.built == [n.name for n in plan.chain("cpu-smoke")]
    assert set(released(reg, spec).values()) == {reg.manifest_digest(layer_repo(spec.site.namespace, plan.top("cpu-smoke").name),
                                                                      plan.top("cpu-smoke").short)}
    for node in plan.chain("cpu-smoke"):
        digest = reg.manifest_digest(layer_repo(spec.site.namespace, node.name), node.short)
        recorded = fetch_manifest(reg, layer_repo(spec.site.namespace, node.name), digest)
        assert recorded["outcome"] == "passed" and verdict(recorded, node, digest) is None
    # A second run reuses everything and builds or validates nothing.
    engine.built.clear(), engine.validated.clear()
    report, _ = run(builder, spec)
    assert report.ok and {n.action for n in report.nodes.values()} == {"reuse"}
    assert engine.built == [] and engine.validated == []


@pytest.mark.parametrize("runs", [4, 7])
def test_a_failing_check_fails_every_run_and_never_moves_a_tag(world, tmp_path, runs):
    """The reported bug: runs 1-3 failed, run 4 reused the failing image as validated and released it."""
    reg, engine, builder = world
    good = spec_for(tmp_path, "good")
    assert run(builder, good)[0].ok
    before = released(reg, good)
    assert None not in before.values()
    stored = dict(reg.manifests)
    bad = spec_for(tmp_path, "aio", require_aio)
    engine.failing.add(("*", "deepspeed.ds-report"))
    for i in range(runs):
        puts = len(reg.stored)
        report, plan = run(builder, bad)
        assert not report.ok, f"run {i + 1} released an image whose checks failed"
        acts = {n.layer: (n.action, n.status) for n in report.nodes.values()}
        assert acts["ds-0.19.8-cpu"] == ("revalidate", "failed"), (i, acts)
        assert acts["cpu-torch-2.13"] == ("reuse", "passed")
        assert {acts["cpu-env"][1], acts["smoke-train"][1]} == {"blocked"}
        assert report.tags == {}
        assert released(reg, good) == before
        # Nothing at all was written to the registry: the earlier pass stays, no failure is stored.
        assert reg.stored[puts:] == [] and reg.manifests == stored
    # The failure is kept where a person finds it: the run folder, marked failed.
    failed = list(Path(report.run_dir, "manifests").glob("ds-0.19.8-cpu-*.failed.json"))
    assert failed and json.loads(failed[0].read_text())["outcome"] == "failed"


def test_revalidation_that_passes_is_recorded_and_then_reused(world, tmp_path):
    reg, engine, builder = world
    assert run(builder, spec_for(tmp_path, "good"))[0].ok
    stricter = spec_for(tmp_path, "aio", require_aio)        # new checks, same keys; this time they pass
    engine.validated.clear()
    report, plan = run(builder, stricter)
    assert report.ok
    acts = {n.layer: n.action for n in report.nodes.values()}
    assert acts == {"cpu-torch-2.13": "reuse", "ds-0.19.8-cpu": "revalidate", "cpu-env": "revalidate",
                    "smoke-train": "revalidate"}
    assert engine.built == ["cpu-torch-2.13", "ds-0.19.8-cpu", "cpu-env", "smoke-train"]   # from the first run only
    assert engine.validated == ["ds-0.19.8-cpu", "cpu-env", "smoke-train"]
    engine.validated.clear()
    report, _ = run(builder, stricter)
    assert report.ok and {n.action for n in report.nodes.values()} == {"reuse"} and engine.validated == []


def test_a_node_failing_after_its_parent_was_reused(world, tmp_path):
    """The project layer changes (new pin) and its own check fails: the reused parents are fine, the
    new image is never pushed under its key, and the release stays where it was."""
    reg, engine, builder = world
    good = spec_for(tmp_path, "good")
    assert run(builder, good)[0].ok
    before = released(reg, good)

    def new_pin(data):
        data["projects"]["smoke-train"]["params"]["source"]["commit"] = "1a6d04ff11a3a379285c6dc7862d82d095f0056c"
    changed = spec_for(tmp_path, "pin", new_pin)
    engine.failing.add(("smoke-train", "project.smoke"))
    engine.built.clear()
    for _ in range(3):
        report, plan = run(builder, changed)
        acts = {n.layer: (n.action, n.status) for n in report.nodes.values()}
        assert acts == {"cpu-torch-2.13": ("reuse", "passed"), "ds-0.19.8-cpu": ("reuse", "passed"),
                        "cpu-env": ("reuse", "passed"), "smoke-train": ("build", "failed")}
        top = plan.top("cpu-smoke")
        assert reg.manifest_digest(layer_repo(changed.site.namespace, top.name), top.short) is None
        assert released(reg, good) == before and not report.ok
    assert engine.built == ["smoke-train"] * 3


def test_promote_refuses_when_any_node_of_any_stack_lacks_proof(world, tmp_path):
    """Defence in depth: promote reads every node's stored results itself, whatever its caller says."""
    reg, engine, builder = world
    spec = spec_for(tmp_path, "good")
    report, plan = run(builder, spec)
    before = released(reg, spec)
    digests = {k: reg.manifest_digest(layer_repo(spec.site.namespace, n.name), n.short) for k, n in plan.nodes.items()}
    ds = next(n for n in plan.chain("cpu-smoke") if n.name == "ds-0.19.8-cpu")
    repo = layer_repo(spec.site.namespace, ds.name)
    good_record = reg.manifests[(repo, artifact_tag(digests[ds.key]))]

    def poison(status: str):
        """Store, behind the tool's back, a manifest whose ds-report check did not pass (as the old bug did)."""
        recorded = fetch_manifest(reg, repo, digests[ds.key])
        for c in recorded["checks"]:
            if c["id"] == "deepspeed.ds-report":
                c["status"] = status
        body = json.dumps(recorded).encode()
        art = {"schemaVersion": 2, "config": {"digest": reg.put_blob(repo, b"{}")},
               "layers": [{"mediaType": "application/vnd.imgbuild.manifest.v1+json", "digest": reg.put_blob(repo, body)}]}
        reg.put_manifest(repo, artifact_tag(digests[ds.key]), json.dumps(art).encode(), "x")

    for status in ("failed", "error"):
        poison(status)
        puts = len(reg.release_puts())
        with pytest.raises(PublishError, match="no tag was moved") as exc:
            promote(spec, reg, plan, ["cpu-smoke"], "2026.12.02", lambda line: None, expected=digests)
        assert f"check deepspeed.ds-report is recorded as {status}" in exc.value.message
        assert len(reg.release_puts()) == puts and released(reg, spec) == before
        # lookup agrees: the key is there but not proven, so the next build validates it again.
        assert builder(spec).lookup(ds)[0] == "revalidate"

    reg.manifests[(repo, artifact_tag(digests[ds.key]))] = good_record
    # A caller that validated a different image than the registry holds under the key (a racing
    # builder's PUT came later) is refused when the key's image has no proof of its own...
    wrong = dict(digests, **{ds.key: "sha256:" + "0" * 64})
    poison("failed")
    with pytest.raises(PublishError, match="but this run validated sha256:0000.*, and that one: check deepspeed.ds-report"):
        promote(spec, reg, plan, ["cpu-smoke"], "2026.12.02", lambda line: None, expected=wrong)
    assert released(reg, spec) == before
    # ... and released, saying so, when it has.
    reg.manifests[(repo, artifact_tag(digests[ds.key]))] = good_record
    said = []
    promote(spec, reg, plan, ["cpu-smoke"], "2026.12.02", said.append, expected=wrong)
    assert any("another builder's image with its own passing checks, not sha256:0000" in line for line in said), said
    # A node missing from the registry.
    missing = reg.manifests.pop((repo, ds.short))
    with pytest.raises(PublishError, match="ds-0.19.8-cpu .* is not in the registry"):
        promote(spec, reg, plan, ["cpu-smoke"], "2026.12.02", lambda line: None)
    reg.manifests[(repo, ds.short)] = missing
    assert released(reg, spec) == before
    # With the proof restored, promote moves the tags (the control: the refusals above were not luck).
    moved = promote(spec, reg, plan, ["cpu-smoke"], "2026.12.02", lambda line: None, expected=digests)
    assert set(moved["cpu-smoke"]) == {"cpu-smoke", "cpu-smoke-2026.12.02", "cpu-smoke-torch2.13.0-cpu-ds0.19.8"}


def test_one_failed_stack_blocks_every_stack_in_the_promotion(world, tmp_path):
    """A failure anywhere moves no tag anywhere: two stacks share a prefix, one top is unproven."""
    reg, engine, builder = world

    def two_stacks(data):
        twin = json.loads(json.dumps(data["stacks"]["cpu-smoke"]))
        twin["project"] = None
        twin.pop("project")
        data["stacks"]["cpu-twin"] = twin
    spec = spec_for(tmp_path, "two", two_stacks)
    plan = make_plan(spec, ["cpu-smoke", "cpu-twin"], BASE)
    assert builder(spec).run(plan, ["cpu-smoke", "cpu-twin"], "2026.12.01").ok
    top = plan.top("cpu-smoke")
    repo = layer_repo(spec.site.namespace, top.name)
    digest = reg.manifest_digest(repo, top.short)
    reg.manifests.pop((repo, artifact_tag(digest)))       # the stored proof of one node is gone
    puts = len(reg.release_puts())
    with pytest.raises(PublishError, match="no imgbuild manifest is stored beside it"):
        promote(spec, reg, plan, ["cpu-smoke", "cpu-twin"], "2026.12.02", lambda line: None)
    assert len(reg.release_puts()) == puts
    promote(spec, reg, plan, ["cpu-twin"], "2026.12.02", lambda line: None)   # the other stack alone is fine
    assert len(reg.release_puts()) > puts


def test_record_never_stores_a_failure_in_the_registry(world, tmp_path):
    reg, engine, builder = world
    spec = spec_for(tmp_path, "good")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    node = plan.chain("cpu-smoke")[1]
    b = builder(spec)
    results = [CheckResult(c.id, "passed", "ok") for c in node.checks]
    results[0] = CheckResult(results[0].id, "failed", "no")
    manifest = b.record(node, {}, results, "sha256:" + "1" * 64, {})
    assert manifest["outcome"] == "failed" and reg.stored == []
    assert (b.run_dir / "manifests" / f"{node.name}-{node.short[:12]}.failed.json").exists()
    # And the registry layer itself refuses such a manifest, whoever asks.
    from builder.errors import ValidationFailed
    from builder.ship.manifest import push_manifest
    with pytest.raises(ValidationFailed, match="refusing to store a manifest with failed checks"):
        push_manifest(reg, layer_repo(spec.site.namespace, node.name), manifest)
    assert reg.stored == []


@pytest.mark.parametrize("change, why", [
    (lambda m, n: None, None),
    (lambda m, n: m.update(key="0" * 64), "recorded for another content key"),
    (lambda m, n: m.update(image_digest="sha256:" + "2" * 64), "recorded for another image"),
    (lambda m, n: m.update(checks_hash="x"), "its checks changed"),
    (lambda m, n: m.update(schema="imgbuild.manifest/v0"), "schema"),
    (lambda m, n: m["checks"].pop(), "has no recorded result"),
    (lambda m, n: m["checks"][0].update(status="failed"), "is recorded as failed"),
    (lambda m, n: m.update(outcome="passed") or m["checks"][-1].update(status="FAILED"), "is recorded as FAILED"),
])
def test_verdict_trusts_only_a_complete_passing_record(tmp_path, change, why):
    spec = spec_for(tmp_path, "good")
    node = make_plan(spec, ["cpu-smoke"], BASE).chain("cpu-smoke")[1]
    digest = "sha256:" + "1" * 64
    results = [CheckResult(c.id, "skipped" if c.gpu else "passed", "ok", c.gpu) for c in node.checks]
    manifest = build_manifest(node, {}, results, digest, {}, node.checks)
    change(manifest, node)
    got = verdict(manifest, node, digest)
    assert (got is None) if why is None else (why in got), got
    assert verdict(None, node, digest) == "no imgbuild manifest is stored beside it"


def test_a_gpu_machine_revalidates_what_was_validated_without_one(tmp_path):
    spec = spec_for(tmp_path, "good")
    node = make_plan(spec, ["cpu-smoke"], BASE).chain("cpu-smoke")[1]
    assert any(c.gpu for c in node.checks)
    digest = "sha256:" + "1" * 64
    results = [CheckResult(c.id, "skipped" if c.gpu else "passed", "ok", c.gpu) for c in node.checks]
    manifest = build_manifest(node, {}, results, digest, {}, node.checks, gpu=False)
    assert verdict(manifest, node, digest, gpu=False) is None
    assert "was skipped where no GPU was" in verdict(manifest, node, digest, gpu=True)
    manifest["validated_with_gpu"] = True     # skipped on a GPU machine: a judge's own skip, not for lack of one
    assert verdict(manifest, node, digest, gpu=True) is None


def test_release_reads_the_registry_and_refuses_an_unbuilt_stack(world, tmp_path, monkeypatch):
    """`imgbuild release` (CI's release step) runs promote on what the registry holds."""
    reg, engine, builder = world
    spec = spec_for(tmp_path, "good")
    monkeypatch.setattr(build_mod, "Registry", lambda host, **kw: reg)
    prepared = prepare(spec, [spec.stacks["cpu-smoke"]], bases=Resolved(digests=BASE))
    with pytest.raises(PublishError, match="is not in the registry"):
        build_mod.release(prepared, lambda line: None, date="2026.12.01")
    assert reg.release_puts() == []
    run(builder, spec)
    before = len(reg.release_puts())
    moved = build_mod.release(prepared, lambda line: None, date="2026.12.03")
    assert "cpu-smoke-2026.12.03" in moved["cpu-smoke"]
    put = [ref for _, ref in reg.release_puts()[before:]]   # the stack card first, then the three tags
    assert len(put) == 4 and put[0].endswith(".stack") and "cpu-smoke-2026.12.03" in put


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "Interrupted"])
def test_an_interrupted_command_exits_130_and_says_so(monkeypatch, raised):
    """Ctrl-C and SIGTERM must never look like success to CI. typer turns a KeyboardInterrupt into a
    *returned* 130 under standalone_mode=False; the old main ignored it and exited 0."""
    import builder.cli
    from builder.errors import Interrupted
    from conftest import run_cli

    def stop(*args, **kwargs):
        raise KeyboardInterrupt if raised == "KeyboardInterrupt" else Interrupted("SIGTERM")
    monkeypatch.setattr(builder.cli, "load_spec", stop)
    for _ in range(2):
        res = run_cli("check", "-f", str(REPO / "stacks.yaml"))
        assert res.code == 130, res.output
        assert "Traceback" not in res.output
    if raised == "Interrupted":
        assert "interrupted: the running step was stopped" in res.err


# -- issue 12: one node at a time (CI's node job), and --jobs -------------------------------------------

def run_node(builder, spec, node):
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    return builder(spec).run(plan, ["cpu-smoke"], only=node.short, jobs=1)


def test_a_node_job_builds_one_node_on_a_parent_the_registry_holds(world, tmp_path):
    reg, engine, builder = world
    spec = spec_for(tmp_path, "node")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    chain = plan.chain("cpu-smoke")
    # Not the root first: its parent is not in the registry, so it is refused, building nothing.
    with pytest.raises(build_mod.ValidationFailed, match="does not hold"):
        run_node(builder, spec, chain[1])
    assert engine.built == []
    for i, node in enumerate(chain):
        report = run_node(builder, spec, node)
        assert report.ok and list(report.nodes) == [node.key] and report.tags == {}
        assert engine.built == [n.name for n in chain[:i + 1]]
    assert None in released(reg, spec).values()            # a node job moves no tag
    report = run_node(builder, spec, chain[-1])             # present: a no-op
    assert report.ok and report.nodes[chain[-1].key].action == "reuse"
    assert engine.built == [n.name for n in chain]


def test_a_node_job_refuses_a_parent_without_passing_checks(world, tmp_path):
    reg, engine, builder = world
    spec = spec_for(tmp_path, "node-bad")
    chain = make_plan(spec, ["cpu-smoke"], BASE).chain("cpu-smoke")
    engine.failing.add((chain[0].name, chain[0].checks[0].id))
    report = run_node(builder, spec, chain[0])
    assert not report.ok
    with pytest.raises(build_mod.ValidationFailed, match="does not hold"):
        run_node(builder, spec, chain[1])


def test_an_unknown_or_ambiguous_node_is_refused(world, tmp_path):
    _, _, builder = world
    spec = spec_for(tmp_path, "node-unknown")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    for given in ("0" * 32, "abc"):
        with pytest.raises(build_mod.SpecError, match="names no layer image"):
            builder(spec).run(plan, ["cpu-smoke"], only=given)


def test_jobs_build_independent_nodes_at_once_and_parents_first(world, tmp_path):
    """Two stacks that share cpu-torch: with --jobs 2 the two DeepSpeed layers above it build at the same
    time, and no node starts before its parent was built (on its local image or its registry one)."""
    import threading
    reg, engine, builder = world

    def two_stacks(data):
        data["layers"]["ds-0.19.8-cpu-b"] = {"kind": "deepspeed", "params": {"version": "0.19.8", "ops": ["cpu_adam"],
                                                                              "packages": ["six==1.17.0"]}}
        data["stacks"]["cpu-smoke-b"] = {"base": "debian-bookworm", "layers": ["cpu-torch-2.13", "ds-0.19.8-cpu-b"],
                                         "tags": ["{stack}"]}
    spec = spec_for(tmp_path, "jobs", two_stacks)
    plan = make_plan(spec, ["cpu-smoke", "cpu-smoke-b"], BASE)
    both = threading.Barrier(2, timeout=10)
    at_once = []
    real_build = engine.build

    def build(req, log, progress=lambda line: None):
        name = req.labels["org.opencontainers.image.title"]
        if name.startswith("ds-0.19.8-cpu"):
            both.wait()            # would time out (BrokenBarrierError) if they ran one after the other
            at_once.append(name)
        parent = req.build_args["PARENT"]
        below = {"cpu-torch-2.13": "mirror", "cpu-env": "ds-0.19.8-cpu", "smoke-train": "cpu-env"}
        assert layer_of(parent) == below.get(name, "cpu-torch-2.13") and (name == "cpu-torch-2.13"
                                                                       or layer_of(parent) in engine.built), (name, parent)
        real_build(req, log, progress)
    engine.build = build
    report = builder(spec).run(plan, ["cpu-smoke", "cpu-smoke-b"], date="2026.12.01", jobs=2)
    assert report.ok, report.error
    assert sorted(at_once) == ["ds-0.19.8-cpu", "ds-0.19.8-cpu-b"]
    assert engine.built[0] == "cpu-torch-2.13" and len(engine.built) == len(plan.nodes)


def _watch_builds(engine, monkeypatch):
    """{layer: PARENT it was built on} and {layer: Event set once built}, recorded by the fake engine."""
    import threading
    parents, built = {}, {}
    real_build = engine.build

    def build(req, log, progress=lambda line: None):
        name = req.labels["org.opencontainers.image.title"]
        parents[name] = req.build_args["PARENT"]
        real_build(req, log, progress)
        built.setdefault(name, threading.Event()).set()
    monkeypatch.setattr(engine, "build", build)
    return parents, lambda name: built.setdefault(name, threading.Event())


def test_a_child_builds_on_its_parents_local_image_while_the_parent_is_checked_and_pushed(world, tmp_path,
                                                                                         monkeypatch):
    """Pipelining (issue 12's 1.2x): with --jobs 1 the DeepSpeed layer is built while cpu-torch beneath
    it is still being pushed. The push of cpu-torch waits until the child was built: were the child
    built only after its parent was published, this would wait in vain."""
    reg, engine, builder = world
    spec = spec_for(tmp_path, "pipelined")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    parents, built = _watch_builds(engine, monkeypatch)
    real_push = engine.push

    def push(ref, on_retry=None):
        if "/layers/cpu-torch-2.13:" in ref:
            assert built("ds-0.19.8-cpu").wait(10), "the child was not built while its parent was pushed"
        real_push(ref, on_retry)
    monkeypatch.setattr(engine, "push", push)
    report = builder(spec).run(plan, ["cpu-smoke"], date="2026.12.01", jobs=1)
    assert report.ok, report.error
    torch, ds = plan.chain("cpu-smoke")[:2]
    assert parents["ds-0.19.8-cpu"].startswith(f"imgbuild.local/cpu-torch-2.13:{torch.short}-")
    # What the registry holds names the parent by its key: the local name never leaves the machine.
    ds_digest = reg.manifest_digest(layer_repo(spec.site.namespace, ds.name), ds.short)
    manifest = reg.get_manifest(layer_repo(spec.site.namespace, ds.name), ds_digest)[0]
    config = json.loads(reg.get_blob("", manifest["config"]["digest"]))
    assert config["config"]["Labels"]["io.imgbuild.parent"] == \
        f"{spec.site.registry}/{layer_repo(spec.site.namespace, torch.name)}:{torch.short}"
    assert not [ref for ref in engine.images if ref.startswith("imgbuild.local/")], engine.images


@pytest.mark.parametrize("child_fails_too", [False, True], ids=["child-passes", "child-fails-on-the-broken-parent"])
def test_a_child_built_early_is_not_published_when_its_parent_then_fails(world, tmp_path, monkeypatch, child_fails_too):
    """The parent's checks fail after the child was built on it: the child is blocked, nothing of it or
    above it reaches the registry, and no tag moves. Run 3 times: the threads' order must not matter.
    A child whose own checks failed on that broken parent is blocked too, not failed: the report names
    the layer to fix, the parent (its own failure is kept in the message)."""
    reg, engine, builder = world
    for attempt in range(3):
        spec = spec_for(tmp_path, f"early-fail-{child_fails_too}-{attempt}")
        plan = make_plan(spec, ["cpu-smoke"], BASE)
        parents, built = _watch_builds(engine, monkeypatch)
        engine.failing.add(("cpu-torch-2.13", "cpu-torch.torch-import"))
        if child_fails_too:
            engine.failing.add(("ds-0.19.8-cpu", "deepspeed.import"))
        judge = build_mod.run_checks

        def run_checks(eng, image, checks, gpu, platform=None, emulated=None):
            if "cpu-torch-2.13" in image:
                assert built("ds-0.19.8-cpu").wait(10)   # the child is built before its parent is judged
            return judge(eng, image, checks, gpu)
        monkeypatch.setattr(build_mod, "run_checks", run_checks)
        report = builder(spec).run(plan, ["cpu-smoke"], date="2026.12.01", jobs=1)
        monkeypatch.setattr(build_mod, "run_checks", judge)
        status = {r.layer: (r.action, r.status) for r in report.nodes.values()}
        assert status["cpu-torch-2.13"] == ("build", "failed")
        torch_checks = next(r.checks for r in report.nodes.values() if r.layer == "cpu-torch-2.13")
        assert [c["id"] for c in torch_checks if c["status"] == "failed"] == ["cpu-torch.torch-import"]
        assert status["ds-0.19.8-cpu"] == ("build", "blocked"), status
        child = next(r for r in report.nodes.values() if r.layer == "ds-0.19.8-cpu")
        assert "cpu-torch-2.13 beneath it did not pass" in child.error, child.error
        assert ("deepspeed.import failed" in child.error) == child_fails_too, child.error
        assert {status["cpu-env"][1], status["smoke-train"][1]} == {"blocked"}, status
        assert parents["ds-0.19.8-cpu"].startswith("imgbuild.local/cpu-torch-2.13:")
        assert not [p for p in reg.stored if p[0].startswith(f"{spec.site.namespace}/")], reg.stored
        assert not report.ok and report.tags == {}
        engine.failing.clear()


def test_a_failed_node_blocks_its_children_and_not_the_others_with_jobs(world, tmp_path):
    reg, engine, builder = world
    spec = spec_for(tmp_path, "jobs-fail")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    engine.failing.add(("ds-0.19.8-cpu", "deepspeed.import"))
    report = builder(spec).run(plan, ["cpu-smoke"], date="2026.12.01", jobs=3)
    status = {r.layer: r.status for r in report.nodes.values()}
    assert status["cpu-torch-2.13"] == "passed" and status["ds-0.19.8-cpu"] == "failed"
    assert {status["cpu-env"], status["smoke-train"]} == {"blocked"}
    assert not report.ok and report.tags == {} and None in released(reg, spec).values()


# -- issue 12: many builders, one registry ------------------------------------------------------------

def test_the_key_tag_moves_only_after_the_proof_is_stored(world, tmp_path):
    """A node's image is pushed under KEY.pending, its manifest stored, and only then the key tag PUT:
    a job killed at any point leaves the key absent or complete."""
    reg, engine, builder = world
    spec = spec_for(tmp_path, "order")
    report, plan = run(builder, spec)
    assert report.ok
    top = plan.top("cpu-smoke")
    repo = layer_repo(spec.site.namespace, top.name)
    puts = [ref for r, ref in reg.puts if r == repo]
    digest = reg.manifest_digest(repo, top.short)
    staged = [i for i, ref in enumerate(puts) if ref.startswith(f"{top.short}.pending-")]
    assert len(staged) == 1 and staged[0] < puts.index(artifact_tag(digest)) < puts.index(top.short), puts


def test_a_racing_builder_adopts_the_image_that_holds_the_key_first(world, tmp_path):
    reg, engine, builder = world
    spec = spec_for(tmp_path, "race")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    first = builder(spec)
    said = []
    first.say = said.append
    labels = first.labels   # builds are not reproducible: the two builders' images differ
    first.labels = lambda *a: {**labels(*a), "run": "first"}
    # The other builder finishes every node while this one is between its push and its key tag.
    real_put = reg.put_manifest
    raced = {}

    def put_manifest(repo, reference, body, media_type):
        if reference.endswith(".imgbuild") and not raced:
            raced["done"] = True
            other = builder(spec)
            assert other.run(make_plan(spec, ["cpu-smoke"], BASE), ["cpu-smoke"], date="2026.12.01").ok
        return real_put(repo, reference, body, media_type)
    reg.put_manifest = put_manifest
    engine.images.clear()
    report = first.run(plan, ["cpu-smoke"], date="2026.12.01")
    assert report.ok, report.error
    # One image per key, each with its proof, and the release names the key's image.
    for node in plan.chain("cpu-smoke"):
        repo = layer_repo(spec.site.namespace, node.name)
        digest = reg.manifest_digest(repo, node.short)
        assert verdict(fetch_manifest(reg, repo, digest), node, digest) is None
        assert report.nodes[node.key].digest == digest
    assert set(released(reg, spec).values()) == {reg.manifest_digest(layer_repo(spec.site.namespace, plan.top("cpu-smoke").name),
                                                                      plan.top("cpu-smoke").short)}
    assert raced and any("another builder stored this key first" in line for line in said), said
    # Every key's image was built on the image its parent's key names (by that key or its digest).
    for node in plan.chain("cpu-smoke")[1:]:
        up = plan.nodes[node.parent]
        up_repo = f"{spec.site.registry}/{layer_repo(spec.site.namespace, up.name)}"
        up_digest = reg.manifest_digest(layer_repo(spec.site.namespace, up.name), up.short)
        repo = layer_repo(spec.site.namespace, node.name)
        manifest = reg.get_manifest(repo, reg.manifest_digest(repo, node.short))[0]
        label = json.loads(reg.get_blob("", manifest["config"]["digest"]))["config"]["Labels"]["io.imgbuild.parent"]
        assert label in (f"{up_repo}:{up.short}", f"{up_repo}@{up_digest}"), (node.name, label)
    # The child built early on this builder's own cpu-torch was built again on the adopted one.
    assert any("names another builder's image; building again" in line for line in said), said


def _rival_takes_the_key(reg, engine, spec, node, ours: str) -> str:
    """Another builder's image of `node`, with its own passing proof, PUT under the key over `ours` (as
    a builder that found the key empty at the same moment as this one would)."""
    repo = layer_repo(spec.site.namespace, node.name)
    ref = f"{spec.site.registry}/{repo}:rival"
    engine.images[ref] = {"run": "rival", "io.imgbuild.key": node.key}
    engine.push(ref)
    theirs = reg.manifest_digest(repo, "rival")
    proof = dict(fetch_manifest(reg, repo, ours), image_digest=theirs)
    push_manifest(reg, repo, proof)
    found = reg.get_manifest(repo, theirs)
    reg.put_manifest(repo, node.short, reg.manifest_bytes(repo, theirs, found[1]), found[1])
    assert theirs != ours
    return theirs


@pytest.mark.parametrize("when", ["key-put", "after-read-back"])
def test_builders_that_both_found_the_key_empty_end_on_the_later_put(world, tmp_path, monkeypatch, when):
    """A registry has no compare-and-set: two builders that both found a key empty both PUT it, and the
    later PUT holds it (CI: exit 7, "smoke-train is sha256:e20d in the registry, but this run validated
    sha256:ff12"). The earlier builder must end on the image the key names, whose proof is its own:
    learnt by reading the key back after its PUT, or, when the rival's PUT lands even later, by promote."""
    reg, engine, builder = world
    spec = spec_for(tmp_path, f"put-race-{when}")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    top = plan.top("cpu-smoke")
    top_repo = layer_repo(spec.site.namespace, top.name)
    first = builder(spec)
    said = []
    first.say = said.append
    real_put = reg.put_manifest
    rival = {}

    def put_manifest(repo, reference, body, media_type):
        digest = real_put(repo, reference, body, media_type)
        if not rival and repo == top_repo and reference == top.short and when == "key-put":
            rival["digest"] = None
            rival["digest"] = _rival_takes_the_key(reg, engine, spec, top, digest)
        return digest
    reg.put_manifest = put_manifest
    real_promote = build_mod.promote

    def promote_later(*args, **kwargs):
        if when == "after-read-back":
            # The rival's PUT lands after this builder read its key back, just before the release.
            rival["digest"] = _rival_takes_the_key(reg, engine, spec, top, reg.manifest_digest(top_repo, top.short))
        return real_promote(*args, **kwargs)
    monkeypatch.setattr(build_mod, "promote", promote_later)
    report = first.run(plan, ["cpu-smoke"], date="2026.12.01")
    assert rival and report.ok, report.error
    assert reg.manifest_digest(top_repo, top.short) == rival["digest"]
    if when == "key-put":
        assert any("stored this key at the same moment" in line for line in said), said
        assert report.nodes[top.key].digest == rival["digest"]
    else:
        assert any("another builder's image with its own passing checks" in line for line in said), said
    assert set(released(reg, spec).values()) == {rival["digest"]}


def test_a_builder_racing_through_another_ones_push_stages_under_its_own_tag(world, tmp_path):
    """Two builders of one key on one engine: the other one tags, pushes and removes its staged image
    while this one is pushing. With one shared KEY.pending name the other's `docker rmi` took this
    one's image from under its push (CI: exit 7 in test_two_builders_racing...), and this one read
    the other's digest back as its own. Each run stages under its own tag and records its own image."""
    reg, engine, builder = world
    spec = spec_for(tmp_path, "race-push")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    first = builder(spec)
    labels = first.labels
    first.labels = lambda *a: {**labels(*a), "run": "first"}
    real_push = engine.push
    raced = {}

    def push(ref, on_retry=None):
        if ".pending" in ref and not raced:
            raced["ref"] = ref
            assert builder(spec).run(make_plan(spec, ["cpu-smoke"], BASE), ["cpu-smoke"], date="2026.12.01").ok
        return real_push(ref, on_retry)
    engine.push = push
    engine.images.clear()
    report = first.run(plan, ["cpu-smoke"], date="2026.12.01")
    assert raced and report.ok, report.error
    node = next(n for n in plan.chain("cpu-smoke") if n.key in report.nodes and report.nodes[n.key].action == "build")
    repo = layer_repo(spec.site.namespace, node.name)
    staged = [ref for r, ref in reg.puts if r == repo and ".pending" in ref]
    assert len(staged) == len(set(staged)) == 2, staged
    # Each run's proof is stored beside the image that run checked.
    for tag in staged:
        digest = reg.manifest_digest(repo, tag)
        assert verdict(fetch_manifest(reg, repo, digest), node, digest) is None


def test_release_tags_never_move_backwards(world, tmp_path, monkeypatch):
    reg, engine, builder = world
    old_spec = spec_for(tmp_path, "old")
    new_spec = spec_for(tmp_path, "new", lambda d: d["runtimes"]["cpu-env"]["params"]["env"].update(OMP_NUM_THREADS="3"))
    monkeypatch.setenv("IMGBUILD_SERIAL", "8")
    assert run(builder, new_spec)[0].ok                       # the newer pipeline (8) releases first
    newer = released(reg, new_spec)
    monkeypatch.setenv("IMGBUILD_SERIAL", "7")
    report, _ = run(builder, old_spec)                        # the older one (7) finishes last
    assert report.ok and report.tags.get("cpu-smoke", {}) == {}
    assert released(reg, new_spec) == newer
    monkeypatch.setenv("IMGBUILD_SERIAL", "8")                # a rerun of the same pipeline may move them
    assert run(builder, new_spec)[0].ok and released(reg, new_spec) == newer
    monkeypatch.setenv("IMGBUILD_SERIAL", "9")
    report, _ = run(builder, old_spec)                        # a newer pipeline going back on purpose
    assert report.ok and set(report.tags["cpu-smoke"]) == set(TAGS)
    assert released(reg, old_spec) != newer


def test_release_with_required_gpu_checks_refuses_skipped_ones(world, tmp_path):
    """CI with GPU runners: the release job reads the GPU results from the registry, so a GPU check that
    was only ever skipped (no GPU job ran) is not enough, whatever the job order says."""
    reg, engine, builder = world
    spec = spec_for(tmp_path, "gpu-proof")
    report, plan = run(builder, spec)
    assert report.ok
    with pytest.raises(PublishError, match="not proven validated"):
        promote(spec, reg, plan, ["cpu-smoke"], "2026.12.01", lambda line: None, gpu=True)


def test_a_failed_layer_holds_back_only_the_stacks_that_contain_it(world, tmp_path):
    """Two stacks sharing cpu-torch: the second's own DeepSpeed layer fails; the first is released, the
    second moves no tag, and the build still fails (exit code) naming what was not released."""
    reg, engine, builder = world

    def two_stacks(data):
        data["layers"]["ds-bad"] = {"kind": "deepspeed", "params": {"version": "0.19.8", "ops": ["cpu_adam"],
                                                                     "packages": ["six==1.17.0"]}}
        data["stacks"]["cpu-bad"] = {"base": "debian-bookworm", "layers": ["cpu-torch-2.13", "ds-bad"],
                                     "tags": ["{stack}"]}
    spec = spec_for(tmp_path, "partial", two_stacks)
    plan = make_plan(spec, ["cpu-smoke", "cpu-bad"], BASE)
    engine.failing.add(("ds-bad", "deepspeed.import"))
    report = builder(spec).run(plan, ["cpu-smoke", "cpu-bad"], date="2026.12.01")
    assert not report.ok and "no tag of cpu-bad was moved (released: cpu-smoke)" in report.error
    assert set(report.tags) == {"cpu-smoke"} and None not in released(reg, spec).values()
    assert reg.manifest_digest(release_repo(spec.site.namespace, "cpu-bad"), "cpu-bad") is None


# -- several platforms: one release names every platform, or none ------------------------------------

ARM_WHEEL = {"file": "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
             "sha256": "3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"}
BOTH = {"debian-bookworm": {"linux/amd64": "sha256:" + "ab" * 32, "linux/arm64": "sha256:" + "cd" * 32}}


def two_platforms(data):
    data["stacks"]["cpu-smoke"]["platforms"] = ["linux/amd64", "linux/arm64"]
    data["stacks"]["cpu-smoke"]["tags"] = ["{stack}", "{stack}-{date}", "{stack}-ds{deepspeed}"]
    torch = data["layers"]["cpu-torch-2.13"]["params"]
    torch["wheel"] = [torch["wheel"], ARM_WHEEL]


def run_both(builder, spec):
    plan = make_plan(spec, ["cpu-smoke"], BOTH)
    return builder(spec).run(plan, ["cpu-smoke"], date="2026.12.01"), plan


def test_a_stack_of_two_platforms_is_released_as_one_index_of_its_two_images(world, tmp_path):
    reg, engine, builder = world
    spec = spec_for(tmp_path, "both", two_platforms)
    report, plan = run_both(builder, spec)
    assert report.ok, report.error
    # Each (layer, platform) is its own node, built for its platform, on its own base digest.
    assert sorted(engine.platforms) == sorted((n.name, p) for p in ("linux/amd64", "linux/arm64")
                                              for n in plan.chain("cpu-smoke", p))
    amd, arm = plan.top("cpu-smoke", "linux/amd64"), plan.top("cpu-smoke", "linux/arm64")
    assert amd.key != arm.key and amd.inputs["platform"] == "linux/amd64" and arm.inputs["platform"] == "linux/arm64"
    assert plan.chain("cpu-smoke", "linux/arm64")[0].base_ref.endswith("@sha256:" + "cd" * 32)
    assert plan.chain("cpu-smoke", "linux/arm64")[0].wheels["wheel"].file == ARM_WHEEL["file"]
    repo = release_repo(spec.site.namespace, "cpu-smoke")
    index, media_type, digest = reg.get_manifest(repo, "cpu-smoke")
    assert media_type == "application/vnd.oci.image.index.v1+json"
    want = {(p, reg.manifest_digest(layer_repo(spec.site.namespace, n.name), n.short))
            for p, n in plan.tops("cpu-smoke").items()}
    assert {(f"{m['platform']['os']}/{m['platform']['architecture']}", m["digest"]) for m in index["manifests"]} == want
    for _, child in want:   # the index names only manifests the release repository holds
        assert reg.get_manifest(repo, child) is not None
    assert {reg.manifest_digest(repo, t) for t in ("cpu-smoke", "cpu-smoke-2026.12.01", "cpu-smoke-ds0.19.8")} == {digest}
    # Released again: the same images make the same index, so the tags stay where they are.
    puts = len(reg.stored)
    assert run_both(builder, spec)[0].ok
    assert reg.manifest_digest(repo, "cpu-smoke") == digest and len(reg.puts) >= puts


@pytest.mark.parametrize("failing", ["cpu-torch-2.13", "smoke-train"])
def test_a_failed_arm64_layer_moves_no_tag_not_even_the_amd64_images(world, tmp_path, failing):
    reg, engine, builder = world
    spec = spec_for(tmp_path, "both", two_platforms)
    check = next(n for n in make_plan(spec, ["cpu-smoke"], BOTH).chain("cpu-smoke", "linux/arm64")
                 if n.name == failing).checks[-1].id
    for attempt in range(2):   # the failing case, twice: it never turns into a release
        engine.failing.add((failing, check, "linux/arm64"))
        report, plan = run_both(builder, spec)
        assert not report.ok and report.tags == {}
        assert "cpu-smoke" in report.error
        assert reg.release_puts() == [], reg.release_puts()
        # The amd64 chain passed and is in the registry, validated; only the tags wait.
        status = {(r.layer, plan.nodes[k].platform): r.status for k, r in
                  ((next(k for k in plan.nodes if k.startswith(r.key)), r) for r in report.nodes.values())}
        assert all(status[(n.name, "linux/amd64")] == "passed" for n in plan.chain("cpu-smoke", "linux/amd64"))
        assert status[(failing, "linux/arm64")] == "failed"
    # Fixed: the same keys are released, as one index.
    engine.failing.clear()
    report, _ = run_both(builder, spec)
    assert report.ok and set(report.tags["cpu-smoke"]) == {"cpu-smoke", "cpu-smoke-2026.12.01", "cpu-smoke-ds0.19.8"}


def test_a_tag_of_a_version_that_differs_between_platforms_is_refused(world, tmp_path):
    reg, engine, builder = world
    engine.torch = {"linux/arm64": "2.10.0"}

    def torch_tag(data):
        two_platforms(data)
        data["stacks"]["cpu-smoke"]["tags"] = ["{stack}", "{stack}-torch{torch}"]
    spec = spec_for(tmp_path, "torch", torch_tag)
    with pytest.raises(PublishError, match="tags differ between platforms"):
        run_both(builder, spec)
    with pytest.raises(PublishError, match=r"tags differ between platforms .*linux/amd64: cpu-smoke, "
                                           r"cpu-smoke-torch2.13.0-cpu; linux/arm64: cpu-smoke, cpu-smoke-torch2.10.0"):
        promote(spec, reg, make_plan(spec, ["cpu-smoke"], BOTH), ["cpu-smoke"], "2026.12.01", lambda line: None)
    assert reg.release_puts() == []
