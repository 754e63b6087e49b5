"""`imgbuild ci gitlab|github`: a CI pipeline written from the plan, so that stacks.yaml stays the one
source of truth for what CI builds, where it runs, and who may move a release tag.

One job per distinct layer image (a node), needing its parent's job, so independent nodes run in
parallel; each runs `imgbuild build --node KEY`, which reuses a key the registry holds with passing
checks (a cheap job) and never moves a tag. Where a node has GPU checks, a second job runs the same
command on a runner that has one of the GPUs of the stack that uses it (site.ci maps GPU models or
generations to runners): there the registry's proof "validated without a GPU" is not enough
(manifest.verdict), so the image is pulled and validated again with the GPU checks really run. One
release job per stack needs every node job (and GPU job) of the stack and runs `imgbuild release`, which
moves tags only from the proof it reads in the registry, and only on the release branch: every other
branch, merge request and pull request builds, validates and pushes under content keys, and moves no
tag. `imgbuild release` refuses the same on its own (ciconf.release_refusal), whatever the YAML says.

Every value is quoted where it lands: YAML by yaml.safe_dump, shell words by shlex.quote, rules and
`if:` expressions hold only names checked against a grammar in ciconf.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
import yaml

from builder.errors import SpecError
from builder import __version__
from builder.core import platforms as plat
from builder.plan.keys import Node, Plan
from builder.load import ciconf
from builder.load.spec import Spec, Stack
from builder.core import catalog
from builder.ship import gpuproof
from builder.textsafe import inert

SYSTEMS = ("gitlab", "github")
# Every job runs the imgbuild that wrote the pipeline: imgbuild refuses to run under another version.
PIN_VARIABLE = "IMGBUILD_REQUIRE_VERSION"
KEY_SHOWN = 12                     # hex digits of the key in a job name
NAME_MAX = {"gitlab": 255, "github": 100}
GITHUB_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")
GITLAB_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")   # what we write: never a hidden (.x) or reserved name
GITLAB_STAGES = ("build", "gpu", "release")
DEFAULT_RUNS_ON = ("self-hosted",)
GITHUB_WORKFLOW = ".github/workflows/imgbuild.yml"
CURRENT_JOB = "workflow-current"
REVIEW_JOB = "review"
REVIEW_FILE = "imgbuild-review.md"
# GitLab retries a job only where the runner failed it, never for a failed script (a failed check fails
# the same way twice, and a retry would only hide a flaky one). Reasons both GitLab's current schema and
# older ones (gitlab-ci-local 4.73's) know.
RUNNER_FAILURES = ("runner_system_failure", "api_failure", "scheduler_failure")
HEADER = ("# Written by `imgbuild ci {system}` from the plan of the stacks file: regenerate it, do not edit it.\n"
          "# One job per distinct layer image; `needs` follow the layer DAG; release jobs run only on {branch}\n"
          "# and move tags only from the proof imgbuild reads in the registry.\n")
# The first line of a file written with --offline: its keys may be provisional, so GitHub's self-check
# refuses it on a runner (and no node job would accept its keys).
OFFLINE_MARK = "# imgbuild: written with --offline"
OFFLINE_LINE = (OFFLINE_MARK + ": no registry was asked for base digests, so keys may be provisional. "
                "For review only: regenerate without --offline before committing.\n")


@dataclass(frozen=True)
class Job:
    id: str
    role: str                  # lock | node | gpu | release
    name: str                  # the layer's name (node, gpu) or the stack's (release)
    stack: str                 # the stack named in the command (a node: the first selected stack using it)
    argv: tuple                # imgbuild's arguments
    needs: tuple = ()
    key: str | None = None
    runners: tuple = ()        # runner tags / runs-on labels; () = the system's default for builders
    minutes: int = 60          # the job's timeout
    gpu: str = ""              # gpu jobs: the GPU model or generation whose runners take it


@dataclass
class Pipeline:
    """The jobs of one pipeline, in an order that puts every job after the jobs it needs."""
    system: str
    jobs: dict = field(default_factory=dict)      # id -> Job
    notes: list = field(default_factory=list)     # what the user should know (printed on stderr)
    header: list = field(default_factory=list)    # what the file itself says first, as comment lines

    def add(self, job: Job) -> None:
        if job.id in self.jobs:
            raise SpecError(f"two jobs would be named {job.id!r}", hint="rename one of the layers or stacks")
        self.jobs[job.id] = job


def job_id(system: str, role: str, name: str, key: str | None = None, suffix: str = "") -> str:
    """`node-LAYER-KEY12`, `gpu-LAYER-KEY12-GPU`, `release-STACK`: a dot becomes `_` for GitHub Actions."""
    text = f"{role}-{name}" + (f"-{key[:KEY_SHOWN]}" if key else "") + (f"-{suffix.lower()}" if suffix else "")
    if system == "github":
        text = text.replace(".", "_")
    ok = GITHUB_ID if system == "github" else GITLAB_NAME
    if not ok.match(text) or len(text) > NAME_MAX[system]:
        raise SpecError(f"{text[:80]!r} cannot be a {system} job name (longer than {NAME_MAX[system]} characters?)",
                        hint="use a shorter layer or stack name")
    return text


def has_gpu_checks(node: Node) -> bool:
    return any(c.gpu for c in node.checks)


def base_notes(bases) -> list[str]:
    """What a pipeline's first lines say of the bases the prepared plan (builder.prepared) could not resolve:
    their keys are provisional, so the node jobs of the stacks on them will refuse."""
    return [f"base {name}: {why}; its keys are provisional, so the node jobs of the stacks on it will refuse "
            "(`imgbuild lock` or a declared digest fixes the keys)" for name, why in sorted(bases.unresolved.items())]


def _gpu_choice(spec: Spec, plan: Plan, system: str, target: Stack) -> tuple[str, tuple] | None:
    """(GPU model or generation, runner labels) that take the stack's GPU jobs: the first of its GPUs (in
    the order stacks.yaml lists them) that a runner of the site has. Refused when the site declares GPU
    runners, the stack has GPU checks and names GPUs, and no runner has any of them: a GPU check on
    another GPU proves nothing about the stack's. A stack whose GPU checks the site waives
    (site.ci.gpu_checks) is written without GPU jobs instead."""
    ci = spec.site.ci
    stack = target.name
    for gpu in target.gpus:
        found = ci.runners_for(system, gpu)
        if found:
            return found
    if ci.gpu_map(system) and gpuproof.applies(spec, plan, stack) and ci.gpu_waiver(stack) is None:
        key = "gpu_runner_tags" if system == "gitlab" else "github_gpu_runs_on"
        offered = ", ".join(f"{name} ({' '.join(labels)})" for name, labels in ci.gpu_map(system))
        raise SpecError(f"stack {stack!r} targets {', '.join(g.name for g in target.gpus)}, and no {system} runner "
                        f"has one of them: site.ci.{key} offers {offered}",
                        file=str(spec.file), key=f"site.ci.{key}",
                        hint=f"add a runner for one of its GPUs (by model, or by generation such as "
                             f"{', '.join(sorted({g for g in map(catalog.gpu_generation, target.gpus) if g}))}), "
                             f"or release it without GPU proof on purpose: {_waive_hint(stack)}")
    return None


def _waive_hint(*stacks: str) -> str:
    return "site.ci.gpu_checks: {waive: {" + ", ".join(f"{s}: REASON" for s in stacks) + "}}"


def _unproven(spec: Spec, plan: Plan, system: str, stacks: list[Stack], choice: dict) -> None:
    """Refuse a pipeline in which a stack with GPUs and GPU checks would be released on checks no GPU ran: no
    GPU runner of the site has one of its GPUs (where it declares GPU runners, _gpu_choice said so already),
    and the site does not waive its GPU checks (site.ci.gpu_checks)."""
    ci = spec.site.ci
    bare = [s for s in stacks if not choice[s.name] and gpuproof.applies(spec, plan, s.name)
            and ci.gpu_waiver(s.name) is None]
    if not bare:
        return
    key = "site.ci.gpu_runner_tags" if system == "gitlab" else "site.ci.github_gpu_runs_on"
    named = ", ".join(f"{s.name!r} ({', '.join(g.name for g in s.gpus)})" for s in bare)
    first = bare[0].gpus[0].name
    labels = f"[gpu, {first.lower()}]" if system == "gitlab" else f"[self-hosted, {first.lower()}]"
    raise SpecError(f"{'stack' if len(bare) == 1 else 'stacks'} {named} {'has' if len(bare) == 1 else 'have'} GPU "
                    f"checks, and {key} is not declared: no GPU job would run them, and the release would move tags "
                    "on GPU checks that never ran on one of the stack's GPUs",
                    file=str(spec.file), key=key,
                    hint=f"declare the runners that have its GPUs (e.g. {key.rsplit('.', 1)[-1]}: {{{first}: {labels}}}), "
                         f"or release without GPU proof on purpose, with the reason: "
                         f"{_waive_hint(*(s.name for s in bare))}")


def pipeline(spec: Spec, plan: Plan, stacks: list[Stack], system: str, common: tuple) -> Pipeline:
    """The jobs for the selected stacks. common: the arguments every command ends with (-f, --kinds)."""
    assert system in SYSTEMS, system
    ci = spec.site.ci
    out = Pipeline(system)
    builders = ci.runner_tags if system == "gitlab" else (ci.github_runs_on or DEFAULT_RUNS_ON)
    choice = {stack.name: _gpu_choice(spec, plan, system, stack) for stack in stacks}
    _unproven(spec, plan, system, stacks, choice)
    names = [stack.name for stack in stacks]
    node_job: dict = {}
    gpu_job: dict = {}                          # (key, GPU model or generation) -> job id
    native = dict(ci.platform_map(system))      # platform -> the runners that build it natively
    emulated: set = set()
    # The lock first: a stale or missing entry stops the pipeline before any build, and every build installs
    # the locked sets (IB096 is an error under --require-locked).
    locked = ("--require-locked",) if ci.require_locked else ()
    lock_needs: tuple = ()
    if ci.lock_check:
        lock_job = job_id(system, "lock", "check")
        out.add(Job(lock_job, "lock", "check", names[0] if names else "",
                    ("lock", "--check") + tuple(f"stack={n}" for n in names) + common, (), None,
                    builders, ci.timeouts["review"]))
        lock_needs = (lock_job,)
    else:
        out.header.append("site.ci.lock_check: false: no job runs `imgbuild lock --check`; a stale lock file is "
                          "found only by the builds")
    if not ci.require_locked:
        out.header.append("site.ci.require_locked: false: node jobs build without --require-locked; a layer whose "
                          "pip set is not locked is resolved by pip at build time")
    for key, node in plan.nodes.items():        # parents first
        stack = plan.users[key][0]
        argv = ("build", "--node", node.short, f"stack={stack}") + locked + common
        needs = (node_job[node.parent],) if node.parent else lock_needs
        node_job[key] = job_id(system, "node", node.name, node.short,
                               "" if node.platform == plat.DEFAULT else plat.arch(node.platform))
        cuda = any(spec.stack(s).compiles_cuda(node.layer) for s in plan.users[key])
        # Each (layer, platform) is its own job: an arm64 layer image goes to the site's arm64 runners.
        runners = native.get(node.platform, builders)
        if node.platform not in native and node.platform != plat.DEFAULT:
            emulated.add(node.platform)
        out.add(Job(node_job[key], "node", node.name, stack, argv, needs, node.short, runners,
                    ci.timeouts["cuda_build" if cuda else "build"]))
        if not has_gpu_checks(node):
            continue
        # One GPU job for each GPU choice among the selected stacks that use this image. Checks add up along
        # the chain: a parent with GPU checks has a GPU job on the same runners, and this one builds on what
        # it revalidated (build --node asks for a parent validated with a GPU on a GPU machine).
        by_gpu: dict = {}                       # GPU choice -> (runner labels, the first stack of it)
        for s in plan.users[key]:
            if choice.get(s):
                by_gpu.setdefault(choice[s][0], (choice[s][1], s))
        for gpu, (labels, first) in by_gpu.items():
            parent_gpu = (gpu_job[(node.parent, gpu)],) if (node.parent, gpu) in gpu_job else ()
            gpu_job[(key, gpu)] = job_id(system, "gpu", node.name, node.short,
                                         gpu + ("" if node.platform == plat.DEFAULT else "-" + plat.arch(node.platform)))
            gpu_argv = ("build", "--node", node.short, f"stack={first}") + locked + common
            out.add(Job(gpu_job[(key, gpu)], "gpu", node.name, first, gpu_argv, (node_job[key],) + parent_gpu,
                        node.short, labels, ci.timeouts["gpu"], gpu))
    for platform in sorted(emulated):
        key_name = "site.ci.platform_runner_tags" if system == "gitlab" else "site.ci.github_platform_runs_on"
        out.notes.append(f"{platform} has no runners in {key_name}: its layer images are built on the builders under "
                         "QEMU emulation (slow; each runner needs qemu-user-static and binfmt-support)")
    for name in names:
        keys = plan.stacks[name]
        gpu = choice[name][0] if choice[name] else None
        mine = tuple(gpu_job[(k, gpu)] for k in keys if (k, gpu) in gpu_job)
        if not spec.stack(name).gpus and any(has_gpu_checks(plan.nodes[k]) for k in keys):
            out.notes.append(f"stack {name} names no GPU: its GPU checks stay skipped (needs a GPU)")
        waived = gpuproof.waived(spec, plan, name)
        if waived is not None:
            how = ("its GPU jobs still run them, and its release requires them" if mine else
                   "no GPU job runs them: it is released with them skipped")
            out.notes.append(f"stack {name} is released with its GPU checks waived (site.ci.gpu_checks: {waived}); {how}")
            out.header.append(f"stack {name}: GPU checks waived (site.ci.gpu_checks): {waived}"
                              + ("" if mine else "; released with them skipped"))
        # With GPU jobs the release reads the GPU results from the registry too, not only the job order. Every
        # stack that needs GPU proof has them unless the site waives it (_unproven): only a waived stack's
        # release goes without the flag, and promote reads the waiver.
        gpu_proof = ("--require-gpu-checks",) if mine else ()
        out.add(Job(job_id(system, "release", name), "release", name, name,
                    ("release", f"stack={name}") + gpu_proof + common,
                    tuple(node_job[k] for k in keys) + mine, None, builders, ci.timeouts["release"]))
    if not builders:
        out.notes.append("site.ci.runner_tags is not declared: the jobs carry no tags and run on any runner "
                         "of the project")
    elif system == "github" and not ci.github_runs_on:
        out.notes.append("site.ci.github_runs_on is not declared: the jobs run on any self-hosted runner "
                         "(runs-on: [self-hosted])")
    return out


class _Dumper(yaml.SafeDumper):
    """safe_dump without anchors and aliases: GitHub Actions long refused them, and a reader sees each job whole."""

    def ignore_aliases(self, data) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, data: str):
    # A script of several lines reads as the lines it is (a literal block), not as one quoted string.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _text)


def dump(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=False)


def command(imgbuild: str, argv: tuple) -> str:
    """One shell line: imgbuild's command (split into words, e.g. `.venv/bin/python -m builder.cli`) and
    the arguments, every word quoted."""
    words = shlex.split(imgbuild)
    if not words:
        raise SpecError("--imgbuild names no command", hint="e.g. --imgbuild imgbuild or --imgbuild '.venv/bin/imgbuild'")
    return shlex.join(words + list(argv))


def gitlab_duration(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    return " ".join(p for p in (f"{hours}h" if hours else "", f"{rest}m" if rest else "") if p)


def gitlab_release_rule(spec: Spec) -> str:
    """Only a branch pipeline of the release branch: merge request and tag pipelines have no
    CI_COMMIT_BRANCH, so they never match."""
    branch = spec.site.ci.release_branch
    return f'$CI_COMMIT_BRANCH == "{branch}"' if branch else "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"


def github_release_ref(spec: Spec) -> str:
    branch = spec.site.ci.release_branch
    return f"'refs/heads/{branch}'" if branch else "format('refs/heads/{0}', github.event.repository.default_branch)"


def _branch_words(spec: Spec) -> str:
    branch = spec.site.ci.release_branch
    return f"branch {branch} (site.ci.release_branch)" if branch else "the repository's default branch"


def _gitlab_variables(secrets) -> dict:
    """`ENV: $SOURCE` for each secret (site.ci.secrets): a name, never a value. A secret mapped to its own name
    is left out: GitLab gives a CI/CD variable to every job it may reach under that name, ahead of any YAML
    variable, and `X: $X` would only refer to itself where GitLab withholds X (a Protected variable off a
    protected branch)."""
    return {s.env: f"${s.source}" for s in secrets if s.env != s.source}


def gitlab(spec: Spec, pipe: Pipeline, imgbuild: str) -> str:
    """The child pipeline: stages build, gpu, release; `needs` make it a DAG (jobs start as soon as what
    they need passed; a failed job leaves every job that needs it unrun). Release jobs carry `rules:` that
    keep them out of every pipeline but the release branch's. Secrets (site.ci.secrets) are mapped by name:
    reach all in the job's `variables:`, reach protected and release in `rules: variables:` of the release
    rule, so that no other branch's or merge request's pipeline has the mapping."""
    ci = spec.site.ci
    rule = gitlab_release_rule(spec)
    doc: dict = {"stages": list(GITLAB_STAGES), "variables": {PIN_VARIABLE: __version__},
                 "default": {"retry": {"max": 2, "when": list(RUNNER_FAILURES)}}}
    stage = {"lock": "build", "node": "build", "gpu": "gpu", "release": "release"}
    for job in pipe.jobs.values():
        body: dict = {"stage": stage[job.role], "needs": list(job.needs)}
        everywhere = _gitlab_variables(ci.secrets_for(job.role, release_pipeline=False))
        guarded = _gitlab_variables(s for s in ci.secrets_for(job.role, release_pipeline=True)
                                    if s not in ci.secrets_for(job.role, release_pipeline=False))
        if job.role == "release":
            body["rules"] = [dict({"if": rule}, **({"variables": guarded} if guarded else {}))]
            body["resource_group"] = f"imgbuild-release-{job.stack}"   # one tag move per stack at a time
        elif guarded:
            # The mapping only where the release rule matches; the job itself runs in every pipeline.
            body["rules"] = [{"if": rule, "variables": guarded}, {"when": "on_success"}]
        if everywhere:
            body["variables"] = everywhere
        if job.runners:
            body["tags"] = list(job.runners)
        body["timeout"] = gitlab_duration(job.minutes)
        # A newer pipeline may cancel one that moves no tag: a killed build leaves no half-written state
        # (content keys), while a release runs to its end.
        body["interruptible"] = job.role != "release"
        body["script"] = [command(imgbuild, job.argv)]
        doc[job.id] = body
    return HEADER.format(system="gitlab", branch=_branch_words(spec)) + dump(doc)


def _pinned(text: str, actions: dict) -> str:
    """`uses: OWNER/REPO@COMMIT  # VERSION`: YAML writers drop comments, so the version goes in after."""
    for pin in actions.values():
        if pin.version:
            text = re.sub(rf"(uses: {re.escape(pin.uses)})$", rf"\1  # {pin.version}", text, flags=re.M)
    return text


def _github_secret(source: str, release_ref: str | None) -> str:
    """`${{ secrets.SOURCE }}`; with release_ref, the secret on the release ref and '' on any other."""
    if release_ref:
        return f"${{{{ github.ref == {release_ref} && secrets.{source} || '' }}}}"
    return f"${{{{ secrets.{source} }}}}"


def _github_secrets(body: dict, plain: tuple, guarded: tuple, release_ref: str) -> dict:
    """The job with its secrets (site.ci.secrets) mapped by name: a text secret in the job's `env:`; a
    file secret (file: true) written by a step after checkout into $RUNNER_TEMP (the runner empties it at
    each job's start and end), the variable then holding its path, and only where the secret is not empty.
    guarded: the secrets given only on the release ref (reach protected in node and GPU jobs)."""
    value = {s.env: _github_secret(s.source, None) for s in plain}
    value.update({s.env: _github_secret(s.source, release_ref) for s in guarded})
    files = [s.env for s in plain + guarded if s.file]
    text = {env: v for env, v in value.items() if env not in files}
    if not value:
        return body
    out: dict = {}
    for key, v in body.items():
        if key == "runs-on" and text:
            out["env"] = text
        out[key] = v
    if files:
        lines = ["umask 077"] + [
            f'if [ -n "${env}" ]; then printf \'%s\' "${env}" > "$RUNNER_TEMP/imgbuild-secret-{env}" && '
            f'echo "{env}=$RUNNER_TEMP/imgbuild-secret-{env}" >> "$GITHUB_ENV"; fi' for env in files]
        out["steps"] = out["steps"][:1] + [{"name": "secret files", "env": {env: value[env] for env in files},
                                            "run": "\n".join(lines)}] + out["steps"][1:]
    return out


def github(spec: Spec, pipe: Pipeline, imgbuild: str, regenerate: tuple, workflow: str, common: tuple) -> str:
    """The workflow: a first job refuses a file written offline, regenerates it (`regenerate`: the
    arguments that wrote it, never --offline) and fails on any difference from the committed file, so a
    stale workflow builds nothing; a review job on pull requests; then the plan's jobs. Release jobs run
    only for a push (or a manual run) of the release branch, in an environment the site can protect.
    Secrets (site.ci.secrets) by name: reach all in every job; reach protected in node and GPU jobs only on
    the release ref (elsewhere the variable is empty, and the job's environment is the staging one),
    and in release jobs; reach release in release jobs."""
    ci = spec.site.ci
    checkout = {"uses": ci.github_actions["checkout"].uses}
    upload = ci.github_actions["upload-artifact"].uses
    runs_on = list(ci.github_runs_on or DEFAULT_RUNS_ON)
    fresh = "$RUNNER_TEMP/imgbuild-workflow.yml"   # the runner's own variable, expanded by the shell
    release_ref = github_release_ref(spec)
    refuse = (f"if head -n 1 {shlex.quote(workflow)} | grep -q {shlex.quote('^' + OFFLINE_MARK)}; then "
              f"echo {shlex.quote('::error::' + workflow + ' was written with --offline (keys may be provisional): regenerate it without --offline and commit it')}; "
              "exit 1; fi")
    jobs: dict = {CURRENT_JOB: {
        "name": "workflow matches stacks file",
        "runs-on": list(runs_on),
        "timeout-minutes": ci.timeouts["review"],
        "steps": [dict(checkout),
                  {"name": "refuse a file written offline", "run": refuse},
                  {"name": "regenerate", "run": command(imgbuild, regenerate + ("--out",)) + f' "{fresh}"'},
                  {"name": "compare", "run": f'diff -u {shlex.quote(workflow)} "{fresh}"'}],
    }, REVIEW_JOB: {
        "name": "review: what the change rebuilds and which tags move",
        "if": "github.event_name == 'pull_request'",
        "runs-on": list(runs_on),
        "timeout-minutes": ci.timeouts["review"],
        "steps": [dict(checkout, **{"with": {"fetch-depth": 0}}),
                  # The base branch's name reaches the shell as a variable, never as text in the script.
                  {"name": "imgbuild diff", "env": {"BASE_REF": "${{ github.base_ref }}"},
                   "run": review_script(imgbuild, '"origin/$BASE_REF"', common)
                   + f'\ncat {REVIEW_FILE} >> "$GITHUB_STEP_SUMMARY"'},
                  {"name": "keep the report", "uses": upload,
                   "with": {"name": "imgbuild-review", "path": REVIEW_FILE}}],
    }}
    for name, role in ((CURRENT_JOB, "current"), (REVIEW_JOB, "review")):
        jobs[name] = _github_secrets(jobs[name], ci.secrets_for(role, release_pipeline=False), (), release_ref)
    # Node and GPU jobs run in the release environment on the release ref, in the staging one elsewhere,
    # where a protected secret can be an environment secret the release environment alone holds.
    zone = (f"${{{{ github.ref == {release_ref} && '{ci.github_environment}' || '{ci.github_staging_environment}' }}}}"
            if any(s.reach == "protected" for s in ci.secrets) else None)
    for job in pipe.jobs.values():
        needs = list(job.needs) or [CURRENT_JOB]
        label = {"lock": "lock file is current (imgbuild lock --check)",
                 "node": f"layer {job.name} {job.key and job.key[:KEY_SHOWN]}",
                 "gpu": f"GPU checks {job.name} {job.key and job.key[:KEY_SHOWN]} on {job.gpu}",
                 "release": f"release {job.name}"}
        body: dict = {"name": label[job.role], "needs": needs}
        if job.role == "release":
            body["if"] = f"(github.event_name == 'push' || github.event_name == 'workflow_dispatch') && github.ref == {release_ref}"
            body["environment"] = {"name": ci.github_environment}
            body["concurrency"] = {"group": f"imgbuild-release-{job.stack}", "cancel-in-progress": False}
        elif zone and job.role in ("node", "gpu"):   # the lock check gets no protected secret
            body["environment"] = {"name": zone}
        body["runs-on"] = list(job.runners or runs_on)
        body["timeout-minutes"] = job.minutes
        body["steps"] = [dict(checkout), {"run": command(imgbuild, job.argv)}]
        plain = ci.secrets_for(job.role, release_pipeline=job.role == "release")
        guarded = tuple(s for s in ci.secrets_for(job.role, release_pipeline=True) if s not in plain)
        jobs[job.id] = _github_secrets(body, plain, guarded, release_ref)
    doc = {"name": "imgbuild",
           # Every branch and pull request builds and validates; only the release branch's jobs move tags.
           "on": {"push": None, "pull_request": None, "workflow_dispatch": None},
           "permissions": {"contents": "read"},
           "env": {PIN_VARIABLE: __version__},
           # A newer push cancels an older run of the same branch or pull request, but never one of the
           # release branch, whose release jobs run to their end.
           "concurrency": {"group": "imgbuild-${{ github.ref }}",
                           "cancel-in-progress": f"${{{{ github.ref != {release_ref} }}}}"},
           "jobs": jobs}
    return HEADER.format(system="github", branch=_branch_words(spec)) + _pinned(dump(doc), ci.github_actions)


def review_script(imgbuild: str, target: str, common: tuple) -> str:
    """`imgbuild diff --markdown` of the target branch against the change, into REVIEW_FILE and the log.
    diff exits 1 when the two differ, which is the point of a review, not a failure; 2 is an error."""
    words = command(imgbuild, ("diff", "--markdown", "--registry"))
    return (f"{words} {target} HEAD {shlex.join(common)} > {REVIEW_FILE} || [ $? -eq 1 ]\n"
            f"cat {REVIEW_FILE}")


def write(path: Path, text: str) -> None:
    """Whole or not at all: a temporary file beside it, then a rename (a CI artifact is never half written)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def generate(prepared, system: str, *, imgbuild: str = "imgbuild", common: tuple = (),
             regenerate: tuple = (), workflow: str = GITHUB_WORKFLOW, offline: bool = False) -> tuple[str, list[str]]:
    """(pipeline YAML, notes) for the prepared stacks (builder.prepared), their bases resolved the way
    `build` resolves them (any registry a base names), so that the keys in the pipeline are the keys its
    node jobs compute; prepared offline (offline: the file's first line says so), bases neither pinned nor
    locked keep provisional keys (said in the notes). regenerate and workflow are GitHub's: the `imgbuild` arguments that write this workflow again
    and the path it is committed under."""
    spec, plan, notes = prepared.spec, prepared.locked(), base_notes(prepared.bases)
    if "--offline" in regenerate:
        raise ValueError("the self-check regenerates online: --offline never reaches it")
    pipe = pipeline(spec, plan, list(prepared.stacks), system, common)
    if spec.site.trust is None:
        pipe.notes.append("site.trust is not declared: nothing is signed, and any job that can write to "
                          f"{spec.site.registry}/{spec.site.namespace} can write what a release names (docs/trust.md)")
    elif not any(s.env in ciconf.SIGNING_ENV and s.reach != "all" for s in spec.site.ci.secrets):
        pipe.notes.append("site.trust is declared but site.ci.secrets maps no signing key (IMGBUILD_SIGNING_KEY or "
                          "IMGBUILD_SIGNING_KEY_FILE, reach protected): unless the release branch's runners set it "
                          "themselves, its jobs run in the staging zone and every release is refused")
    text = gitlab(spec, pipe, imgbuild) if system == "gitlab" else \
        github(spec, pipe, imgbuild, regenerate, workflow, common)
    # What the file says of itself before its first job (the offline mark stays its first line): the stacks it
    # releases with their GPU checks waived, and why. One line each, never a line break of the reason's own.
    said = "".join(f"# imgbuild: {inert(line)}\n" for line in pipe.header)
    return (OFFLINE_LINE if offline else "") + said + text, notes + pipe.notes


__all__ = ["generate", "pipeline", "base_notes", "job_id", "Job", "Pipeline", "SYSTEMS"]
