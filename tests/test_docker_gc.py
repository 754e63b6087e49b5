"""imgbuild gc (issue 23) against the real engine and registry: three releases of a stack and a failed build
among them, a dry run that names exactly what no release needs, --apply, the registry's own garbage
collection (scripts/registry-gc.sh), every kept release validated afterwards, gc racing builds that publish
new keys, and a key deleted on purpose and rebuilt.

The stack is a tiny one (tests/tiny.py, issue 33): the mirrored Debian base, the tests' `tiny-env` layer
`demo` (Debian's python3 and a venv, no packages: no index is needed) shared by every revision, and a
runtime layer whose one variable names the revision, in a namespace of its own, so that gc here never
touches what other tests built. The failed build adds two layers of the shipped system-setup kind: one that
passes (an env variable; pushed, never released) and one whose chmod of a missing path cannot build.
Nothing gc decides reads what a layer installs: it reads keys, leases, release tags and measured
manifests, which a tiny stack has as cpu-smoke's torch layer had, built in seconds instead of on a 1.7 GB
layer.

The stack's layers live in a registry of this file's own (its own port and storage, started as setup-host.sh
starts the shared one), the base stays in the shared registry: the collection stops the registry it collects
and frees every blob no manifest names yet, which in the shared registry would cut another test's push in
half. So this file runs beside the others instead of alone after them.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from builder.load.spec import load_spec
from builder.plan.keys import make_plan
from builder.ship.bases import resolve
from builder.ship.manifest import fetch_manifest, verdict
from builder.ship.registry import Registry

from e2e import NS, REGISTRY, ROOT, imgbuild, reports
from tiny import site

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

GC_NS = f"{NS}-gc"
STACK = "gc-mini"
# This file's registry: its folder (config.yml, registry.pid, data/, as scripts/registry-gc.sh reads them) and
# host:port, set by the `own_registry` fixture before any test of the file runs.
OWN: dict = {}


def host() -> str:
    return OWN["host"]


def blob(digest: str) -> Path:
    return OWN["dir"] / "data/docker/registry/v2/blobs/sha256" / digest[7:9] / digest[7:]


@pytest.fixture(scope="module", autouse=True)
def own_registry(tmp_path_factory):
    """A Distribution registry configured as setup-host.sh configures the shared one (deletes enabled) and
    started by the same shell function (scripts/lib/setup-common.sh: start_registry)."""
    from test_docker_faults import _free_port
    folder = tmp_path_factory.mktemp("gc-registry")
    addr = f"127.0.0.1:{_free_port()}"
    (folder / "config.yml").write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "info"},
        "storage": {"filesystem": {"rootdirectory": str(folder / "data")}, "delete": {"enabled": True},
                    "cache": {"blobdescriptor": "inmemory"}},
        "http": {"addr": addr}}))
    env = dict(os.environ, IMGBUILD_REGISTRY_DIR=str(folder), IMGBUILD_LOG_DIR=str(folder / "log"), SETUP_TAG="gc-test")
    (folder / "log").mkdir()
    subprocess.run(["bash", "-c", '. scripts/lib/setup-common.sh && start_registry "$@"', "start",
                    str(folder / "config.yml"), addr, str(folder / "log" / "registry.log"), str(folder / "registry.pid")],
                   cwd=ROOT, env=env, check=True, timeout=60)
    OWN.update(host=addr, dir=folder, env=env)
    yield OWN
    pid = int((folder / "registry.pid").read_text())   # registry-gc.sh may have started it again: its pid now
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        pass


def stacks_file(work: Path, name: str, rev: str, failed: bool = False, keep_releases: int = 2) -> Path:
    """The tiny stack gc-mini of revision rev: demo (no packages), then with failed the passing gc-six and the
    failing gc-broken (system-setup), then the runtime gc-env with GC_REV=rev."""
    path = site(work, name, GC_NS, packages=[])
    data = yaml.safe_load(path.read_text())
    data["site"]["registry"] = host()
    data["bases"]["debian-bookworm"]["image"] = f"{REGISTRY}/mirror/debian:bookworm"   # the shared registry's
    data["site"]["retention"] = {"keep_releases": keep_releases, "keep_days": 0}
    data["runtimes"] = {"gc-env": {"kind": "runtime-env", "params": {"env": {"GC_REV": rev}}}}
    layers = ["demo"]
    if failed:
        data["layers"]["gc-six"] = {"kind": "system-setup", "params": {"env": {"GC_SIX": "1.15.0"}}}
        data["layers"]["gc-broken"] = {"kind": "system-setup",
                                       "params": {"modes": [{"path": "/imgbuild-no-such-path", "mode": "0755"}]}}
        layers += ["gc-six", "gc-broken"]
    data["stacks"] = {STACK: {"base": "debian-bookworm", "layers": layers, "runtime": "gc-env",
                              "tags": ["{stack}", "{stack}-{date}"]}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def chain(path: Path) -> list:
    spec = load_spec(path)
    return make_plan(spec, [STACK], resolve(spec, [STACK]).require()).chain(STACK)


def gc(work: Path, path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = imgbuild(work, "gc", "-f", str(path), "--json", *args, timeout=900)
    return proc, json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}


def candidates(data: dict, kind: str) -> set:
    return {(c["repository"], c["digest"]) for c in data["candidates"] if c["kind"] == kind}


def where(node) -> tuple:
    reg = Registry(host())
    repo = f"{GC_NS}/layers/{node.name}"
    return repo, reg.manifest_digest(repo, node.short)


@pytest.fixture(scope="module")
def history(work) -> dict:
    """Releases a (2026.12.01), b (12.02), a failed build, c (12.03): three releases, one failure."""
    out = {}
    for rev, date, failed in (("a", "2026.12.01", False), ("b", "2026.12.02", False), ("f", "2026.12.02", True),
                              ("c", "2026.12.03", False)):
        path = stacks_file(work, f"gc-{rev}", rev, failed)
        start = time.monotonic()
        proc = imgbuild(work, "build", f"stack={STACK}", "-f", str(path), "--date", date, timeout=1800)
        assert (proc.returncode != 0) == failed, proc.stdout[-3000:] + proc.stderr[-3000:]
        out[rev] = {"path": path, "chain": chain(path), "report": reports(work)[-1],
                    "seconds": time.monotonic() - start}
    return out


def test_a_dry_run_names_exactly_what_no_release_needs(work, history):
    reg = Registry(host())
    before = {t: reg.manifest_digest(f"{GC_NS}/{STACK}", t) for t in reg.tags(f"{GC_NS}/{STACK}")}
    for attempt in range(2):   # the same answer twice, and nothing deleted by asking
        proc, data = gc(work, history["c"]["path"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        a_env, f_six = where(history["a"]["chain"][-1]), where(history["f"]["chain"][1])
        assert candidates(data, "layer") == {a_env, f_six}, attempt
        a_release = reg.manifest_digest(f"{GC_NS}/{STACK}", f"{STACK}-2026.12.01")
        assert candidates(data, "release") == {(f"{GC_NS}/{STACK}", a_release)}
        # Beside them: their measured manifests and SBOMs; nothing else of the namespace.
        beside = {c["repository"] + "@" + c["tags"][0].split(".")[0].replace("-", ":", 1) for c in data["candidates"]
                  if c["kind"] == "beside"}
        assert beside <= {f"{r}@{d}" for r, d in (a_env, f_six, (f"{GC_NS}/{STACK}", a_release))}
        assert {c["kind"] for c in data["candidates"]} <= {"layer", "release", "beside", "record"}
        assert data["bytes_freed"] > 0 and not data["missing"] and data["deletes_allowed"] is True
        assert "dry run: nothing was deleted" in proc.stderr
    assert {t: reg.manifest_digest(f"{GC_NS}/{STACK}", t) for t in reg.tags(f"{GC_NS}/{STACK}")} == before
    kept = {(k["repository"], k["digest"]) for k in json.loads(gc(work, history["c"]["path"])[0].stdout)["kept"]}
    for rev in "bc":
        assert {where(n) for n in history[rev]["chain"]} <= kept


def test_apply_then_the_registrys_collection_frees_what_it_said(work, history):
    proc, data = gc(work, history["c"]["path"], "--apply")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = data["blobs_freed"]
    assert said and len(data["deleted"]) == len(data["candidates"])
    present = [b for b in said if blob(b).exists()]
    assert present == said   # deleting manifests frees nothing yet: the registry collects offline
    shared = Path(os.environ.get("IMGBUILD_STATE_DIR", "/var/lib/imgbuild")) / "registry" / "registry.pid"
    shared_pid = shared.read_text() if shared.exists() else None
    collected = subprocess.run(["bash", str(ROOT / "scripts" / "registry-gc.sh")], capture_output=True, text=True,
                               timeout=900, env=OWN["env"])
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert f"stopping the registry at {host()}" in collected.stdout, collected.stdout
    # The registry every other test pushes to was never stopped: the same process answers.
    assert (shared.read_text() if shared.exists() else None) == shared_pid
    assert Registry(REGISTRY).manifest_digest("mirror/debian", "bookworm")
    assert [b for b in said if blob(b).exists()] == []
    line = [l for l in collected.stdout.splitlines() if "storage:" in l][-1]
    assert int(line.split("(")[1].split()[0]) >= data["bytes_freed"], line
    # Every release tag left pulls and passes validate, with the stacks file of its revision.
    reg = Registry(host())
    assert reg.manifest_digest(f"{GC_NS}/{STACK}", f"{STACK}-2026.12.01") is None
    for rev, tag in (("b", f"{STACK}-2026.12.02"), ("c", f"{STACK}-2026.12.03"), ("c", STACK)):
        assert reg.manifest_digest(f"{GC_NS}/{STACK}", tag), tag
        ok = imgbuild(work, "validate", f"stack={STACK}", "-f", str(history[rev]["path"]), timeout=900)
        assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
        pulled = subprocess.run(["/usr/bin/docker", "pull", "--quiet", f"{host()}/{GC_NS}/{STACK}:{tag}"],
                                capture_output=True, text=True, timeout=600)
        assert pulled.returncode == 0, pulled.stderr
    # Nothing is left to collect, and no kept release lacks a layer image.
    again = gc(work, history["c"]["path"])[1]
    assert not candidates(again, "layer") and not candidates(again, "release") and not again["missing"]


def consistent(work: Path, path: Path) -> None:
    """Every key tag names an image whose measured manifest is beside it, and no kept release lacks a layer."""
    reg = Registry(host())
    for repo in reg.repositories(f"{GC_NS}/layers/"):
        for tag in reg.tags(repo):
            if len(tag) == 32:
                digest = reg.manifest_digest(repo, tag)
                assert digest and fetch_manifest(reg, repo, digest), f"{repo}:{tag} has no proof beside it"
    data = gc(work, path)[1]
    assert not data["missing"], data["missing"]


@pytest.mark.parametrize("share", [0.0, 0.3, 0.6])
def test_gc_racing_a_build_that_publishes_new_keys(work, history, share):
    """gc --apply runs again and again while a build publishes a new key (its gc-env layer) and releases;
    the build holds a lease on its keys, so it must end with its key intact and its release made. The
    start of the gc loop is moved between runs, so that gc meets the build in different steps: by a share
    of what revision c's build of the same one new key took (a tiny build takes seconds, so a fixed delay
    could start gc after the build ended)."""
    delay = share * history["c"]["seconds"]
    path = stacks_file(work, f"gc-race-{delay}-{time.time_ns()}", f"race-{delay}-{time.time_ns()}")
    node = chain(path)[-1]
    done = threading.Event()
    rounds, errors = [], []

    def collect():
        time.sleep(delay)
        while not done.is_set():
            proc, _ = gc(work, path, "--apply")
            rounds.append(proc.returncode)
            if proc.returncode:
                errors.append(proc.stderr[-2000:])
    loop = threading.Thread(target=collect)
    loop.start()
    try:
        proc = imgbuild(work, "build", f"stack={STACK}", "-f", str(path), "--date", "2026.12.05", timeout=1800)
    finally:
        done.set()
        loop.join()
    assert rounds and set(rounds) == {0}, (rounds, errors)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reg = Registry(host())
    repo, digest = where(node)
    assert digest and verdict(fetch_manifest(reg, repo, digest), node, digest) is None
    assert reg.manifest_digest(f"{GC_NS}/{STACK}", STACK) == digest
    consistent(work, path)
    # After the build, gc keeps the newest releases: the one just made stays.
    assert gc(work, path, "--apply")[0].returncode == 0
    assert reg.manifest_digest(f"{GC_NS}/{STACK}", STACK) == digest and reg.manifest_digest(repo, node.short) == digest


def test_a_key_deleted_on_purpose_is_built_again(work, history):
    path = stacks_file(work, "gc-deleted", "deleted")
    first = imgbuild(work, "build", f"stack={STACK}", "-f", str(path), "--date", "2026.12.06", timeout=1800)
    assert first.returncode == 0, first.stdout[-3000:]
    node = chain(path)[-1]
    repo, digest = where(node)
    assert Registry(host()).delete_manifest(repo, digest)
    assert Registry(host()).manifest_digest(repo, node.short) is None
    again = imgbuild(work, "build", f"stack={STACK}", "-f", str(path), "--date", "2026.12.06", timeout=1800)
    assert again.returncode == 0, again.stdout[-3000:]
    acts = {n["layer"]: n["action"] for n in reports(work)[-1]["nodes"].values()}
    assert acts == {"demo": "reuse", "gc-env": "build"}, acts
    assert where(node)[1] is not None


def test_a_registry_without_deletes_gets_a_clear_message_and_loses_nothing(tmp_path, work):
    """A real Distribution registry with storage.delete off (its default): the dry run says --apply would be
    refused, and --apply is refused before anything is deleted, exit 6, with the setting that allows it."""
    from test_docker_faults import OwnRegistry
    reg = OwnRegistry(tmp_path)
    config = yaml.safe_load(reg.config.read_text())
    config["storage"]["delete"]["enabled"] = False
    reg.config.write_text(yaml.safe_dump(config))
    reg.start()
    try:
        client = Registry(reg.host)   # one old layer image no release needs: a candidate
        config = json.dumps({"created": "2020-01-01T00:00:00Z", "config": {"Labels": {
            "org.opencontainers.image.created": "2020-01-01T00:00:00Z", "io.imgbuild.key": "0" * 64}}}).encode()
        body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": client.put_blob(f"{GC_NS}/layers/x", config), "size": len(config)},
                           "layers": []}).encode()
        client.put_manifest(f"{GC_NS}/layers/x", "0" * 32, body, "application/vnd.oci.image.manifest.v1+json")
        path = stacks_file(work, "gc-nodelete", "x")
        text = path.read_text().replace(host(), reg.host)
        path.write_text(text)
        dry = imgbuild(work, "gc", "-f", str(path))
        assert dry.returncode == 0 and "does not allow deletes: --apply would be refused" in dry.stdout, dry.stdout
        assert "1 of 1 manifest(s)" in dry.stdout, dry.stdout
        for _ in range(2):
            proc = imgbuild(work, "gc", "-f", str(path), "--apply")
            assert proc.returncode == 6, proc.stdout + proc.stderr
            assert "does not allow deleting manifests: nothing was deleted" in proc.stderr
            assert "storage.delete.enabled: true" in proc.stderr and "Traceback" not in proc.stderr
        assert client.manifest_digest(f"{GC_NS}/layers/x", "0" * 32)
    finally:
        reg.stop()
