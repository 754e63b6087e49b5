"""A kind is a folder: a flash-attn-like kind ("fast-attn", a name the Dockerfile lint does not know as a CUDA
build, so that a CPU stack can carry it) written in a temporary folder, with no Python change, gets
its content key and rendered Dockerfile, its in-image version check, its {field} in a release tag, its
version in the manifest and in an image diff, and its fact in preflight."""

from __future__ import annotations

import shutil

import pytest
import yaml
from packaging.version import Version

from builder.ship.checks import judge
from builder.rules.facts import resolve
from builder.diff.imagediff import diff_images
from builder.ship.manifest import build_manifest
from builder.plan.keys import make_plan
from builder.ship.publish import release_tags
from builder.load.spec import load_spec
from conftest import STACKS, run_cli
from test_imagediff_units import FakeRegistry, config

KIND = """\
description: fast-attn (flash-attn-like) at a pinned version (a kind written by a site, no Python).
role: layer
needs: [torch]
provides: [fast_attn]
versions:
  fast_attn: [fast-attn, fast_attn]
params:
  version:
    type: version
    required: true
checks:
  - id: version
    check: dist-version
    args: {dist: fast-attn, equals: "param:version"}
"""
FRAGMENT = """\
{% import "macros.j2" as m %}
RUN {{ m.net() }}
    {{ m.net_env() }}
    python -m pip install --progress-bar off --no-build-isolation {{ ("fast-attn==" ~ params.version) | sh }}
"""
BASE = {"debian-bookworm": "sha256:" + "ab" * 32}


@pytest.fixture
def site(kinds_copy):
    root = kinds_copy("site")
    (root / "layers" / "fast-attn").mkdir()
    (root / "layers" / "fast-attn" / "kind.yaml").write_text(KIND)
    (root / "layers" / "fast-attn" / "fragment.j2").write_text(FRAGMENT)
    data = yaml.safe_load(STACKS.read_text())
    data["layers"]["fa-2.8.3"] = {"kind": "fast-attn", "params": {"version": "2.8.3"}}
    stack = data["stacks"]["cpu-smoke"]
    stack["layers"] = stack["layers"] + ["fa-2.8.3"]
    stack["tags"] = ["{stack}", "{stack}-fa{fast_attn}-ds{deepspeed}"]
    (root / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root / "stacks.yaml"


def test_a_new_kind_folder_is_a_whole_framework(site, tmp_path):
    assert run_cli("check", "stack=cpu-smoke", "-f", site).code == 0
    spec = load_spec(site)
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    node = next(n for n in plan.chain("cpu-smoke") if n.name == "fa-2.8.3")
    # Its key and its rendered Dockerfile; the version is an input of the key.
    assert "fast-attn==2.8.3" in node.dockerfile and len(node.key) == 64
    data = yaml.safe_load(site.read_text())
    data["layers"]["fa-2.8.3"]["params"]["version"] = "2.8.2"
    site.write_text(yaml.safe_dump(data, sort_keys=False))
    other = next(n for n in make_plan(load_spec(site), ["cpu-smoke"], BASE).chain("cpu-smoke") if n.name == "fa-2.8.3")
    assert other.key != node.key
    # Its in-image check: the installed distribution must have the pinned version.
    check = next(c for c in node.checks if c.id == "fast-attn.version")
    facts = {"python": "3.11.2", "dists": {"fast-attn": "2.8.3", "deepspeed": "0.19.8", "torch": "2.13.0+cpu"},
             "torch": {"version": "2.13.0+cpu", "cuda": None}}
    assert judge((check,), facts, gpu=False)[0].status == "passed"
    assert judge((check,), dict(facts, dists={"fast-attn": "2.8.2"}), gpu=False)[0].status == "failed"
    # Its version in the manifest, and its {field} in a release tag.
    manifest = build_manifest(node, facts, [], "sha256:" + "1" * 64, {}, node.checks, kinds=spec.kinds.values())
    assert manifest["versions"]["fast_attn"] == "2.8.3"
    assert release_tags(spec.stack("cpu-smoke").tags, "cpu-smoke", manifest["versions"], "2026.12.01") == [
        "cpu-smoke", "cpu-smoke-fa2.8.3-ds0.19.8"]
    # Its fact in preflight, declared by the layer's version parameter.
    fact = resolve(spec, spec.stack("cpu-smoke")).get("fast_attn")
    assert fact.value == Version("2.8.3") and fact.origin == "declared" and fact.key[-1] == "version"
    # A base may declare it too (the allowed provides come from the kinds).
    data["bases"]["debian-bookworm"]["provides"]["fast_attn"] = "2.8.3"
    site.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_spec(site).bases["debian-bookworm"].fact("fast_attn") == Version("2.8.3")
    # Its version in an image diff, read from the two images' stored manifests.
    fake = FakeRegistry()
    newer = dict(manifest, versions=dict(manifest["versions"], fast_attn="2.8.4"))
    for tag, recorded in (("a", manifest), ("b", newer)):
        fake.image("ns/layers/fa", tag, config([], {"v": tag}, ["pip"]), [(b"x", 1)], recorded=recorded)
    server = fake.serve()
    try:
        host = f"127.0.0.1:{server.server_address[1]}"
        d = diff_images(f"{host}/ns/layers/fa:a", f"{host}/ns/layers/fa:b")
    finally:
        server.shutdown()
    assert ("fast_attn", "2.8.3", "2.8.4") in d.versions


def test_the_kind_folder_refuses_a_bad_versions_declaration(kinds_copy):
    root = kinds_copy("bad")
    shutil.copy2(STACKS, root / "stacks.yaml")
    (root / "layers" / "fa").mkdir()
    (root / "layers" / "fa" / "fragment.j2").write_text("RUN true\n")
    (root / "layers" / "fa" / "kind.yaml").write_text(KIND.replace("fast_attn: [fast-attn, fast_attn]",
                                                                   "Flash-Attn: [fast-attn]"))
    res = run_cli("check", "-f", root / "stacks.yaml")
    assert res.code == 2 and "versions.Flash-Attn" in res.err and "lower case letters" in res.err, res.err


def test_diff_names_a_changed_fragment_of_a_site_kind(tmp_path):
    """Site kinds add to the shipped ones: a site repository holding only its own kind. Changing that
    kind's fragment is named as the cause of the new key (the template is read from where it was found)."""
    import subprocess
    root = tmp_path / "site"
    (root / "layers" / "fast-attn").mkdir(parents=True)
    (root / "layers" / "fast-attn" / "kind.yaml").write_text(KIND)
    (root / "layers" / "fast-attn" / "fragment.j2").write_text(FRAGMENT)
    data = yaml.safe_load(STACKS.read_text())
    data["layers"]["fa-2.8.3"] = {"kind": "fast-attn", "params": {"version": "2.8.3"}}
    data["stacks"]["cpu-smoke"]["layers"] += ["fa-2.8.3"]
    (root / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", "a"]):
        subprocess.run(["git", *cmd], cwd=root, check=True, capture_output=True)
    (root / "layers" / "fast-attn" / "fragment.j2").write_text(FRAGMENT.replace("--progress-bar off ", ""))
    res = run_cli("diff", "HEAD", "-f", root / "stacks.yaml", "--offline", "--json")
    assert res.code == 1, res.output
    assert "template layers/fast-attn/fragment.j2 changed" in res.out


@pytest.mark.parametrize("facts,message", [
    ("facts: {cudart: param:version}", "facts.cudart: 'cudart' is not a fact a layer can declare"),
    ("facts: {cuda: param:nope}", "facts.cuda: expected 'param:NAME' naming a version parameter"),
    ("facts: {cuda: '13.0'}", "facts.cuda: expected 'param:NAME' naming a version parameter"),
])
def test_the_kind_folder_refuses_a_bad_facts_declaration(kinds_copy, facts, message):
    """A kind's declared facts feed preflight: a misspelt one must not silently declare nothing."""
    root = kinds_copy("bad-facts")
    shutil.copy2(STACKS, root / "stacks.yaml")
    (root / "layers" / "fa").mkdir()
    (root / "layers" / "fa" / "fragment.j2").write_text("RUN true\n")
    (root / "layers" / "fa" / "kind.yaml").write_text(KIND + facts + "\n")
    res = run_cli("check", "-f", root / "stacks.yaml")
    assert res.code == 2 and message in res.err, res.err
