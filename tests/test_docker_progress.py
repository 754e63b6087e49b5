"""The shown log of a real build (issue 20), read as it comes: cpu-smoke with its DeepSpeed layer really
built, the op compile (minutes on 2 cores) included. Every engine line names its layer, a silent layer is
named again at least every 30 s, no RUN step's secret-mount plumbing is shown, and the layer's log in the
run folder keeps the whole output, plumbing and all.

The DeepSpeed layer's RUN step must miss BuildKit's cache on every run, on an engine that has built
cpu-smoke before: an extra requirement with a marker unique to this run (always true, and hjson is one
of DeepSpeed's own dependencies) changes the step's command. A fixed value would be cached after the
first run; the runtime's env (OMP_NUM_THREADS, which other docker tests vary) lies above DeepSpeed and
would rebuild only the layers above it. Its own namespace: the release it moves is no other test's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from e2e import NEEDLES, NS, env_for, make_work, stacks_file

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

LAYER = "ds-0.19.8-cpu"
PLUMBING = ("--mount=", "/run/secrets", "PIP_INDEX_URL", "PIP_CERT", "rm -rf /root/.cache/pip/wheels")
SLACK = 2.0     # seconds for a heartbeat to cross a pipe on a busy 2-core host


def _busted(data: dict) -> None:
    data["site"]["namespace"] = f"{NS}-progress"
    marker = f"imgbuild-progress-{uuid.uuid4().hex[:12]}"
    data["layers"][LAYER]["params"]["packages"] = [f'hjson==3.1.0; platform_machine != "{marker}"']


def _watch(argv: list[str], env: dict, cwd: Path, timeout: float) -> tuple[int, list[tuple[float, str]]]:
    """Run the CLI; each line of its output with the second it arrived."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    start = time.monotonic()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic() - start, line.rstrip("\n")))
            assert time.monotonic() - start < timeout, "the build took too long"
        return proc.wait(timeout=60), lines
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_long_compile_is_shown_under_its_layer_with_heartbeats_and_its_log_is_kept_whole(tmp_path):
    work = make_work(tmp_path)
    argv = [sys.executable, "-m", "builder.cli", "build", "stack=cpu-smoke", "--progress", "plain",
            "-f", str(stacks_file(work, "progress", _busted))]
    rc, timed = _watch(argv, env_for(work), work, timeout=2400)
    shown = [line for _, line in timed]
    text = "\n".join(shown)
    (work / "shown.log").write_text(text)
    assert rc == 0, text[-4000:]

    # Every engine line shown names its layer; nothing of a RUN step's plumbing is among them.
    engine = [line for line in shown if re.search(r"#\d+ (\[|DONE|CACHED|ERROR)", line)]
    assert len(engine) >= 12 and all(re.match(r"^[\w.-]+ \| #\d+ ", line) for line in engine), engine
    assert not [line for line in shown if any(word in line for word in PLUMBING)]
    header = next(line for line in shown if line.startswith(f"{LAYER} | #") and " RUN " in line)
    assert ("RUN export DS_BUILD_CPU_ADAM=1; export DS_BUILD_SHM_COMM=1; python -m pip install --progress-bar off "
            "--no-build-isolation deepspeed==0.19.8 'hjson==3.1.0; platform_machine != ") in header, header

    # The compile really ran (not cached), and while it did the layer was never unsaid for longer than 30 s.
    first = next(i for i, (_, line) in enumerate(timed) if line == header)
    done = next(i for i in range(first, len(timed)) if re.match(rf"^{re.escape(LAYER)} \| #\d+ DONE ", timed[i][1]))
    seconds = float(re.search(r"DONE ([0-9.]+)s", timed[done][1])[1])
    assert seconds > 30, timed[done][1]
    mine = [(t, line) for t, line in timed[first:done + 1] if line.startswith((f"{LAYER} | ", f"{LAYER}: "))]
    beats = [line for _, line in mine if line.startswith(f"{LAYER}: compiling DeepSpeed ops, ")]
    assert len(beats) >= max(1, int(seconds // 30) - 1), (seconds, beats)
    gaps = [b - a for (a, _), (b, _) in zip(mine, mine[1:])]
    assert max(gaps) <= 30 + SLACK, list(zip(gaps, [line for _, line in mine[1:]]))
    print(f"\nDeepSpeed step {seconds:.0f} s: {len(beats)} heartbeats, longest silence {max(gaps):.1f} s; "
          f"build {timed[-1][0]:.0f} s")

    # The run folder keeps the layer's whole output: the plumbing and every line of the compile.
    run_dir = Path(re.search(r"logs in (\S+?)\)", text)[1])
    report = json.loads((run_dir / "report.json").read_text())
    ds = next(n for n in report["nodes"].values() if n["layer"] == LAYER)
    log = Path(ds["log"]).read_text()
    assert "--mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url" in log
    assert 'PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"' in log
    assert "Building wheel for deepspeed (setup.py)" in log and "Building wheel" not in text
    assert len(log.splitlines()) > 3 * len([line for line in shown if line.startswith(f"{LAYER} | ")])

    # No secret reached a line, shown or kept.
    kept = b"".join(p.read_bytes() for p in (work / "home").rglob("*") if p.is_file())
    assert not [n for n in NEEDLES if n in text.encode() or n in kept]
