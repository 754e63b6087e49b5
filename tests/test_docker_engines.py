"""Two engines sharing one registry (issue 12): the smallest honest model of many CI runners. Engine B
is a second dockerd on this machine with its own data root, exec root, pid file, socket and bridge
(scripts/second-engine.sh), so nothing engine A holds locally (images, BuildKit cache) helps it: all
it can share with A is what the registry holds.

- a layer image built through A is reused by B without a rebuild, and B builds only what is new on
  top of it (pulling A's image as its parent);
- the same changed stack built through A and B at once ends in one consistent registry state.

Both build a tiny stack (tests/tiny_chain.py: the mirrored Debian base, a `tiny-env` layer with no
packages, two shipped `system-setup` layers and a `runtime-env` layer) in this file's own namespace. That
is enough: what engines share is keys and images in the registry, whatever the images hold, and a tiny
chain has parents and children to reuse, pull and build on as cpu-smoke's did (issue 33).
"""

from __future__ import annotations

import json

import pytest

from e2e import NS, at_once, imgbuild, reports
from tiny_chain import assert_one_consistent_state, chain, release, seed

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

NAMESPACE = NS + "-engines"


def by_key(report: dict) -> dict:
    """A run report's nodes by their short key (the keys `plan --json` lists)."""
    return {n["key"]: n for n in report["nodes"].values()}


@pytest.fixture(scope="module")
def seeded(work) -> dict:
    """The tiny chain built in full through engine A in this file's namespace."""
    return seed(work, NAMESPACE)


def test_engine_b_reuses_what_engine_a_built(work, seeded, engine_b):
    # The stack engine A built in full (this file's seed): B builds nothing.
    f = seeded["stacks"]
    proc = imgbuild(work, "build", "stack=demo", "-f", f, env=engine_b)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    acts = [n["action"] for n in reports(work)[-1]["nodes"].values()]
    assert acts == ["reuse"] * 4, acts
    assert "building" not in proc.stdout
    # A changed knob layer: A builds that one node (a CI node job), B then builds the stack. B reuses A's
    # node, and builds the runtime layer on it from the registry (B's engine has never seen A's image).
    g = chain(work, "engines", NAMESPACE, knob="13", tags=["{stack}-engines"])
    keys = json.loads(imgbuild(work, "plan", "stack=demo", "--json", "-f", g).stdout)["stacks"]["demo"]["nodes"]
    proc = imgbuild(work, "build", "--node", keys[2], "-f", g)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    knob_digest = by_key(reports(work)[-1])[keys[2]]["digest"]
    proc = imgbuild(work, "build", "stack=demo", "-f", g, env=engine_b)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = reports(work)[-1]
    assert [n["action"] for n in rep["nodes"].values()] == ["reuse", "reuse", "reuse", "build"], rep["nodes"]
    assert by_key(rep)[keys[2]]["digest"] == knob_digest          # A's image, not a rebuild of it
    assert release(NAMESPACE, "demo-engines") == by_key(rep)[keys[3]]["digest"]
    assert f"engine: /usr/bin/docker at {engine_b['DOCKER_HOST']}" in proc.stdout, proc.stdout[:500]


def test_one_stack_built_through_both_engines_at_once_ends_consistent(work, seeded, engine_b):
    f = chain(work, "engines-race", NAMESPACE, knob="17", tags=["{stack}-engines-race"])
    runs = at_once(work, [({}, ["build", "stack=demo", "-f", f]),
                          (engine_b, ["build", "stack=demo", "-f", f])])
    assert [rc for rc, _ in runs] == [0, 0], "\n-----\n".join(out[-6000:] for _, out in runs)
    # Both engines did build (the race was real), and whichever won, the registry tells one story.
    assert all("building" in out for _, out in runs), [out[-2000:] for _, out in runs]
    assert f"at {engine_b['DOCKER_HOST']}" in runs[1][1] and "at unix" not in runs[0][1]
    assert_one_consistent_state(f, "demo", NAMESPACE, "demo-engines-race")
