"""Which engine builds and checks each platform's images: natively where it can, emulated where it must.

A platform is built natively on an engine of that platform: the default engine when it runs that
platform, or the engine the site declares for it with IMGBUILD_DOCKER_HOST_<ARCH>
(IMGBUILD_DOCKER_HOST_ARM64=ssh://grace-builder: a DOCKER_HOST per platform, as the second engine of
the many-builders tests is reached). Where none is declared, the default engine builds it through QEMU
user-mode emulation that binfmt_misc hands foreign binaries to (Debian's qemu-user-static and
binfmt-support; scripts/setup-host.sh installs them). That is correct and many times slower, so it is
said, and GPU checks, which can never pass under emulation, are skipped there with that reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from builder.errors import EngineError
from builder.core import platforms as plat
from builder.ship.engine import Engine
from builder.ship.podman import PodmanEngine

KINDS = ("docker", "podman")


def choose(kind: str | None, site_kind: str | None = None, cli: str | None = None) -> Engine:
    """The build engine of this run: --engine, else IMGBUILD_ENGINE (a runner's own), else the site's
    (site.engine), else docker; found and answering, or an EngineError saying why not. cli: the CLI to use
    (--docker), for either kind."""
    kind = kind or os.environ.get("IMGBUILD_ENGINE") or site_kind or "docker"
    if kind not in KINDS:
        raise EngineError(f"{kind!r} is not an engine imgbuild drives", hint="docker or podman")
    return PodmanEngine.detect(cli) if kind == "podman" else Engine.detect(cli)

BINFMT = Path("/proc/sys/fs/binfmt_misc")
COST = "docs/measurements/2026-12-04-arm64-emulation.txt"   # what emulation costs here, measured


@dataclass(frozen=True)
class PlatformEngine:
    platform: str
    engine: Engine
    emulated: str | None = None   # how it runs when QEMU runs it: "linux/arm64 on a linux/amd64 engine"


def variable(platform: str) -> str:
    """The variable that names a platform's own engine: IMGBUILD_DOCKER_HOST_ARM64."""
    return "IMGBUILD_DOCKER_HOST_" + plat.arch(platform).upper()


def binfmt_handler(platform: str, root: Path = BINFMT) -> str | None:
    """Why containers of `platform` cannot run under QEMU on this host, or None when they can: a handler
    for its CPU registered, enabled, and with the F flag (the interpreter is opened at registration, so
    it works inside containers, whose file systems do not hold it)."""
    cpu = plat.CPU[platform]
    entry = root / f"qemu-{cpu}"
    if not entry.is_file():
        return (f"no QEMU handler for {cpu} is registered in binfmt_misc ({entry} is missing"
                + ("; binfmt_misc is not mounted" if not (root / "status").exists() else "") + ")")
    text = entry.read_text(errors="replace")
    if not text.startswith("enabled"):
        return f"the QEMU handler for {cpu} is registered but disabled ({entry})"
    flags = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")), "")
    if "F" not in flags:
        return f"the QEMU handler for {cpu} lacks the F flag ({entry}: flags {flags or 'none'}), so containers cannot use it"
    return None


def _local(engine: Engine) -> bool:
    host = engine.env.get("DOCKER_HOST", "")
    return not host or host.startswith("unix://")


def engines(default: Engine, platforms: Iterable[str], env: Mapping[str, str] | None = None,
            say: Callable[[str], None] = lambda line: None, root: Path = BINFMT) -> dict:
    """platform -> PlatformEngine for each platform a plan builds; refused (EngineError) where a declared
    engine is of another platform, or where emulation is needed and this host has no handler for it."""
    env = os.environ if env is None else env
    native = default.platform()
    out: dict = {}
    for platform in platforms:
        host = env.get(variable(platform))
        if host:
            engine = default.at(host)
            engine.ping()
            got = engine.platform()
            if got != platform:
                raise EngineError(f"{variable(platform)}={host} is a {got} engine, not a {platform} one")
            out[platform] = PlatformEngine(platform, engine)
            say(f"engine for {platform}: {host} (native)")
        elif platform == native:
            out[platform] = PlatformEngine(platform, default)
        else:
            why = binfmt_handler(platform, root) if _local(default) else None
            if why:
                raise EngineError(f"cannot build {platform} images: no {platform} engine is declared "
                                  f"({variable(platform)}) and {why}",
                                  hint=f"install qemu-user-static and binfmt-support (scripts/setup-host.sh does), or "
                                       f"set {variable(platform)} to the DOCKER_HOST of a {platform} engine")
            out[platform] = PlatformEngine(platform, default, f"{platform} on a {native} engine")
            say(f"engine for {platform}: none declared ({variable(platform)}); building and checking under QEMU "
                f"emulation on the {native} engine, many times slower than a native build ({COST})")
    return out


__all__ = ["PlatformEngine", "engines", "variable", "binfmt_handler", "BINFMT"]
