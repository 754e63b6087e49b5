"""node-check's wall time with 2 CPU ranks, and its all-reduce bus bandwidth beside plain torch.distributed.

Target (issue 14): `imgbuild node-check` with 2 CPU processes in under 60 s. The bandwidth rows of the
check are compared with a loop of bare `dist.all_reduce` calls in the same image, same sizes, same
iterations and warm-up, timed the same way (nccl-tests' busbw), to show the check adds nothing of its own.

    .venv/bin/python benchmarks/node_check.py IMAGE [--repeat 3] [--procs 2]

IMAGE: a released image by digest (REGISTRY/NS/STACK@sha256:...). Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.ship.engine import Engine  # noqa: E402
from builder import nodecheck  # noqa: E402

PLAIN = r'''
import os, sys, time, json
from datetime import timedelta
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=timedelta(seconds=300))
world = dist.get_world_size()
rows = []
for size in [int(s) for s in sys.argv[1].split(",")]:
    x = torch.ones(size // 4, dtype=torch.float32)
    for _ in range(2):
        dist.all_reduce(x)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(int(sys.argv[2])):
        dist.all_reduce(x)
    t = torch.tensor([(time.perf_counter() - start) / int(sys.argv[2])], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    algbw = size / float(t[0]) / 1e9
    rows.append({"bytes": size, "busbw_GBps": round(algbw * 2 * (world - 1) / world, 3)})
if dist.get_rank() == 0:
    print("@@PLAIN " + json.dumps(rows), flush=True)
dist.destroy_process_group()
'''
SIZES = "65536,1048576,8388608,33554432"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    engine = Engine.detect()
    walls, checks, plains = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "plain.py"
        plain.write_text(PLAIN)
        for _ in range(args.repeat):
            start = time.time()
            proc = subprocess.run([sys.executable, "-m", "builder.cli", "node-check", args.image, "--procs",
                                   str(args.procs), "--json"], capture_output=True, text=True, cwd=ROOT)
            walls.append(time.time() - start)
            if proc.returncode != 0:
                print(proc.stdout[-3000:], proc.stderr[-3000:])
                return 1
            report = json.loads(proc.stdout)
            checks.append(next(r for r in report["results"] if r["id"] == "allreduce-bw")["numbers"]["sweep"])
            argv = nodecheck.torchrun_argv(args.procs, "/opt/plain.py") + [SIZES, "5"]   # the check's own launch
            res = engine.run_container(args.image, argv, mounts=[(str(plain), "/opt/plain.py")], shm_size="1g",
                                       env={"GLOO_SOCKET_IFNAME": "lo"})
            line = next(l for l in res.stdout.splitlines() if l.startswith("@@PLAIN "))
            plains.append(json.loads(line[len("@@PLAIN "):]))
    print(f"image: {args.image}")
    print(f"node-check, {args.procs} CPU ranks, {args.repeat} runs: wall min {min(walls):.1f} s, "
          f"median {statistics.median(walls):.1f} s, max {max(walls):.1f} s  "
          f"({'PASS' if statistics.median(walls) < 60 else 'MISS'}: target < 60 s)")
    print(f"{'bytes':>12}  {'check busbw GB/s median (each run)':>44}  {'plain torch.distributed median (each run)':>50}")
    for i, size in enumerate(SIZES.split(",")):
        a = [run[i]["busbw_GBps"] for run in checks]
        b = [run[i]["busbw_GBps"] for run in plains]
        print(f"{size:>12}  {statistics.median(a):>8.3f} ({' '.join(f'{x:.3f}' for x in a)})"
              f"  {statistics.median(b):>8.3f} ({' '.join(f'{x:.3f}' for x in b)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
