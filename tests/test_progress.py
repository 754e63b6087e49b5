"""The shown log of a build (issue 20): engine lines under their layer's name, RUN plumbing left out, a
heartbeat for a silent layer, a live status view on a terminal. No Docker: BuildKit's output is the one
recorded in tests/data/buildkit-deepspeed-cpu.log (the ds-0.19.8-cpu layer of cpu-smoke built by the
engine's BuildKit on this project's host, docker 20.10, as test_bake's build script runs it: the same
`docker build --progress=plain` imgbuild runs; its op compile ~150 s) and time is a fake clock."""

from __future__ import annotations

import io
import re
import stat
import time
from pathlib import Path

import pytest

from builder.errors import EngineError
from builder.load.spec import load_spec
from builder.plan.keys import make_plan
from builder.ship import pipeline
from builder.ship.engine import BuildRequest, Engine
from builder.ship.hostconf import HostConf
from builder.ship.progress import Progress, Steps, clean_tail, describe, elapsed, live_view

DATA = Path(__file__).resolve().parent / "data"
RECORDED = (DATA / "buildkit-deepspeed-cpu.log").read_text().splitlines()
STACKS = Path(__file__).resolve().parent.parent / "stacks.yaml"
LAYER = "ds-0.19.8-cpu"
# What a RUN step reaching a package index shares (layers/macros.j2), as BuildKit echoes it.
PLUMBING = ("--mount=", "/run/secrets", "PIP_INDEX_URL", "PIP_CERT", "/root/.cache/pip")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plain(clock: Clock) -> tuple[Progress, list[tuple[float, str]]]:
    """A plain Progress on the fake clock, and what it said with when it said it."""
    said: list[tuple[float, str]] = []
    return Progress(lambda line: said.append((clock.now, line)), clock=clock), said


def replay(lines: list[str], feed, clock: Clock, view: Progress) -> None:
    """Feed recorded BuildKit lines at the times they were printed (a step's output and its DONE carry
    the seconds since the step started), ticking whenever the heartbeat thread would (next_tick)."""
    started: dict[str, float] = {}
    for raw in lines:
        vertex = (re.match(r"^#(\d+) ", raw) or [None, None])[1]
        timed = re.match(r"^#\d+ (?:DONE )?([0-9]+\.[0-9]+)s?(?: |$)", raw)
        if timed and vertex in started:
            target = started[vertex] + float(timed[1])
            while clock.now + view.next_tick() <= target:
                clock.now += view.next_tick()
                view.tick()
            clock.now = max(clock.now, target)
        if vertex:
            started.setdefault(vertex, clock.now)
        feed(raw)


def test_every_engine_line_shown_names_its_layer_and_only_the_steps_are_shown():
    clock = Clock()
    view, said = plain(clock)
    with view.task(LAYER, "starting the build") as lines:
        for raw in RECORDED:
            lines(raw)
    shown = [line for _, line in said]
    assert shown and all(line.startswith(f"{LAYER} | #") for line in shown), shown
    assert shown == [
        f"{LAYER} | #4 [1/2] FROM 127.0.0.1:5000/bake-test-3b421025/layers/cpu-torch-2.13:"
        "5edcbc900596c2beb26f9c5dca624e88",
        f"{LAYER} | #4 DONE 0.0s",
        f"{LAYER} | #5 [2/2] RUN export DS_BUILD_CPU_ADAM=1; export DS_BUILD_SHM_COMM=1; python -m pip install "
        "--progress-bar off --no-build-isolation deepspeed==0.19.8",
        f"{LAYER} | #5 DONE 157.5s",
        f"{LAYER} | #6 exporting to image",
        f"{LAYER} | #6 DONE 0.7s",
    ]


def test_the_secret_mount_plumbing_is_left_out_of_every_line_shown():
    header = next(line for line in RECORDED if line.startswith("#5 [stage-0 2/2] RUN"))
    assert all(word in header for word in PLUMBING)          # what BuildKit echoes
    shown, step = Steps().read(header)
    assert not any(word in shown for word in PLUMBING), shown
    assert shown.endswith("python -m pip install --progress-bar off --no-build-isolation deepspeed==0.19.8")
    assert step == "compiling DeepSpeed ops"
    # BuildKit's error line repeats the command the shell ran.
    error = "#5 ERROR: executor failed running [/bin/bash -o pipefail -c " + header.split(" RUN ", 1)[1] + "]: exit code: 1"
    steps = Steps()
    steps.read(header)
    shown, _ = steps.read(error)
    assert shown.startswith("#5 ERROR: executor failed running [/bin/bash -o pipefail -c export DS_BUILD_CPU_ADAM=1;")
    assert not any(word in shown for word in PLUMBING), shown


def _runs(dockerfile: str) -> list[str]:
    """Each RUN instruction as BuildKit names its step: continuation lines joined, their indent kept."""
    return [m.replace("\\\n", "") for m in re.findall(r"^RUN (?:.*\\\n)*.*$", dockerfile, re.M)]


def test_no_rendered_run_step_of_any_shipped_stack_shows_its_plumbing():
    spec = load_spec(STACKS)
    plan = make_plan(spec)
    runs = [run for node in plan.nodes.values() for run in _runs(node.dockerfile)]
    with_secrets = [run for run in runs if "--mount=type=secret" in run]
    assert len(with_secrets) >= 5, len(with_secrets)
    for run in runs:
        shown, _ = Steps().read(f"#7 [stage-0 3/4] {run}")
        assert not any(word in shown for word in PLUMBING), shown
        # What the step does is all still there: its last command, word for word (blanks aside).
        last = re.sub(r"\s+", " ", run.rsplit(";", 1)[-1]).strip()
        assert last in shown, (last, shown)


def test_the_op_compile_the_deepspeed_kind_renders_is_named_compiling_deepspeed_ops_in_its_heartbeats():
    """The name a heartbeat gives DeepSpeed's op build comes from the step's text alone: here the RUN step the
    shipped deepspeed kind renders today for every shipped DeepSpeed layer (cpu-smoke's CPU ops, the CUDA
    stacks' ones), not a recorded one, so a change of the fragment that loses the name is caught without an
    engine (the engine test of heartbeats, test_docker_progress, runs a tiny stack's silent compile). No other
    shipped step is given that name."""
    spec = load_spec(STACKS)
    plan = make_plan(spec)
    ds = {node.name: node for node in plan.nodes.values() if node.layer.kind.folder.name == "deepspeed"}
    assert {"ds-0.19.8-cpu", "ds-0.19.5-hopper", "ds-0.17.6-ampere"} <= set(ds), sorted(ds)
    for name, node in ds.items():
        compiles = [run for run in _runs(node.dockerfile) if "DS_BUILD_" in run]   # from its version or its lock
        assert len(compiles) == 1 and describe(f"[stage-0 2/2] {compiles[0]}") == "compiling DeepSpeed ops", compiles
        # As the engine shows it: a silent step after its header line, heartbeats every 30 s that name it.
        clock = Clock()
        view, said = plain(clock)
        with view.task(name, "starting the build") as lines:
            lines(f"#5 [stage-0 2/2] {compiles[0]}")
            for _ in range(3):
                clock.now += view.next_tick()
                view.tick()
        assert [line for _, line in said if not line.startswith(f"{name} | ")] == [
            f"{name}: compiling DeepSpeed ops, {e}" for e in ("30s", "1m00s", "1m30s")], said
    others = [run for node in plan.nodes.values() if node.name not in ds for run in _runs(node.dockerfile)]
    assert others and not [run for run in others if describe(run) == "compiling DeepSpeed ops"]


def test_a_silent_step_is_named_every_30s_with_the_layer_what_it_does_and_for_how_long():
    clock = Clock()
    view, said = plain(clock)
    with view.task(LAYER, "starting the build") as lines:
        replay(RECORDED, lines, clock, view)
    beats = [line for _, line in said if line.startswith(f"{LAYER}: ")]
    assert beats == [f"{LAYER}: compiling DeepSpeed ops, {e}" for e in ("30s", "1m00s", "1m30s", "2m00s", "2m30s")]
    # Each 30 s after the line before it (float rounding aside): the layer is never unsaid for longer.
    times = [t for t, _ in said]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) == pytest.approx(30) and sum(1 for g in gaps if g == pytest.approx(30)) == 5, gaps


def test_a_shown_line_restarts_the_silence_and_each_layer_has_its_own():
    clock = Clock()
    view, said = plain(clock)
    with view.task("b", "running checks"):
        with view.task("a", "starting the build") as a:
            clock.now += 10
            a("#1 [1/1] RUN make")
            clock.now += 19
            view.tick()
            assert [line for _, line in said] == ["a | #1 [1/1] RUN make"]
            clock.now += 1
            view.tick()
            assert said[-1][1] == "b: running checks, 30s"
            clock.now += 20
            a("#1 12.5 some output nobody is shown")     # output is not shown: the silence goes on
            clock.now += 9
            view.tick()
            # 30 s after its last line shown; named with the time since its step started
            assert [line for _, line in said[-2:]] == ["b: running checks, 30s", "a: [1/1] RUN make, 49s"]
            clock.now += 1
            a("#1 DONE 50.0s")
            clock.now += 29
            view.tick()
            assert said[-1][1] == "b: running checks, 1m29s"    # a showed a line 29 s ago: not named
            assert said[-2][1] == "a | #1 DONE 50.0s"
        clock.now += 100
        view.tick()                                      # a ended: only b is named
        assert said[-1][1] == "b: running checks, 3m09s" and said[-2][1] == "b: running checks, 1m29s"


def test_the_heartbeat_thread_names_a_silent_layer_without_being_asked():
    said: list[str] = []
    view = Progress(said.append, every=0.05)
    with view, view.task(LAYER, "compiling DeepSpeed ops"):
        deadline = time.monotonic() + 5
        while len(said) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert said[:2] and all(line.startswith(f"{LAYER}: compiling DeepSpeed ops, ") for line in said[:2]), said


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (59.9, "59s"), (60, "1m00s"), (130, "2m10s"),
                                           (3599, "59m59s"), (3600, "1h00m"), (7380, "2h03m")])
def test_elapsed(seconds, text):
    assert elapsed(seconds) == text


@pytest.mark.parametrize("name, text", [
    ("[stage-0 2/2] RUN export DS_BUILD_CPU_ADAM=1; python -m pip install deepspeed==0.19.8", "compiling DeepSpeed ops"),
    ("[stage-0 4/4] RUN export FLASH_ATTN_CUDA_ARCHS=90 FLASH_ATTENTION_FORCE_BUILD=TRUE; pip install flash-attn==2.8.3",
     "compiling flash-attn"),
    ("[3/3] RUN cd /opt/imgbuild/sources/apex  && APEX_CPP_EXT=1 APEX_CUDA_EXT=1 MAX_JOBS=4 python -m pip install .",
     "compiling apex"),
    ("[2/3] RUN python -m pip install --no-build-isolation 'transformer_engine[pytorch]==2.8.0'",
     "building Transformer Engine"),
    ("[2/3] COPY sources/transformer-engine /opt/imgbuild/sources/transformer-engine",
     "[2/3] COPY sources/transformer-engine /opt/imgbuild/sources…"),
    ("exporting to image", "exporting the image"),
    ("[stage-0 3/5] RUN python3 -m venv /opt/venv", "[3/5] RUN python3 -m venv /opt/venv"),
])
def test_a_step_is_described_by_what_it_does(name, text):
    assert describe(name) == text


def test_a_failed_builds_tail_leaves_out_the_plumbing_of_a_dockerfile_excerpt():
    tail = ["#5 ERROR: executor failed running [/bin/bash -o pipefail -c rm -rf /root/.cache/pip/wheels;     "
            "if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi;     false]: exit code: 1",
            "Dockerfile:8",
            "   7 |     # Ops compiled now",
            "   8 | >>> RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \\",
            "   9 | >>>     --mount=type=secret,id=netrc,target=/root/.netrc \\",
            "  10 | >>>     rm -rf /root/.cache/pip/wheels; \\",
            "  11 | >>>     false",
            "ERROR: failed to solve: process did not complete successfully: exit code: 1"]
    assert clean_tail(tail) == [
        "#5 ERROR: executor failed running [/bin/bash -o pipefail -c false]: exit code: 1",
        "Dockerfile:8",
        "   7 |     # Ops compiled now",
        "   8 | >>> RUN \\",
        "  11 | >>>     false",
        "ERROR: failed to solve: process did not complete successfully: exit code: 1"]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("choice, tty, env, live", [
    ("auto", True, {}, True), ("auto", False, {}, False), ("auto", True, {"CI": "true"}, False),
    ("auto", True, {"TERM": "dumb"}, False), ("plain", True, {}, False), ("tty", False, {"CI": "1"}, True)])
def test_the_live_view_is_for_a_terminal_outside_ci_unless_asked(choice, tty, env, live):
    assert live_view(choice, Tty() if tty else io.StringIO(), env) is live


def test_on_a_terminal_each_layer_at_work_has_a_status_line_redrawn_below_the_printed_lines():
    clock, screen = Clock(), Tty()
    view = Progress(lambda line: screen.write(line + "\n"), live=True, out=screen, clock=clock)
    with view.task(LAYER, "starting the build") as lines:
        lines("#5 [stage-0 2/2] RUN --mount=type=secret,id=netrc,target=/root/.netrc export DS_BUILD_CPU_ADAM=1; pip "
              "install deepspeed==0.19.8")
        with view.task("cpu-torch-2.13", "pushing"):
            clock.now += 130
            view.tick()
            assert screen.getvalue().endswith(f"\x1b[2A\x1b[J  {LAYER}  compiling DeepSpeed ops  2m10s\n"
                                              "  cpu-torch-2.13  pushing  2m10s\n")
            view.say("[1/4] cpu-torch-2.13 5edcbc900596: pushed")
            # The line goes above the status lines, which are drawn again beneath it.
            assert screen.getvalue().endswith("\x1b[2A\x1b[J[1/4] cpu-torch-2.13 5edcbc900596: pushed\n"
                                              f"  {LAYER}  compiling DeepSpeed ops  2m10s\n"
                                              "  cpu-torch-2.13  pushing  2m10s\n")
        assert screen.getvalue().endswith(f"\x1b[2A\x1b[J  {LAYER}  compiling DeepSpeed ops  2m10s\n")
        clock.now += 60
        view.tick()
        assert screen.getvalue().endswith(f"\x1b[1A\x1b[J  {LAYER}  compiling DeepSpeed ops  3m10s\n")
        assert ": compiling" not in screen.getvalue()     # no heartbeat lines: the status line is one
    assert screen.getvalue().endswith("\x1b[1A\x1b[J")     # the last status line erased when it ended


def test_a_status_line_is_inert_and_fits_the_terminal():
    # The width is handed in, not patched into shutil: pytest's own terminal writer calls
    # shutil.get_terminal_size too, and a patched one broke the whole run (CI, stop 26).
    clock, screen = Clock(), Tty()
    view = Progress(lambda line: screen.write(line + "\n"), live=True, out=screen, clock=clock,
                    columns=lambda: 40)
    with view.task(LAYER, "x") as lines:
        lines("#3 [1/1] RUN echo '\x1b]0;pwned\x07' " + "y" * 80)
        status = screen.getvalue().splitlines()[-1]
    assert "\x1b]" not in status and "\x07" not in status and len(status) <= 39, repr(status)


def test_the_pipeline_shows_a_builds_engine_lines_under_its_layer(tmp_path, monkeypatch):
    monkeypatch.setenv("IMGBUILD_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(pipeline, "assemble_context", lambda node, conf, dest: dest)
    spec = load_spec(STACKS)
    plan = make_plan(spec, ["cpu-smoke"], {"debian-bookworm": "sha256:" + "ab" * 32})
    node = next(n for n in plan.nodes.values() if n.name == LAYER)

    class Recorded:
        """An engine whose build prints what the real one printed for this layer."""
        mode = "builtin"

        def build(self, req, log, progress):
            for line in RECORDED:
                progress(line)

    said: list[str] = []
    builder = pipeline.Builder(spec, Recorded(), None, HostConf(None, None, None, None), said.append, gpu=False)
    builder.build_image(plan, node, "127.0.0.1:5000/x@sha256:" + "cd" * 32, {}, "[2/4] ds-0.19.8-cpu")
    assert f"{LAYER} | #5 DONE 157.5s" in said
    assert [line for line in said if "#" in line] == [line for line in said if line.startswith(f"{LAYER} | #")]
    builder.twins = {LAYER}            # another node of the plan is a ds-0.19.8-cpu too (on another parent)
    assert builder.label(node) == f"{LAYER}@{node.short[:8]}"


def _fake_docker(tmp_path: Path, output: Path, rc: int) -> str:
    """A docker CLI that prints a build's recorded output and exits with rc."""
    cli = tmp_path / "docker"
    cli.write_text(f"#!/bin/sh\ncat '{output}'\nexit {rc}\n")
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    return str(cli)


def _request(tmp_path: Path) -> BuildRequest:
    return BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tag="t:1", build_args={}, labels={},
                        secrets={"netrc": "/dev/null"})


def test_the_engine_hands_over_every_line_and_keeps_all_of_them_in_the_layers_log(tmp_path):
    engine = Engine(cli=_fake_docker(tmp_path, DATA / "buildkit-deepspeed-cpu.log", 0), mode="builtin")
    got: list[str] = []
    log = tmp_path / "run" / "logs" / f"{LAYER}.log"
    engine.build(_request(tmp_path), log, progress=got.append)
    assert got == RECORDED
    kept = log.read_text().splitlines()
    assert kept[1:] == RECORDED and kept[0].startswith("$ ")   # the full, unfiltered output, plumbing and all
    assert any("--mount=type=secret" in line for line in kept)


def test_a_failed_builds_error_shows_its_tail_without_the_plumbing(tmp_path):
    # How the engine's BuildKit ends a RUN step that failed: the step's name and the shell's command again.
    header = next(line for line in RECORDED if line.startswith("#5 [stage-0 2/2] RUN"))
    command = "/bin/bash -o pipefail -c " + header.split(" RUN ", 1)[1]
    output = tmp_path / "failed.log"
    output.write_text("\n".join(RECORDED[:RECORDED.index(header) + 3] + [
        "#5 0.612 ERROR: No matching distribution found for deepspeed==0.19.8",
        f"#5 ERROR: executor failed running [{command}]: exit code: 1", "------",
        f" > {header.split(' ', 1)[1]}:", "#5 0.612 ERROR: No matching distribution found for deepspeed==0.19.8",
        "------", f"executor failed running [{command}]: exit code: 1"]) + "\n")
    engine = Engine(cli=_fake_docker(tmp_path, output, 1), mode="builtin")
    log = tmp_path / "build.log"
    with pytest.raises(EngineError) as failed:
        engine.build(_request(tmp_path), log)
    message = failed.value.message
    assert "No matching distribution found for deepspeed==0.19.8" in message
    assert re.search(r" > \[stage-0 2/2\] RUN export DS_BUILD_CPU_ADAM=1;\s+export DS_BUILD_SHM_COMM=1;\s+python -m pip"
                     r" install --progress-bar off --no-build-isolation deepspeed==0.19.8:", message), message
    assert not any(word in message for word in PLUMBING), message
    assert failed.value.hint == f"full log: {log}" and "--mount=type=secret" in log.read_text()


def test_build_offers_the_progress_choice(cli):
    assert "--progress auto|plain|tty" in cli("build", "--help").out
    bad = cli("build", "--progress", "fancy", "stack=cpu-smoke", "-f", str(STACKS))
    assert bad.code == 2 and "fancy" in bad.output
