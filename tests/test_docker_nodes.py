"""CI's verbs against the real engine and registry (issue 12): `build --node KEY` builds, validates and
pushes one layer image on a parent the registry holds, refuses one whose parent is missing, and is a
no-op when the key is there; `release` moves tags only from what the registry proves; `build --jobs 2`
builds independent nodes of two stacks at once, each distinct node once."""

from __future__ import annotations

import json

import pytest

from e2e import assert_one_consistent_state, at_once, imgbuild, release, reports, stacks_file

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


def _runtime(value: str, tag: str):
    def mutate(data):
        data["runtimes"]["cpu-env"]["params"]["env"]["OMP_NUM_THREADS"] = value
        data["stacks"]["cpu-smoke"]["tags"] = [tag]
    return mutate


def test_node_jobs_then_release(work, first):
    f = str(stacks_file(work, "nodes", _runtime("3", "{stack}-nodes")))
    plan = json.loads(imgbuild(work, "plan", "stack=cpu-smoke", "--json", "-f", f).stdout)
    keys = plan["stacks"]["cpu-smoke"]["nodes"]
    out = lambda p: p.stdout + p.stderr
    # The top node first: its parent (the new runtime layer) is not in the registry yet.
    proc = imgbuild(work, "build", "--node", keys[-1], "-f", f)
    assert proc.returncode != 0 and "does not hold" in out(proc) and "build it first" in out(proc), out(proc)
    proc = imgbuild(work, "release", "stack=cpu-smoke", "-f", f)
    assert proc.returncode != 0 and release("cpu-smoke-nodes") is None, out(proc)
    acts = []
    for key in keys:   # what a pipeline's node jobs do, parents first
        proc = imgbuild(work, "build", "--node", key, "-f", f)
        assert proc.returncode == 0, out(proc)
        rep = reports(work)[-1]
        assert list(rep["tags"]) == [] and len(rep["nodes"]) == 1
        acts.append(next(iter(rep["nodes"].values()))["action"])
    assert acts == ["reuse", "reuse", "build", "build"], acts
    assert release("cpu-smoke-nodes") is None            # node jobs move no tag
    proc = imgbuild(work, "release", "stack=cpu-smoke", "-f", f, "--date", "2026.12.01")
    assert proc.returncode == 0, out(proc)
    assert release("cpu-smoke-nodes") is not None
    proc = imgbuild(work, "build", "--node", keys[-1], "-f", f)
    assert proc.returncode == 0 and "reused" in proc.stdout, out(proc)


def test_jobs_build_two_stacks_at_once(work, first):
    def two(data):
        _runtime("5", "{stack}-jobs")(data)
        data["runtimes"]["cpu-env-b"] = {"kind": "runtime-env", "params": {"env": {"OMP_NUM_THREADS": "6"}}}
        data["stacks"]["cpu-smoke-b"] = {**data["stacks"]["cpu-smoke"], "runtime": "cpu-env-b",
                                         "tags": ["{stack}-jobs"]}
    f = str(stacks_file(work, "jobs", two))
    proc = imgbuild(work, "build", "stack=cpu-smoke", "stack=cpu-smoke-b", "--jobs", "2", "-f", f)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = reports(work)[-1]
    built = [n["layer"] for n in rep["nodes"].values() if n["action"] == "build"]
    assert sorted(built) == ["cpu-env", "cpu-env-b", "smoke-train", "smoke-train"], built
    assert "2 at a time" in proc.stdout
    assert release("cpu-smoke-jobs") and release("cpu-smoke-b-jobs", "cpu-smoke-b")


def test_two_builders_racing_end_in_one_consistent_state(work, first):
    """Two `imgbuild build` of the same changed stack at once on one engine: both succeed, and each key
    names one image with its proof, which the release tag (moved by whichever finished last) names too."""
    f = str(stacks_file(work, "race", _runtime("7", "{stack}-race")))
    runs = at_once(work, [({}, ["build", "stack=cpu-smoke", "-f", f])] * 2)
    assert [rc for rc, _ in runs] == [0, 0], "\n-----\n".join(out[-6000:] for _, out in runs)
    assert_one_consistent_state(f, "cpu-smoke", "cpu-smoke-race")


def test_an_older_release_finishing_last_moves_no_tag(work, first):
    """Release tags never move backwards: the newer pipeline (serial 9) releases first, the older one
    (serial 8) finishes last and leaves the tag; a later pipeline (10) may move it back on purpose."""
    def run(serial: str, *args: str):
        return imgbuild(work, *args, env={"IMGBUILD_SERIAL": serial})
    newer = str(stacks_file(work, "serial-new", _runtime("3", "{stack}-serial")))
    older = str(stacks_file(work, "serial-old", lambda d: d["stacks"]["cpu-smoke"].__setitem__("tags", ["{stack}-serial"])))
    proc = run("9", "build", "stack=cpu-smoke", "-f", newer)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    new_digest = release("cpu-smoke-serial")
    proc = run("8", "release", "stack=cpu-smoke", "-f", older)
    assert proc.returncode == 0 and "kept at" in proc.stdout, proc.stdout + proc.stderr
    assert release("cpu-smoke-serial") == new_digest
    proc = run("10", "release", "stack=cpu-smoke", "-f", older)
    assert proc.returncode == 0 and release("cpu-smoke-serial") not in (None, new_digest), proc.stdout + proc.stderr
