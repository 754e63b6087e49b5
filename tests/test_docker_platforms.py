"""A stack of two platforms (issue 22) on the real engine and registry: linux/amd64 natively, linux/arm64
under QEMU user-mode emulation (Debian's qemu-user-static and binfmt-support, registered through
binfmt_misc by scripts/setup-host.sh), on the mirrored Debian base, which is an index of both.

The stack is cpu-smoke's chain with `platforms: [linux/amd64, linux/arm64]`: its torch layer's amd64
image is cpu-smoke's (the same key, reused from the session's first build), everything else is built
here. The arm64 side of the torch layer installs PyPI's torch 2.10.0 aarch64 wheel, the newest CPU-only
one (2.11 and later need CUDA 13's wheels), so its tags use no torch version. DeepSpeed is installed
without prebuilt ops and checked JIT-free (ds_report must find cpu_adam compatible): compiling cpu_adam
and shm_comm under emulation took over 15 minutes here (docs/measurements/2026-12-04-arm64-emulation.txt),
which the test suite's time cannot hold.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from builder.ship.registry import Registry

from e2e import NS, REGISTRY, imgbuild, release, reports, stacks_file

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

ARM_WHEEL = {"file": "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
             "sha256": "3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"}
TAGS = ("cpu-both", "cpu-both-ds0.19.8")
INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER = "/usr/bin/docker"


def both(data, smoke: str | None = None):
    params = data["layers"]["cpu-torch-2.13"]["params"]
    params["wheel"] = [params["wheel"], ARM_WHEEL]    # cpu-smoke (amd64 only) installs the first, as before
    data["layers"]["ds-0.19.8-jit"] = {"kind": "deepspeed", "params": {"version": "0.19.8", "runtime_ops": ["cpu_adam"]}}
    data["stacks"]["cpu-both"] = {"extends": "cpu-smoke", "layers": ["cpu-torch-2.13", "ds-0.19.8-jit"],
                                  "platforms": ["linux/amd64", "linux/arm64"],
                                  "tags": ["{stack}", "{stack}-ds{deepspeed}"],
                                  "description": "cpu-smoke for x86 and Grace nodes: one index of two images"}
    if smoke is not None:
        data["projects"]["smoke-train"]["params"]["smoke"] = smoke


def run(ref: str, platform: str, *argv: str) -> str:
    """docker run of one platform's entry of a release tag. Docker 20.10 keeps one image per local name and
    digest: the other platform's entry, pulled before, is removed (with the references it holds), else the
    pull is refused ("Cannot overwrite digest"); then this platform's entry is pulled."""
    subprocess.run([DOCKER, "image", "rm", "--force", ref], capture_output=True, timeout=300)
    subprocess.run([DOCKER, "pull", "--quiet", "--platform", platform, ref], check=True, capture_output=True,
                   timeout=900)
    proc = subprocess.run([DOCKER, "run", "--rm", "--platform", platform, "--network", "none", ref, *argv],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def built(work, first) -> dict:
    path = stacks_file(work, "both", both)
    proc = imgbuild(work, "build", "stack=cpu-both", "-f", str(path), "--date", "2026.12.04", timeout=5400)
    return {"proc": proc, "report": reports(work)[-1], "path": path}


def test_both_platforms_are_built_checked_and_released_as_one_index(work, built):
    proc, rep = built["proc"], built["report"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "building and checking under QEMU emulation on the linux/amd64 engine" in proc.stdout
    assert rep["ok"] and set(rep["tags"]["cpu-both"]) == set(TAGS)
    from builder.load.spec import load_spec
    from builder.plan.keys import make_plan
    from builder.ship.bases import resolve
    spec = load_spec(built["path"])
    plan = make_plan(spec, ["cpu-both"], resolve(spec, ["cpu-both"]).require())
    # The amd64 torch image is cpu-smoke's, by key; the arm64 chain was built, under emulation.
    first_keys = {n["key"] for n in reports(work)[0]["nodes"].values()}
    amd, arm = plan.chain("cpu-both", "linux/amd64"), plan.chain("cpu-both", "linux/arm64")
    assert amd[0].short in first_keys and not {n.short for n in arm} & first_keys
    acts = {n["key"]: n["action"] for n in rep["nodes"].values()}
    assert acts[amd[0].short] == "reuse" and {acts[n.short] for n in arm} == {"build"}
    assert "under emulation (linux/arm64 on a linux/amd64 engine)" in proc.stdout
    # The tags name one OCI index whose entries are the two top images, each stored in the release repository.
    reg = Registry(REGISTRY)
    index, media_type, digest = reg.get_manifest(f"{NS}/cpu-both", "cpu-both")
    assert media_type == INDEX and {release(t, "cpu-both") for t in TAGS} == {digest}
    tops = {p: reg.manifest_digest(f"{NS}/layers/{n.name}", n.short) for p, n in plan.tops("cpu-both").items()}
    assert {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in index["manifests"]} == tops
    for child in tops.values():
        assert reg.get_manifest(f"{NS}/cpu-both", child) is not None
    # Each platform's image checked inside, on its platform: the arm64 one's manifest records its own torch.
    from builder.ship.manifest import fetch_manifest
    arm_top = plan.top("cpu-both", "linux/arm64")
    recorded = fetch_manifest(reg, f"{NS}/layers/{arm_top.name}", tops["linux/arm64"])
    assert recorded["outcome"] == "passed" and recorded["versions"]["torch"] == "2.10.0"
    assert recorded["versions"]["deepspeed"] == "0.19.8"
    assert recorded["ds_report_ops"]["cpu_adam"]["compatible"] is True   # JIT-free: none prebuilt, cpu_adam can be
    gpu = [c for c in recorded["checks"] if c["gpu"]]
    assert gpu and all(c["status"] == "skipped" and "QEMU emulation" in c["detail"] for c in gpu)
    # One SBOM per platform image, beside each in the release repository.
    from builder.ship import sbom
    for child in tops.values():
        assert reg.manifest_digest(f"{NS}/cpu-both", sbom.sbom_tag(child)), child


def test_the_index_runs_on_each_platform(built):
    assert built["proc"].returncode == 0
    ref = f"{REGISTRY}/{NS}/cpu-both:cpu-both"
    # One pull and one container per platform (each pull of an entry replaces the other's local image).
    code = "import torch, deepspeed, platform; print(platform.machine(), torch.__version__, deepspeed.__version__)"
    both = ("sh", "-c", f'uname -m && python -c "{code}"')
    assert run(ref, "linux/arm64", *both).splitlines() == ["aarch64", "aarch64 2.10.0+cpu 0.19.8"]
    assert run(ref, "linux/amd64", *both).splitlines() == ["x86_64", "x86_64 2.13.0+cpu 0.19.8"]
    # The local tag of the mirrored base stays the amd64 image other tests build FROM.
    subprocess.run([DOCKER, "pull", "--quiet", f"{REGISTRY}/mirror/debian:bookworm"], check=True, capture_output=True)


def test_validate_and_diff_read_each_platform_of_the_release(work, built):
    assert built["proc"].returncode == 0
    # The arm64 image's checks again, under emulation; the amd64 image's run natively in every other
    # validate test. --platform of a platform the stack lacks is refused.
    proc = imgbuild(work, "validate", "stack=cpu-both", "--platform", "linux/arm64", "-f", str(built["path"]),
                    timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("checks:") == 1 and "QEMU emulation" in proc.stdout, proc.stdout[-3000:]
    wrong = imgbuild(work, "validate", "stack=cpu-smoke", "--platform", "linux/arm64", "-f", str(built["path"]))
    assert wrong.returncode == 7 and "is not built for linux/arm64" in wrong.stderr, wrong.stderr
    a, b = f"{REGISTRY}/{NS}/cpu-both:cpu-both", f"{REGISTRY}/{NS}/cpu-smoke:cpu-smoke"
    same = imgbuild(work, "diff", a, b, "--platform", "linux/amd64", "--json")
    assert same.returncode in (0, 1), same.stderr
    versions = {r["name"]: (r["a"], r["b"]) for r in json.loads(same.stdout)["versions"]}
    assert versions["torch"] == ("2.13.0+cpu", "2.13.0+cpu")
    other = imgbuild(work, "diff", a, b, "--platform", "linux/arm64", "--json")
    assert other.returncode == 1, other.stdout[-2000:] + other.stderr[-2000:]
    assert {r["name"]: (r["a"], r["b"]) for r in json.loads(other.stdout)["versions"]}["torch"] == \
        ("2.10.0", "2.13.0+cpu")


def test_an_arm64_check_that_fails_moves_no_tag_of_either_platform(work, built):
    """The smoke command fails on aarch64 only. Same keys (a check is no key input), new checks: both
    platforms' project images are validated again; amd64 passes and is recorded, arm64 fails. No tag
    moves: not the index, not an amd64 image. Run twice: it fails the same way each time."""
    assert built["proc"].returncode == 0
    before = {t: release(t, "cpu-both") for t in TAGS}
    path = stacks_file(work, "both-arm-fails",
                       lambda d: both(d, smoke="python -c \"import platform, sys; sys.exit(platform.machine() == 'aarch64')\""))
    for attempt in range(2):
        proc = imgbuild(work, "build", "stack=cpu-both", "-f", str(path), "--date", "2026.12.05", timeout=3600)
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert "no tag of cpu-both was moved" in proc.stdout + proc.stderr
        assert {t: release(t, "cpu-both") for t in TAGS} == before, attempt
        assert release("cpu-both-2026.12.05", "cpu-both") is None
        rep = reports(work)[-1]
        failed = [n for n in rep["nodes"].values() if n["status"] == "failed"]
        assert [n["layer"] for n in failed] == ["smoke-train"]
        assert any("project.smoke" in c["id"] and c["status"] == "failed" for c in failed[0]["checks"])


def test_export_writes_the_platform_it_is_asked_for(work, built, tmp_path):
    import os
    if os.geteuid() != 0:
        pytest.skip("umoci unpacks with the image's owners only as root")
    assert built["proc"].returncode == 0
    out = tmp_path / "arm.sqsh"
    proc = imgbuild(work, "export", "stack=cpu-both", "--platform", "linux/arm64", "-o", str(out), "-f",
                    str(built["path"]), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads(Path(str(out) + ".json").read_text())
    assert record["platform"] == "linux/arm64" and record["source_digest"] == release("cpu-both", "cpu-both")
    # The python in it is an aarch64 ELF (e_machine 183), read from the squashfs without running it.
    elf = subprocess.run(["unsquashfs", "-cat", str(out), "usr/bin/python3.11"], capture_output=True, timeout=300).stdout
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 183
