"""Building from the lock (issue 21): each pip command installs exactly the set the lock file resolved,
hash-checked, --no-deps; the set is part of the content key; a layer without a resolved set is said at
build time and refused under --require-locked. No engine here: tests/test_docker_resolve.py builds it."""

from __future__ import annotations

import json

import yaml

from conftest import STACKS, run_cli
from builder.load.spec import load_spec
from builder.plan.keys import layer_definition, make_plan
from builder.core.lockfile import LockedDist, LockedPython
from builder.plan.pinning import pinned, requirement_lines

DIGEST = {"debian-bookworm": "sha256:" + "ab" * 32}


def dist(name, version, sha="", url="", requested=False):
    return {"name": name, "version": version, "sha256": sha if sha is None else (sha or (name[:1] * 64)),
            "url": url or f"https://files.example/{name}-{version}.whl", "requested": requested}


DS_STEP = [dist("deepspeed", "0.19.8", "9e" * 32, requested=True), dist("hjson", "3.1.0", "65" * 32),
           dist("numpy", "2.4.6", "89" * 32)]


def locked_site(tmp_path, python: dict, edit=lambda text: text):
    """The shipped stacks.yaml in tmp_path with a lock file holding these python entries (layer -> steps),
    each resolved for the layer as defined there."""
    file = tmp_path / "stacks.yaml"
    file.write_text(edit(STACKS.read_text()))
    spec = load_spec(file)
    stack = spec.stack("cpu-smoke")
    entries = {name: {"stack": "cpu-smoke", "parent": "p", "definition": layer_definition(spec, stack, name),
                      "resolved": "2026-12-02T12:00:00Z", "steps": steps} for name, steps in python.items()}
    (tmp_path / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {}, "python": entries}))
    return file


def node(file, name):
    spec = load_spec(file)
    return next(n for n in make_plan(spec, ["cpu-smoke"], DIGEST).nodes.values() if n.name == name)


def test_the_pip_command_installs_the_locked_set_by_hash_and_keeps_its_options(tmp_path):
    n = node(locked_site(tmp_path, {"ds-0.19.8-cpu": [DS_STEP]}), "ds-0.19.8-cpu")
    assert "python -m pip install --progress-bar off --no-build-isolation --no-deps --require-hashes " \
           "-r /imgbuild-lock/00.txt\n" in n.dockerfile, n.dockerfile
    assert "deepspeed==0.19.8" not in n.dockerfile                    # nothing left for pip to resolve
    assert "RUN --mount=type=bind,source=imgbuild-lock,target=/imgbuild-lock \\\n" in n.dockerfile
    assert "export DS_BUILD_CPU_ADAM=1" in n.dockerfile               # the layer's own build environment stays
    assert n.locked == ("deepspeed==0.19.8 --hash=sha256:" + "9e" * 32 + "\nhjson==3.1.0 --hash=sha256:" + "65" * 32
                        + "\nnumpy==2.4.6 --hash=sha256:" + "89" * 32 + "\n",)
    check = next(c for c in n.checks if c.id == "python-lock.ds-0.19.8-cpu")
    assert check.check == "requirements" and dict(check.args)["installed"] == [
        "deepspeed==0.19.8", "hjson==3.1.0", "numpy==2.4.6"]


def test_a_changed_transitive_version_is_a_changed_key(tmp_path):
    """The promise at the plan: the same stacks.yaml with another resolved numpy is another image key (and
    every key above it), and the unlocked layer's key is a third."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "stacks.yaml").write_text(STACKS.read_text())
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    fa = locked_site(a, {"ds-0.19.8-cpu": [DS_STEP]})
    fb = locked_site(b, {"ds-0.19.8-cpu": [DS_STEP[:2] + [dist("numpy", "2.4.7", "8a" * 32)]]})
    keys = [node(f, "ds-0.19.8-cpu").key for f in (plain / "stacks.yaml", fa, fb)]
    assert len(set(keys)) == 3, keys
    assert node(fa, "smoke-train").key != node(fb, "smoke-train").key
    assert node(fa, "cpu-torch-2.13").key == node(fb, "cpu-torch-2.13").key   # beneath: unchanged


def test_an_entry_resolved_for_another_definition_is_not_used(tmp_path):
    """The lock was written for the layer as it was; after an edit of it (or beneath it) the layer is
    rendered from stacks.yaml again, and `lock --check` says the entry is stale."""
    file = locked_site(tmp_path, {"ds-0.19.8-cpu": [DS_STEP]})
    file.write_text(file.read_text().replace("ops: [cpu_adam, deepspeed_shm_comm]", "ops: [cpu_adam]"))
    n = node(file, "ds-0.19.8-cpu")
    assert not n.locked and "deepspeed==0.19.8" in n.dockerfile and "--require-hashes" not in n.dockerfile
    assert run_cli("lock", "--check", "-f", file).code == 1


def test_a_source_folder_is_installed_after_the_locked_set_without_its_dependencies():
    text = "RUN cd /opt/project \\\n && python -m pip install --progress-bar off -e /opt/project \\\n && echo ok\n"
    entry = LockedPython(stack="s", parent="p", definition="d", resolved="r", steps=((
        LockedDist("smoke-train", "0.1", None, "file:///opt/project", True),
        LockedDist("six", "1.17.0", "ab" * 32, "https://x/six.whl", False)),))
    out, files = pinned(text, entry)
    assert ("python -m pip install --progress-bar off --no-deps --require-hashes -r /imgbuild-lock/00.txt \\\n"
            " && python -m pip install --progress-bar off --no-deps -e /opt/project \\\n && echo ok") in out, out
    assert files == ("six==1.17.0 --hash=sha256:" + "ab" * 32 + "\n",)
    only = LockedPython(stack="s", parent="p", definition="d", resolved="r", steps=(entry.steps[0][:1],))
    out, _ = pinned(text, only)
    assert "--require-hashes" not in out and "pip install --progress-bar off --no-deps -e /opt/project" in out


def test_a_wheel_of_the_wheelhouse_is_named_by_its_path_and_hash():
    step = (LockedDist("torch", "2.13.0+cpu", "67" * 32, "file:///wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", True),
            LockedDist("ninja", "1.11.1.4", "cd" * 32, "https://x/ninja.whl", True))
    assert requirement_lines(step) == ("ninja==1.11.1.4 --hash=sha256:" + "cd" * 32 + "\n"
                                       "/wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl --hash=sha256:"
                                       + "67" * 32 + "\n")


def test_a_lock_of_another_shape_than_the_layer_is_not_used(tmp_path):
    n = node(locked_site(tmp_path, {"ds-0.19.8-cpu": [DS_STEP, DS_STEP]}), "ds-0.19.8-cpu")
    assert not n.locked and "deepspeed==0.19.8" in n.dockerfile


def test_require_locked_refuses_a_layer_pip_resolves_at_build_time(tmp_path):
    """IB096: an error under --require-locked (CI), naming the layer and the command that fixes it; a
    layer the lock resolved is not named."""
    file = locked_site(tmp_path, {"ds-0.19.8-cpu": [DS_STEP]})
    res = run_cli("check", "stack=cpu-smoke", "--require-locked", "--json", "-f", file)
    assert res.code == 3, res.output
    ib096 = {f["key"]: f for f in json.loads(res.out)["findings"] if f["rule"] == "IB096"}
    assert set(ib096) == {"layers.cpu-torch-2.13", "projects.smoke-train"}, sorted(ib096)
    assert ib096["layers.cpu-torch-2.13"]["severity"] == "error"
    assert "imgbuild lock python=cpu-torch-2.13" in ib096["layers.cpu-torch-2.13"]["fix"]
    assert run_cli("check", "stack=cpu-smoke", "-f", file).code == 0     # without the flag: not a finding of check


def test_the_build_context_holds_the_lock_files(tmp_path):
    from builder.ship.hostconf import HostConf
    from builder.ship.pipeline import assemble_context
    n = node(locked_site(tmp_path, {"ds-0.19.8-cpu": [DS_STEP]}), "ds-0.19.8-cpu")
    ctx = assemble_context(n, HostConf(None, None, None, None), tmp_path / "ctx")
    assert (ctx / "imgbuild-lock" / "00.txt").read_text() == n.locked[0]


def test_a_bound_tree_keeps_its_folder_and_extras_and_loses_its_requirements_files():
    """pip kind `tree` (NeMo's `pip install ... -r tools/x/requirements.txt ".[all]"` of a partial checkout, run
    in the bound folder): the lock replaces the requirements file's lines with the hashed set and installs the
    tree itself '.[all]', --no-deps, after it (before the fix '.[all]' was neither '.' nor a recorded folder,
    so the tree was dropped from the locked command)."""
    text = ("RUN cd /workspace && python -m pip install --progress-bar off --no-build-isolation num2words==0.5.14 "
            "-r tools/ctc_segmentation/requirements.txt '.[all]'\n")
    entry = LockedPython(stack="s", parent="p", definition="d", resolved="r", steps=((
        LockedDist("nemo-toolkit", "2.0.0rc1", None, "file:///workspace", True),
        LockedDist("num2words", "0.5.14", "ab" * 32, "https://x/num2words.whl", True)),))
    out, files = pinned(text, entry)
    assert ("cd /workspace && python -m pip install --progress-bar off --no-build-isolation --no-deps --require-hashes "
            "-r /imgbuild-lock/00.txt \\\n && python -m pip install --progress-bar off --no-build-isolation --no-deps "
            "'.[all]'\n") in out, out
    assert "tools/ctc_segmentation" not in out and files == ("num2words==0.5.14 --hash=sha256:" + "ab" * 32 + "\n",)


def _dir(path):
    path.mkdir()
    return path


def _with_mamba(build_env=None):
    def edit(text):
        data = yaml.safe_load(text)
        params = {"packages": ["mamba-ssm==2.2.2"], **({"build_env": build_env} if build_env else {})}
        data["layers"]["mamba"] = {"kind": "pip", "params": params}
        data["stacks"]["cpu-smoke"]["layers"].append("mamba")
        return yaml.safe_dump(data, sort_keys=False)
    return edit


def test_a_locked_sdist_that_downloads_its_own_prebuilt_wheel_is_refused_until_told_to_compile(tmp_path):
    """IB099 (examples/real F21): mamba-ssm from its sdist runs a setup.py that downloads a prebuilt wheel from
    its GitHub release unless MAMBA_FORCE_BUILD=TRUE: a binary no lock hash covers. An error naming the layer,
    the package and the variable; none once the layer sets it, and none for a wheel (no setup.py runs)."""
    sdist = [dist("mamba-ssm", "2.2.2", "4d" * 32, url="https://files.example/mamba_ssm-2.2.2.tar.gz", requested=True)]
    res = run_cli("check", "-f", locked_site(_dir(tmp_path / "a"), {"mamba": [sdist]}, _with_mamba()))
    assert res.code == 3 and "IB099" in res.output, res.output
    assert "mamba-ssm 2.2.2 from source" in res.output and "MAMBA_FORCE_BUILD" in res.output, res.output
    told = locked_site(_dir(tmp_path / "b"), {"mamba": [sdist]}, _with_mamba({"MAMBA_FORCE_BUILD": "TRUE"}))
    assert "IB099" not in run_cli("check", "-f", told).output
    wheel = [dist("mamba-ssm", "2.2.2", "4d" * 32, url="https://files.example/mamba_ssm-2.2.2-cp311-cp311-linux_x86_64.whl",
                  requested=True)]
    assert "IB099" not in run_cli("check", "-f", locked_site(_dir(tmp_path / "c"), {"mamba": [wheel]}, _with_mamba())).output


def test_a_layer_that_removes_a_locked_distribution_is_not_held_to_it_by_the_lock_beneath(tmp_path):
    """The lock's check of the DeepSpeed layer goes up the chain (nothing above may change its set), except
    for what a layer above declares removed with its reason: that layer's image is checked for its absence,
    not for the locked version (found by the e2e primitives stack, which removes ninja above a locked layer)."""
    def edit(text):
        data = yaml.safe_load(text)
        data["layers"]["trim"] = {"kind": "pip", "params": {"packages": ["six==1.17.0"], "uninstall": {
            "packages": ["HJSON"], "reason": "not needed at run time"}}}
        chain = data["stacks"]["cpu-smoke"]["layers"]
        chain.insert(chain.index("ds-0.19.8-cpu") + 1, "trim")
        return yaml.safe_dump(data, sort_keys=False)
    file = locked_site(tmp_path, {"ds-0.19.8-cpu": [DS_STEP]}, edit)
    lock_of = lambda n: dict(next(c for c in n.checks if c.id == "python-lock.ds-0.19.8-cpu").args)["installed"]
    assert "hjson==3.1.0" in lock_of(node(file, "ds-0.19.8-cpu"))
    for above in ("trim", "cpu-env"):
        assert lock_of(node(file, above)) == ["deepspeed==0.19.8", "numpy==2.4.6"], above
    trim = next(c for c in node(file, "trim").checks if c.id == "pip.requirements")
    assert dict(trim.args)["absent"] == ["HJSON"]
