"""imgbuild node-check without an engine: the report it reads back from rank 0, the table and exit code,
the image a stack=NAME resolves to, and the Slurm batch script. The check itself runs in real images
in test_docker_nodecheck.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from builder import nodecheck
from builder.nodecheck import sbatch
from builder.load.spec import load_spec
from conftest import REPO, STACKS, run_cli

REPORT = {"world_size": 2, "backend": "gloo", "seconds": 12.5, "results": [
    {"id": "env", "status": "passed", "detail": "10 values alike", "bad_ranks": [], "numbers": {}, "seconds": 0.1},
    {"id": "matmul", "status": "failed", "detail": "512x512x512 beyond tolerance on rank 1: float32 9.9e-03",
     "bad_ranks": [1], "numbers": {}, "seconds": 0.2},
    {"id": "allreduce-bw", "status": "passed", "detail": "bus bandwidth up to 1.1 GB/s", "bad_ranks": [],
     "numbers": {"sweep": [{"bytes": 65536, "time_us": 80.0, "algbw_GBps": 0.8, "busbw_GBps": 0.8}]}, "seconds": 0.4},
    {"id": "megatron", "status": "skipped", "detail": "megatron-core is not in this image", "bad_ranks": [],
     "numbers": {}, "seconds": 0.0}]}


def test_the_report_is_rank_0s_tagged_line_and_names_the_rank_that_disagreed():
    out = "noise\n" + nodecheck.RESULT_TAG + json.dumps(REPORT) + "\nmore noise\n"
    report = nodecheck.parse("img@sha256:x", out, "", 0)
    assert not report.ok and report.world_size == 2
    text = nodecheck.table(report)
    assert "FAIL matmul" in text and "[rank 1]" in text and "SKIP megatron" in text
    assert "65536 B" in text and "busbw   0.800 GB/s" in text
    assert text.splitlines()[-1] == "FAILED: matmul: 2 passed, 1 failed, 1 skipped"
    report.results[1]["status"] = "passed"
    assert report.ok


def test_a_check_that_never_reported_is_a_failure_with_the_output_tail():
    with pytest.raises(nodecheck.NodeCheckFailed, match=r"(?s)did not finish in img \(exit 1\): .*DistNetworkError"):
        nodecheck.parse("img", "", "Traceback ...\ntorch.distributed.DistNetworkError: timed out", 1)


def test_ranks_meet_on_the_loopback_not_on_the_containers_hostname():
    argv = nodecheck.worker_argv(2, {"only": "matmul"})
    assert argv[:3] == ["python", "-m", "torch.distributed.run"] and "--standalone" not in argv
    assert argv[argv.index("--master-addr") + 1] == "127.0.0.1" and argv[-2:] == ["--only", "matmul"]


def test_stack_resolves_to_the_digest_its_release_tag_names(monkeypatch):
    spec = load_spec(STACKS)
    seen = {}

    class Reg:
        def __init__(self, host):
            seen["host"] = host

        def manifest_digest(self, repo, tag):
            seen["ref"] = (repo, tag)
            return "sha256:" + "a" * 64 if tag == "cpu-smoke" else None
    monkeypatch.setattr(nodecheck, "Registry", Reg)
    assert nodecheck.released_image(spec, spec.stacks["cpu-smoke"]) == f"{spec.site.registry}/imgbuild/cpu-smoke@sha256:{'a' * 64}"
    assert seen["ref"] == ("imgbuild/cpu-smoke", "cpu-smoke")
    monkeypatch.setattr(Reg, "manifest_digest", lambda self, repo, tag: None)
    with pytest.raises(nodecheck.NodeCheckFailed, match="stack 'cpu-smoke' is not released"):
        nodecheck.released_image(spec, spec.stacks["cpu-smoke"])


def test_the_batch_script_runs_one_rank_per_task_with_the_stacks_network_settings(tmp_path):
    spec = load_spec(STACKS)
    env = spec.stack("h100-megatron").runtime_env()
    assert env["NCCL_IB_HCA"] == "mlx5" and env["NCCL_SOCKET_IFNAME"] == "^lo,docker0"
    text = sbatch.script("reg.example/ns/h100-megatron@sha256:" + "b" * 64, nodecheck.WORKER.read_text(), nodes=4,
                         tasks_per_node=8, gpus_per_node=8, env=env)
    assert "#SBATCH --nodes=4" in text and "#SBATCH --ntasks-per-node=8" in text and "#SBATCH --gpus-per-node=8" in text
    assert "#SBATCH --exclusive" in text and "#SBATCH --time=00:30:00" in text   # whole nodes by default
    assert "export NCCL_SOCKET_IFNAME='^lo,docker0'" in text and "export NCCL_IB_HCA=mlx5" in text
    assert "RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID" in text
    assert '--container-image="$PYXIS_IMAGE"' in text and "-e NCCL_IB_HCA" in text
    # Enroot before 4.0 (the default) reads the registry before a '#'; from 4.0 the reference as it is.
    assert f"PYXIS_IMAGE='reg.example#ns/h100-megatron@sha256:{'b' * 64}'" in text
    from builder.load.slurmconf import SlurmSettings
    newer = sbatch.script("reg.example/ns/h100-megatron@sha256:" + "b" * 64, "print(1)\n", nodes=1, tasks_per_node=1,
                          settings=SlurmSettings(enroot_version="4.1.0", exclusive=False, partition="gpu"))
    assert f"PYXIS_IMAGE=reg.example/ns/h100-megatron@sha256:{'b' * 64}" in newer and "--exclusive" not in newer
    assert "#SBATCH --partition=gpu" in newer
    path = tmp_path / "job.sh"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_emit_sbatch_carries_the_worker_inside_and_names_no_path_of_this_machine(tmp_path):
    """Issue 38: the script runs from any node and directory. The worker is inside it (written to node-local
    storage, sbcast to every node), no path of the writer's machine is; an existing file is kept without --force."""
    job = tmp_path / "job.sh"
    res = run_cli("node-check", "reg.example/ns/img@sha256:" + "c" * 64, "--emit-sbatch", job,
                  "--nodes", "2", "--procs", "1", "--partition", "gpu", "--account", "proj", "--time", "00:10:00",
                  "-f", STACKS)
    assert res.code == 0, res.output
    text = job.read_text()
    assert list(tmp_path.iterdir()) == [job] and str(tmp_path) not in text and "/work/" not in text
    assert nodecheck.WORKER.read_text().rstrip("\n") in text and 'sbcast --force "$WORKER" "$WORKER"' in text
    assert "#SBATCH --partition=gpu" in text and "#SBATCH --account=proj" in text and "#SBATCH --time=00:10:00" in text
    again = run_cli("node-check", "reg.example/ns/img@sha256:" + "c" * 64, "--emit-sbatch", job, "-f", STACKS)
    assert again.code == 2 and "exists: nothing was written" in again.err and job.read_text() == text
    assert run_cli("node-check", "reg.example/ns/img@sha256:" + "c" * 64, "--emit-sbatch", job, "--force",
                   "-f", STACKS).code == 0


def test_a_report_read_from_a_job_log_fails_the_command_naming_the_rank(tmp_path):
    log = tmp_path / "imgbuild-node-check-7.out"
    log.write_text("srun: ...\n" + nodecheck.RESULT_TAG + json.dumps(REPORT) + "\n")
    res = run_cli("node-check", "job-7", "--from-log", log, "-f", STACKS)
    assert res.code == 8 and "matmul (rank 1) failed" in res.err, res.output
    assert "FAIL matmul" in res.out


@pytest.mark.parametrize("image", ["reg/x@sha256:1; rm -rf /", "reg/x:$(id)", "reg/x y", "reg/x`id`"])
def test_the_batch_script_refuses_what_a_shell_would_read_twice(tmp_path, image):
    """The script hands the image to `srun bash -c "..."`: a reference that is not one is refused, not
    quoted and hoped for."""
    from builder.errors import SpecError
    with pytest.raises(SpecError, match="cannot carry safely"):
        sbatch.script(image, "print(1)\n", nodes=1, tasks_per_node=2)
    res = run_cli("node-check", image, "--emit-sbatch", tmp_path / "job.sh", "-f", STACKS)
    assert res.code == 2 and "cannot carry safely" in res.err and not list(tmp_path.iterdir())   # nothing written


def test_the_native_gpu_script_skips_every_gpu_step_with_its_reason_here(tmp_path):
    """scripts/gpu_node_check.py on a machine with no GPU: nothing passes that did not run, each step is
    skipped with the reason, the node check (the worker `imgbuild node-check` runs) among them."""
    import sys
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_node_check.py"), "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("0 passed, 0 failed, "), proc.stdout[-2000:]
    results = json.loads(out.read_text())["checks"]
    by_name = {r["id"]: r for r in results}
    assert {"bf16-matmul", "node-check"} <= set(by_name), sorted(by_name)
    assert all(r["status"] == "skipped" and r["reason"] for r in results), results
    assert "nccl-allreduce" not in by_name and "megatron-gpt-smoke" not in by_name   # folded into the node check


def test_the_native_gpu_script_gives_deepspeed_an_arch_list_it_can_parse():
    """An H200 node's own environment set TORCH_CUDA_ARCH_LIST with '9.0a', and every DeepSpeed JIT build of the
    native run failed on it ("invalid literal for int() with base 10: '0a'"; docs/measurements/2026-12-04-*): the
    children get the entries without the suffix, once each, and the run says what it changed; a list with no such
    entry ('+PTX' is DeepSpeed's own spelling) is left as it is."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_node_check", REPO / "scripts" / "gpu_node_check.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    env = {"TORCH_CUDA_ARCH_LIST": "8.0;9.0a;9.0 10.0a"}
    note = script.deepspeed_parsable_arch_list(env)
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0 9.0 10.0"
    assert "'8.0;9.0a;9.0 10.0a'" in note and "IB040" in note and "'8.0 9.0 10.0'" in note
    for kept in ({"TORCH_CUDA_ARCH_LIST": "7.5 8.0 9.0+PTX"}, {}):
        before = dict(kept)
        assert script.deepspeed_parsable_arch_list(kept) == "" and kept == before
