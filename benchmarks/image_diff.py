#!/usr/bin/env python3
"""Benchmark: `imgbuild diff IMAGE_A IMAGE_B` reads metadata only.

Target (from the issue): the bytes read from the registry are under 1% of the two images' total size
(compressed layers + configs: what pulling both would transfer). Also reported: the time taken, through
the Python API (first call, then min and median of --repeat calls, each with a fresh registry client)
and through the CLI in a fresh process (imports included).

By default it diffs two cpu-smoke variants, built here by the pipeline into the namespace
imgbuild-bench-diff (the project pin v1, then pin v2 plus six==1.16.0; a later run finds both keys in
the registry and builds nothing). --images A B diffs any two images instead. Needs the engine and the
registry of scripts/setup-host.sh for the default pair. Exit status is 0 unless the build or diff fails.

    .venv/bin/python benchmarks/image_diff.py [--repeat 10] [--json] [--images A B]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.diff.imagediff import diff_images  # noqa: E402
from builder.load.spec import Site  # noqa: E402

NAMESPACE = "imgbuild-bench-diff"
PIN_V1 = "d89c5dfd761db2eb8352a3c3df6659c984547929"
PIN_V2 = "1a6d04ff11a3a379285c6dc7862d82d095f0056c"
TARGET = 0.01


def build_pair(work: Path) -> tuple[str, str, Path]:
    """Build (or find) the two variants; returns their STACK@TAG references and the stacks file."""
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"]["namespace"] = NAMESPACE
    files = []
    for name, pin, packages in (("v1", PIN_V1, []), ("v2", PIN_V2, ["six==1.16.0"])):
        project = data["projects"]["smoke-train"]["params"]
        project["source"]["commit"] = pin
        project["packages"] = packages
        path = work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        files.append(path)
    for path, date in zip(files, ("2000.01.01", "2000.01.02")):
        proc = subprocess.run([sys.executable, "-m", "builder.cli", "build", "stack=cpu-smoke", "-f", str(path),
                               "--date", date], cwd=ROOT, env=dict(os.environ, IMGBUILD_HOME=str(work / "home")),
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"imgbuild build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return "cpu-smoke@cpu-smoke-2000.01.01", "cpu-smoke@cpu-smoke-2000.01.02", files[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--images", nargs=2, metavar=("A", "B"), help="Diff these two images instead.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.images:
            (a, b), stacks = args.images, ROOT / "stacks.yaml"
        else:
            a, b, stacks = build_pair(work)
        site = Site(**yaml.safe_load(stacks.read_text())["site"])
        first = diff_images(a, b, site)
        runs = [diff_images(a, b, site) for _ in range(args.repeat)]
        start = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "builder.cli", "diff", a, b, "-f", str(stacks), "--json"],
                             cwd=ROOT, capture_output=True, text=True)
        cli_s = time.perf_counter() - start
    if cli.returncode not in (0, 1):
        raise SystemExit(f"imgbuild diff failed: {cli.stderr}")
    times = [r.seconds for r in runs]
    r = {
        "a": first.a.location, "b": first.b.location,
        "images_total_bytes": first.total_size,
        "layers": [len(first.a.layers), len(first.b.layers)],
        "bytes_fetched": first.bytes_fetched,
        "bytes_fetched_max": max(x.bytes_fetched for x in runs + [first]),
        "ratio": first.bytes_fetched / first.total_size,
        "different": first.different,
        "api_first_s": round(first.seconds, 4),
        "api_min_s": round(min(times), 4),
        "api_median_s": round(statistics.median(times), 4),
        "cli_wall_s": round(cli_s, 3),
        "target_ratio": TARGET,
        "pass": max(x.bytes_fetched for x in runs + [first]) < TARGET * first.total_size,
    }
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(f"image diff, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
    print(f"  A  {r['a']}\n  B  {r['b']}")
    print(f"  images: {r['images_total_bytes']:,} B in {r['layers'][0]} + {r['layers'][1]} layers")
    print(f"  read from the registry: {r['bytes_fetched']:,} B per diff (max {r['bytes_fetched_max']:,} B over "
          f"{args.repeat + 1} runs) = {r['ratio']:.5%} of the images")
    print(f"  time (API): first {r['api_first_s']} s, min {r['api_min_s']} s, median {r['api_median_s']} s; "
          f"CLI in a fresh process {r['cli_wall_s']} s")
    print(f"target: bytes read < {TARGET:.0%} of the images' size: {'PASS' if r['pass'] else 'MISS'}")


if __name__ == "__main__":
    main()
