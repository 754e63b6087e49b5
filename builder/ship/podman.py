"""Podman (Buildah) behind the same interface as the Docker engine: for sites with no Docker daemon.

`podman build` runs Buildah in the calling process: no daemon, rootless where the host gives the user
subordinate ids (docs/podman.md). What differs from the Docker engine, and why:
- `--format docker`: the rendered Dockerfiles set SHELL, which the OCI image format cannot hold (Buildah
  drops it with a warning), and the registry then holds the same manifest type as Docker pushes.
- `--layers=false`: one layer per imgbuild layer, as Buildah commits by default. imgbuild caches by content
  key in the registry, not by step, and one layer per key is what `verify --rebuild` compares.
- `--timestamp SOURCE_DATE_EPOCH`: every file of the layer, and the image's creation time, carry the one
  time the spec names (site.source_date_epoch), so two builds of a key give one layer digest
  (builder.ship.reproduce). Docker's BuildKit before 0.13 cannot do this.
- A registry on loopback is spoken to over plain HTTP, as the Docker engine does by default for
  127.0.0.0/8; any other registry keeps TLS verification.
- `podman run` gets explicit open-file and process limits: runc refuses to raise them above the
  caller's own limits (seen here: "error setting rlimit type 7"), and GPUs come through CDI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.errors import EngineError
from builder.ship.engine import BuildRequest, Engine, Result

LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?/")
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]
CDI_SPECS = (Path("/etc/cdi"), Path("/var/run/cdi"))


def insecure(ref: str) -> bool:
    """Whether an image reference names a registry on loopback (plain HTTP, as Docker's default allows)."""
    return bool(LOOPBACK.match(ref))


def tls(ref: str) -> list[str]:
    return ["--tls-verify=false"] if insecure(ref) else []


# Podman 4.3 refuses a --runroot longer than this ("the specified runroot is longer than 50 characters").
RUNROOT_MAX = 50


@dataclass
class PodmanEngine(Engine):
    mode: str = "podman"
    kind = "podman"
    # Global flags that place the store (--root, --runroot): a clean engine of its own for verify --rebuild.
    store: tuple = ()

    def _docker(self, *args: str, timeout: float | None = None, input: str | None = None) -> Result:
        return self.runner([self.cli, *self.store, *args], env=self.env, input=input, timeout=timeout)

    @contextlib.contextmanager
    def clean(self, scratch: Path):
        """A podman with a store of its own under `scratch`, empty: nothing cached, the parent pulled from the
        registry by digest. Removed afterwards, its images first (podman unmounts what it mounted)."""
        root = Path(tempfile.mkdtemp(prefix="imgbuild-clean-", dir=scratch))
        run = root / "run"
        if len(str(run)) > RUNROOT_MAX:     # podman refuses a longer runroot; the store itself may be anywhere
            run = Path(tempfile.mkdtemp(prefix="imgbuild-run-", dir="/tmp" if os.path.isdir("/tmp") else None))
        engine = dataclasses.replace(self, store=("--root", str(root / "storage"), "--runroot", str(run)),
                                     _platform=None)
        try:
            yield engine
        finally:
            engine._docker("rmi", "--all", "--force", timeout=600)   # unmounts what it mounted
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(run, ignore_errors=True)

    @classmethod
    def detect(cls, cli: str | None = None) -> "PodmanEngine":
        named = cli or os.environ.get("IMGBUILD_PODMAN") or shutil.which("podman")
        if not named:
            raise EngineError("podman not found", hint="install it (Debian: apt-get install podman buildah; "
                                                       "scripts/setup-test-host.sh installs both), or name it with IMGBUILD_PODMAN")
        engine = cls(cli=named, mode="podman")
        engine.ping()
        return engine

    def ping(self) -> str:
        res = self._docker("version", "--format", "{{.Client.Version}}", timeout=60)
        if res.returncode != 0:
            raise EngineError(f"podman does not answer ({(res.stderr or res.stdout).strip()[-300:]})",
                              hint="run `podman info` to see why (storage, runtime, subordinate ids when rootless)")
        return res.stdout.strip()

    def build_argv(self, req: BuildRequest) -> list[str]:
        argv = [self.cli, *self.store, "build", "--format", "docker", "--layers=false", "--pull=missing"]
        if req.no_cache:
            argv.append("--no-cache")
        if req.output is not None:
            argv += ["--output", f"type=local,dest={req.output}"]
        else:
            argv += ["--tag", req.tag]
        if req.epoch is not None:
            argv += ["--timestamp", str(req.epoch)]
        argv += ["--file", str(req.dockerfile)]
        if req.platform:
            argv += ["--platform", req.platform]
        argv += tls(str(req.build_args.get("PARENT", "")))
        for key, value in sorted(req.build_args.items()):
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(req.labels.items()):
            argv += ["--label", f"{key}={value}"]
        for sid, src in sorted(req.secrets.items()):
            argv += ["--secret", f"id={sid},src={src}"]
        # cache_from is not passed: Buildah 1.28's registry cache is keyed by step and defeated by an ARG
        # ahead of a RUN (every rendered layer has ARG PARENT); imgbuild's cache is the content key.
        if req.network:
            argv += ["--network", req.network]
        return argv + [str(req.context)]

    def _registry_flags(self, ref: str) -> list[str]:
        return tls(ref)

    def _push_flags(self, ref: str) -> list[str]:
        # v2s2: the manifest type the Docker engine pushes, so the registry holds one kind whoever built.
        return ["--quiet", "--format", "v2s2", *tls(ref)]

    def _run_flags(self, image: str, gpus: bool) -> list[str]:
        # CDI for GPUs: the spec nvidia-ctk writes
        return [*ULIMITS, *tls(image)] + (["--device", "nvidia.com/gpu=all"] if gpus else [])

    def platform(self) -> str:
        if self._platform is None:
            res = self._docker("info", "--format", "{{.Host.OS}}/{{.Host.Arch}}", timeout=60)
            found = res.stdout.strip()
            if res.returncode != 0 or "/" not in found:
                raise EngineError(f"podman does not say its platform ({(res.stderr or found).strip()[-300:]})")
            self._platform = found
        return self._platform

    def at(self, docker_host: str) -> "Engine":
        raise EngineError(f"a per-platform engine ({docker_host}) is a Docker engine; podman builds the platforms it "
                          "runs natively or under QEMU", hint="unset IMGBUILD_DOCKER_HOST_<ARCH>, or build with --engine docker")

    def has_gpu(self) -> bool:
        """True where a GPU can be handed to containers: nvidia-smi and a CDI spec of NVIDIA's devices."""
        if not shutil.which("nvidia-smi"):
            return False
        return any(p.is_dir() and any(p.glob("nvidia*.y*ml")) for p in CDI_SPECS)

    def file_times(self, version: str) -> str | None:
        return None   # --timestamp: every file of the layer carries SOURCE_DATE_EPOCH
