"""probe and lock against the real engine and the local registry: the mirrored Debian base (no Python:
its Python and torch stay unknown, not "not installed"), an image with Python built here on top of
that base (what is installed is measured, what is not is None), and a lock file that preflight then
reads as measured facts. The image with Python is the session's real cpu-smoke build (conftest `first`)."""

from __future__ import annotations

import os

import pytest
import yaml

from conftest import STACKS, run_cli
from e2e import NS
from builder.ship.engine import Engine
from builder.rules.facts import resolve
from builder.core.lockfile import load_lock
from builder.ship.measure import probe
from builder.rules.preflight import preflight
from builder.ship.registry import Registry
from builder.load.spec import load_spec

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
    assert [f for f in preflight(spec, [spec.stacks["cpu-smoke"]], strict=True) if f.severity == "error"] == []
    res = run_cli("check", "--strict", "-f", stacks)
    assert res.code == 0 and f"measured facts from {stacks.with_name('stacks.lock.yaml')}" in res.out, res.output


def test_lock_keeps_other_entries_and_refuses_an_unknown_base(stacks):
    assert run_cli("lock", "base=debian-bookworm", "-f", stacks).code == 0
    res = run_cli("lock", "base=nope", "-f", stacks)
    assert res.code == 2 and "name bases as base=NAME" in res.err
    assert "debian-bookworm" in load_lock(stacks).bases


def test_probing_an_image_with_python_measures_what_is_installed_and_what_is_not(first):
    """The DeepSpeed layer of this session's real cpu-smoke build (conftest's `first`): real torch, real
    DeepSpeed, imgbuild's pip constraint; Apex and Transformer Engine are measured as not installed."""
    node = next(n for n in first["report"]["nodes"].values() if n["layer"] == "ds-0.19.8-cpu")
    kinds = load_spec(STACKS).kinds.values()        # their `versions:` say what to measure
    facts = probe(Engine.detect(), f"{REGISTRY}/{NS}/layers/ds-0.19.8-cpu@{node['digest']}", kinds)
    assert facts["os"] == "debian-12" and facts["python"].startswith("3.11.")
    assert facts["torch"] == "2.13.0+cpu" and facts["torch_cuda"] is None and facts["deepspeed"] == "0.19.8"
    assert facts["numpy"] and facts["pydantic"]                       # DeepSpeed's dependencies, measured
    assert facts["apex"] is None and facts["transformer_engine"] is None   # measured: not installed
    assert facts["megatron"] is None
    assert facts["pip_constraint"] == "torch==2.13.0+cpu (/etc/imgbuild/constraints.txt)"
    # no nvcc in the image: nvcc and cuda were not measured, so they are left out (unknown), not None
    assert "nvcc" not in facts and "cuda" not in facts


def test_a_layer_is_measured_and_locked_like_a_base(work, first):
    """`lock layer=NAME` measures a built layer's image in the registry (the way CUDA and torch from PyPI
    make a base of their own), locks its base with it, and preflight then uses the measurement while the
    layer and everything beneath it stay as measured; an edit beneath makes it stale (IB091)."""
    from e2e import stacks_file
    f = stacks_file(work, "layer-lock")
    res = run_cli("lock", "layer=cpu-torch-2.13", "-f", f)
    assert res.code == 0, res.output
    lock = load_lock(f)
    entry = lock.layers["cpu-torch-2.13"]
    node = next(n for n in first["report"]["nodes"].values() if n["layer"] == "cpu-torch-2.13")
    assert entry.digest == node["digest"] and entry.image.endswith(f"/layers/cpu-torch-2.13:{node['key']}")
    assert entry.facts["torch"] == "2.13.0+cpu" and entry.facts["torch_cuda"] is None
    assert entry.facts["python"].startswith("3.11.") and "debian-bookworm" in lock.bases
    spec = load_spec(f)
    torch = resolve(spec, spec.stack("cpu-smoke"), lock).get("torch")
    assert torch.origin == "measured" and "probe of layer cpu-torch-2.13" in torch.source, torch
    res = run_cli("probe", "layer=cpu-torch-2.13", "-f", f)
    assert res.code == 0 and "torch: 2.13.0+cpu   (declared 2.13.0+cpu)" in res.out, res.output
    # The same lock beside a stacks file whose cpu-torch layer changed: its measurement is not used.
    g = stacks_file(work, "layer-lock-edited", lambda d: d["layers"]["cpu-torch-2.13"]["params"].update(
        apt=["python3", "python3-venv", "ca-certificates", "less"]))
    g.with_name("layer-lock-edited.lock.yaml").write_text(f.with_name("layer-lock.lock.yaml").read_text())
    res = run_cli("check", "-f", g)
    assert "IB091" in res.output and "measured facts of layer cpu-torch-2.13 ignored" in res.output, res.output
    spec = load_spec(g)
    assert resolve(spec, spec.stack("cpu-smoke"), load_lock(g)).get("torch").origin == "declared"
    res = run_cli("lock", "layer=nope", "-f", f)
    assert res.code == 2 and "layer=NAME" in res.err
