"""Issue 36 (5): projects that coexist. Two projects of one stack are layers of one image, one over the
other: one that writes the other's path or installs the other's distribution replaces it silently, and is
refused at check (IB081) naming both; projects that share nothing pass."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli, shipped_data, write_stacks

LTS_COMMIT = "9539a12e1b04a68423f57b3eb41d6125161dca24"


def _two_projects(tmp_path, second: dict, first_packages=None):
    data = shipped_data()
    data["projects"]["llm-pretrain"] = {"kind": "megatron", "params": dict(data["projects"]["megatron-core-0.16"]["params"])}
    if first_packages:
        data["projects"]["llm-pretrain"]["params"]["packages"] = first_packages
    data["projects"]["rlhf"] = second
    data["stacks"]["h100-megatron"]["project"] = ["llm-pretrain", "rlhf"]
    return write_stacks(tmp_path, data, lock=True)


def _ib081(file) -> list:
    res = run_cli("check", "stack=h100-megatron", "--json", "-f", file)
    return [f for f in json.loads(res.out)["findings"] if f["rule"] == "IB081"], res


def test_two_megatron_commits_in_one_stack_are_refused_naming_both(tmp_path):
    """The finding of the issue: both install megatron-core into the default /opt/Megatron-LM."""
    file = _two_projects(tmp_path, {"kind": "megatron", "params": {
        "source": {"repo": "https://github.com/NVIDIA/Megatron-LM.git", "commit": LTS_COMMIT}, "version": "0.17.0"}})
    for _ in range(2):
        found, res = _ib081(file)
        messages = [f["message"] for f in found]
        assert res.code == 3 and all(f["severity"] == "error" for f in found), res.output
        assert any("'llm-pretrain' and 'rlhf' both write /opt/Megatron-LM" in m for m in messages), messages
        assert any("both install megatron-core" in m for m in messages), messages
        assert {f["key"] for f in found} >= {"projects.rlhf.params.path", "projects.rlhf.params.source"}


def test_another_path_does_not_make_one_distribution_two(tmp_path):
    file = _two_projects(tmp_path, {"kind": "megatron", "params": {
        "source": {"repo": "https://github.com/NVIDIA/Megatron-LM.git", "commit": LTS_COMMIT}, "version": "0.17.0",
        "path": "/opt/rlhf/Megatron-LM", "install": "pythonpath"}})
    found, _ = _ib081(file)
    assert [f["message"] for f in found] == [
        "projects 'llm-pretrain' and 'rlhf' both install megatron-core (megatron-core; megatron-core): the second "
        "replaces the first's, whose checks then test the second's",
        "projects 'llm-pretrain' and 'rlhf' both install the project of https://github.com/NVIDIA/Megatron-LM.git: the "
        "second replaces the first's, whose checks then test the second's"]


@pytest.mark.parametrize("theirs, refused", [("numpy==2.1.0", True), ("numpy==1.26.4", False)])
def test_a_package_pinned_twice_differently_is_refused(tmp_path, theirs, refused):
    second = {"kind": "project", "params": {
        "source": {"repo": "file:///var/lib/imgbuild/git/smoke-project.git",
                   "commit": "d89c5dfd761db2eb8352a3c3df6659c984547929"},
        "path": "/opt/rlhf", "packages": [theirs]}}
    found, _ = _ib081(_two_projects(tmp_path, second, first_packages=["numpy==1.26.4"]))
    if refused:
        assert [f["message"] for f in found] == ["projects 'llm-pretrain' and 'rlhf' both install numpy (numpy==1.26.4; "
                                                  "numpy==2.1.0): the second replaces the first's, whose checks then "
                                                  "test the second's"]
        assert found[0]["key"] == "projects.rlhf.params.packages"
    else:
        assert found == []


def test_projects_that_share_nothing_pass(tmp_path):
    """The twin: Megatron-LM and a team's own repository at its own path (the real multi-project examples)."""
    second = {"kind": "project", "params": {
        "source": {"repo": "file:///var/lib/imgbuild/git/smoke-project.git",
                   "commit": "d89c5dfd761db2eb8352a3c3df6659c984547929"}, "path": "/opt/rlhf", "module": "smoke_train"}}
    found, res = _ib081(_two_projects(tmp_path, second))
    assert found == [], res.output
