"""What the Python lock costs (issue 21): `imgbuild lock stack=cpu-smoke` cold and warm, and a full clean
build of cpu-smoke from the lock beside the same build without one.

Each "clean" step starts with the benchmark's local images removed and the BuildKit cache pruned, and
uses a namespace of its own, so that no key is in the registry:
  lock_cold     `lock stack=cpu-smoke` with no lock file: every pip layer resolved by pip in the image
                beneath it, and each layer beneath built from the lock first (it builds the stack's
                lower layers: that is part of locking from the bottom up)
  lock_warm     the same again: every entry current, nothing resolved (the review, the registry asked)
  relock_warm   `lock python=ds-0.19.8-cpu` again, BuildKit's cache warm: one layer re-resolved
  build_plain   `build stack=cpu-smoke` of the shipped stacks.yaml, no lock (pip resolves in the build)
  build_locked  the same stack with the lock of lock_cold (every pip command --require-hashes, --no-deps)
The two builds alternate (plain, locked, plain, locked, ...) so that a drift of the machine's speed
falls on both. Run as root on a machine prepared by scripts/setup-host.sh, nothing else running:
  .venv/bin/python benchmarks/lock_cost.py [--pairs 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_cpu_smoke import clean_engine  # noqa: E402


def cli(home: Path, *args: str) -> float:
    """Seconds one imgbuild command took; it must succeed."""
    env = dict(os.environ, IMGBUILD_HOME=str(home))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "builder.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3600)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return took


def stacks_copy(folder: Path, namespace: str, lock: Path | None = None) -> Path:
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"]["namespace"] = namespace
    data["stacks"] = {"cpu-smoke": data["stacks"]["cpu-smoke"]}
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "stacks.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    if lock is not None:
        shutil.copy2(lock, folder / "stacks.lock.yaml")
    return f


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="imgbuild-lock-bench-"))
    home = tmp / "home"
    run = uuid.uuid4().hex[:8]
    out: dict = {}

    clean_engine(["imgbuild.local/"])
    locked = stacks_copy(tmp / "lock", f"bench-lock-{run}")
    out["lock_cold_s"] = cli(home, "lock", "stack=cpu-smoke", "-f", str(locked))
    out["lock_warm_s"] = cli(home, "lock", "stack=cpu-smoke", "-f", str(locked))
    out["relock_warm_s"] = cli(home, "lock", "python=ds-0.19.8-cpu", "-f", str(locked))
    lock = locked.with_name("stacks.lock.yaml")
    entries = yaml.safe_load(lock.read_text())["python"]
    out["locked_distributions"] = sum(len(step) for e in entries.values() for step in e["steps"])

    plain, pinned = [], []
    for i in range(args.pairs):
        for kind, times in (("plain", plain), ("locked", pinned)):
            clean_engine(["imgbuild.local/"])
            f = stacks_copy(tmp / f"{kind}-{i}", f"bench-{kind}-{run}-{i}", lock if kind == "locked" else None)
            times.append(cli(home, "build", "stack=cpu-smoke", "-f", str(f)))
    out["build_plain_clean_s"] = plain
    out["build_locked_clean_s"] = pinned
    out["locked_over_plain_median"] = statistics.median(pinned) / statistics.median(plain)
    out["pairs"] = [b / a for a, b in zip(plain, pinned)]
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"cpu-smoke lock cost, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
    for k, v in out.items():
        print(f"  {k:<32} {v if not isinstance(v, float) else round(v, 2)}")


if __name__ == "__main__":
    main()
