"""Who may move a release tag from CI, and where each job runs (issue 18). No Docker, no registry.

- Every generated file (GitLab, GitHub; with and without GPU runners; the shipped stacks and an example)
  and the parent pipeline of docs/ci.md validate against the official schemas (check-jsonschema's vendored
  GitLab CI and GitHub workflow schemas).
- The release jobs' conditions, read from the YAML and evaluated for a feature-branch push, the default
  branch, a merge/pull request and a tag: only the release branch reaches a release job.
- A mixed A100/H100 site sends every GPU job of the A100 stack to A100 runners; a stack whose GPUs no
  runner has is refused when the pipeline is written.
- A file written --offline says so and its self-check refuses it; the self-check never runs offline.
- Pinned actions, timeouts, interruptible, retry only for runner failures, no secret in the YAML.
- `imgbuild release` refuses by itself off the release branch, reading the CI system's variables.
tests/test_docker_gitlab.py and tests/test_docker_github.py run the pipelines for real."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder.load.ciconf import CiSettings, release_refusal
from conftest import REPO, write_stacks

EXAMPLE = REPO / "tests" / "data" / "ci-example.yaml"   # examples/real/megatron-ci-lts before intent (pinned)
MIXED = {"runner_tags": ["docker"], "gpu_runner_tags": {"A100": ["gpu", "a100"], "H100": ["gpu", "h100"]},
         "github_runs_on": ["self-hosted", "linux"],
         "github_gpu_runs_on": {"A100": ["self-hosted", "a100"], "H100": ["self-hosted", "h100"]}}
BY_GENERATION = {"gpu_runner_tags": {"ampere": ["gpu", "a100"], "hopper": ["gpu", "h100"], "blackwell": ["gpu", "b200"]},
                 "github_gpu_runs_on": {"ampere": ["a100"], "hopper": ["h100"], "blackwell": ["b200"]}}


def waive_all(source: Path) -> dict:
    """site.ci.gpu_checks waiving every stack of a stacks file, with a reason: without GPU runners, a pipeline
    that releases stacks with GPUs and GPU checks is written only where the site waives their GPU proof."""
    return {"gpu_checks": {"waive": {name: "no GPU runners on this test site"
                                     for name in yaml.safe_load(source.read_text())["stacks"]}}}


def stacks_with(tmp_path: Path, source: Path, ci: dict | None, sub: str = "s") -> Path:
    data = yaml.safe_load(source.read_text())
    data.setdefault("site", {}).pop("ci", None)
    if ci is not None:
        data["site"]["ci"] = ci
    return write_stacks(tmp_path / sub, data)


def generate(cli, system: str, file: Path, *extra: str, offline: bool = True) -> tuple[dict, str, str]:
    res = cli("ci", system, "--all", *(["--offline"] if offline else []), "-f", str(file), *extra)
    assert res.code == 0, res.output
    return yaml.safe_load(res.out), res.out, res.err


def jobs_of(system: str, doc: dict) -> dict:
    if system == "gitlab":
        return {k: v for k, v in doc.items() if isinstance(v, dict) and ("script" in v or "trigger" in v)}
    return doc["jobs"]


# -- schemas ------------------------------------------------------------------------------------------

def readme_parent() -> str:
    text = (REPO / "docs" / "ci.md").read_text()
    return next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "trigger:" in b)


def check_schema(schema: str, files: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, *map(str, files)],
                          capture_output=True, text=True, timeout=300)


def test_every_generated_file_and_the_readme_parent_validate_against_the_official_schemas(cli, tmp_path):
    files = {"gitlab": [], "github": []}
    for source in (REPO / "stacks.yaml", EXAMPLE):
        for ci in (waive_all(source), MIXED, BY_GENERATION):
            file = stacks_with(tmp_path, source, ci, f"{source.parent.name}-{len(files['gitlab'])}")
            for system in files:
                _, text, _ = generate(cli, system, file)
                out = tmp_path / f"{system}-{len(files[system])}.yml"
                out.write_text(text)
                files[system].append(out)
    parent = tmp_path / "parent.yml"
    parent.write_text(readme_parent())
    files["gitlab"].append(parent)
    for system, schema in (("gitlab", "vendor.gitlab-ci"), ("github", "vendor.github-workflows")):
        res = check_schema(schema, files[system])
        assert res.returncode == 0, res.stdout + res.stderr
        assert "ok -- validation done" in res.stdout, res.stdout


def test_the_schema_check_can_fail(tmp_path):
    """The positive control: a job with a retry reason GitLab does not know, and a workflow step that
    names no action and no command, are both refused by the same schemas."""
    bad_gitlab = tmp_path / "bad.yml"
    bad_gitlab.write_text(yaml.safe_dump({"job": {"script": ["true"], "retry": {"max": 2, "when": ["check_failed"]}}}))
    bad_github = tmp_path / "bad-workflow.yml"
    bad_github.write_text(yaml.safe_dump({"on": "push", "jobs": {"a": {"runs-on": "x", "steps": [{"name": "n"}]}}}))
    assert check_schema("vendor.gitlab-ci", [bad_gitlab]).returncode == 1
    assert check_schema("vendor.github-workflows", [bad_github]).returncode == 1


# -- who reaches a release job -------------------------------------------------------------------------

TOKEN = re.compile(r"\s*(\|\||&&|==|!=|\(|\)|,|'[^']*'|\"[^\"]*\"|\$?[A-Za-z_][A-Za-z0-9_.]*)")


class Expr:
    """The expressions the generators write, evaluated as GitLab (rules: `$VAR`, "text", ==, !=, &&, ||,
    a bare `$VAR` true when set and not empty) and GitHub (`if:` contexts, 'text', format()) do."""

    def __init__(self, text: str, values: dict):
        self.tokens, pos = [], 0
        while pos < len(text):
            m = TOKEN.match(text, pos)
            assert m, f"cannot read {text[pos:]!r}"
            self.tokens.append(m.group(1))
            pos = m.end()
        self.values, self.i = values, 0

    def value(self):
        out = self.disjunction()
        assert self.i == len(self.tokens), self.tokens[self.i:]
        return out

    def take(self, want=None):
        tok = self.tokens[self.i]
        assert want is None or tok == want, (tok, want)
        self.i += 1
        return tok

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def disjunction(self):
        out = self.conjunction()
        while self.peek() == "||":
            self.take()
            right = self.conjunction()
            out = out or right
        return out

    def conjunction(self):
        out = self.comparison()
        while self.peek() == "&&":
            self.take()
            right = self.comparison()
            out = out and right
        return out

    def comparison(self):
        left = self.atom()
        if self.peek() in ("==", "!="):
            op, right = self.take(), self.atom()
            return (left == right) if op == "==" else (left != right)
        return bool(left)

    def atom(self):
        tok = self.take()
        if tok == "(":
            out = self.disjunction()
            self.take(")")
            return out
        if tok[0] in "'\"":
            return tok[1:-1]
        if tok == "format":
            self.take("(")
            args = [self.atom()]
            while self.peek() == ",":
                self.take()
                args.append(self.atom())
            self.take(")")
            return args[0].format(*args[1:])
        return self.values.get(tok.lstrip("$"), "")


def gitlab_runs(job: dict, variables: dict) -> bool:
    rules = job.get("rules")
    if not rules:
        return True
    for rule in rules:
        if "if" not in rule or Expr(rule["if"], variables).value():
            return rule.get("when", "on_success") != "never"
    return False


def github_runs(job: dict, context: dict) -> bool:
    return "if" not in job or bool(Expr(job["if"], context).value())


GITLAB_CASES = {
    "feature push": {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "feature/x", "CI_DEFAULT_BRANCH": "main"},
    "main push": {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main"},
    # A merge request pipeline has no CI_COMMIT_BRANCH (GitLab's predefined variables), nor a tag pipeline.
    "merge request from main": {"CI_PIPELINE_SOURCE": "merge_request_event", "CI_DEFAULT_BRANCH": "main",
                                "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "main"},
    "tag": {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_TAG": "v1", "CI_DEFAULT_BRANCH": "main"},
    "child of main": {"CI_PIPELINE_SOURCE": "parent_pipeline", "CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main"},
    "child of feature": {"CI_PIPELINE_SOURCE": "parent_pipeline", "CI_COMMIT_BRANCH": "feature/x",
                         "CI_DEFAULT_BRANCH": "main"},
}


def github_context(event: str, ref: str, base_ref: str = "") -> dict:
    return {"github.event_name": event, "github.ref": ref, "github.base_ref": base_ref,
            "github.event.repository.default_branch": "main"}


GITHUB_CASES = {
    "feature push": github_context("push", "refs/heads/feature/x"),
    "main push": github_context("push", "refs/heads/main"),
    "pull request into main": github_context("pull_request", "refs/pull/7/merge", "main"),
    "manual run on main": github_context("workflow_dispatch", "refs/heads/main"),
    "manual run on feature": github_context("workflow_dispatch", "refs/heads/feature/x"),
    "tag": github_context("push", "refs/tags/v1"),
    "pull request from main": github_context("pull_request", "refs/pull/8/merge", "release/2026"),
}
RELEASES = {"gitlab": {"main push", "child of main"}, "github": {"main push", "manual run on main"}}


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_only_the_default_branch_reaches_a_release_job(cli, tmp_path, system):
    doc, _, _ = generate(cli, system, stacks_with(tmp_path, REPO / "stacks.yaml", MIXED))
    jobs = jobs_of(system, doc)
    releases = [j for j in jobs if j.startswith("release-")]
    assert len(releases) == 4
    cases = GITLAB_CASES if system == "gitlab" else GITHUB_CASES
    runs = gitlab_runs if system == "gitlab" else github_runs
    for case, values in cases.items():
        reached = {j for j in jobs if runs(jobs[j], values)}
        if case in RELEASES[system]:
            assert set(releases) <= reached, case
        else:
            assert not set(releases) & reached, case
        # Every other branch, merge request and tag still builds and validates every layer image.
        assert {j for j in jobs if j.startswith(("node-", "gpu-"))} <= reached, case
        if system == "github":
            assert ("review" in reached) == (values["github.event_name"] == "pull_request"), case
    if system == "github":
        for job in releases:
            assert jobs[job]["environment"] == {"name": "imgbuild-release"}
        assert set(doc["on"]) == {"push", "pull_request", "workflow_dispatch"}


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_a_release_branch_setting_moves_the_release_to_that_branch(cli, tmp_path, system):
    doc, text, _ = generate(cli, system, stacks_with(tmp_path, REPO / "stacks.yaml",
                                                     dict(MIXED, release_branch="release/2026")))
    jobs = jobs_of(system, doc)
    release = jobs["release-cpu-smoke"]
    if system == "gitlab":
        assert not gitlab_runs(release, GITLAB_CASES["main push"])
        assert gitlab_runs(release, dict(GITLAB_CASES["main push"], CI_COMMIT_BRANCH="release/2026"))
    else:
        assert not github_runs(release, GITHUB_CASES["main push"])
        assert github_runs(release, github_context("push", "refs/heads/release/2026"))
        assert not github_runs(release, GITHUB_CASES["pull request from main"])
    assert "release jobs run only on branch release/2026" in text


def test_the_readme_parent_reviews_merge_requests_and_never_runs_twice():
    """The parent decides the pipeline: a merge request pipeline (with the review), a branch pipeline,
    and none for a branch that has an open merge request (its merge request pipeline runs instead)."""
    doc = yaml.safe_load(readme_parent())
    rules = doc["workflow"]["rules"]
    mr = dict(GITLAB_CASES["merge request from main"], CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main")
    assert gitlab_runs({"rules": rules}, mr) and gitlab_runs(doc["review"], mr)
    assert gitlab_runs({"rules": rules}, GITLAB_CASES["feature push"])
    assert not gitlab_runs(doc["review"], GITLAB_CASES["feature push"])
    assert not gitlab_runs({"rules": rules}, dict(GITLAB_CASES["feature push"], CI_OPEN_MERGE_REQUESTS="site/images!1"))
    script = doc["review"]["script"]
    assert shlex.split(script[1])[:3] == ["imgbuild", "diff", "--markdown"]
    assert doc["review"]["artifacts"]["expose_as"] and doc["review"]["artifacts"]["paths"] == ["imgbuild-review.md"]
    assert doc["images"]["trigger"]["strategy"] == "depend" and "rules" not in doc["images"]


# -- GPU jobs per GPU ---------------------------------------------------------------------------------

@pytest.mark.parametrize("system", ["gitlab", "github"])
@pytest.mark.parametrize("site", ["by model", "by generation"])
def test_the_a100_stack_s_gpu_jobs_go_to_a100_runners_only(cli, tmp_path, system, site):
    ci = MIXED if site == "by model" else dict(MIXED, **BY_GENERATION)
    doc, _, _ = generate(cli, system, stacks_with(tmp_path, REPO / "stacks.yaml", ci))
    jobs = jobs_of(system, doc)
    labels = (lambda j: j.get("tags")) if system == "gitlab" else (lambda j: j["runs-on"])
    gmap = dict(ci["gpu_runner_tags" if system == "gitlab" else "github_gpu_runs_on"])
    a100 = gmap["A100" if site == "by model" else "ampere"]
    h100 = gmap["H100" if site == "by model" else "hopper"]
    for stack, want, other in (("a100-deepspeed", a100, h100), ("h100-megatron", h100, a100)):
        gpu_jobs = [j for j in jobs[f"release-{stack}"]["needs"] if j.startswith("gpu-")]
        assert len(gpu_jobs) == 3 if stack.startswith("a100") else len(gpu_jobs) == 6, gpu_jobs
        for job in gpu_jobs:
            assert labels(jobs[job]) == want, (stack, job)
            assert labels(jobs[job]) != other
    a100_jobs = {j for j in jobs if labels(jobs[j]) == a100}
    assert a100_jobs == {j for j in jobs["release-a100-deepspeed"]["needs"] if j.startswith("gpu-")}


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_a_stack_whose_gpus_no_runner_has_is_refused(cli, tmp_path, system):
    key = "gpu_runner_tags" if system == "gitlab" else "github_gpu_runs_on"
    file = stacks_with(tmp_path, REPO / "stacks.yaml", {key: {"hopper": ["gpu", "h100"]}})
    for _ in range(2):
        res = cli("ci", system, "--all", "--offline", "-f", str(file))
        assert res.code == 2, res.output
        assert res.out == ""
        assert (f"stack 'a100-deepspeed' targets A100, and no {system} runner has one of them: site.ci.{key} offers "
                "hopper (gpu h100)") in res.err, res.err
        assert "ampere" in res.err            # the hint names the generation that would serve it
    # Only the stacks that run on those runners: written.
    res = cli("ci", system, "stack=h100-megatron", "--offline", "-f", str(file))
    assert res.code == 0, res.output


def test_a_shared_layer_gets_a_gpu_job_for_each_gpu_of_the_stacks_using_it(cli, tmp_path):
    """Two stacks on the same layers, one for A100 and one for H100: each shared layer has two GPU jobs,
    and each release needs only the ones on its own GPU."""
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    data["stacks"]["h100-deepspeed"] = {"extends": "a100-deepspeed", "gpus": ["A100"]}
    data["stacks"]["a100-deepspeed"]["gpus"] = ["A100"]
    data["stacks"]["h100-deepspeed"]["gpus"] = ["H100", "A100"]     # H100 first: its runners take it
    data["site"]["ci"] = MIXED
    file = write_stacks(tmp_path / "s", data)
    doc, _, _ = generate(cli, "gitlab", file)
    jobs = jobs_of("gitlab", doc)
    a = [j for j in jobs["release-a100-deepspeed"]["needs"] if j.startswith("gpu-")]
    h = [j for j in jobs["release-h100-deepspeed"]["needs"] if j.startswith("gpu-")]
    assert a and h and not set(a) & set(h)
    assert all(j.endswith("-a100") and jobs[j]["tags"] == ["gpu", "a100"] for j in a)
    assert all(j.endswith("-h100") and jobs[j]["tags"] == ["gpu", "h100"] for j in h)


# -- offline, pins, hygiene ---------------------------------------------------------------------------

def test_a_workflow_written_offline_says_so_and_its_self_check_refuses_it(cli, tmp_path):
    file = stacks_with(tmp_path, REPO / "stacks.yaml", waive_all(REPO / "stacks.yaml"))
    for offline in (True, False):
        if not offline:   # every base pinned, so that writing online asks no registry here
            data = yaml.safe_load(file.read_text())
            for base in data["bases"].values():
                base["digest"] = "sha256:" + "c" * 64
            file.write_text(yaml.safe_dump(data, sort_keys=False))
        out = tmp_path / f"wf-{offline}.yml"
        res = cli("ci", "github", "--all", "-f", str(file), "--out", str(out), "--workflow", str(out),
                  *(["--offline"] if offline else []))
        assert res.code == 0, res.output
        text = out.read_text()
        assert text.startswith("# imgbuild: written with --offline") == offline
        steps = yaml.safe_load(text)["jobs"]["workflow-current"]["steps"]
        regen = next(s["run"] for s in steps if s.get("name") == "regenerate")
        assert "--offline" not in shlex.split(regen)
        refuse = next(s["run"] for s in steps if s.get("name") == "refuse a file written offline")
        for _ in range(2):
            proc = subprocess.run(["bash", "-c", refuse], capture_output=True, text=True, timeout=30)
            assert proc.returncode == (1 if offline else 0), proc
            assert ("was written with --offline" in proc.stdout) == offline
    gitlab = cli("ci", "gitlab", "--all", "--offline", "-f", str(file))
    assert gitlab.out.startswith("# imgbuild: written with --offline")


def test_every_action_is_pinned_by_commit_with_its_version_and_a_site_can_override_it(cli, tmp_path):
    _, text, _ = generate(cli, "github", stacks_with(tmp_path, REPO / "stacks.yaml", MIXED))
    uses = re.findall(r"uses: (\S+)(.*)$", text, re.M)
    assert uses and {u for u, _ in uses} == {"actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683",
                                            "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"}
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) and re.fullmatch(r"  # v\d+\.\d+\.\d+", c) for u, c in uses)
    pin = {"repo": "site-mirror/checkout", "commit": "b" * 40, "version": "v4.3.0"}
    _, text, _ = generate(cli, "github", stacks_with(tmp_path, REPO / "stacks.yaml",
                                                     dict(MIXED, github_actions={"checkout": pin}), "o"))
    assert f"uses: site-mirror/checkout@{'b' * 40}  # v4.3.0" in text and "actions/checkout@" not in text


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_job_hygiene(cli, tmp_path, system):
    file = stacks_with(tmp_path, REPO / "stacks.yaml", dict(MIXED, timeouts={"cuda_build": 300}))
    doc, text, _ = generate(cli, system, file)
    jobs = jobs_of(system, doc)
    minutes = (lambda j: j["timeout-minutes"]) if system == "github" else \
        (lambda j: sum(int(n) * (60 if u == "h" else 1) for n, u in re.findall(r"(\d+)([hm])", j["timeout"])))
    for name, job in jobs.items():
        # The two DeepSpeed layers on NGC compile CUDA ops (cpu-smoke's compiles CPU ops only), and so does nccl-tests.
        want = {"node-ds-0.19.5": 300, "node-ds-0_19_5": 300, "node-ds-0.17.6": 300, "node-ds-0_17_6": 300,
                "node-nccl-tests": 300, "node-": 60, "gpu-": 60, "release-": 30, "review": 20, "workflow-current": 20,
                "lock-check": 20}
        assert minutes(job) == next(v for k, v in want.items() if name.startswith(k)), name
        if system == "gitlab":
            assert job["interruptible"] == (not name.startswith("release-")), name
    if system == "gitlab":
        assert set(doc["default"]["retry"]["when"]) == {"runner_system_failure", "api_failure", "scheduler_failure"}
        assert "retry" not in json.dumps(jobs)
    else:
        assert doc["concurrency"]["cancel-in-progress"].startswith("${{ github.ref != ")
        assert all(j["concurrency"]["cancel-in-progress"] is False for n, j in jobs.items() if n.startswith("release-"))
    assert not re.search(r"secrets\.|password|passwd|token(?!_)|netrc", text, re.I), \
        re.search(r"secrets\.|password|passwd|token(?!_)|netrc", text, re.I)


def test_without_runner_tags_stderr_says_any_runner(cli, tmp_path):
    file = stacks_with(tmp_path, REPO / "stacks.yaml", waive_all(REPO / "stacks.yaml"))
    _, _, err = generate(cli, "gitlab", file)
    assert "note: site.ci.runner_tags is not declared: the jobs carry no tags and run on any runner" in err
    _, _, err = generate(cli, "github", file)
    assert "note: site.ci.github_runs_on is not declared: the jobs run on any self-hosted runner" in err
    _, _, err = generate(cli, "gitlab", stacks_with(tmp_path, REPO / "stacks.yaml", MIXED, "m"))
    assert "any runner" not in err


# -- imgbuild release refuses by itself ---------------------------------------------------------------

def event_file(tmp_path: Path, default: str = "main") -> str:
    path = tmp_path / "event.json"
    path.write_text(json.dumps({"repository": {"default_branch": default}}))
    return str(path)


@pytest.mark.parametrize("case,env,allowed", [
    ("outside CI", {}, True),
    ("gitlab main", {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main"}, True),
    ("gitlab child of main", {"CI_PIPELINE_SOURCE": "parent_pipeline", "CI_COMMIT_BRANCH": "main",
                              "CI_DEFAULT_BRANCH": "main"}, True),
    ("gitlab feature", {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "feature/x", "CI_DEFAULT_BRANCH": "main"},
     False),
    ("gitlab merge request", {"CI_PIPELINE_SOURCE": "merge_request_event", "CI_COMMIT_BRANCH": "main",
                              "CI_DEFAULT_BRANCH": "main"}, False),
    ("gitlab tag", {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_TAG": "v1", "CI_DEFAULT_BRANCH": "main"}, False),
    ("github main", {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push", "GITHUB_REF": "refs/heads/main"}, True),
    ("github feature", {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push", "GITHUB_REF": "refs/heads/feature"},
     False),
    ("github pull request", {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request",
                             "GITHUB_REF": "refs/heads/main"}, False),
    ("github no event file", {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push", "GITHUB_REF": "refs/heads/main",
                              "GITHUB_EVENT_PATH": "/nonexistent"}, False),
])
def test_release_refusal_reads_the_ci_system(tmp_path, case, env, allowed):
    if env.get("GITHUB_ACTIONS") and "GITHUB_EVENT_PATH" not in env:
        env = dict(env, GITHUB_EVENT_PATH=event_file(tmp_path))
    why = release_refusal(CiSettings(), env)
    assert (why is None) == allowed, (case, why)
    # A release branch named in site.ci wins over the default branch.
    if allowed and env:
        assert release_refusal(CiSettings(release_branch="stable"), env) is not None


def test_release_in_a_feature_branch_job_is_refused_before_any_registry_is_asked(tmp_path, monkeypatch):
    """The CLI in a GitLab job of a feature branch, with a registry that does not answer: the refusal,
    not the registry, is what it says (exit 7), twice in a row."""
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    data["site"]["registry"] = "127.0.0.1:9"
    file = write_stacks(tmp_path / "s", data)
    env = {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "feature/x", "CI_DEFAULT_BRANCH": "main"}
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "builder.cli", "release", "stack=cpu-smoke", "-f", str(file)],
                              cwd=REPO, env={**__import__("os").environ, **env}, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 7, proc.stdout + proc.stderr
        assert ("release refused: this pipeline runs for branch 'feature/x'; only 'main' (the repository's default "
                "branch) releases; no tag was moved") in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
