"""The generated GitLab pipeline, run for real (issue 12): gitlab-ci-local with the shell executor in a
temporary git repository (with an `origin` remote) holding a cpu-smoke stacks file in a fresh registry
namespace. The repository's .gitlab-ci.yml is the README's parent pipeline itself (its generate job's
command pointed at this checkout): the generate job writes child.yml with `imgbuild ci gitlab --all` and
the trigger job runs it (`trigger: include: artifact`, `strategy: depend`), which gitlab-ci-local 4.73
supports (it says "downstream pipeline is experimental"), except that a failed child does not fail the
trigger job (so its exit code is 0 in (d)). tests/test_ci_pipelines.py checks the same parent's shape and
the child's jobs without running them.

Four pipelines, in order: (a) a fresh one builds every layer and releases; (b) a second one builds
nothing (every node job says reused); (c) a project pin change rebuilds only the project layer;
(d) a check that fails leaves the release job unrun and every tag where it was. The jobs get the
environment of every e2e build (e2e.env_for: IMGBUILD_HOME, the CA bundle, netrc and index URL
secrets; the wheelhouse is pip's find-links) from gitlab-ci-local, which passes its own environment on."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from builder.build.registry import Registry
from e2e import PIN_V2, REGISTRY, ROOT, NS, env_for, make_work

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

NS_GL = f"{NS}-gitlab"           # a namespace of its own: the first pipeline builds everything
TAGS = ("cpu-smoke", "cpu-smoke-torch2.13.0-cpu-ds0.19.8")
LAYERS = ("cpu-torch-2.13", "ds-0.19.8-cpu", "cpu-env", "smoke-train")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
GIT = ("git", "-c", "user.email=ci@example.invalid", "-c", "user.name=imgbuild-test")
IMGBUILD = f"{sys.executable} -m builder.cli"


def parent_pipeline() -> str:
    """The README's parent .gitlab-ci.yml, its generate job calling this checkout's imgbuild."""
    text = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "trigger:" in b)
    words = "imgbuild ci gitlab --all -f stacks.yaml --out child.yml"
    assert words in block, block
    return block.replace(words, f"{IMGBUILD} ci gitlab --all -f stacks.yaml --imgbuild '{IMGBUILD}' --out child.yml")


def write_stacks(repo: Path, mutate=lambda data: None) -> None:
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": REGISTRY, "namespace": NS_GL}
    data["stacks"] = {"cpu-smoke": data["stacks"]["cpu-smoke"]}
    mutate(data)
    (repo / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    subprocess.run([*GIT, "add", "stacks.yaml"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", "stacks"], cwd=repo, check=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> dict:
    missing = [t for t in ("gitlab-ci-local", "rsync", "git") if not shutil.which(t)]
    if missing:
        why = f"{', '.join(missing)} not installed (scripts/setup-host.sh installs them)"
        if os.environ.get("IMGBUILD_REQUIRE_DOCKER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    work = make_work(tmp_path_factory.mktemp("gitlab-work"))
    path = tmp_path_factory.mktemp("gitlab-repo")
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    subprocess.run(["git", "remote", "add", "origin", "git@gitlab.example.invalid:site/images.git"], cwd=path, check=True)
    (path / ".gitlab-ci.yml").write_text(parent_pipeline())
    (path / ".gitignore").write_text(".gitlab-ci-local/\nchild.yml\n")
    subprocess.run([*GIT, "add", ".gitlab-ci.yml", ".gitignore"], cwd=path, check=True)
    write_stacks(path)
    return {"path": path, "work": work, "runs": []}


def pipeline(repo: dict, label: str) -> dict:
    """Run the whole pipeline; the node jobs' reports (one node each) written during it, by layer."""
    start = time.time()
    proc = subprocess.run(["gitlab-ci-local", "--shell-executor-no-image"], cwd=repo["path"],
                          env=env_for(repo["work"]), capture_output=True, text=True, timeout=3600)
    seconds = time.time() - start
    out = ANSI.sub("", proc.stdout + proc.stderr)
    (repo["work"] / f"pipeline-{label}.log").write_text(out)
    runs = repo["work"] / "home" / "runs"
    reps = []
    for run in sorted(runs.iterdir() if runs.is_dir() else [], key=lambda p: p.stat().st_mtime):
        rep = run / "report.json"
        if rep.exists() and rep.stat().st_mtime >= start:
            reps.append(yaml.safe_load(rep.read_text()))
    nodes = {n["layer"]: n for r in reps for n in r["nodes"].values()}
    print(f"\npipeline {label}: exit {proc.returncode} in {seconds:.0f} s; "
          + ", ".join(f"{k} {v['action']}/{v['status']}" for k, v in nodes.items()))
    repo["runs"].append((label, proc.returncode, round(seconds)))
    return {"rc": proc.returncode, "out": out, "nodes": nodes, "seconds": seconds}


def tags() -> dict:
    reg = Registry(REGISTRY)
    return {t: reg.manifest_digest(f"{NS_GL}/cpu-smoke", t) for t in TAGS}


def job_lines(out: str, job: str) -> list[str]:
    return [line for line in out.splitlines() if f"{job} " in line or f"{job}:" in line]


def test_a_fresh_pipeline_builds_and_releases(repo):
    assert tags() == {t: None for t in TAGS}
    run = pipeline(repo, "a-fresh")
    assert run["rc"] == 0, run["out"][-6000:]
    assert {k: (v["action"], v["status"]) for k, v in run["nodes"].items()} == \
        {layer: ("build", "passed") for layer in LAYERS}, run["nodes"]
    assert "downstream pipeline" in run["out"]          # the child ran from the generate job's artifact
    assert re.search(r"release-cpu-smoke .*ok: 1 stack\(s\) released", run["out"]), run["out"][-4000:]
    assert None not in tags().values()
    repo["released"] = tags()


def test_a_second_pipeline_builds_nothing(repo):
    assert repo.get("released"), "needs the fresh pipeline"
    run = pipeline(repo, "b-again")
    assert run["rc"] == 0, run["out"][-6000:]
    assert {k: v["action"] for k, v in run["nodes"].items()} == {layer: "reuse" for layer in LAYERS}, run["nodes"]
    reused = [line for line in run["out"].splitlines() if "in the registry, validated; reused" in line]
    assert len(reused) == len(LAYERS), run["out"][-4000:]
    assert tags() == repo["released"]


def _pin_v2(data):
    data["projects"]["smoke-train"]["params"]["source"]["commit"] = PIN_V2


def _require_aio(data):
    _pin_v2(data)
    data["layers"]["ds-0.19.8-cpu"]["params"].update({"runtime_ops": ["async_io"], "libaio": False})


def test_a_pin_change_rebuilds_only_the_project(repo):
    assert repo.get("released"), "needs the fresh pipeline"
    write_stacks(repo["path"], _pin_v2)
    run = pipeline(repo, "c-pin")
    assert run["rc"] == 0, run["out"][-6000:]
    assert {k: v["action"] for k, v in run["nodes"].items()} == \
        {"cpu-torch-2.13": "reuse", "ds-0.19.8-cpu": "reuse", "cpu-env": "reuse", "smoke-train": "build"}, run["nodes"]
    now = tags()
    assert None not in now.values() and now["cpu-smoke"] != repo["released"]["cpu-smoke"]
    repo["pinned"] = now


def test_a_failing_check_leaves_the_release_unrun_and_every_tag_in_place(repo):
    assert repo.get("pinned"), "needs the pin-change pipeline"
    write_stacks(repo["path"], _require_aio)      # the keys stay, the DeepSpeed layer's checks get stricter
    run = pipeline(repo, "d-failing")
    # gitlab-ci-local 4.73 does not carry a child pipeline's failure to its trigger job (GitLab does, with
    # strategy: depend): its exit code is 0 here, so the child's own job results are what is checked.
    assert re.search(r"FAIL\s+node-ds-0\.19\.8-cpu-[0-9a-f]{12}", run["out"]), run["out"][-6000:]
    nodes = run["nodes"]
    assert (nodes["ds-0.19.8-cpu"]["action"], nodes["ds-0.19.8-cpu"]["status"]) == ("revalidate", "failed"), nodes
    assert "async_io must be compatible" in run["out"]
    # The jobs that need it never started: no report of theirs, and the release job never ran.
    assert set(nodes) == {"cpu-torch-2.13", "ds-0.19.8-cpu"}, nodes
    assert not [line for line in job_lines(run["out"], "release-cpu-smoke") if "starting" in line or "$ " in line]
    assert "released" not in run["out"]
    assert tags() == repo["pinned"]
