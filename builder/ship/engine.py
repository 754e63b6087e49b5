"""The Docker engine behind one thin interface: argv lists in, results out.

Builds go through BuildKit only: `docker buildx build` where buildx exists, else the engine's
built-in BuildKit (DOCKER_BUILDKIT=1) through a CLI that still offers it (Docker 20.10-22.x; newer
CLIs hand `docker build` to buildx and fail without it). Which one is detected, or named by the user.
Everything else (run, push, inspect, save) is plain CLI. Unit tests swap `runner` for a fake.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from builder.errors import EngineError
from builder.ship.progress import clean_tail


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def _run(argv: Sequence[str], *, env: dict | None = None, input: str | None = None, timeout: float | None = None) -> Result:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=env, input=input, timeout=timeout)
    except FileNotFoundError:
        raise EngineError(f"{argv[0]} not found", hint="install Docker (scripts/setup-host.sh) or name the CLI with --docker") from None
    except subprocess.TimeoutExpired:
        raise EngineError(f"{' '.join(argv[:3])} did not finish within {timeout:.0f} s") from None
    return Result(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class BuildRequest:
    context: Path
    dockerfile: Path
    tag: str
    build_args: dict
    labels: dict
    secrets: dict = field(default_factory=dict)   # id -> host file path (never the value)
    cache_from: Sequence[str] = ()
    network: str | None = None    # docker build --network (HostConf.network)
    output: Path | None = None    # write the result's files to this folder instead of making an image
    platform: str | None = None   # docker build --platform: what the image is built for
    epoch: int | None = None      # SOURCE_DATE_EPOCH: the time of every file, where the engine can fix it
    no_cache: bool = False        # build every step again (verify --rebuild)


@dataclass
class Engine:
    cli: str
    mode: str                      # "buildx" or "builtin"
    runner: Callable[..., Result] = _run
    env: dict = field(default_factory=lambda: dict(os.environ))
    _platform: str | None = field(default=None, repr=False, compare=False)
    no_cache: bool = False          # every build of this engine skips the step cache (clean())
    kind = "docker"                 # what --engine and site.engine call it

    # -- detection ---------------------------------------------------------------------------

    @classmethod
    def detect(cls, cli: str | None = None) -> "Engine":
        """Find a CLI that can drive BuildKit. A named CLI is used as it is or refused with the reason."""
        named = cli or os.environ.get("IMGBUILD_DOCKER")
        candidates = [named] if named else []
        if not named:
            found = shutil.which("docker")
            candidates += [c for c in (found, "/usr/bin/docker") if c and os.path.exists(c)]
        reasons = []
        for candidate in dict.fromkeys(candidates):
            mode, why = cls.probe(candidate)
            if mode:
                engine = cls(cli=candidate, mode=mode)
                engine.ping()
                return engine
            reasons.append(f"{candidate}: {why}")
        raise EngineError("no Docker CLI that can build with BuildKit: " + ("; ".join(reasons) or "docker not found"),
                          hint="install buildx, or Debian's docker.io (its /usr/bin/docker uses the built-in "
                               "BuildKit); name one with --docker PATH or IMGBUILD_DOCKER")

    @staticmethod
    def probe(cli: str, runner: Callable[..., Result] = _run) -> tuple[str | None, str]:
        try:
            if runner([cli, "buildx", "version"]).returncode == 0:
                return "buildx", "buildx plugin"
            version = runner([cli, "version", "--format", "{{.Client.Version}}"]).stdout.strip()
        except EngineError as exc:
            return None, exc.message
        match = re.match(r"(\d+)\.", version)
        if not match:
            return None, f"cannot read its version ({version!r})"
        if int(match.group(1)) >= 23:
            return None, f"client {version} has no buildx and no longer offers the built-in BuildKit"
        return "builtin", f"client {version} with the engine's built-in BuildKit"

    def _docker(self, *args: str, timeout: float | None = None, input: str | None = None) -> Result:
        return self.runner([self.cli, *args], env=self.env, input=input, timeout=timeout)

    def _ok(self, what: str, *args: str, timeout: float | None = 600) -> Result:
        res = self._docker(*args, timeout=timeout)
        if res.returncode != 0:
            raise EngineError(f"{what} failed: {(res.stderr or res.stdout).strip()[-800:]}")
        return res

    def ping(self) -> str:
        res = self._docker("version", "--format", "{{.Server.Version}}", timeout=30)
        if res.returncode != 0:
            raise EngineError(f"the Docker engine does not answer ({res.stderr.strip()[-300:]})",
                              hint="start dockerd (scripts/setup-host.sh does)")
        return res.stdout.strip()

    # -- builds ------------------------------------------------------------------------------

    def build_argv(self, req: BuildRequest) -> list[str]:
        argv = [self.cli] + (["buildx", "build"] if self.mode == "buildx" else ["build"])
        if req.output is not None:
            argv += ["--output", f"type=local,dest={req.output}"]
        else:
            argv += (["--load"] if self.mode == "buildx" else []) + ["--tag", req.tag]
        argv += ["--progress=plain", "--file", str(req.dockerfile)] + (["--no-cache"] if req.no_cache else [])
        if req.platform:
            argv += ["--platform", req.platform]
        for key, value in sorted(req.build_args.items()):
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(req.labels.items()):
            argv += ["--label", f"{key}={value}"]
        for sid, src in sorted(req.secrets.items()):
            argv += ["--secret", f"id={sid},src={src}"]
        for ref in req.cache_from:
            argv += ["--cache-from", ref]
        if req.network:
            argv += ["--network", req.network]
        # Inline cache metadata lets another machine reuse these layers with --cache-from.
        argv += (["--build-arg", "BUILDKIT_INLINE_CACHE=1"] if req.output is None else []) + [str(req.context)]
        return argv

    def build(self, req: BuildRequest, log: Path, progress: Callable[[str], None] = lambda line: None) -> None:
        """Run one build; the whole output goes to `log` as it comes, and each of its lines to `progress`
        (which shows what a person should see of it: builder.ship.progress). Raises on failure."""
        if self.no_cache:
            req = dataclasses.replace(req, no_cache=True)
        argv = self.build_argv(req)
        env = dict(self.env, DOCKER_BUILDKIT="1", BUILDKIT_PROGRESS="plain")
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w", encoding="utf-8") as out:
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True, bufsize=1, errors="replace",
                                    preexec_fn=_die_with_parent)
            with _LIVE_LOCK:
                _LIVE.add(proc)
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    out.write(line)
                    out.flush()   # the log is followed live (tail -f) during hour-long compiles
                    progress(line.rstrip("\n"))
                rc = proc.wait()
            except BaseException:
                # Interrupted: stop the whole build (client and its BuildKit session), then re-raise.
                _kill(proc)
                raise
            finally:
                with _LIVE_LOCK:
                    _LIVE.discard(proc)
        if rc != 0:
            tail = clean_tail(log.read_text(errors="replace").strip().splitlines())[-15:]
            raise EngineError(f"build of {req.tag or req.dockerfile.name} failed (exit {rc}); last lines:\n    "
                              + "\n    ".join(tail),
                              hint=f"full log: {log}")

    # -- images and containers ---------------------------------------------------------------

    def run_container(self, image: str, argv: Sequence[str], *, mounts: Sequence[tuple[str, str]] = (),
                      gpus: bool = False, network: bool = False, input: str | None = None,
                      timeout: float = 900, env: dict | None = None, shm_size: str | None = None,
                      platform: str | None = None, hostname: str | None = None,
                      writable: Sequence[tuple[str, str]] = ()) -> Result:
        """writable: (host folder, path) mounts the container may write to (the probe's copies out)."""
        cmd = ["run", "--rm", "-i"]
        if hostname:
            cmd += ["--hostname", hostname]
        if platform:   # the image's own platform: another CPU's runs under the QEMU that binfmt_misc registered
            cmd += ["--platform", platform]
        if not network:
            cmd += ["--network", "none"]
        cmd += self._run_flags(image, gpus)
        if shm_size:
            cmd += ["--shm-size", shm_size]     # NCCL and gloo exchange through /dev/shm
        for key, value in sorted((env or {}).items()):
            cmd += ["--env", f"{key}={value}"]
        for src, dst in mounts:
            cmd += ["--volume", f"{src}:{dst}:ro"]
        for src, dst in writable:
            cmd += ["--volume", f"{src}:{dst}"]
        cmd += ["--entrypoint", argv[0], image, *argv[1:]]
        return self._docker(*cmd, input=input, timeout=timeout)

    # What another engine (builder.ship.podman) adds to the same commands: flags for a registry, a push, a run.
    def _registry_flags(self, ref: str) -> list[str]:
        return []

    def _push_flags(self, ref: str) -> list[str]:
        return self._registry_flags(ref)

    def _run_flags(self, image: str, gpus: bool) -> list[str]:
        return ["--gpus", "all"] if gpus else []

    def inspect(self, ref: str) -> dict | None:
        res = self._docker("image", "inspect", ref, timeout=60)
        if res.returncode != 0:
            return None
        found = json.loads(res.stdout or "[]")
        return found[0] if found else None

    def push(self, ref: str, on_retry: Callable[[str], None] = lambda line: None) -> None:
        """docker push, tried again after PUSH_RETRIES waits: a registry that restarts mid-push is
        waited for (pushing is idempotent: blobs already there are skipped)."""
        for delay in (*PUSH_RETRIES, None):
            res = self._docker("push", *self._push_flags(ref), ref, timeout=3600)
            if res.returncode == 0:
                return
            if delay is None:
                raise EngineError(f"push of {ref} failed after {len(PUSH_RETRIES)} retries: "
                                  f"{(res.stderr or res.stdout).strip()[-800:]}")
            on_retry(f"push of {ref} failed ({(res.stderr or res.stdout).strip().splitlines()[-1:] or ['?']}[0]); "
                     f"retrying in {delay:g} s")
            time.sleep(delay)

    def pull(self, ref: str, platform: str | None = None) -> None:
        self._ok(f"pull of {ref}", "pull", "--quiet", *self._registry_flags(ref),
                 *(["--platform", platform] if platform else []), ref, timeout=3600)

    def tag(self, src: str, dst: str) -> None:
        self._ok(f"tag {dst}", "tag", src, dst)

    def remove(self, *refs: str) -> None:
        if refs:
            self._docker("image", "rm", "--force", *refs, timeout=300)

    def save(self, ref: str, dest: Path) -> None:
        self._ok(f"save of {ref}", "save", "--output", str(dest), ref, timeout=1800)

    def platform(self) -> str:
        """The platform the engine runs natively (its server's OS and CPU), asked once."""
        if self._platform is None:
            res = self._docker("version", "--format", "{{.Server.Os}}/{{.Server.Arch}}", timeout=30)
            found = res.stdout.strip()
            if res.returncode != 0 or "/" not in found:
                raise EngineError(f"the Docker engine does not say its platform ({(res.stderr or found).strip()[-300:]})")
            self._platform = found
        return self._platform

    def at(self, docker_host: str) -> "Engine":
        """The same CLI speaking to another engine (DOCKER_HOST): a native builder of another platform."""
        return Engine(cli=self.cli, mode=self.mode, runner=self.runner, env=dict(self.env, DOCKER_HOST=docker_host))

    @contextlib.contextmanager
    def clean(self, scratch: Path):
        """An engine that builds as if nothing had been built before (verify --rebuild): the Docker engine
        keeps one store, so its builds skip every step cache instead (the pip download cache stays: it is
        a cache mount, outside the image, and changes no byte of it)."""
        yield dataclasses.replace(self, no_cache=True)

    def file_times(self, version: str) -> str | None:
        """Why this engine (of `version`, as ping() said) cannot give every file of a layer one fixed time, or
        None when it can. BuildKit rewrites file times to SOURCE_DATE_EPOCH from 0.13 (rewrite-timestamp); the
        engine's built-in BuildKit of Docker 20.10-24 is older, and imgbuild does not drive buildx's exporter
        option yet."""
        if self.mode == "builtin":
            return (f"the Docker engine {version}'s built-in BuildKit stamps each file with the time it was "
                    "written: file times cannot be fixed before BuildKit 0.13 (rewrite-timestamp)")
        return ("imgbuild does not yet ask buildx for rewrite-timestamp (BuildKit 0.13), so file times are the "
                "times of the build")

    def has_gpu(self) -> bool:
        """True when containers can get an NVIDIA GPU (an nvidia runtime and a device on the host)."""
        if not shutil.which("nvidia-smi"):
            return False
        res = self._docker("info", "--format", "{{json .Runtimes}}", timeout=30)
        return res.returncode == 0 and "nvidia" in res.stdout


PUSH_RETRIES = tuple(float(x) for x in os.environ.get("IMGBUILD_PUSH_BACKOFF", "2,5,10,20").split(",") if x)

# Build clients running now, in any thread: an interrupt in the main thread stops them all (with
# `build --jobs N` the others run in worker threads, which a signal never reaches).
_LIVE: set = set()
_LIVE_LOCK = threading.Lock()


def stop_builds() -> None:
    """Stop every build client this process runs (each with its BuildKit session)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        _kill(proc)


def _die_with_parent() -> None:
    """In the build client, before exec: ask Linux to send it SIGTERM when imgbuild dies, however it dies.
    The client runs in its own session (a Ctrl-C reaches imgbuild alone, which then stops the build in
    order), so without this an imgbuild killed with SIGKILL would leave a quiet step (a long compile)
    running to its end. The docker CLI cancels its BuildKit session on SIGTERM."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
        if os.getppid() == 1:             # the parent died before prctl: nobody is left to stop us
            os.kill(os.getpid(), signal.SIGTERM)
    except (OSError, AttributeError):     # not Linux: the in-order stop on Ctrl-C/SIGTERM still applies
        pass


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.time() + 10
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
