"""`imgbuild lock python=LAYER` against the real engine and registry (issue 21): cpu-smoke's DeepSpeed layer
resolved by pip on the session's real cpu-torch image (conftest `first`), through the build's own secrets,
and recorded with every artifact's sha256; `lock --check` then passes, and fails once the layer changes."""

from __future__ import annotations

import re

import pytest

from conftest import run_cli
from e2e import NEEDLES, imgbuild, stacks_file
from builder.plan.lockfile import load_lock

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_a_layers_pip_set_is_resolved_on_the_image_beneath_it_and_locked_with_hashes(work, first):
    f = stacks_file(work, "python-lock")
    proc = imgbuild(work, "lock", "python=ds-0.19.8-cpu", "-f", str(f))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    entry = load_lock(f).python["ds-0.19.8-cpu"]
    torch = next(n for n in first["report"]["nodes"].values() if n["layer"] == "cpu-torch-2.13")
    assert entry.parent.endswith(f"/layers/cpu-torch-2.13@{torch['digest']}") and entry.stack == "cpu-smoke"
    dists = entry.dists()
    # DeepSpeed from PyPI, the one requested; its requirements pulled in and locked with it. torch is the
    # parent's and is not re-resolved (pip leaves a satisfied requirement alone).
    assert dists["deepspeed"].version == "0.19.8" and dists["deepspeed"].requested
    assert dists["deepspeed"].sha256 == "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af"
    assert {"hjson", "msgpack", "psutil", "py-cpuinfo", "pydantic", "numpy"} <= set(dists), sorted(dists)
    assert "torch" not in dists
    assert all(re.fullmatch(r"[0-9a-f]{64}", d.sha256) for d in dists.values()), dists
    # The build's secrets were used (the index URL carries a token) and none of them is in the lock file.
    text = f.with_name("python-lock.lock.yaml").read_bytes()
    assert not [n for n in NEEDLES if n in text]
    assert run_cli("lock", "--check", "-f", f).code == 0
    f.write_text(f.read_text().replace("deepspeed_shm_comm", "cpu_adagrad", 1))
    res = run_cli("lock", "--check", "-f", f)
    assert res.code == 1 and "python.ds-0.19.8-cpu" in res.out, res.output


def test_a_layer_whose_parent_was_never_built_is_refused_with_the_command_that_fixes_it(work, first):
    f = stacks_file(work, "python-lock-unbuilt", lambda d: d["layers"]["cpu-torch-2.13"]["params"].update(
        apt=["python3", "python3-venv", "python3-dev", "g++", "ca-certificates", "less"]))
    res = run_cli("lock", "python=ds-0.19.8-cpu", "-f", f)
    assert res.code != 0 and "is not in" in res.output and "imgbuild build stack=cpu-smoke" in res.output, res.output
