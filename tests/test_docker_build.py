"""End to end against the real engine and the real registry: build, skip, rebuild, refuse, kill.

One namespace per session in the local registry, so the first build really builds. The tests run in
file order and share state (the first build is what the others change). ~10 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from builder.ship.registry import Registry

from e2e import (INDEX_URL, MARKER, NEEDLES, NS, PIN_V2, REGISTRY, ROOT, actions, env_for, imgbuild, key_states,
                 release, reports, stacks_file)

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


def test_cpu_smoke_builds_validates_and_is_released(first):
    rep = first["report"]
    assert rep["ok"] and set(actions(rep).values()) == {"build"}
    tags = rep["tags"]["cpu-smoke"]
    assert set(tags) == {"cpu-smoke", "cpu-smoke-2026.11.29", "cpu-smoke-torch2.13.0-cpu-ds0.19.8"}
    top = {release(t) for t in tags}
    assert len(top) == 1 and None not in top
    # The stored manifest of the DeepSpeed layer shows cpu_adam prebuilt and compatible.
    reg = Registry(REGISTRY)
    from builder.ship.manifest import fetch_manifest
    ds = next(n for n in rep["nodes"].values() if n["layer"] == "ds-0.19.8-cpu")
    manifest = fetch_manifest(reg, f"{NS}/layers/ds-0.19.8-cpu", ds["digest"])
    assert manifest["ds_report_ops"]["cpu_adam"] == {"installed": True, "compatible": True}
    assert manifest["versions"]["deepspeed"] == "0.19.8" and manifest["versions"]["torch"] == "2.13.0+cpu"
    statuses = {c["id"]: c["status"] for c in manifest["checks"]}
    assert statuses["deepspeed.ds-report"] == "passed" and statuses["deepspeed.cpu-adam-step"] == "passed"
    assert statuses["deepspeed.fused-adam-step"] == "skipped"      # a GPU check, never faked
    # Labels tie the released image to its key, spec and base.
    oci, _, _ = reg.get_manifest(f"{NS}/cpu-smoke", "cpu-smoke")
    config = json.loads(reg.get_blob(f"{NS}/cpu-smoke", oci["config"]["digest"]))
    labels = config["config"]["Labels"]
    assert labels["io.imgbuild.key"].startswith(rep["nodes"][next(iter(reversed(rep["nodes"])))]["key"])
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert labels["io.imgbuild.source.source"].endswith("@d89c5dfd761db2eb8352a3c3df6659c984547929")
    assert "io.imgbuild.spec-hash" in labels


def test_rebuild_builds_nothing_even_without_local_images(work, first):
    refs = subprocess.run(["/usr/bin/docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
                          capture_output=True, text=True, check=True).stdout.split()
    # Only this session's images: another build on this engine (a developer, another test worker building
    # the same keys at this moment) keeps its own. A local tag ends in its run's id (pipeline.py), and this
    # session's runs are the folders under its IMGBUILD_HOME.
    runs = {p.name for p in (work / "home" / "runs").iterdir()}
    mine = [r for r in refs if f"/{NS}/" in r
            or r.startswith("imgbuild.local/") and r.rsplit(":", 1)[-1].removesuffix("-again").split("-", 1)[-1] in runs]
    if mine:
        subprocess.run(["/usr/bin/docker", "image", "rm", "--force", *mine], check=True, capture_output=True)
    before = release("cpu-smoke")
    start = time.time()
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(stacks_file(work, "stacks")), "--date", "2026.11.29")
    noop = time.time() - start
    assert proc.returncode == 0, proc.stderr
    assert "0 build" in proc.stdout and "building" not in proc.stdout
    assert set(actions(reports(work)[-1]).values()) == {"reuse"}
    assert release("cpu-smoke") == before
    print(f"\nfull build {first['seconds']:.1f} s, no-op rebuild {noop:.1f} s")


def test_a_branch_job_in_ci_builds_and_validates_and_moves_no_tag(work, first):
    """`imgbuild build stack=...` in a feature branch's GitLab job (its variables as GitLab sets them): the
    change is built and validated under its keys, and no tag moves (issue 18); the same run outside CI
    would have released."""
    def threads(data):   # a value no other test of the seed builds
        data["runtimes"]["cpu-env"]["params"]["env"]["OMP_NUM_THREADS"] = "23"
    before = {t: release(t) for t in ("cpu-smoke", "cpu-smoke-torch2.13.0-cpu-ds0.19.8")}
    branch = {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "feature/threads", "CI_DEFAULT_BRANCH": "main"}
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(stacks_file(work, "threads", threads)), env=branch)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert actions(reports(work)[-1]) == {"cpu-torch-2.13": "reuse", "ds-0.19.8-cpu": "reuse", "cpu-env": "build",
                                         "smoke-train": "build"}
    assert ("release: not here: this pipeline runs for branch 'feature/threads'; only 'main' (the repository's "
            "default branch) releases") in proc.stdout, proc.stdout[-3000:]
    assert "none released (not the release branch)" in proc.stdout
    assert {t: release(t) for t in before} == before
    # `imgbuild release` in the same job refuses by itself, before it asks the registry anything.
    proc = imgbuild(work, "release", "stack=cpu-smoke", "-f", str(stacks_file(work, "threads", threads)), env=branch)
    assert proc.returncode == 7 and "release refused: this pipeline runs for branch 'feature/threads'" in proc.stderr
    assert {t: release(t) for t in before} == before


def _pin_v2(data):
    data["projects"]["smoke-train"]["params"]["source"]["commit"] = PIN_V2


def test_changing_the_project_pin_rebuilds_only_the_project_layer(work, first):
    before = release("cpu-smoke")
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(stacks_file(work, "pin-v2", _pin_v2)),
                    "--date", "2026.11.29")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    acts = actions(reports(work)[-1])
    assert [k for k, v in acts.items() if v == "build"] == ["smoke-train"], acts
    after = release("cpu-smoke")
    assert after and after != before
    # The project's own smoke check ran the pinned revision inside the new image.
    run_dir = max((work / "home" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    manifest = json.loads(next((run_dir / "manifests").glob("smoke-train-*.json")).read_text())
    smoke = next(c for c in manifest["checks"] if c["id"] == "project.smoke")
    assert smoke["status"] == "passed" and "smoke_train revision 2" in smoke["detail"], smoke


def _require_aio(data):
    data["layers"]["ds-0.19.8-cpu"]["params"].update({"runtime_ops": ["async_io"], "libaio": False})


TAGS = ("cpu-smoke", "cpu-smoke-2026.11.29", "cpu-smoke-torch2.13.0-cpu-ds0.19.8")


def test_a_failing_check_fails_every_run_and_never_moves_a_tag(work, first):
    """The keys stay, only the checks change (async_io required, libaio not installed). Before the fix,
    runs 1-3 failed and run 4 released the failing image. Five runs here: each one must revalidate the
    DeepSpeed layer, fail, store nothing in the registry and leave every release tag where it was."""
    from builder.ship.manifest import fetch_manifest
    reg = Registry(REGISTRY)
    before = {t: release(t) for t in TAGS}
    assert None not in before.values()
    ds_repo = f"{NS}/layers/ds-0.19.8-cpu"
    ds_digest = next(n["digest"] for n in first["report"]["nodes"].values() if n["layer"] == "ds-0.19.8-cpu")
    stored = fetch_manifest(reg, ds_repo, ds_digest)
    for run in range(1, 6):
        proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(stacks_file(work, "aio", _require_aio)),
                        "--date", "2026.11.29")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 7, f"run {run}: exit {proc.returncode}\n" + out[-3000:]
        assert "async_io must be compatible" in out and "no tag of cpu-smoke was moved" in proc.stderr, out[-3000:]
        acts = actions(reports(work)[-1])
        assert acts["ds-0.19.8-cpu"] == "revalidate" and acts["cpu-torch-2.13"] == "reuse", (run, acts)
        assert {t: release(t) for t in TAGS} == before, f"run {run} moved a release tag"
        assert fetch_manifest(reg, ds_repo, ds_digest) == stored, f"run {run} overwrote the stored validation"
    # The release step refuses it as well: the stricter spec's checks are not proven for this image.
    proc = imgbuild(work, "release", "stack=cpu-smoke", "-f", str(stacks_file(work, "aio", _require_aio)),
                    "--date", "2026.11.30")
    assert proc.returncode == 7 and "its checks changed since it was validated" in proc.stderr, proc.stderr
    assert {t: release(t) for t in TAGS} == before and release("cpu-smoke-2026.11.30") is None


def build_clients(pid: int) -> list[str]:
    """The docker build clients that the imgbuild process `pid` started (its run id, in the local tag,
    ends in -PID). Read from /proc: ps would cut the long argv of a build."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"build" in argv and any(a.startswith(b"imgbuild.local/") and a.endswith(f"-{pid}".encode()) for a in argv):
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


def interrupted_build(work: Path, name: str, packages: list[str], when: str, sig: int):
    """Start a build whose only new layer is the project, send `sig` at the first output line that
    holds `when` for that layer, and return (process, lines seen, path of the spec)."""
    def mutate(data):
        _pin_v2(data)
        data["projects"]["smoke-train"]["params"]["packages"] = packages
        # A value of this session's in the runtime env: the project's RUN then has a new cache key, so
        # BuildKit really runs it (a cached step would finish before any signal could land mid-build).
        data["runtimes"]["cpu-env"]["params"]["env"]["IMGBUILD_TEST_RUN"] = f"{NS}-{name}"
    path = stacks_file(work, name, mutate)
    proc = subprocess.Popen([sys.executable, "-m", "builder.cli", "build", "stack=cpu-smoke", "-f", str(path),
                             "--date", "2026.11.29"], cwd=work, env=env_for(work), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "smoke-train" in line and when in line:
            if when == "building":
                # Wait until the build client really runs, so the signal lands mid-build.
                deadline = time.time() + 30
                while not build_clients(proc.pid) and time.time() < deadline:
                    time.sleep(0.2)
                assert build_clients(proc.pid), "".join(seen)
            proc.send_signal(sig)
            break
    seen += proc.stdout.readlines()
    proc.wait(timeout=120)
    return proc, seen, path


def project_key(work: Path, path: Path) -> str:
    """The project layer's key exactly as `build` computes it (bases resolved in the registry)."""
    from builder.ship.bases import resolve
    from builder.plan.keys import make_plan
    from builder.load.spec import load_spec
    spec = load_spec(path)
    return make_plan(spec, ["cpu-smoke"], resolve(spec, ["cpu-smoke"]).require()).top("cpu-smoke").short


def assert_no_key_is_half_there(path: Path) -> dict:
    """Every key the killed run touched is absent or complete, never half. (The runtime layer beneath the
    project may or may not have been published: the project builds on its local image while it is still
    being checked and pushed.)"""
    states = {layer: state for layer, (state, _) in key_states(str(path), "cpu-smoke").items()}
    assert all(s in ("absent", "complete") for s in states.values()), states
    assert states["cpu-torch-2.13"] == states["ds-0.19.8-cpu"] == "complete" and states["smoke-train"] == "absent"
    return states


def assert_next_run_builds_only_what_is_absent(work: Path, path: Path, before: str) -> None:
    """No key is half there, and the next run reuses the complete ones and builds the absent ones, the
    interrupted project among them."""
    states = assert_no_key_is_half_there(path)
    done = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(path), "--date", "2026.11.29")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    acts = actions(reports(work)[-1])
    assert acts == {layer: "reuse" if s == "complete" else "build" for layer, s in states.items()}, (acts, states)
    key = project_key(work, path)
    assert release("cpu-smoke") not in (None, before)
    assert release("cpu-smoke") == Registry(REGISTRY).manifest_digest(f"{NS}/layers/smoke-train", key)


@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 130)])
def test_a_build_killed_mid_build_stops_its_build_and_moves_no_tag(work, first, sig, code):
    """SIGKILL (nothing can unwind) and SIGTERM (CI cancelling the job: unwinds like Ctrl-C, exit 130).
    Either way the docker build client must not outlive imgbuild, no tag moves, and every key is absent or
    complete. That the next run then builds exactly the absent keys is shown after SIGKILL (and after a kill
    while validating): it reads only the keys' states, which are asserted here after either signal."""
    before = release("cpu-smoke")
    packages = ["six==1.16.0"] if sig == signal.SIGKILL else ["six==1.15.0"]
    proc, seen, path = interrupted_build(work, f"killed-{int(sig)}", packages, "building", sig)
    assert proc.returncode == code, "".join(seen[-30:])
    if sig == signal.SIGTERM:
        assert "interrupted" in "".join(seen[-5:]) and "Traceback" not in "".join(seen)
    deadline = time.time() + 30
    while build_clients(proc.pid) and time.time() < deadline:
        time.sleep(0.5)
    assert build_clients(proc.pid) == [], "the docker build outlived imgbuild"
    assert release("cpu-smoke") == before
    assert Registry(REGISTRY).manifest_digest(f"{NS}/layers/smoke-train", project_key(work, path)) is None
    if sig == signal.SIGKILL:
        assert_next_run_builds_only_what_is_absent(work, path, before)
    else:
        assert_no_key_is_half_there(path)


def test_a_killed_imgbuild_takes_its_quiet_build_with_it(tmp_path):
    """A step that prints nothing for a minute (a long nvcc compile): when imgbuild dies by SIGKILL, its
    build client must stop at once, not when the step ends (a client that writes to the dead pipe
    dies of SIGPIPE anyway; a quiet one would not)."""
    (tmp_path / "Dockerfile").write_text(f"FROM {REGISTRY}/mirror/debian:bookworm\nRUN : {NS} && echo started-$((6 * 7)) && sleep 90\n")
    code = ("import os, sys; from pathlib import Path; from builder.ship.engine import BuildRequest, Engine; "
            "d = Path(sys.argv[1]); Engine.detect().build(BuildRequest(context=d, dockerfile=d / 'Dockerfile', "
            "tag=f'imgbuild.local/quiet:x-{os.getpid()}', build_args={}, labels={}), d / 'build.log')")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT)
    deadline = time.time() + 60
    # "started-42" is the step's own output: from then on the client has nothing to write for 90 s.
    while not (tmp_path / "build.log").exists() or "started-42" not in (tmp_path / "build.log").read_text():
        assert time.time() < deadline and proc.poll() is None, "the quiet step never started"
        time.sleep(0.2)
    time.sleep(1)
    assert build_clients(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.time() + 10
    while build_clients(proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    assert build_clients(proc.pid) == [], "the build client outlived imgbuild"
    assert "DONE" not in (tmp_path / "build.log").read_text().split("started-42", 1)[1]


def test_a_build_killed_while_validating_moves_no_tag_and_leaves_no_key(work, first):
    """The kill lands after the image was built, while it is being checked: the moment just before a
    push and the tags. The key must stay absent (never half there) and every tag where it was."""
    before = {t: release(t) for t in TAGS}
    proc, seen, path = interrupted_build(work, "killed-validating", ["six==1.14.0"], "validating", signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, "".join(seen[-30:])
    assert {t: release(t) for t in TAGS} == before
    assert Registry(REGISTRY).manifest_digest(f"{NS}/layers/smoke-train", project_key(work, path)) is None
    assert_next_run_builds_only_what_is_absent(work, path, before["cpu-smoke"])


def scan(data: bytes, needles: list[bytes], where: str, depth: int = 0) -> tuple[list[str], int]:
    """(hits, files scanned): the bytes themselves and, inside them, tar, gzip, bzip2, xz and zip
    members (wheels, eggs, compressed logs), to three levels."""
    import bz2
    import gzip
    import io
    import lzma
    import zipfile
    hits = [f"{where}: {n[:20]!r}..." for n in needles if n in data]
    count = 1
    if depth >= 3:
        return hits, count
    inner: list[tuple[str, bytes]] = []
    try:
        if data[:2] == b"\x1f\x8b":
            inner.append(("gunzip", gzip.decompress(data)))
        elif data[:3] == b"BZh":
            inner.append(("bunzip2", bz2.decompress(data)))
        elif data[:6] == b"\xfd7zXZ\x00":
            inner.append(("unxz", lzma.decompress(data)))
        elif data[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                inner += [(i.filename, z.read(i)) for i in z.infolist() if not i.is_dir()]
        elif len(data) > 262 and data[257:262] == b"ustar":
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                inner += [(m.name, t.extractfile(m).read()) for m in t if m.isfile()]
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, tarfile.TarError, lzma.LZMAError):
        pass
    for name, blob in inner:
        h, c = scan(blob, needles, f"{where}:{name}", depth + 1)
        hits += h
        count += c
    return hits, count


def scan_images(refs: list[str], archive: Path, cli: str = "/usr/bin/docker") -> tuple[list[str], int]:
    """Scan `docker save` (or `podman save`: cli) of refs member by member (a whole archive is GBs; one layer
    at a time fits)."""
    subprocess.run([cli, "save", "-o", str(archive), *refs], check=True, capture_output=True)
    hits, count = [], 0
    try:
        with tarfile.open(archive) as outer:
            for member in outer:
                if member.isfile():
                    h, c = scan(outer.extractfile(member).read(), NEEDLES, member.name, depth=1)
                    hits, count = hits + h, count + c
    finally:
        archive.unlink()
    return hits, count


def test_the_secret_scan_finds_a_leak_plain_and_compressed(work):
    """Positive control of the scan below: an image that does leak (the netrc copied in, gzipped, and
    inside a zip) must be caught, or the scan proves nothing."""
    import gzip
    import zipfile
    ctx = work / "leaky"
    ctx.mkdir(exist_ok=True)
    (ctx / "netrc").write_bytes((work / "netrc").read_bytes())
    (ctx / "log.gz").write_bytes(gzip.compress(b"pip said: " + INDEX_URL.encode()))
    with zipfile.ZipFile(ctx / "pkg.whl", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/ca.pem", MARKER)
    (ctx / "Dockerfile").write_text(f"FROM {REGISTRY}/mirror/debian:bookworm\nCOPY netrc log.gz pkg.whl /leak/\n")
    tag = f"imgbuild.local/leaky-{NS}:1"
    subprocess.run(["/usr/bin/docker", "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True,
                   env=dict(os.environ, DOCKER_BUILDKIT="1"))
    try:
        hits, _ = scan_images([tag], work / "leaky.tar")
    finally:
        subprocess.run(["/usr/bin/docker", "image", "rm", "-f", tag], capture_output=True)
    assert any("leak/netrc:" in h for h in hits), hits
    assert any("leak/log.gz:gunzip" in h for h in hits), hits
    assert any("leak/pkg.whl:pkg/ca.pem" in h for h in hits), hits


def test_the_secrets_reach_the_build_through_buildkit_only(work, tmp_path, monkeypatch):
    """Positive control of the other half: the very mounts the layer fragments use receive each secret
    (the CA bundle, the netrc, the index URL) through HostConf and Engine.build, shown by their hashes
    inside the build; the image holds the hashes and none of the secrets."""
    import hashlib
    import re as _re
    from builder.ship.engine import BuildRequest, Engine
    from builder.ship.hostconf import HostConf
    for k, v in env_for(work).items():
        if k.startswith("IMGBUILD_"):
            monkeypatch.setenv(k, v)
    golden = (ROOT / "tests" / "golden" / "cpu-smoke" / "01-ds-0.19.8-cpu.Dockerfile").read_text()
    mounts = " ".join(_re.findall(r"--mount=type=secret,id=[a-z-]+,target=\S+", golden))
    assert mounts.count("type=secret") == 3, mounts
    (tmp_path / "Dockerfile").write_text(
        f"FROM {REGISTRY}/mirror/debian:bookworm\n"
        # The nonce defeats BuildKit's cache, whose key ignores what a secret holds: a /proof cached by an
        # earlier session (other secrets) would otherwise be reused.
        f"RUN {mounts} echo {NS} > /nonce && sha256sum /run/secrets/ca-bundle /root/.netrc /run/secrets/pip-index-url > /proof\n")
    tag = f"imgbuild.local/secret-proof-{NS}:1"
    conf = HostConf.from_env()
    engine = Engine.detect(None)
    with conf.secrets() as secrets:
        assert set(secrets) == {"ca-bundle", "netrc", "pip-index-url"}
        engine.build(BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tag=tag, build_args={},
                                  labels={}, secrets=secrets), tmp_path / "build.log")
    try:
        proof = subprocess.run(["/usr/bin/docker", "run", "--rm", tag, "cat", "/proof"], capture_output=True,
                               text=True, check=True).stdout.split()[::2]
        hits, _ = scan_images([tag], tmp_path / "proof.tar")
    finally:
        subprocess.run(["/usr/bin/docker", "image", "rm", "-f", tag], capture_output=True)
    want = [hashlib.sha256(b).hexdigest() for b in ((work / "ca-bundle.pem").read_bytes(),
                                                   (work / "netrc").read_bytes(), INDEX_URL.encode())]
    assert proof == want
    assert hits == []
    assert not any(n in (tmp_path / "build.log").read_bytes() for n in NEEDLES)


def test_no_secret_in_any_layer_manifest_or_log(work, first):
    """Every builder ran with the CA bundle (a marker line), a netrc token and an index URL with a token.
    None of them may be in any layer (compressed files included), any manifest or artifact stored in
    the registry, any log or report, or anything imgbuild printed."""
    reg = Registry(REGISTRY)
    layer_repos = [f"{NS}/layers/{l}" for l in ("cpu-torch-2.13", "ds-0.19.8-cpu", "smoke-train", "cpu-env")]
    artifacts = (".imgbuild", ".sbom")   # imgbuild's manifests and the releases' SBOMs: not images
    refs = [f"{REGISTRY}/{repo}:{tag}" for repo in layer_repos for tag in reg.tags(repo) if not tag.endswith(artifacts)]
    assert len(refs) >= 4
    for ref in refs:
        subprocess.run(["/usr/bin/docker", "pull", "-q", ref], check=True, capture_output=True)
    hits, scanned = scan_images(refs, work / "images.tar")
    assert hits == []
    assert scanned > 1000
    # What the registry holds besides the images: every manifest, config and imgbuild artifact blob.
    stored = 0
    for repo in layer_repos + [f"{NS}/cpu-smoke"]:
        for tag in reg.tags(repo):
            manifest, _, _ = reg.get_manifest(repo, tag)
            blobs = [manifest.get("config", {})] + (manifest.get("layers", []) if tag.endswith(artifacts) else [])
            for blob in blobs:
                h, _ = scan(reg.get_blob(repo, blob["digest"]), NEEDLES, f"{repo}:{tag}")
                hits += h
                stored += 1
            hits += scan(json.dumps(manifest).encode(), NEEDLES, f"{repo}:{tag} manifest")[0]
    assert hits == [] and stored >= 8
    # The SBOM (syft read every package's metadata) was among what was scanned.
    assert any(t.endswith(".sbom") for t in reg.tags(f"{NS}/cpu-smoke"))
    for log in list((work / "home").rglob("*")) + [work / "outputs.log"]:
        if log.is_file():
            assert scan(log.read_bytes(), NEEDLES, str(log))[0] == []


def test_validate_reruns_the_checks_of_the_released_image(work, first):
    proc = imgbuild(work, "validate", "stack=cpu-smoke", "-f", str(stacks_file(work, "pin-v2", _pin_v2)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "passed  deepspeed.ds-report" in proc.stdout and "project.smoke" in proc.stdout
    assert "skipped deepspeed.fused-adam-step: skipped: needs a GPU" in proc.stdout
    # The same image under the stricter spec (async_io required) fails, and says why.
    def strict(data):
        _pin_v2(data)
        _require_aio(data)
    bad = imgbuild(work, "validate", "stack=cpu-smoke", "-f", str(stacks_file(work, "strict", strict)))
    assert bad.returncode != 0 and "async_io" in bad.stdout


def test_an_unreachable_registry_is_a_clear_error(work):
    def nowhere(data):
        data["site"]["registry"] = "127.0.0.1:9"
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(stacks_file(work, "nowhere", nowhere)))
    assert proc.returncode == 6, proc.stderr
    assert "registry 127.0.0.1:9 is unreachable" in proc.stderr and "Traceback" not in proc.stderr
