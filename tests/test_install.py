"""imgbuild installs like any Python tool: a wheel built from the repository carries the layer kinds
and the skeleton (builder/_shipped/), and `pip install` of it into a fresh venv gives a working
check/render/plan next to a stacks.yaml outside the checkout, with the same content keys as the
checkout and site kinds added by --kinds or $IMGBUILD_KINDS.

One wheel and one venv for the module (about 15 s: the build backend and the dependencies come from
the package index, or pip's cache). The wheel is built from a copy of the source, so the checkout
gets no build/ or egg-info.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.plan.keys import make_plan
from builder.load.spec import load_spec
from conftest import GOLDEN, REPO, STACKS, run_cli, shipped_data, write_stacks
from test_kindpath import kinds_line, site_kind, with_site_kind

pytestmark = pytest.mark.slow

SOURCE = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "builder", "layers", "Dockerfile.j2")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "_shipped")
PROBE_YAML = """\
description: A hook script sent in the build context (files/ must reach the wheel, modes included)
role: layer
needs: [torch]
"""
PROBE_FRAGMENT = "COPY files/ /opt/imgbuild-hook/\nRUN /opt/imgbuild-hook/hook.sh\n"


@dataclass
class Installed:
    src: Path      # the copy the wheel was built from (its layers/ holds the probe kind too)
    wheel: Path
    venv: Path
    work: Path     # a folder outside the checkout

    def imgbuild(self, *args, env: dict | None = None) -> subprocess.CompletedProcess:
        environ = {k: v for k, v in os.environ.items()
                   if k not in ("IMGBUILD_KINDS", "IMGBUILD_STACKS", "PYTHONPATH", "VIRTUAL_ENV")}
        return subprocess.run([str(self.venv / "bin" / "imgbuild"), *map(str, args)], cwd=self.work,
                              env={**environ, **(env or {})}, capture_output=True, text=True, timeout=120)


def run(*cmd, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCE:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=IGNORE)
        else:
            shutil.copy2(REPO / name, src / name)
    # No shipped kind has a files/ folder today: a probe kind with one proves they ship, modes kept.
    probe = src / "layers" / "zz-probe"
    (probe / "files").mkdir(parents=True)
    (probe / "kind.yaml").write_text(PROBE_YAML)
    (probe / "fragment.j2").write_text(PROBE_FRAGMENT)
    (probe / "files" / "hook.sh").write_text("#!/bin/sh\necho hook\n")
    (probe / "files" / "hook.sh").chmod(0o755)
    (probe / "files" / "data.txt").write_text("data\n")
    (probe / "files" / "data.txt").chmod(0o644)
    dist = tmp / "dist"
    run(sys.executable, "-m", "pip", "wheel", src, "--no-deps", "-q", "-w", dist)
    wheel = next(dist.glob("imgbuild-*.whl"))
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", venv)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    work = tmp / "work"
    work.mkdir()
    shutil.copy2(STACKS, work / "stacks.yaml")
    shutil.copy2(STACKS.with_name("stacks.lock.yaml"), work / "stacks.lock.yaml")   # a site commits the two together
    assert not work.resolve().is_relative_to(REPO)
    return Installed(src=src, wheel=wheel, venv=venv, work=work)


def test_the_wheel_carries_every_kind_file_and_the_skeleton(installed):
    with zipfile.ZipFile(installed.wheel) as whl:
        entries = {i.filename: i for i in whl.infolist()}
        shipped = "builder/_shipped/"
        expect = [p for p in sorted((installed.src / "layers").rglob("*")) if p.is_file()]
        assert {p.relative_to(installed.src / "layers").as_posix() for p in expect} >= {
            "macros.j2", "deepspeed/kind.yaml", "deepspeed/fragment.j2", "zz-probe/files/hook.sh"}
        for path in expect + [installed.src / "Dockerfile.j2"]:
            name = shipped + path.relative_to(installed.src).as_posix()
            assert name in entries, name
            assert whl.read(name) == path.read_bytes(), name
        mode = {n: stat.S_IMODE(entries[shipped + "layers/zz-probe/files/" + n].external_attr >> 16)
                for n in ("hook.sh", "data.txt")}
        assert mode["hook.sh"] & 0o111 and not mode["data.txt"] & 0o111, mode
        assert not [n for n in entries if "__pycache__" in n or n.startswith(("layers/", "Dockerfile.j2"))]


def test_check_all_outside_the_checkout(installed):
    res = installed.imgbuild("check", "--all")
    assert res.returncode == 0, res.stdout + res.stderr
    line = kinds_line(res.stdout)
    assert line.startswith("kinds: cpu-torch, deepspeed, megatron, nccl-tests, ngc-pytorch, project, runtime-env, "
                           "transformer-engine (shipped: ")
    assert "/site-packages/builder/_shipped/layers)" in line and str(REPO) not in res.stdout
    assert "ok: stacks.yaml: 4 stack(s)" in res.stdout


def test_render_gives_the_golden_files(installed, tmp_path):
    out = tmp_path / "out"
    res = installed.imgbuild("render", "stack=cpu-smoke", "--out", out)
    assert res.returncode == 0, res.stdout + res.stderr
    golden = sorted(p.name for p in (GOLDEN / "cpu-smoke").glob("*.Dockerfile"))
    assert sorted(p.name for p in (out / "cpu-smoke").iterdir()) == golden and golden
    for name in golden:
        assert (out / "cpu-smoke" / name).read_text() == (GOLDEN / "cpu-smoke" / name).read_text(), name


def test_plan_json_equals_the_checkouts(installed):
    res = installed.imgbuild("plan", "--all", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    here = run_cli("plan", "--all", "--json", "-f", STACKS)
    assert here.code == 0, here.output
    theirs, ours = json.loads(res.stdout), json.loads(here.out)
    assert [n["full_key"] for n in theirs["nodes"]] == [n["full_key"] for n in ours["nodes"]]
    assert theirs == ours


def test_site_kinds_by_option_env_and_beside_the_stacks_file(installed, tmp_path):
    kinds = site_kind(tmp_path / "site-kinds").resolve()
    file = with_site_kind(tmp_path / "site")
    for args, env in ((["--kinds", kinds], None), ([], {"IMGBUILD_KINDS": str(kinds)})):
        res = installed.imgbuild("check", "stack=cpu-smoke", "-f", file, *args, env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        line = kinds_line(res.stdout)
        assert line.startswith(f"kinds: einops (site: {kinds}); cpu-torch, deepspeed, project, runtime-env (shipped: ")
        assert line.endswith("/site-packages/builder/_shipped/layers)")
    res = installed.imgbuild("check", "stack=cpu-smoke", "-f", file)       # not given: not found
    assert res.returncode == 2 and "unknown layer kind 'einops'" in res.stderr, res.stdout + res.stderr
    shutil.copytree(kinds, file.parent / "layers")                        # beside the stacks file: found
    res = installed.imgbuild("check", "stack=cpu-smoke", "-f", file)
    assert res.returncode == 0, res.stdout + res.stderr
    assert kinds_line(res.stdout).startswith(f"kinds: einops (site: {(file.parent / 'layers').resolve()}); ")


def test_a_shipped_kind_with_files_keeps_its_key_from_the_wheel(installed, tmp_path):
    """The probe kind (files/ with an executable) from the wheel and from its source folder: one key."""
    data = shipped_data()
    data["layers"]["hook"] = {"kind": "zz-probe"}
    data["stacks"]["cpu-smoke"]["layers"].append("hook")
    file = write_stacks(tmp_path / "probe", data)
    res = installed.imgbuild("plan", "stack=cpu-smoke", "--json", "-f", file)
    assert res.returncode == 0, res.stdout + res.stderr
    theirs = json.loads(res.stdout)["stacks"]["cpu-smoke"]["nodes"]
    spec = load_spec(file, kinds=[installed.src / "layers"])
    assert [(rel, mode) for rel, _, mode in spec.kinds["zz-probe"].files] == [("files/data.txt", "644"),
                                                                              ("files/hook.sh", "755")]
    here = run_cli("plan", "stack=cpu-smoke", "--json", "-f", file, "--kinds", installed.src / "layers")
    assert here.code == 0, here.output
    assert theirs == json.loads(here.out)["stacks"]["cpu-smoke"]["nodes"]
    assert len(theirs) == len(make_plan(spec, ["cpu-smoke"]).stacks["cpu-smoke"]) == 5
