"""The end-to-end namespace shared by the docker tests: one fresh namespace in the local registry per
test session, the secrets every build gets (so that their absence from layers and logs is tested), and
the first full cpu-smoke build, which test_docker_build.py changes and test_probe_lock.py measures.
The fixtures `work` and `first` live in conftest.py (session scope)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from builder.ship.registry import Registry

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = os.environ.get("IMGBUILD_TEST_REGISTRY", "127.0.0.1:5000")
NS = f"imgbuild-test-{uuid.uuid4().hex[:8]}"
PIN_V2 = "1a6d04ff11a3a379285c6dc7862d82d095f0056c"   # tag v2 of the smoke-project mirror
TOKEN = f"dummy-token-{uuid.uuid4().hex}"
MARKER = f"# imgbuild-secret-marker-{uuid.uuid4().hex}"
# A real index URL with a token as its password: PyPI ignores it, so every build really uses it.
INDEX_TOKEN = f"index-token-{uuid.uuid4().hex}"
INDEX_URL = f"https://__token__:{INDEX_TOKEN}@pypi.org/simple"
NEEDLES = [TOKEN.encode(), MARKER.encode(), INDEX_TOKEN.encode()]


def make_work(path: Path) -> Path:
    """The secrets every e2e build is given: a CA bundle with a marker line, a netrc with a token."""
    ca = path / "ca-bundle.pem"
    host_ca = Path("/etc/ssl/certs/ca-certificates.crt")
    ca.write_text((host_ca.read_text() if host_ca.exists() else "") + f"\n{MARKER}\n")
    (path / "netrc").write_text(f"machine private-index.invalid login build password {TOKEN}\n")
    return path


def stacks_file(work: Path, name: str, mutate=lambda data: None) -> Path:
    """The shipped stacks.yaml in this session's namespace, as work/NAME.yaml, changed by `mutate`, with the
    shipped lock beside it (NAME.lock.yaml, unless a test wrote its own): every e2e build of cpu-smoke is the
    locked one a site makes, as the CI pipelines' and a newcomer's are. So the layers a test leaves as shipped
    have one key in every test (`first`'s), and BuildKit's cache serves them instead of DeepSpeed's ops being
    compiled once for the unlocked keys and again for the locked ones; a layer a test changes is built
    unlocked (its lock entry no longer matches its definition)."""
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": REGISTRY, "namespace": NS}
    mutate(data)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    lock = work / f"{name}.lock.yaml"
    if not lock.exists():
        shutil.copyfile(ROOT / "stacks.lock.yaml", lock)
    return path


def env_for(work: Path) -> dict:
    return dict(os.environ, IMGBUILD_HOME=str(work / "home"), IMGBUILD_CA_BUNDLE=str(work / "ca-bundle.pem"),
                IMGBUILD_NETRC=str(work / "netrc"), IMGBUILD_PIP_INDEX_URL=INDEX_URL, PYTHONUNBUFFERED="1")


def imgbuild(work: Path, *args: str, timeout: float = 3000, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the CLI; env: variables added to env_for(work) (another engine's DOCKER_HOST, a serial)."""
    proc = subprocess.run([sys.executable, "-m", "builder.cli", *args], cwd=work, env={**env_for(work), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)
    (work / "outputs.log").open("a").write(proc.stdout + proc.stderr)
    return proc


def at_once(work: Path, runs: list[tuple[dict, list[str]]], timeout: float = 1800) -> list[tuple[int, str]]:
    """Start every (env, argv) run of the CLI together and wait for all: [(exit code, output)]."""
    procs = [subprocess.Popen([sys.executable, "-m", "builder.cli", *argv], cwd=work, env={**env_for(work), **env},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for env, argv in runs]
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    (work / "outputs.log").open("a").write("".join(outs))
    return [(p.returncode, o) for p, o in zip(procs, outs)]


def key_states(stacks: str, stack: str) -> dict:
    """{layer: (state, digest)} for every key of the stack in the registry, state "complete" (an image
    with its passing proof), "absent" (no key tag) or "half: WHY". A killed build may leave only the
    first two; racing builders must leave only complete ones."""
    from builder.ship.bases import resolve
    from builder.ship.manifest import fetch_manifest, verdict
    from builder.plan.keys import make_plan
    from builder.load.spec import load_spec
    spec = load_spec(stacks)
    reg = Registry(REGISTRY)
    # The base as build resolves it: the mirrored Debian is an index, each platform's chain on its own entry.
    plan = make_plan(spec, [stack], resolve(spec, [stack]).require())
    out = {}
    for node in plan.chain(stack):
        repo = f"{spec.site.namespace}/layers/{node.name}"
        digest = reg.manifest_digest(repo, node.short)
        why = verdict(fetch_manifest(reg, repo, digest), node, digest) if digest else None
        out[node.name] = ("absent" if not digest else "complete" if why is None else f"half: {why}", digest)
    return out


def assert_one_consistent_state(stacks: str, stack: str, tag: str) -> None:
    """Every key of the stack names one image with its passing proof, and the release tag names the
    top key's image: what racing builders (one engine or many) must leave, whoever won."""
    states = key_states(stacks, stack)
    assert {state for state, _ in states.values()} == {"complete"}, states
    assert release(tag, stack) == list(states.values())[-1][1]


def release(tag: str, stack: str = "cpu-smoke") -> str | None:
    return Registry(REGISTRY).manifest_digest(f"{NS}/{stack}", tag)


def reports(work: Path) -> list[dict]:
    runs = sorted((work / "home" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    return [json.loads((r / "report.json").read_text()) for r in runs if (r / "report.json").exists()]


def actions(rep: dict) -> dict:
    return {n["layer"]: n["action"] for n in rep["nodes"].values()}


def first_build(work: Path) -> dict:
    """The full cpu-smoke build in the fresh namespace."""
    start = time.time()
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(stacks_file(work, "stacks")), "--date", "2026.11.29")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {"proc": proc, "seconds": time.time() - start, "report": reports(work)[-1]}
