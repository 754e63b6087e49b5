"""`imgbuild diff REV1 [REV2]` on a temporary git repository: one commit per kind of change, each
compared with the commit before it. No Docker, no registry."""

from __future__ import annotations

import datetime
import re
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from builder.diff.specdiff import diff_revisions
from builder.plan.keys import layer_definition
from conftest import REPO, run_cli

PIN_V1 = "d89c5dfd761db2eb8352a3c3df6659c984547929"
PIN_V2 = "1a6d04ff11a3a379285c6dc7862d82d095f0056c"
DEBIAN_DIGEST = "sha256:" + "ab" * 32
# The release day is pinned: a suite that runs across midnight UTC must not see two days (CI did).
FIXED_DAY = datetime.date(2026, 12, 5)
TODAY = FIXED_DAY.strftime("%Y.%m.%d")


@pytest.fixture(autouse=True)
def fixed_day(monkeypatch):
    from builder.load import tags
    monkeypatch.setattr(tags, "today", lambda: FIXED_DAY)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def edit(repo: Path, change) -> None:
    path = repo / "stacks.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def commit(repo: Path, tag: str) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", tag)
    git(repo, "tag", tag)


def site_repo(root: Path, tag: str) -> Path:
    """A git repository holding a copy of the shipped stacks.yaml, layers/ and Dockerfile.j2."""
    root.mkdir()
    shutil.copytree(REPO / "layers", root / "layers")
    shutil.copy2(REPO / "Dockerfile.j2", root / "Dockerfile.j2")
    shutil.copy2(REPO / "stacks.yaml", root / "stacks.yaml")
    git(root, "init", "-q")
    commit(root, tag)
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A repository whose tags each make one change to the one before (named in each test)."""
    root = site_repo(tmp_path_factory.mktemp("specdiff") / "site", "base")

    def pin(d):
        d["projects"]["smoke-train"]["params"]["source"]["commit"] = PIN_V2
    edit(root, pin)
    commit(root, "pin")

    def ds_version(d):
        d["layers"]["ds-0.19.8-cpu"]["params"]["version"] = "0.19.9"
    edit(root, ds_version)
    commit(root, "version")

    def gpus(d):
        d["stacks"]["h100-megatron"]["gpus"] = ["H100", "B200"]
    edit(root, gpus)
    commit(root, "gpus")

    fragment = root / "layers" / "project" / "fragment.j2"
    fragment.write_text(fragment.read_text() + "RUN python -m pip check\n")
    commit(root, "fragment")

    def runtime(d):
        d["runtimes"]["cpu-env"]["params"]["env"]["OMP_NUM_THREADS"] = "4"
    edit(root, runtime)
    commit(root, "runtime")

    def smoke(d):
        d["projects"]["smoke-train"]["params"]["smoke"] = "python -m smoke_train --steps 2"
    edit(root, smoke)
    commit(root, "checks")

    def base_digest(d):
        d["bases"]["debian-bookworm"]["digest"] = DEBIAN_DIGEST
    edit(root, base_digest)
    commit(root, "digest")

    def stacks(d):
        d["stacks"]["cpu-smoke-next"] = {"extends": "cpu-smoke", "project": "smoke-train-next"}
        d["projects"]["smoke-train-next"] = d["projects"]["smoke-train"]
        del d["stacks"]["a100-deepspeed"]
    edit(root, stacks)
    commit(root, "stacks")

    def rename(d):
        d["layers"]["ds-0.19.9-cpu"] = d["layers"].pop("ds-0.19.8-cpu")
        for name in ("cpu-smoke",):
            d["stacks"][name]["layers"] = ["cpu-torch-2.13", "ds-0.19.9-cpu"]
    edit(root, rename)
    commit(root, "rename")

    def epoch(d):
        d.setdefault("site", {})["epoch"] = 2
    edit(root, epoch)
    commit(root, "epoch")
    return root


def spec_diff(repo: Path, old: str, new: str | None = None):
    return diff_revisions(repo / "stacks.yaml", old, new, offline=True)   # the same with or without a registry here


def changed(d, stack: str) -> dict:
    return {n.layer: n for s in d.stacks if s.name == stack for n in s.nodes if n.change != "unchanged"}


def causes(node) -> dict:
    return {c.input: c for c in node.causes}


def test_a_pin_rebuilds_only_the_project_and_moves_its_tags(repo):
    d = spec_diff(repo, "base", "pin")
    assert d.different
    by_stack = {s.name: s for s in d.stacks}
    assert [s.name for s in d.stacks if s.status != "unchanged"] == ["cpu-smoke"]
    node = changed(d, "cpu-smoke")["smoke-train"]
    assert (node.change, node.action, node.position) == ("changed", "build", 3)
    found = causes(node)
    assert set(found) == {"sources", "dockerfile"}
    assert found["sources"].detail == f"source {PIN_V1[:12]} -> {PIN_V2[:12]}"
    assert found["dockerfile"].detail == f"source: {PIN_V1[:12]} -> {PIN_V2[:12]}"
    assert any(line.startswith("+ ") and PIN_V2 in line for line in found["dockerfile"].lines)
    smoke = by_stack["cpu-smoke"]
    assert smoke.tag_action == "move"
    # Templates are shown as the release would write them: versions from what the stack pins, today's date.
    assert smoke.tags == ("127.0.0.1:5000/imgbuild/cpu-smoke:cpu-smoke",
                          f"127.0.0.1:5000/imgbuild/cpu-smoke:cpu-smoke-{TODAY}",
                          "127.0.0.1:5000/imgbuild/cpu-smoke:cpu-smoke-torch2.13.0-cpu-ds0.19.8")
    assert smoke.created == () and smoke.moved == smoke.tags      # the old revision wrote the same three
    assert all(n.action == "reuse" for n in smoke.nodes if n.change == "unchanged")
    assert [s.tags for s in d.stacks if s.name != "cpu-smoke"] == [(), (), ()]
    assert d.keys("build") == [("smoke-train", node.new_key)]


def test_a_version_rebuilds_the_layer_and_everything_above_it(repo):
    d = spec_diff(repo, "pin", "version")
    nodes = changed(d, "cpu-smoke")
    assert list(nodes) == ["ds-0.19.8-cpu", "cpu-env", "smoke-train"]
    ds = causes(nodes["ds-0.19.8-cpu"])
    assert set(ds) == {"dockerfile"}
    assert ds["dockerfile"].detail == "version: 0.19.8 -> 0.19.9"
    assert "- python -m pip install --progress-bar off --no-build-isolation deepspeed==0.19.8" in ds["dockerfile"].lines
    assert "+ python -m pip install --progress-bar off --no-build-isolation deepspeed==0.19.9" in ds["dockerfile"].lines
    assert causes(nodes["cpu-env"]).keys() == {"parent"}
    assert causes(nodes["cpu-env"])["parent"].detail == "ds-0.19.8-cpu changed"
    assert causes(nodes["smoke-train"])["parent"].detail == "cpu-env changed (the change starts at ds-0.19.8-cpu)"
    assert {n.action for n in nodes.values()} == {"build"}
    # A new version is a new versioned tag, told apart from the tags that move.
    smoke = next(s for s in d.stacks if s.name == "cpu-smoke")
    versioned = "127.0.0.1:5000/imgbuild/cpu-smoke:cpu-smoke-torch2.13.0-cpu-ds0.19.9"
    assert smoke.created == (versioned,) and smoke.tag_action == "move"
    assert smoke.moved == ("127.0.0.1:5000/imgbuild/cpu-smoke:cpu-smoke", f"127.0.0.1:5000/imgbuild/cpu-smoke:cpu-smoke-{TODAY}")


def test_the_gpu_list_changes_the_arch_lists_of_compiled_layers_only(repo):
    d = spec_diff(repo, "version", "gpus")
    assert {s.name for s in d.stacks if s.status != "unchanged"} == {"h100-megatron", "h100-megatron-next"}
    nodes = changed(d, "h100-megatron")
    # The NGC adapter and TE as shipped compile nothing: their keys do not hold an arch list.
    assert list(nodes) == ["ds-0.19.5-hopper", "nccl-tests-2.19.6", "nccl-ib", "megatron-core-0.16"]
    # nccl-tests' Makefile reads nvcc's own spelling, which changes with it.
    assert "-gencode=arch=compute_100,code=sm_100" in "".join(causes(nodes["nccl-tests-2.19.6"])["dockerfile"].lines)
    ds = causes(nodes["ds-0.19.5-hopper"])
    assert set(ds) == {"build_args", "dockerfile"}
    assert "TORCH_CUDA_ARCH_LIST 9.0 -> 9.0;10.0" in ds["build_args"].detail
    assert "NVTE_CUDA_ARCHS 90 -> 90;100" in ds["build_args"].detail
    assert ds["dockerfile"].detail == "arch list 9.0 -> 9.0;10.0"
    assert '+ ARG TORCH_CUDA_ARCH_LIST="9.0;10.0"' in ds["dockerfile"].lines
    # The shared DeepSpeed node is one image to build for both stacks.
    assert [k[0] for k in d.keys("build")].count("ds-0.19.5-hopper") == 1


def test_template_text_is_named_with_the_lines_it_changes(repo):
    d = spec_diff(repo, "gpus", "fragment")
    nodes = changed(d, "cpu-smoke")
    assert list(nodes) == ["smoke-train"]
    df = causes(nodes["smoke-train"])["dockerfile"]
    assert df.detail == "template layers/project/fragment.j2 changed"
    assert df.lines == ("+ RUN python -m pip check",)
    # Megatron projects use another kind: untouched.
    assert not changed(d, "h100-megatron")


def test_a_runtime_env_change_rebuilds_the_env_layer_and_the_project_above(repo):
    d = spec_diff(repo, "fragment", "runtime")
    nodes = changed(d, "cpu-smoke")
    assert list(nodes) == ["cpu-env", "smoke-train"]
    env = causes(nodes["cpu-env"])["dockerfile"]
    assert env.detail == "env: OMP_NUM_THREADS 2 -> 4"
    assert set(causes(nodes["smoke-train"])) == {"parent"}


def test_a_check_only_change_revalidates_without_a_rebuild(repo):
    d = spec_diff(repo, "runtime", "checks")
    smoke = next(s for s in d.stacks if s.name == "cpu-smoke")
    node = changed(d, "cpu-smoke")["smoke-train"]
    assert (node.change, node.action, node.old_key) == ("checks", "revalidate", node.new_key)
    assert node.causes[0].input == "checks"
    assert "project.smoke changed" in node.causes[0].detail and "smoke:" in node.causes[0].detail
    assert smoke.tag_action == "none" and smoke.tags == ()
    assert d.different and d.keys("build") == []


def test_a_declared_base_digest_changes_every_layer_of_its_stacks(repo):
    d = spec_diff(repo, "checks", "digest")
    nodes = changed(d, "cpu-smoke")
    assert list(nodes) == ["cpu-torch-2.13", "ds-0.19.8-cpu", "cpu-env", "smoke-train"]
    root = causes(nodes["cpu-torch-2.13"])
    assert set(root) == {"parent"}
    assert root["parent"].detail == ("base image 127.0.0.1:5000/mirror/debian:bookworm -> "
                                     f"127.0.0.1:5000/mirror/debian:bookworm@{DEBIAN_DIGEST}")
    # Resolved on one side now: the note on bases without a digest no longer names it.
    assert not any("debian-bookworm" in n for n in d.notes)
    assert any("debian-bookworm" in n for n in spec_diff(repo, "base", "pin").notes)


def test_stacks_added_and_removed(repo):
    d = spec_diff(repo, "digest", "stacks")
    by_stack = {s.name: s for s in d.stacks}
    new = by_stack["cpu-smoke-next"]
    assert new.status == "added" and new.tag_action == "create"
    # It shares every layer below its project with cpu-smoke: those keys exist already.
    assert [(n.layer, n.change, n.action) for n in new.nodes] == [
        ("cpu-torch-2.13", "added", "reuse"), ("ds-0.19.8-cpu", "added", "reuse"), ("cpu-env", "added", "reuse"),
        ("smoke-train-next", "added", "build")]
    assert new.created == new.tags and len(new.tags) == 3 and "{" not in "".join(new.tags)
    gone = by_stack["a100-deepspeed"]
    assert gone.status == "removed" and gone.tags == () and {n.change for n in gone.nodes} == {"removed"}


def test_a_renamed_layer_is_matched_by_position_as_replaced(repo):
    d = spec_diff(repo, "stacks", "rename")
    nodes = changed(d, "cpu-smoke")
    ds = nodes["ds-0.19.9-cpu"]
    assert (ds.change, ds.was, ds.action) == ("replaced", "ds-0.19.8-cpu", "build")
    assert causes(ds)["dockerfile"].detail == "layer name ds-0.19.8-cpu -> ds-0.19.9-cpu"
    # The runtime env and the project above it move with their new parent.
    assert set(nodes) == {"ds-0.19.9-cpu", "cpu-env", "smoke-train"}
    assert causes(nodes["cpu-env"])["parent"].detail == "ds-0.19.8-cpu -> ds-0.19.9-cpu"


def test_equal_revisions_exit_0_and_different_exit_1(repo, cli):
    file = str(repo / "stacks.yaml")
    same = cli("diff", "base", "base", "-f", file)
    assert same.code == 0, same.output
    assert "cpu-smoke: unchanged (4 layer images reused)" in same.out
    assert "summary: 0 layer images to build" in same.out
    diff = cli("diff", "base", "pin", "-f", file)
    assert diff.code == 1, diff.output
    assert "smoke-train" in diff.out and "release tags once merged:" in diff.out
    assert "    moves cpu-smoke" not in diff.out        # tags are shown whole, with the registry
    assert re.search(r"^    moves 127\.0\.0\.1:5000/imgbuild/cpu-smoke:cpu-smoke-torch2\.13\.0-cpu-ds0\.19\.8$", diff.out, re.M)


def test_the_summary_counts_reused_images_without_calling_their_keys_new(repo, cli):
    """An added stack that shares three layers with another: those three keys are not new keys, and the
    summary said they were reused "under a new key". Its tags are all new."""
    res = cli("diff", "digest", "stacks", "-f", str(repo / "stacks.yaml"), "--offline")
    assert res.code == 1, res.output
    summary = res.out.splitlines()[-1]
    assert "new key" not in res.out
    assert summary.startswith("summary: 1 layer image to build, 0 to revalidate, 3 already built;"), summary
    assert "3 new" in summary, summary


def test_an_epoch_rebuilds_every_layer_and_says_it_was_deliberate(repo, cli):
    """Issue 23: the one deliberate "rebuild everything" is site.epoch, and diff names it as the cause."""
    d = spec_diff(repo, "rename", "epoch")
    nodes = [n for s in d.stacks for n in s.nodes]
    assert nodes and all(n.change == "changed" and n.action == "build" for n in nodes)
    assert all(causes(n)["epoch"].detail == "site.epoch (none) -> 2: a deliberate rebuild of every layer"
               for n in nodes)
    res = cli("diff", "rename", "epoch", "-f", str(repo / "stacks.yaml"), "--offline")
    assert res.code == 1 and "site.epoch (none) -> 2" in res.out, res.output


def test_one_revision_compares_with_the_working_tree(repo, cli):
    file = repo / "stacks.yaml"
    before = file.read_text()
    try:
        file.write_text(before.replace("OMP_NUM_THREADS: '4'", "OMP_NUM_THREADS: '8'"))
        result = cli("diff", "HEAD", "-f", str(file))
        assert result.code == 1, result.output
        assert result.out.startswith(f"imgbuild diff: {file} at HEAD (")
        assert result.out.splitlines()[0].endswith(" -> working tree")
        assert "dockerfile: env: OMP_NUM_THREADS 4 -> 8" in result.out
    finally:
        file.write_text(before)
    assert cli("diff", "HEAD", "-f", str(file)).code == 0


def test_json_shape(repo, cli):
    result = cli("diff", "base", "pin", "-f", str(repo / "stacks.yaml"), "--json")
    assert result.code == 1, result.output
    data = json.loads(result.out)
    assert data["mode"] == "spec" and data["different"] is True
    assert data["old"].startswith("base (") and data["new"].startswith("pin (")
    smoke = data["stacks"]["cpu-smoke"]
    assert smoke["status"] == "changed" and smoke["tag_action"] == "move" and len(smoke["tags"]) == 3
    assert smoke["tags_moved"] == smoke["tags"] and smoke["tags_created"] == []
    node = smoke["nodes"][3]
    assert node["layer"] == "smoke-train" and node["action"] == "build"
    assert [c["input"] for c in node["causes"]] == ["sources", "dockerfile"]
    assert node["image"].startswith("127.0.0.1:5000/imgbuild/layers/smoke-train:")
    assert data["summary"]["build"] == [f"smoke-train:{node['new_key']}"]
    assert data["stacks"]["h100-megatron"]["status"] == "unchanged"


def test_markdown_shape(repo, cli):
    result = cli("diff", "pin", "version", "-f", str(repo / "stacks.yaml"), "--markdown")
    assert result.code == 1, result.output
    md = result.out
    assert md.startswith("### imgbuild diff: `")
    assert "#### cpu-smoke: changed (3 build)" in md
    assert "| # | layer | change | action | key | why |" in md
    assert "| 1 | ds-0.19.8-cpu | changed | **build** |" in md
    assert "```diff\n- python -m pip install" in md
    others = [name for name in yaml.safe_load((REPO / "stacks.yaml").read_text())["stacks"] if name != "cpu-smoke"]
    assert md.endswith("Unchanged: " + ", ".join(others) + ".\n")


def test_errors_exit_2(repo, cli, tmp_path):
    file = str(repo / "stacks.yaml")
    bad = cli("diff", "no-such-rev", "-f", file)
    assert bad.code == 2 and "'no-such-rev' is not a revision" in bad.err and "Traceback" not in bad.err
    outside = tmp_path / "stacks.yaml"
    outside.write_text((REPO / "stacks.yaml").read_text())
    assert "is not in a git repository" in cli("diff", "HEAD", "-f", str(outside)).err
    many = cli("diff", "a", "b", "c", "-f", file)
    assert many.code == 2 and "two revisions" in many.err
    both = cli("diff", "base", "pin", "-f", file, "--json", "--markdown")
    assert both.code == 2


def test_a_broken_revision_is_named_with_its_file_and_line(tmp_path, cli):
    root = tmp_path / "site"
    root.mkdir()
    (root / "stacks.yaml").write_text((REPO / "stacks.yaml").read_text())
    git(root, "init", "-q")
    commit(root, "good")
    (root / "stacks.yaml").write_text((REPO / "stacks.yaml").read_text().replace("    base: debian-bookworm",
                                                                                  "    base: debian-bookworm\n    colour: red"))
    commit(root, "broken")
    result = cli("diff", "good", "broken", "-f", str(root / "stacks.yaml"))
    assert result.code == 2
    assert "broken (" in result.err and re.search(r"spec error\[IB2\d\d\]: stacks\.yaml:", result.err)
    assert "unknown key 'colour'" in result.err and "imgbuild-diff-" not in result.err
    # Two mistakes in the revision: both named, as check names them.
    (root / "stacks.yaml").write_text((REPO / "stacks.yaml").read_text().replace(
        "    base: debian-bookworm", "    base: debian-bookworm\n    colour: red\n    size: 3"))
    commit(root, "twice")
    result = cli("diff", "good", "twice", "-f", str(root / "stacks.yaml"))
    assert result.code == 2 and "2 spec errors" in result.err, result.err
    assert "unknown key 'colour'" in result.err and "unknown key 'size'" in result.err, result.err
    assert "imgbuild-diff-" not in result.err


def test_registry_resolves_mirrored_bases_and_finds_keys_already_built(tmp_path):
    from builder.plan.keys import make_plan
    from builder.load.spec import load_spec
    from test_imagediff_units import FakeRegistry, config

    fake = FakeRegistry()
    server = fake.serve()
    try:
        host = f"127.0.0.1:{server.server_port}"
        root = tmp_path / "site"
        root.mkdir()
        (root / "stacks.yaml").write_text((REPO / "stacks.yaml").read_text().replace("registry: 127.0.0.1:5000",
                                                                                      f"registry: {host}"))
        git(root, "init", "-q")
        commit(root, "one")
        edit(root, lambda d: d["projects"]["smoke-train"]["params"]["source"].update(commit=PIN_V2))
        commit(root, "two")
        debian = fake.image("mirror/debian", "bookworm", config([], {}, []), [(b"debian", 1)])
        # Someone already built the new project layer: its key, planned on the mirrored base's digest.
        spec = load_spec(root / "stacks.yaml")
        top = make_plan(spec, ["cpu-smoke"], {"debian-bookworm": debian}).top("cpu-smoke")
        fake.image("imgbuild/layers/smoke-train", top.short, config([], {}, []), [(b"x", 1)])

        plain = diff_revisions(root / "stacks.yaml", "one", "two")
        assert changed(plain, "cpu-smoke")["smoke-train"].action == "build"
        d = diff_revisions(root / "stacks.yaml", "one", "two", registry=True)
        node = changed(d, "cpu-smoke")["smoke-train"]
        assert (node.action, node.note, node.new_key) == ("reuse", "already in the registry", top.short)
        assert not any("debian-bookworm" in n for n in d.notes)
    finally:
        server.shutdown()


def test_a_driver_floor_change_is_a_note_not_a_moved_registry(tmp_path):
    root = site_repo(tmp_path / "site", "one")
    edit(root, lambda d: d["site"].update(driver_floor="590.44.01"))
    commit(root, "two")
    d = spec_diff(root, "one", "two")
    assert any("driver floor 580.65.06 -> 590.44.01" in n for n in d.notes), d.notes
    assert not any("every image and tag reference moves" in n for n in d.notes)
    assert all(n.change == "unchanged" for s in d.stacks for n in s.nodes)


@pytest.mark.parametrize("linked", ["stacks.yaml", "layers"])
def test_a_revision_holding_a_link_to_an_absolute_path_is_refused(tmp_path, linked):
    """Before: exit 70 (tarfile's filter error). A link is refused by name, and the file it points to
    is neither read nor quoted."""
    root = site_repo(tmp_path / "site", "one")
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "stacks.yaml").write_text("root:$6$hidden-hash:19000:0:99999:7:::\n")
    target = root / linked
    shutil.move(str(target), str(tmp_path / f"moved-{linked}"))
    target.symlink_to(secret / "stacks.yaml" if linked == "stacks.yaml" else secret)
    commit(root, "two")
    for _ in range(2):
        res = run_cli("diff", "one", "two", "-f", root / "stacks.yaml")
        assert res.code == 2, res.output
        assert f"two: {linked} is a symbolic link" in res.err and "hidden-hash" not in res.output
        assert "internal error" not in res.output and "Traceback" not in res.output


def test_diff_reads_a_site_s_kind_folders(cli, tmp_path):
    """`diff --kinds DIR`, as every other command that reads a stacks file: without it a kind of the site's
    own is unknown on both sides (exit 2), with it the change is explained."""
    kinds = tmp_path / "site-kinds"
    shutil.copytree(REPO / "layers" / "runtime-env", kinds / "site-env")
    root = site_repo(tmp_path / "site", "v1")

    def site_kind(d):
        d["runtimes"]["cpu-env"]["kind"] = "site-env"
    edit(root, site_kind)
    commit(root, "v2")

    def threads(d):
        d["runtimes"]["cpu-env"]["params"]["env"]["OMP_NUM_THREADS"] = "6"
    edit(root, threads)
    file = str(root / "stacks.yaml")
    missing = cli("diff", "v2", "-f", file, "--offline")
    assert missing.code == 2 and "unknown layer kind 'site-env'" in missing.err, missing.output
    res = cli("diff", "v2", "-f", file, "--offline", "--kinds", str(kinds))
    assert res.code == 1, res.output
    assert "dockerfile: env: OMP_NUM_THREADS 2 -> 6" in res.out


def _lock(root: Path, steps: list) -> None:
    from builder.load.spec import load_spec
    spec = load_spec(root / "stacks.yaml")
    entry = {"stack": "cpu-smoke", "parent": "p", "definition": layer_definition(spec, spec.stack("cpu-smoke"), "ds-0.19.8-cpu"),
             "resolved": "2026-12-02T12:00:00Z", "steps": steps}
    (root / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {}, "python": {"ds-0.19.8-cpu": entry}}))


def _d(name, version, sha):
    return {"name": name, "version": version, "sha256": sha * 32, "url": f"https://x/{name}.whl", "requested": False}


def test_a_lock_change_is_shown_package_by_package_next_to_the_keys_it_changes(tmp_path):
    """Issue 21: diff shows what the lock changed per layer (old -> new, added, removed), as the cause of
    the keys it changes; the layers beneath keep theirs."""
    root = site_repo(tmp_path / "site", "unlocked")
    _lock(root, [[_d("deepspeed", "0.19.8", "9e"), _d("numpy", "2.4.6", "89")]])
    commit(root, "locked")
    _lock(root, [[_d("deepspeed", "0.19.8", "9e"), _d("numpy", "2.4.7", "8a"), _d("six", "1.17.0", "12")]])
    commit(root, "numpy")
    nodes = changed(spec_diff(root, "unlocked", "locked"), "cpu-smoke")
    assert list(nodes) == ["ds-0.19.8-cpu", "cpu-env", "smoke-train"]
    ds = causes(nodes["ds-0.19.8-cpu"])
    assert ds["python"].detail == "locked: 2 distribution(s) (pip resolved at build time before)"
    assert "+ python -m pip install --progress-bar off --no-build-isolation --no-deps --require-hashes -r " \
           "/imgbuild-lock/00.txt" in ds["dockerfile"].lines
    nodes = changed(spec_diff(root, "locked", "numpy"), "cpu-smoke")
    ds = causes(nodes["ds-0.19.8-cpu"])
    assert set(ds) == {"python"}, ds
    assert ds["python"].detail == (f"lock: numpy 2.4.6 ({'89' * 6}) -> 2.4.7 ({'8a' * 6}), + six 1.17.0 ({'12' * 6})")
    res = run_cli("diff", "locked", "numpy", "-f", root / "stacks.yaml")
    assert res.code == 1 and "lock: numpy 2.4.6" in res.out, res.output
