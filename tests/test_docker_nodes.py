"""CI's verbs against the real engine and registry (issue 12): `build --node KEY` builds, validates and
pushes one layer image on a parent the registry holds, refuses one whose parent is missing, and is a
no-op when the key is there; `release` moves tags only from what the registry proves; `build --jobs 2`
builds independent nodes of two stacks at once, each distinct node once.

Every test builds a tiny stack (tests/tiny_chain.py: the mirrored Debian base, a `tiny-env` layer with no
packages, two shipped `system-setup` layers and a `runtime-env` layer) in this file's own namespace. That is
enough: node jobs, parents, reuse, release gating, serials and races are about keys, the registry and tags,
which a chain of four seconds-long nodes exercises as a chain of torch and DeepSpeed did (issue 33)."""

from __future__ import annotations

import json

import pytest

from e2e import NS, at_once, imgbuild, reports
from tiny_chain import assert_one_consistent_state, chain, release, seed

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

NAMESPACE = NS + "-nodes"


@pytest.fixture(scope="module")
def seeded(work) -> dict:
    """The tiny chain built in full in this file's namespace: the nodes the changed variants reuse."""
    return seed(work, NAMESPACE)


def test_node_jobs_then_release(work, seeded):
    f = chain(work, "nodes", NAMESPACE, knob="3", tags=["{stack}-nodes"])
    plan = json.loads(imgbuild(work, "plan", "stack=demo", "--json", "-f", f).stdout)
    keys = plan["stacks"]["demo"]["nodes"]
    out = lambda p: p.stdout + p.stderr
    # The top node first: its parent (the changed knob layer) is not in the registry yet.
    proc = imgbuild(work, "build", "--node", keys[-1], "-f", f)
    assert proc.returncode != 0 and "does not hold" in out(proc) and "build it first" in out(proc), out(proc)
    proc = imgbuild(work, "release", "stack=demo", "-f", f)
    assert proc.returncode != 0 and release(NAMESPACE, "demo-nodes") is None, out(proc)
    acts = []
    for key in keys:   # what a pipeline's node jobs do, parents first
        proc = imgbuild(work, "build", "--node", key, "-f", f)
        assert proc.returncode == 0, out(proc)
        rep = reports(work)[-1]
        assert list(rep["tags"]) == [] and len(rep["nodes"]) == 1
        acts.append(next(iter(rep["nodes"].values()))["action"])
    assert acts == ["reuse", "reuse", "build", "build"], acts
    assert release(NAMESPACE, "demo-nodes") is None            # node jobs move no tag
    proc = imgbuild(work, "release", "stack=demo", "-f", f, "--date", "2026.12.01")
    assert proc.returncode == 0, out(proc)
    assert release(NAMESPACE, "demo-nodes") is not None
    proc = imgbuild(work, "build", "--node", keys[-1], "-f", f)
    assert proc.returncode == 0 and "reused" in proc.stdout, out(proc)


def test_jobs_build_two_stacks_at_once(work, seeded):
    f = chain(work, "jobs", NAMESPACE, knob="5", tags=["{stack}-jobs"], second="6")
    proc = imgbuild(work, "build", "stack=demo", "stack=demo-b", "--jobs", "2", "-f", f)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = reports(work)[-1]
    built = [n["layer"] for n in rep["nodes"].values() if n["action"] == "build"]
    assert sorted(built) == ["knob", "knob-b", "rt", "rt"], built
    assert "2 at a time" in proc.stdout
    assert release(NAMESPACE, "demo-jobs") and release(NAMESPACE, "demo-b-jobs", "demo-b")


def test_two_builders_racing_end_in_one_consistent_state(work, seeded):
    """Two `imgbuild build` of the same changed stack at once on one engine: both succeed, and each key
    names one image with its proof, which the release tag (moved by whichever finished last) names too."""
    f = chain(work, "race", NAMESPACE, knob="7", tags=["{stack}-race"])
    runs = at_once(work, [({}, ["build", "stack=demo", "-f", f])] * 2)
    assert [rc for rc, _ in runs] == [0, 0], "\n-----\n".join(out[-6000:] for _, out in runs)
    assert_one_consistent_state(f, "demo", NAMESPACE, "demo-race")


def test_an_older_release_finishing_last_moves_no_tag(work, seeded):
    """Release tags never move backwards: the newer pipeline (serial 9) releases first, the older one
    (serial 8, the seeded chain) finishes last and leaves the tag; a later pipeline (10) may move it back
    on purpose."""
    def run(serial: str, *args: str):
        return imgbuild(work, *args, env={"IMGBUILD_SERIAL": serial})
    newer = chain(work, "serial-new", NAMESPACE, knob="3", tags=["{stack}-serial"])
    older = chain(work, "serial-old", NAMESPACE, tags=["{stack}-serial"])
    proc = run("9", "build", "stack=demo", "-f", newer)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    new_digest = release(NAMESPACE, "demo-serial")
    proc = run("8", "release", "stack=demo", "-f", older)
    assert proc.returncode == 0 and "kept at" in proc.stdout, proc.stdout + proc.stderr
    assert release(NAMESPACE, "demo-serial") == new_digest
    proc = run("10", "release", "stack=demo", "-f", older)
    assert proc.returncode == 0 and release(NAMESPACE, "demo-serial") not in (None, new_digest), proc.stdout + proc.stderr
