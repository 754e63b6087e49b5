"""What the build host offers builds: the CA bundle of a TLS-intercepting proxy, a private index URL,
a netrc, a local wheelhouse, the network RUN steps get. Secrets are only ever handed to BuildKit as files (--secret id=,src=),
never as build args, labels or log lines."""

from __future__ import annotations

import configparser
import os
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from builder.errors import SpecError
from builder.ship.wheelhouse import serve as serve_wheelhouse

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
    # IMGBUILD_PIP_OFFLINE=1: the wheelhouse is the only index (builder.ship.wheelhouse serves it on the
    # loopback for the length of a build or lock). Host, not content: the lock's hashes pin what is installed.
    offline: bool = False

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
        folder = Path(wheels) if wheels and Path(wheels).is_dir() else None
        index = os.environ.get("IMGBUILD_PIP_INDEX_URL") or None
        offline = os.environ.get("IMGBUILD_PIP_OFFLINE", "") not in ("", "0")
        if offline:
            if folder is None:
                raise SpecError("IMGBUILD_PIP_OFFLINE=1 needs a wheelhouse: every pip step installs from it alone",
                                hint="set IMGBUILD_WHEELHOUSE to the folder of wheels (pip download -d FOLDER)")
            if index:
                raise SpecError("IMGBUILD_PIP_OFFLINE=1 and IMGBUILD_PIP_INDEX_URL both set: offline, the wheelhouse "
                                "is the only index", hint="unset one of them")
            if network not in (None, "host"):
                raise SpecError(f"IMGBUILD_PIP_OFFLINE=1 with IMGBUILD_BUILD_NETWORK={network}: the builds reach the "
                                "wheelhouse on the host's loopback", hint="unset IMGBUILD_BUILD_NETWORK (host is used)")
            network = "host"
        return cls(ca_bundle=Path(ca) if ca and Path(ca).is_file() else None, wheelhouse=folder,
                   netrc=Path(netrc) if netrc and Path(netrc).is_file() else None,
                   pip_index_url=index, network=network, offline=offline)

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
        with ExitStack() as stack:
            index = stack.enter_context(serve_wheelhouse(self.wheelhouse)) if self.offline else self.pip_index_url
            try:
                if index:
                    fd, tmp = tempfile.mkstemp(prefix="imgbuild-secret-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
                    with os.fdopen(fd, "w") as f:
                        f.write(index)
                    out["pip-index-url"] = tmp
                yield out
            finally:
                if tmp:
                    os.unlink(tmp)
