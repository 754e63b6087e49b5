"""A tiny stack with a chain of nodes (tests/tiny.py's family), for the docker tests of node jobs, releases,
races and engines: what they prove is about keys, parents, the registry and tags, never about torch.

Stack `demo` (and `demo-b` with `second`): the mirrored Debian base, then four nodes, bottom to top:
  demo  the tests' `tiny-env` layer with no packages (python3 and a venv from Debian: no package index);
  sys   a shipped `system-setup` layer (env X=1), the same in every variant;
  knob  a `system-setup` layer whose env TINY_KNOB is the variant's value (what a test changes);
  rt    a shipped `runtime-env` layer (env TINY_RT=1): the new top whenever `knob` changes.
So a changed `knob` is a changed node with a child (two nodes to build above two to reuse), as a changed
runtime with the project above it is in cpu-smoke, and each build takes seconds instead of minutes.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from e2e import REGISTRY, imgbuild, key_states
from builder.ship.registry import Registry
from tiny import site


def chain(work: Path, name: str, namespace: str, knob: str = "0", tags: list | None = None,
          second: str | None = None, second_tags: list | None = None) -> str:
    """The stacks.yaml (work/name/stacks.yaml) of stack `demo` with TINY_KNOB=knob and these tags; with
    `second`, also stack `demo-b`: the same chain but its own knob layer `knob-b` (TINY_KNOB=second)."""
    path = site(work, name, namespace, packages=[], tags=tags or ["{stack}"])
    data = yaml.safe_load(path.read_text())
    data["layers"]["sys"] = {"kind": "system-setup", "params": {"env": {"X": "1"}}}
    data["layers"]["knob"] = {"kind": "system-setup", "params": {"env": {"TINY_KNOB": knob}}}
    data["runtimes"] = {"rt": {"kind": "runtime-env", "params": {"env": {"TINY_RT": "1"}}}}
    stack = data["stacks"]["demo"]
    stack["layers"] = ["demo", "sys", "knob"]
    stack["runtime"] = "rt"
    if second is not None:
        data["layers"]["knob-b"] = {"kind": "system-setup", "params": {"env": {"TINY_KNOB": second}}}
        data["stacks"]["demo-b"] = {**stack, "layers": ["demo", "sys", "knob-b"],
                                    "tags": list(second_tags or stack["tags"])}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def seed(work: Path, namespace: str) -> dict:
    """The tiny chain (TINY_KNOB=0) built in full and released as `demo` in the namespace: what the
    tests of a file reuse beneath their changed nodes, as the cpu-smoke tests reused the session's `first`."""
    f = chain(work, f"{namespace}-seed", namespace)
    proc = imgbuild(work, "build", "stack=demo", "-f", f, "--date", "2026.11.29")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {"stacks": f, "proc": proc}


def release(namespace: str, tag: str, stack: str = "demo") -> str | None:
    """The digest the release tag names in the namespace, or None."""
    return Registry(REGISTRY).manifest_digest(f"{namespace}/{stack}", tag)


def assert_one_consistent_state(stacks: str, stack: str, namespace: str, tag: str) -> None:
    """e2e.assert_one_consistent_state in a namespace of the test's own: every key of the stack names one
    image with its passing proof, and the release tag names the top key's image."""
    states = key_states(stacks, stack)
    assert {state for state, _ in states.values()} == {"complete"}, states
    assert release(namespace, tag, stack) == list(states.values())[-1][1]
