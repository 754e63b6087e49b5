"""The node check's worker: one copy per rank, started by torchrun inside the image under test.

It is mounted into the container and run by the image's own Python, so it imports only the standard
library, torch, and (where the image has them) deepspeed and megatron.core. Every rank runs every check;
rank 0 gathers what each rank measured, names the ranks that disagree, and prints one line:
RESULT_TAG + JSON. Backends: NCCL with one process per GPU where torch sees GPUs, else gloo on CPU.

Checks (ids as `imgbuild node-check` prints them):
  env          what each rank sees (NCCL_*, visible devices, versions); a rank unlike the others fails
  matmul       a seeded matmul per dtype against a float64 reference, within a tolerance per dtype
  collectives  all-reduce, broadcast and all-gather give the right values on every rank
  allreduce-bw all-reduce bus bandwidth over a size sweep (nccl-tests' formula: algbw * 2(n-1)/n)
  deepspeed    deepspeed.initialize with ZeRO stage 2 and a few steps of a tiny model: loss goes down
               and is identical on every rank (cpu_adam through optimizer offload on CPU, fused on GPU)
  megatron     Megatron-Core tensor parallel 2 and pipeline parallel 2 against the one-process loss
  cpu-ops      one step of each CPU optimizer op DeepSpeed prebuilt (cpu_adam, cpu_adagrad, cpu_lion), each in a
               process of its own: an instruction this node's CPU lacks ends it with SIGILL, named here rather
               than in a training job (on GPU nodes the deepspeed check uses fused Adam, never cpu_adam)
  dcgm         `dcgmi diag -r 1` on each node's first rank, where DCGM is installed (GPU nodes)
  nccl-tests   NCCL's own all_reduce_perf over the node's GPUs at 1-8 GiB on each node's first rank, where the
               image ships it (GPU nodes); `imgbuild node-check` judges its bus bandwidth against the
               threshold of the GPU system (builder/nodecheck/busbw.py)

IMGBUILD_NODE_CHECK_PERTURB=RANK:CHECK is a fault put in on purpose (tests, and a site proving that its
check fails): that rank's matmul result, all-reduce result or environment is made wrong.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import sys
import time
import traceback

RESULT_TAG = "@@IMGBUILD_NODE_CHECK "
# Relative error (max |C - ref| / max |ref|) a dtype's matmul may have against the float64 result: a
# sum of k products rounds at about sqrt(k) * eps; these leave a wide margin at k = 512 and still catch
# a wrong kernel or a flipped bit in the exponent.
TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}
ENV_PREFIXES = ("NCCL_", "CUDA_", "NVIDIA_", "OMP_", "DS_", "TORCH_", "UCX_", "FI_")
# Per rank by nature (Slurm binds one GPU per task): reported per rank, never compared.
PER_RANK = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def perturbed(rank: int, check: str) -> bool:
    value = os.environ.get("IMGBUILD_NODE_CHECK_PERTURB", "")
    return value == f"{rank}:{check}"


class Ctx:
    def __init__(self, torch, dist, device, rank: int, world: int):
        self.torch, self.dist, self.device, self.rank, self.world = torch, dist, device, rank, world

    def gather(self, value):
        out = [None] * self.world
        self.dist.all_gather_object(out, value)
        return out

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()


def result(check: str, status: str, detail: str, bad_ranks=(), numbers=None) -> dict:
    return {"id": check, "status": status, "detail": detail, "bad_ranks": sorted(bad_ranks), "numbers": numbers or {}}


# -- the checks: each runs on every rank and returns (on every rank) the same result ---------------------

def check_env(ctx: Ctx) -> dict:
    torch = ctx.torch
    seen = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES) and k not in PER_RANK}
    facts = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": str(torch.version.cuda),
             "devices": torch.cuda.device_count() if ctx.device.type == "cuda" else 0}
    if ctx.device.type == "cuda":
        facts["device"] = torch.cuda.get_device_name(ctx.device)
        facts["capability"] = ".".join(map(str, torch.cuda.get_device_capability(ctx.device)))
        facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    for dist_name in ("deepspeed", "megatron-core", "transformer-engine", "numpy"):
        try:
            from importlib.metadata import version
            facts[dist_name] = version(dist_name)
        except Exception:
            facts[dist_name] = None
    snapshot = {**{f"env:{k}": v for k, v in seen.items()}, **facts}
    if perturbed(ctx.rank, "env"):
        snapshot["env:NCCL_IB_HCA"] = "mlx5_perturbed"
    every = ctx.gather({"hostname": socket.gethostname(), "snapshot": snapshot,
                        "visible": {k: os.environ.get(k) for k in PER_RANK if os.environ.get(k) is not None}})
    keys = sorted({k for r in every for k in r["snapshot"]})
    bad, differs = set(), []
    for key in keys:
        values = [r["snapshot"].get(key) for r in every]
        # The value a strict majority sees is the reference, and the odd ones out are named; without a
        # majority (2 ranks that differ) nothing tells which is wrong, so every rank is named.
        texts = [json.dumps(v) for v in values]
        common = max(texts, key=texts.count)
        majority = texts.count(common) * 2 > len(texts)
        odd = [i for i, v in enumerate(texts) if v != common] if majority else list(range(len(texts)))
        if odd:
            bad.update(odd)
            differs.append(f"{key}: rank {', '.join(map(str, odd))} has "
                           f"{', '.join(repr(values[i]) for i in odd)}"
                           + (f", the others {json.loads(common)!r}" if majority else " (no majority tells which is wrong)"))
    hosts = sorted({r["hostname"] for r in every})
    numbers = {"hosts": hosts, "rank0": every[0]["snapshot"], "visible_devices": [r["visible"] for r in every]}
    if differs:
        return result("env", "failed", "; ".join(differs), bad, numbers)
    return result("env", "passed", f"{len(keys)} values alike on {ctx.world} ranks ({len(hosts)} host(s)): "
                  + ", ".join(f"{k} {v}" for k, v in facts.items() if v is not None), (), numbers)


def check_matmul(ctx: Ctx, n: int) -> dict:
    torch = ctx.torch
    gen = torch.Generator().manual_seed(1234)
    a64 = torch.randn(n, n, generator=gen, dtype=torch.float64)
    b64 = torch.randn(n, n, generator=gen, dtype=torch.float64)
    ref = a64 @ b64
    dtypes = ["float32"] + (["bfloat16", "float16"] if ctx.device.type == "cuda" else [])
    errors = {}
    for name in dtypes:
        dt = getattr(torch, name)
        c = (a64.to(ctx.device, dt) @ b64.to(ctx.device, dt)).to("cpu", torch.float64)
        if perturbed(ctx.rank, "matmul"):
            c[0, 0] += 1.0
        errors[name] = float((c - ref).abs().max() / ref.abs().max())
    every = ctx.gather(errors)
    bad, worst = set(), {}
    for name in dtypes:
        for r, errs in enumerate(every):
            if not errs[name] <= TOLERANCE[name]:
                bad.add(r)
        worst[name] = max(errs[name] for errs in every)
    detail = ", ".join(f"{d} max rel. error {worst[d]:.1e} (tolerance {TOLERANCE[d]:.0e})" for d in dtypes)
    numbers = {"n": n, "max_rel_error": worst, "tolerance": {d: TOLERANCE[d] for d in dtypes}}
    if bad:
        per_rank = "; ".join(f"rank {r}: " + ", ".join(f"{d} {every[r][d]:.1e}" for d in dtypes) for r in sorted(bad))
        return result("matmul", "failed", f"{n}x{n}x{n} beyond tolerance on {per_rank}", bad, numbers)
    return result("matmul", "passed", f"{n}x{n}x{n} on {ctx.world} ranks: {detail}", (), numbers)


def check_collectives(ctx: Ctx) -> dict:
    torch, dist, world, rank = ctx.torch, ctx.dist, ctx.world, ctx.rank
    wrong = []
    x = torch.full((1024,), float(rank + 1), device=ctx.device)
    dist.all_reduce(x)
    if perturbed(rank, "collectives"):   # what this rank received is wrong (a bad link or card on its side)
        x += 0.5
    if not torch.all(x == world * (world + 1) / 2):
        wrong.append(f"all-reduce gave {float(x[0])}, want {world * (world + 1) / 2}")
    y = torch.arange(1024, dtype=torch.float32, device=ctx.device) if rank == 0 else torch.zeros(1024, device=ctx.device)
    dist.broadcast(y, 0)
    if not torch.equal(y.cpu(), torch.arange(1024, dtype=torch.float32)):
        wrong.append("broadcast from rank 0 did not arrive intact")
    parts = [torch.zeros(4, device=ctx.device) for _ in range(world)]
    dist.all_gather(parts, torch.full((4,), float(rank), device=ctx.device))
    if [float(p[0]) for p in parts] != [float(r) for r in range(world)]:
        wrong.append(f"all-gather gave {[float(p[0]) for p in parts]}")
    every = ctx.gather(wrong)
    bad = [r for r, w in enumerate(every) if w]
    if bad:
        return result("collectives", "failed", "; ".join(f"rank {r}: {', '.join(every[r])}" for r in bad), bad)
    return result("collectives", "passed", f"all-reduce, broadcast and all-gather correct on {world} ranks "
                  f"({dist.get_backend()})")


def allreduce_busbw(ctx: Ctx, sizes, iters: int, warmup: int = 2) -> list[dict]:
    """nccl-tests' all_reduce_perf figures: time per call (the slowest rank's), algbw = bytes / time,
    busbw = algbw * 2 (n - 1) / n. Plain torch.distributed calls, nothing between them but a barrier."""
    torch, dist = ctx.torch, ctx.dist
    rows = []
    for size in sizes:
        x = torch.ones(size // 4, dtype=torch.float32, device=ctx.device)
        for _ in range(warmup):
            dist.all_reduce(x)
        ctx.sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        ctx.sync()
        # on the ranks' device: NCCL reduces no CPU tensor ("No backend type associated with device type cpu",
        # seen on an H200; gloo's CPU ranks never showed it)
        elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=ctx.device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        t = float(elapsed[0])
        algbw = size / t / 1e9
        rows.append({"bytes": size, "time_us": round(t * 1e6, 1), "algbw_GBps": round(algbw, 3),
                     "busbw_GBps": round(algbw * 2 * (ctx.world - 1) / ctx.world, 3)})
    return rows


def check_allreduce_bw(ctx: Ctx, sizes, iters: int) -> dict:
    rows = allreduce_busbw(ctx, sizes, iters)
    how = f"over {len(rows)} sizes ({ctx.dist.get_backend()}, {iters} iterations each)"
    if ctx.world == 1:
        # busbw's 2(n-1)/n is 0 for one rank: say the call's own rate, not "0.0 GB/s" (an H200's first run did)
        top = max(rows, key=lambda r: r["algbw_GBps"])
        return result("allreduce-bw", "passed", f"one rank, so no bus traffic (busbw 0 by nccl-tests' formula); "
                      f"algbw up to {top['algbw_GBps']} GB/s at {top['bytes']} bytes {how}", (), {"sweep": rows})
    top = max(rows, key=lambda r: r["busbw_GBps"])
    return result("allreduce-bw", "passed", f"bus bandwidth up to {top['busbw_GBps']} GB/s at {top['bytes']} bytes "
                  f"{how}", (), {"sweep": rows})


def check_deepspeed(ctx: Ctx, steps: int) -> dict:
    try:
        import deepspeed
    except ImportError:
        return result("deepspeed", "skipped", "deepspeed is not in this image")
    torch = ctx.torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    on_gpu = ctx.device.type == "cuda"
    config = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "steps_per_print": 10 ** 9,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-2}},
              "zero_optimization": {"stage": 2, **({} if on_gpu else {"offload_optimizer": {"device": "cpu"}})},
              "wall_clock_breakdown": False}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config,
                                                   dist_init_required=False)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(16, 32, generator=gen).to(engine.device)
    y = x[:, :1].clone() * 0.5
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(round(float(loss), 7))
    every = ctx.gather(losses)
    kind = type(optimizer.optimizer if hasattr(optimizer, "optimizer") else optimizer).__name__
    numbers = {"losses": losses, "optimizer": kind, "zero_stage": 2}
    bad = [r for r, l in enumerate(every) if l != every[0]]
    if bad:
        return result("deepspeed", "failed", "losses differ between ranks: " + "; ".join(
            f"rank {r} {every[r]}" for r in [0, *bad]), bad, numbers)
    if not losses[-1] < losses[0]:
        return result("deepspeed", "failed", f"loss did not go down over {steps} steps: {losses}",
                      range(ctx.world), numbers)
    return result("deepspeed", "passed", f"ZeRO-2, {kind}, {steps} steps on {ctx.world} ranks: loss "
                  f"{losses[0]:.4f} -> {losses[-1]:.4f}, identical on every rank", (), numbers)


# One optimizer step of a prebuilt DeepSpeed CPU op, run by a process of its own: its exit says whether the
# op's compiled code runs on this CPU (SIGILL: -4), without taking the rank down.
CPU_OPS = {
    "cpu_adam": "from deepspeed.ops.adam import DeepSpeedCPUAdam as Opt",
    "cpu_adagrad": "from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad as Opt",
    "cpu_lion": "from deepspeed.ops.lion import DeepSpeedCPULion as Opt",
}
CPU_STEP = """
import torch
{load}
p = torch.nn.Parameter(torch.ones(64))
opt = Opt([p], lr=0.1)
p.grad = torch.ones(64)
opt.step()
assert float(p.detach()[0]) < 1.0, p
print("step ok", float(p.detach()[0]))
"""


def check_cpu_ops(ctx: Ctx) -> dict:
    try:
        from deepspeed.git_version_info import installed_ops
    except Exception:
        return result("cpu-ops", "skipped", "deepspeed is not in this image")
    import subprocess
    prebuilt = [op for op in CPU_OPS if installed_ops.get(op)]
    if not prebuilt:
        return result("cpu-ops", "skipped", "DeepSpeed prebuilt no CPU op (" + ", ".join(CPU_OPS) + ") in this image")
    mine = {}
    # The fault put in on purpose: the op's process dies of SIGILL, as it would on a CPU without its instructions.
    fault = "import os, signal; os.kill(os.getpid(), signal.SIGILL)\n" if perturbed(ctx.rank, "cpu-ops") else ""
    for op in prebuilt:
        proc = subprocess.run([sys.executable, "-c", fault + CPU_STEP.format(load=CPU_OPS[op])], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=600)
        out = proc.stdout.decode(errors="replace").strip().splitlines()
        mine[op] = {"rc": proc.returncode, "last": (out or [""])[-1][:200]}
    every = ctx.gather({"host": socket.gethostname(), "ops": mine})
    bad, said = [], []
    for r, got in enumerate(every):
        for op, res in got["ops"].items():
            if res["rc"] != 0:
                bad.append(r)
                why = ("SIGILL: its compiled code uses an instruction this CPU lacks (see the image's CPU baseline)"
                       if res["rc"] == -4 else f"exit {res['rc']}: {res['last']}")
                said.append(f"rank {r} on {got['host']}: {op} {why}")
    if bad:
        return result("cpu-ops", "failed", "; ".join(said[:8]), set(bad), {"ops": prebuilt})
    return result("cpu-ops", "passed", f"one step of {', '.join(prebuilt)} on every rank's CPU "
                  f"({len({g['host'] for g in every})} host(s))", (), {"ops": prebuilt})


def per_node(ctx: Ctx, run) -> list:
    """run() on the first rank of each node (LOCAL_RANK 0, as torchrun and Slurm's tasks set it), what those
    returned gathered on every rank; a node whose run returned None (a tool it lacks) is left out."""
    first = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))) == 0
    return [got for got in ctx.gather(run() if first else None) if got]


def _tool(argv: list, timeout: float) -> dict:
    import subprocess
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return {"host": socket.gethostname(), "rc": proc.returncode, "output": proc.stdout.decode(errors="replace")[-20000:]}


def check_dcgm(ctx: Ctx) -> dict:
    import shutil
    if ctx.device.type != "cuda":
        return result("dcgm", "skipped", "needs GPUs (this run is CPU only)")
    every = per_node(ctx, lambda: _tool(["dcgmi", "diag", "-r", "1"], 900) if shutil.which("dcgmi") else None)
    if not every:
        return result("dcgm", "skipped", "dcgmi is not installed (DCGM's diagnostics run where it is)")
    bad = [g for g in every if g["rc"] != 0]
    if bad:
        return result("dcgm", "failed", "; ".join(f"dcgmi diag -r 1 on {g['host']}: exit {g['rc']}: "
                                                  + " | ".join(g["output"].strip().splitlines()[-3:]) for g in bad),
                      (), {"nodes": every})
    return result("dcgm", "passed", f"dcgmi diag -r 1 passed on {len(every)} node(s)", (), {"nodes": every})


def check_nccl_tests(ctx: Ctx) -> dict:
    """all_reduce_perf over this node's GPUs (one process, -g N), 1 to 8 GiB, on each node's first rank. The
    output goes back whole: `imgbuild node-check` parses and judges it (builder/nodecheck/busbw.py)."""
    import shutil
    if ctx.device.type != "cuda":
        return result("nccl-tests", "skipped", "needs GPUs (this run is CPU only)")
    tool = shutil.which("all_reduce_perf") or next((p for p in ("/opt/nccl-tests/bin/all_reduce_perf",   # the kind's
                                                                "/usr/local/bin/all_reduce_perf") if os.path.exists(p)), None)
    gpus = str(ctx.torch.cuda.device_count())
    every = per_node(ctx, lambda: _tool([tool, "-b", "1G", "-e", "8G", "-f", "2", "-g", gpus], 1800) if tool else None)
    if not every:
        return result("nccl-tests", "skipped", "all_reduce_perf is not in this image (NVIDIA's nccl-tests: "
                      "a layer of kind nccl-tests builds it)")
    bad = [g for g in every if g["rc"] != 0]
    if bad:
        return result("nccl-tests", "failed", "; ".join(f"all_reduce_perf on {g['host']}: exit {g['rc']}: "
                                                        + g["output"].strip()[-300:] for g in bad), (), {"nodes": every})
    return result("nccl-tests", "passed", f"all_reduce_perf ran on {len(every)} node(s); the bandwidth is judged "
                  "by imgbuild node-check", (), {"nodes": every})


def check_megatron(ctx: Ctx) -> dict:
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        return result("megatron", "skipped", "megatron-core is not in this image")
    if ctx.device.type != "cuda":
        return result("megatron", "skipped", "needs a GPU: Megatron-Core (0.16.1 read) allocates its tensor-parallel "
                      "communication buffers with device=torch.cuda.current_device() (tensor_parallel/layers.py) "
                      "and its pipeline p2p shape tensors on CUDA, then calls torch.cuda.synchronize() "
                      "(pipeline_parallel/p2p_communication.py): there is no CPU path with gloo")
    return megatron_smoke(ctx)


def megatron_smoke(ctx: Ctx) -> dict:
    """A tiny GPT: tensor parallel 2 and then pipeline parallel 2 (on the first two ranks' groups), forward
    and backward, the loss against the same model on one rank (tp=pp=1). With one rank (a node with one
    GPU) only the tp=pp=1 forward and backward runs, and the detail says so."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    def loss_with(tp: int, pp: int) -> float:
        parallel_state.destroy_model_parallel()
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
        model_parallel_cuda_manual_seed(123)
        torch.manual_seed(123)
        config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                                   pipeline_dtype=torch.float32)
        model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=128,
                         max_sequence_length=32, pre_process=parallel_state.is_pipeline_first_stage(),
                         post_process=parallel_state.is_pipeline_last_stage()).cuda()
        gen = torch.Generator().manual_seed(5)
        tokens = torch.randint(0, 128, (2, 32), generator=gen).cuda()
        position = torch.arange(32).unsqueeze(0).expand(2, -1).cuda()
        mask = torch.tril(torch.ones(1, 1, 32, 32, dtype=torch.bool)).logical_not().cuda()
        losses = []

        def step(data_iterator, model):
            out = model(tokens, position, mask, labels=tokens)

            def loss_func(output):
                loss = output.float().mean()
                losses.append(float(loss))
                return loss, {"loss": loss}
            return out, loss_func
        get_forward_backward_func()(forward_step_func=step, data_iterator=iter([None]), model=[model], num_microbatches=1,
                                    seq_length=32, micro_batch_size=2, forward_only=False)
        value = torch.tensor([losses[-1] if losses else 0.0], device="cuda")
        ctx.dist.all_reduce(value, op=ctx.dist.ReduceOp.MAX)
        return float(value[0])

    single = loss_with(1, 1)
    if ctx.world < 2:
        parallel_state.destroy_model_parallel()
        if not math.isfinite(single):
            return result("megatron", "failed", f"tp=pp=1 loss is {single}", [0], {"loss_tp1_pp1": single})
        return result("megatron", "passed", f"tiny GPT loss {single:.5f} (tp=pp=1 forward and backward; tensor and "
                      "pipeline parallel 2 need 2 ranks)", (), {"loss_tp1_pp1": single})
    tp = loss_with(2, 1)
    pp = loss_with(1, 2)
    parallel_state.destroy_model_parallel()
    numbers = {"loss_tp1_pp1": single, "loss_tp2": tp, "loss_pp2": pp}
    off = {k: v for k, v in (("tp=2", tp), ("pp=2", pp)) if abs(v - single) > 1e-3 * max(1.0, abs(single))}
    if off:
        return result("megatron", "failed", f"loss {single:.5f} on one rank, but " + ", ".join(
            f"{k} {v:.5f}" for k, v in off.items()), range(ctx.world), numbers)
    return result("megatron", "passed", f"tiny GPT loss {single:.5f}; tp=2 {tp:.5f}, pp=2 {pp:.5f}", (), numbers)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--matmul-n", type=int, default=512)
    ap.add_argument("--sizes", default="65536,1048576,8388608,33554432")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    started = time.time()
    import torch
    import torch.distributed as dist
    gpu = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if gpu:
        torch.cuda.set_device(local)
    # A rank that dies or hangs must end the run, not wait out the default half hour.
    from datetime import timedelta
    dist.init_process_group("nccl" if gpu else "gloo", timeout=timedelta(seconds=int(os.environ.get(
        "IMGBUILD_NODE_CHECK_TIMEOUT", "300"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    ctx = Ctx(torch, dist, torch.device("cuda", local) if gpu else torch.device("cpu"), rank, world)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if gpu and args.sizes == ap.get_default("sizes"):
        # On GPUs the peak bus bandwidth is reached at 1 GiB and above: the sweep goes there, so the figure
        # across nodes can be judged (builder/nodecheck/busbw.py refuses a smaller one as not comparable).
        sizes += [1 << 30, 2 << 30]
    # DCGM's diagnostics first: a GPU it finds broken explains every failure after it.
    checks = [("dcgm", lambda: check_dcgm(ctx)), ("env", lambda: check_env(ctx)), ("matmul", lambda: check_matmul(ctx, args.matmul_n)),
              ("collectives", lambda: check_collectives(ctx)),
              ("allreduce-bw", lambda: check_allreduce_bw(ctx, sizes, args.iters)),
              ("deepspeed", lambda: check_deepspeed(ctx, args.steps)), ("megatron", lambda: check_megatron(ctx)),
              ("cpu-ops", lambda: check_cpu_ops(ctx)), ("nccl-tests", lambda: check_nccl_tests(ctx))]
    wanted = set(filter(None, args.only.split(",")))
    results = []
    for name, run in checks:
        if wanted and name not in wanted:
            continue
        t0 = time.time()
        res, err = None, None
        try:
            res = run()
        except Exception as exc:   # a check that raised on some rank fails; the others still run
            err = (f"{type(exc).__name__}: {exc}".splitlines() or [type(exc).__name__])[0][:400]
            traceback.print_exc(file=sys.stderr)
        every = ctx.gather(err)    # every rank gets here, whether its check raised or not
        if any(every):
            res = result(name, "failed", "; ".join(f"rank {r} raised {e}" for r, e in enumerate(every) if e),
                         [r for r, e in enumerate(every) if e])
        res["seconds"] = round(time.time() - t0, 2)
        results.append(res)
    if rank == 0:
        print(RESULT_TAG + json.dumps({"world_size": world, "backend": dist.get_backend(), "results": results,
                                       "seconds": round(time.time() - started, 1)}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
