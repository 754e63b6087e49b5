"""Two engines sharing one registry (issue 12): the smallest honest model of many CI runners. Engine B
is a second dockerd on this machine with its own data root, exec root, pid file, socket and bridge
(scripts/second-engine.sh), so nothing engine A holds locally (images, BuildKit cache) helps it: all
it can share with A is what the registry holds.

- a layer image built through A is reused by B without a rebuild, and B builds only what is new on
  top of it (pulling A's image as its parent);
- the same changed stack built through A and B at once ends in one consistent registry state.
"""

from __future__ import annotations

import json

import pytest

from e2e import ROOT, assert_one_consistent_state, at_once, imgbuild, release, reports, stacks_file

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


def by_key(report: dict) -> dict:
    """A run report's nodes by their short key (the keys `plan --json` lists)."""
    return {n["key"]: n for n in report["nodes"].values()}


def _runtime(value: str, tag: str):
    def mutate(data):
        data["runtimes"]["cpu-env"]["params"]["env"]["OMP_NUM_THREADS"] = value
        data["stacks"]["cpu-smoke"]["tags"] = [tag]
    return mutate


def test_engine_b_reuses_what_engine_a_built(work, first, engine_b):
    # The stack engine A built in full (the session's first build): B builds nothing.
    f = str(stacks_file(work, "stacks"))
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", f, env=engine_b)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    acts = [n["action"] for n in reports(work)[-1]["nodes"].values()]
    assert acts == ["reuse"] * 4, acts
    assert "building" not in proc.stdout
    # A changed runtime: A builds that one node (a CI node job), B then builds the stack. B reuses A's
    # node, and builds the project layer on it from the registry (B's engine has never seen A's image).
    g = str(stacks_file(work, "engines", _runtime("13", "{stack}-engines")))
    keys = json.loads(imgbuild(work, "plan", "stack=cpu-smoke", "--json", "-f", g).stdout)["stacks"]["cpu-smoke"]["nodes"]
    proc = imgbuild(work, "build", "--node", keys[2], "-f", g)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runtime_digest = by_key(reports(work)[-1])[keys[2]]["digest"]
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", g, env=engine_b)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = reports(work)[-1]
    assert [n["action"] for n in rep["nodes"].values()] == ["reuse", "reuse", "reuse", "build"], rep["nodes"]
    assert by_key(rep)[keys[2]]["digest"] == runtime_digest          # A's image, not a rebuild of it
    assert release("cpu-smoke-engines") == by_key(rep)[keys[3]]["digest"]
    assert f"engine: /usr/bin/docker at {engine_b['DOCKER_HOST']}" in proc.stdout, proc.stdout[:500]


def test_one_stack_built_through_both_engines_at_once_ends_consistent(work, first, engine_b):
    f = str(stacks_file(work, "engines-race", _runtime("17", "{stack}-engines-race")))
    runs = at_once(work, [({}, ["build", "stack=cpu-smoke", "-f", f]),
                          (engine_b, ["build", "stack=cpu-smoke", "-f", f])])
    assert [rc for rc, _ in runs] == [0, 0], "\n-----\n".join(out[-6000:] for _, out in runs)
    # Both engines did build (the race was real), and whichever won, the registry tells one story.
    assert all("building" in out for _, out in runs), [out[-2000:] for _, out in runs]
    assert f"at {engine_b['DOCKER_HOST']}" in runs[1][1] and "at unix" not in runs[0][1]
    assert_one_consistent_state(f, "cpu-smoke", "cpu-smoke-engines-race")
