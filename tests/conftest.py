"""Shared fixtures. Unit tests need no Docker, network or registry and run in seconds; tests marked
docker/registry pass one gate here: skipped with the reason where no engine or registry answers, and
failed instead when IMGBUILD_REQUIRE_DOCKER=1 (scripts/test.sh and CI set it)."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
STACKS = REPO / "stacks.yaml"
GOLDEN = Path(__file__).resolve().parent / "golden"
TEST_REGISTRY = os.environ.get("IMGBUILD_TEST_REGISTRY", "127.0.0.1:5000")
DOCKER = "/usr/bin/docker"


@functools.cache
def docker_unavailable() -> str | None:
    """Why the docker tests cannot run here, or None. Asked once per session."""
    from builder.ship.registry import Registry
    try:
        Registry(TEST_REGISTRY).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "not available"
        return f"no registry at {TEST_REGISTRY}: {exc}"
    if not Path(DOCKER).exists() or subprocess.run([DOCKER, "info"], capture_output=True).returncode:
        return "no Docker engine answers"
    if not Registry(TEST_REGISTRY).manifest_digest("mirror/debian", "bookworm"):
        return f"{TEST_REGISTRY}/mirror/debian:bookworm is not mirrored"
    return None


def slurm_cluster() -> str | None:
    """Why the one-machine Slurm cluster (scripts/slurm-local.sh: this host's CPUs, 8 declared GPUs) is not
    there, or None. Started here when missing where the whole suite runs (as root, after setup-test-host.sh)."""
    import shutil
    if not shutil.which("sbatch"):
        return "no Slurm here: scripts/setup-test-host.sh installs slurm-wlm"
    up = subprocess.run(["sinfo", "-h", "-N", "-o", "%t %G"], capture_output=True, text=True)
    if up.returncode == 0 and any(s in up.stdout for s in ("idle", "mix", "alloc")) and "gpu:" in up.stdout:
        return None
    if os.geteuid() != 0:
        return "the local Slurm cluster is not up: scripts/slurm-local.sh start (as root)"
    start = subprocess.run(["bash", str(REPO / "scripts" / "slurm-local.sh"), "start"], capture_output=True, text=True)
    return None if start.returncode == 0 else f"scripts/slurm-local.sh start failed: {start.stderr[-500:]}"


def pytest_runtest_setup(item):
    # A hook, not a fixture: it runs before the module-scoped fixtures that would start building.
    if not (item.get_closest_marker("docker") or item.get_closest_marker("registry")):
        return
    why = docker_unavailable()
    if why:
        if os.environ.get("IMGBUILD_REQUIRE_DOCKER") == "1":
            pytest.fail(f"Docker tests are required here but {why} (run scripts/setup-host.sh)")
        pytest.skip(f"{why}; run scripts/setup-host.sh to enable the docker tests")


# Running at once (pytest-xdist; `scripts/test.sh` passes -n 2 --dist loadfile --no-loadscope-reorder,
# for the docker files too): every worker is its own process, so it has its own e2e namespace (e2e.NS),
# work folder and `first` build, and each test file runs whole on one worker, in file order, as in a
# serial run. (xdist's loadgroup, which could keep several files on one worker, does nothing under
# pytest 9: it renames item._nodeid, which pytest 9 no longer reads.) Every docker file depends only on
# `first` and on its own earlier tests, never on another file's; no test stops what the
# workers share (the gc tests collect a registry of their own); a test that empties an engine has one of its own (engine C). Under xdist
# the files are handed out longest first: the Podman file (LONGEST), the files that build on this session's cpu-smoke (`first`,
# `work`), the other docker files, the slow unit files, the rest. Without xdist nothing is reordered.
SHARED_STATE = {"work", "first"}
# Handed out before the rest: the longest file (about 17 min on one worker: cpu-smoke built and rebuilt with
# Podman). In name order it started after every other file that builds on `first` (33 min into a cold run), and
# the run ended with it alone on one worker while the other had nothing left.
LONGEST = {"test_docker_podman.py"}


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    docker = {i.path.name for i in items if i.get_closest_marker("docker") or i.get_closest_marker("registry")}
    shared = {i.path.name for i in items if i.path.name in docker and SHARED_STATE & set(i.fixturenames)}
    slow = {i.path.name for i in items if i.get_closest_marker("slow")}

    def rank(item) -> int:
        name = item.path.name
        if name in LONGEST:
            return 0
        return 1 if name in shared else 2 if name in docker else 3 if name in slow else 4

    items.sort(key=rank)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="Rewrite tests/golden/ from the current rendering instead of comparing to it.")


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    """The end-to-end work folder (secrets, stacks files, IMGBUILD_HOME) of this session's namespace."""
    from e2e import make_work
    return make_work(tmp_path_factory.mktemp("docker-e2e"))


@pytest.fixture(scope="session")
def first(work) -> dict:
    """The full cpu-smoke build and release in this session's fresh namespace (once per session)."""
    from e2e import first_build
    return first_build(work)


@pytest.fixture
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


@pytest.fixture(scope="session", autouse=True)
def _memoised_kinds():
    """Speed only: most tests load the same layer kinds dozens of times, and composing their YAML with
    line marks dominates a load. Memoise builder.load.spec.load_kinds on the exact content of the folder
    (every path, its bytes and its mode), so a changed, added or chmod-ed file is a miss and is loaded
    for real; results are identical to loading afresh."""
    import hashlib
    import os

    import builder.load.spec

    real = builder.load.spec.load_kinds
    memo: dict = {}

    def load_kinds(layers_dir: Path):
        h = hashlib.sha256(str(Path(layers_dir).resolve()).encode())
        if Path(layers_dir).is_dir():
            for root, dirs, names in sorted(os.walk(layers_dir)):
                dirs.sort()
                for name in sorted(names):
                    f = Path(root) / name
                    if f.is_symlink() or not f.is_file():  # hostile kinds: a link, a fifo, /dev/zero
                        h.update(f"{f}\0link:{os.readlink(f) if f.is_symlink() else 'special'}\0".encode())
                        continue
                    h.update(f"{f}\0{os.access(f, os.X_OK)}\0".encode() + f.read_bytes())
        key = h.hexdigest()
        if key not in memo:
            memo[key] = real(layers_dir)
        return memo[key]

    builder.load.spec.load_kinds = load_kinds
    yield
    builder.load.spec.load_kinds = real


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        return self.out + self.err


def run_cli(*args: str) -> CliResult:
    """Run the real CLI entry point (builder.cli.main, which calls sys.exit) in-process."""
    from builder import cli

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["imgbuild", *map(str, args)]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
        cli.STATE["debug"] = False
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_cli


def shipped_data() -> dict:
    """The shipped stacks.yaml as plain data (a fresh copy each call, for mutating)."""
    return copy.deepcopy(_shipped())


_CACHE: dict = {}


def _shipped() -> dict:
    if "data" not in _CACHE:
        _CACHE["data"] = yaml.safe_load(STACKS.read_text())
    return _CACHE["data"]


def write_stacks(folder: Path, content: dict | str, name: str = "stacks.yaml", lock: bool = False) -> Path:
    """Write a stacks file (a dict is dumped as YAML, a str written as is) into folder. lock: the shipped
    stacks.lock.yaml beside it too (as NAME.lock.yaml), for a copy of the shipped stacks that must plan as they do."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: only faster
    text = content if isinstance(content, str) else yaml.dump(content, Dumper=dumper, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    if lock:
        shutil.copyfile(REPO / "stacks.lock.yaml", path.with_name(path.stem + ".lock.yaml"))
    return path


@pytest.fixture
def write(tmp_path):
    """write(content, sub="x") -> path of a stacks.yaml in tmp_path/sub (no layers/ beside it:
    load_spec falls back to the shipped layer kinds)."""
    counter = {"n": 0}

    def _write(content: dict | str, sub: str | None = None, name: str = "stacks.yaml") -> Path:
        counter["n"] += 1
        return write_stacks(tmp_path / (sub or f"spec{counter['n']}"), content, name)

    return _write


def copy_kinds(folder: Path) -> Path:
    """A private copy of the shipped layers/ and Dockerfile.j2 in folder (load_spec then uses it)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "layers", folder / "layers")
    shutil.copy2(REPO / "Dockerfile.j2", folder / "Dockerfile.j2")
    return folder


@pytest.fixture
def kinds_copy(tmp_path):
    """kinds_copy(sub) -> a folder holding a copy of layers/ and Dockerfile.j2; write stacks.yaml there."""

    def _copy(sub: str) -> Path:
        return copy_kinds(tmp_path / sub)

    return _copy


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """Parse a Dockerfile into (KEYWORD, rest) pairs: line continuations joined, comments and blank
    lines dropped (as Docker does, also inside a continuation)."""
    out: list[tuple[str, str]] = []
    current: str | None = None
    for raw in dockerfile.split("\n"):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cont = line.endswith("\\")
        body = line[:-1] if cont else line
        current = body if current is None else current + " " + body
        if not cont:
            keyword, _, rest = current.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
            current = None
    if current is not None:
        keyword, _, rest = current.strip().partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def keywords(dockerfile: str) -> list[str]:
    return [k for k, _ in instructions(dockerfile)]


# The second engines the tests start (scripts/second-engine.sh): B is what test_docker_engines.py shares a
# registry with; C is test_docker_resolve.py's clean runner, which it empties (images and BuildKit cache)
# before each build, so it must be no engine another test builds on at the same time.
SECOND_ENGINES = {"b": {}, "c": {"IMGBUILD_ENGINE_B_DIR": "/var/lib/imgbuild/engine-c",
                              "IMGBUILD_ENGINE_B_BRIDGE": "imgb2", "IMGBUILD_ENGINE_B_ADDR": "10.214.0.1/24"}}


def second_engine(which: str) -> dict:
    """The environment that points imgbuild at a second dockerd with its own data root and BuildKit cache
    (scripts/second-engine.sh). Its containers have no NAT (second-engine.sh says why), so its builds use
    the host network, as such a runner would be configured."""
    proc = subprocess.run(["bash", str(REPO / "scripts" / "second-engine.sh"), "start"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **SECOND_ENGINES[which]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    host = proc.stdout.strip().splitlines()[-1].partition("=")[2]
    return {"DOCKER_HOST": host, "IMGBUILD_BUILD_NETWORK": "host"}


@pytest.fixture(scope="module")
def engine_b() -> dict:
    return second_engine("b")


@pytest.fixture(scope="module")
def engine_c() -> dict:
    return second_engine("c")


@pytest.fixture
def serve():
    """serve(folder) -> the http://127.0.0.1:PORT URL of a static file server on loopback for that folder
    (a download server, a package index), stopped when the test ends; serve.stop() stops them sooner."""
    import functools
    import http.server
    import threading
    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        handler.log_message = lambda *a: None
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    def stop() -> None:
        while servers:
            servers.pop().shutdown()
    start.stop = stop
    yield start
    stop()
