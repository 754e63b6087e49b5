"""Where layer kinds come from (builder/kindpath.py): the shipped kinds, plus the site's folders.

Precedence, highest first: --kinds folders in the order given (default $IMGBUILD_KINDS), layers/
beside the stacks file, the shipped layers/. Site folders add kinds; a site kind with a lower
kind's name overrides it, and `check` says where each kind used came from. A Dockerfile.j2 beside
the stacks file replaces the shipped skeleton. Folder paths never enter a content key.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from builder.load import kindpath
from builder.errors import SpecError
from builder.load.kindpath import shipped_root
from builder.plan.keys import make_plan
from builder.plan.render import render_layer
from builder.load.spec import load_spec
from conftest import REPO, STACKS, run_cli, shipped_data, write_stacks
from test_spec_errors import unruled

SHIPPED = REPO / "layers"
FLASH_YAML = """\
description: einops at a pinned version (a site kind, not shipped with imgbuild)
role: layer
needs: [torch]
params:
  version:
    type: version
    required: true
checks:
  - id: import
    check: import
    args: {module: einops}
"""
FLASH_FRAGMENT = """\
{% import "macros.j2" as m %}
RUN {{ m.net() }}
    {{ m.net_env() }}
    python -m pip install --progress-bar off {{ ("einops==" ~ params.version) | sh }}
"""


@pytest.fixture(autouse=True)
def _no_env_kinds(monkeypatch):
    monkeypatch.delenv(kindpath.ENV, raising=False)


def site_kind(folder: Path) -> Path:
    """A kinds folder holding the site kind einops (its fragment imports the shipped macros.j2)."""
    (folder / "einops").mkdir(parents=True)
    (folder / "einops" / "kind.yaml").write_text(FLASH_YAML)
    (folder / "einops" / "fragment.j2").write_text(FLASH_FRAGMENT)
    return folder


def runtime_env(folder: Path, marker: str) -> Path:
    """A kinds folder whose runtime-env is the shipped one with a marker comment in its fragment."""
    shutil.copytree(SHIPPED / "runtime-env", folder / "runtime-env")
    fragment = folder / "runtime-env" / "fragment.j2"
    fragment.write_text(f"# {marker}\n" + fragment.read_text())
    return folder


def with_site_kind(folder: Path) -> Path:
    """The shipped stacks, cpu-smoke with an einops layer (a site kind) on top of DeepSpeed."""
    data = shipped_data()
    data["layers"]["einops-0.8"] = {"kind": "einops", "params": {"version": "0.8.1"}}
    data["stacks"]["cpu-smoke"]["layers"].append("einops-0.8")
    return write_stacks(folder, data, lock=True)


def kinds_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("kinds: ")]
    assert len(lines) == 1, out
    return lines[0]


def text_of(spec, stack: str, layer: str) -> str:
    st = spec.stack(stack)
    return render_layer(spec, st, next(d for d in st.chain if d.name == layer))


# -- the shipped kinds ----------------------------------------------------------------------------

def test_the_shipped_kinds_are_the_checkouts_top_level_here():
    assert shipped_root() == REPO
    spec = load_spec(STACKS)
    assert [f.origin for f in spec.kinds.folders] == ["shipped"]   # the checkout's stacks.yaml adds nothing
    assert all(k.folder == SHIPPED / name for name, k in spec.kinds.items())


def test_check_names_the_folder_of_every_kind_used():
    res = run_cli("check", "--all", "-f", STACKS)
    assert res.code == 0, res.output
    assert kinds_line(res.out) == (f"kinds: cpu-torch, deepspeed, megatron, nccl-tests, ngc-pytorch, project, runtime-env, "
                                   f"transformer-engine (shipped: {SHIPPED})")
    assert f"skeleton: Dockerfile.j2 (shipped: {REPO / 'Dockerfile.j2'})" in res.out.splitlines()


def test_an_installed_package_reads_its_packaged_copy(tmp_path, monkeypatch):
    """Outside a checkout (site-packages/builder), the copy a wheel carries in builder/_shipped/."""
    package = tmp_path / "site-packages" / "builder"
    packaged = package / "_shipped"
    monkeypatch.setattr(kindpath, "PACKAGE", package)
    monkeypatch.setattr(kindpath, "PACKAGED", packaged)
    package.mkdir(parents=True)
    with pytest.raises(SpecError, match="carries no layer kinds"):
        shipped_root()
    shutil.copytree(SHIPPED, packaged / "layers")
    shutil.copy2(REPO / "Dockerfile.j2", packaged / "Dockerfile.j2")
    assert shipped_root() == packaged
    # a checkout (pyproject.toml, layers/, Dockerfile.j2 beside the package) wins over a stray copy
    for name in ("pyproject.toml", "Dockerfile.j2"):
        shutil.copy2(REPO / name, package.parent / name)
    shutil.copytree(SHIPPED, package.parent / "layers")
    assert shipped_root() == package.parent


# -- site folders add kinds and override by name --------------------------------------------------

def test_layers_beside_the_stacks_file_add_to_the_shipped_kinds(tmp_path):
    site = tmp_path / "site"
    site_kind(site / "layers")
    file = with_site_kind(site)
    spec = load_spec(file)
    assert set(spec.kinds) == {p.name for p in SHIPPED.iterdir() if p.is_dir()} | {"einops"}
    assert spec.kinds["einops"].folder == (site / "layers" / "einops").resolve()
    assert spec.kinds["deepspeed"].folder == SHIPPED / "deepspeed"
    text = text_of(spec, "cpu-smoke", "einops-0.8")
    assert "pip install --progress-bar off einops==0.8.1" in text
    assert "--mount=type=secret,id=ca-bundle" in text   # the shipped macros.j2, imported by a site fragment
    res = run_cli("check", "stack=cpu-smoke", "-f", file)
    assert res.code == 0, res.output
    assert kinds_line(res.out) == (f"kinds: einops (site: {(site / 'layers').resolve()}); "
                                   f"cpu-torch, deepspeed, project, runtime-env (shipped: {SHIPPED})")


def test_the_layers_beneath_a_site_kind_keep_their_keys(tmp_path):
    site = tmp_path / "site"
    site_kind(site / "layers")
    plan = make_plan(load_spec(with_site_kind(site)), ["cpu-smoke"])
    shipped = make_plan(load_spec(STACKS), ["cpu-smoke"])
    chain = [n.name for n in plan.chain("cpu-smoke")]
    assert chain[:2] == ["cpu-torch-2.13", "ds-0.19.8-cpu"] and "einops-0.8" in chain
    assert plan.stacks["cpu-smoke"][:2] == shipped.stacks["cpu-smoke"][:2]


def test_a_site_kind_named_like_a_shipped_one_overrides_it(tmp_path):
    site = tmp_path / "site"
    runtime_env(site / "layers", "the site's runtime-env")
    file = write_stacks(site, shipped_data())
    spec = load_spec(file)
    assert spec.kinds["runtime-env"].folder == (site / "layers" / "runtime-env").resolve()
    assert text_of(spec, "cpu-smoke", "cpu-env").count("# the site's runtime-env") == 1
    assert "# the site's" not in text_of(spec, "cpu-smoke", "ds-0.19.8-cpu")
    res = run_cli("check", "stack=cpu-smoke", "-f", file)
    assert res.code == 0, res.output
    assert kinds_line(res.out) == (f"kinds: runtime-env [overrides shipped] (site: {(site / 'layers').resolve()}); "
                                   f"cpu-torch, deepspeed, project (shipped: {SHIPPED})")


def test_kinds_option_and_env_come_first_in_the_order_given(tmp_path, monkeypatch):
    a = runtime_env(tmp_path / "a", "from a").resolve()
    b = site_kind(runtime_env(tmp_path / "b", "from b")).resolve()
    beside = runtime_env(tmp_path / "site" / "layers", "from beside").resolve()
    file = with_site_kind(tmp_path / "site")

    def origin(spec, kind="runtime-env") -> Path:
        return spec.kinds[kind].folder.parent

    assert origin(load_spec(file, kinds=[a, b])) == a and origin(load_spec(file, kinds=[a, b]), "einops") == b
    assert origin(load_spec(file, kinds=[b, a])) == b
    spec = load_spec(file, kinds=[a, b])
    assert [f.path for f in spec.kinds.folders] == [a, b, beside, SHIPPED]
    assert [f.path for f in spec.kinds.shadowed["runtime-env"]] == [b, beside, SHIPPED]
    with pytest.raises(SpecError, match="unknown layer kind 'einops'"):
        load_spec(file)                                    # beside alone has no einops
    monkeypatch.setenv(kindpath.ENV, f"{b}{os.pathsep}{os.pathsep}{a}")
    assert origin(load_spec(file)) == b                     # $IMGBUILD_KINDS, os.pathsep-separated
    assert origin(load_spec(STACKS, kinds=[a])) == a        # an explicit list replaces the variable

    res = run_cli("check", "stack=cpu-smoke", "-f", file, "--kinds", a, "--kinds", b)
    assert res.code == 0, res.output
    assert kinds_line(res.out) == (f"kinds: runtime-env [overrides {b}, {beside}, shipped] (site: {a}); "
                                   f"einops (site: {b}); cpu-torch, deepspeed, project (shipped: {SHIPPED})")
    res = run_cli("check", "stack=cpu-smoke", "-f", file)      # from the environment
    assert res.code == 0 and f"runtime-env [overrides {a}, {beside}, shipped] (site: {b})" in res.out, res.output
    res = run_cli("render", "stack=cpu-smoke", "-f", file, "--kinds", a, "--kinds", b)
    assert res.code == 0 and "# from a" in res.out and "# from b" not in res.out, res.output


def test_a_folder_named_twice_or_the_shipped_one_counts_once(tmp_path):
    a = runtime_env(tmp_path / "a", "from a").resolve()
    spec = load_spec(STACKS, kinds=[a, SHIPPED, a])
    assert [(f.path, f.origin) for f in spec.kinds.folders] == [(a, "site"), (SHIPPED, "shipped")]


def test_a_missing_kinds_folder_is_a_spec_error(tmp_path):
    res = run_cli("check", "-f", STACKS, "--kinds", tmp_path / "nope")
    assert res.code == 2 and "Traceback" not in res.err
    assert unruled(res.err).startswith(f"spec error: {tmp_path / 'nope'}: kinds folder not found"), res.err


def test_a_fragment_without_kind_yaml_shadows_nothing(tmp_path):
    """A higher folder's runtime-env/fragment.j2 without kind.yaml is not a kind: the kind that won
    the name renders its own fragment."""
    x = tmp_path / "x"
    (x / "runtime-env").mkdir(parents=True)
    (x / "runtime-env" / "fragment.j2").write_text("# not a kind\n")
    site_kind(x)
    spec = load_spec(with_site_kind(tmp_path / "s"), kinds=[x])
    assert spec.kinds["runtime-env"].folder == SHIPPED / "runtime-env"
    assert text_of(spec, "cpu-smoke", "cpu-env") == text_of(load_spec(STACKS), "cpu-smoke", "cpu-env")


def test_shared_templates_follow_the_kind_order(tmp_path):
    """macros.j2 is looked up in the kind folders in priority order: a site folder's own replaces the
    shipped one, for the shipped fragments too."""
    x = tmp_path / "x"
    x.mkdir()
    (x / "macros.j2").write_text((SHIPPED / "macros.j2").read_text().replace(
        "--mount=type=secret,id=ca-bundle", "--mount=type=secret,id=site-ca"))
    spec = load_spec(STACKS, kinds=[x])
    assert "id=site-ca" in text_of(spec, "cpu-smoke", "ds-0.19.8-cpu")
    assert "id=site-ca" not in text_of(load_spec(STACKS), "cpu-smoke", "ds-0.19.8-cpu")


def test_a_skeleton_beside_the_stacks_file_replaces_the_shipped_one(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "Dockerfile.j2").write_text((REPO / "Dockerfile.j2").read_text().replace(
        "ARG PARENT\n", "# the site's skeleton\nARG PARENT\n"))
    file = write_stacks(site, shipped_data())
    spec = load_spec(file)
    assert "\n# the site's skeleton\nARG PARENT\n" in text_of(spec, "cpu-smoke", "cpu-env")
    res = run_cli("check", "stack=cpu-smoke", "-f", file)
    assert res.code == 0, res.output
    assert f"skeleton: Dockerfile.j2 [overrides shipped] (site: {(site / 'Dockerfile.j2').resolve()})" in res.out


# -- content keys ---------------------------------------------------------------------------------

def test_keys_do_not_depend_on_the_folder_a_kind_came_from(tmp_path):
    """Every shipped kind overridden by an identical copy, in folders of other names elsewhere: the
    same text and the same keys. A files/ folder counts by its content and modes, not its place."""
    def copy(where: Path, hook: bool) -> Path:
        shutil.copytree(SHIPPED, where)
        if hook:
            (where / "deepspeed" / "files").mkdir()
            (where / "deepspeed" / "files" / "hook.sh").write_text("#!/bin/sh\n")
            os.chmod(where / "deepspeed" / "files" / "hook.sh", 0o755)
        return where

    shipped = load_spec(STACKS)
    plain = load_spec(STACKS, kinds=[copy(tmp_path / "elsewhere" / "kinds", hook=False)])
    assert {plain.kinds.origin(n).origin for n in plain.kinds} == {"site"}
    assert make_plan(plain).stacks == make_plan(shipped).stacks
    one = load_spec(STACKS, kinds=[copy(tmp_path / "one" / "k1", hook=True)])
    two = load_spec(write_stacks(tmp_path / "two", shipped_data(), lock=True), kinds=[copy(tmp_path / "two" / "k2", hook=True)])
    assert one.kinds["deepspeed"].files == two.kinds["deepspeed"].files != ()
    assert make_plan(one).stacks == make_plan(two).stacks != make_plan(shipped).stacks
