"""The generated GitLab pipeline, run for real (issues 12 and 18): gitlab-ci-local with the shell executor
in a temporary git repository whose `origin` is a local bare repository, holding a cpu-smoke stacks file
in a fresh registry namespace. Its .gitlab-ci.yml is the parent pipeline of docs/ci.md itself (its imgbuild
commands pointed at this checkout): the generate job writes child.yml with `imgbuild ci gitlab --all`
and the trigger job runs it (`trigger: include: artifact`, `strategy: depend`), which gitlab-ci-local 4.73
supports (it says "downstream pipeline is experimental"), except that a failed child does not fail the
trigger job (so its exit code is 0 in (d)); the review job runs on merge request pipelines.
tests/test_ci_policy.py checks the same parent's rules and the schemas without running them.

Four pipelines, in order, each read against the real registry:
(a) a push of a feature branch builds and validates every layer image, and releases nothing: no release
    job runs and no tag exists after it;
(b) the same commit on main (the default branch) releases: every node job reuses, the release job runs,
    the tags appear;
(c) a merge request pipeline (CI_PIPELINE_SOURCE=merge_request_event, no CI_COMMIT_BRANCH, as GitLab
    runs one) for a project pin change into main: the review job writes the diff report (the project
    rebuilds, its cause, the tags that would move, written out), the child builds only the project, and
    every tag stays where (b) put it;
(c0) before it, the same change without its lock re-resolved stops at the child's first job, `imgbuild lock
    --check`, and builds nothing (issue 36: every node job also builds with --require-locked);
(d) a check that fails on main leaves the release job unrun and every tag where it was.
The jobs get the environment of every e2e build (e2e.env_for: IMGBUILD_HOME, the CA bundle, netrc and
index URL secrets; the wheelhouse is pip's find-links) from gitlab-ci-local, which passes its own
environment on."""

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
from e2e import PIN_V2, REGISTRY, ROOT, NS, env_for, make_work

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

NS_GL = f"{NS}-gitlab"           # a namespace of its own: the first pipeline builds everything
TAGS = ("cpu-smoke", "cpu-smoke-torch2.13.0-cpu-ds0.19.8")
LAYERS = ("cpu-torch-2.13", "ds-0.19.8-cpu", "cpu-env", "smoke-train")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
GIT = ("git", "-c", "user.email=ci@example.invalid", "-c", "user.name=imgbuild-test")
IMGBUILD = f"{sys.executable} -m builder.cli"
REVIEW = "imgbuild-review.md"


def parent_pipeline() -> str:
    """The parent .gitlab-ci.yml of docs/ci.md, its imgbuild commands calling this checkout's imgbuild."""
    text = (ROOT / "docs" / "ci.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "trigger:" in b)
    words = "imgbuild ci gitlab --all -f stacks.yaml --out child.yml"
    assert words in block and "- imgbuild diff --markdown" in block, block
    block = block.replace(words, f"{IMGBUILD} ci gitlab --all -f stacks.yaml --imgbuild '{IMGBUILD}' --out child.yml")
    return block.replace("- imgbuild diff --markdown", f"- {IMGBUILD} diff --markdown")


def write_stacks(repo: Path, mutate=lambda data: None, relock: tuple = (), work: Path | None = None) -> None:
    """The stacks file, committed with its lock: the shipped lock the first time (as a site starts from it),
    the repository's own after. relock: layers whose pip sets `imgbuild lock python=NAME` resolves again
    first, as a site does when it changes one (work: the e2e work folder whose environment it runs in)."""
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": REGISTRY, "namespace": NS_GL}
    data["stacks"] = {"cpu-smoke": data["stacks"]["cpu-smoke"]}
    mutate(data)
    (repo / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    if not (repo / "stacks.lock.yaml").exists():
        shutil.copyfile(ROOT / "stacks.lock.yaml", repo / "stacks.lock.yaml")
    for layer in relock:
        proc = subprocess.run([*IMGBUILD.split(), "lock", f"python={layer}", "-f", "stacks.yaml"], cwd=repo,
                              env=env_for(work), capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    subprocess.run([*GIT, "add", "stacks.yaml", "stacks.lock.yaml"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", "stacks"], cwd=repo, check=True)


def git(repo: dict, *args: str) -> None:
    subprocess.run([*GIT, *args], cwd=repo["path"], check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> dict:
    missing = [t for t in ("gitlab-ci-local", "rsync", "git") if not shutil.which(t)]
    if missing:
        why = f"{', '.join(missing)} not installed (scripts/setup-test-host.sh installs them)"
        if os.environ.get("IMGBUILD_REQUIRE_DOCKER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    work = make_work(tmp_path_factory.mktemp("gitlab-work"))
    origin = tmp_path_factory.mktemp("gitlab-origin") / "images.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    path = tmp_path_factory.mktemp("gitlab-repo")
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    # A real remote: the review job fetches the target branch from it, as GitLab's runner clone would.
    subprocess.run(["git", "remote", "add", "origin", str(origin)], cwd=path, check=True)
    (path / ".gitlab-ci.yml").write_text(parent_pipeline())
    (path / ".gitignore").write_text(f".gitlab-ci-local/\nchild.yml\n{REVIEW}\n")
    subprocess.run([*GIT, "add", ".gitlab-ci.yml", ".gitignore"], cwd=path, check=True)
    write_stacks(path)
    out = {"path": path, "work": work, "runs": []}
    git(out, "push", "-q", "origin", "main")
    return out


def pipeline(repo: dict, label: str, *variables: str) -> dict:
    """Run the whole pipeline of the checked-out branch; the node jobs' reports (one node each) written
    during it, by layer. variables: NAME=VALUE of gitlab-ci-local's --variable (a merge request)."""
    start = time.time()
    argv = ["gitlab-ci-local", "--shell-executor-no-image"] + [a for v in variables for a in ("--variable", v)]
    proc = subprocess.run(argv, cwd=repo["path"], env=env_for(repo["work"]), capture_output=True, text=True,
                          timeout=3600)
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


def ran(out: str, job: str) -> bool:
    """Whether gitlab-ci-local started the job (a job left out by its rules never appears)."""
    return any("starting" in line or "$ " in line for line in job_lines(out, job))


def test_a_feature_branch_builds_every_layer_and_releases_nothing(repo):
    assert tags() == {t: None for t in TAGS}
    git(repo, "checkout", "-q", "-b", "feature/smoke")
    run = pipeline(repo, "a-feature")
    assert run["rc"] == 0, run["out"][-6000:]
    assert {k: (v["action"], v["status"]) for k, v in run["nodes"].items()} == \
        {layer: ("build", "passed") for layer in LAYERS}, run["nodes"]
    assert "downstream pipeline" in run["out"]          # the child ran from the generate job's artifact
    # Issue 36: with its lock current the pipeline passes the lock check first, then every node job builds with
    # --require-locked (a pip layer whose set is not locked would be refused) and says its sets are locked.
    assert re.search(r"PASS\s+(?:\[images\] -> )?lock-check\b", run["out"]), run["out"][-6000:]   # in the child
    for layer in LAYERS:
        assert any(f"node-{layer}-" in line and "--require-locked" in line for line in run["out"].splitlines()), layer
    assert "lock: every pip layer's set is locked" in run["out"] and "IB096" not in run["out"], run["out"][-6000:]
    assert ran(run["out"], "generate") and not ran(run["out"], "review")   # a push, not a merge request
    assert not ran(run["out"], "release-cpu-smoke") and "released" not in run["out"], run["out"][-4000:]
    assert tags() == {t: None for t in TAGS}
    repo["feature"] = True


def test_the_same_commit_on_main_releases(repo):
    assert repo.get("feature"), "needs the feature-branch pipeline"
    git(repo, "checkout", "-q", "main")              # the feature branch's commit: nothing to merge
    run = pipeline(repo, "b-main")
    assert run["rc"] == 0, run["out"][-6000:]
    assert {k: v["action"] for k, v in run["nodes"].items()} == {layer: "reuse" for layer in LAYERS}, run["nodes"]
    reused = [line for line in run["out"].splitlines() if "in the registry, validated; reused" in line]
    assert len(reused) == len(LAYERS), run["out"][-4000:]
    assert re.search(r"release-cpu-smoke .*ok: 1 stack\(s\) released", run["out"]), run["out"][-4000:]
    assert None not in tags().values()
    repo["released"] = tags()


def _pin_v2(data):
    data["projects"]["smoke-train"]["params"]["source"]["commit"] = PIN_V2


def _failing_smoke(data):
    _pin_v2(data)
    data["projects"]["smoke-train"]["params"]["smoke"] = "python -c 'import sys; sys.exit(\"the smoke step fails\")'"


def test_a_change_without_its_lock_stops_at_the_lock_check_and_builds_nothing(repo):
    """Issue 36: the project's pin changed and the lock not re-resolved: the child pipeline's first job, `imgbuild
    lock --check`, fails naming the stale entry, and no node job starts (every chain needs it)."""
    assert repo.get("released"), "needs the release on main"
    git(repo, "checkout", "-q", "-b", "feature/pin-v2")
    write_stacks(repo["path"], _pin_v2)
    run = pipeline(repo, "c0-stale-lock")
    assert re.search(r"FAIL\s+lock-check", run["out"]), run["out"][-6000:]
    assert "stale: python.smoke-train: the layer, a layer beneath it or its base changed" in run["out"], run["out"][-6000:]
    assert run["nodes"] == {} and not any(ran(run["out"], f"node-{layer}") for layer in LAYERS), run["nodes"]
    assert tags() == repo["released"]
    repo["stale"] = True


def test_a_merge_request_reviews_builds_the_change_and_moves_no_tag(repo):
    assert repo.get("stale"), "needs the stale-lock pipeline"
    write_stacks(repo["path"], _pin_v2, relock=("smoke-train",), work=repo["work"])
    git(repo, "push", "-q", "origin", "feature/pin-v2")
    review = repo["path"] / REVIEW
    review.unlink(missing_ok=True)
    # As GitLab runs a merge request pipeline: its source, the target branch, and no CI_COMMIT_BRANCH.
    run = pipeline(repo, "c-merge-request", "CI_PIPELINE_SOURCE=merge_request_event",
                   "CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main", "CI_MERGE_REQUEST_IID=1", "CI_COMMIT_BRANCH=")
    assert run["rc"] == 0, run["out"][-6000:]
    assert ran(run["out"], "review"), run["out"][-4000:]
    text = review.read_text()
    # The report: the project rebuilds, why, and the tags that would move once merged, written out.
    assert "#### cpu-smoke: changed (1 build)" in text, text
    assert re.search(r"\| 3 \| smoke-train \| changed \| \*\*build\*\* \| `[0-9a-f]{12} -> [0-9a-f]{12}` \| "
                     r"sources: source d89c5dfd761d -> 1a6d04ff11a3", text), text
    assert f"`{REGISTRY}/{NS_GL}/cpu-smoke:cpu-smoke-torch2.13.0-cpu-ds0.19.8` (moves)" in text, text
    assert "{" not in text.split("Release tags once merged:")[1].split("\n")[0], text
    assert "1 layer image to build, 0 to revalidate, 0 already built; 3 release tags move" in text, text
    # The same report is in the job log and kept as the job's artifact.
    assert re.search(r"review +> #### cpu-smoke: changed \(1 build\)", run["out"]), run["out"][-6000:]
    artifacts = list((repo["path"] / ".gitlab-ci-local").rglob(REVIEW))
    assert any(p.read_text() == text for p in artifacts), artifacts
    # The child built the project (the merge request's keys are ready for main), and moved no tag.
    assert {k: v["action"] for k, v in run["nodes"].items()} == \
        {"cpu-torch-2.13": "reuse", "ds-0.19.8-cpu": "reuse", "cpu-env": "reuse", "smoke-train": "build"}, run["nodes"]
    assert not ran(run["out"], "release-cpu-smoke") and "released" not in run["out"]
    assert tags() == repo["released"]
    repo["reviewed"] = True


def test_a_failing_check_leaves_the_release_unrun_and_every_tag_in_place(repo):
    assert repo.get("reviewed"), "needs the merge request pipeline"
    git(repo, "checkout", "-q", "main")
    # The merge request's project, with a smoke step that fails: the keys stay (the lock resolved again
    # gives the same set), the project's check fails.
    write_stacks(repo["path"], _failing_smoke, relock=("smoke-train",), work=repo["work"])
    run = pipeline(repo, "d-failing")
    # gitlab-ci-local 4.73 does not carry a child pipeline's failure to its trigger job (GitLab does, with
    # strategy: depend): its exit code is 0 here, so the child's own job results are what is checked.
    assert re.search(r"FAIL\s+node-smoke-train-[0-9a-f]{12}", run["out"]), run["out"][-6000:]
    nodes = run["nodes"]
    assert (nodes["smoke-train"]["action"], nodes["smoke-train"]["status"]) == ("revalidate", "failed"), nodes
    assert "the smoke step fails" in run["out"]
    assert set(nodes) == set(LAYERS), nodes
    assert not ran(run["out"], "release-cpu-smoke")
    assert "released" not in run["out"]
    assert tags() == repo["released"]


def test_gitlab_ci_local_reads_a_two_platform_pipeline_with_its_arm64_jobs(tmp_path):
    """Issue 22: the child pipeline of a stack of two platforms, as gitlab-ci-local parses it (its JSON schema
    validation and its dependency chain check): one job per (layer, platform), the arm64 ones on the arm64
    runners of site.ci.platform_runner_tags, and the release needing both chains. Not run: its arm64 half is
    13 minutes of emulation (tests/test_docker_platforms.py builds a tiny stack of both platforms with imgbuild itself)."""
    if not shutil.which("gitlab-ci-local"):
        pytest.fail("gitlab-ci-local not installed (scripts/setup-test-host.sh installs it)")
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": REGISTRY, "namespace": f"{NS}-gcl",
                    "ci": {"runner_tags": ["builder"], "platform_runner_tags": {"linux/arm64": ["arm64-builder"]}}}
    wheel = data["layers"]["cpu-torch-2.13"]["params"]["wheel"]
    data["layers"]["cpu-torch-2.13"]["params"]["wheel"] = [wheel, {
        "file": "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
        "sha256": "3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"}]
    data["stacks"] = {"cpu-both": {**data["stacks"]["cpu-smoke"], "platforms": ["linux/amd64", "linux/arm64"],
                                   "tags": ["{stack}"]}}
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    (tmp_path / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    made = subprocess.run([sys.executable, "-m", "builder.cli", "ci", "gitlab", "stack=cpu-both", "-o",
                           str(tmp_path / ".gitlab-ci.yml")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    subprocess.run([*GIT, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*GIT, "commit", "-qm", "two platforms"], cwd=tmp_path, check=True)
    checked = subprocess.run(["gitlab-ci-local", "--json-schema-validation", "--validate-dependency-chain"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0 and "All job dependencies are valid" in checked.stdout, checked.stdout + checked.stderr
    listed = subprocess.run(["gitlab-ci-local", "--list-json"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    jobs = {j["name"]: j for j in json.loads(listed.stdout)}
    nodes = [n for n in jobs if n.startswith("node-")]
    arm = [n for n in nodes if n.endswith("-arm64")]
    assert len(nodes) == 8 and len(arm) == 4, sorted(jobs)
    needs = {j: {n["job"] for n in jobs[j]["needs"]} for j in jobs}
    assert needs["release-cpu-both"] == set(nodes)
    for name in arm:   # each arm64 job needs only arm64 jobs beneath it (the bottom one: the lock check)
        assert all(n.endswith("-arm64") or n == "lock-check" for n in needs[name]), (name, needs[name])
    assert needs["lock-check"] == set()
    written = yaml.safe_load((tmp_path / ".gitlab-ci.yml").read_text())
    assert all(written[n]["tags"] == ["arm64-builder"] for n in arm)
    assert all(written[n]["tags"] == ["builder"] for n in nodes if n not in arm)
