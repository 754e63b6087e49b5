"""Issue 39 against the real engines and registry: the seed stack built and released with Podman (Buildah,
no daemon) in a namespace of its own, its checks passing, read back by `validate --engine podman` and
exported for Enroot, the node check passing inside the squashfs; its keys the Docker engine's (this worker's `first` build); then `verify --rebuild`
on a clean Podman store: the layers that compile nothing rebuild to identical layer digests, the one that
compiles DeepSpeed's CPU ops is reported drifting with its files and cause, and the result is recorded
beside the release for the catalog. The bugs put back (no fixed file times; no SOURCE_DATE_EPOCH at pip
time) make a rebuild of the project layer drift, naming its files (each was run several times while it was
written, always drifting; the suite runs each once, for its budget). The Docker engine here (20.10)
cannot fix file times: its rebuild says so and counts time-only differences apart.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from builder.ship.registry import Registry
from e2e import NS, REGISTRY, env_for, imgbuild, reports, stacks_file

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

NS_P = f"{NS}-podman"
NON_COMPILING = {"cpu-torch-2.13", "cpu-env", "smoke-train"}


def podman_file(work):
    def mutate(data):
        data["site"]["namespace"] = NS_P
    return stacks_file(work, "podman-stacks", mutate)


@pytest.fixture(scope="module")
def podman_release(work) -> dict:
    """cpu-smoke built and released with Podman. It needs no `first`: the file is handed out first in the suite,
    so its Podman build runs while the other worker builds `first` with Docker. This worker's `first` comes
    after it (the test below asks for it in its body: a session fixture named among a test's arguments is set
    up before any module fixture, whatever the order; so its Docker build ran first, beside the other worker's
    build of the same layers, where BuildKit runs each step once for both and the Podman build waited)."""
    assert shutil.which("podman"), "podman is not installed: scripts/setup-test-host.sh installs it"
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(podman_file(work)), "--engine", "podman",
                    "--date", "2026.12.06", timeout=2400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {"proc": proc, "report": reports(work)[-1]}


def test_the_seed_stack_is_built_checked_and_released_with_podman(podman_release, request):
    first = request.getfixturevalue("first")   # after podman_release: see its docstring
    out = podman_release["proc"].stdout
    assert "(Buildah, no daemon)" in out and "ok: 1 stack(s) released; 4 layer image(s) built, 0 reused" in out, out[-3000:]
    nodes = podman_release["report"]["nodes"]
    assert {n["status"] for n in nodes.values()} == {"passed"}
    checks = {c["id"]: c["status"] for n in nodes.values() for c in n["checks"]}
    assert {checks[c] for c in ("cpu-torch.torch-import", "deepspeed.ds-report", "deepspeed.cpu-adam-step",
                                "project.smoke", "runtime-env.env")} == {"passed"}, checks
    # The engine is no key input: Docker's build of the same stack (this worker's `first`) has the same keys.
    assert set(nodes) == set(first["report"]["nodes"]), (sorted(nodes), sorted(first["report"]["nodes"]))
    reg = Registry(REGISTRY)
    top = reg.manifest_digest(f"{NS_P}/cpu-smoke", "cpu-smoke")
    assert top and top == reg.manifest_digest(f"{NS_P}/cpu-smoke", "cpu-smoke-torch2.13.0-cpu-ds0.19.8")
    manifest, media, _ = reg.get_manifest(f"{NS_P}/cpu-smoke", top)
    assert media == "application/vnd.docker.distribution.manifest.v2+json", media
    # One layer per imgbuild layer, each file stamped with site.source_date_epoch (and so the image's creation).
    config = json.loads(reg.get_blob(f"{NS_P}/cpu-smoke", manifest["config"]["digest"]))
    assert config["created"].startswith("1980-01-01") and len(config["rootfs"]["diff_ids"]) == 1 + 4
    assert config["config"]["Shell"] == ["/bin/bash", "-o", "pipefail", "-c"]   # kept: --format docker


def test_validate_reads_the_podman_release_back_and_the_check_passes_inside_its_squashfs(work, podman_release, tmp_path):
    """`validate --engine podman` reruns every check on the release; `export` packs it for Enroot, and the node
    check (DeepSpeed ZeRO-2 with cpu_adam among its checks) passes inside that squashfs, started as Enroot starts
    an image (builder.export.run_in_rootfs): the Slurm/Enroot path from a Podman-built seed. (Issue 14's check
    inside the seed's squashfs is this one: one export of the seed in the suite, not one per engine.)"""
    proc = imgbuild(work, "validate", "stack=cpu-smoke", "-f", str(podman_file(work)), "--engine", "podman")
    assert proc.returncode == 0 and "ok: every check passed or was skipped" in proc.stdout, proc.stdout[-3000:] + proc.stderr
    out = tmp_path / "podman-cpu-smoke.sqsh"
    proc = imgbuild(work, "export", "stack=cpu-smoke", "-f", str(podman_file(work)), "-o", str(out), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.with_name(out.name + ".json").read_text())
    digest = Registry(REGISTRY).manifest_digest(f"{NS_P}/cpu-smoke", "cpu-smoke")
    assert record["source_digest"] == digest and record["source"] == f"{REGISTRY}/{NS_P}/cpu-smoke@{digest}", record
    listing = subprocess.run(["unsquashfs", "-l", str(out)], capture_output=True, text=True).stdout
    assert "squashfs-root/opt/venv/bin/python" in listing and "squashfs-root/etc/rc" in listing
    proc = imgbuild(work, "node-check", "--squashfs", str(out), "--procs", "2", "--json", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["world_size"] == 2 and {r["id"]: r["status"] for r in report["results"]}["deepspeed"] == "passed"


def test_a_clean_rebuild_gives_the_same_layers_where_nothing_is_compiled(work, podman_release):
    proc = imgbuild(work, "verify", "--rebuild", "stack=cpu-smoke", "-f", str(podman_file(work)), "--engine", "podman",
                    "--record", "--json", timeout=2400)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]   # 1: a layer differs
    report = json.loads(proc.stdout)
    by_layer = {v["layer"]: v for v in report["layers"]}
    assert {name for name, v in by_layer.items() if v["identical"]} == NON_COMPILING, {
        name: list(v["causes"])[:3] for name, v in by_layer.items()}
    assert report["file_times"] is None and report["identical"] == 3 and report["total"] == 4
    ds = by_layer["ds-0.19.8-cpu"]
    so = [c for c in ds["changes"] if c["path"].endswith("cpu_adam_op.cpython-311-x86_64-linux-gnu.so")]
    assert so and "compiled code" in so[0]["cause"], ds["changes"]
    assert "3 of 4 layer(s) rebuilt to identical bytes on podman" in proc.stderr and "drifts: ds-0.19.8-cpu" in proc.stderr
    # Recorded beside the release, and shown by the catalog.
    from builder.catalog import collect
    data = collect(Registry(REGISTRY), NS_P)["data"]
    [stack] = [s for s in data["stacks"] if s["name"] == "cpu-smoke"]
    found = stack["releases"][0]["rebuild"]
    assert (found["identical"], found["total"], found["drifting"]) == (3, 4, ["ds-0.19.8-cpu"]), found


def test_no_secret_is_in_any_podman_layer_or_log(work, podman_release):
    """The secrets every e2e build gets (a CA bundle with a marker, a netrc token, an index URL token) reach
    Buildah as --secret files only: none is in any layer of the Podman release (podman save, each layer's
    files, archives inside them too), nor in any log or report. Positive control: the same scan finds the
    token in the netrc it came from."""
    from e2e import NEEDLES
    from test_docker_build import scan, scan_images
    assert scan((work / "netrc").read_bytes(), NEEDLES, "netrc")[0], "the scan finds nothing: it proves nothing"
    ref = f"{REGISTRY}/{NS_P}/cpu-smoke:cpu-smoke"
    subprocess.run(["podman", "pull", "-q", "--tls-verify=false", ref], check=True, capture_output=True)
    try:
        hits, count = scan_images([ref], work / "podman-images.tar", cli="podman")
    finally:
        subprocess.run(["podman", "rmi", "-f", ref], capture_output=True)
    assert hits == [] and count > 1000, (hits, count)
    for log in list((work / "home").rglob("*")) + [work / "outputs.log"]:
        if log.is_file():
            assert scan(log.read_bytes(), NEEDLES, str(log))[0] == []


@pytest.fixture(scope="module")
def one_clean_store(work, podman_release, tmp_path_factory):
    """One empty Podman store for the two bugs put back, so the project layer's parent (torch and DeepSpeed,
    2 GB) is pulled into it once, not once per rebuild. Clean enough for both: Podman builds here with
    --layers=false (no cache), and each rebuild removes the image it built; what stays is the released parent."""
    from builder.ship.podman import PodmanEngine
    with PodmanEngine.detect().clean(tmp_path_factory.mktemp("podman-store")) as engine:
        yield engine


def _rebuild_project(work, monkeypatch, drop: str, store):
    """verify --rebuild of the project layer alone, in process, with one part of reproducibility removed."""
    import contextlib
    from builder.prepared import prepare
    from builder.load.spec import load_spec
    from builder.ship import reproduce
    from builder.ship.podman import PodmanEngine
    for key, value in env_for(work).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(PodmanEngine, "clean", lambda self, scratch: contextlib.nullcontext(store))
    if drop == "timestamp":
        real = PodmanEngine.build_argv

        def without(self, req):
            argv = real(self, req)
            i = argv.index("--timestamp")
            return argv[:i] + argv[i + 2:]
        monkeypatch.setattr(PodmanEngine, "build_argv", without)
    else:   # the Dockerfile without its ARG SOURCE_DATE_EPOCH: Python then writes timestamp-based .pyc
        from builder.ship import pipeline
        real_context = pipeline.assemble_context

        def without_epoch(node, hostconf, dest):
            context = real_context(node, hostconf, dest)
            path = context / "Dockerfile"
            text = path.read_text()
            assert "\nARG SOURCE_DATE_EPOCH=" in text
            path.write_text("".join(line for line in text.splitlines(True) if not line.startswith("ARG SOURCE_DATE_EPOCH=")))
            return context
        monkeypatch.setattr(pipeline, "assemble_context", without_epoch)
    spec = load_spec(podman_file(work))
    prepared = prepare(spec, [spec.stacks["cpu-smoke"]], bases="all")
    return reproduce.rebuild(prepared, "stack=cpu-smoke", lambda line: None, engine_kind="podman",
                             layers=("smoke-train",))


def test_without_fixed_file_times_the_project_layer_drifts_and_names_its_files(work, one_clean_store, monkeypatch):
    [v] = _rebuild_project(work, monkeypatch, "timestamp", one_clean_store).layers
    assert not v.identical and not v.time_only
    paths = {c["path"] for c in v.changes}
    assert "opt/project/pyproject.toml" in paths or any(p.startswith("opt/project/") for p in paths), sorted(paths)[:10]
    assert any("file time not fixed" in c["cause"] for c in v.changes), v.causes


def test_without_source_date_epoch_the_project_layer_drifts_in_its_pyc(work, one_clean_store, monkeypatch):
    [v] = _rebuild_project(work, monkeypatch, "epoch", one_clean_store).layers
    assert not v.identical
    pyc = [c for c in v.changes if c["path"].endswith(".pyc")]
    assert pyc and all("timestamp-based .pyc" in c["cause"] for c in pyc), v.changes[:5]


def test_the_docker_engine_says_it_cannot_fix_file_times(work, first):
    proc = imgbuild(work, "verify", "--rebuild", "stack=cpu-smoke", "-f", str(stacks_file(work, "stacks")),
                    "--engine", "docker", "--layer", "smoke-train", "--json", timeout=1200)
    report = json.loads(proc.stdout)
    assert "cannot be fixed before BuildKit 0.13" in report["file_times"], report["file_times"]
    [v] = report["layers"]
    # Contents are the same (checked-hash .pyc); only the times the engine stamped differ, counted apart.
    assert v["time_only"] and not v["identical"], v["causes"]
    assert proc.returncode == 1 and "differ in file times alone, which this engine cannot fix" in proc.stderr
