"""The hostile-input suite (tests/hostile.py) with its summary line and the slowest inputs.

    .venv/bin/python benchmarks/hostile_inputs.py [--jobs 2] [--show unsafe,crash,slow,unclear]

Each input runs in its own `imgbuild` process (1 GiB address space, 5 s), so the numbers include a
Python start-up (about 0.3 s here).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import hostile  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--show", default="unsafe,crash,slow,unclear")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="imgbuild-hostile-") as tmp:
        inputs = hostile.corpus()
        hostile.baseline(Path(tmp))
        with ThreadPoolExecutor(args.jobs) as pool:
            judged = list(pool.map(lambda i: (i, *hostile.judge(i, Path(tmp))), inputs))
    show = set(args.show.split(","))
    for inp, verdict, why, secs in judged:
        if verdict in show:
            print(f"{verdict:<8} {inp.name:<40} {secs:5.2f}s  {why}")
    slowest = sorted(judged, key=lambda r: -r[3])[:5]
    print("slowest: " + ", ".join(f"{i.name} {s:.2f}s" for i, _, _, s in slowest))
    print(hostile.summary(judged))
    return 0


if __name__ == "__main__":
    sys.exit(main())
