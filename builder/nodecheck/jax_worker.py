"""The node check's worker for JAX images: run by the image's own Python, standard library, jax and numpy only.

How it runs (and the report says which):
  processes  N processes joined by jax.distributed.initialize: on GPUs through NCCL, on CPU through the
             cross-process CPU collectives (gloo) of the JAX versions that have them. `--procs N` starts
             the N processes here (one node); a Slurm task or a Kubernetes pod is one process of a job
             (`--processes`, `--process-id`, `--coordinator`, and `--local-device` for a task's one GPU).
  devices    one process with N host devices forced by XLA_FLAGS, where this JAX has no CPU collectives
             across processes: the collectives then run between devices of one process (pmap), and a
             "rank" below is a device.

Checks (ids as `imgbuild node-check` prints them):
  env          what each rank sees (jax, jaxlib, backend, devices, XLA_/JAX_/NCCL_ variables); a rank
               unlike the others fails
  matmul       a seeded jit-compiled float32 matmul per rank against numpy's float64 product
  collectives  an all-reduce over every device, an all-gather and a broadcast from rank 0, by value

Rank 0 prints one line: RESULT_TAG + JSON, the same report as the PyTorch worker's.
IMGBUILD_NODE_CHECK_PERTURB=RANK:CHECK makes that rank's matmul, all-reduce or environment wrong on
purpose (tests, and a site proving that its check fails).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

RESULT_TAG = "@@IMGBUILD_NODE_CHECK "
TOLERANCE = 1e-4   # float32's relative error on a 256-term dot product, with a wide margin
ENV_PREFIXES = ("XLA_", "JAX_", "NCCL_", "CUDA_", "NVIDIA_", "OMP_", "TF_CPP_", "UCX_", "FI_")
# Per rank by nature: never compared.
PER_RANK = ("JAX_PROCESS_ID", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "IMGBUILD_NODE_CHECK_PERTURB")
HOST_DEVICES = "--xla_force_host_platform_device_count"


def perturbed(rank: int, check: str) -> bool:
    return os.environ.get("IMGBUILD_NODE_CHECK_PERTURB", "") == f"{rank}:{check}"


def fail_on_purpose(rank: int, check: str) -> None:
    """RANK:CHECK:raise: that rank's part of the check raises (a rank that breaks, not one that is wrong)."""
    if os.environ.get("IMGBUILD_NODE_CHECK_PERTURB", "") == f"{rank}:{check}:raise":
        raise RuntimeError(f"{check} made to fail on purpose on rank {rank}")


def result(check: str, status: str, detail: str, bad_ranks=(), numbers=None) -> dict:
    return {"id": check, "status": status, "detail": detail, "bad_ranks": sorted(bad_ranks), "numbers": numbers or {}}


def cpu_collectives(jax) -> bool:
    """Whether this JAX runs collectives between processes on CPU: it has the option that picks their
    implementation (gloo or mpi). It is turned on where it is off."""
    values = getattr(jax.config, "values", {})
    if "jax_cpu_collectives_implementation" not in values:
        return False
    if values["jax_cpu_collectives_implementation"] in (None, "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    return True


def odd_ones(values: list) -> tuple[list, str]:
    """(ranks to name, the reference) for one value seen by every rank: those unlike the value a strict
    majority sees; where no majority tells which is wrong (2 ranks that differ), every rank unlike the others."""
    texts = [json.dumps(v) for v in values]
    common = max(texts, key=texts.count)
    if texts.count(common) * 2 > len(texts):
        return [i for i, v in enumerate(texts) if v != common], common
    return list(range(len(texts))), "no majority"


class Ranks:
    """Which rank this is, how many there are, and a gather of a JSON value from every rank."""

    def __init__(self, jax, np, mode: str):
        self.jax, self.np, self.mode = jax, np, mode
        if mode == "processes":
            self.rank, self.world = jax.process_index(), jax.process_count()
        else:
            self.rank, self.world = 0, len(jax.devices())

    def gather(self, value) -> list:
        """Every process's value, on every process (processes mode). Sent as bytes through
        process_allgather: first the lengths, then the padded texts."""
        if self.mode != "processes":
            return [value]
        from jax.experimental import multihost_utils as mh
        np = self.np
        data = json.dumps(value).encode()
        sizes = mh.process_allgather(np.array([len(data)], dtype=np.int32)).reshape(-1)
        buf = np.zeros(int(sizes.max()), dtype=np.uint8)
        buf[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        every = mh.process_allgather(buf).reshape(self.world, -1)
        return [json.loads(bytes(row[:int(n)]).decode()) for row, n in zip(every, sizes)]


# -- the checks: each has a local part, run by every rank (it may raise), and a judge of what every rank
# -- sent. The loop in main() makes exactly one gather per check, so the ranks never fall out of step.

def env_local(r: Ranks) -> dict:
    jax = r.jax
    import jaxlib
    fail_on_purpose(r.rank, "env")
    seen = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES) and k not in PER_RANK}
    local = jax.local_devices()
    facts = {"python": platform.python_version(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
             "backend": jax.default_backend(), "local_devices": len(local),
             "device_kind": local[0].device_kind if local else None}
    snapshot = {**{f"env:{k}": v for k, v in seen.items()}, **facts}
    if perturbed(r.rank, "env"):
        snapshot["env:NCCL_IB_HCA"] = "mlx5_perturbed"
    return {"hostname": socket.gethostname(), "snapshot": snapshot, "facts": facts}


def env_judge(r: Ranks, every: list) -> dict:
    keys = sorted({k for e in every for k in e["snapshot"]})
    hosts = sorted({e["hostname"] for e in every})
    numbers = {"hosts": hosts, "rank0": every[0]["snapshot"]}
    facts = ", ".join(f"{k} {v}" for k, v in every[0]["facts"].items() if v is not None)
    if r.mode != "processes":   # one process: every device sees its environment; nothing to compare
        return result("env", "skipped", f"one process ({r.world} host devices), so one environment: {facts}",
                      (), numbers)
    bad, differs = set(), []
    for key in keys:
        values = [e["snapshot"].get(key) for e in every]
        odd, common = odd_ones(values)
        if odd:
            bad.update(odd)
            differs.append(f"{key}: " + ", ".join(f"rank {i} has {json.dumps(values[i])}" for i in odd)
                           + (f", the others {common}" if common != "no majority" else
                              " (no majority tells which is wrong)"))
    if differs:
        return result("env", "failed", "; ".join(differs), bad, numbers)
    return result("env", "passed", f"{len(keys)} values alike ({r.world} processes, {len(hosts)} host(s)): {facts}",
                  (), numbers)


def matmul_local(r: Ranks, n: int) -> list:
    """The relative error of a seeded jit float32 matmul against float64: this process's on its first
    device, or, in one process, every device's."""
    jax, np = r.jax, r.np
    import jax.numpy as jnp
    fail_on_purpose(r.rank, "matmul")
    rng = np.random.default_rng(1234)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    ref = a @ b
    mm = jax.jit(jnp.matmul)

    def error_on(device, rank: int) -> float:
        c = np.asarray(mm(jax.device_put(a.astype(np.float32), device), jax.device_put(b.astype(np.float32), device)),
                       dtype=np.float64)
        if perturbed(rank, "matmul"):
            c[0, 0] += 1.0
        return float(np.abs(c - ref).max() / np.abs(ref).max())

    if r.mode == "processes":
        return [error_on(jax.local_devices()[0], r.rank)]
    return [error_on(d, i) for i, d in enumerate(jax.devices())]


def matmul_judge(r: Ranks, every: list, n: int) -> dict:
    errors = [e for part in every for e in part]
    bad = [i for i, e in enumerate(errors) if not e < TOLERANCE]
    numbers = {"n": n, "max_rel_error": max(errors), "tolerance": {"float32": TOLERANCE}}
    if bad:
        return result("matmul", "failed", f"{n}x{n}x{n} float32 beyond tolerance {TOLERANCE} on "
                      + "; ".join(f"rank {i}: {errors[i]:.1e}" for i in bad), bad, numbers)
    return result("matmul", "passed", f"{n}x{n}x{n} float32 on {r.world} ranks: max relative error "
                  f"{max(errors):.1e} against float64", (), numbers)


def _step(wrong: list, what: str, fn) -> None:
    """One collective call: its exception is recorded, and the rank goes on to the next call as the
    others do."""
    try:
        fn()
    except Exception as exc:
        wrong.append(f"{what} raised {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")


def collectives_local(r: Ranks) -> list:
    """What this rank saw wrong, per rank of this process: an all-reduce over every device of every process
    (device d holds d + 1), an all-gather and a broadcast from rank 0; in one process, the same between its
    devices through pmap (psum, all_gather, and a broadcast as the psum of device 0's one-hot values)."""
    fail_on_purpose(r.rank, "collectives")
    return [_collectives_processes(r)] if r.mode == "processes" else _collectives_devices(r)


def _collectives_processes(r: Ranks) -> list:
    jax, np = r.jax, r.np
    import jax.numpy as jnp
    from jax.experimental import multihost_utils as mh
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    devs = jax.devices()
    d = len(devs)
    mesh = Mesh(np.array(devs), ("i",))
    wrong: list = []

    def allreduce():
        x = jax.make_array_from_callback((d,), NamedSharding(mesh, P("i")),
                                         lambda idx: np.arange(1, d + 1, dtype=np.float32)[idx])
        got = float(np.asarray(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x).addressable_data(0)))
        if perturbed(r.rank, "collectives"):   # what this rank received is wrong (a bad link or card on its side)
            got += 0.5
        if got != d * (d + 1) / 2:
            wrong.append(f"all-reduce over {d} devices gave {got}, want {d * (d + 1) / 2}")

    def allgather():
        parts = np.asarray(mh.process_allgather(np.full((4,), float(r.rank), dtype=np.float32))).reshape(r.world, 4)
        if parts[:, 0].tolist() != [float(i) for i in range(r.world)]:
            wrong.append(f"all-gather gave {parts[:, 0].tolist()}")

    def broadcast():
        y = np.arange(1024, dtype=np.float32) if r.rank == 0 else np.zeros(1024, dtype=np.float32)
        if not np.array_equal(np.asarray(mh.broadcast_one_to_all(y)), np.arange(1024, dtype=np.float32)):
            wrong.append("broadcast from rank 0 did not arrive intact")

    for what, fn in (("all-reduce", allreduce), ("all-gather", allgather), ("broadcast", broadcast)):
        _step(wrong, what, fn)
    return wrong


def _collectives_devices(r: Ranks) -> list:
    jax, np = r.jax, r.np
    import jax.numpy as jnp
    devs = jax.devices()
    n = len(devs)

    def step(v, i):
        s = jax.lax.psum(v, "i")
        g = jax.lax.all_gather(i, "i")
        b = jax.lax.psum(jnp.where(i == 0, jnp.arange(8, dtype=jnp.float32), 0.0), "i")
        return s, g, b

    s, g, b = jax.pmap(step, axis_name="i", devices=devs)(jnp.arange(1, n + 1, dtype=jnp.float32),
                                                          jnp.arange(n, dtype=jnp.float32))
    s, g, b = np.asarray(s), np.asarray(g), np.asarray(b)
    every = []
    for i in range(n):
        wrong = []
        got = float(s[i]) + (0.5 if perturbed(i, "collectives") else 0.0)
        if got != n * (n + 1) / 2:
            wrong.append(f"all-reduce gave {got}, want {n * (n + 1) / 2}")
        if g[i].tolist() != [float(k) for k in range(n)]:
            wrong.append(f"all-gather gave {g[i].tolist()}")
        if b[i].tolist() != [float(k) for k in range(8)]:
            wrong.append("broadcast from device 0 did not arrive intact")
        every.append(wrong)
    return every


def collectives_judge(r: Ranks, every: list) -> dict:
    wrongs = [w for part in every for w in part]
    bad = [i for i, w in enumerate(wrongs) if w]
    if bad:
        return result("collectives", "failed", "; ".join(f"rank {i}: {', '.join(wrongs[i])}" for i in bad), bad)
    how = (f"{r.world} processes, {len(r.jax.devices())} devices, {r.jax.default_backend()}"
           if r.mode == "processes" else f"{r.world} devices of one process")
    return result("collectives", "passed", f"all-reduce, all-gather and broadcast correct ({how})")


def run_check(r: Ranks, name: str, local, judge) -> dict:
    """A check on every rank: its local part (an exception is this rank's failure), then exactly one gather
    of {value, error} from every rank, then the judge; a rank that raised is named."""
    t0 = time.time()
    value, err = None, None
    try:
        value = local()
    except Exception as exc:
        err = (f"{type(exc).__name__}: {exc}".splitlines() or [type(exc).__name__])[0][:400]
        traceback.print_exc(file=sys.stderr)
    every = r.gather({"value": value, "error": err})
    raised = [(i, e["error"]) for i, e in enumerate(every) if e["error"]]
    if raised:
        res = result(name, "failed", "; ".join(f"rank {i} raised {e}" for i, e in raised), [i for i, _ in raised])
    else:
        res = judge([e["value"] for e in every])
    res["seconds"] = round(time.time() - t0, 2)
    return res


def spawn(procs: int, port: int, argv: list, gpu: bool, deadline: float) -> int:
    """Start `procs` processes of this worker on this node, process 0 the coordinator, one GPU each where
    there are GPUs. The first that fails ends the others, and none outlives the deadline: jax.distributed
    catches SIGTERM (its preemption notice), so a stuck process is killed."""
    children = []
    for i in range(procs):
        env = {**os.environ, "JAX_PROCESS_ID": str(i), "JAX_NUM_PROCESSES": str(procs),
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", **({"IMGBUILD_JAX_LOCAL_DEVICE": str(i)} if gpu else {})}
        children.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, "--joined"], env=env))
    rc, end = 0, time.time() + deadline
    while children:
        for child in list(children):
            code = child.poll()
            if code is None:
                continue
            children.remove(child)
            if code and not rc:
                rc = code
                end = min(end, time.time() + 10)   # the others may still print why; then they go
        if time.time() > end:
            for child in children:
                child.send_signal(signal.SIGKILL)
            print(f"node check: {len(children)} process(es) still running after the deadline were killed",
                  file=sys.stderr, flush=True)
            rc = rc or 124
            for child in children:
                child.wait()
            children = []
        time.sleep(0.2)
    return rc


def watchdog(seconds: float, r_state: dict) -> threading.Timer:
    """A check that does not end (a peer stopped answering in a collective) ends the process: rank 0 first
    prints the report so far, with that check failed."""
    def fire():
        if r_state.get("rank") == 0:
            hung = result(r_state["check"] or "start", "failed", f"did not finish within {seconds:g} s: a rank "
                          "stopped answering (see the log)")
            results = list(r_state["results"]) + [{**hung, "seconds": seconds}]
            print(RESULT_TAG + json.dumps({"world_size": r_state.get("world", 0), "backend": r_state.get("backend", ""),
                                           "results": results, "seconds": seconds}), flush=True)
        print(f"node check: {r_state['check']} did not finish within {seconds:g} s", file=sys.stderr, flush=True)
        os._exit(124)
    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=1, help="processes to start on this node")
    ap.add_argument("--port", type=int, default=29500, help="the coordinator's port for --procs")
    ap.add_argument("--processes", type=int, default=0, help="processes over all nodes (a Slurm job's tasks, a "
                    "Kubernetes Job's pods)")
    ap.add_argument("--process-id", type=int, default=0)
    ap.add_argument("--coordinator", default="", help="HOST:PORT of process 0")
    ap.add_argument("--local-device", type=int, default=None, help="the one GPU of this process (a Slurm task's)")
    ap.add_argument("--one-process", action="store_true", help="the ranks as host devices of one process, as where "
                    "this JAX has no CPU collectives across processes")
    ap.add_argument("--matmul-n", type=int, default=256)
    ap.add_argument("--only", default="")
    ap.add_argument("--joined", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    started = time.time()
    import jax
    import numpy as np
    timeout = int(os.environ.get("IMGBUILD_NODE_CHECK_TIMEOUT", "300"))
    # Nothing may touch a backend before jax.distributed.initialize: whether there are GPUs is read from
    # the device nodes the container was given, not from jax.devices().
    gpu = bool(glob.glob("/dev/nvidia[0-9]*"))
    many = args.procs > 1 or args.processes > 1
    mode, why = "processes", ""
    if args.processes > 1 and not gpu and not cpu_collectives(jax):
        # Each process alone would pass a check that never crossed a node: refused, not faked.
        print(f"node check: jax {jax.__version__} has no CPU collectives across processes, so a check over "
              f"{args.processes} processes cannot run on CPU; run it on GPUs, or on one node with --procs "
              "(the ranks then are host devices)", file=sys.stderr, flush=True)
        return 2
    if many and not gpu and (args.one_process or not cpu_collectives(jax)):
        # One process, the ranks as host devices (XLA_FLAGS is read when the CPU backend starts, below).
        mode = "devices"
        why = ("asked for with --one-process" if args.one_process else
               f"jax {jax.__version__} has no CPU collectives across processes, so the ranks are host devices")
        count = args.procs if args.procs > 1 else max(args.processes, 2)
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {HOST_DEVICES}={count}".strip()
        os.environ["JAX_PLATFORMS"] = "cpu"
    elif args.procs > 1 and not args.joined:
        return spawn(args.procs, args.port, ["--procs", str(args.procs), "--port", str(args.port),
                                             "--matmul-n", str(args.matmul_n), "--only", args.only],
                     gpu, deadline=2 * timeout + 60)
    elif args.processes > 1:
        jax.distributed.initialize(args.coordinator, num_processes=args.processes, process_id=args.process_id,
                                   local_device_ids=None if args.local_device is None else [args.local_device],
                                   initialization_timeout=timeout)
    elif args.joined:
        local = os.environ.get("IMGBUILD_JAX_LOCAL_DEVICE")
        jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"],
                                   num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                                   process_id=int(os.environ["JAX_PROCESS_ID"]),
                                   local_device_ids=None if local is None else [int(local)],
                                   initialization_timeout=timeout)
    r = Ranks(jax, np, mode)
    backend = (f"jax.distributed, {r.world} processes, {jax.default_backend()}"
               + (" (gloo CPU collectives)" if jax.default_backend() == "cpu" else "")
               if r.mode == "processes" else f"one process, {r.world} host devices: {why}")
    checks = [("env", lambda: env_local(r), lambda every: env_judge(r, every)),
              ("matmul", lambda: matmul_local(r, args.matmul_n), lambda every: matmul_judge(r, every, args.matmul_n)),
              ("collectives", lambda: collectives_local(r), lambda every: collectives_judge(r, every))]
    wanted = set(filter(None, args.only.split(",")))
    results: list = []
    state = {"rank": r.rank, "world": r.world, "backend": backend, "results": results, "check": None}
    for name, local, judge in checks:
        if wanted and name not in wanted:
            continue
        state["check"] = name
        timer = watchdog(timeout, state)
        results.append(run_check(r, name, local, judge))
        timer.cancel()
    if r.rank == 0:
        print(RESULT_TAG + json.dumps({"world_size": r.world, "backend": backend, "results": results,
                                       "seconds": round(time.time() - started, 1)}), flush=True)
    if r.mode == "processes" and jax.process_count() > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
