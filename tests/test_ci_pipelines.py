"""`imgbuild ci gitlab|github` (issue 12): the pipeline written from the plan, checked against the plan
for the shipped stacks.yaml and tests/data/ci-example.yaml (megatron-ci-lts as pinned before intent; every stack): one job per distinct layer
image, needs equal to the DAG's parent edges, release jobs that need exactly their stack's jobs, GPU
jobs only where a layer has GPU checks and the site declares GPU runners, names each system accepts,
commands that split back into the intended words. No Docker and no registry: `--offline` (keys of bases
neither pinned nor locked stay provisional, which changes no structure). tests/test_docker_gitlab.py runs
a generated pipeline for real."""

from __future__ import annotations

import re
import shutil
import shlex
from pathlib import Path

import pytest
import yaml

from builder.ship.bases import resolve
from builder.plan.keys import make_plan
from builder.load.spec import load_spec
from conftest import REPO, write_stacks

EXAMPLE = REPO / "tests" / "data" / "ci-example.yaml"   # examples/real/megatron-ci-lts before intent (pinned)
# A mixed site: A100 runners by model, Hopper and Blackwell runners by generation.
GPU_CI = {"runner_tags": ["docker"],
          "gpu_runner_tags": {"A100": ["gpu", "a100"], "hopper": ["gpu", "h100"], "blackwell": ["gpu", "b200"]},
          "github_runs_on": ["self-hosted", "linux"],
          "github_gpu_runs_on": {"A100": ["self-hosted", "a100"], "hopper": ["self-hosted", "h100"],
                                 "blackwell": ["self-hosted", "b200"]}}
GITLAB_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")
GITHUB_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}\Z")
RESERVED = {"image", "services", "stages", "types", "before_script", "after_script", "variables", "cache",
            "include", "true", "false", "nil", "workflow", "default", "pages"}


def waive_all(source: Path) -> dict:
    """site.ci.gpu_checks waiving every stack of a stacks file, with a reason: a site without GPU runners
    writes no pipeline that would release a stack with GPUs on GPU checks no GPU ran, unless it waives them."""
    return {"gpu_checks": {"waive": {name: "no GPU runners on this test site"
                                     for name in yaml.safe_load(source.read_text())["stacks"]}}}


def with_ci(tmp_path: Path, source: Path, ci: dict | None, sub: str) -> Path:
    """A copy of a stacks file (it names no file beside it) with site.ci set, or without site.ci."""
    data = yaml.safe_load(source.read_text())
    data.setdefault("site", {}).pop("ci", None)
    if ci is not None:
        data["site"]["ci"] = ci
    return write_stacks(tmp_path / sub, data)


def generated(cli, system: str, file: Path, *extra: str) -> tuple[dict, str, str]:
    res = cli("ci", system, "--all", "--offline", "-f", str(file), *extra)
    assert res.code == 0, res.output
    return yaml.safe_load(res.out), res.out, res.err


def offline_plan(file: Path):
    spec = load_spec(file)
    names = list(spec.stacks)
    return spec, names, make_plan(spec, names, resolve(spec, names, lookup="none").digests)


CASES = [(source, ci, system) for source in ("shipped", "example") for ci in (None, "gpu")
         for system in ("gitlab", "github")]


@pytest.mark.parametrize("source,ci,system", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_the_pipeline_is_the_plan(cli, tmp_path, source, ci, system):
    file = with_ci(tmp_path, STACKS_OF[source], GPU_CI if ci else waive_all(STACKS_OF[source]), "s")
    doc, text, err = generated(cli, system, file)
    spec, names, plan = offline_plan(file)
    jobs = doc if system == "gitlab" else doc["jobs"]
    if system == "gitlab":
        assert doc["stages"] == ["build", "gpu", "release"]
        assert doc["default"]["retry"]["when"] and "script_failure" not in doc["default"]["retry"]["when"]
        jobs = {k: v for k, v in doc.items() if k not in ("stages", "default", "variables")}
    # Every job runs the imgbuild that wrote the file (imgbuild refuses another version).
    from builder import __version__
    assert (doc["variables"] if system == "gitlab" else doc["env"]) == {"IMGBUILD_REQUIRE_VERSION": __version__}
    ident = (lambda s: s) if system == "gitlab" else (lambda s: s.replace(".", "_"))
    node_job = {k: ident(f"node-{n.name}-{n.short[:12]}") for k, n in plan.nodes.items()}
    gpu_nodes = {k for k, n in plan.nodes.items() if any(c.gpu for c in n.checks)}
    assert gpu_nodes, "the fixture should have layers with GPU checks"
    gmap = dict(GPU_CI["gpu_runner_tags" if system == "gitlab" else "github_gpu_runs_on"]) if ci else {}

    def choice(stack: str):
        """The first GPU of the stack, in its order, that a runner has: by model, else by generation."""
        from builder.core import catalog
        for gpu in spec.stack(stack).gpus:
            for name in (gpu.name, catalog.gpu_generation(gpu)):
                if name in gmap:
                    return name
        return None
    gpu_job = {(k, choice(s)): ident(f"gpu-{plan.nodes[k].name}-{plan.nodes[k].short[:12]}-{choice(s).lower()}")
               for k in gpu_nodes for s in plan.users[k] if choice(s)}

    def script(job: dict) -> list[str]:
        lines = job["script"] if system == "gitlab" else [s["run"] for s in job["steps"] if "run" in s]
        assert len(lines) == 1, job
        return shlex.split(lines[0])

    def needs(job: dict) -> list[str]:
        return list(job["needs"])

    def runners(job: dict):
        return job.get("tags") if system == "gitlab" else job["runs-on"]

    # One job per distinct node (each once, shared ones too), GPU jobs per GPU choice, release jobs (and
    # GitHub's self-check and review).
    expected = set(node_job.values()) | set(gpu_job.values()) | {ident(f"release-{s}") for s in names} | {"lock-check"}
    if system == "github":
        expected |= {"workflow-current", "review"}
    assert set(jobs) == expected
    assert len(node_job) == len(plan.nodes) == len(set(node_job.values()))
    for name in jobs:
        assert (GITLAB_NAME.match(name) and name not in RESERVED and len(name) <= 255) if system == "gitlab" \
            else GITHUB_ID.match(name), name
    for key, node in plan.nodes.items():
        job = jobs[node_job[key]]
        # A chain starts after the lock check; every build installs the locked sets (--require-locked).
        parent = [node_job[node.parent]] if node.parent else ["lock-check"]
        assert needs(job) == parent, (node.name, job)
        argv = script(job)
        assert argv[:3] == ["imgbuild", "build", "--node"] and argv[3] == node.short, argv
        assert argv[4].startswith("stack=") and argv[4][6:] in plan.users[key] and \
            argv[5:] == ["--require-locked", "-f", str(file)], argv
        assert runners(job) == ((GPU_CI["runner_tags"] if ci else None) if system == "gitlab"
                                else GPU_CI["github_runs_on"] if ci else ["self-hosted"])
        for (k, gpu), gid in gpu_job.items():
            if k != key:
                continue
            gjob = jobs[gid]
            assert script(gjob) == argv                       # the same node job, on a runner with that GPU
            assert needs(gjob) == [node_job[key]] + ([gpu_job[(node.parent, gpu)]] if (node.parent, gpu) in gpu_job else [])
            assert runners(gjob) == gmap[gpu]
            assert gjob.get("stage", "gpu") == "gpu"
    lock = jobs["lock-check"]
    assert script(lock) == ["imgbuild", "lock", "--check", *(f"stack={n}" for n in names), "-f", str(file)]
    assert needs(lock) == ([] if system == "gitlab" else ["workflow-current"])
    for name in names:
        job = jobs[ident(f"release-{name}")]
        chain = plan.stacks[name]
        mine = [gpu_job[(k, choice(name))] for k in chain if (k, choice(name)) in gpu_job]
        assert sorted(needs(job)) == sorted([node_job[k] for k in chain] + mine)
        # With GPU jobs, the release reads their results in the registry too (--require-gpu-checks).
        gpu_proof = ["--require-gpu-checks"] if mine else []
        assert script(job) == ["imgbuild", "release", f"stack={name}", *gpu_proof, "-f", str(file)]
    if not ci:
        # No GPU runner: every stack with GPUs and GPU checks is released with them skipped, as the site waived,
        # and the file and the notes say so.
        assert not any(j.startswith("gpu-") for j in jobs)
        waived = [s for s in names if spec.stack(s).gpus and any(c.gpu for k in plan.stacks[s] for c in plan.nodes[k].checks)]
        assert waived
        for name in waived:
            assert f"# imgbuild: stack {name}: GPU checks waived (site.ci.gpu_checks): no GPU runners on this test site" in text
            assert f"stack {name} is released with its GPU checks waived" in err
        assert ("run on any runner" if system == "gitlab" else "any self-hosted runner") in err
        # Without the waiver, the same site gets no pipeline: the stacks and the setting that is missing are named.
        bare = with_ci(tmp_path, STACKS_OF[source], None, "bare")
        res = cli("ci", system, "--all", "--offline", "-f", str(bare))
        key = "site.ci.gpu_runner_tags" if system == "gitlab" else "site.ci.github_gpu_runs_on"
        assert res.code == 2 and res.out == "", res.output
        assert f"{bare}: {key}: " in res.err and "site.ci.gpu_checks" in res.err, res.err
        assert all(repr(s) in res.err for s in waived), res.err
    assert "&id" not in text and "*id" not in text           # no YAML aliases: each job whole


STACKS_OF = {"shipped": REPO / "stacks.yaml", "example": EXAMPLE}


def test_shared_layers_are_one_job_needed_by_every_stack_that_uses_them(cli, tmp_path):
    doc, _, _ = generated(cli, "gitlab", with_ci(tmp_path, REPO / "stacks.yaml", waive_all(REPO / "stacks.yaml"), "s"))
    spec, names, plan = offline_plan(tmp_path / "s" / "stacks.yaml")
    shared = [n for k, n in plan.nodes.items() if len(plan.users[k]) > 1]
    assert shared
    for node in shared:
        job = f"node-{node.name}-{node.short[:12]}"
        for stack in plan.users[node.key]:
            assert job in doc[f"release-{stack}"]["needs"]


def test_the_github_workflow_regenerates_to_itself(cli, tmp_path):
    """The check job's command, run again, writes the very same file: a committed workflow is current
    exactly when that job's diff is empty. Every base of this file is pinned, so no registry is asked."""
    data = yaml.safe_load(EXAMPLE.read_text())
    for name, base in data["bases"].items():
        base["digest"] = "sha256:" + f"{abs(hash(name)) % 16:x}" * 64
    data.setdefault("site", {})["ci"] = dict(GPU_CI, release_branch="release/stable")
    file = write_stacks(tmp_path / "s", data)
    out = tmp_path / "imgbuild.yml"
    res = cli("ci", "github", "--all", "-f", str(file), "--out", str(out), "--workflow", str(out))
    assert res.code == 0, res.output
    doc = yaml.safe_load(out.read_text())
    steps = doc["jobs"]["workflow-current"]["steps"]
    regen = shlex.split(steps[2]["run"])
    assert regen[:3] == ["imgbuild", "ci", "github"] and regen[-2:] == ["--out", "$RUNNER_TEMP/imgbuild-workflow.yml"]
    assert shlex.split(steps[3]["run"]) == ["diff", "-u", str(out), "$RUNNER_TEMP/imgbuild-workflow.yml"]
    # The release branch setting is part of what it regenerates.
    assert "refs/heads/release/stable" in doc["jobs"]["release-megatron-ci-lts"]["if"]
    again = tmp_path / "again.yml"
    res = cli(*regen[1:-1], str(again))
    assert res.code == 0, res.output
    assert again.read_bytes() == out.read_bytes()
    assert set(doc["on"]) == {"push", "pull_request", "workflow_dispatch"} and doc["permissions"] == {"contents": "read"}
    assert "--offline" not in regen


def test_words_are_quoted(cli, tmp_path):
    """A stacks file path with a space and a quote, and an imgbuild command of several words, split back
    into exactly the words meant."""
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    file = write_stacks(tmp_path / "my site's stacks", data, "stacks $HOME.yaml")
    cmd = ".venv/bin/python -m builder.cli"
    for system in ("gitlab", "github"):
        res = cli("ci", system, "stack=cpu-smoke", "--offline", "-f", str(file), "--imgbuild", cmd)
        assert res.code == 0, res.output
        doc = yaml.safe_load(res.out)
        jobs = doc if system == "gitlab" else doc["jobs"]
        release = jobs["release-cpu-smoke"]
        line = release["script"][0] if system == "gitlab" else release["steps"][1]["run"]
        assert shlex.split(line) == [*cmd.split(), "release", "stack=cpu-smoke", "-f", str(file)]


def test_out_writes_the_file_and_stdout_stays_empty(cli, tmp_path):
    out = tmp_path / "child.yml"
    res = cli("ci", "gitlab", "stack=cpu-smoke", "--offline", "--out", str(out), "-f", str(REPO / "stacks.yaml"))
    assert res.code == 0 and res.out == "" and f"ok: {out}" in res.err, res.output
    assert "release-cpu-smoke" in yaml.safe_load(out.read_text())


def test_an_unresolvable_base_is_refused_without_offline(cli, tmp_path, monkeypatch):
    from builder.errors import RegistryError
    import builder.ship.bases as bases

    class Down:
        def __init__(self, host):
            pass

        def get_manifest(self, repo, ref):
            raise RegistryError("unreachable (test)")

        def manifest_digest(self, repo, ref):
            raise RegistryError("unreachable (test)")

    monkeypatch.setitem(bases.resolve.__kwdefaults__, "registry", Down)
    # The shipped stacks without their lock (which records the Debian base's digest): nothing answers for it.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(REPO / "stacks.yaml", bare / "stacks.yaml")
    res = cli("ci", "gitlab", "stack=cpu-smoke", "-f", str(bare / "stacks.yaml"))
    assert res.code == 6 and "cannot resolve base 'debian-bookworm'" in res.err, res.output


def test_the_documented_parent_pipeline_generates_then_triggers():
    """docs/ci.md's parent .gitlab-ci.yml: gitlab-ci-local runs it for real (test_docker_gitlab.py); here its shape."""
    text = (REPO / "docs" / "ci.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "trigger:" in b)
    doc = yaml.safe_load(block)
    gen, trig = doc["generate"], doc["images"]
    assert doc["stages"] == [gen["stage"], trig["stage"]]
    words = shlex.split(gen["script"][0])
    assert words[:3] == ["imgbuild", "ci", "gitlab"] and "--all" in words
    assert words[words.index("--out") + 1] == "child.yml" and gen["artifacts"]["paths"] == ["child.yml"]
    assert trig["needs"] == ["generate"]
    assert trig["trigger"] == {"include": [{"artifact": "child.yml", "job": "generate"}], "strategy": "depend"}


BAD_CI = [
    ("unknown key", "  ci:\n    runner_tag: [docker]\n", "IB201", 6, "site.ci.runner_tag", "unknown key 'runner_tag'"),
    ("not a list", "  ci:\n    runner_tags: docker\n", "IB202", 6, "site.ci.runner_tags",
     "expected a list of runner tags, got"),
    # One tag list for every GPU sent the A100 stack's GPU checks to H100 runners: refused with the new form.
    ("one list for every GPU", "  ci:\n    gpu_runner_tags: [gpu, h100]\n", "IB202", 6, "site.ci.gpu_runner_tags",
     "expected a mapping of GPU model or generation to runner tags"),
    ("a space", "  ci:\n    gpu_runner_tags: {H100: [gpu, 'h 100']}\n", "IB208", 6, "site.ci.gpu_runner_tags.H100[1]",
     "is not a runner tag"),
    ("unknown GPU", "  ci:\n    github_gpu_runs_on: {h100: [self-hosted]}\n", "IB204", 6,
     "site.ci.github_gpu_runs_on.h100", "unknown GPU or GPU generation 'h100' (did you mean 'H100'?)"),
    ("shell", "  ci:\n    github_runs_on:\n      - self-hosted\n      - '$(reboot)'\n", "IB208", 8,
     "site.ci.github_runs_on[1]", "is not a runner tag"),
    ("twice", "  ci:\n    runner_tags: [docker, docker]\n", "IB208", 6, "site.ci.runner_tags[1]", "listed twice"),
    ("not a mapping", "  ci: [docker]\n", "IB202", 5, "site.ci", "expected a mapping of CI settings"),
    ("a mapping", "  ci:\n    runner_tags: [{a: b}]\n", "IB202", 6, "site.ci.runner_tags[0]", "expected"),
    ("branch", "  ci:\n    release_branch: 'main\\\" || true'\n", "IB208", 6, "site.ci.release_branch",
     "is not a branch name"),
    ("branch ..", "  ci:\n    release_branch: a..b\n", "IB208", 6, "site.ci.release_branch", "is not a branch name"),
    ("action by tag", "  ci:\n    github_actions: {checkout: {commit: v4}}\n", "IB206", 6,
     "site.ci.github_actions.checkout.commit", "is not a 40-hex commit"),
    ("unknown action", "  ci:\n    github_actions: {setup-python: {commit: " + "a" * 40 + "}}\n", "IB201", 6,
     "site.ci.github_actions.setup-python", "unknown key 'setup-python'"),
    ("unknown platform", "  ci:\n    platform_runner_tags: {arm64: [arm64]}\n", "IB204", 6,
     "site.ci.platform_runner_tags.arm64", "unknown platform 'arm64'"),
    ("platform runner", "  ci:\n    github_platform_runs_on: {linux/arm64: ['$(id)']}\n", "IB208", 6,
     "site.ci.github_platform_runs_on.linux/arm64[0]", "is not a runner tag"),
    ("timeout", "  ci:\n    timeouts: {build: 0}\n", "IB208", 6, "site.ci.timeouts.build", "is not a number of minutes"),
    ("timeout text", "  ci:\n    timeouts: {cuda_build: 4h}\n", "IB202", 6, "site.ci.timeouts.cuda_build",
     "expected whole minutes"),
]


@pytest.mark.parametrize("case", BAD_CI, ids=[c[0] for c in BAD_CI])
def test_bad_site_ci_is_refused_with_file_line_and_key(cli, tmp_path, case):
    _, snippet, rule, line, key, reason = case
    head = "version: 1\nsite:\n  registry: 127.0.0.1:5000\n  namespace: imgbuild\n"
    rest = yaml.safe_load((REPO / "stacks.yaml").read_text())
    rest.pop("site"), rest.pop("version", None)
    file = write_stacks(tmp_path / "s", head + snippet + yaml.safe_dump(rest, sort_keys=False))
    for args in (("check", "-f", str(file)), ("ci", "gitlab", "--all", "--offline", "-f", str(file))):
        res = cli(*args)
        assert res.code == 2, res.output
        assert f"spec error[{rule}]: {file}:{line}: {key}: " in res.err and reason in res.err, res.err


def test_site_ci_is_read_into_the_site():
    import builder.load.spec as spec_mod
    assert "ci" in spec_mod.SITE_KEYS
    spec = load_spec(REPO / "stacks.yaml")
    assert spec.site.ci == spec_mod.CiSettings()


# -- several platforms (issue 22): each (layer, platform) is a job; arm64 jobs go to arm64 runners ----------

ARM_WHEEL = {"file": "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
             "sha256": "3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"}


def two_platform_site(tmp_path: Path, ci: dict) -> Path:
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    params = data["layers"]["cpu-torch-2.13"]["params"]
    params["wheel"] = [params["wheel"], ARM_WHEEL]
    data["stacks"]["cpu-smoke"].update(platforms=["linux/amd64", "linux/arm64"], tags=["{stack}", "{stack}-{date}"])
    data["site"]["ci"] = dict(ci, **waive_all(REPO / "stacks.yaml"))   # the GPU stacks have no GPU runner here
    return write_stacks(tmp_path / "both", data)


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_each_platform_of_a_stack_has_its_own_jobs_on_its_own_runners(cli, tmp_path, system):
    ci = {"runner_tags": ["docker"], "platform_runner_tags": {"linux/arm64": ["docker", "arm64"]},
          "github_runs_on": ["self-hosted", "x64"], "github_platform_runs_on": {"linux/arm64": ["self-hosted", "ARM64"]}}
    file = two_platform_site(tmp_path, ci)
    doc, _, err = generated(cli, system, file, "stack=cpu-smoke")
    jobs = doc["jobs"] if system == "github" else {k: v for k, v in doc.items() if isinstance(v, dict) and "script" in v}
    spec, _, plan = offline_plan(file)
    runners = {"linux/amd64": ["docker"] if system == "gitlab" else ["self-hosted", "x64"],
               "linux/arm64": ["docker", "arm64"] if system == "gitlab" else ["self-hosted", "ARM64"]}
    for platform in ("linux/amd64", "linux/arm64"):
        for node in plan.chain("cpu-smoke", platform):
            name = next(n for n in jobs if n.startswith(f"node-{node.name}-{node.short[:12]}".replace(".", "_" if system == "github" else ".")))
            assert name.endswith("-arm64") == (platform == "linux/arm64")
            job = jobs[name]
            assert (job["tags"] if system == "gitlab" else job["runs-on"]) == runners[platform], name
            assert f"--node {node.short}" in " ".join(job["script"] if system == "gitlab" else
                                                       [s.get("run", "") for s in job["steps"]])
    release = jobs["release-cpu-smoke"]
    needs = set(release["needs"])
    assert len([n for n in needs if n.startswith("node-")]) == 8   # both chains: one failed arm64 job holds it back
    assert "QEMU" not in err


def test_a_platform_without_runners_builds_emulated_and_says_so(cli, tmp_path):
    file = two_platform_site(tmp_path, {"runner_tags": ["docker"]})
    doc, _, err = generated(cli, "gitlab", file, "stack=cpu-smoke")
    arm = [v for k, v in doc.items() if k.endswith("-arm64")]
    assert len(arm) == 4 and all(v["tags"] == ["docker"] for v in arm)
    assert "linux/arm64 has no runners in site.ci.platform_runner_tags" in err and "QEMU emulation" in err
