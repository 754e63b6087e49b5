"""A fleet of CPU stacks that share layers, built sequentially, with `--jobs 2`, and over two engines
sharing one registry (issue 12).

Six stacks: cpu-smoke and five variants with their own runtime environment, so cpu-torch and DeepSpeed
are shared and every runtime and project layer is distinct (2 + 6 + 6 = 14 distinct layer images).
Each mode builds the whole fleet in a fresh registry namespace after pruning the BuildKit cache, and
the script prints wall time and how many layer images were built against the distinct ones (the target
is each distinct node built once per fleet).

engines2 is what a CI pipeline with two runners does: one `imgbuild build --node KEY` job per distinct
node, parents first, each job on whichever engine is free (engine A, the host's, and engine B, the
second dockerd of scripts/second-engine.sh, started here), then one `imgbuild release` of the fleet.
Run as root on a machine prepared by scripts/setup-host.sh:
  .venv/bin/python benchmarks/fleet.py [--modes seq,jobs2,engines2]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
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


def cli(argv: list[str], env: dict) -> None:
    proc = subprocess.run([sys.executable, "-m", "builder.cli", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])}: failed\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def node_jobs(path: Path, names: list[str], engines: list[dict]) -> None:
    """One `build --node` job per distinct node, parents first, on whichever engine is free."""
    plan = json.loads(cli(["plan", *[f"stack={n}" for n in names], "--json", "-f", str(path)], engines[0]).stdout)
    parent = {n["key"][:32]: (n["parent"] or "")[:32] or None for n in plan["nodes"]}
    done, todo, failed = set(), list(parent), []
    lock = threading.Condition()

    def worker(env: dict) -> None:
        while True:
            with lock:
                while True:
                    if failed or not todo:
                        return
                    key = next((k for k in todo if parent[k] is None or parent[k] in done), None)
                    if key:
                        todo.remove(key)
                        break
                    lock.wait()
            try:
                cli(["build", "--node", key, "-f", str(path)], env)
            except SystemExit as exc:
                failed.append(str(exc))
            with lock:
                done.add(key)
                lock.notify_all()
    threads = [threading.Thread(target=worker, args=(env,)) for env in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise SystemExit(failed[0])
    cli(["release", *[f"stack={n}" for n in names], "-f", str(path)], engines[0])


def run(mode: str, work: Path) -> dict:
    namespace = f"bench-fleet-{mode}-{uuid.uuid4().hex[:6]}"
    data, names = fleet(namespace)
    path = work / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = dict(os.environ, IMGBUILD_HOME=str(work / mode))
    engines = [env]
    if mode == "engines2":
        start_b = subprocess.run(["bash", str(ROOT / "scripts" / "second-engine.sh"), "start"], check=True,
                                 capture_output=True, text=True).stdout.split("=", 1)[1].strip()
        engines.append(dict(env, DOCKER_HOST=start_b, IMGBUILD_BUILD_NETWORK="host"))
    for e in engines:   # both engines start clean: no BuildKit cache, no images of earlier runs on B
        subprocess.run(["docker", "builder", "prune", "--all", "--force"], check=True, capture_output=True, env=e)
    if len(engines) > 1:
        subprocess.run(["docker", "image", "prune", "--all", "--force"], check=True, capture_output=True,
                       env=engines[1])
    start = time.perf_counter()
    if mode == "engines2":
        node_jobs(path, names, engines)
    else:
        cli(["build", *[f"stack={n}" for n in names], "-f", str(path)] + (["--jobs", "2"] if mode == "jobs2" else []),
            env)
    wall = time.perf_counter() - start
    reports = [json.loads(p.read_text()) for p in (work / mode / "runs").glob("*/report.json")]
    nodes = [n for r in reports for n in r["nodes"].values()]
    built = sum(1 for n in nodes if n["action"] == "build")
    return {"mode": mode, "wall_s": round(wall, 1), "built": built, "distinct": len({n["key"] for n in nodes}),
            "stacks": len(names)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="seq,jobs2,engines2")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="imgbuild-fleet-") as tmp:
        rows = [run(mode, Path(tmp)) for mode in args.modes.split(",")]
    for r in rows:
        print(f"{r['mode']:<6} {r['stacks']} stacks  wall {r['wall_s']:7.1f} s  layer images built {r['built']} "
              f"of {r['distinct']} distinct")


if __name__ == "__main__":
    main()
