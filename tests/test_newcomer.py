"""A newcomer's first hour (issue 20), walked from a fresh clone: the README's first command, read from
the README so that this test breaks when the README changes; then `imgbuild init` in a folder of one's
own, a DeepSpeed stack added from what `imgbuild kinds deepspeed --json` says (parameter names, types,
choices: none of them spelled here), and `imgbuild check`.

The clone is of this checkout's committed HEAD (what a newcomer gets). The quickstart runs with
IMGBUILD_NAMESPACE set to a namespace of this test's own (imgbuild-test-<8 hex>, which scripts/reclaim.sh
gives back later), so it never moves the release tags of `imgbuild/cpu-smoke`. On a host set up already,
its setup takes seconds and BuildKit's cache holds the cpu-smoke layers; validating, pushing and the SBOM
of the four layers are most of its minutes. The first two tests need no engine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TEST_REGISTRY

NS = f"imgbuild-test-{uuid.uuid4().hex[:8]}"
README = REPO / "README.md"


def two_commands() -> list[str]:
    """The commands of the first code block of the README's first section: the two commands."""
    text = README.read_text()
    first = re.search(r"^## ([^\n]+)\n(.*?)(?=^## )", text, re.S | re.M)
    assert first, "the README has no sections"
    block = re.search(r"```sh\n(.*?)```", first.group(2), re.S)
    assert block, f"no sh block in the README's first section ({first.group(1)!r})"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.split("#", 1)[0].strip()]


def test_the_readme_starts_with_the_two_commands():
    text = README.read_text()
    assert re.search(r"^## (.+)$", text, re.M).group(1) == "The two commands"
    commands = two_commands()
    assert commands == ["bash scripts/quickstart.sh", "bash scripts/test.sh"], commands
    for command in commands:
        assert (REPO / shlex.split(command)[1]).is_file(), command


def test_every_relative_link_of_the_readme_and_docs_resolves():
    def anchors(md: Path) -> set[str]:
        return {re.sub(r"[^\w\- ]", "", m.strip().lower()).replace(" ", "-")
                for m in re.findall(r"^#+ (.+)$", md.read_text(), re.M)}
    broken = []
    for md in [README, *sorted((REPO / "docs").glob("*.md"))]:
        prose = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (md.parent / path) if path else md
            if not dest.exists():
                broken.append(f"{md.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{md.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def kind_entry(doc, name: str) -> dict:
    """The kind's entry in `kinds NAME --json`, whether the kinds are the document or a field of it."""
    if isinstance(doc, dict) and doc.get("name") == name and "params" in doc:
        return doc
    items = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else []
    for item in items:
        found = kind_entry(item, name) if isinstance(item, (dict, list)) else None
        if found:
            return found
    return {}


def newcomer_env(**extra: str) -> dict:
    drop = ("CI_", "GITHUB_", "GITLAB_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)
           and k not in ("VIRTUAL_ENV", "PYTHONPATH", "IMGBUILD_HOME", "IMGBUILD_STACKS", "IMGBUILD_KINDS",
                         "IMGBUILD_SKIP_SETUP", "IMGBUILD_REGISTRY", "IMGBUILD_GIT_MIRRORS")}
    return {**env, **extra}


@pytest.mark.docker
@pytest.mark.registry
@pytest.mark.slow
def test_a_newcomer_from_a_fresh_clone(tmp_path):
    from builder.ship.registry import Registry
    if not (REPO / ".git").exists() or not shutil.which("git"):
        pytest.skip("not a git checkout: there is nothing to clone")
    clone = tmp_path / "imgbuild"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)

    # 1. The README's first command, as the README of the clone spells it.
    first = two_commands()[0]
    assert first == shlex.join(shlex.split(first)) and first.startswith("bash "), first
    env = newcomer_env(IMGBUILD_NAMESPACE=NS, IMGBUILD_REGISTRY=TEST_REGISTRY, PYTHONUNBUFFERED="1")
    run = subprocess.run(shlex.split(first), cwd=clone, env=env, capture_output=True, text=True, timeout=2400)
    out = run.stdout + run.stderr
    (tmp_path / "quickstart.log").write_text(out)
    assert run.returncode == 0, out[-6000:]
    assert f"done: cpu-smoke is built, validated and released in {TEST_REGISTRY}/{NS}" in out, out[-3000:]
    assert "[quickstart] next:" in out and "imgbuild init" in out.split("[quickstart] next:")[1], out[-3000:]
    assert Registry(TEST_REGISTRY).manifest_digest(f"{NS}/cpu-smoke", "cpu-smoke"), f"no {NS}/cpu-smoke:cpu-smoke"
    imgbuild = clone / ".venv" / "bin" / "imgbuild"
    assert imgbuild.exists()
    # Issue 36: the example keeps the central promise: every pip layer from its lock, and the lock current (on a
    # machine whose mirrored base has another digest, `lock --check` measures it and says the lock holds).
    assert "IB096" not in out and "lock: every pip layer's set is locked (stacks.lock.yaml): cpu-torch-2.13, " \
        "ds-0.19.8-cpu, smoke-train" in out, out[-4000:]
    checked = subprocess.run([str(imgbuild), "lock", "--check"], cwd=clone, env=newcomer_env(), capture_output=True,
                             text=True, timeout=600)
    assert checked.returncode == 0 and "ok: " in checked.stdout, checked.stdout + checked.stderr
    # The shipped lock was made on another machine, whose mirrored base had another digest: the base here was
    # made again, and the lock holds because its environment is the one locked.
    locked = yaml.safe_load((clone / "stacks.lock.yaml").read_text())["bases"]["debian-bookworm"]["digest"]
    here = Registry(TEST_REGISTRY).manifest_digest("mirror/debian", "bookworm")
    if here != locked:
        assert "was made again" in checked.stdout and "the lock holds" in checked.stdout, checked.stdout

    def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(imgbuild), *args], cwd=cwd, env=newcomer_env(), capture_output=True, text=True,
                              timeout=300)

    # 2. A folder of one's own: init.
    site = tmp_path / "my-site"
    site.mkdir()
    res = cli("init", cwd=site)
    assert res.returncode == 0 and (site / "stacks.yaml").is_file(), res.stdout + res.stderr
    data = yaml.safe_load((site / "stacks.yaml").read_text())
    (stack_name, stack), = data["stacks"].items()
    by_kind = {layer["kind"]: name for name, layer in data["layers"].items()}

    # 3. What a DeepSpeed layer takes, from the kind itself.
    res = cli("kinds", "deepspeed", "--json", cwd=site)
    assert res.returncode == 0, res.stdout + res.stderr
    kind = kind_entry(json.loads(res.stdout), "deepspeed")
    assert kind, res.stdout[:2000]
    params = {p["name"]: p for p in kind["params"]}
    chosen = {}
    for name, p in params.items():
        if p["required"] and p["default"] is None:
            # A version: the one of the DeepSpeed layer init wrote, as a newcomer would copy it.
            assert p["type"] == "version", f"a new required parameter {name!r} ({p['type']}): the README's first stack needs it"
            chosen[name] = data["layers"][by_kind["deepspeed"]]["params"][name]
    ops = next(name for name, p in params.items() if p["type"] == "list" and any(c.startswith("cpu_") for c in p["choices"]))
    chosen[ops] = sorted(c for c in params[ops]["choices"] if c.startswith("cpu_"))
    assert len(chosen[ops]) >= 2, params[ops]

    # 4. Edit: a DeepSpeed layer and a stack that uses it, on init's base and torch layer.
    data["layers"]["newcomer-ds"] = {"kind": kind["name"], "params": chosen}
    data["stacks"]["newcomer"] = {"base": stack["base"], "layers": [by_kind["cpu-torch"], "newcomer-ds"],
                                  "tags": ["{stack}", "{stack}-{date}"]}
    (site / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    # 5. check passes; plan shows the torch layer shared by both stacks.
    res = cli("check", cwd=site)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 stack(s)" in res.stdout + res.stderr, res.stdout + res.stderr
    res = cli("plan", "--offline", cwd=site)
    assert res.returncode == 0 and "newcomer-ds" in res.stdout, res.stdout + res.stderr
    assert f"shared with {stack_name}" in res.stdout, res.stdout
