"""A hostile-input suite: bad stacks files and kind folders, fed to the commands that need no engine, each
judged from the outside. Used by tests/test_hostile_suite.py (which demands 0 unsafe, 0 crashes, 0 slow)
and by benchmarks/hostile_inputs.py (which prints the summary line with times).

Every input runs in its own process (forked from a server that imported imgbuild: run()) with a 1 GiB
address-space limit and a time limit, and is judged:
  crash    exit 70, a traceback, or killed by a signal
  slow     over the time limit (5 s of CPU; killed after 15 s of wall clock), or out of memory
           (MemoryError under the 1 GiB limit)
  unsafe   a secret of the input printed anywhere, or accepted and rendered so that a value changed the
           instruction sequence, or reached a command as an option (a shell word starting with '-' that
           holds the input's marker)
  refused  exit 2/3 naming the file (and line and key where there is one): a clear refusal
  unclear  any other non-zero exit
  accepted exit 0 and rendered safely
"""

from __future__ import annotations

import copy
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

REPO = Path(__file__).resolve().parent.parent
MARK = "pwned"                       # every injected value carries it
SECRET = "s3cr3tT0ken"               # every credential carries it: it must never be printed
LIMIT_S = 5.0                        # CPU seconds per command (run() says why CPU, not wall clock)
WALL_FACTOR = 3                      # a command still running after 3 x LIMIT_S of wall clock is killed
LIMIT_BYTES = 1 << 30


@dataclass
class Input:
    name: str
    cls: str                                         # the class
    text: str | bytes | None = None                  # the stacks file, or None: the shipped one mutated
    mutate: Callable[[dict], None] | None = None
    args: tuple = ("check", "--all")
    setup: Callable[[Path], None] | None = None      # prepares the folder (kinds, links) before the run
    secrets: tuple = ()
    extra: dict = field(default_factory=dict)


def shipped() -> dict:
    return yaml.safe_load((REPO / "stacks.yaml").read_text())


# -- where a string value goes (path in the data, a setter) ----------------------------------------

def _set(path):
    def apply(data, value):
        cur = data
        for p in path[:-1]:
            cur = cur[p]
        cur[path[-1]] = value
    return apply


POINTS = {
    "apt": _set(("layers", "ngc-25.09-site", "params", "apt", 0)),
    "ds-packages": lambda d, v: d["layers"]["ds-0.19.8-cpu"]["params"].__setitem__("packages", [v]),
    "project-packages": lambda d, v: d["projects"]["smoke-train"]["params"].__setitem__("packages", [v]),
    "tools": _set(("layers", "cpu-torch-2.13", "params", "tools", 0)),
    "git-repo": _set(("projects", "megatron-core-0.16", "params", "source", "repo")),
    "smoke-command": _set(("projects", "smoke-train", "params", "smoke")),
    "module": _set(("projects", "smoke-train", "params", "module")),
    "env-value": _set(("runtimes", "cpu-env", "params", "env", "OMP_NUM_THREADS")),
    "env-name": lambda d, v: d["runtimes"]["cpu-env"]["params"]["env"].__setitem__(v, "1"),
    "tag": lambda d, v: d["stacks"]["cpu-smoke"].__setitem__("tags", [v]),
    "description": _set(("stacks", "cpu-smoke", "description")),
    "layer-description": lambda d, v: d["layers"]["ds-0.19.8-cpu"].__setitem__("description", v),
    "base-image": _set(("bases", "debian-bookworm", "image")),
    "registry": _set(("site", "registry")),
    "namespace": _set(("site", "namespace")),
    "base-source": _set(("bases", "debian-bookworm", "source")),
}

def _layer(stack: str, name: str, kind: str, params: dict):
    """A setter adding a layer of a new kind (issue 11's primitives) to a shipped stack, the value placed by
    params(v)."""
    def apply(data, value):
        data["layers"][name] = {"kind": kind, "params": params(value)}
        layers = data["stacks"][stack]["layers"]
        layers.append(name)
    return apply


def _sys(params):
    return _layer("cpu-smoke", "x-sys", "system-setup", params)


def _pip(params):
    return _layer("cpu-smoke", "x-pip", "pip", params)


def _cuda(params):
    src = {"repo": "https://github.com/fanshiqing/grouped_gemm.git", "commit": "a" * 40}
    return _layer("h100-megatron", "x-cuda", "cuda-source", lambda v: {"name": "gg", "source": src, **params(v)})


# The primitives of issue 11, each value place on its own.
POINTS.update({
    "pip-index": _pip(lambda v: {"packages": ["six==1.17.0"], "index_url": v}),
    "pip-extra-index": _pip(lambda v: {"packages": ["six==1.17.0"], "extra_index_urls": [v]}),
    "pip-url-requirement": _pip(lambda v: {"packages": [f"x @ {v}"]}),
    "pip-uninstall": _pip(lambda v: {"uninstall": {"packages": [v], "reason": "a reason long enough"}}),
    "pip-uninstall-reason": _pip(lambda v: {"uninstall": {"packages": ["six"], "reason": v}}),
    "pip-replace-torch": _pip(lambda v: {"packages": ["six==1.17.0"], "replace_torch": v}),
    "pip-build-env": _pip(lambda v: {"packages": ["six==1.17.0"], "build_env": {"X": v}}),
    "sys-env-prepend": _sys(lambda v: {"env": {"PATH": {"prepend": [v]}}}),
    "sys-env-literal": _sys(lambda v: {"env": {"X": v}}),
    "sys-file-src": _sys(lambda v: {"files": [{"src": v, "dest": "/etc/x"}]}),
    "sys-file-dest": _sys(lambda v: {"files": [{"src": "stacks.yaml", "dest": v}]}),
    "sys-symlink": _sys(lambda v: {"symlinks": {"/usr/local/bin/x": v}}),
    "sys-workdir": _sys(lambda v: {"workdir": v}),
    "sys-entrypoint": _sys(lambda v: {"entrypoint": [v, "--"]}),
    "sys-user": _sys(lambda v: {"users": [{"name": v, "uid": 1000}]}),
    "cuda-configure": _cuda(lambda v: {"install": "cmake", "configure": [v]}),
    "cuda-subdir": _cuda(lambda v: {"subdir": v}),
    "cuda-patch": _cuda(lambda v: {"patches": [v]}),
})

VALUES = {
    # option injection: values that become arguments of apt, pip, git
    "opt-dpkg-hook": "-oDPkg::Pre-Invoke::=touch /tmp/pwned",
    "opt-unauth": "--allow-unauthenticated-pwned",
    "opt-insecure": "-oAcquire::AllowInsecureRepositories=true#pwned",
    "opt-pip-index": "--index-url=http://pwned.invalid/simple",
    "opt-upload-pack": "--upload-pack=touch /tmp/pwned",
    "opt-proxy": "-oProxyCommand=touch /tmp/pwned",
    "git-ext": "ext::sh -c touch% /tmp/pwned",
    "git-file-etc": "file:///etc/pwned",
    # instruction and shell injection
    "newline-run": "a\nRUN touch /tmp/pwned",
    "crlf-user": "a\r\nUSER pwned",
    "backslash-newline": "a\\\nRUN touch /tmp/pwned",
    "quote-break": 'a"; touch /tmp/pwned; "',
    "single-quote": "a'; touch /tmp/pwned; '",
    "subst": "$(touch /tmp/pwned)",
    "backtick": "`touch /tmp/pwned`",
    "nul": "a\x00pwned",
    "escape": "\x1b[31mpwned",
    "line-separator": "a\u2028RUN pwned",
    "empty": "",
    "spaces": "   ",
    "long": "pwned" * 4000,
}
CREDENTIALS = {
    "url-token-user": f"https://{SECRET}@github.com/NVIDIA/pwned.git",
    "url-user-pass": f"https://build:{SECRET}@github.com/NVIDIA/pwned.git",
    "url-pass-quote": f"https://build:{SECRET}'x@github.com/NVIDIA/pwned.git",
    "registry-userinfo": f"build:{SECRET}@127.0.0.1:5000",
}

YAML_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
version: 1
"""


def _raw(name: str, text, cls: str) -> Input:
    return Input(name, cls, text=text)


def _shipped_text(replace: tuple[str, str]) -> str:
    text = (REPO / "stacks.yaml").read_text()
    assert replace[0] in text, replace
    return text.replace(replace[0], replace[1], 1)


def _kind_files(link: Callable[[Path], None]) -> Callable[[Path], None]:
    """A site copy of the deepspeed kind whose files/ holds what `link` makes."""
    def setup(folder: Path) -> None:
        import shutil
        kinds = folder / "layers"
        shutil.copytree(REPO / "layers" / "deepspeed", kinds / "deepspeed")
        (kinds / "deepspeed" / "files").mkdir()
        link(kinds / "deepspeed" / "files")
    return setup


def _chain(n: int) -> str:
    data = shipped()
    for i in range(n):
        data["stacks"][f"c{i}"] = {"extends": f"c{i + 1}" if i + 1 < n else "cpu-smoke"}
    return yaml.safe_dump(data, sort_keys=False)


def _big(size: int) -> str:
    """A stacks file of `size` bytes of real content: the shipped file and then layer after layer."""
    head = (REPO / "stacks.yaml").read_text()
    line = "  bulk-{:08d}: {{kind: runtime-env, params: {{env: {{A: \"1\"}}}}}}\n"
    n = (size - len(head)) // len(line.format(0))
    return head.replace("layers:\n", "layers:\n" + "".join(line.format(i) for i in range(n)), 1)


def _apt_list(n: int) -> str:
    data = shipped()
    data["layers"]["ngc-25.09-site"]["params"]["apt"] = [f"pkg{i:06d}" for i in range(n)]
    return yaml.safe_dump(data, sort_keys=False)


def _nested(depth: int) -> str:
    return "version: 1\nbases: " + "[" * depth + "]" * depth + "\n"


def corpus() -> list[Input]:
    out: list[Input] = []
    for point, setter in POINTS.items():
        for vname, value in VALUES.items():
            out.append(Input(f"{point}/{vname}", "value", mutate=lambda d, s=setter, v=value: s(d, v)))
    for point in ("git-repo", "registry", "base-image", "description", "env-value"):
        for cname, value in CREDENTIALS.items():
            out.append(Input(f"{point}/{cname}", "credentials", mutate=lambda d, s=POINTS[point], v=value: s(d, v),
                             secrets=(SECRET,)))
    for cmd in (("render", "--all"), ("plan", "--all"), ("lint", "stacks.yaml")):
        out.append(Input(f"{cmd[0]}/url-user-pass", "credentials", args=cmd, secrets=(SECRET,),
                         mutate=lambda d: POINTS["git-repo"](d, CREDENTIALS["url-user-pass"])))
        out.append(Input(f"{cmd[0]}/opt-dpkg-hook", "value", args=cmd,
                         mutate=lambda d: POINTS["apt"](d, VALUES["opt-dpkg-hook"])))
    # versions and YAML 1.1 scalars
    for name, old, new in (
        ("wildcard-pin", 'tools: ["setuptools==80.9.0"', 'tools: ["setuptools==80.*"'),
        ("wildcard-ds", '{version: "0.19.8", ops: [cpu_adam, deepspeed_shm_comm]}', '{version: "0.19.8", ops: [cpu_adam], packages: ["protobuf==3.20.*"]}'),
        ("yaml11-off-version", 'params: {version: "0.19.8", ops: [cpu_adam, deepspeed_shm_comm]}', "params: {version: 0.10, ops: [cpu_adam]}"),
        ("yaml11-on-env-key", 'env: {OMP_NUM_THREADS: "2", DS_ACCELERATOR: "cpu"}', 'env: {ON: "2", DS_ACCELERATOR: "cpu"}'),
        ("yaml11-off-value", 'env: {OMP_NUM_THREADS: "2", DS_ACCELERATOR: "cpu"}', 'env: {OMP_NUM_THREADS: off, DS_ACCELERATOR: "cpu"}'),
        ("yaml11-yes-name", "  cpu-env:\n    kind: runtime-env", "  cpu-env:\n    kind: yes"),
        ("tag-object-as-commit", "commit: d89c5dfd761db2eb8352a3c3df6659c984547929", "commit: v1"),
        ("commit-short", "commit: d89c5dfd761db2eb8352a3c3df6659c984547929", "commit: d89c5df"),
        ("tag-leading-dash", 'tags: ["{stack}", "{stack}-{date}", "{stack}-torch{torch}-ds{deepspeed}"]', 'tags: ["-{stack}"]'),
        ("tag-leading-dot", 'tags: ["{stack}", "{stack}-{date}", "{stack}-torch{torch}-ds{deepspeed}"]', 'tags: [".{stack}"]'),
        ("tag-too-long", 'tags: ["{stack}", "{stack}-{date}", "{stack}-torch{torch}-ds{deepspeed}"]', 'tags: ["{stack}' + "x" * 130 + '"]'),
        ("registry-dotdot", "registry: 127.0.0.1:5000 ", "registry: ../127.0.0.1:5000 "),
        ("registry-dash", "registry: 127.0.0.1:5000 ", "registry: -127.0.0.1:5000 "),
        ("namespace-dotdot", "namespace: imgbuild", "namespace: ../imgbuild"),
        ("yaml-tag-python", "version: 1\n", "version: !!python/name:os.system 1\n"),
        ("yaml-tag-custom", "version: 1\n", "version: !foo 1\n"),
        ("yaml-merge-key", "  cpu-env:\n    kind: runtime-env", "  cpu-env:\n    <<: {kind: runtime-env}\n    kind: runtime-env"),
        ("duplicate-stack", "stacks:\n", "stacks:\n  cpu-smoke: {base: debian-bookworm}\n"),
    ):
        out.append(_raw(name, _shipped_text((old, new)), "yaml"))
    out += [
        _raw("alias-bomb", YAML_BOMB, "slow"),
        _raw("nested-500", _nested(500), "crash"),
        _raw("nested-999", _nested(999), "crash"),
        _raw("extends-1000", _chain(1000), "crash"),
        _raw("big-52mb", _big(52 * 2**20), "slow"),
        _raw("apt-100000-entries", _apt_list(100000), "slow"),      # 1.8 MB, under the size limit: 12.7 s when quadratic
        _raw("package-1mib", _shipped_text(('tools: ["setuptools==80.9.0"', 'tools: ["' + "a" * 2**20 + '==1.0"')), "slow"),
        _raw("not-utf8", b"version: 1\nsite: {namespace: \xff\xfe}\n", "yaml"),
        _raw("empty-file", "", "yaml"),
        _raw("a-list", "- 1\n- 2\n", "yaml"),
    ]
    out += [
        Input("kind-files-dangling", "files", setup=_kind_files(lambda f: (f / "x").symlink_to(f / "missing"))),
        Input("kind-files-loop", "files", setup=_kind_files(lambda f: ((f / "a").symlink_to(f / "b"), (f / "b").symlink_to(f / "a")))),
        Input("kind-files-dev-zero", "slow", setup=_kind_files(lambda f: (f / "z").symlink_to("/dev/zero"))),
        Input("kind-files-outside", "files", setup=_kind_files(lambda f: (f / "passwd").symlink_to("/etc/passwd"))),
        Input("kind-name-control", "files", setup=lambda folder: _control_kind(folder)),
        Input("stacks-symlink-shadow", "credentials", setup=lambda folder: _shadow(folder), secrets=("$6$pwned",)),
        Input("render-out-onto-file", "render", args=("render", "--all", "--out", "target"),
              setup=lambda folder: (folder / "target").write_text("keep")),
        Input("render-out-symlink", "render", args=("render", "--all", "--out", "out"),
              setup=lambda folder: _out_link(folder)),
    ]
    return out


def _control_kind(folder: Path) -> None:
    import shutil
    shutil.copytree(REPO / "layers" / "runtime-env", folder / "layers" / "bad\x07kind")


def _shadow(folder: Path) -> None:
    """stacks.yaml is a link to a shadow-format file outside the site's folder (a hostile checkout)."""
    (folder.parent / "outside").mkdir(exist_ok=True)
    secret = folder.parent / "outside" / "shadow"
    secret.write_text("root:$6$pwned$abcdefgh:19000:0:99999:7:::\n")
    (folder / "stacks.yaml").unlink()
    (folder / "stacks.yaml").symlink_to(secret)


def _out_link(folder: Path) -> None:
    (folder / "elsewhere").mkdir()
    (folder / "out").mkdir()
    (folder / "out" / "cpu-smoke").symlink_to(folder / "elsewhere")


# -- running and judging -----------------------------------------------------------------------------

def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def prepare(inp: Input, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "stacks.yaml"
    if inp.text is not None:
        (path.write_bytes if isinstance(inp.text, bytes) else path.write_text)(inp.text)
    else:
        data = copy.deepcopy(shipped())
        if inp.mutate:
            inp.mutate(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    if inp.setup:
        inp.setup(folder)
    return path


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMGBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def run_fresh(args: list[str], folder: Path, timeout: float = LIMIT_S) -> tuple[int | None, str, float]:
    """`python -m builder.cli ARGS` in a new interpreter (what run() forks instead; kept as the reference
    that tests/test_hostile_suite.py compares the fork server with)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "builder.cli", *args], cwd=folder, env=_env(), capture_output=True,
                              timeout=timeout, preexec_fn=_limits)
        out = (proc.stdout + proc.stderr).decode(errors="replace")
        return proc.returncode, out, time.perf_counter() - start
    except subprocess.TimeoutExpired as exc:
        out = ((exc.stdout or b"") + (exc.stderr or b"")).decode(errors="replace")
        return None, out, time.perf_counter() - start


# Speed only (issue 20): starting an interpreter and importing imgbuild is ~0.3 s of CPU per command, and
# the suite runs ~1200 commands. A server that imported builder.cli once (and did nothing else) forks one
# child per input instead: the child is its own process, with the same 1 GiB address-space limit, the
# same time limit (the clock starts before the fork), the input's folder as its working directory and
# first sys.path entry, stdin from /dev/null, stdout and stderr captured apart and joined as before; it
# runs the CLI as `python -m builder.cli` does (runpy, __main__) and exits as the interpreter would
# (SystemExit's code; an uncaught exception prints its traceback, exit 1; a signal is a negative code).
_SERVER = r"""
import json, os, resource, runpy, select, signal, sys, time, traceback
limit = int(sys.argv[1])
import builder.cli  # the imports every command pays, paid once
import importlib
# and those the commands make when they run (typer's parameter handling, rich, the rules, the registry
# client): module code only, run the same way in any process; nothing here runs a command.
for name in ("typer._adapters", "typer._click.decorators", "pydantic", "rich.console", "rich.table", "rich.syntax",
             "rich.progress", "rich.live", "httpx", "zoneinfo", "csv", "zipfile", "secrets", "importlib.metadata",
             "builder.plan.bake", "builder.core.lockfile", "builder.plan.outdir", "builder.core.dockerfile",
             "builder.rules.facts", "builder.rules.findings", "builder.rules.lint", "builder.rules.preflight",
             "builder.rules.review", "builder.core.shell", "builder.ship.bases", "builder.ship.registry"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
cli_file = builder.cli.__file__
channel_in, channel_out = os.fdopen(int(sys.argv[2]), "rb"), os.fdopen(int(sys.argv[3]), "wb")
for line in channel_in:
    req = json.loads(line)
    start = time.perf_counter()
    fds = [os.open(req[k], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for k in ("stdout", "stderr")]
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            channel_in.close(); channel_out.close()
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            os.chdir(req["cwd"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            sys.path[0] = req["cwd"]
            # As `python -m` finds it: builder.cli not imported yet (runpy runs it as __main__).
            del sys.modules["builder.cli"]
            delattr(sys.modules["builder"], "cli")
            sys.argv = [cli_file, *req["args"]]
            try:
                runpy.run_module("builder.cli", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                if exc.code is None:
                    code = 0
                elif isinstance(exc.code, int):
                    code = exc.code & 0xFF
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
            except BaseException:
                traceback.print_exc()
                code = 1
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    code = code or 120
        except BaseException:   # the child's own setup failed: say so where the output is read
            traceback.print_exc()
            code = 70
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([pidfd], [], [], req["timeout"])
    if not ready:
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    os.close(pidfd)
    rc = os.waitstatus_to_exitcode(status) if ready else None
    reply = {"rc": rc, "secs": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime}
    channel_out.write(json.dumps(reply).encode() + b"\n")
    channel_out.flush()
"""


class _ForkServer:
    def __init__(self) -> None:
        r_req, w_req = os.pipe()
        r_rep, w_rep = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(LIMIT_BYTES), str(r_req), str(w_rep)], cwd=REPO,
                                     env=_env(), stdin=subprocess.DEVNULL, pass_fds=(r_req, w_rep))
        os.close(r_req)
        os.close(w_rep)
        self.requests, self.replies = os.fdopen(w_req, "wb"), os.fdopen(r_rep, "rb")
        self.logs = Path(tempfile.mkdtemp(prefix="imgbuild-hostile-"))   # outside the input's folder

    def run(self, args: list[str], folder: Path, timeout: float) -> tuple[int | None, str, float]:
        logs = {k: str(self.logs / k) for k in ("stdout", "stderr")}
        start = time.perf_counter()
        self.requests.write(json.dumps({"args": list(args), "cwd": str(folder), "timeout": timeout, **logs}).encode() + b"\n")
        self.requests.flush()
        line = self.replies.readline()
        assert line, f"the hostile-input fork server died (exit {self.proc.poll()})"
        reply = json.loads(line)
        out = b"".join(Path(logs[k]).read_bytes() for k in ("stdout", "stderr")).decode(errors="replace")
        for k in logs:
            os.unlink(logs[k])
        return reply["rc"], out, reply["cpu"]


_SERVERS = threading.local()


def run(args: list[str], folder: Path, timeout: float = LIMIT_S) -> tuple[int | None, str, float]:
    """The CLI on ARGS in its own process under the limits, from the calling thread's fork server:
    (exit code or None when killed, output, CPU seconds of the process). Its cost is measured in CPU
    time, which the load of other work on the machine (builds beside the unit tests under xdist) does
    not inflate: over `timeout` CPU seconds is slow. A process that waits instead (a fifo, a network
    retry) is killed after WALL_FACTOR x timeout of wall clock, and is slow too (exit None)."""
    if getattr(_SERVERS, "server", None) is None or _SERVERS.server.proc.poll() is not None:
        _SERVERS.server = _ForkServer()
    return _SERVERS.server.run(args, folder, timeout * WALL_FACTOR)


def _words(dockerfiles: str) -> tuple[list[str], list[str]]:
    """Instruction keywords, and the shell words of every RUN (continuations joined)."""
    from conftest import instructions
    keywords, words = [], []
    for kw, rest in instructions(dockerfiles):
        keywords.append(kw)
        if kw == "RUN":
            try:
                words += shlex.split(rest)
            except ValueError:
                words.append("<unparseable>")
    return keywords, words


def _from_files(out: Path) -> str:
    """render --out's files as `render` prints them ('# ==== STACK / NN LAYER' before each)."""
    parts = []
    for path in sorted(out.glob("*/*.Dockerfile")):
        num, _, layer = path.stem.partition("-")
        parts.append(f"# ==== {path.parent.name} / {num} {layer} (key -)\n" + path.read_text())
    return "\n".join(parts)


def _per_layer(rendered: str) -> dict:
    """`render --all` output split per layer ('# ==== STACK / NN LAYER (key ...)' headers): layer ->
    (instruction keywords, RUN words). A layer shared by several stacks renders the same each time."""
    out, name, chunk = {}, None, []
    for line in rendered.split("\n") + ["# ==== end / 00 end"]:
        if line.startswith("# ==== "):
            if name is not None:
                out[name] = _words("\n".join(chunk))
            name, chunk = line.split(" / ", 1)[-1].split(" (key")[0].split(" ", 1)[-1], []
        else:
            chunk.append(line)
    return out


_BASELINE: dict = {}


def baseline(tmp: Path) -> dict:
    if "layers" not in _BASELINE:
        folder = tmp / "baseline"
        prepare(Input("baseline", "none"), folder)
        rc, out, _ = run(["render", "--all", "--out", "rendered-files"], folder, timeout=60)
        assert rc == 0, out
        _BASELINE["layers"] = _per_layer(_from_files(folder / "rendered-files"))
    return _BASELINE["layers"]


def judge(inp: Input, tmp: Path) -> tuple[str, str, float]:
    """(verdict, why, seconds)."""
    folder = tmp / inp.name.replace("/", "_")
    path = prepare(inp, folder)
    rc, out, secs = run(list(inp.args), folder)
    leaked = [s for s in inp.secrets if s in out]
    if leaked:
        return "unsafe", f"printed a secret ({leaked[0][:8]}...)", secs
    if rc is None or secs > LIMIT_S:
        return "slow", f"over {LIMIT_S:.0f} s", secs
    if "MemoryError" in out:
        return "slow", "out of memory under the 1 GiB limit", secs
    if rc == 70 or rc < 0 or "Traceback" in out:
        return "crash", out.strip().splitlines()[-1][:200] if out.strip() else f"exit {rc}", secs
    if rc in (2, 3):
        named = str(path.name) in out or str(folder) in out or "layers" in out or any(a in out for a in inp.args[2:])
        return ("refused", "", secs) if named else ("unclear", out.strip()[:200], secs)
    if rc != 0:
        return "unclear", f"exit {rc}: {out.strip()[:200]}", secs
    # Accepted: render it to files (what a build really uses; printed output is redacted, the files are
    # not) and look for a secret, or a value that changed the instructions or became an option.
    rc2, msg, _ = run(["render", "--all", "--out", "rendered-files"], folder)
    if rc2 != 0:
        return "unclear", f"check accepted it, render refused it: {msg.strip()[:200]}", secs
    rendered = _from_files(folder / "rendered-files")
    if any(s in rendered for s in inp.secrets):
        return "unsafe", "a secret is in the rendered Dockerfiles", secs
    base = baseline(tmp)
    for layer, (kw, words) in _per_layer(rendered).items():
        if layer in base and kw != base[layer][0]:
            return "unsafe", f"instruction sequence of {layer} changed ({len(base[layer][0])} -> {len(kw)})", secs
        options = [w for w in words if MARK in w and w.startswith("-")]
        if options:
            return "unsafe", f"a value reached a command as an option: {options[0][:60]!r}", secs
    return "accepted", "", secs


def summary(results: list[tuple[Input, str, str, float]]) -> str:
    count = {v: sum(1 for r in results if r[1] == v) for v in ("refused", "accepted", "unsafe", "crash", "slow", "unclear")}
    return (f"{len(results)} inputs, {count['refused']} clear refusals, {count['accepted']} safe accepts, "
            f"{count['unsafe']} unsafe, {count['crash']} crashes, {count['slow']} slow, {count['unclear']} unclear")
