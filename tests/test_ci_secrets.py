"""site.ci.secrets in the generated pipelines (issue 34, part 4). No Docker, no registry.

- Each bad entry is refused with file, line, the key path under site.ci.secrets and the reason, never
  quoting more than a shortened piece of a value written where a name belongs.
- The three reaches on both systems, read from the YAML and evaluated for a feature branch, the release
  branch, a merge/pull request and a tag: reach all in every job; protected only in the release branch's
  node, GPU and release jobs; release only in release jobs. No other branch's job ever has a protected
  or release mapping, and the files hold the names, never a value.
- Every file written with secrets validates against the official GitLab CI and GitHub workflow schemas.
- A site without secrets gets the pipelines it got before: secrets add their own entries and change
  nothing else.
- gitlab-ci-local (where installed) evaluates the generated `rules: variables:` as GitLab does: the
  protected mapping exists in the release branch's jobs only (shell executor, no Docker).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from builder.load.ciconf import CiSettings, Secret
from conftest import REPO
from test_ci_policy import (BY_GENERATION, EXAMPLE, GITHUB_CASES, GITLAB_CASES, MIXED, Expr, check_schema, generate,
                            github_runs, jobs_of, stacks_with)

SECRETS = {
    "DOCKER_AUTH_CONFIG": {"from": "STAGING_DOCKER_AUTH", "reach": "all"},
    "IMGBUILD_NETRC": {"from": "IMGBUILD_NETRC", "reach": "all"},             # under its own name
    "IMGBUILD_SIGNING_KEY_FILE": {"from": "RELEASE_SIGNING_KEY", "reach": "protected", "file": True},
    "RELEASE_DOCKER_AUTH": {"from": "RELEASE_REGISTRY_AUTH", "reach": "protected"},
    "PROMOTE_TOKEN": {"from": "RELEASE_PROMOTE_TOKEN", "reach": "release"},
}
ALL = {"DOCKER_AUTH_CONFIG", "IMGBUILD_NETRC"}
PROTECTED = {"IMGBUILD_SIGNING_KEY_FILE", "RELEASE_DOCKER_AUTH"}
RELEASE = {"PROMOTE_TOKEN"}
SOURCE = {env: entry["from"] for env, entry in SECRETS.items()}
# Values the generator's own environment holds while it writes: none may reach a file.
VALUES = {"STAGING_DOCKER_AUTH": '{"auths": {"r.example": {"auth": "c3RhZ2luZzpzM2NyM3Q="}}}',
          "IMGBUILD_NETRC": "machine pypi.example login ci password n3trc-s3cr3t",
          "RELEASE_SIGNING_KEY": "-----BEGIN " + "PRIVATE KEY-----fake-signing-key",
          "RELEASE_REGISTRY_AUTH": "release-auth-s3cr3t", "RELEASE_PROMOTE_TOKEN": "glpat" + "-promote-s3cr3t"}


def site(tmp_path, ci: dict, source=REPO / "stacks.yaml", sub: str = "s"):
    return stacks_with(tmp_path, source, ci, sub)


def role(name: str) -> str:
    return {"node": "node", "gpu": "gpu", "release": "release", "review": "review",
            "workflow": "current", "lock": "lock"}[name.split("-")[0]]


# -- refusals ----------------------------------------------------------------------------------------

BAD = [
    ("unknown key", {"A": {"from": "B", "reech": "all"}}, "IB201", "site.ci.secrets.A.reech", "unknown key 'reech'"),
    ("missing from", {"A": {"reach": "all"}}, "IB203", "site.ci.secrets.A", "missing key 'from'"),
    ("bad reach", {"A": {"from": "B", "reach": "everyone"}}, "IB208", "site.ci.secrets.A.reach",
     "'everyone' is not one of all, protected, release"),
    ("reach not text", {"A": {"from": "B", "reach": ["all"]}}, "IB208", "site.ci.secrets.A.reach",
     "a list is not one of all, protected, release"),
    ("lowercase env", {"docker_auth": {"from": "B"}}, "IB208", "site.ci.secrets.docker_auth",
     "is not an environment variable name"),
    ("env with a digit first", {"1A": {"from": "B"}}, "IB208", "site.ci.secrets.1A", "is not an environment variable name"),
    ("lowercase source", {"A": {"from": "release_key"}}, "IB208", "site.ci.secrets.A.from",
     "'release_key' is not a CI secret name"),
    ("source with a shell", {"A": {"from": "B$(id)"}}, "IB208", "site.ci.secrets.A.from", "is not a CI secret name"),
    ("GitHub's prefix", {"A": {"from": "GITHUB_TOKEN"}}, "IB208", "site.ci.secrets.A.from",
     "GitHub reserves names starting with GITHUB_"),
    ("a CI system's variable", {"CI_COMMIT_BRANCH": {"from": "B"}}, "IB208", "site.ci.secrets.CI_COMMIT_BRANCH",
     "is not a name a secret may take"),
    ("a GitHub variable", {"GITHUB_REF": {"from": "B"}}, "IB208", "site.ci.secrets.GITHUB_REF",
     "is not a name a secret may take"),
    ("file not a boolean", {"A": {"from": "B", "file": "true"}}, "IB202", "site.ci.secrets.A.file",
     "expected true or false, got a string"),
    ("not a mapping", {"A": "B"}, "IB202", "site.ci.secrets.A", "expected a mapping with from (and reach, file)"),
    ("a list", ["A"], "IB202", "site.ci.secrets", "expected a mapping of job variable names to CI secrets"),
    ("empty", {}, "IB208", "site.ci.secrets", "is not a mapping of secrets: it is empty"),
    ("the signing key to every job", {"IMGBUILD_SIGNING_KEY": {"from": "B", "reach": "all"}}, "IB208",
     "site.ci.secrets.IMGBUILD_SIGNING_KEY.reach", "can never be 'all' for the signing key"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_a_bad_secret_is_refused_with_its_key_path_and_reason(cli, tmp_path, case):
    _, secrets, rule, key, reason = case
    file = site(tmp_path, {"secrets": secrets})
    for args in (("check", "-f", str(file)), ("ci", "gitlab", "--all", "--offline", "-f", str(file)),
                 ("ci", "github", "--all", "--offline", "-f", str(file))):
        res = cli(*args)
        assert res.code == 2 and res.out == "", res.output
        assert re.search(rf"spec error\[{rule}\]: {re.escape(str(file))}:\d+: {re.escape(key)}: ", res.err), res.err
        assert reason in res.err, res.err


@pytest.mark.parametrize("what,secrets,key", [
    ("a key in the value's place at the source", {"A": {"from": VALUES["RELEASE_SIGNING_KEY"]}},
     "site.ci.secrets.A.from"),
    ("a token as the name", {"glpat" + "-" + "x" * 40: {"from": "B"}}, "site.ci.secrets"),
    ("a token as the reach", {"A": {"from": "B", "reach": "glpat" + "-promote-s3cr3t"}}, "site.ci.secrets.A.reach"),
])
def test_a_value_written_where_a_name_belongs_is_not_echoed(cli, tmp_path, what, secrets, key):
    file = site(tmp_path, {"secrets": secrets})
    res = cli("check", "-f", str(file))
    assert res.code == 2 and f": {key}: " in res.err, res.err
    value = next(iter(secrets)) if key == "site.ci.secrets" else next(iter(secrets.values()))[key.split(".")[-1]]
    assert value not in res.err and value[12:] not in res.err, res.err


def test_secrets_are_read_into_the_site(tmp_path):
    from builder.load.spec import load_spec
    ci = load_spec(site(tmp_path, {"secrets": SECRETS})).site.ci
    assert ci.secrets == (Secret("DOCKER_AUTH_CONFIG", "STAGING_DOCKER_AUTH", "all", False),
                          Secret("IMGBUILD_NETRC", "IMGBUILD_NETRC", "all", False),
                          Secret("IMGBUILD_SIGNING_KEY_FILE", "RELEASE_SIGNING_KEY", "protected", True),
                          Secret("RELEASE_DOCKER_AUTH", "RELEASE_REGISTRY_AUTH", "protected", False),
                          Secret("PROMOTE_TOKEN", "RELEASE_PROMOTE_TOKEN", "release", False))
    assert ci.github_staging_environment == "imgbuild-staging" and CiSettings().secrets == ()
    # Without reach, the narrowest that still signs layers: never a branch's job.
    ci = load_spec(site(tmp_path, {"secrets": {"A": {"from": "B"}}}, sub="d")).site.ci
    assert ci.secrets == (Secret("A", "B", "protected", False),)


@pytest.mark.parametrize("ci,key", [
    ({"github_staging_environment": "imgbuild-release"}, "site.ci.github_staging_environment"),
    ({"github_environment": "imgbuild-staging"}, "site.ci.github_environment"),
    ({"github_staging_environment": "stag ing"}, "site.ci.github_staging_environment"),
])
def test_the_staging_environment_is_a_name_and_never_the_release_one(cli, tmp_path, ci, key):
    res = cli("check", "-f", str(site(tmp_path, ci)))
    assert res.code == 2 and f": {key}: " in res.err, res.err


# -- who gets which name -------------------------------------------------------------------------------

def gitlab_names(job: dict, variables: dict) -> dict | None:
    """The job's mapped variables in a pipeline with these predefined variables (None: the job does not
    run): its `variables:` and those of the first rule that matches, as GitLab evaluates rules."""
    out = dict(job.get("variables") or {})
    for rule in job.get("rules") or [{}]:
        if "if" not in rule or Expr(rule["if"], variables).value():
            if rule.get("when", "on_success") == "never":
                return None
            return dict(out, **(rule.get("variables") or {}))
    return None


class Value(Expr):
    """GitHub's `a && b || c` yields a value, not a boolean: a secret, '' or an environment's name."""

    def comparison(self):
        left = self.atom()
        if self.peek() in ("==", "!="):
            op, right = self.take(), self.atom()
            return (left == right) if op == "==" else (left != right)
        return left


def github_value(text: str, context: dict):
    m = re.fullmatch(r"\$\{\{ (.*) \}\}", text)
    assert m, text
    return Value(m.group(1), context).value()


def github_names(job: dict, context: dict) -> dict:
    """NAME -> the secret it gets in this run (non-empty), from the job's env and its secret files step."""
    secrets = {f"secrets.{s}": f"<{s}>" for s in VALUES}
    out = {}
    mapped = dict(job.get("env") or {})
    for step in job["steps"]:
        if step.get("name") == "secret files":
            mapped.update(step["env"])
    for name, text in mapped.items():
        value = github_value(text, dict(context, **secrets))
        if value:
            out[name] = value
    return out


def expected(role_: str, release_pipeline: bool) -> set:
    want = set(ALL)
    if release_pipeline and role_ in ("node", "gpu", "release"):
        want |= PROTECTED
    if release_pipeline and role_ == "release":
        want |= RELEASE
    return want


@pytest.mark.parametrize("branch", [None, "release/2026"])
def test_gitlab_maps_each_reach_to_its_jobs_only(cli, tmp_path, branch, monkeypatch):
    for source, value in VALUES.items():
        monkeypatch.setenv(source, value)
    ci = dict(MIXED, secrets=SECRETS, **({"release_branch": branch} if branch else {}))
    doc, text, _ = generate(cli, "gitlab", site(tmp_path, ci))
    jobs = jobs_of("gitlab", doc)
    assert {role(j) for j in jobs} == {"lock", "node", "gpu", "release"}
    cases = dict(GITLAB_CASES)
    if branch:
        cases = {k: dict(v, CI_COMMIT_BRANCH=branch) if v.get("CI_COMMIT_BRANCH") == "main" else v
                 for k, v in cases.items()}
    for case, variables in cases.items():
        release_pipeline = case in ("main push", "child of main")
        for name, job in jobs.items():
            got = gitlab_names(job, variables)
            if role(name) == "release" and not release_pipeline:
                assert got is None, (case, name)
                continue
            assert got is not None, (case, name)
            # IMGBUILD_NETRC comes from the CI/CD variable of that name, which GitLab gives itself.
            assert set(got) | {"IMGBUILD_NETRC"} == expected(role(name), release_pipeline), (case, name, got)
            assert all(got[env] == "$" + SOURCE[env] for env in got), got
    for value in VALUES.values():
        assert value not in text
    # Only names: each mapping's value is one declared CI secret's name.
    from builder import __version__
    assert set(re.findall(r"^\s+([A-Z_][A-Z0-9_]*): (\S+)$", text, re.M)) <= \
        {(env, "$" + src) for env, src in SOURCE.items()} | {("IMGBUILD_REQUIRE_VERSION", __version__)}


@pytest.mark.parametrize("branch", [None, "release/2026"])
def test_github_maps_each_reach_to_its_jobs_only(cli, tmp_path, branch, monkeypatch):
    for source, value in VALUES.items():
        monkeypatch.setenv(source, value)
    ci = dict(MIXED, secrets=SECRETS, **({"release_branch": branch} if branch else {}))
    doc, text, _ = generate(cli, "github", site(tmp_path, ci))
    jobs = jobs_of("github", doc)
    assert {role(j) for j in jobs} == {"lock", "node", "gpu", "release", "review", "current"}
    release_ref = f"refs/heads/{branch or 'main'}"
    cases = dict(GITHUB_CASES)
    if branch:
        cases = {k: dict(v, **{"github.ref": release_ref}) if v["github.ref"] == "refs/heads/main" else v
                 for k, v in cases.items()}
    for case, context in cases.items():
        release_pipeline = context["github.ref"] == release_ref
        for name, job in jobs.items():
            if not github_runs(job, context):
                assert role(name) in ("release", "review"), (case, name)
                continue
            got = github_names(job, context)
            assert set(got) == expected(role(name), release_pipeline), (case, name, got)
            assert all(got[env] == f"<{SOURCE[env]}>" for env in got), got
            if role(name) in ("node", "gpu"):
                # Off the release ref the job runs in the staging environment, never in the release one.
                env = github_value(job["environment"]["name"], context)
                assert env == ("imgbuild-release" if release_pipeline else "imgbuild-staging"), (case, name, env)
            elif role(name) == "release":
                assert job["environment"] == {"name": "imgbuild-release"}
            else:
                assert "environment" not in job
    for value in VALUES.values():
        assert value not in text
    assert set(re.findall(r"secrets\.([A-Za-z_0-9]+)", text)) == set(SOURCE.values())


def test_a_file_secret_reaches_github_jobs_as_a_file_only_where_it_is_given(cli, tmp_path):
    """GitLab writes a File variable's path; on GitHub a step writes the secret into $RUNNER_TEMP and
    exports its path, and writes nothing where the secret is empty (a branch's run)."""
    doc, _, _ = generate(cli, "github", site(tmp_path, dict(MIXED, secrets=SECRETS)))
    job = next(j for n, j in doc["jobs"].items() if n.startswith("node-"))
    step = next(s for s in job["steps"] if s.get("name") == "secret files")
    assert job["steps"].index(step) == 1 and "IMGBUILD_SIGNING_KEY_FILE" not in job["env"]
    for value, written in (("-----BEGIN " + "PRIVATE KEY-----\nabc\n-----END " + "PRIVATE KEY-----", True), ("", False)):
        temp, out = tmp_path / f"temp-{written}", tmp_path / f"env-{written}"
        temp.mkdir()
        out.write_text("")
        proc = subprocess.run(["bash", "-e", "-c", step["run"]], capture_output=True, text=True, timeout=30,
                              env={"PATH": "/usr/bin:/bin", "RUNNER_TEMP": str(temp), "GITHUB_ENV": str(out),
                                   "IMGBUILD_SIGNING_KEY_FILE": value})
        assert proc.returncode == 0, proc.stderr
        path = temp / "imgbuild-secret-IMGBUILD_SIGNING_KEY_FILE"
        assert path.exists() == written
        if written:
            assert path.read_text() == value and oct(path.stat().st_mode & 0o777) == "0o600"
            assert out.read_text() == f"IMGBUILD_SIGNING_KEY_FILE={path}\n"
        else:
            assert out.read_text() == ""


def test_protected_without_a_protected_secret_writes_no_environment(cli, tmp_path):
    """Node jobs get an environment only where a protected secret needs one."""
    ci = dict(MIXED, secrets={"A": {"from": "B", "reach": "all"}, "C": {"from": "D", "reach": "release"}})
    doc, _, _ = generate(cli, "github", site(tmp_path, ci))
    for name, job in doc["jobs"].items():
        assert ("environment" in job) == name.startswith("release-"), name
        assert job["env"]["A"] == "${{ secrets.B }}"
        assert ("C" in job["env"]) == name.startswith("release-"), name


# -- schemas -------------------------------------------------------------------------------------------

def test_every_file_with_secrets_validates_against_the_official_schemas(cli, tmp_path):
    files = {"gitlab": [], "github": []}
    variants = [dict(MIXED, secrets=SECRETS),
                dict(MIXED, secrets=SECRETS, release_branch="release/2026", github_staging_environment="stage-1"),
                dict(MIXED, secrets={"DOCKER_AUTH_CONFIG": {"from": "REGISTRY_AUTH", "reach": "all"}}),
                dict(MIXED, **BY_GENERATION, secrets={"IMGBUILD_SIGNING_KEY": {"from": "SIGNING_KEY"}})]
    for source in (REPO / "stacks.yaml", EXAMPLE):
        for i, ci in enumerate(variants):
            file = site(tmp_path, ci, source, f"{source.stem}-{i}")
            for system in files:
                _, text, _ = generate(cli, system, file)
                out = tmp_path / f"{system}-{source.stem}-{i}.yml"
                out.write_text(text)
                files[system].append(out)
    for system, schema in (("gitlab", "vendor.gitlab-ci"), ("github", "vendor.github-workflows")):
        res = check_schema(schema, files[system])
        assert res.returncode == 0, res.stdout + res.stderr
        assert "ok -- validation done" in res.stdout, res.stdout


# -- a site without secrets ----------------------------------------------------------------------------

def without_secrets(system: str, doc: dict) -> dict:
    """doc with every entry secrets add taken out: GitLab's job variables and rule variables (and the rules
    of a node job that has them only for its variables), GitHub's env, node and GPU environments and the
    secret files step."""
    jobs = jobs_of(system, doc)
    for name, job in jobs.items():
        if system == "gitlab":
            job.pop("variables", None)
            for rule in job.get("rules", []):
                rule.pop("variables", None)
            if not name.startswith("release-") and job.get("rules"):
                assert job["rules"][1:] == [{"when": "on_success"}], job["rules"]
                del job["rules"]
        else:
            job.pop("env", None)
            if not name.startswith("release-"):
                job.pop("environment", None)
            job["steps"] = [s for s in job["steps"] if s.get("name") != "secret files"]
    return doc


@pytest.mark.parametrize("system", ["gitlab", "github"])
@pytest.mark.parametrize("source", ["shipped", "example"])
def test_secrets_add_their_entries_and_change_nothing_else(cli, tmp_path, system, source):
    """The same site with and without secrets: the file with secrets, less what secrets add, is the file
    without, key for key and in the same order; and without secrets no job has any of those entries."""
    path = REPO / "stacks.yaml" if source == "shipped" else EXAMPLE
    for ci in (MIXED, dict(MIXED, release_branch="release/2026"), dict(MIXED, **BY_GENERATION)):
        plain_doc, plain, _ = generate(cli, system, site(tmp_path, ci, path, "plain"))
        _, with_text, _ = generate(cli, system, site(tmp_path, dict(ci, secrets=SECRETS), path, "secret"))
        # The regenerate step names the stacks file: the same path in both.
        with_text = with_text.replace(str(tmp_path / "secret"), str(tmp_path / "plain"))
        assert with_text != plain
        stripped = without_secrets(system, yaml.safe_load(with_text))
        assert yaml.safe_dump(stripped, sort_keys=False) == yaml.safe_dump(plain_doc, sort_keys=False)
        # Without secrets: none of what they add (so the file is what it was before secrets existed).
        for name, job in jobs_of(system, plain_doc).items():
            if system == "gitlab":
                assert "variables" not in job and job.get("rules") == (
                    [{"if": job["rules"][0]["if"]}] if name.startswith("release-") else None), name
            else:
                assert "env" not in job and ("environment" in job) == name.startswith("release-"), name
                assert not any(s.get("name") == "secret files" for s in job["steps"])
        assert not re.search(r"secrets\.|imgbuild-staging", plain)


# -- gitlab-ci-local evaluates rules: variables as GitLab does -----------------------------------------

@pytest.mark.skipif(not (shutil.which("gitlab-ci-local") and shutil.which("git")), reason="gitlab-ci-local not installed")
def test_gitlab_ci_local_gives_the_protected_mapping_to_the_release_branch_only(cli, tmp_path):
    """The generated child pipeline of one stack, each job's script replaced by a line that prints which
    mapped names it sees: on main (the default branch) every job sees the protected names and the release
    job the release one; on a feature branch no job does and the release job does not run. Shell executor:
    no Docker."""
    secrets = {k: v for k, v in SECRETS.items() if not v.get("file")}
    res = cli("ci", "gitlab", "stack=cpu-smoke", "--offline", "-f", str(site(tmp_path, {"secrets": secrets})))
    assert res.code == 0, res.output
    doc = yaml.safe_load(res.out)
    jobs = jobs_of("gitlab", doc)
    assert len(jobs) == 6 and "release-cpu-smoke" in jobs and "lock-check" in jobs
    names = sorted(secrets)
    probe = "echo " + " ".join(f'"{n}=[${{{n}:-}}]"' for n in names)
    for job in jobs.values():
        job["script"] = [probe]
        job.pop("tags", None)
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / ".gitlab-ci.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (repo / ".gitignore").write_text(".gitlab-ci-local/\n")
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "child"], cwd=repo, check=True)
    given = [a for src in SOURCE.values() for a in ("--variable", f"{src}=<{src}>")]

    def seen(branch: str) -> dict:
        subprocess.run(["git", "checkout", "-q", "-B", branch], cwd=repo, check=True)
        proc = subprocess.run(["gitlab-ci-local", "--shell-executor-no-image", *given], cwd=repo,
                              capture_output=True, text=True, timeout=600)
        out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
        assert proc.returncode == 0, out[-3000:]
        got: dict = {}
        for line in out.splitlines():
            m = re.match(r"^(\S+)\s+> (.*)$", line)
            if m and m.group(1) in jobs:
                got[m.group(1)] = {k for k, v in re.findall(r"(\w+)=\[([^\]]*)\]", m.group(2)) if v}
        return got

    main, feature = seen("main"), seen("feature/x")
    assert set(main) == set(jobs) and set(feature) == {j for j in jobs if not j.startswith("release-")}
    for name in jobs:
        assert main[name] == expected(role(name), True) & set(names), (name, main[name])
        if name in feature:
            assert feature[name] == ALL, (name, feature[name])
