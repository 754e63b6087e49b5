"""`imgbuild lock python=LAYER`: every distribution a layer's pip steps install, resolved by pip's own
resolver where the build runs them, with the sha256 of each artifact, recorded in stacks.lock.yaml.

Why pip's resolver, run by BuildKit on the layer's own Dockerfile, and not uv from outside the image:
- It sees exactly what the parent image holds, not a description of it: NGC's pip constraint file, a
  pre-release torch, the packages of every layer beneath. pip leaves a satisfied requirement alone, so
  its report is what this layer adds, and a resolution that would replace the base's torch fails here
  as it would in the build.
- DeepSpeed and Apex are sdists whose setup.py imports torch: their requirements can only be read where
  torch is installed (--no-build-isolation). uv, resolving for a Python and platform from outside,
  cannot build that metadata.
- The steps before the pip command, the build secrets (CA bundle of a TLS-intercepting proxy, index URL,
  netrc), the wheelhouse and the network are the build's own, so the site's index, CA and wheelhouse
  are used as the build uses them, offline from a wheelhouse too. The steps before it are the same RUN
  lines as the build's, so BuildKit's cache serves them to both.

Each pip command of the layer gets `--report`; the last one also `--dry-run`, so nothing is compiled
(only metadata is built), and the layer's steps after it are left out: they cannot change what it
resolved. The commands before it install for real, so that the last sees them, as in the build.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.errors import EngineError, SpecError
from builder.plan.pinning import PIP, WHEELHOUSE, command_end, mount_lock
from builder.ship.engine import BuildRequest, Engine
from builder.ship.hostconf import HostConf
from builder.ship.wheelhouse import sha256_of

REPORT = "/tmp/imgbuild-resolve-{:02d}.json"
BEFORE = "/tmp/imgbuild-resolve-before.json"   # pip list of the image beneath, before the layer's pip
FRESH = "IMGBUILD_RESOLVE_RUN"                  # a build argument unique to each resolution
SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
SHA40 = re.compile(r"^[0-9a-f]{40}\Z")
USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")   # removed, not masked: a lock URL is one to fetch
SERVED = re.compile(r"^http://127\.0\.0\.1:[0-9]{1,5}/files/")   # builder.ship.wheelhouse's links
MAX_REPORT_BYTES = 8 << 20


@dataclass(frozen=True)
class Resolved:
    """One distribution a pip step installs: as pip names it, its exact version, and the artifact."""
    name: str
    version: str
    sha256: str | None     # None: a local folder (a source tree the layer builds), which has no hash
    url: str
    requested: bool        # named in the command, not pulled in by another
    replaces: str | None = None   # the version the image beneath holds, which this one would replace
    required_by: list = field(default_factory=list)   # what among the set asks for it (the resolver's chain)
    direct: bool = False   # named by URL (a wheel, a git commit), not found on an index by name and version


KEEP = "/imgbuild-lock/keep.txt"   # `lock --upgrade NAME`: every other distribution held at its locked version


def resolving(dockerfile: str, keep: bool = False) -> tuple[str, int]:
    """The layer's Dockerfile turned into one that writes pip's reports instead of an image: (text, number
    of pip commands). keep: each pip command also reads the constraints file KEEP from the build context
    (on top of the image's own PIP_CONSTRAINT). Raises SpecError when the layer has no pip command."""
    starts = [m.start() for m in re.finditer(re.escape(PIP) + r"(?=\s)", dockerfile)]
    if not starts:
        raise SpecError("the layer runs no pip command: there is nothing of it to resolve")
    # What the image beneath holds, read just before the layer's first pip command runs: a version the
    # resolution would replace is recorded as such (preflight refuses it, IB097).
    run = dockerfile.rfind("\nRUN ", 0, starts[0]) + 1
    # A new value of this argument each run makes every step from here on run again: BuildKit would
    # otherwise serve a report from its cache (the index is not in a step's cache key; secrets are not),
    # and a resolution is what the index answers now. The steps before it stay cached.
    out = [dockerfile[:run], f"ARG {FRESH}\n",
           f"RUN (python -m pip list --format=json 2>/dev/null || echo '[]') > {BEFORE}\n"]
    at = run
    for n, start in enumerate(starts):
        last = n == len(starts) - 1
        out.append(dockerfile[at:start])
        out.append(f"{PIP} --report {REPORT.format(n)}" + (" --dry-run" if last else "")
                   + (f" --constraint {KEEP}" if keep else ""))
        at = start + len(PIP)
    end = command_end(dockerfile, at)
    out.append(dockerfile[at:end].rstrip().rstrip("\\").rstrip())
    # The reports, and nothing else, are the build's output (docker build --output type=local).
    out.append("\n\nFROM scratch\nCOPY --from=0 /tmp/imgbuild-resolve-*.json /\n")
    text = "".join(out)
    return (mount_lock(text) if keep else text), len(starts)


def read_before(data: bytes) -> dict[str, str]:
    """`pip list --format=json` of the image beneath: canonical name -> version ({} where it has no pip)."""
    try:
        listed = json.loads(data or b"[]")
        return {canonicalize_name(str(d["name"])): str(d["version"]) for d in listed} if isinstance(listed, list) else {}
    except (ValueError, TypeError, KeyError):
        raise EngineError("pip list of the image beneath cannot be read") from None


def _chains(report: dict) -> dict[str, list[str]]:
    """canonical name -> the names among the set whose requirements (markers of the report's environment,
    no extra) ask for it."""
    env = {**{k: str(v) for k, v in (report.get("environment") or {}).items()}, "extra": ""}
    out: dict[str, list[str]] = {}
    for item in report["install"]:
        for raw in item["metadata"].get("requires_dist") or []:
            try:
                req = Requirement(raw)
                if req.marker is not None and not req.marker.evaluate(env):
                    continue
            except (InvalidRequirement, ValueError):
                continue
            out.setdefault(canonicalize_name(req.name), []).append(f"{item['metadata']['name']} ({req})")
    return out


def read_report(data: bytes, where: str, before: dict | None = None, wheelhouse: Path | None = None,
                offline: bool = False) -> list[Resolved]:
    """pip's installation report (format 1) as what it installs; anything else is refused with the reason.
    before: what the image beneath holds, for what the set would replace. wheelhouse: the host folder the
    build mounts at /wheelhouse, whose wheels pip reports without a hash. offline: the index was the
    wheelhouse served on the loopback (builder.ship.wheelhouse), whose port is this run's alone."""
    if len(data) > MAX_REPORT_BYTES:
        raise EngineError(f"{where}: pip's report is {len(data)} bytes; at most {MAX_REPORT_BYTES} are read")
    try:
        report = json.loads(data)
        if not isinstance(report, dict) or report.get("version") != "1" or not isinstance(report.get("install"), list):
            raise ValueError("not a pip installation report of format 1")
        out = []
        chains = _chains(report)
        for item in report["install"]:
            meta, info = item["metadata"], item["download_info"]
            name, version = str(meta["name"]), str(meta["version"])
            canonicalize_name(name, validate=True)
            Version(version)
            # A private index's links may carry its credentials (https://user:token@host/...): the lock
            # file is committed, so a URL's user part never reaches it.
            url = USERINFO.sub(r"\1", str(info["url"]))
            if offline:   # recorded as the file of the wheelhouse it is, not as this run's port
                url = SERVED.sub("wheelhouse:", url)
            hashes = (info.get("archive_info") or {}).get("hashes") or {}
            digest = hashes.get("sha256")
            if "dir_info" in info:
                digest = None
            elif "vcs_info" in info:
                # A git requirement: its bytes are the commit pip checked out (a tag or branch of stacks.yaml
                # resolved), installed from that commit; pip cannot hash a checkout.
                commit = str(info["vcs_info"].get("commit_id", ""))
                if not SHA40.match(commit):
                    raise ValueError(f"{name} {version} from {url}: no commit in the report")
                sub = (info.get("subdirectory") or "")
                url, digest = f"git+{url}@{commit}" + (f"#subdirectory={sub}" if sub else ""), None
            elif not isinstance(digest, str) and url.startswith(WHEELHOUSE) and wheelhouse is not None:
                # pip hashes what it downloads, not a file it reads: a wheel of the wheelhouse is hashed
                # here, from the host's folder that the build mounts.
                digest = _hash_wheel(wheelhouse, url)
            if ("dir_info" not in info and "vcs_info" not in info
                    and (not isinstance(digest, str) or not SHA256.match(digest))):
                # pip reports a hash for what it downloaded or read; an archive without one cannot be locked.
                raise ValueError(f"{name} {version} from {url}: no sha256 in the report")
            had = (before or {}).get(canonicalize_name(name))
            out.append(Resolved(name=name, version=version, sha256=digest, url=url,
                                requested=bool(item.get("requested")), direct=bool(item.get("is_direct")),
                                replaces=had if had is not None and had != version else None,
                                required_by=chains.get(canonicalize_name(name), [])))
    except (ValueError, TypeError, KeyError, AttributeError, InvalidName, InvalidVersion) as exc:
        raise EngineError(f"{where}: pip's report cannot be read: {exc}") from None
    return out


def resolve_layer(engine: Engine, dockerfile: str, context: Path, parent_ref: str, build_args: dict,
                  hostconf: HostConf, log: Path, progress: Callable[[str], None] = lambda line: None,
                  keep: list[str] | None = None, beneath: dict | None = None,
                  platform: str | None = None, environment: dict | None = None) -> list[list[Resolved]]:
    """Run the layer's pip commands as `resolving` rewrites them, on parent_ref, in the layer's build
    context: what each command installs, in order. keep: requirements (NAME==VERSION) every command must
    honour, so that only what is left out of them may move (`lock --upgrade NAME`). beneath: filled with
    what the image beneath holds (canonical name -> version), the answer to a requirement it satisfies.
    platform: the one resolved for (pip picks each platform's wheels, with their own hashes). environment:
    filled with the values of the interpreter pip resolved for (python_full_version, platform_machine)."""
    beneath = {} if beneath is None else beneath
    if keep is not None:
        (context / "imgbuild-lock").mkdir(exist_ok=True)
        (context / "imgbuild-lock" / Path(KEEP).name).write_text("".join(f"{line}\n" for line in keep))
    text, count = resolving(dockerfile, keep=keep is not None)
    (context / "Dockerfile.resolve").write_text(text)
    out = Path(tempfile.mkdtemp(prefix="imgbuild-resolve-"))
    try:
        with hostconf.secrets() as secrets:
            req = BuildRequest(context=context, dockerfile=context / "Dockerfile.resolve", tag="",
                               build_args={**build_args, "PARENT": parent_ref, FRESH: uuid.uuid4().hex},
                               labels={}, secrets=secrets,
                               network=hostconf.network, output=out, platform=platform)
            engine.build(req, log, progress=progress)
        steps = []
        before = read_before((out / Path(BEFORE).name).read_bytes()) if (out / Path(BEFORE).name).is_file() else {}
        for n in range(count):
            path = out / Path(REPORT.format(n)).name
            if not path.is_file():
                raise EngineError(f"pip wrote no report for the layer's pip command {n + 1} of {count}",
                                  hint=f"full log: {log}")
            steps.append(read_report(path.read_bytes(), f"pip command {n + 1} of {count}", before, hostconf.wheelhouse,
                                     hostconf.offline))
            if n == 0 and environment is not None:   # the interpreter pip resolved for (its markers' values)
                env = (json.loads(path.read_bytes()).get("environment") or {})
                environment.update({k: str(env[k]) for k in ("python_full_version", "platform_machine",
                                                            "implementation_name") if k in env})
        beneath.update(before)
        return steps
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _hash_wheel(wheelhouse: Path, url: str) -> str | None:
    """sha256 of file:///wheelhouse/NAME in the host's wheelhouse (None where it is not a plain file there)."""
    from urllib.parse import unquote
    name = unquote(url[len(WHEELHOUSE):])
    path = wheelhouse / name
    if "/" in name or not path.is_file() or path.is_symlink():
        return None
    return sha256_of(path)


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
