"""`imgbuild lock python=LAYER` against the real engine and registry (issue 21): cpu-smoke's DeepSpeed layer
resolved by pip on the session's real cpu-torch image (conftest `first`), through the build's own secrets,
and recorded with every artifact's sha256; `lock --check` then passes, and fails once the layer changes.
And the promise itself: the same key built again, after the index changed, on a clean second engine,
installs the same set byte for byte, where a build without the lock drifts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import DOCKER, run_cli
from e2e import NEEDLES, NS, REGISTRY, imgbuild, reports, stacks_file
from builder.core.lockfile import load_lock
from tiny import index, publish as _publish, site as _site, wheel as _wheel  # noqa: F401  (the loopback index fixture)

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


# -- same key, same image, across time ------------------------------------------------------------------

def _build_and_freeze(work: Path, f: Path, env: dict) -> tuple[str, str]:
    """Build the demo stack; (its key, `pip list --format=freeze` inside the image it released)."""
    proc = imgbuild(work, "build", "stack=demo", "-f", str(f), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    node = next(iter(reports(work)[-1]["nodes"].values()))
    ref = f"{REGISTRY}/{yaml.safe_load(f.read_text())['site']['namespace']}/layers/demo@{node['digest']}"
    run = subprocess.run([DOCKER, "run", "--rm", "--network", "none", ref, "python", "-m", "pip", "list",
                          "--format=freeze"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **({"DOCKER_HOST": env["DOCKER_HOST"]} if "DOCKER_HOST" in env else {})})
    assert run.returncode == 0, run.stderr
    return node["key"], run.stdout


def _clean(engine: dict) -> None:
    """The engine (C) forgets every image and its whole BuildKit cache: a clean runner."""
    env = {**os.environ, "DOCKER_HOST": engine["DOCKER_HOST"]}
    for argv in (["builder", "prune", "-af"], ["image", "prune", "-af"]):
        proc = subprocess.run([DOCKER, *argv], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr


def test_same_key_same_image_across_time(work, index, engine_c):
    """Issue 21's promise. The demo stack is locked and built while the index has demo-dep 1.0; then
    demo-dep 1.1 is published, and the same key is built again on a clean engine (C, cache and images
    pruned). From the lock, `pip list --format=freeze` is the same byte for byte. The control, the same
    two builds of the stack without a lock file (what every build was before the lock), drifts to 1.1:
    the test can tell, and shows what the code before this change did."""
    env = {"IMGBUILD_PIP_INDEX_URL": index["url"], "IMGBUILD_BUILD_NETWORK": "host"}
    locked_a = _site(work, "drift-locked-a", NS + "-drift-a")
    proc = imgbuild(work, "lock", "python=demo", "-f", str(locked_a), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dists = load_lock(locked_a).python["demo"].dists()
    assert {n: d.version for n, d in dists.items()} == {"imgbuild-demo-app": "1.0", "imgbuild-demo-dep": "1.0"}
    key_a, freeze_a = _build_and_freeze(work, locked_a, env)
    plain_a = _site(work, "drift-plain-a", NS + "-drift-c")
    key_c, freeze_c = _build_and_freeze(work, plain_a, env)
    assert "imgbuild-demo-dep==1.0" in freeze_a and "imgbuild-demo-dep==1.0" in freeze_c

    _wheel(index["root"], "imgbuild-demo-dep", "1.1")
    _publish(index["root"])
    # Locking again asks the index now, not BuildKit's cache of the first resolution (the same steps).
    relock = _site(work, "drift-relock", NS + "-drift-r")
    proc = imgbuild(work, "lock", "python=demo", "-f", str(relock), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert load_lock(relock).python["demo"].dists()["imgbuild-demo-dep"].version == "1.1"

    locked_b = _site(work, "drift-locked-b", NS + "-drift-b")
    shutil.copy2(locked_a.with_name("stacks.lock.yaml"), locked_b.with_name("stacks.lock.yaml"))
    _clean(engine_c)
    key_b, freeze_b = _build_and_freeze(work, locked_b, {**env, **engine_c})
    plain_b = _site(work, "drift-plain-b", NS + "-drift-d")
    _clean(engine_c)
    key_d, freeze_d = _build_and_freeze(work, plain_b, {**env, **engine_c})
    assert key_b == key_a and freeze_b == freeze_a, (freeze_a, freeze_b)
    assert key_d == key_c and "imgbuild-demo-dep==1.1" in freeze_d, freeze_d   # the control drifted
    assert freeze_d != freeze_c


def test_a_hand_edited_hash_fails_the_build_and_moves_no_tag(work, index):
    """A lock whose sha256 of demo-dep was edited by hand (a well-formed value, so the file still loads):
    pip refuses the artifact the index serves, the build fails, and the stack's tag is not moved."""
    env = {"IMGBUILD_PIP_INDEX_URL": index["url"], "IMGBUILD_BUILD_NETWORK": "host"}
    f = _site(work, "drift-tampered", NS + "-drift-e")
    proc = imgbuild(work, "lock", "python=demo", "-f", str(f), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lock = f.with_name("stacks.lock.yaml")
    real = load_lock(f).python["demo"].dists()["imgbuild-demo-dep"].sha256
    lock.write_text(lock.read_text().replace(real, "ab" * 32))
    proc = imgbuild(work, "build", "stack=demo", "-f", str(f), env=env)
    assert proc.returncode != 0, proc.stdout[-3000:]
    out = proc.stdout + proc.stderr
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in out or "do not match the hashes" in out.lower(), out[-3000:]
    from builder.ship.registry import Registry
    assert Registry(REGISTRY).manifest_digest(f"{NS}-drift-e/demo", "demo") is None


def test_a_resolution_that_replaces_a_package_beneath_is_refused_before_any_build(work, index):
    """Issue 21: the demo environment is locked and built with demo-dep 1.0; a plugin layer above asks for
    demo-plugin, which requires demo-dep==1.1. `lock python=plugin` records that the set replaces 1.0 of
    the image beneath and why; `check` (and so every build) refuses it, naming the chain (IB097)."""
    env = {"IMGBUILD_PIP_INDEX_URL": index["url"], "IMGBUILD_BUILD_NETWORK": "host"}
    f = _site(work, "replaces", NS + "-replaces", above=["imgbuild-demo-plugin==1.0"])
    proc = imgbuild(work, "lock", "python=demo", "-f", str(f), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Only the demo environment (a CI node job): the plugin's requirement is not on the index yet.
    keys = json.loads(imgbuild(work, "plan", "stack=demo", "--json", "-f", str(f)).stdout)["stacks"]["demo"]["nodes"]
    proc = imgbuild(work, "build", "--node", keys[0], "-f", str(f), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _wheel(index["root"], "imgbuild-demo-dep", "1.1")
    _wheel(index["root"], "imgbuild-demo-plugin", "1.0", ("imgbuild-demo-dep==1.1",))
    _publish(index["root"])
    proc = imgbuild(work, "lock", "python=plugin", "-f", str(f), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dep = load_lock(f).python["plugin"].dists()["imgbuild-demo-dep"]
    assert (dep.version, dep.replaces) == ("1.1", "1.0") and dep.required_by == ("imgbuild-demo-plugin (imgbuild-demo-dep==1.1)",)
    proc = imgbuild(work, "check", "stack=demo", "-f", str(f), env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "error IB097 [demo]" in proc.stdout and "replaces imgbuild-demo-dep 1.0 of the image beneath with 1.1 " \
        "(required by: imgbuild-demo-plugin (imgbuild-demo-dep==1.1))" in proc.stdout, proc.stdout
