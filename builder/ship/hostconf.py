"""What the build host offers builds: the CA bundle of a TLS-intercepting proxy, a private index URL,
a netrc, a local wheelhouse, the network RUN steps get. Secrets are only ever handed to BuildKit as files (--secret id=,src=),
never as build args, labels or log lines."""

from __future__ import annotations

import configparser
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from builder.errors import SpecError

NETWORKS = ("default", "host", "none")
PIP_CONFIGS = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", "~/.config/pip/pip.conf", "~/.pip/pip.conf")


def pip_setting(name: str) -> str | None:
    """A value from pip's own configuration (env first, then its config files, last one wins)."""
    env = os.environ.get("PIP_" + name.upper().replace("-", "_"))
    if env:
        return env
    value = None
    for path in PIP_CONFIGS:
        parser = configparser.ConfigParser()
        try:
            parser.read(os.path.expanduser(path))
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_option(section, name):
                value = parser.get(section, name)
    return value


@dataclass(frozen=True)
class HostConf:
    ca_bundle: Path | None
    wheelhouse: Path | None
    netrc: Path | None
    pip_index_url: str | None   # a secret: may hold a token
    # `docker build --network`: "host" where the engine's containers have no NAT (a second engine on
    # its own bridge, runners behind a host-only proxy). Host, not content: no key depends on it.
    network: str | None = None

    @classmethod
    def from_env(cls) -> "HostConf":
        ca = os.environ.get("IMGBUILD_CA_BUNDLE") or pip_setting("cert")
        wheels = os.environ.get("IMGBUILD_WHEELHOUSE") or next(iter((pip_setting("find-links") or "").split()), None)
        if wheels and wheels.startswith("file://"):
            wheels = wheels[len("file://"):]
        netrc = os.environ.get("IMGBUILD_NETRC")
        network = os.environ.get("IMGBUILD_BUILD_NETWORK") or None
        if network not in (None, *NETWORKS):
            raise SpecError(f"IMGBUILD_BUILD_NETWORK={network!r}: not a build network",
                            hint=f"use one of {', '.join(NETWORKS)} (docker build --network), or unset it")
        return cls(ca_bundle=Path(ca) if ca and Path(ca).is_file() else None,
                   wheelhouse=Path(wheels) if wheels and Path(wheels).is_dir() else None,
                   netrc=Path(netrc) if netrc and Path(netrc).is_file() else None,
                   pip_index_url=os.environ.get("IMGBUILD_PIP_INDEX_URL") or None, network=network)

    @contextmanager
    def secrets(self) -> Iterator[dict]:
        """BuildKit secret ids -> files; a value that exists only in memory is written to a private
        temporary file for the duration of the builds and removed afterwards."""
        out: dict[str, str] = {}
        if self.ca_bundle:
            out["ca-bundle"] = str(self.ca_bundle)
        if self.netrc:
            out["netrc"] = str(self.netrc)
        tmp = None
        try:
            if self.pip_index_url:
                fd, tmp = tempfile.mkstemp(prefix="imgbuild-secret-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
                with os.fdopen(fd, "w") as f:
                    f.write(self.pip_index_url)
                out["pip-index-url"] = tmp
            yield out
        finally:
            if tmp:
                os.unlink(tmp)
