"""The shown log of a real build (issue 20), read as it comes, on a tiny stack (tests/tiny.py): a layer whose
RUN step compiles the tests' C extension from its sdist for ~70 s without printing a line (its backend
compiles again, silently, until BUSY seconds have passed: what DeepSpeed's op build does for minutes).
Every engine line names its layer, a silent layer is named again at least every 30 s, no RUN step's
secret-mount plumbing is shown, the layer's log in the run folder keeps the whole output, plumbing and all,
and no secret reaches a line, shown or kept.

Why not cpu-smoke's DeepSpeed layer, as before: the promise is about any long silent step, and the engine,
the pipe and the heartbeat thread are the same for any layer; rebuilding DeepSpeed's op compile cost ~3.5
minutes of a 2-core CI run. What is DeepSpeed's own, that its step is named "compiling DeepSpeed ops", is a
matter of the step's text alone: tests/test_progress.py proves it on the RUN step the shipped deepspeed kind
renders and on BuildKit's recorded output of its real compile.

The compiling RUN step must miss BuildKit's cache on every run, on an engine that has built this stack
before: its requirement carries a marker unique to this run (always true), which changes the step's
command. The index it reaches is given with a token as its password (the loopback index ignores it, pip
sends it), so the index secret is really used. Its own namespace: the release it moves is no other test's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from builder.ship.progress import describe
from e2e import INDEX_TOKEN, NEEDLES, NS, env_for, make_work
from tiny import COMPILER, c_sdist, env_for_index, index, publish, site  # noqa: F401  (the loopback index fixture)

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

LAYER = "plugin"
BUSY = 70       # seconds the C extension's build compiles in silence: more than two heartbeats' worth
PLUMBING = ("--mount=", "/run/secrets", "PIP_INDEX_URL", "PIP_CERT", "rm -rf /root/.cache/pip/wheels")
SLACK = 2.0     # seconds for a heartbeat to cross a pipe on a busy 2-core host


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


def test_a_long_compile_is_shown_under_its_layer_with_heartbeats_and_its_log_is_kept_whole(tmp_path, index):
    work = make_work(tmp_path)
    c_sdist(index["root"], name="imgbuild-tiny-slow", version="1.0", busy=BUSY)
    publish(index["root"])
    marker = f"imgbuild-progress-{uuid.uuid4().hex[:12]}"
    f = site(work, "progress", NS + "-progress", above=[f'imgbuild-tiny-slow==1.0; platform_machine != "{marker}"'],
             apt=COMPILER)
    env = {**env_for(work), **env_for_index(index),
           "IMGBUILD_PIP_INDEX_URL": index["url"].replace("http://", f"http://__token__:{INDEX_TOKEN}@", 1)}
    argv = [sys.executable, "-m", "builder.cli", "build", "stack=demo", "--progress", "plain", "-f", str(f)]
    rc, timed = _watch(argv, env, work, timeout=1200)
    shown = [line for _, line in timed]
    text = "\n".join(shown)
    (work / "shown.log").write_text(text)
    assert rc == 0, text[-4000:]

    # Every engine line shown names its layer (both layers have some); nothing of a RUN step's plumbing is shown.
    engine = [line for line in shown if re.search(r"#\d+ (\[|DONE|CACHED|ERROR)", line)]
    assert len(engine) >= 8 and all(re.match(r"^[\w.-]+ \| #\d+ ", line) for line in engine), engine
    assert {line.split(" | ")[0] for line in engine} == {"demo", LAYER}, engine
    assert not [line for line in shown if any(word in line for word in PLUMBING)]
    header = next(line for line in shown if line.startswith(f"{LAYER} | #") and " RUN " in line)
    assert header.endswith(f"RUN python -m pip install --progress-bar off "
                           f"'imgbuild-tiny-slow==1.0; platform_machine != \"{marker}\"'"), header

    # The compile really ran (not cached), and while it did the layer was never unsaid for longer than 30 s;
    # each heartbeat names the layer and the step it is at (this step has no friendlier name than its own).
    first = next(i for i, (_, line) in enumerate(timed) if line == header)
    done = next(i for i in range(first, len(timed)) if re.match(rf"^{re.escape(LAYER)} \| #\d+ DONE ", timed[i][1]))
    seconds = float(re.search(r"DONE ([0-9.]+)s", timed[done][1])[1])
    assert seconds > BUSY, timed[done][1]
    mine = [(t, line) for t, line in timed[first:done + 1] if line.startswith((f"{LAYER} | ", f"{LAYER}: "))]
    step = describe(header.split(" | ", 1)[1].split(" ", 1)[1])
    beats = [line for _, line in mine if line.startswith(f"{LAYER}: ")]
    assert beats and all(re.fullmatch(rf"{re.escape(LAYER)}: {re.escape(step)}, (\d+m)?\d+s", b) for b in beats), beats
    assert len(beats) >= max(1, int(seconds // 30) - 1), (seconds, beats)
    gaps = [b - a for (a, _), (b, _) in zip(mine, mine[1:])]
    assert max(gaps) <= 30 + SLACK, list(zip(gaps, [line for _, line in mine[1:]]))
    print(f"\nsilent compile {seconds:.0f} s: {len(beats)} heartbeats, longest silence {max(gaps):.1f} s; "
          f"build {timed[-1][0]:.0f} s")

    # The run folder keeps the layer's whole output: the plumbing and every line of pip's build of the sdist.
    run_dir = Path(re.search(r"logs in (\S+?)\)", text)[1])
    report = json.loads((run_dir / "report.json").read_text())
    node = next(n for n in report["nodes"].values() if n["layer"] == LAYER)
    assert node["action"] == "build", node
    log = Path(node["log"]).read_text()
    assert "--mount=type=secret,id=pip-index-url,target=/run/secrets/pip-index-url" in log
    assert 'PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)"' in log
    for line in ("Building wheel for imgbuild-tiny-slow (pyproject.toml)", "Successfully installed imgbuild-tiny-slow-1.0"):
        assert line in log and line not in text, line
    assert len(log.splitlines()) > 3 * len([line for line in shown if line.startswith(f"{LAYER} | ")])

    # No secret reached a line, shown or kept.
    kept = b"".join(p.read_bytes() for p in (work / "home").rglob("*") if p.is_file())
    assert not [n for n in NEEDLES if n in text.encode() or n in kept]
