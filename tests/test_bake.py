"""render --out's interop files: docker-bake.json and build.sh wire every layer's PARENT, and with
--context each node's folder holds the build context `build` would send (builder/plan/bake.py).
The unit tests read the files as bake and bash would; the docker test builds cpu-smoke with build.sh
on the real engine (this engine has no buildx, so `docker buildx bake` cannot run here)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from builder.plan import bake
from builder.ship.bases import resolve
from builder.plan.keys import image_ref, make_plan
from builder.load.spec import load_spec
from conftest import DOCKER, REPO, STACKS, run_cli

EXAMPLE = REPO / "tests" / "data" / "bake-example" / "stacks.yaml"   # openrlhf-vllm010 before intent: two stacks, a file input
NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def rendered(path: Path, out: Path, *extra: str):
    res = run_cli("render", "--all", "-f", path, "--out", out, *extra)
    assert res.code == 0, res.output
    spec = load_spec(path)
    plan = make_plan(spec, list(spec.stacks), resolve(spec, lookup="none").digests)
    return json.loads((out / bake.BAKE_FILE).read_text()), plan, res


@pytest.mark.parametrize("path", [STACKS, EXAMPLE], ids=["shipped", "openrlhf-vllm010"])
def test_bake_file_wires_every_layer(path, tmp_path):
    data, plan, res = rendered(path, tmp_path / "out")
    assert set(data) == {"group", "target"}
    targets = data["target"]
    assert len(targets) == len(plan.nodes)             # one target per distinct layer node
    by_tag = {t["tags"][0]: name for name, t in targets.items()}
    assert len(by_tag) == len(targets)
    for key, node in plan.nodes.items():
        name = bake.names(plan).targets[key]
        t = targets[name]
        assert NAME.match(name) and node.short[:12] in name, name
        assert t["context"] == f"nodes/{name}" and t["dockerfile"] == "Dockerfile"
        assert t["tags"] == [image_ref(plan.spec, node)]
        assert t["args"] == {"PARENT": t["args"]["PARENT"], **node.build_args}
        if node.parent is None:
            assert t["args"]["PARENT"] == node.base_ref and "contexts" not in t
            continue
        # The parent is another target of the file: PARENT is its tag, and the named context of that
        # reference is the target itself (bake builds it first).
        parent = by_tag[t["args"]["PARENT"]]
        assert parent != name and targets[parent]["tags"] == [image_ref(plan.spec, plan.nodes[node.parent])]
        assert t["contexts"] == {t["args"]["PARENT"]: f"target:{parent}"}
    groups = data["group"]
    assert groups["default"]["targets"] == list(targets)
    for stack, keys in plan.stacks.items():
        chain = groups[stack]["targets"]
        assert chain == [bake.names(plan).targets[k] for k in keys]
        assert targets[chain[0]]["args"]["PARENT"] == plan.nodes[keys[0]].base_ref
        for below, above in zip(chain, chain[1:]):
            assert targets[above]["contexts"] == {targets[below]["tags"][0]: f"target:{below}"}
    assert "nodes/" in res.err and "--context" in res.err     # says the contexts are not there yet


def build_lines(script: str) -> list[list[str]]:
    """The `build TARGET PLATFORM IMAGE PARENT ARGS...` calls of build.sh, in order, as bash would split them."""
    calls = []
    for line in script.splitlines():
        m = re.match(r'^if \[ -n "\$\{want\[([A-Za-z0-9_-]+)\]:-\}" \]; then build (.*); fi$', line)
        if m:
            words = shlex.split(m.group(2))
            assert words[0] == m.group(1)
            calls.append(words)
    return calls


@pytest.mark.parametrize("path", [STACKS, EXAMPLE], ids=["shipped", "openrlhf-vllm010"])
def test_build_script_is_bash_and_builds_parents_first(path, tmp_path):
    data, plan, _ = rendered(path, tmp_path / "out")
    script = tmp_path / "out" / bake.SCRIPT
    assert os.access(script, os.X_OK)
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text
    calls = build_lines(text)
    assert [c[0] for c in calls] == list(data["target"])      # every node once, in plan order
    built: set = set()
    for target, platform, image, parent, *args in calls:
        t = data["target"][target]
        assert [image] == t["tags"] and parent == t["args"]["PARENT"] and [platform] == t["platforms"]
        assert dict(a.split("=", 1) for a in args) == {k: v for k, v in t["args"].items() if k != "PARENT"}
        if "contexts" in t:
            assert parent in built, f"{target} is built before its parent {parent}"
        built.add(image)


def fake_docker(folder: Path) -> Path:
    """A docker CLI that records each argv (one JSON list a line) and, for a secret file, its text."""
    path = folder / "docker"
    path.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                    "secrets = [a.split('src=', 1)[1] for a in sys.argv if a.startswith('id=') and 'src=' in a]\n"
                    "with open(os.environ['FAKE_LOG'], 'a') as log:\n"
                    "    log.write(json.dumps({'argv': sys.argv[1:], 'secrets': {s: open(s).read() for s in secrets}}) + '\\n')\n")
    path.chmod(0o755)
    return path


def run_script(out: Path, tmp_path: Path, *names: str, **env: str):
    log = tmp_path / "docker.log"
    log.unlink(missing_ok=True)
    full = {k: v for k, v in os.environ.items() if not k.startswith("IMGBUILD_")}
    full.update(DOCKER=str(fake_docker(tmp_path)), FAKE_LOG=str(log), TMPDIR=str(tmp_path), **env)
    proc = subprocess.run(["bash", str(out / bake.SCRIPT), *names], capture_output=True, text=True, env=full,
                          cwd=tmp_path)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


def test_build_script_runs_a_stack_with_its_contexts(tmp_path, monkeypatch):
    """--context fills nodes/TARGET with what `build` sends (sources exported by the real function in
    pipeline, here with git replaced by a stub; wheels from IMGBUILD_WHEELHOUSE); build.sh then runs
    docker build for the stack's chain, parents first, with PARENT, the build args, the tag and the
    secrets that were given, and no value of a secret in its argv or in the files."""
    import builder.ship.pipeline as pipeline

    def export(pin, dest):
        dest.mkdir(parents=True)
        (dest / "COMMIT").write_text(pin.commit)
    monkeypatch.setattr(pipeline, "export", export)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    spec = load_spec(STACKS)
    plan0 = make_plan(spec, list(spec.stacks))
    for node in plan0.nodes.values():
        for wheel in node.wheels.values():
            (wheels / wheel.file).write_bytes(b"not really a wheel")
    monkeypatch.setenv("IMGBUILD_WHEELHOUSE", str(wheels))
    # --context also asks the site registry for base digests; a unit test asks none.
    monkeypatch.setattr("builder.ship.bases.resolve", lambda spec, names, lookup: resolve(spec, names, lookup="none"))
    out = tmp_path / "out"
    res = run_cli("render", "--all", "-f", STACKS, "--out", out, "--context")
    assert res.code == 0, res.output
    data = json.loads((out / bake.BAKE_FILE).read_text())
    spec = load_spec(STACKS)
    plan = make_plan(spec, list(spec.stacks), resolve(spec, lookup="none").digests)
    for key, name in bake.names(plan).targets.items():
        node, folder = plan.nodes[key], out / data["target"][name]["context"]
        assert (folder / "Dockerfile").read_text() == node.dockerfile
        for src, pin in node.sources.items():
            assert (folder / "sources" / src / "COMMIT").read_text() == pin.commit
        assert {p.name for p in (folder / "wheelhouse").iterdir()} == {w.file for w in node.wheels.values()} \
            if node.wheels else not (folder / "wheelhouse").exists()
        assert (folder / "files").is_dir() == (node.layer.kind.folder / "files").is_dir()
    assert not [p for p in (out / "nodes").iterdir() if p.name.startswith(".")]   # no temporary left

    ca = tmp_path / "ca.pem"
    ca.write_text("CA\n")
    token = f"https://__token__:{uuid.uuid4().hex}@index.invalid/simple"
    proc, calls = run_script(out, tmp_path, "cpu-smoke", IMGBUILD_CA_BUNDLE=str(ca), IMGBUILD_PIP_INDEX_URL=token)
    assert proc.returncode == 0, proc.stderr
    chain = data["group"]["cpu-smoke"]["targets"]
    assert [c["argv"][-1] for c in calls] == [f"nodes/{t}" for t in chain]
    for call, target in zip(calls, chain):
        argv, t = call["argv"], data["target"][target]
        assert argv[0] == "build" and argv[argv.index("--tag") + 1] == t["tags"][0]
        assert argv[argv.index("--file") + 1] == f"nodes/{target}/Dockerfile"
        args = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
        assert args == [f"{k}={v}" for k, v in t["args"].items()]
        assert f"id=ca-bundle,src={ca}" in argv and token not in " ".join(argv)
        assert list(call["secrets"].values()) == ["CA\n", token]     # the URL reached BuildKit as a file
    assert not list(tmp_path.glob("imgbuild-secret-*"))              # ... which is gone afterwards
    for f in (out / bake.SCRIPT, out / bake.BAKE_FILE):
        assert token not in f.read_text() and str(ca) not in f.read_text()

    # One layer by its target name builds it with what lies beneath it; an unknown name is refused.
    proc, calls = run_script(out, tmp_path, chain[1])
    assert proc.returncode == 0 and [c["argv"][-1] for c in calls] == [f"nodes/{t}" for t in chain[:2]]
    assert not any(a.startswith("id=") for c in calls for a in c["argv"])   # no secret given, none named
    proc, calls = run_script(out, tmp_path, "no-such-stack")
    assert proc.returncode == 2 and "no stack or target named no-such-stack" in proc.stderr and not calls


def test_build_script_without_contexts_says_how(tmp_path):
    _, _, _ = rendered(STACKS, tmp_path / "out")
    proc, calls = run_script(tmp_path / "out", tmp_path, "cpu-smoke")
    assert proc.returncode == 2 and not calls
    assert "holds no build context; run imgbuild render --out DIR --context" in proc.stderr


def test_context_needs_out(tmp_path):
    res = run_cli("render", "--all", "-f", STACKS, "--context")
    assert res.code == 2 and "--out" in res.err


def test_names_are_bake_names_and_unique(write):
    data = yaml.safe_load(STACKS.read_text())
    data["stacks"]["default"] = dict(data["stacks"]["cpu-smoke"])    # a stack named like bake's group
    spec = load_spec(write(data))
    plan = make_plan(spec, list(spec.stacks))
    n = bake.names(plan)
    everything = [*n.targets.values(), *n.groups.values(), "default"]
    assert len(set(everything)) == len(everything) and all(NAME.match(x) for x in everything)
    assert n.groups["default"] == "default-2" and n.groups["cpu-smoke"] == "cpu-smoke"


def test_a_registry_name_no_client_parses_still_renders(write, tmp_path):
    """check accepts a 20,000-character registry name; render --out writes the tree all the same and
    says that no base digest was resolved (the hostile suite's registry/long)."""
    data = yaml.safe_load(STACKS.read_text())
    data["site"]["registry"] = "pwned" * 4000
    res = run_cli("render", "stack=cpu-smoke", "-f", write(data), "--out", tmp_path / "out")
    assert res.code == 0, res.output[-500:]
    assert "base digests not resolved" in res.err and "Traceback" not in res.output
    assert build_lines((tmp_path / "out" / bake.SCRIPT).read_text())


# -- the real engine -----------------------------------------------------------------------------------

@pytest.mark.docker
@pytest.mark.slow
def test_build_script_builds_cpu_smoke(tmp_path):
    """render --context, then build.sh alone (no imgbuild) builds cpu-smoke on the engine, in a throwaway
    namespace; nothing is pushed. The secrets the e2e builds get are given the script's way."""
    from e2e import NEEDLES, REGISTRY, env_for, make_work
    work = make_work(tmp_path)
    data = yaml.safe_load(STACKS.read_text())
    data["site"] = {"registry": REGISTRY, "namespace": f"bake-test-{uuid.uuid4().hex[:8]}"}
    stacks = work / "stacks.yaml"
    stacks.write_text(yaml.safe_dump(data, sort_keys=False))
    # Locked, as every e2e cpu-smoke is (tests/e2e.py stacks_file): the same layers as `first`, from its cache.
    shutil.copyfile(STACKS.with_name("stacks.lock.yaml"), work / "stacks.lock.yaml")
    out = work / "tree"
    env = dict(env_for(work), DOCKER=DOCKER, BUILDKIT_PROGRESS="plain")
    proc = subprocess.run([sys.executable, "-m", "builder.cli", "render", "stack=cpu-smoke", "-f", str(stacks),
                           "--out", str(out), "--context"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bakefile = json.loads((out / bake.BAKE_FILE).read_text())
    chain = bakefile["group"]["cpu-smoke"]["targets"]
    tags = [bakefile["target"][t]["tags"][0] for t in chain]
    assert "@sha256:" in bakefile["target"][chain[0]]["args"]["PARENT"]   # the base by digest, as build does
    for f in (out / bake.SCRIPT, out / bake.BAKE_FILE):
        assert not any(needle in f.read_bytes() for needle in NEEDLES)
    start = time.time()
    try:
        proc = subprocess.run(["bash", str(out / bake.SCRIPT), "cpu-smoke"], env=env, capture_output=True,
                              text=True, timeout=2400)
        seconds = time.time() - start
        (work / "build.log").write_text(proc.stdout + proc.stderr)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
        assert not any(n.decode() in proc.stdout + proc.stderr for n in NEEDLES)
        run = subprocess.run([DOCKER, "run", "--rm", tags[-1], "python", "-c",
                              "import torch, deepspeed, smoke_train; print('ok', torch.__version__)"],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0 and "ok 2.13.0" in run.stdout, run.stdout + run.stderr
        label = subprocess.run([DOCKER, "image", "inspect", "--format", '{{index .Config.Labels "io.imgbuild.layer"}}',
                                tags[-1]], capture_output=True, text=True)
        assert label.stdout.strip() == "smoke-train"
        print(f"build.sh built cpu-smoke ({len(tags)} layers) in {seconds:.0f} s")
    finally:
        subprocess.run([DOCKER, "rmi", *tags], capture_output=True)
