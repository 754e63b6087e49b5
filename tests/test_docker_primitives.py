"""The primitives of issue 11 against the real engine and registry: a system-setup layer (a user, a file
beside stacks.yaml copied in with its mode, a symbolic link, PATH-like variables extended around what
the parent has, a literal $ kept literal, a working folder) and a pip step (a base package removed with
a reason, a pinned package added from the index, a build environment that stays out of ENV) built on
the cpu-smoke chain, validated from the inside by their kinds' checks, and released.
The rendered text is tested in tests/test_primitives.py; this proves the engine reads it as meant."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e import NS, REGISTRY, actions, imgbuild, release, reports, stacks_file

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

REASON = "ninja is only needed to compile; this image compiles nothing more"


def _with_primitives(data: dict) -> None:
    data["layers"]["sys"] = {"kind": "system-setup", "params": {
        "users": [{"name": "trainer", "uid": 1234}],
        "files": [{"src": "conf/hostfile", "dest": "/etc/imgbuild-test/hostfile", "mode": "0600"}],
        "symlinks": {"/usr/local/bin/py": "/usr/bin/python3"},
        "workdir": "/workspace",
        "env": {"PATH": {"prepend": ["/opt/tools/bin"]}, "LD_LIBRARY_PATH": {"append": ["/opt/tools/lib"]},
                "PYTHONPATH": {"prepend": ["/opt/a"], "append": ["/opt/b"]}, "LITERAL": "cost $5 ${HOME}"}}}
    data["layers"]["tools"] = {"kind": "pip", "params": {
        "packages": ["six==1.17.0"],
        "build_env": {"IMGBUILD_TEST_BUILD_ONLY": "1"},
        "uninstall": {"packages": ["ninja"], "reason": REASON}}}
    data["stacks"]["prim"] = {"description": "issue 11 primitives on the cpu-smoke chain", "base": "debian-bookworm",
                              "layers": ["cpu-torch-2.13", "sys", "tools"], "tags": ["{stack}"]}


def _inspect(image: str) -> dict:
    out = subprocess.run(["docker", "run", "--rm", "--network=none", "--entrypoint", "sh", image, "-c",
                          'echo "PATH=$PATH"; echo "LD=$LD_LIBRARY_PATH"; echo "PP=$PYTHONPATH"; '
                          'echo "LIT=$LITERAL"; echo "BUILD=${IMGBUILD_TEST_BUILD_ONLY:-unset}"; pwd; id trainer; '
                          'stat -c "%a %s" /etc/imgbuild-test/hostfile; readlink /usr/local/bin/py; '
                          'python3 -c "import six; print(\'six\', six.__version__)"; '
                          'python3 -m pip show ninja >/dev/null 2>&1 && echo "ninja present" || echo "ninja absent"'],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return {"lines": out.stdout.splitlines()}


def test_primitives_build_and_validate_in_a_real_image(work, first):
    (work / "conf").mkdir(exist_ok=True)
    (work / "conf" / "hostfile").write_text("node1 slots=8\n")
    proc = imgbuild(work, "build", "stack=prim", "-f", str(stacks_file(work, "prim", _with_primitives)))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rep = reports(work)[-1]
    acts = actions(rep)
    assert acts["cpu-torch-2.13"] == "reuse" and acts["sys"] == "build" and acts["tools"] == "build", acts
    checks = {c["id"]: c for n in rep["nodes"].values() if n["layer"] == "tools" for c in n["checks"]}
    assert checks["pip.requirements"]["status"] == "passed", checks["pip.requirements"]
    assert checks["system-setup.env"]["status"] == "passed", checks["system-setup.env"]
    digest = release("prim", "prim")
    assert digest
    lines = _inspect(f"{REGISTRY}/{NS}/prim@{digest}")["lines"]
    path = next(l for l in lines if l.startswith("PATH="))
    assert path.startswith("PATH=/opt/tools/bin:/opt/venv/bin:/usr/local/") and "::" not in path and not path.endswith(":")
    assert "LD=/opt/tools/lib" in lines                 # the parent had none: no empty entry before it
    assert "PP=/opt/a:/opt/b" in lines
    assert "LIT=cost $5 ${HOME}" in lines               # a literal stays literal
    assert "BUILD=unset" in lines                       # build_env never reaches the image's ENV
    assert "/workspace" in lines
    assert any(l.startswith("uid=1234(trainer)") for l in lines)
    assert "600 14" in lines and "/usr/bin/python3" in lines
    assert "six 1.17.0" in lines and "ninja absent" in lines


def test_a_removed_package_that_comes_back_fails_the_check(work, first):
    """Positive control for the requirements check: the same pip step, but what it removes is installed
    again in the same layer, so the image holds ninja though the layer says it removes it."""
    def mutate(data):
        _with_primitives(data)
        data["layers"]["tools"]["params"]["packages"] = ["six==1.17.0", "ninja==1.11.1.4"]
        data["stacks"]["prim"]["tags"] = ["{stack}-control"]
    before = release("prim-control", "prim")
    for _ in range(2):   # the failing case, twice: the verdict is stored, never forgotten
        proc = imgbuild(work, "build", "stack=prim", "-f", str(stacks_file(work, "prim-bad", mutate)))
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert "ninja 1.11.1.4 is still installed" in proc.stdout + proc.stderr
    assert release("prim-control", "prim") == before is None
