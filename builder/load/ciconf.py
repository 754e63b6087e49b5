"""site.ci: how `imgbuild ci` writes a site's pipelines: which branch releases, which runners take which
jobs (GPU jobs by the GPU a runner has), which GitHub actions by which commit, and how long a job may run.

Every value lands in CI YAML, a rules expression or a shell line, so each is a plain name checked
against a grammar here; the writers (builder.ci) quote them again where they land. The one exception, a
GPU waiver's reason (gpu_checks: the stacks released without GPU proof, builder.ship.gpuproof), is one line
of text without control characters, written only into comments, notes, cards and the catalog.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from builder.core import platforms
from builder.load.params import type_name
from builder.errors import did_you_mean
from builder.redact import redact
from builder.textsafe import inert
from builder.core import catalog

KEYS = {"release_branch", "runner_tags", "gpu_runner_tags", "github_runs_on", "github_gpu_runs_on",
        "github_environment", "github_actions", "timeouts", "platform_runner_tags", "github_platform_runs_on",
        "secrets", "github_staging_environment", "gpu_checks", "lock_check", "require_locked"}
# A runner tag or label as both CI systems and a shell line can hold it unquoted: no space, quote, `$` or `*`.
RUNNER_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# A branch name as git allows it (git check-ref-format), narrowed to what a rules expression and a
# GitHub `if:` hold between quotes: no quote, `$`, space, `~^:?*[\`, `..`, `//`, `@{`, no leading `-` or `/`.
BRANCH = re.compile(r"^(?!-|/)(?!.*(?:\.\.|//|/\.|\.lock\Z|[./]\Z))[A-Za-z0-9._/-]{1,200}\Z")
ENVIRONMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}\Z")
COMMIT = re.compile(r"^[0-9a-f]{40}\Z")
ACTION_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+\Z")
ACTION_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}\Z")

# The actions a generated workflow uses, each pinned by full commit (a tag can be moved under a workflow
# that trusts it); the version is written beside it as a comment. A site overrides them in
# site.ci.github_actions (a newer release, or its own fork or mirror).
DEFAULT_ACTIONS = {
    "checkout": ("actions/checkout", "11bd71901bbe5b1630ceea73d27597364c9af683", "v4.2.2"),
    "upload-artifact": ("actions/upload-artifact", "ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
}
ACTION_KEYS = {"repo", "commit", "version"}
# Minutes a job may run. Compiling CUDA code (DeepSpeed ops, Transformer Engine, Apex, flash-attn) for
# several archs takes hours on a CI runner; everything else builds in well under one.
DEFAULT_TIMEOUTS = {"build": 60, "cuda_build": 240, "gpu": 60, "release": 30, "review": 20}
MAX_MINUTES = 72 * 60
DEFAULT_ENVIRONMENT = "imgbuild-release"
DEFAULT_STAGING_ENVIRONMENT = "imgbuild-staging"

# site.ci.secrets: ENV_NAME -> {from: CI_SECRET_NAME, reach: all|protected|release, file: bool}. Only names
# reach a generated file, never a value. ENV_NAME is the variable a job's imgbuild reads; CI_SECRET_NAME the
# GitLab CI/CD variable or GitHub secret it comes from (both systems: capitals, digits and _).
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}\Z")
SECRET_KEYS = {"from", "reach", "file"}
# all: every job (node, gpu, release, and GitHub's workflow-current and review); protected: only the jobs of
# the release branch's pipeline (node, gpu, release); release: only the release jobs.
REACHES = ("all", "protected", "release")
DEFAULT_REACH = "protected"          # a secret said without reach never reaches a branch or merge request job
# Names the CI systems set themselves (and imgbuild reads to tell where it runs: release_refusal): a secret
# mapped over one would change what a job believes about its own pipeline.
SYSTEM_PREFIXES = ("CI_", "GITLAB_", "GITHUB_", "RUNNER_", "ACTIONS_")
# The variables that put imgbuild in the release zone (it signs and writes the release namespace): never
# given to every job.
SIGNING_ENV = ("IMGBUILD_SIGNING_KEY", "IMGBUILD_SIGNING_KEY_FILE")


@dataclass(frozen=True)
class Secret:
    """One entry of site.ci.secrets: the job's variable env gets the CI secret source's value (GitLab: a
    file's path where the CI/CD variable is of type File), in the jobs that reach names."""
    env: str
    source: str
    reach: str = DEFAULT_REACH
    file: bool = False

    def reaches(self, role: str, release_pipeline: bool = True) -> bool:
        """Whether a job of role (node, gpu, release, review, current) gets it, in the release branch's
        pipeline (release_pipeline) or any other."""
        if self.reach == "all":
            return True
        if self.reach == "release":
            return release_pipeline and role == "release"
        return release_pipeline and role in ("node", "gpu", "release")


@dataclass(frozen=True)
class ActionPin:
    repo: str
    commit: str
    version: str        # written as a comment beside the commit; "" where the site gave none

    @property
    def uses(self) -> str:
        return f"{self.repo}@{self.commit}"


@dataclass(frozen=True)
class CiSettings:
    """site.ci. Empty runner lists: not declared (GitLab jobs then carry no tags, GitHub jobs run on
    `self-hosted`); empty GPU maps: no GPU jobs are written."""
    release_branch: str | None = None    # None: the repository's default branch
    runner_tags: tuple = ()              # GitLab tags of the runners that build and release
    github_runs_on: tuple = ()           # GitHub Actions runs-on labels, the same role
    gpu_runner_tags: tuple = ()          # ((GPU model or generation, tags), ...) in the order written
    github_gpu_runs_on: tuple = ()
    github_environment: str = DEFAULT_ENVIRONMENT
    github_actions: dict = field(default_factory=lambda: {k: ActionPin(*v) for k, v in DEFAULT_ACTIONS.items()},
                                 hash=False)
    timeouts: dict = field(default_factory=lambda: dict(DEFAULT_TIMEOUTS), hash=False)
    # ((platform, tags), ...): the runners that build a platform's layer images natively (arm64 runners for
    # linux/arm64); a platform without one builds on the builders above, under QEMU emulation
    platform_runner_tags: tuple = ()
    github_platform_runs_on: tuple = ()
    # (Secret, ...) in the order stacks.yaml lists them: which CI secrets a job gets under which names
    secrets: tuple = ()
    # GitHub: the environment of node and GPU jobs off the release branch where a protected secret exists
    # (their environment is github_environment on the release branch)
    github_staging_environment: str = DEFAULT_STAGING_ENVIRONMENT
    # ((stack, reason), ...): the stacks released without GPU proof on purpose (site.ci.gpu_checks.waive;
    # builder.ship.gpuproof)
    gpu_checks_waived: tuple = ()
    # The lock in CI (issue 36): a first job runs `imgbuild lock --check`, and node jobs build with
    # --require-locked. A site turns either off here; the file's header then says so.
    lock_check: bool = True
    require_locked: bool = True

    def gpu_waiver(self, stack: str) -> str | None:
        """Why stack releases with its GPU checks skipped (site.ci.gpu_checks.waive), or None: it needs GPU proof."""
        return dict(self.gpu_checks_waived).get(stack)

    def secrets_for(self, role: str, release_pipeline: bool) -> tuple:
        """The secrets a job of role gets in the release branch's pipeline (release_pipeline) or another."""
        return tuple(s for s in self.secrets if s.reaches(role, release_pipeline))

    def platform_map(self, system: str) -> tuple:
        return self.platform_runner_tags if system == "gitlab" else self.github_platform_runs_on

    def gpu_map(self, system: str) -> tuple:
        return self.gpu_runner_tags if system == "gitlab" else self.github_gpu_runs_on

    def runners_for(self, system: str, gpu) -> tuple[str, tuple] | None:
        """(the map's key that matched, runner labels) for one GPU (catalog.Gpu): its model first, then its
        generation; None when no runner of the site has it."""
        found = dict(self.gpu_map(system))
        if gpu.name in found:
            return gpu.name, found[gpu.name]
        generation = catalog.gpu_generation(gpu)
        if generation in found:
            return generation, found[generation]
        return None


def parse(loader, value: Any) -> CiSettings:
    """site.ci from stacks.yaml; loader is spec._Loader (err, mapping, string)."""
    if value is None:
        return CiSettings()
    raw = loader.mapping(("site", "ci"), value, KEYS, what="a mapping of CI settings")
    out: dict = {}
    if raw.get("release_branch") is not None:
        path = ("site", "ci", "release_branch")
        branch = loader.string(path, raw["release_branch"])
        if not BRANCH.match(branch):
            raise loader.err(path, f"{redact(branch[:70])!r} is not a branch name imgbuild writes into CI rules: "
                             "letters, digits and . _ - /, no '..', '//' or leading '-'",
                             hint="leave it out to release from the repository's default branch")
        out["release_branch"] = branch
    for key in ("runner_tags", "github_runs_on"):
        if raw.get(key) is not None:
            out[key] = _labels(loader, ("site", "ci", key), raw[key])
    for key in ("gpu_runner_tags", "github_gpu_runs_on"):
        if raw.get(key) is not None:
            out[key] = _gpu_map(loader, ("site", "ci", key), raw[key])
    for key in ("platform_runner_tags", "github_platform_runs_on"):
        if raw.get(key) is not None:
            out[key] = _platform_map(loader, ("site", "ci", key), raw[key])
    for key in ("github_environment", "github_staging_environment"):
        if raw.get(key) is not None:
            path = ("site", "ci", key)
            env = loader.string(path, raw[key])
            if not ENVIRONMENT.match(env):
                raise loader.err(path, f"{redact(env[:70])!r} is not a GitHub environment name imgbuild writes: "
                                 "letters, digits and . _ -")
            out[key] = env
    if out.get("github_staging_environment", DEFAULT_STAGING_ENVIRONMENT) == \
            out.get("github_environment", DEFAULT_ENVIRONMENT):
        said = "github_staging_environment" if raw.get("github_staging_environment") is not None else "github_environment"
        raise loader.err(("site", "ci", said),
                         "github_environment and github_staging_environment (default imgbuild-staging) can never "
                         "be one environment: jobs off the release branch run in the staging one, so the release "
                         "environment's secrets would reach them",
                         hint="name two environments, and protect github_environment to the release branch")
    if raw.get("secrets") is not None:
        out["secrets"] = _secrets(loader, ("site", "ci", "secrets"), raw["secrets"])
    if raw.get("github_actions") is not None:
        out["github_actions"] = _actions(loader, ("site", "ci", "github_actions"), raw["github_actions"])
    if raw.get("gpu_checks") is not None:
        out["gpu_checks_waived"] = _gpu_checks(loader, ("site", "ci", "gpu_checks"), raw["gpu_checks"])
    if raw.get("timeouts") is not None:
        out["timeouts"] = _timeouts(loader, ("site", "ci", "timeouts"), raw["timeouts"])
    for key in ("lock_check", "require_locked"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], bool):
                raise loader.err(("site", "ci", key), f"expected true or false, got {type_name(raw[key])}",
                                 hint=f"{key}: false turns it off (the pipeline's header then says so)")
            out[key] = raw[key]
    return CiSettings(**out)


def _labels(loader, path: tuple, items: Any) -> tuple:
    if not isinstance(items, list):
        raise loader.err(path, f"expected a list of runner tags, got {type_name(items)}",
                         hint=f"e.g. {path[-1]}: [docker]")
    seen: list = []
    for i, item in enumerate(items):
        label = loader.string(path + (i,), item)
        if not RUNNER_LABEL.match(label):
            raise loader.err(path + (i,), f"{redact(label[:70])!r} is not a runner tag: letters, digits and . _ -, "
                             "starting with a letter or digit, at most 64 characters")
        if label in seen:
            raise loader.err(path + (i,), f"{label!r} is listed twice")
        seen.append(label)
    if not seen:
        raise loader.err(path, "is not a list of runner tags: it is empty", hint="leave the key out instead")
    return tuple(seen)


def _platform_map(loader, path: tuple, value: Any) -> tuple:
    """{platform: runner labels}: linux/arm64: [arm64] sends the arm64 layer images' jobs to arm64 runners."""
    raw = loader.mapping(path, value, what="a mapping of platform to runner tags")
    out = []
    for name, items in raw.items():
        if name not in platforms.PLATFORMS:
            raise loader.err(path + (name,), f"unknown platform {str(name)[:40]!r}",
                             hint="platforms imgbuild builds: " + ", ".join(platforms.PLATFORMS))
        out.append((name, _labels(loader, path + (name,), items)))
    return tuple(out)


def _gpu_map(loader, path: tuple, value: Any) -> tuple:
    """{GPU model or generation: runner labels}. One list for every GPU sent an A100 stack's GPU checks
    to H100 runners, so a plain list is refused with the form that replaced it."""
    gens = catalog.gpu_generations()
    if isinstance(value, list):
        raise loader.err(path, f"expected a mapping of GPU model or generation to runner tags, got {type_name(value)}",
                         hint=f"one list for every GPU sends each stack's GPU checks to any GPU runner; write "
                              f"e.g. {path[-1]}: {{A100: [gpu, a100], H100: [gpu, h100]}} or {{hopper: [gpu, hopper]}}")
    raw = loader.mapping(path, value, what="a mapping of GPU model or generation to runner tags")
    out = []
    for name, items in raw.items():
        if name not in catalog.gpus() and name not in gens:
            shown = redact(str(name)[:40])
            raise loader.err(path + (name,) if isinstance(name, str) and RUNNER_LABEL.match(name) else path,
                             f"unknown GPU or GPU generation {shown!r}" + did_you_mean(name, [*catalog.gpus(), *gens]),
                             hint="GPUs: " + ", ".join(catalog.gpus()) + "; generations: " + ", ".join(gens))
        out.append((name, _labels(loader, path + (name,), items)))
    if not out:
        raise loader.err(path, "is not a mapping of GPUs to runner tags: it is empty", hint="leave the key out instead")
    return tuple(out)


def _actions(loader, path: tuple, value: Any) -> dict:
    raw = loader.mapping(path, value, set(DEFAULT_ACTIONS), what="a mapping of the actions the workflow uses")
    out = {k: ActionPin(*v) for k, v in DEFAULT_ACTIONS.items()}
    for name, pin in raw.items():
        here = path + (name,)
        pin = loader.mapping(here, pin, ACTION_KEYS, what="a mapping with commit (and repo, version)")
        if pin.get("commit") is None:
            raise loader.err(here, "missing key 'commit'", hint="the full 40-hex commit of the action's release")
        commit = loader.string(here + ("commit",), pin["commit"])
        if not COMMIT.match(commit):
            raise loader.err(here + ("commit",), f"{redact(commit[:50])!r} is not a 40-hex commit: a tag or branch "
                             "can be moved under a workflow that trusts it")
        repo = loader.string(here + ("repo",), pin.get("repo", DEFAULT_ACTIONS[name][0]))
        if not ACTION_REPO.match(repo):
            raise loader.err(here + ("repo",), f"{redact(repo[:70])!r} is not an OWNER/REPO of an action")
        version = loader.string(here + ("version",), pin.get("version", ""))
        if version and not ACTION_VERSION.match(version):
            raise loader.err(here + ("version",), f"{redact(version[:40])!r} is not a version label (letters, "
                             "digits and . _ + -)")
        out[name] = ActionPin(repo, commit, version)
    return out


def _shown(text: str) -> str:
    """A refused value as an error message may quote it: shortened and redacted (a message reaches CI logs,
    and a value written where a name belongs may be the secret itself)."""
    return repr(redact(text[:12]) + ("..." if len(text) > 12 else ""))


def _secrets(loader, path: tuple, value: Any) -> tuple:
    """{ENV_NAME: {from: CI_SECRET_NAME, reach: all|protected|release, file: bool}}: names only."""
    raw = loader.mapping(path, value, what="a mapping of job variable names to CI secrets")
    if not raw:
        raise loader.err(path, "is not a mapping of secrets: it is empty", hint="leave the key out instead")
    out = []
    for env, entry in raw.items():
        if not (isinstance(env, str) and ENV_NAME.match(env)):
            # Named in the key path where it looks like a name; else only its length (it may be a value).
            named = isinstance(env, str) and re.match(r"^[A-Za-z0-9_.-]{1,40}\Z", env)
            raise loader.err(path + (env,) if named else path,
                             ("is not" if named else f"a key of {len(str(env))} characters (not shown) is not")
                             + " an environment variable name: capital letters, digits and _, not starting with "
                             "a digit",
                             hint="e.g. secrets: {DOCKER_AUTH_CONFIG: {from: RELEASE_DOCKER_AUTH, reach: protected}}")
        here = path + (env,)
        if env.startswith(SYSTEM_PREFIXES):
            raise loader.err(here, f"is not a name a secret may take: {', '.join(p + '*' for p in SYSTEM_PREFIXES)} "
                             "are the CI systems' own variables, which imgbuild reads to tell which pipeline it "
                             "runs in")
        entry = loader.mapping(here, entry, SECRET_KEYS, what="a mapping with from (and reach, file)")
        if entry.get("from") is None:
            raise loader.err(here, "missing key 'from'", hint="the name of the GitLab CI/CD variable or GitHub "
                             "secret that holds the value (never the value itself)")
        source = loader.string(here + ("from",), entry["from"])
        if not ENV_NAME.match(source):
            raise loader.err(here + ("from",), f"{_shown(source)} is not a CI secret name: capital letters, "
                             "digits and _, not starting with a digit",
                             hint="write the name of the GitLab CI/CD variable or GitHub secret, never its value")
        if source.startswith("GITHUB_"):
            raise loader.err(here + ("from",), "is not a CI secret name imgbuild writes: GitHub reserves names "
                             "starting with GITHUB_")
        reach = entry.get("reach", DEFAULT_REACH)
        if reach not in REACHES:
            shown = _shown(reach) if isinstance(reach, str) else type_name(reach)
            raise loader.err(here + ("reach",), f"{shown} is not one of {', '.join(REACHES)}",
                             hint="all: every job; protected: the release branch's jobs; release: the release "
                                  "jobs only")
        if env in SIGNING_ENV and reach == "all":
            raise loader.err(here + ("reach",), "can never be 'all' for the signing key: a branch or merge "
                             "request job would hold it and sign", hint="reach: protected (or release)")
        file = entry.get("file", False)
        if not isinstance(file, bool):
            raise loader.err(here + ("file",), f"expected true or false, got {type_name(file)}")
        out.append(Secret(env, source, reach, file))
    return tuple(out)


GPU_CHECKS_KEYS = {"waive"}
WAIVER_MAX = 200     # characters of a waiver's reason: one line, shown on cards, the catalog and in CI files


def _gpu_checks(loader, path: tuple, value: Any) -> tuple:
    """{waive: {STACK: REASON}}: each stack named, each with its reason, so that a stack added later is never
    released without GPU proof by a line written for the others. ((stack, reason), ...) in the file's order."""
    raw = loader.mapping(path, value, GPU_CHECKS_KEYS, what="a mapping with waive")
    example = "e.g. gpu_checks: {waive: {h100-megatron: \"no H100 runner until 2026-09; fused Adam checked by hand\"}}"
    if raw.get("waive") is None:
        raise loader.err(path, "missing key 'waive': the stacks released with their GPU checks skipped, each with "
                         "its reason", hint=example + "; leave gpu_checks out to require GPU proof of every stack")
    here = path + ("waive",)
    if not isinstance(raw["waive"], dict):
        raise loader.err(here, f"expected a mapping of stack name to the reason its GPU checks are waived, got "
                         f"{type_name(raw['waive'])}",
                         hint="name each stack with its own reason (one reason for every stack would also waive a "
                              "stack added later); " + example)
    # The stacks as written (site is read before them): a waiver naming no stack is refused here.
    data = getattr(getattr(loader, "doc", None), "data", None)
    stacks = data.get("stacks") if isinstance(data, dict) else None
    names = [str(n) for n in stacks] if isinstance(stacks, dict) else None   # None: the stacks loader says why
    listed = ("stacks: " + ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")) if names else None
    out = []
    for name, reason in raw["waive"].items():
        if not isinstance(name, str) or not RUNNER_LABEL.match(name):
            raise loader.err(here, f"a stack name of {len(str(name))} characters that is not a name (not shown)",
                             hint=listed)
        if names is not None and name not in names:
            raise loader.err(here + (name,), f"unknown stack {name!r}" + did_you_mean(name, names),
                             hint=listed)
        if reason is None or (isinstance(reason, str) and not reason.strip()):
            raise loader.err(here + (name,), "a waiver needs its reason: why this stack may be released with GPU "
                             "checks that never ran on one of its GPUs",
                             hint="it is shown on the stack's card, in the catalog and in CI files; " + example)
        if isinstance(reason, (dict, list)):
            raise loader.err(here + (name,), f"expected the reason as text, got {type_name(reason)}", hint=example)
        text = loader.string(here + (name,), reason).strip()
        if inert(text) != text:   # C1 controls, U+2028/2029 (line breaks to YAML), bidi overrides
            raise loader.err(here + (name,), "the reason holds control or format characters (a line break to YAML, "
                             "a bidi override): it is written into CI files and pages as one line of text")
        if len(text) > WAIVER_MAX:
            raise loader.err(here + (name,), f"the reason is {len(text)} characters; at most {WAIVER_MAX}",
                             hint="say it in one line; link to the longer story")
        out.append((name, text))
    if not out:
        raise loader.err(here, "waives no stack: it is empty", hint="leave gpu_checks out instead")
    return tuple(out)


def _timeouts(loader, path: tuple, value: Any) -> dict:
    raw = loader.mapping(path, value, set(DEFAULT_TIMEOUTS), what="a mapping of job roles to minutes")
    out = dict(DEFAULT_TIMEOUTS)
    for role, minutes in raw.items():
        if isinstance(minutes, bool) or not isinstance(minutes, int):
            raise loader.err(path + (role,), f"expected whole minutes, got {type_name(minutes)}")
        if not 1 <= minutes <= MAX_MINUTES:
            raise loader.err(path + (role,), f"{minutes} is not a number of minutes between 1 and {MAX_MINUTES}")
        out[role] = minutes
    return out


# GitHub events whose run may release: a push, or a run started by hand (or on a schedule) on the branch.
GITHUB_RELEASE_EVENTS = ("push", "workflow_dispatch", "schedule")


def release_refusal(settings: CiSettings, env) -> str | None:
    """Why a CI job may not move release tags here, or None where it may (and outside CI, where a person
    runs imgbuild). The generated pipelines never start a release off the release branch; this is the
    same rule read from the CI system's own variables, so a hand-edited pipeline, or `imgbuild build
    stack=...` in a branch's job, cannot move a tag either."""
    want = settings.release_branch
    setting = "site.ci.release_branch" if want else "the repository's default branch"
    if env.get("CI_PIPELINE_SOURCE"):            # GitLab (and gitlab-ci-local), child pipelines included
        if env["CI_PIPELINE_SOURCE"] == "merge_request_event":
            return "this is a merge request pipeline; only the release branch's pipelines release"
        branch = env.get("CI_COMMIT_BRANCH", "")
        want = want or env.get("CI_DEFAULT_BRANCH", "")
        if not branch:
            return "this pipeline is not a branch pipeline (a tag or a merge request); only the release branch's release"
        if not want:
            return "GitLab did not say which branch is the default one (CI_DEFAULT_BRANCH); set site.ci.release_branch"
        if branch != want:
            return f"this pipeline runs for branch {branch!r}; only {want!r} ({setting}) releases"
        return None
    if env.get("GITHUB_ACTIONS") == "true":
        event, ref = env.get("GITHUB_EVENT_NAME", ""), env.get("GITHUB_REF", "")
        if event not in GITHUB_RELEASE_EVENTS:
            return f"this run was started by a {event or 'unknown'} event; only a push to the release branch releases"
        if not want:
            try:
                with open(env.get("GITHUB_EVENT_PATH", ""), encoding="utf-8") as f:
                    want = ((json.load(f) or {}).get("repository") or {}).get("default_branch") or ""
            except (OSError, ValueError, AttributeError):
                want = ""
            if not isinstance(want, str) or not want:
                return "the event does not name the repository's default branch; set site.ci.release_branch"
        if ref != f"refs/heads/{want}":
            return f"this run is for {ref or 'no ref'!r}; only refs/heads/{want} ({setting}) releases"
    return None


__all__ = ["CiSettings", "ActionPin", "Secret", "parse", "release_refusal", "DEFAULT_ACTIONS", "DEFAULT_TIMEOUTS"]
