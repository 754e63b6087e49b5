"""A fleet of CPU stacks that share layers, built sequentially and with `--jobs 2` (issue 12).

Six stacks: cpu-smoke and five variants with their own runtime environment, so cpu-torch and DeepSpeed
are shared and every runtime and project layer is distinct (2 + 6 + 6 = 14 distinct layer images).
Each mode builds the whole fleet in a fresh registry namespace after pruning the BuildKit cache, and
the script prints wall time and how many layer images were built against the distinct ones (the target
is each distinct node built once per fleet). Run as root on a machine prepared by scripts/setup-host.sh:
  .venv/bin/python benchmarks/fleet.py [--modes seq,jobs2]
Two engines sharing one registry are not measured here (issue 12 leaves that open).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def fleet(namespace: str) -> dict:
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {**data["site"], "namespace": namespace}
    names = ["cpu-smoke"]
    for i in range(1, 6):
        data["runtimes"][f"cpu-env-{i}"] = {"kind": "runtime-env",
                                            "params": {"env": {"OMP_NUM_THREADS": str(i), "DS_ACCELERATOR": "cpu"}}}
        data["stacks"][f"cpu-fleet-{i}"] = {**data["stacks"]["cpu-smoke"], "runtime": f"cpu-env-{i}",
                                            "tags": ["{stack}"]}
        names.append(f"cpu-fleet-{i}")
    return data, names


def run(mode: str, work: Path) -> dict:
    namespace = f"bench-fleet-{mode}-{uuid.uuid4().hex[:6]}"
    data, names = fleet(namespace)
    path = work / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    subprocess.run(["docker", "builder", "prune", "--all", "--force"], check=True, capture_output=True)
    argv = [sys.executable, "-m", "builder.cli", "build", *[f"stack={n}" for n in names], "-f", str(path)]
    if mode == "jobs2":
        argv += ["--jobs", "2"]
    env = dict(os.environ, IMGBUILD_HOME=str(work / mode))
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: build failed\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    report = json.loads(next((work / mode / "runs").glob("*/report.json")).read_text())
    built = sum(1 for n in report["nodes"].values() if n["action"] == "build")
    return {"mode": mode, "wall_s": round(wall, 1), "built": built, "distinct": len(report["nodes"]),
            "stacks": len(names)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="seq,jobs2")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="imgbuild-fleet-") as tmp:
        rows = [run(mode, Path(tmp)) for mode in args.modes.split(",")]
    for r in rows:
        print(f"{r['mode']:<6} {r['stacks']} stacks  wall {r['wall_s']:7.1f} s  layer images built {r['built']} "
              f"of {r['distinct']} distinct")


if __name__ == "__main__":
    main()
