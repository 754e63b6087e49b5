"""Running a plan's nodes as a DAG on one engine, with the build of a layer overlapping the validation
and push of the layer beneath it.

A layer image is built, then validated (a container run of its checks), then pushed. Done in series
for a chain of layers, the engine's builder sits idle while each layer is checked and pushed, which
made a clean cpu-smoke 1.6x slower than plain `docker build` of the same Dockerfiles. Here a child
may start building as soon as its parent's image exists locally (the parent's work calls `built()`),
on that local image, while the parent is still being validated and pushed. Nothing reaches the
registry any earlier: the child's work waits for its parent's outcome before it publishes, and gives
up (blocked) when the parent failed. See Builder.build_node for what it does when the parent's key
ends up naming another builder's image.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, TypeVar

from builder.ship.engine import stop_builds

R = TypeVar("R")


class Handoff:
    """What one node's work tells the works of the nodes above it while it still runs."""

    def __init__(self) -> None:
        self.local: str | None = None   # this run's local image of the node, once built
        self.own = False                # the node's key names `local` (not an image adopted or reused)
        self.result = None              # its NodeResult once done; None if the run was aborted
        self.done = threading.Event()

    def finish(self, result) -> None:
        self.result = result
        self.done.set()


def schedule(keys: list[str], parent_of: Callable[[str], str | None], work: Callable[[str, Callable[[], None]], R],
             blocked: Callable[[str], R], status_of: Callable[[R], str], jobs: int = 1, early: bool = True,
             abort: Callable[[], None] = lambda: None) -> Iterator[tuple[str, R]]:
    """Run work(key, built) for every key and yield (key, result) as each finishes.

    A key starts once its parent passed or, with `early`, once its parent's work called built(). At most
    `jobs` works are building at once (started and not yet past built()); works that are validating,
    pushing or waiting for their parent's outcome do not count. Ready keys start in the given order
    (parents first), so with jobs=1 the builds run in plan order. A key whose parent failed before it
    started is yielded as blocked(key), unrun. On an interrupt, abort() releases the works that wait
    for a parent and the running build clients are stopped (engine.stop_builds) before the exception
    goes on."""
    jobs, inside, pending = max(1, jobs), set(keys), list(keys)
    status: dict[str, str] = {}        # key -> built | passed | failed | blocked
    events: queue.Queue = queue.Queue()
    building: set[str] = set()
    running: dict = {}

    def run(key: str) -> None:
        try:
            res = work(key, lambda: events.put(("built", key, None)))
        except BaseException as exc:   # a bug in work: raised again in the caller's thread
            events.put(("error", key, exc))
            return
        events.put(("done", key, res))

    with ThreadPoolExecutor(max_workers=max(1, len(keys)), thread_name_prefix="imgbuild-node") as pool:
        try:
            while pending or running:
                for key in list(pending):
                    parent = parent_of(key)
                    ready = "passed" if parent is None or parent not in inside else status.get(parent)
                    if ready is None or (ready == "built" and not early):
                        continue                      # its parent has not been built (or passed) yet
                    if ready not in ("built", "passed"):
                        pending.remove(key)
                        status[key] = "blocked"
                        yield key, blocked(key)
                    elif len(building) < jobs:
                        pending.remove(key)
                        building.add(key)
                        running[key] = pool.submit(run, key)
                if not running:
                    continue                          # only blocked keys were left: the loop ends
                kind, key, value = events.get()
                building.discard(key)
                if kind == "error":
                    raise value
                if kind == "built":
                    status.setdefault(key, "built")
                    continue
                running.pop(key)
                status[key] = status_of(value)
                yield key, value
        except BaseException:
            abort()
            stop_builds()
            for future in running.values():
                future.cancel()
            raise
