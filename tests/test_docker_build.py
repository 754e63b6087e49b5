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
import uuid
from pathlib import Path

import pytest
import yaml

from builder.registry import Registry

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = os.environ.get("IMGBUILD_TEST_REGISTRY", "127.0.0.1:5000")
NS = f"imgbuild-test-{uuid.uuid4().hex[:8]}"
PIN_V2 = "1a6d04ff11a3a379285c6dc7862d82d095f0056c"   # tag v2 of the smoke-project mirror
TOKEN = f"dummy-token-{uuid.uuid4().hex}"
MARKER = f"# imgbuild-secret-marker-{uuid.uuid4().hex}"

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("docker-e2e")
    ca = path / "ca-bundle.pem"
    host_ca = Path("/etc/ssl/certs/ca-certificates.crt")
    ca.write_text((host_ca.read_text() if host_ca.exists() else "") + f"\n{MARKER}\n")
    (path / "netrc").write_text(f"machine private-index.invalid login build password {TOKEN}\n")
    return path


def stacks_file(work: Path, name: str, mutate=lambda data: None) -> Path:
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": REGISTRY, "namespace": NS}
    mutate(data)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def imgbuild(work: Path, *args: str, timeout: float = 3000) -> subprocess.CompletedProcess:
    env = dict(os.environ, IMGBUILD_HOME=str(work / "home"), IMGBUILD_CA_BUNDLE=str(work / "ca-bundle.pem"),
               IMGBUILD_NETRC=str(work / "netrc"), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "builder.cli", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)
    (work / "outputs.log").open("a").write(proc.stdout + proc.stderr)
    return proc


def release(tag: str, stack: str = "cpu-smoke") -> str | None:
    return Registry(REGISTRY).manifest_digest(f"{NS}/{stack}", tag)


def reports(work: Path) -> list[dict]:
    runs = sorted((work / "home" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    return [json.loads((r / "report.json").read_text()) for r in runs if (r / "report.json").exists()]


def actions(rep: dict) -> dict:
    return {n["layer"]: n["action"] for n in rep["nodes"].values()}


@pytest.fixture(scope="module")
def first(work):
    """The full cpu-smoke build in a fresh namespace."""
    start = time.time()
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(stacks_file(work, "stacks")), "--date", "2026.11.29")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {"proc": proc, "seconds": time.time() - start, "report": reports(work)[-1]}


def test_cpu_smoke_builds_validates_and_is_released(first):
    rep = first["report"]
    assert rep["ok"] and set(actions(rep).values()) == {"build"}
    tags = rep["tags"]["cpu-smoke"]
    assert set(tags) == {"cpu-smoke", "cpu-smoke-2026.11.29", "cpu-smoke-torch2.13.0-cpu-ds0.19.8"}
    top = {release(t) for t in tags}
    assert len(top) == 1 and None not in top
    # The stored manifest of the DeepSpeed layer shows cpu_adam prebuilt and compatible.
    reg = Registry(REGISTRY)
    from builder.manifest import fetch_manifest
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
    mine = [r for r in refs if f"/{NS}/" in r or r.startswith("imgbuild.local/")]
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


def test_an_op_the_image_cannot_provide_fails_validation_and_moves_no_tag(work, first):
    before = {t: release(t) for t in ("cpu-smoke", "cpu-smoke-2026.11.29")}
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(stacks_file(work, "aio", _require_aio)),
                    "--date", "2026.11.29")
    assert proc.returncode == 7, proc.stdout[-3000:]
    assert "async_io must be compatible" in proc.stdout + proc.stderr
    assert "no release tag was moved" in proc.stderr
    assert {t: release(t) for t in before} == before


def test_a_killed_build_moves_no_tag_and_the_next_run_completes(work, first):
    def extra_package(data):
        _pin_v2(data)
        data["projects"]["smoke-train"]["params"]["packages"] = ["six==1.16.0"]
    path = stacks_file(work, "killed", extra_package)
    before = release("cpu-smoke")
    env = dict(os.environ, IMGBUILD_HOME=str(work / "home"), IMGBUILD_CA_BUNDLE=str(work / "ca-bundle.pem"),
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "builder.cli", "build", "stack=cpu-smoke", "-f", str(path)],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "smoke-train" in line and "building" in line:
            time.sleep(2)
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)
    assert release("cpu-smoke") == before
    done = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert release("cpu-smoke") not in (None, before)


def test_no_secret_in_any_layer_or_log(work, first):
    """The CA bundle and the netrc token went in as BuildKit secrets: scan every saved image and log."""
    reg = Registry(REGISTRY)
    refs = [f"{REGISTRY}/{NS}/layers/{repo.split('/')[-1]}:{tag}"
            for repo in [f"{NS}/layers/{l}" for l in ("cpu-torch-2.13", "ds-0.19.8-cpu", "smoke-train", "cpu-env")]
            for tag in reg.tags(repo) if not tag.endswith(".imgbuild")]
    assert len(refs) >= 4
    needles = [TOKEN.encode(), MARKER.encode()]
    archive = work / "images.tar"
    subprocess.run(["/usr/bin/docker", "pull", "-q", refs[0]], check=True, capture_output=True)
    for ref in refs:
        subprocess.run(["/usr/bin/docker", "pull", "-q", ref], check=True, capture_output=True)
    subprocess.run(["/usr/bin/docker", "save", "-o", str(archive), *refs], check=True)
    scanned = 0
    with tarfile.open(archive) as outer:
        for member in outer:
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=__import__("io").BytesIO(data)) as layer:
                    for entry in layer:
                        if entry.isfile():
                            blob = layer.extractfile(entry).read()
                            scanned += 1
                            assert not any(n in blob for n in needles), f"secret in {member.name}:{entry.name}"
            else:
                assert not any(n in data for n in needles), f"secret in {member.name}"
    archive.unlink()
    assert scanned > 1000
    for log in list((work / "home").rglob("*.log")) + list((work / "home").rglob("*.json")) + [work / "outputs.log"]:
        text = log.read_bytes()
        assert not any(n in text for n in needles), f"secret in {log}"


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
