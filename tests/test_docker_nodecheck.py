"""Issue 14 against the real engine and registry, on this session's released cpu-smoke (conftest `first`):

- `imgbuild node-check stack=cpu-smoke` with 2 ranks (gloo) passes: matmul, collectives, all-reduce bus
  bandwidth, DeepSpeed ZeRO-2 with cpu_adam, the environment of each rank; Megatron is skipped (not in
  the image);
- a rank broken on purpose (IMGBUILD_NODE_CHECK_PERTURB) fails the command with exit 8, naming rank 1;
- the batch script of --emit-sbatch runs the check in 2 Slurm tasks on the one-machine cluster of
  scripts/slurm-local.sh (no pyxis here: each task starts the image with docker), and --from-log reads it;
- the squashfs export is byte-identical across two exports (on a tiny release: tests/tiny.py); the check
  inside the seed's squashfs, started as Enroot starts an image, is tests/test_docker_podman.py's (one export
  of the seed in the suite, of its Podman release);
- every release has its SBOM beside it, and `imgbuild diff` of two releases lists package changes from them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
import shutil
import subprocess

import pytest

from conftest import REPO, slurm_cluster
from e2e import NS, REGISTRY, imgbuild, stacks_file
from tiny import site

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_node_check_on_the_released_stack_passes_with_two_ranks(work, first):
    f = str(stacks_file(work, "stacks"))
    proc = imgbuild(work, "node-check", "stack=cpu-smoke", "--procs", "2", "--json", "-f", f, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    status = {r["id"]: r["status"] for r in report["results"]}
    assert report["world_size"] == 2 and report["backend"] == "gloo" and report["ok"]
    assert status == {"env": "passed", "matmul": "passed", "collectives": "passed", "allreduce-bw": "passed",
                      "deepspeed": "passed", "megatron": "skipped", "cpu-ops": "passed", "dcgm": "skipped",
                      "nccl-tests": "skipped"}, status
    assert report["mode"] == "CPU only (gloo): no GPU, NCCL or fabric was exercised"
    by_id = {r["id"]: r for r in report["results"]}
    # Issue 35: one step of each prebuilt CPU op in a process of its own (cpu_adam, compiled for x86-64-v2).
    assert by_id["cpu-ops"]["detail"].startswith("one step of cpu_adam on every rank's CPU"), by_id["cpu-ops"]
    assert by_id["nccl-tests"]["detail"] == "needs GPUs (this run is CPU only)"
    assert by_id["megatron"]["detail"] == "megatron-core is not in this image"
    assert "DeepSpeedCPUAdam" in by_id["deepspeed"]["detail"] and "identical on every rank" in by_id["deepspeed"]["detail"]
    sweep = by_id["allreduce-bw"]["numbers"]["sweep"]
    assert [row["bytes"] for row in sweep] == [65536, 1048576, 8388608, 33554432]
    assert all(row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * (2 - 1) / 2, abs=2e-3) for row in sweep)
    assert by_id["env"]["numbers"]["rank0"]["env:DS_ACCELERATOR"] == "cpu"   # the stack's runtime layer


@pytest.mark.parametrize("fault", ["1:matmul", "1:matmul", "1:env", "1:collectives", "1:cpu-ops", "1:cpu-ops"])
def test_a_rank_broken_on_purpose_fails_the_check_and_is_named(work, first, fault):
    f = str(stacks_file(work, "stacks"))
    check = fault.split(":")[1]
    proc = imgbuild(work, "node-check", "stack=cpu-smoke", "--procs", "2", "--only", check, "-f", f,
                    env={"IMGBUILD_NODE_CHECK_PERTURB": fault}, timeout=600)
    assert proc.returncode == 8, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Two ranks whose environments differ: no majority tells which is wrong, so both are named.
    ranks = "0, 1" if check == "env" else "1"
    assert f"{check} (rank {ranks}) failed" in proc.stderr, proc.stderr[-2000:]
    assert f"FAIL {check}" in proc.stdout and f"[rank {ranks}]" in proc.stdout
    if check == "cpu-ops":   # issue 35: an op that dies of SIGILL on a node is named, with why
        assert "rank 1 on " in proc.stdout and "cpu_adam SIGILL: its compiled code uses an instruction this CPU lacks" \
            in proc.stdout, proc.stdout[-2000:]


def test_the_slurm_job_runs_the_check_in_two_tasks(work, first, tmp_path):
    """Issue 38: the script alone, moved to another directory (the one it was written in removed), is submitted
    from there and passes: the worker is inside it, and no path of the writer's machine is."""
    why = slurm_cluster()
    if why:
        pytest.fail(why)
    f = str(stacks_file(work, "stacks"))
    written = tmp_path / "written"
    written.mkdir()
    job = written / "node-check.sbatch"
    proc = imgbuild(work, "node-check", "stack=cpu-smoke", "--emit-sbatch", str(job), "--nodes", "1", "--procs", "2",
                    "--only", "env,matmul,collectives,allreduce-bw", "-f", f)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = job.read_text()
    assert "#SBATCH --ntasks-per-node=2" in text and "export DS_ACCELERATOR=cpu" in text
    # No path of the machine that wrote it: neither the test's folders, the checkout nor the home folder.
    assert "#SBATCH --exclusive" in text and str(tmp_path) not in text and str(work) not in text
    assert str(REPO) not in text and str(Path.home()) not in text and "/builder/nodecheck/" not in text
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = elsewhere / "job.sh"
    job.write_text(text)
    shutil.rmtree(written)
    sub = subprocess.run(["sbatch", "--wait", "--export=ALL,GLOO_SOCKET_IFNAME=lo", str(job)], cwd=elsewhere,
                         capture_output=True, text=True, timeout=900)
    logs = sorted(elsewhere.glob("imgbuild-node-check-*.out"))
    assert sub.returncode == 0 and logs, sub.stdout + sub.stderr + "".join(p.read_text()[-3000:] for p in logs)
    proc = imgbuild(work, "node-check", "--from-log", str(logs[0]), "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["world_size"] == 2 and {r["status"] for r in report["results"]} == {"passed"}


def test_the_squashfs_export_is_reproducible_and_names_the_released_digest(work, tmp_path):
    """Two exports of one release are the same bytes (same sha256), the record beside each names the digest the
    release tag names, and the file has what Enroot reads (/etc/rc, /etc/fstab, and /etc/environment with the
    image's own PATH). On a tiny release of its own namespace (tests/tiny.py: the mirrored Debian base and
    Debian's python3 in a venv, which every layer's probe needs; no package, so no index): that two exports are
    the same bytes is the exporter's (skopeo, umoci, fixed times, mksquashfs' fixed options), whatever the image
    holds, and two exports of the seed's image cost minutes on 2 cores."""
    from builder.ship.registry import Registry
    ns = NS + "-export"
    f = site(work, "export", ns, packages=[])
    proc = imgbuild(work, "build", "stack=demo", "-f", str(f))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    released = Registry(REGISTRY).manifest_digest(f"{ns}/demo", "demo")
    assert released
    records = []
    for name in ("a.sqsh", "b.sqsh"):
        proc = imgbuild(work, "export", "stack=demo", "--format", "squashfs", "-o", str(tmp_path / name), "-f", str(f),
                        timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        records.append(json.loads((tmp_path / (name + ".json")).read_text()))
    a, b = (tmp_path / "a.sqsh").read_bytes(), (tmp_path / "b.sqsh").read_bytes()
    assert (len(a), hashlib.sha256(a).hexdigest()) == (len(b), hashlib.sha256(b).hexdigest())   # a short message
    assert a == b
    assert records[0]["sha256"] == records[1]["sha256"] == "sha256:" + hashlib.sha256(a).hexdigest()
    assert records[0]["source"] == f"{REGISTRY}/{ns}/demo@{released}"   # the exact released digest
    assert records[0]["source_digest"] == released
    listing = subprocess.run(["unsquashfs", "-l", str(tmp_path / "a.sqsh")], capture_output=True, text=True).stdout
    assert {"squashfs-root/etc/rc", "squashfs-root/etc/environment", "squashfs-root/etc/fstab"} <= set(listing.split())
    env = subprocess.run(["unsquashfs", "-cat", str(tmp_path / "a.sqsh"), "etc/environment"], capture_output=True,
                         text=True).stdout
    assert "PATH=/opt/venv/bin:" in env, env   # the venv's PATH, from the image's config
    # Issue 38: the export for one site partition carries that partition's runtime env over the image's.
    import yaml
    data = yaml.safe_load(Path(f).read_text())
    data["site"]["partitions"] = {"h100": {"env": {"NCCL_IB_HCA": "mlx5_0,mlx5_3", "NCCL_IB_GID_INDEX": "3"}}}
    Path(f).write_text(yaml.safe_dump(data, sort_keys=False))
    proc = imgbuild(work, "export", "stack=demo", "--format", "squashfs", "--partition", "h100", "-o",
                    str(tmp_path / "h100.sqsh"), "-f", str(f), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    part = subprocess.run(["unsquashfs", "-cat", str(tmp_path / "h100.sqsh"), "etc/environment"], capture_output=True,
                          text=True).stdout
    assert "NCCL_IB_HCA=mlx5_0,mlx5_3" in part and "NCCL_IB_GID_INDEX=3" in part and "PATH=/opt/venv/bin:" in part
    assert "NCCL_IB_HCA" not in env
    assert json.loads((tmp_path / "h100.sqsh.json").read_text())["partition"]["name"] == "h100"
    res = imgbuild(work, "export", "stack=demo", "--partition", "v100", "-o", str(tmp_path / "no.sqsh"), "-f", str(f))
    assert res.returncode == 2 and "not a partition of site.partitions" in res.stderr and not (tmp_path / "no.sqsh").exists()


def test_every_release_has_its_sbom_and_diff_lists_package_changes(work, first):
    """syft's CycloneDX SBOM is stored beside each released image before its tag moves; `imgbuild diff` of
    two releases lists the package a project added, from the two SBOMs, without pulling a layer."""
    from builder.ship import sbom
    from builder.ship.registry import Registry
    reg = Registry(REGISTRY)
    # The session's first release by its digest, not by the tag: other tests of the seed move cpu-smoke's tag
    # (a project pinned at v2), and this one must not depend on which ran last.
    digest = next(n["digest"] for n in first["report"]["nodes"].values() if n["layer"] == "smoke-train")
    doc = sbom.fetch(reg, f"{NS}/cpu-smoke", digest)
    assert doc and doc["bomFormat"] == "CycloneDX", doc
    found = sbom.packages(doc)
    assert found.get("pypi torch", "").startswith("2.13.0") and found.get("pypi deepspeed") == "0.19.8", found
    assert any(k.startswith("deb ") for k in found)
    f = str(stacks_file(work, "sbom-six", lambda d: (
        d["projects"]["smoke-train"]["params"].update(packages=["six==1.16.0"]),
        d["stacks"]["cpu-smoke"].update(tags=["{stack}-sbom-six"]))))
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", f)
    assert proc.returncode == 0 and "sbom: " in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]
    proc = imgbuild(work, "diff", f"{REGISTRY}/{NS}/cpu-smoke@{digest}", f"{REGISTRY}/{NS}/cpu-smoke:cpu-smoke-sbom-six",
                    "--json")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    section = json.loads(proc.stdout)["sections"]["sbom"]
    six = next(c for c in section["changes"] if c["name"] == "pypi six")
    assert section["compared"] and six["old"] is None and six["new"] == "1.16.0", section


def test_a_release_whose_sbom_cannot_be_made_moves_no_tag_and_says_why(work, first, tmp_path):
    """syft failing (here a stand-in for the disk-full syft that a CI run met) stops the release before any
    tag moves, exit 7, with syft's own reason in the message (`-q` once hid it), twice in a row; the same
    build with the real syft then releases, with its SBOM (the positive control)."""
    from builder.ship import sbom
    from builder.ship.registry import Registry
    reg = Registry(REGISTRY)
    broken = tmp_path / "syft"
    broken.write_text("#!/bin/sh\necho 'write /tmp/stereoscope-1/layer.tar: no space left on device' >&2\nexit 1\n")
    broken.chmod(0o755)
    f = str(stacks_file(work, "sbom-fail", lambda d: (
        d["runtimes"]["cpu-env"]["params"]["env"].update(IMGBUILD_SBOM_CASE="1"),
        d["stacks"]["cpu-smoke"].update(tags=["{stack}-sbom-fail"]))))
    for _ in range(2):
        proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", f, env={"IMGBUILD_SYFT": str(broken)})
        assert proc.returncode == 7, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "no space left on device" in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert reg.manifest_digest(f"{NS}/cpu-smoke", "cpu-smoke-sbom-fail") is None
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", f)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    digest = reg.manifest_digest(f"{NS}/cpu-smoke", "cpu-smoke-sbom-fail")
    assert digest and (sbom.fetch(reg, f"{NS}/cpu-smoke", digest) or {}).get("bomFormat") == "CycloneDX"


def test_syft_says_why_it_failed(work, first):
    """The real syft on a digest the registry does not hold: its reason reaches the message."""
    from builder.ship import sbom
    with pytest.raises(sbom.SbomError, match="MANIFEST_UNKNOWN|manifest unknown"):
        sbom.generate(REGISTRY, f"{NS}/cpu-smoke", "sha256:" + "0" * 64)
