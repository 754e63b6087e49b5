"""Issue 35, without a GPU: a GPU stack's node check uses its GPUs (emitted Slurm and Kubernetes files ask for
them, one pod per node), 0 GPUs is refused unless --cpu says so, and a CPU-only run says it is one; the
bus bandwidth NCCL's all_reduce_perf measured is judged against the threshold of the GPU system.

The all_reduce_perf outputs here are written in the format nccl-tests 2.x prints (its header, the "Using
devices" lines, one row per size with out-of-place and in-place figures); their figures are ours, not a
recording of a real run: no GPU machine was lent to the session that wrote them. The thresholds come from the
catalog (NCCL's maintainer's figures for 8 x H100 SXM) or the site.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder import nodecheck
from builder.nodecheck import busbw
from conftest import run_cli, shipped_data, write_stacks

IMAGE = "127.0.0.1:5000/imgbuild/h100-megatron@sha256:" + "b" * 64


def perf(hosts: list, sizes_busbw: list, gpus_per_host: int = 8, wrong: int = 0) -> str:
    """all_reduce_perf's output for these nodes and (size, busbw) rows."""
    lines = ["# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    rank = 0
    for host in hosts:
        for dev in range(gpus_per_host):
            lines.append(f"#  Rank {rank:2d} Group  0 Pid  {4000 + rank} on {host:>10} device  {dev} [0x{dev:02x}] "
                         "NVIDIA H100 80GB HBM3")
            rank += 1
    lines += ["#", "#                                                              out-of-place                       in-place",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    for size, bw in sizes_busbw:
        alg = bw / 1.75
        t = size / alg / 1e3
        lines.append(f"{size:>12} {size // 4:>13}     float     sum      -1 {t:8.1f} {alg:7.2f} {bw:7.2f} {wrong:6d} "
                     f"{t:8.1f} {alg:7.2f} {bw - 0.5:7.2f} {0:6d}")
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(b for _, b in sizes_busbw) / len(sizes_busbw):.2f}", "#"]
    return "\n".join(lines) + "\n"


GIB = 1 << 30


# -- the judgement ------------------------------------------------------------------------------------

def test_a_healthy_node_passes_against_the_catalogs_figure():
    run = busbw.parse(perf(["dgx-a"], [(GIB, 361.2), (2 * GIB, 372.9), (4 * GIB, 376.1), (8 * GIB, 377.4)]))
    assert run.gpus == 8 and run.hosts == ("dgx-a",) and run.device == "NVIDIA H100 80GB HBM3"
    limit = busbw.threshold("H100", "intra")
    assert limit.gbps == 333.0 and "nccl-tests issue #212" in limit.source
    status, detail = busbw.judge(run, limit, "intra")
    assert status == "passed", detail
    assert "intra-node bus bandwidth 377.4 GB/s at 8589934592 bytes on dgx-a (8 GPUs" in detail


def test_a_node_below_the_threshold_fails_naming_the_node_and_the_figure():
    run = busbw.parse(perf(["dgx-b"], [(GIB, 201.0), (2 * GIB, 214.5), (4 * GIB, 219.9)]))
    for _ in range(2):
        status, detail = busbw.judge(run, busbw.threshold("H100", "intra"), "intra")
        assert status == "failed"
        assert "219.9 GB/s" in detail and "on dgx-b" in detail and "below the threshold 333.0 GB/s" in detail


def test_a_run_at_too_small_a_size_is_not_comparable():
    run = busbw.parse(perf(["dgx-a"], [(64 << 20, 198.0), (128 << 20, 260.0), (256 << 20, 301.0)]))
    status, detail = busbw.judge(run, busbw.threshold("H100", "intra"), "intra")
    assert status == "not comparable" and "largest message was 268435456 bytes" in detail and "-b 1G" in detail


def test_wrong_values_fail_whatever_the_bandwidth():
    run = busbw.parse(perf(["dgx-a"], [(GIB, 380.0)], wrong=3))
    assert busbw.judge(run, busbw.threshold("H100", "intra"), "intra")[0] == "failed"


def test_the_sites_figure_replaces_the_catalogs_and_across_nodes_only_the_site_knows_one():
    run = busbw.parse(perf(["dgx-a", "dgx-b"], [(GIB, 95.0), (2 * GIB, 101.0)]))
    assert run.nodes == "dgx-a and dgx-b" and run.gpus == 16
    assert busbw.threshold("H100", "inter") is None
    status, detail = busbw.judge(run, busbw.threshold("H100", "inter"), "inter")
    assert status == "unjudged" and "set site.node_check.min_busbw_gbps" in detail
    status, detail = busbw.judge(run, busbw.threshold("H100", "inter", 120.0), "inter")
    assert status == "failed" and "on dgx-a and dgx-b" in detail and "101.0 GB/s" in detail
    assert "site.node_check.min_busbw_gbps.inter" in detail


def test_the_report_judges_what_the_worker_measured():
    """nodecheck.parse judges the worker's nccl-tests outputs (intra) and its NCCL sweep across two hosts
    (inter), so a healthy-looking run that missed its fabric fails."""
    results = [
        {"id": "env", "status": "passed", "detail": "", "bad_ranks": [],
         "numbers": {"hosts": ["dgx-a", "dgx-b"], "rank0": {"device": "NVIDIA H100 80GB HBM3"}}},
        {"id": "allreduce-bw", "status": "passed", "detail": "bus bandwidth up to 5.4 GB/s", "bad_ranks": [],
         "numbers": {"sweep": [{"bytes": GIB, "time_us": 1.0, "algbw_GBps": 2.9, "busbw_GBps": 5.4}]}},
        {"id": "nccl-tests", "status": "passed", "detail": "", "bad_ranks": [],
         "numbers": {"nodes": [{"host": "dgx-a", "rc": 0, "gpus": 8, "output": perf(["dgx-a"], [(GIB, 370.0)])},
                               {"host": "dgx-b", "rc": 0, "gpus": 8, "output": perf(["dgx-b"], [(GIB, 150.0)])}]}},
    ]
    judged = {r["id"]: r for r in nodecheck.judge_bandwidth(results, {"inter": 100.0})}
    assert judged["nccl-tests"]["status"] == "failed" and "on dgx-b" in judged["nccl-tests"]["detail"]
    assert judged["allreduce-bw"]["status"] == "failed" and "5.4 GB/s" in judged["allreduce-bw"]["detail"]
    assert "on dgx-a and dgx-b" in judged["allreduce-bw"]["detail"]


# -- GPUs per node and the emitted files ------------------------------------------------------------------

@pytest.fixture
def released(monkeypatch):
    monkeypatch.setattr(nodecheck, "released_image", lambda spec, stack: IMAGE)


def _stacks(tmp_path, mutate=lambda d: None) -> Path:
    data = shipped_data()
    mutate(data)
    return write_stacks(tmp_path / "site", data)


def test_a_gpu_stacks_emitted_job_asks_for_its_gpus_one_pod_per_node(tmp_path, released):
    out = tmp_path / "check.yaml"
    res = run_cli("node-check", "stack=h100-megatron", "--emit-k8s", str(out), "--nodes", "2", "-f", str(_stacks(tmp_path)))
    assert res.code == 0, res.output
    assert "2 pod(s) x 8 rank(s) on 8 GPU(s)" in res.output
    job = [d for d in yaml.safe_load_all(out.read_text()) if d and d["kind"] == "Job"][0]
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "8" == pod["containers"][0]["command"][pod["containers"][0]["command"].index("--nproc-per-node") + 1]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname" and anti["labelSelector"]["matchLabels"] == {"imgbuild.io/node-check": "imgbuild-node-check"}
    tool = Path(sys.executable).with_name("kubernetes-validate")
    proc = subprocess.run([str(tool), "--strict", "-k", "1.30.0", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_gpu_stacks_batch_script_asks_for_its_gpus(tmp_path, released):
    out = tmp_path / "check.sbatch"
    def site_four(data):
        data["site"]["node_check"] = {"gpus_per_node": 4}
    res = run_cli("node-check", "stack=h100-megatron", "--emit-sbatch", str(out), "-f", str(_stacks(tmp_path, site_four)))
    assert res.code == 0, res.output
    text = out.read_text()
    assert "#SBATCH --gpus-per-node=4" in text and "#SBATCH --ntasks-per-node=4" in text and "--gpus all" in text
    assert "4 task(s) on 4 GPU(s) each" in res.output


def test_slurm_itself_accepts_the_gpu_batch_script_and_holds_it_to_its_gpus(tmp_path, released):
    """Slurm's own parser and scheduler (sbatch --test-only, which starts nothing) on the one-machine cluster of
    scripts/slurm-local.sh, whose node declares 8 GPUs (no device behind them; nothing runs): the script
    node-check writes for a GPU stack is accepted as it is, and the same script asking for more GPUs than
    the node has is refused, so the check can fail. One task per GPU: this node's 2 CPUs hold 2 of them, so
    the script asks for 2 GPUs here (the directives are the same for 8)."""
    import os
    from conftest import slurm_cluster
    why = slurm_cluster()
    if why:
        if os.environ.get("IMGBUILD_REQUIRE_DOCKER") == "1":   # the whole suite, after setup-test-host.sh
            pytest.fail(why)
        pytest.skip(why)
    cpus = int(subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True).stdout.split()[0])
    gpus = min(cpus, 8)
    out = tmp_path / "check.sbatch"
    res = run_cli("node-check", "stack=h100-megatron", "--emit-sbatch", str(out), "--nodes", "1",
                  "--gpus-per-node", str(gpus), "-f", str(_stacks(tmp_path)))
    assert res.code == 0, res.output
    text = out.read_text()
    assert f"#SBATCH --gpus-per-node={gpus}\n" in text and f"#SBATCH --ntasks-per-node={gpus}\n" in text
    # The same script with only its GPU request raised past the node's 8: refused for that alone.
    (tmp_path / "more.sbatch").write_text(text.replace(f"--gpus-per-node={gpus}\n", "--gpus-per-node=16\n"))
    for _ in range(2):
        proc = subprocess.run(["sbatch", "--test-only", str(out)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stdout + proc.stderr
        proc = subprocess.run(["sbatch", "--test-only", str(tmp_path / "more.sbatch")], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode != 0 and "Requested node configuration is not available" in proc.stderr, \
            proc.stdout + proc.stderr


@pytest.mark.parametrize("how", ["--emit-sbatch", "--emit-k8s"])
def test_zero_gpus_for_a_gpu_stack_is_refused_unless_cpu_says_so(tmp_path, released, how):
    out = tmp_path / "check.out"
    for _ in range(2):
        res = run_cli("node-check", "stack=h100-megatron", how, str(out), "--gpus-per-node", "0", "-f", str(_stacks(tmp_path)))
        assert res.code == 2 and "is a GPU image (H100), and --gpus-per-node 0" in res.output and "--cpu" in res.output
        assert not out.exists()
    res = run_cli("node-check", "stack=h100-megatron", how, str(out), "--cpu", "-f", str(_stacks(tmp_path)))
    assert res.code == 0 and "CPU only (gloo): no GPU, NCCL or fabric exercised" in res.output, res.output
    assert "nvidia.com/gpu" not in out.read_text() and "--gpus-per-node" not in out.read_text()


@pytest.mark.skipif(bool(shutil.which("nvidia-smi")), reason="this machine has a GPU")
def test_a_gpu_stack_on_a_machine_without_a_gpu_is_refused(tmp_path, released):
    res = run_cli("node-check", "stack=h100-megatron", "-f", str(_stacks(tmp_path)))
    assert res.code == 2 and "this machine's engine has no GPU" in res.output and "--cpu" in res.output, res.output


def test_gpus_per_node_unknown_is_asked_for(tmp_path, released):
    def l4(data):
        data["stacks"]["h100-megatron"]["gpus"] = ["L4"]
    res = run_cli("node-check", "stack=h100-megatron", "--emit-sbatch", str(tmp_path / "x.sbatch"),
                  "-f", str(_stacks(tmp_path, l4)))
    assert res.code == 2 and "no system of L4 in the catalog" in res.output and "site.node_check.gpus_per_node" in res.output


@pytest.mark.parametrize("value, words", [
    ({"gpus_per_node": 0}, "expected a whole number of GPUs from 1 to 64, got 0"),
    ({"gpus_per_node": "8"}, "expected a whole number of GPUs from 1 to 64, got a string"),
    ({"min_busbw_gbps": {"intra": -1}}, "expected a bus bandwidth in GB/s"),
    ({"min_busbw_gbps": {"intar": 300}}, "intar"),
    ({"gpus": 8}, "gpus"),
])
def test_bad_node_check_settings_are_refused_with_their_key(tmp_path, value, words):
    def bad(data):
        data["site"]["node_check"] = value
    res = run_cli("check", "--all", "-f", str(_stacks(tmp_path, bad)))
    assert res.code == 2 and "site.node_check" in res.output and words in res.output, res.output
    assert "Traceback" not in res.output


def test_a_cpu_only_report_says_so():
    report = nodecheck.NodeReport(image="x", world_size=2, backend="gloo", results=[], seconds=1.0)
    assert report.mode == "CPU only (gloo): no GPU, NCCL or fabric was exercised"
    assert "CPU only (gloo)" in nodecheck.table(report) and report.to_json()["mode"] == report.mode
    assert nodecheck.NodeReport(image="x", world_size=16, backend="nccl", results=[], seconds=1.0).mode == \
        "GPUs: NCCL on 16 rank(s)"
