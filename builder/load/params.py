"""Typed parameters of layer kinds: the schema language of kind.yaml and the validator of values.

A kind declares each parameter with a type; stacks.yaml gives values; this module turns values into
typed, frozen Python values (versions become packaging objects) or refuses them with the key path.
Every string that will reach a Dockerfile is checked here for control characters, so a newline can
never split an instruction (the renderer quotes the rest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from builder.redact import has_credentials, redact

TYPES = ("str", "int", "bool", "version", "enum", "list", "map", "git", "requirements", "wheel", "path", "apt")
SHA40 = re.compile(r"^[0-9a-f]{40}\Z")  # \Z: "$" would accept a trailing newline
SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A Debian package name (Debian policy 5.6.1), an optional :ARCH, an optional =VERSION (policy 5.6.12).
# Never starting with '-': apt-get reads options after the command word, and -oDPkg::Pre-Invoke::=CMD
# is a shell command apt runs as root.
DEB_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[0-9][A-Za-z0-9.+~:-]*)?\Z")
# Git URLs: https, ssh://, scp-like USER@HOST:PATH, and file:///ABSOLUTE/PATH.git (a local mirror).
# Nothing else: no transport helpers (ext::, fd::), no plain http, no option-like value.
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
_GIT_PATH = r"[A-Za-z0-9._~%+-]+(?:/[A-Za-z0-9._~%+-]+)*/?"
_LOGIN = r"[A-Za-z_][A-Za-z0-9_.-]*"
GIT_URLS = (
    re.compile(rf"^https://{_HOST}(?::[0-9]{{1,5}})?/{_GIT_PATH}\Z"),
    re.compile(rf"^ssh://(?:{_LOGIN}@)?{_HOST}(?::[0-9]{{1,5}})?/{_GIT_PATH}\Z"),
    re.compile(rf"^{_LOGIN}@{_HOST}:(?![/-]){_GIT_PATH}\Z"),
    re.compile(rf"^file:///{_GIT_PATH}\.git/?\Z"),
)
GIT_URL_HINT = ("allowed: https://HOST/PATH, ssh://[USER@]HOST/PATH, USER@HOST:PATH, "
                "file:///ABSOLUTE/PATH.git")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)@")
NETRC = "credentials come from the netrc secret ($IMGBUILD_NETRC), never from stacks.yaml"


class ParamError(Exception):
    """A value does not fit its parameter; `path` is relative to the parameter."""

    def __init__(self, reason: str, path: tuple = (), hint: str | None = None):
        super().__init__(reason)
        self.reason, self.path, self.hint = reason, path, hint


@dataclass(frozen=True)
class GitPin:
    repo: str
    commit: str

    def __str__(self) -> str:
        return f"{self.repo}@{self.commit}"


@dataclass(frozen=True)
class WheelPin:
    file: str
    sha256: str


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str
    required: bool = False
    default: Any = None
    choices: tuple = ()
    doc: str = ""

    def convert(self, value: Any) -> Any:
        return _CONVERTERS[self.type](self, value)


def text(value: Any, what: str = "a string") -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ParamError(f"expected {what}, got {type_name(value)}")
    value = str(value)
    if CONTROL.search(value):
        raise ParamError("control characters (newline, tab, ...) are not allowed: they could split a "
                         "Dockerfile instruction")
    if has_credentials(value):
        # Every parameter ends up in a Dockerfile (ENV, a RUN, a LABEL): a credential here is baked into
        # the image, and redacting what imgbuild prints would only hide that.
        raise ParamError("holds credentials (a URL's user information): they would be written into the image; "
                         "credentials come from the netrc secret ($IMGBUILD_NETRC)",
                         hint="or from $IMGBUILD_PIP_INDEX_URL (a BuildKit secret) at build time, or from the "
                              "scheduler's secrets at run time")
    return value


def type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def version(value: Any) -> Version:
    raw = text(value, "a version")
    try:
        return Version(raw)
    except InvalidVersion:
        raise ParamError(f"{raw!r} is not a valid version (PEP 440)") from None


def _str(spec: ParamSpec, value: Any) -> str:
    return text(value)


def _path(spec: ParamSpec, value: Any) -> str:
    """An absolute path in the image. No whitespace: Docker splits COPY/ADD arguments on whitespace
    before it reads quotes, so no quoting can keep such a path one argument."""
    value = text(value, "a path")
    if not value.startswith("/") or any(c.isspace() for c in value):
        raise ParamError(f"{value!r} is not an absolute path without spaces")
    return value


def _int(spec: ParamSpec, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"expected an integer, got {type_name(value)}")
    return value


def _bool(spec: ParamSpec, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ParamError(f"expected true or false, got {type_name(value)}")
    return value


def _version(spec: ParamSpec, value: Any) -> Version:
    return version(value)


def _enum(spec: ParamSpec, value: Any) -> str:
    value = text(value)
    if value not in spec.choices:
        raise ParamError(f"{value!r} is not one of the allowed values",
                         hint="allowed: " + ", ".join(spec.choices))
    return value


def _list(spec: ParamSpec, value: Any) -> tuple:
    if not isinstance(value, list):
        raise ParamError(f"expected a list, got {type_name(value)}")
    out, seen = [], set()   # the set keeps the duplicate check linear (50,000 apt entries took 12 s)
    for i, item in enumerate(value):
        try:
            item = text(item)
        except ParamError as exc:
            raise ParamError(exc.reason, (i,)) from None
        if spec.choices and item not in spec.choices:
            raise ParamError(f"{item!r} is not one of the allowed values", (i,),
                             hint="allowed: " + ", ".join(spec.choices))
        if item in seen:
            raise ParamError(f"{item!r} is listed twice", (i,))
        out.append(item)
        seen.add(item)
    return tuple(out)


def _map(spec: ParamSpec, value: Any) -> tuple:
    """A mapping of environment-style names to strings, kept as sorted pairs (frozen, deterministic)."""
    if not isinstance(value, dict):
        raise ParamError(f"expected a mapping, got {type_name(value)}")
    out = {}
    for key, item in value.items():
        if not ENV_NAME.match(key):
            raise ParamError(f"{key!r} is not a valid variable name (letters, digits, _; not starting "
                             "with a digit)", (key,))
        if isinstance(item, bool):
            item = "1" if item else "0"
        try:
            out[key] = text(item)
        except ParamError as exc:
            raise ParamError(exc.reason, (key,)) from None
    return tuple(sorted(out.items()))


def _git(spec: ParamSpec, value: Any) -> GitPin:
    if not isinstance(value, dict):
        raise ParamError(f"expected a mapping with repo and commit, got {type_name(value)}")
    unknown = sorted(set(value) - {"repo", "commit"})
    if unknown:
        raise ParamError(f"unknown key {unknown[0]!r}", (unknown[0],), hint="allowed: repo, commit")
    for key in ("repo", "commit"):
        if key not in value:
            raise ParamError(f"missing {key!r}", (key,))
    try:
        repo = git_url(value["repo"])
    except ParamError as exc:
        raise ParamError(exc.reason, ("repo",), exc.hint) from None
    commit = value["commit"]
    if not isinstance(commit, str) or not SHA40.match(commit):
        raise ParamError(f"{commit!r} is not a full 40-hex commit sha; branches, tags and short hashes "
                         "float or collide", ("commit",),
                         hint="pin the commit: git rev-parse 'TAG^{commit}'")
    return GitPin(repo, commit)


def git_url(value: Any) -> str:
    """A git repository URL from the allowlist (GIT_URLS), with no credentials in it. The value is never
    quoted whole in a refusal that may hold a secret."""
    url = text(value, "a git URL")
    userinfo = _USERINFO.match(url)
    if userinfo and (userinfo.group(1).lower() != "ssh" or ":" in userinfo.group(2)):
        raise ParamError(f"the URL holds credentials (user information before '@'): {NETRC}",
                         hint="write the URL without them, e.g. https://HOST/PATH")
    if not any(p.match(url) for p in GIT_URLS) or ".." in url.split("/"):
        raise ParamError(f"{redact(url)!r} is not a git URL", hint=GIT_URL_HINT)
    return url


def _apt(spec: ParamSpec, value: Any) -> tuple:
    """Debian package names, each with an optional =VERSION: never an apt-get option."""
    out = _list(spec, value)
    for i, item in enumerate(out):
        if not DEB_PACKAGE.match(item):
            raise ParamError(f"{item!r} is not a Debian package name (NAME or NAME=VERSION: lower case letters, "
                             "digits and + . -, starting with a letter or digit)", (i,))
    return out


def _requirements(spec: ParamSpec, value: Any) -> tuple:
    """Pip requirements, each pinned with == so that an image never changes without a file changing."""
    if not isinstance(value, list):
        raise ParamError(f"expected a list of pinned requirements, got {type_name(value)}")
    out = []
    for i, item in enumerate(value):
        try:
            raw = text(item)
            req = Requirement(raw)
        except ParamError as exc:
            raise ParamError(exc.reason, (i,)) from None
        except InvalidRequirement as exc:
            raise ParamError(f"{item!r} is not a valid requirement: {exc}", (i,)) from None
        if req.url or len(req.specifier) != 1 or next(iter(req.specifier)).operator != "==":
            raise ParamError(f"{raw!r} is not pinned; write NAME==VERSION", (i,))
        if next(iter(req.specifier)).version.endswith(".*"):
            # Refused everywhere (check, render, plan, build): one behaviour, decided at load.
            raise ParamError(f"{raw!r}: a wildcard is a range, pin an exact version", (i,),
                             hint="write NAME==VERSION, e.g. numpy==2.1.3")
        if CONTROL.search(str(req)):  # packaging unescapes marker strings: '\\b' becomes a backspace
            raise ParamError(f"{raw!r}: control characters (newline, tab, ...) are not allowed", (i,))
        out.append(str(req))
    return tuple(sorted(out, key=str.lower))


def _wheel(spec: ParamSpec, value: Any) -> WheelPin:
    if not isinstance(value, dict) or set(value) != {"file", "sha256"}:
        raise ParamError("expected a mapping with exactly file and sha256")
    try:
        file = text(value["file"])
    except ParamError as exc:
        raise ParamError(exc.reason, ("file",)) from None
    if "/" in file or not file.endswith(".whl"):
        raise ParamError(f"{file!r} must be a wheel file name in the wheelhouse (no folders)", ("file",))
    if not isinstance(value["sha256"], str) or not SHA256.match(value["sha256"]):
        raise ParamError("sha256 must be 64 lowercase hex digits", ("sha256",))
    return WheelPin(file, value["sha256"])


_CONVERTERS: dict[str, Callable[[ParamSpec, Any], Any]] = {
    "str": _str, "int": _int, "bool": _bool, "version": _version, "enum": _enum, "list": _list,
    "map": _map, "git": _git, "requirements": _requirements, "wheel": _wheel, "path": _path, "apt": _apt,
}
assert set(_CONVERTERS) == set(TYPES)
