"""What a second platform costs: the same CPU stack built for linux/amd64 natively and for linux/arm64
under QEMU emulation, side by side, and the two-platform release's extra time over the amd64 one.

Two runs of `imgbuild build`, each on a clean engine (the benchmark's local images removed and the
BuildKit cache pruned) and into a fresh namespace, so that every layer is really built:
  1. the stack for linux/amd64 alone: its wall time;
  2. the same stack with `platforms: [linux/amd64, linux/arm64]`: its wall time, and each layer's build
     seconds per platform from report.json (amd64 native, arm64 emulated, in the same run).
The stack: the mirrored Debian base (an index of both platforms), torch from the wheelhouse (2.13.0+cpu
x86_64, PyPI's 2.10.0 aarch64), DeepSpeed 0.19.8 with the ops of --ops prebuilt, the runtime env and
the smoke project. Run as root on a machine prepared by scripts/setup-host.sh and setup-test-host.sh
(it prunes the engine's build cache):
  .venv/bin/python benchmarks/platforms.py [--ops cpu_adam] [--json]
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
DOCKER = "/usr/bin/docker"
ARM_WHEEL = {"file": "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
             "sha256": "3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"}


def stacks(folder: Path, namespace: str, platforms: list[str], ops: list[str]) -> Path:
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": "127.0.0.1:5000", "namespace": namespace}
    params = data["layers"]["cpu-torch-2.13"]["params"]
    params["wheel"] = [params["wheel"], ARM_WHEEL]
    data["layers"]["ds-0.19.8-cpu"]["params"]["ops"] = ops
    data["stacks"] = {"bench": {**data["stacks"]["cpu-smoke"], "platforms": platforms,
                                "tags": ["{stack}", "{stack}-ds{deepspeed}"]}}
    path = folder / f"{namespace}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def clean_engine(namespaces: list[str]) -> None:
    refs = subprocess.run([DOCKER, "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                          text=True, check=True).stdout.split()
    mine = [r for r in refs if any(f"/{ns}/" in r for ns in namespaces) or r.startswith("imgbuild.local/")]
    if mine:
        subprocess.run([DOCKER, "image", "rm", "--force", *mine], capture_output=True)
    subprocess.run([DOCKER, "builder", "prune", "--all", "--force"], capture_output=True, check=True)


def build(path: Path, home: Path) -> tuple[float, dict]:
    env = dict(os.environ, IMGBUILD_HOME=str(home))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "builder.cli", "build", "stack=bench", "-f", str(path),
                           "--progress", "plain"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=4 * 3600)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"build failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    runs = sorted((home / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    return seconds, json.loads((runs[-1] / "report.json").read_text())


def per_platform(path: Path, report: dict) -> dict:
    """{platform: [(layer, build seconds incl. its checks and push)]}, from the plan's chains."""
    sys.path.insert(0, str(ROOT))
    from builder.load.spec import load_spec
    from builder.plan.keys import make_plan
    from builder.ship.bases import resolve
    spec = load_spec(path)
    plan = make_plan(spec, ["bench"], resolve(spec, ["bench"]).require())
    nodes = {n["key"]: n for n in report["nodes"].values()}
    return {p: [(n.name, nodes[n.short]["seconds"]) for n in plan.chain("bench", p)] for p in plan.platforms("bench")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="cpu_adam", help="DeepSpeed ops prebuilt, comma-separated ('' for none)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    tag = uuid.uuid4().hex[:6]
    one_ns, both_ns = f"bench-plat-one-{tag}", f"bench-plat-both-{tag}"
    with tempfile.TemporaryDirectory(prefix="imgbuild-bench-platforms-") as tmp:
        folder = Path(tmp)
        clean_engine([one_ns, both_ns])
        one_s, _ = build(stacks(folder, one_ns, ["linux/amd64"], ops), folder / "home-one")
        clean_engine([one_ns, both_ns])
        both_path = stacks(folder, both_ns, ["linux/amd64", "linux/arm64"], ops)
        both_s, report = build(both_path, folder / "home-both")
        layers = per_platform(both_path, report)
    out = {"ops": ops, "amd64_only_seconds": round(one_s, 1), "both_seconds": round(both_s, 1),
           "extra_seconds": round(both_s - one_s, 1), "layers": layers}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    amd, arm = dict(layers["linux/amd64"]), dict(layers["linux/arm64"])
    print(f"{'layer':<18} {'amd64 native s':>15} {'arm64 emulated s':>17} {'ratio':>6}")
    for name in amd:
        ratio = arm[name] / amd[name] if amd[name] else float("nan")
        print(f"{name:<18} {amd[name]:>15.0f} {arm[name]:>17.0f} {ratio:>6.1f}")
    ta, tr = sum(amd.values()), sum(arm.values())
    print(f"{'sum':<18} {ta:>15.0f} {tr:>17.0f} {tr / ta if ta else float('nan'):>6.1f}")
    print(f"release of linux/amd64 alone: {one_s:.0f} s; of both platforms: {both_s:.0f} s; "
          f"extra: {both_s - one_s:.0f} s (DeepSpeed ops prebuilt: {', '.join(ops) or 'none'})")


if __name__ == "__main__":
    main()
