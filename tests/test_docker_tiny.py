"""The tiny stack family itself (tests/tiny.py) on the real engine and registry: the C extension the tests
make is compiled by the image's cc for the image's machine and runs there, and the pure wheels are what the
index served. The other engine tests rely on this, so it comes first."""

from __future__ import annotations

import subprocess

import pytest

from conftest import DOCKER
from e2e import NS, REGISTRY, imgbuild, reports
from tiny import COMPILER, env_for_index, index, site  # noqa: F401  (the loopback index fixture)

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_a_tiny_stack_compiles_its_c_extension_in_the_image_and_releases(work, index):
    f = site(work, "tiny", NS + "-tiny", packages=["imgbuild-demo-app==1.0", "imgbuild-tiny-c==1.0"], apt=COMPILER)
    proc = imgbuild(work, "build", "stack=demo", "-f", str(f), env=env_for_index(index))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    node = next(n for n in reports(work)[-1]["nodes"].values() if n["layer"] == "demo")
    assert node["action"] == "build" and node["status"] == "passed", node
    ref = f"{REGISTRY}/{NS}-tiny/demo:demo"
    run = subprocess.run([DOCKER, "run", "--rm", "--network", "none", ref, "python", "-c",
                          "import imgbuild_tiny_c as t, imgbuild_demo_app as a; print(t.add(2, 3), t.machine(), a.__version__)"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.split() == ["5", "x86_64", "1.0"], run.stdout + run.stderr
