"""`imgbuild ci gitlab|github`: a CI pipeline written from the plan, so that stacks.yaml stays the one
source of truth for what CI builds.

One job per distinct layer image (a node), needing its parent's job, so independent nodes run in
parallel; each runs `imgbuild build --node KEY`, which reuses a key the registry holds with passing
checks (a cheap job) and never moves a tag. Where a node has GPU checks and the site declares GPU
runners (site.ci), a second job runs the same command on a GPU runner: there the registry's proof
"validated without a GPU" is not enough (manifest.verdict), so the image is pulled and validated
again with the GPU checks really run. One release job per stack needs every node job (and GPU job) of
the stack and runs `imgbuild release`, which moves tags only from the proof it reads in the registry.

Every value is quoted where it lands: YAML by yaml.safe_dump, shell words by shlex.quote.
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
from builder.build.plan import Node, Plan, make_plan
from builder.load.spec import Spec

SYSTEMS = ("gitlab", "github")
KEY_SHOWN = 12                     # hex digits of the key in a job name
NAME_MAX = {"gitlab": 255, "github": 100}
GITHUB_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")
GITLAB_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")   # what we write: never a hidden (.x) or reserved name
GITLAB_STAGES = ("build", "gpu", "release")
DEFAULT_RUNS_ON = ("self-hosted",)
CHECKOUT = "actions/checkout@v4"
GITHUB_WORKFLOW = ".github/workflows/imgbuild.yml"
CURRENT_JOB = "workflow-current"
HEADER = ("# Written by `imgbuild ci {system}` from the plan of the stacks file: regenerate it, do not edit it.\n"
          "# One job per distinct layer image; `needs` follow the layer DAG; release jobs move tags only from\n"
          "# the proof imgbuild reads in the registry.\n")


@dataclass(frozen=True)
class Job:
    id: str
    role: str                  # node | gpu | release
    name: str                  # the layer's name (node, gpu) or the stack's (release)
    stack: str                 # the stack named in the command (a node: the first selected stack using it)
    argv: tuple                # imgbuild's arguments
    needs: tuple = ()
    key: str | None = None


@dataclass
class Pipeline:
    """The jobs of one pipeline, in an order that puts every job after the jobs it needs."""
    system: str
    jobs: dict = field(default_factory=dict)      # id -> Job
    notes: list = field(default_factory=list)     # what the user should know (printed on stderr)

    def add(self, job: Job) -> None:
        if job.id in self.jobs:
            raise SpecError(f"two jobs would be named {job.id!r}", hint="rename one of the layers or stacks")
        self.jobs[job.id] = job


def job_id(system: str, role: str, name: str, key: str | None = None) -> str:
    """`node-LAYER-KEY12`, `gpu-LAYER-KEY12`, `release-STACK`: a dot becomes `_` for GitHub Actions."""
    text = f"{role}-{name}" + (f"-{key[:KEY_SHOWN]}" if key else "")
    if system == "github":
        text = text.replace(".", "_")
    ok = GITHUB_ID if system == "github" else GITLAB_NAME
    if not ok.match(text) or len(text) > NAME_MAX[system]:
        raise SpecError(f"{text[:80]!r} cannot be a {system} job name (longer than {NAME_MAX[system]} characters?)",
                        hint="use a shorter layer or stack name")
    return text


def has_gpu_checks(node: Node) -> bool:
    return any(c.gpu for c in node.checks)


def gpu_runners(spec: Spec, system: str) -> tuple:
    ci = spec.site.ci
    return ci.gpu_runner_tags if system == "gitlab" else ci.github_gpu_runs_on


def plan_for(spec: Spec, names: list[str], offline: bool) -> tuple[Plan, list[str]]:
    """The plan with base digests resolved the way `build` resolves them (any registry a base names), so
    that the keys in the pipeline are the keys its node jobs compute. offline: ask no registry; bases
    neither pinned nor locked keep provisional keys (said in the notes) and their node jobs will fail."""
    from builder.build.bases import resolve
    bases = resolve(spec, names, lookup="none" if offline else "all")
    if bases.unresolved and not offline:
        bases.require()   # raises, naming the base
    notes = [f"base {name}: {why}; its keys are provisional, so the node jobs of the stacks on it will refuse "
             "(`imgbuild lock` or a declared digest fixes the keys)" for name, why in sorted(bases.unresolved.items())]
    return make_plan(spec, names, bases.digests), notes


def pipeline(spec: Spec, plan: Plan, names: list[str], system: str, common: tuple) -> Pipeline:
    """The jobs for the selected stacks. common: the arguments every command ends with (-f, --kinds)."""
    assert system in SYSTEMS, system
    out = Pipeline(system)
    gpu_ok = bool(gpu_runners(spec, system))
    node_job, gpu_job = {}, {}
    for key, node in plan.nodes.items():        # parents first
        stack = plan.users[key][0]
        argv = ("build", "--node", node.short, f"stack={stack}") + common
        needs = (node_job[node.parent],) if node.parent else ()
        node_job[key] = job_id(system, "node", node.name, node.short)
        out.add(Job(node_job[key], "node", node.name, stack, argv, needs, node.short))
        if has_gpu_checks(node) and gpu_ok:
            # Checks add up along the chain: a parent with GPU checks has a GPU job, and this one builds on
            # what it revalidated (build --node asks for a parent validated with a GPU on a GPU machine).
            needs = (node_job[key],) + ((gpu_job[node.parent],) if node.parent in gpu_job else ())
            gpu_job[key] = job_id(system, "gpu", node.name, node.short)
            out.add(Job(gpu_job[key], "gpu", node.name, stack, argv, needs, node.short))
    gpu_nodes = [n for n in plan.nodes.values() if has_gpu_checks(n)]
    if gpu_nodes and not gpu_ok:
        what = "site.ci.gpu_runner_tags" if system == "gitlab" else "site.ci.github_gpu_runs_on"
        out.notes.append(f"{len(gpu_nodes)} layer image(s) have GPU checks but {what} is not declared: no GPU jobs "
                         "were written, and those checks are recorded as skipped (needs a GPU)")
    for name in names:
        keys = plan.stacks[name]
        needs = tuple(node_job[k] for k in keys) + tuple(gpu_job[k] for k in keys if k in gpu_job)
        # With GPU runners the release reads the GPU results from the registry too, not only the job order.
        gpu_proof = ("--require-gpu-checks",) if any(k in gpu_job for k in keys) else ()
        out.add(Job(job_id(system, "release", name), "release", name, name,
                    ("release", f"stack={name}") + gpu_proof + common, needs))
    return out


class _Dumper(yaml.SafeDumper):
    """safe_dump without anchors and aliases: GitHub Actions long refused them, and a reader sees each job whole."""

    def ignore_aliases(self, data) -> bool:
        return True


def dump(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=False)


def command(imgbuild: str, argv: tuple) -> str:
    """One shell line: imgbuild's command (split into words, e.g. `.venv/bin/python -m builder.cli`) and
    the arguments, every word quoted."""
    words = shlex.split(imgbuild)
    if not words:
        raise SpecError("--imgbuild names no command", hint="e.g. --imgbuild imgbuild or --imgbuild '.venv/bin/imgbuild'")
    return shlex.join(words + list(argv))


def gitlab(spec: Spec, pipe: Pipeline, imgbuild: str) -> str:
    """The child pipeline: stages build, gpu, release; `needs` make it a DAG (jobs start as soon as what
    they need passed; a failed job leaves every job that needs it unrun)."""
    ci = spec.site.ci
    doc: dict = {"stages": list(GITLAB_STAGES)}
    stage = {"node": "build", "gpu": "gpu", "release": "release"}
    for job in pipe.jobs.values():
        body: dict = {"stage": stage[job.role], "needs": list(job.needs)}
        tags = ci.gpu_runner_tags if job.role == "gpu" else ci.runner_tags
        if tags:
            body["tags"] = list(tags)
        if job.role == "release":
            body["resource_group"] = f"imgbuild-release-{job.stack}"   # one tag move per stack at a time
        body["script"] = [command(imgbuild, job.argv)]
        doc[job.id] = body
    return HEADER.format(system="gitlab") + dump(doc)


def github(spec: Spec, pipe: Pipeline, imgbuild: str, regenerate: tuple, workflow: str) -> str:
    """The workflow: a first job regenerates it (`regenerate`: the arguments that wrote it) and fails on
    any difference from the committed file, so a stale workflow builds nothing; then the plan's jobs."""
    ci = spec.site.ci
    runs_on = list(ci.github_runs_on or DEFAULT_RUNS_ON)
    fresh = "$RUNNER_TEMP/imgbuild-workflow.yml"   # the runner's own variable, expanded by the shell
    jobs: dict = {CURRENT_JOB: {
        "name": "workflow matches stacks file",
        "runs-on": list(runs_on),
        "steps": [{"uses": CHECKOUT},
                  {"name": "regenerate", "run": command(imgbuild, regenerate + ("--out",)) + f' "{fresh}"'},
                  {"name": "compare", "run": f'diff -u {shlex.quote(workflow)} "{fresh}"'}],
    }}
    for job in pipe.jobs.values():
        needs = list(job.needs) or [CURRENT_JOB]
        label = {"node": f"layer {job.name} {job.key and job.key[:KEY_SHOWN]}",
                 "gpu": f"GPU checks {job.name} {job.key and job.key[:KEY_SHOWN]}", "release": f"release {job.name}"}
        jobs[job.id] = {"name": label[job.role], "needs": needs,
                        "runs-on": list(ci.github_gpu_runs_on if job.role == "gpu" else runs_on),
                        "steps": [{"uses": CHECKOUT}, {"run": command(imgbuild, job.argv)}]}
        if job.role == "release":
            jobs[job.id]["concurrency"] = {"group": f"imgbuild-release-{job.stack}", "cancel-in-progress": False}
    doc = {"name": "imgbuild", "on": ["push", "workflow_dispatch"], "permissions": {"contents": "read"},
           "jobs": jobs}
    return HEADER.format(system="github") + dump(doc)


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


def generate(spec: Spec, names: list[str], system: str, *, imgbuild: str = "imgbuild", common: tuple = (),
             regenerate: tuple = (), workflow: str = GITHUB_WORKFLOW, offline: bool = False,
             plan: Plan | None = None) -> tuple[str, list[str]]:
    """(pipeline YAML, notes) for the selected stacks. regenerate and workflow are GitHub's: the
    `imgbuild` arguments that write this workflow again and the path it is committed under."""
    notes: list[str] = []
    if plan is None:
        plan, notes = plan_for(spec, names, offline)
    pipe = pipeline(spec, plan, names, system, common)
    text = gitlab(spec, pipe, imgbuild) if system == "gitlab" else github(spec, pipe, imgbuild, regenerate, workflow)
    return text, notes + pipe.notes


__all__ = ["generate", "pipeline", "plan_for", "job_id", "Job", "Pipeline", "SYSTEMS"]
