"""Property: no value of any string field can change what a rendered Dockerfile does.

Random text (any Unicode, control characters, quotes, shell syntax, leading dashes) goes into every
string field of tests/hostile.py's injection points, through load, render and a Dockerfile reader. A
value is either refused with a SpecError (a clear refusal) or, when accepted, leaves the instruction
sequence, the number of shell words of every RUN, and which of those words are options exactly as
they are with an ordinary value in the same place.
"""

from __future__ import annotations

import copy
import shlex

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from builder.plan.keys import make_plan
from builder.errors import ImgbuildError
from builder.load.spec import load_spec
from conftest import write_stacks
from hostile import POINTS, shipped

# An ordinary value for each point: the baseline that a random value must not change the shape of.
ORDINARY = {
    "apt": "libaio-dev", "ds-packages": "six==1.16.0", "project-packages": "six==1.16.0",
    "tools": "setuptools==80.9.0", "git-repo": "https://github.com/NVIDIA/Megatron-LM.git",
    "smoke-command": "python -m smoke_train", "module": "smoke_train", "env-value": "2", "env-name": "SAFE_NAME",
    "tag": "{stack}-x", "description": "a description", "layer-description": "a description",
    "base-image": "{registry}/mirror/debian:bookworm", "registry": "127.0.0.1:5000", "namespace": "imgbuild",
    "base-source": "a source",
    # issue 11's primitives
    "pip-index": "https://pypi.example.org/simple", "pip-extra-index": "https://pypi.example.org/simple",
    "pip-url-requirement": "git+https://github.com/a/b.git@" + "a" * 40, "pip-uninstall": "apex",
    "pip-uninstall-reason": "a reason long enough", "pip-replace-torch": "a reason long enough",
    "pip-build-env": "8", "sys-env-prepend": "/opt/x/bin", "sys-env-literal": "x", "sys-file-src": "stacks.yaml",
    "sys-file-dest": "/etc/x", "sys-symlink": "/usr/bin/python3", "sys-workdir": "/workspace",
    "sys-entrypoint": "/bin/bash", "sys-user": "trainer", "cuda-configure": "-DX=1", "cuda-subdir": "csrc",
    "cuda-patch": "stacks.yaml",
}
TEXT = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["-oDPkg::Pre-Invoke::=id", "--allow-unauthenticated", "a\nRUN id", "a\\\nRUN id", "$(id)", "`id`",
     "'; id; '", '"; id; "', "--upload-pack=id", "ext::sh", "-", "--", " -x", "\r\nUSER root"])


def shape(spec) -> list:
    """For every rendered Dockerfile: its instructions, and for each RUN its words marked option or not."""
    out = []
    plan = make_plan(spec)
    for node in plan.nodes.values():
        current = None
        for raw in node.dockerfile.split("\n"):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            cont = line.endswith("\\")
            body = line[:-1] if cont else line
            current = body if current is None else current + " " + body
            if cont:
                continue
            keyword, _, rest = current.partition(" ")
            words = shlex.split(rest) if keyword.upper() == "RUN" else []
            out.append((node.name, keyword.upper(), len(words), tuple(w.startswith("-") for w in words)))
            current = None
    return out


_BASE: dict = {}


def load_with(tmp_path_factory, point: str, value: str):
    data = copy.deepcopy(shipped())
    POINTS[point](data, value)
    folder = tmp_path_factory.mktemp("p")
    return load_spec(write_stacks(folder, yaml.safe_dump(data, sort_keys=False, allow_unicode=True)))


@pytest.mark.parametrize("point", sorted(POINTS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=TEXT)
def test_no_value_changes_the_shape_of_a_dockerfile(tmp_path_factory, point, value):
    if point not in _BASE:
        _BASE[point] = shape(load_with(tmp_path_factory, point, ORDINARY[point]))
    try:
        spec = load_with(tmp_path_factory, point, value)
        got = shape(spec)
    except ImgbuildError:
        return          # refused, with a message (the CLI tests check the message's form)
    assert got == _BASE[point], f"{point}={value!r} changed a rendered Dockerfile"
