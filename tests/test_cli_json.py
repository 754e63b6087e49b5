"""One CLI convention (issue 20, part 6): --json on every verb with one envelope, and one default for
"which stacks". The engine-free verbs are run for real here; the verbs that need an engine or a registry
are run to a refusal, which must come in the same envelope (their success paths are asserted by the
docker tests that run them with --json)."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import STACKS, shipped_data, write_stacks
from test_reference import VERBS


def envelope(res, verb: str, ok: bool) -> dict:
    """stdout is exactly one JSON document with ok and verb; text went to stderr."""
    data = json.loads(res.out)
    assert data["ok"] is ok and data["verb"] == verb, data
    if not ok:
        assert data["error"] == data["errors"][0] and data["exit_code"] == res.code, data
    return data


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_json(cli, verb):
    assert "--json" in cli(*verb.split(), "-h").out


def test_check_plan_render_ci_kinds_lint_in_the_envelope(cli, tmp_path):
    stacks = ["cpu-smoke"]
    data = envelope(cli("check", "stack=cpu-smoke", "-f", STACKS, "--json"), "check", True)
    assert data["stacks"] == stacks and "findings" in data
    data = envelope(cli("plan", "stack=cpu-smoke", "-f", STACKS, "--json", "--offline"), "plan", True)
    assert list(data["stacks"]) == stacks and data["nodes"]
    data = envelope(cli("render", "stack=cpu-smoke", "-f", STACKS, "--json"), "render", True)
    assert [n["layer"] for n in data["stacks"]["cpu-smoke"]][-1] == "smoke-train"
    assert all(n["dockerfile"].startswith("# imgbuild layer ") for n in data["stacks"]["cpu-smoke"])
    data = envelope(cli("render", "stack=cpu-smoke", "-f", STACKS, "--json", "--out", tmp_path / "out"), "render", True)
    assert any(p.endswith("docker-bake.json") for p in data["written"])
    for system in ("gitlab", "github"):
        data = envelope(cli("ci", system, "stack=cpu-smoke", "-f", STACKS, "--offline", "--json"), f"ci {system}", True)
        assert yaml.safe_load(data["text"]) and data["stacks"] == stacks
    data = envelope(cli("kinds", "--json"), "kinds", True)
    assert "deepspeed" in [k["name"] for k in data["kinds"]]
    data = envelope(cli("lint", STACKS, "--json"), "lint", True)
    assert data["files"] == 1 and "findings" in data
    data = envelope(cli("init", "--out", tmp_path / "s.yaml", "--json"), "init", True)
    assert data["file"] == str(tmp_path / "s.yaml") and data["stack"] == "first-stack"


def test_a_refusal_is_the_same_envelope_on_every_verb(cli, tmp_path):
    """A stacks file that cannot be used: every verb that reads one says so in JSON on stdout, exit 2."""
    data = shipped_data()
    data["stacks"]["cpu-smoke"]["layrs"] = []     # an unknown key: the file is refused before anything runs
    bad = write_stacks(tmp_path, data)
    argv = {"check": [], "render": [], "plan": [], "build": [], "release": [], "validate": [], "lint": None,
            "probe": ["base=debian-bookworm"], "lock": [], "gc": [], "catalog": ["-o", tmp_path / "cat"], "node-check": ["stack=cpu-smoke"],
            "export": ["stack=cpu-smoke", "--out", tmp_path / "x"],
            "ci gitlab": [], "ci github": []}
    for verb, extra in argv.items():
        args = [*verb.split(), *(extra or []), "-f", bad, "--json"] if extra is not None else [verb, bad, "--json"]
        res = cli(*args)
        assert res.code == 2, (verb, res.output)
        data = envelope(res, verb, False)
        assert data["error"]["file"] == str(bad), (verb, data)


def test_a_failed_check_is_ok_false_with_its_findings(cli, tmp_path):
    from test_spec_semantics import _waived_spec
    res = cli("check", "--strict", "-f", _waived_spec(tmp_path, None), "--json")   # a warning, made an error
    assert res.code == 3, res.output
    body = envelope(res, "check", False)
    assert body["error"]["kind"] == "preflight" and [f["rule"] for f in body["findings"]] == ["IB075"]


def test_diff_in_the_envelope(cli, tmp_path):
    res = cli("diff", "cpu-smoke@a", "cpu-smoke@a", "-f", tmp_path / "missing.yaml", "--json")
    assert res.code == 2 and envelope(res, "diff", False)["error"]


def test_no_selection_means_every_stack_on_every_verb(cli, tmp_path):
    """check, plan, render and ci took every stack without stack=NAME while render, release and ci refused:
    now none named is every stack in the file, everywhere, and --all says the same."""
    every = list(yaml.safe_load(open(STACKS))["stacks"])
    assert sorted(json.loads(cli("plan", "-f", STACKS, "--json", "--offline").out)["stacks"]) == sorted(every)
    assert json.loads(cli("check", "-f", STACKS, "--json").out)["stacks"] == every
    assert sorted(json.loads(cli("render", "-f", STACKS, "--json").out)["stacks"]) == sorted(every)
    # Without GPU runners, ci writes a pipeline releasing the GPU stacks only where the site waives their GPU proof.
    data = shipped_data()
    data["site"]["ci"] = {"gpu_checks": {"waive": {name: "no GPU runners on this test site" for name in every}}}
    waived = str(write_stacks(tmp_path / "waived", data))
    for system in ("gitlab", "github"):
        none = json.loads(cli("ci", system, "-f", waived, "--offline", "--json").out)
        assert none["stacks"] == every
        assert none["text"] == json.loads(cli("ci", system, "--all", "-f", waived, "--offline", "--json").out)["text"]
