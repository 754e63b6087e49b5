"""probe and lock against the real engine and the local registry: the mirrored Debian base (no Python:
its Python and torch stay unknown, not "not installed"), an image with Python built here on top of
that base (what is installed is measured, what is not is None), and a lock file that preflight then
reads as measured facts. Nothing here needs a released image: the mirrored base is all it takes."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from conftest import STACKS, run_cli
from builder.engine import BuildRequest, Engine
from builder.facts import resolve
from builder.lock import load_lock, probe
from builder.preflight import preflight
from builder.registry import Registry
from builder.spec import load_spec

REGISTRY = os.environ.get("IMGBUILD_TEST_REGISTRY", "127.0.0.1:5000")

pytestmark = [pytest.mark.docker, pytest.mark.registry]


@pytest.fixture
def stacks(tmp_path):
    """A copy of the shipped stacks.yaml on the test registry, so the lock is written beside the copy."""
    data = yaml.safe_load(STACKS.read_text())
    data["site"]["registry"] = REGISTRY
    path = tmp_path / "stacks.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_probing_the_mirrored_debian_base_reports_python_and_torch_unknown(stacks):
    res = run_cli("probe", "base=debian-bookworm", "-f", stacks)
    assert res.code == 0, res.output
    assert "os: debian-12" in res.out
    assert "no Python in the image: Python, torch and the rest are unknown, not absent" in res.out
    facts = probe(Engine.detect(), f"{REGISTRY}/mirror/debian:bookworm")
    assert facts == {"os": "debian-12"}  # nothing else measured: unknown, never "not installed"


def test_lock_records_the_digest_and_preflight_uses_the_measurement(stacks):
    res = run_cli("lock", "base=debian-bookworm", "-f", stacks)
    assert res.code == 0, res.output
    lock = load_lock(stacks)
    entry = lock.bases["debian-bookworm"]
    assert entry.digest == Registry(REGISTRY).manifest_digest("mirror/debian", "bookworm")
    assert entry.image == f"{REGISTRY}/mirror/debian:bookworm" and entry.facts == {"os": "debian-12"}
    spec = load_spec(stacks)
    facts = resolve(spec, spec.stack("cpu-smoke"), lock)
    assert facts.get("os").origin == "measured" and str(facts.get("os").value) == "debian-12"
    assert facts.get("python").origin == "declared"  # not measured (no Python in the base): declared stands
    assert [f for f in preflight(spec, ["cpu-smoke"], strict=True) if f.severity == "error"] == []
    res = run_cli("check", "--strict", "-f", stacks)
    assert res.code == 0 and f"measured facts from {stacks.with_name('stacks.lock.yaml')}" in res.out, res.output


def test_lock_keeps_other_entries_and_refuses_an_unknown_base(stacks):
    assert run_cli("lock", "base=debian-bookworm", "-f", stacks).code == 0
    res = run_cli("lock", "base=nope", "-f", stacks)
    assert res.code == 2 and "name bases as base=NAME" in res.err
    assert "debian-bookworm" in load_lock(stacks).bases


def self_contained_python(folder: Path) -> str:
    """The interpreter running these tests, copied into folder: its binary, its standard library and
    every shared library it or its extension modules load (the dynamic loader too), started through
    the copied loader so that it needs nothing of the image it lands in. Returns the stdlib's name."""
    exe = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "installed_base": sys.base_prefix})["stdlib"])
    (folder / "bin").mkdir(parents=True)
    (folder / "lib").mkdir()
    shutil.copy2(exe, folder / "bin" / "python")
    skip = {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
            "__pycache__"}
    shutil.copytree(stdlib, folder / "lib" / stdlib.name,
                    ignore=lambda d, names: [n for n in names if n in skip or n.startswith("config-")])
    loader = None
    for binary in [exe, *sorted((stdlib / "lib-dynload").glob("*.so"))]:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = re.search(r"(/\S+)", line)
            if not m or not Path(m.group(1)).is_file():
                continue
            lib = Path(m.group(1))
            shutil.copy2(lib, folder / "lib" / lib.name)
            if "=>" not in line and lib.name.startswith("ld-"):
                loader = lib.name
    assert loader, f"no dynamic loader in ldd {exe}"
    (folder / "python3").write_text(f'#!/bin/sh\nexec /opt/hostpy/lib/{loader} --library-path /opt/hostpy/lib '
                                    '/opt/hostpy/bin/python "$@"\n')
    return stdlib.name


@pytest.fixture
def python_image(tmp_path):
    """An image built (by the engine, as imgbuild builds) FROM the mirrored Debian base by digest, with
    a Python, torch 2.13.0+cpu and deepspeed 0.19.8 as installed distributions (metadata, and a torch
    module with the attributes the probe reads), imgbuild's pip constraint, and nothing else."""
    ctx = tmp_path / "ctx"
    stdlib = self_contained_python(ctx / "hostpy")
    site = ctx / "hostpy" / "lib" / stdlib / "site-packages"
    for name, version in (("torch", "2.13.0+cpu"), ("deepspeed", "0.19.8")):
        (site / f"{name}-{version}.dist-info").mkdir(parents=True)
        (site / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text('__version__ = "2.13.0+cpu"\n\n\nclass version:\n    cuda = None\n\n\n'
                                               'class _C:\n    pass\n')
    (ctx / "Dockerfile").write_text(
        "ARG PARENT\nFROM ${PARENT}\nCOPY hostpy /opt/hostpy\n"
        "RUN mv /opt/hostpy/python3 /usr/local/bin/python3 && chmod 755 /usr/local/bin/python3 \\\n"
        " && mkdir -p /etc/imgbuild && echo 'torch==2.13.0+cpu' > /etc/imgbuild/constraints.txt\n"
        "ENV PYTHONHOME=/opt/hostpy PIP_CONSTRAINT=/etc/imgbuild/constraints.txt\n")
    digest = Registry(REGISTRY).manifest_digest("mirror/debian", "bookworm")
    assert digest, f"{REGISTRY}/mirror/debian:bookworm is not mirrored (the docker gate checks it)"
    engine = Engine.detect()
    tag = f"imgbuild-test/probe-python:{os.getpid()}"
    engine.build(BuildRequest(context=ctx, dockerfile=ctx / "Dockerfile", tag=tag,
                              build_args={"PARENT": f"{REGISTRY}/mirror/debian:bookworm@{digest}"}, labels={}),
                 tmp_path / "build.log")
    try:
        yield engine, tag
    finally:
        engine.remove(tag)


def test_probing_an_image_with_python_measures_what_is_installed_and_what_is_not(python_image):
    engine, tag = python_image
    facts = probe(engine, tag)
    assert facts == {"os": "debian-12", "python": platform.python_version(),
                     "torch": "2.13.0+cpu", "torch_cuda": None, "deepspeed": "0.19.8",
                     "numpy": None, "pydantic": None, "apex": None, "transformer_engine": None,  # measured: not installed
                     "pip_constraint": "torch==2.13.0+cpu (/etc/imgbuild/constraints.txt)"}
    # no nvcc in the image: nvcc and cuda were not measured, so they are left out (unknown), not None
