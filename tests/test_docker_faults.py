"""Faults against the real engine and a real registry (issue 12): the registry stopped mid-build and
started again is waited for (bounded retries with backoff) and the build ends released and consistent;
a registry that stays down fails the build cleanly, naming what is in the registry and what is not, with
no tag moved, and a rerun after it is back completes. A registry of its own (own port, own storage) is
stopped here, so no other test is disturbed.

The stack is a tiny one (tests/tiny.py): the mirrored Debian base, the tests' `tiny-env` layer (Python, no
package) and a layer above it, so the registry goes down after the first layer is validated and before its
push, with a layer still to come. What is proven (bounded retries, the state said, nothing half-written, no tag
moved, a rerun completing) is the pipeline's and the registry client's, whatever the layers hold: cpu-smoke's
2 GB chain pushed twice into a fresh registry cost 189 s of a cold run for nothing more."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from e2e import env_for, make_work
from tiny import site

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnRegistry:
    def __init__(self, folder: Path):
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.config = folder / "config.yml"
        self.config.write_text(yaml.safe_dump({
            "version": 0.1, "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(folder / "data")}, "delete": {"enabled": True}},
            "http": {"addr": self.host}}))
        self.log = open(folder / "registry.log", "a")
        self.proc = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(self.config)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the test registry did not start")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def digest(self, repo: str, tag: str) -> str | None:
        from builder.ship.registry import Registry
        return Registry(self.host).manifest_digest(repo, tag)


@pytest.fixture
def own(tmp_path):
    reg = OwnRegistry(tmp_path)
    reg.start()
    src = "127.0.0.1:5000/mirror/debian:bookworm"
    subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false",
                    f"docker://{src}", f"docker://{reg.host}/mirror/debian:bookworm"], check=True, timeout=300)
    yield reg
    if reg.proc.poll() is None:
        reg.stop()


LAYERS = ("demo", "top")


def _stacks(work: Path, reg: OwnRegistry) -> Path:
    """Stack `demo` in this registry: the mirrored base (copied in by `own`), `demo` and a layer `top` above it."""
    path = site(work, "faults", "faults", packages=[])
    data = yaml.safe_load(path.read_text())
    data["site"]["registry"] = reg.host
    data["layers"]["top"] = {"kind": "system-setup", "params": {"env": {"IMGBUILD_FAULTS": "1"}}}
    data["stacks"]["demo"]["layers"].append("top")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _start_build(work: Path, f: Path, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "builder.cli", "build", "stack=demo", "-f", str(f)],
                            cwd=work, env={**env_for(work), **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(proc: subprocess.Popen, needle: str, seen: list) -> None:
    for line in proc.stdout:
        seen.append(line)
        if needle in line:
            return
    raise AssertionError("the build ended before " + repr(needle) + ":\n" + "".join(seen[-30:]))


def test_a_registry_restarted_mid_build_is_waited_for(tmp_path, own):
    work = make_work(tmp_path)
    f = _stacks(work, own)
    proc = _start_build(work, f)
    seen: list = []
    _wait_for(proc, ": checks:", seen)      # the first layer is validated: its push comes next
    own.stop()
    time.sleep(6)
    own.start()
    rest, _ = proc.communicate(timeout=1800)
    out = "".join(seen) + rest
    assert proc.returncode == 0, out[-4000:]
    assert "retrying in" in out, out[-4000:]
    top = own.digest("faults/demo", "demo")
    assert top is not None
    # Consistent: the release tag names the top key's image, and every key has its proof.
    from builder.ship.manifest import fetch_manifest
    from builder.ship.registry import Registry
    reg = Registry(own.host)
    for layer in LAYERS:
        tags = [t for t in reg.tags(f"faults/layers/{layer}") if len(t) == 32]
        assert len(tags) == 1, (layer, tags)
        digest = reg.manifest_digest(f"faults/layers/{layer}", tags[0])
        assert fetch_manifest(reg, f"faults/layers/{layer}", digest)["outcome"] == "passed"
    assert top == reg.manifest_digest("faults/layers/top", next(t for t in reg.tags("faults/layers/top") if len(t) == 32))


def test_a_registry_that_stays_down_fails_cleanly_and_a_rerun_completes(tmp_path, own):
    work = make_work(tmp_path)
    f = _stacks(work, own)
    quick = {"IMGBUILD_PUSH_BACKOFF": "1,1", "IMGBUILD_REGISTRY_BACKOFF": "0.5,0.5"}
    proc = _start_build(work, f, **quick)
    seen: list = []
    _wait_for(proc, ": checks:", seen)
    own.stop()
    rest, _ = proc.communicate(timeout=1800)
    out = "".join(seen) + rest
    assert proc.returncode != 0 and "Traceback" not in out, out[-4000:]
    assert "not pushed: " in out and "in the registry, validated: " in out, out[-4000:]
    own.start()
    assert own.digest("faults/demo", "demo") is None          # no tag moved
    proc = _start_build(work, f)
    rest, _ = proc.communicate(timeout=1800)
    assert proc.returncode == 0, rest[-4000:]
    assert own.digest("faults/demo", "demo") is not None
