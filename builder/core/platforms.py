"""Platforms: the OS and CPU an image is built for, as OCI names them (linux/amd64, linux/arm64).

A stack targets one or more platforms. By default they follow from its GPUs: a Grace superchip's GPU
(GH200, GB200, GB300) sits beside an aarch64 CPU, every other GPU of the catalog in an x86 server, and a
CPU-only stack is built for linux/amd64. Each platform gets its own chain of layer images, with the
platform in every content key.

Artifacts carry platforms in their names: a wheel's platform tag (manylinux_2_28_aarch64), a Debian
package's architecture (_arm64.deb), an installer's CPU (linux-x86_64, _sbsa). `artifact_platform`
reads them, so that preflight refuses an x86_64 wheel in an arm64 layer and a layer with one wheel per
platform installs the right one on each.
"""

from __future__ import annotations

import platform as _host
import re
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

AMD64, ARM64 = "linux/amd64", "linux/arm64"
PLATFORMS = (AMD64, ARM64)     # in the order chains are planned and index entries are written
DEFAULT = AMD64                # a stack without GPUs and without `platforms:`
CPU = {AMD64: "x86_64", ARM64: "aarch64"}          # uname -m, and the CPU of wheel tags
OF_CPU = {cpu: p for p, cpu in CPU.items()}
# CPU words in artifact names. sbsa: NVIDIA's name for Arm server builds (CUDA installers, NGC).
_WORDS = {"x86_64": AMD64, "amd64": AMD64, "x64": AMD64, "aarch64": ARM64, "arm64": ARM64, "sbsa": ARM64}
_WORD = re.compile(r"(?<![A-Za-z0-9])(x86_64|amd64|x64|aarch64|arm64|sbsa)(?![A-Za-z0-9])")


def arch(platform: str) -> str:
    """The OCI architecture of a platform (amd64, arm64): what image configs and index entries say."""
    return platform.split("/", 1)[1]


def of_arch(os_: str, architecture: str) -> str:
    return f"{os_}/{architecture}"


def of_cpu(cpu: str) -> str:
    """linux/arm64 for aarch64 (a catalog GPU's host CPU, uname -m)."""
    return OF_CPU[cpu]


def host() -> str:
    """The platform of this machine (where an engine with no DOCKER_HOST runs natively)."""
    return OF_CPU.get(_host.machine(), f"linux/{_host.machine()}")


def wheel_platform(filename: str) -> str | None:
    """The platform a wheel's tags bind it to, or None for a pure or other-OS wheel (py3-none-any):
    manylinux_2_28_aarch64 is linux/arm64."""
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return None
    found = {_wheel_tag(t.platform) for t in tags} - {None}
    return found.pop() if len(found) == 1 else None


def _wheel_tag(tag: str) -> str | None:
    if not tag.startswith(("linux_", "manylinux", "musllinux")):
        return None
    return next((p for cpu, p in OF_CPU.items() if tag.endswith("_" + cpu)), None)


def artifact_platform(name: str) -> str | None:
    """The platform an artifact's file name (or URL) names: a wheel by its tags, anything else by a CPU
    word standing apart in its last path part (cuda_12.8.0_linux_sbsa.run, libfoo_1.0_arm64.deb,
    tool-linux-x86_64.tar.gz). None when it names none, or names both."""
    base = unquote(urlsplit(name).path.rsplit("/", 1)[-1] if "://" in name else name.rsplit("/", 1)[-1])
    base = base.split("#", 1)[0]
    if base.endswith(".whl"):
        return wheel_platform(base)
    found = {_WORDS[m] for m in _WORD.findall(base.lower())}
    return found.pop() if len(found) == 1 else None


def label(platforms) -> str:
    return ", ".join(platforms)


__all__ = ["AMD64", "ARM64", "PLATFORMS", "DEFAULT", "CPU", "arch", "of_arch", "of_cpu", "host",
           "wheel_platform", "artifact_platform", "label"]
