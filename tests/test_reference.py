"""The stacks.yaml reference (docs/stacks-reference.md, `imgbuild kinds`) and `imgbuild init` (issue 20,
part 2): written from the loader and the kind folders, so it cannot drift; a newcomer's first file."""

from __future__ import annotations

import json

import pytest
import yaml

from builder import reference
from builder.load import spec as spec_mod
from builder.load.kindpath import find_kinds
from builder.load.kinds import load_kinds
from builder.load.spec import load_spec
from conftest import REPO

PAGE = REPO / "docs" / "stacks-reference.md"


def shipped():
    return dict(find_kinds(REPO, [], load_kinds))


def test_the_reference_page_is_current():
    """Regenerate with: .venv/bin/imgbuild kinds --markdown > docs/stacks-reference.md"""
    assert PAGE.read_text() == reference.markdown(shipped())


def test_every_key_the_loader_accepts_is_documented():
    assert reference.undocumented() == []
    # The check can fail: a key the loader would accept without a line in the reference.
    spec_mod.STACK_KEYS.add("new_key")
    try:
        assert reference.undocumented() == ["stacks.NAME.new_key"]
    finally:
        spec_mod.STACK_KEYS.discard("new_key")


def test_every_parameter_of_every_kind_is_on_the_page():
    text = PAGE.read_text()
    for name, kind in shipped().items():
        assert f"### `{name}` ({kind.role})" in text
        for param in kind.params:
            assert f"| `{param}` |" in text.split(f"### `{name}`", 1)[1].split("### `", 1)[0], (name, param)


def test_kinds_lists_and_shows_each_kind(cli):
    res = cli("kinds")
    assert res.code == 0 and all(line.split()[0] in shipped() for line in res.out.splitlines()[:14])
    res = cli("kinds", "deepspeed")
    assert res.code == 0, res.output
    assert "version: version, required" in res.out and "ops: list, default [], one or more of" in res.out
    assert "arch-coverage: arch-coverage" in res.out and "version fields: {deepspeed}" in res.out
    data = json.loads(cli("kinds", "deepspeed", "--json").out)
    assert data["ok"] is True and data["verb"] == "kinds"
    assert [p["name"] for p in data["kinds"][0]["params"]][:2] == ["version", "ops"]
    bad = cli("kinds", "DeepSpeed")
    assert bad.code == 2 and "unknown layer kind 'DeepSpeed'" in bad.err and "deepspeed" in bad.err


def test_init_writes_a_file_that_checks_and_never_overwrites(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = cli("init")
    assert res.code == 0, res.output
    assert "next: imgbuild check -f stacks.yaml" in res.out
    data = yaml.safe_load((tmp_path / "stacks.yaml").read_text())
    assert list(data["stacks"]) == ["first-stack"] and data["site"]["registry"] == "127.0.0.1:5000"
    check = cli("check", "-f", str(tmp_path / "stacks.yaml"))
    assert check.code == 0, check.output
    before = (tmp_path / "stacks.yaml").read_bytes()
    again = cli("init")
    assert again.code == 2 and "exists" in again.err
    assert (tmp_path / "stacks.yaml").read_bytes() == before
    bad = cli("init", "--out", "other.yaml", "--registry", "bad host")
    assert bad.code == 2 and "site.registry: 'bad host' is not a registry host[:port]" in bad.err, bad.err
    assert not (tmp_path / "other.yaml").exists()
    both = cli("init", "--out", "other.yaml", "--registry", "bad host", "--stack", "Bad!")
    assert both.code == 2 and "site.registry: 'bad host'" in both.err and "stacks.Bad!: 'Bad!' is not a valid name" \
        in both.err and "2 spec errors" in both.err, both.err     # every value refused, once each


@pytest.mark.parametrize("stack", ["h100-train", "cpu.smoke"])
def test_init_names_the_stack_it_is_given(cli, tmp_path, monkeypatch, stack):
    monkeypatch.chdir(tmp_path)
    assert cli("init", "--stack", stack, "--namespace", "site/images").code == 0
    assert cli("plan", f"stack={stack}", "--offline", "-f", "stacks.yaml").code == 0


VERBS = ["check", "render", "plan", "build", "release", "validate", "diff", "lint", "probe", "lock", "node-check", "gc", "catalog",
         "export", "kinds", "init", "ci gitlab", "ci github"]


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_s_help_names_values_plainly_and_lists_the_exit_codes(cli, verb):
    res = cli(*verb.split(), "-h")
    assert res.code == 0, res.output
    assert "Exit codes: 0 ok; 2 bad input" in res.out
    import re
    assert not re.search(r"<(?:list\[|str>|int>|float>|path>|bool>)", res.out), res.out


def test_debug_works_after_the_verb(cli):
    res = cli("plan", "stack=nope", "--debug")
    assert res.code == 2 and "Traceback" in res.err and "no stack named 'nope'" in res.err


@pytest.mark.parametrize("text,line", [("version: 1\nsite:\n\tregistry: 127.0.0.1:5000\n", 3),
                                       ("version: 1\nsite:\n  registry: x\n  ci:\n    runner_tags:\n    \t- docker\n", 6)])
def test_a_tab_in_the_indentation_is_named_as_a_tab(cli, tmp_path, text, line):
    file = tmp_path / "stacks.yaml"
    file.write_text(text)
    res = cli("check", "-f", str(file))
    assert res.code == 2 and f"spec error[IB209]: {file}:{line}: not valid YAML: a tab in the indentation" in res.err, res.err
    assert "hint: replace the tab with spaces" in res.err


@pytest.mark.parametrize("typo,meant", [("h100", "H100"), ("a100", "A100"), ("Gh200", "GH200"), ("rtx5090", "RTX5090")])
def test_a_gpu_spelled_in_the_wrong_case_gets_did_you_mean(cli, tmp_path, typo, meant):
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    data["stacks"]["h100-megatron"]["gpus"] = [typo]
    file = tmp_path / "stacks.yaml"
    file.write_text(yaml.safe_dump(data, sort_keys=False))
    res = cli("check", "-f", str(file))
    assert res.code == 2 and f"stacks.h100-megatron.gpus[0]: unknown GPU {typo!r} (did you mean {meant!r}?)" in res.err, res.err


def test_the_docs_put_the_runtime_where_the_plan_does():
    """Issue 36: the README said "at the top", the reference "the very top", and the plan puts the runtime beneath
    the project. The plan is the truth; the README and the reference say what it does."""
    from builder.plan.keys import make_plan
    plan = make_plan(load_spec(REPO / "stacks.yaml"), ["cpu-smoke"])
    kinds = [n.layer.kind.name for n in plan.chain("cpu-smoke")]
    assert kinds.index("runtime-env") == len(kinds) - 2 and kinds[-1] == "project", kinds
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "the runtime beneath the project" in readme and "at the top." not in readme
    page = PAGE.read_text()
    assert "above a stack's layers and beneath its project" in page and "very top" not in page
