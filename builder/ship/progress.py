"""What a person sees of the builds while they run.

Every engine line shown carries its layer's name (`ds-0.19.8-cpu | #5 DONE 157.5s`): with --jobs, and
with a layer built while the one beneath it is checked and pushed, the lines of several layers interleave.
Of BuildKit's output only the steps are shown (each step's name, and how it ended); the output of the
commands goes to the layer's log in the run folder alone (engine.Engine.build writes it all there), and
the plumbing that RUN steps reaching a package index share (secret and cache mounts, the secrets turned
into pip's settings) is left out of the step names shown, where it took more room than the command.

A layer that shows nothing for 30 s is named again with what it does and for how long
(`ds-0.19.8-cpu: compiling DeepSpeed ops, 2m10s`): a DeepSpeed op build prints nothing for minutes, and
a person (or a CI job's idle timeout) cannot tell it from a hang. On a terminal (outside CI) the same
news is a status line per layer at work, redrawn in place below the lines printed so far.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, TextIO

from builder.redact import redact
from builder.textsafe import inert

HEARTBEAT = 30.0      # seconds a layer may show nothing before what it does is named again

# BuildKit's plain progress: a step (a vertex, #N) first prints its name ("#5 [stage-0 2/2] RUN ..."), then
# status lines ("#5 sha256:...", "#6 exporting layers done") and its command's output after the seconds
# since it started ("#5 0.562 Looking in indexes: ..."), and ends with one of these lines.
_VERTEX = re.compile(r"^#(\d+) (.*)$")
_END = re.compile(r"^(?:DONE [0-9.]+s|CACHED|CANCELED|ERROR\b.*)$")
# The plumbing of a RUN step that reaches a package index (layers/macros.j2: net() and net_env()): its
# mounts, pip's wheel cache emptied, each secret turned into pip's setting. BuildKit repeats it in the
# step's name and in an error; it says nothing of what the step does.
_BOILERPLATE = re.compile(r"--mount=\S+\s*|rm -rf /root/\.cache/pip/wheels;\s*"
                          r"|if \[ -s /run/secrets/[\w.-]+ \]; then .*?; fi;\s*")
# A Dockerfile excerpt in a newer BuildKit's error ("  9 | >>>     --mount=... \"): the line is nothing
# but its gutter once the boilerplate is gone.
_GUTTER_ONLY = re.compile(r"^\s*(?:\d+\s*\|\s*(?:>>>)?)?[\s\\]*$")
# Long steps, named by what they do (searched in the step's cleaned name); any other step is named by
# its name, shortened.
FRIENDLY = (
    (re.compile(r"\bDS_BUILD_[A-Z0-9_]+=1\b"), "compiling DeepSpeed ops"),
    (re.compile(r"\bFLASH_ATTENTION_FORCE_BUILD=TRUE\b"), "compiling flash-attn"),
    (re.compile(r"\bAPEX_(?:CPP|CUDA)_EXT=1\b"), "compiling apex"),
    (re.compile(r"\bpip install\b.*\btransformer[-_]engine\b"), "building Transformer Engine"),
    (re.compile(r"^exporting to image$"), "exporting the image"),
)
WIDE = 60             # the longest step description, in characters


def clean(line: str) -> str:
    """A step's line as shown: the RUN plumbing left out, BuildKit's one stage not named ("[stage-0 2/2]"
    is "[2/2]"), runs of blanks as one (BuildKit joins a multi-line RUN with its indents)."""
    return re.sub(r"\s{2,}", " ", _BOILERPLATE.sub("", line.replace("[stage-0 ", "["))).rstrip()


def clean_tail(lines: list[str]) -> list[str]:
    """The last lines of a failed build's log, as an error message shows them: the RUN plumbing left out
    (blanks kept: a command's output may be a table), and the lines that held nothing else dropped."""
    out = []
    for line in lines:
        shown = _BOILERPLATE.sub("", line)
        if shown != line and _GUTTER_ONLY.match(shown):
            continue
        out.append(shown)
    return out


def describe(name: str) -> str:
    """What a step does, from its name: a friendly name for a known long step, else its name shortened."""
    text = clean(name)
    for pattern, friendly in FRIENDLY:
        if pattern.search(text):
            return friendly
    return text if len(text) <= WIDE else text[:WIDE - 1] + "…"


def elapsed(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def live_view(choice: str, out: TextIO, env: Mapping[str, str]) -> bool:
    """Whether the status lines are drawn in place: asked for (tty), or (auto) on a terminal outside CI.
    A CI log is a file: lines redrawn there are noise, so it gets plain lines and heartbeats."""
    if choice == "auto":
        return out.isatty() and not env.get("CI") and env.get("TERM") != "dumb"
    return choice == "tty"


class Steps:
    """Reads the plain BuildKit output of one build, line by line: what is shown of each line, and the
    step that starts on it."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._internal: set[str] = set()   # BuildKit's own bookkeeping ([internal] load ...): not shown

    def read(self, raw: str) -> tuple[str | None, str | None]:
        """(the line as shown, or None; the description of the step that starts here, or None)."""
        match = _VERTEX.match(raw.rstrip("\n"))
        if not match:
            return None, None             # a command's output that is not on a #N line (apt's progress)
        vertex, rest = match.groups()
        if vertex not in self._seen:      # the first line of a step is its name
            self._seen.add(vertex)
            if rest.startswith("[internal]"):
                self._internal.add(vertex)
                return None, describe(rest)
            return f"#{vertex} {clean(rest)}", describe(rest)
        if _END.match(rest) and (vertex not in self._internal or rest.startswith("ERROR")):
            return f"#{vertex} {clean(rest)}", None
        return None, None


@dataclass
class _Task:
    label: str
    what: str          # the step it is at, as described
    since: float       # when that step started
    quiet: float       # when a line of this layer was last shown (or its last heartbeat)


class Progress:
    """The shown log of a run: lines said by the pipeline and the engine lines of each layer at work, a
    heartbeat per silent layer, and on a terminal (live) the status lines below them. Thread-safe: the
    layers' builds, checks and pushes run in worker threads. The heartbeats come from a thread of its
    own while the object is entered (`with progress:`); tick() is that thread's work, and tests call it
    with a clock of their own."""

    def __init__(self, say: Callable[[str], None], *, live: bool = False, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, every: float = HEARTBEAT,
                 columns: Callable[[], int] = lambda: shutil.get_terminal_size().columns) -> None:
        self._say, self.live, self.clock, self.every = say, live, clock, every
        self._columns = columns           # asked at each redraw: a terminal can be resized mid-build
        self._out = out if out is not None else sys.stdout
        self._lock = threading.RLock()
        self._tasks: list[_Task] = []
        self._drawn = 0                   # status lines on the screen below the printed ones
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, text: str) -> None:
        """Print a line (above the status lines on a terminal)."""
        with self._lock:
            self._print(text)

    @contextmanager
    def task(self, label: str, what: str) -> Iterator[Callable[[str], None]]:
        """A layer at work (`what` it does) until the block ends. Yields the function that takes the
        engine's output of its build, one line at a time."""
        now = self.clock()
        task, steps = _Task(label, what, now, now), Steps()

        def line(raw: str) -> None:
            shown, step = steps.read(raw)
            with self._lock:
                at = self.clock()
                if step:
                    task.what, task.since = step, at
                if shown:
                    task.quiet = at
                    self._print(f"{label} | {shown}")

        with self._lock:
            self._tasks.append(task)
            self._redraw()
        try:
            yield line
        finally:
            with self._lock:
                self._tasks.remove(task)
                self._redraw()

    def tick(self) -> None:
        """Name each layer that has shown nothing for `every` seconds (again every `every` seconds while
        it stays silent); on a terminal, redraw the status lines instead (their clocks move)."""
        with self._lock:
            if self.live:
                self._redraw()
                return
            now = self.clock()
            for task in self._tasks:
                if now - task.quiet >= self.every:
                    task.quiet = now
                    self._say(f"{task.label}: {task.what}, {elapsed(now - task.since)}")

    def __enter__(self) -> "Progress":
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="imgbuild-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._erase()

    def _beat(self) -> None:
        while not self._stop.wait(self.next_tick()):
            self.tick()

    def next_tick(self) -> float:
        """Seconds until the next heartbeat is due (a layer started meanwhile is due `every` seconds after
        its start, never sooner); on a terminal, the status lines' clocks move every second."""
        if self.live:
            return 1.0
        with self._lock:
            now = self.clock()
            due = min((task.quiet + self.every for task in self._tasks), default=now + self.every)
        return min(self.every, max(0.01, due - now))

    # -- the terminal: status lines kept below what is printed ------------------------------------
    # Drawn here rather than with rich's Live, which would take over sys.stdout: every printed line still
    # goes through `say` (the CLI's echo: redacted, inert), and the screen is only touched under the lock.

    def _print(self, text: str) -> None:
        self._erase()
        self._say(text)
        self._draw()

    def _redraw(self) -> None:
        if self.live:
            self._erase()
            self._draw()

    def _erase(self) -> None:
        if self._drawn:
            self._out.write(f"\x1b[{self._drawn}A\x1b[J")   # up to the first status line; clear below
            self._out.flush()
            self._drawn = 0

    def _draw(self) -> None:
        if not (self.live and self._tasks):
            return
        now, width = self.clock(), self._columns()
        # One screen line each (cut to the width: a wrapped line would throw the count of lines to erase
        # off); inert: a step's name is text from the Dockerfile and the engine.
        lines = [inert(redact(f"  {t.label}  {t.what}  {elapsed(now - t.since)}"))[:max(10, width - 1)]
                 for t in self._tasks]
        self._out.write("\n".join(lines) + "\n")
        self._out.flush()
        self._drawn = len(lines)


def env_progress(choice: str, say: Callable[[str], None], out: TextIO | None = None) -> Progress:
    """The shown log for `--progress CHOICE`, whose lines `say` writes on `out` (stdout if not given)."""
    out = out if out is not None else sys.stdout
    return Progress(say, live=live_view(choice, out, os.environ), out=out)


__all__ = ["Progress", "Steps", "clean", "clean_tail", "describe", "elapsed", "live_view", "env_progress",
           "HEARTBEAT"]
