"""Typed parameters of layer kinds: the schema language of kind.yaml and the validator of values.

A kind declares each parameter with a type; stacks.yaml gives values; this module turns values into
typed, frozen Python values (versions become packaging objects) or refuses them with the key path.
Every string that will reach a Dockerfile is checked here for control characters, so a newline can
never split an instruction (the renderer quotes the rest).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from builder.load.intent import INTENTS, REF, floating, git_requirement
from builder.core.platforms import wheel_platform
from builder.errors import did_you_mean
from builder.redact import has_credentials, redact

TYPES = ("str", "int", "bool", "version", "enum", "list", "map", "git", "requirements", "wheel", "path", "apt",
         "env", "index", "file", "files", "uninstall", "users", "links", "argv", "options", "names", "relpath", "gpus", "reason",
         "downloads", "patches", "venvs", "removal", "ports", "modes", "labels", "mirror", "pipconf", "tree")
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
# A pip requirement from git: NAME[EXTRAS] @ git+URL@<full commit>[#subdirectory=PATH]. The commit is
# what makes it a pin; the URL goes through the same allowlist as every git source. A wheel by URL is
# pinned by its sha256 in the URL fragment, which pip checks against what it downloads.
GIT_REQ = re.compile(r"^git\+(?P<url>.+)@(?P<commit>[0-9a-f]{40})(?:#subdirectory=(?P<sub>[A-Za-z0-9._/-]+))?\Z")

# A directory entry of a PATH-like variable: absolute, and nothing that ':' or '$' would split or expand.
WHEEL_URL = re.compile(r"^https://(?P<host>[A-Za-z0-9.-]+)(?::[0-9]{1,5})?/[A-Za-z0-9._~%+/-]+\.whl"
                       r"#sha256=[0-9a-f]{64}\Z")
WHEEL_URL_INTENT = re.compile(r"^https://(?P<host>[A-Za-z0-9.-]+)(?::[0-9]{1,5})?/[A-Za-z0-9._~%+/-]+\.whl\Z")
PATH_ENTRY = re.compile(r"^/[A-Za-z0-9._/+@-]*\Z")
# A file beside stacks.yaml: a relative path of plain names (no '..', no absolute path, no link).
REL_FILE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*\Z")
MAX_FILE_BYTES = 16 << 20
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")
SHELLS = ("/bin/bash", "/bin/sh", "/usr/bin/bash", "/usr/sbin/nologin", "/bin/false")
MODES = ("0400", "0444", "0555", "0600", "0644", "0700", "0750", "0755")
# A build option: a CMake cache entry -DNAME[:TYPE]=VALUE, or an autotools feature switch
# --with-X[=V] / --without-X / --enable-X[=V] / --disable-X. Nothing else: an arbitrary --option is how a
# value would steer a command (--index-url=..., --allow-unauthenticated). Each is quoted anyway; no
# spaces, quotes, $ or backticks, so what `plan` shows is what runs.
OPTION = re.compile(r"^(?:-D[A-Za-z_][A-Za-z0-9_]*(?::[A-Z]+)?=|--(?:with|without|enable|disable)-[a-z0-9][a-z0-9_-]*"
                    r"(?:=|\Z))[A-Za-z0-9_.,:;/+=@%-]*\Z")
DIST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\Z")   # a distribution name (PEP 508)
# A version constraint written where one version is needed: a comparison (>=0.19, ~=2.6, <1, !=1, ==0.19.5,
# Poetry's ^1.2), a wildcard (0.19.*, 2.x) or several (>=1,<2). Each is refused as rule IB211 (reasons that
# start "needs an exact version"), wherever it is written.
VERSION_RANGE = re.compile(r"^\s*[<>!~^=]|[*,]|\.[xX](?:\.|\Z)")
# A Debian package name followed by a comparison, or by =VERSION with a wildcard: apt-get installs one version.
APT_RANGE = re.compile(r"^([a-z0-9][a-z0-9+.-]+)(?::[a-z0-9-]+)?\s*(?:[<>!~(]|==|=[^=]*\*)")
# Variables that decide where packages come from and whether TLS is verified. A layer never sets them (a
# build step's environment or the image's): the site's index, CA and credentials reach builds as BuildKit
# secrets, a layer's own index is its index_url / extra_index_urls (https, checked here), and an image ENV
# of these would steer every later layer's pip away from the site's index. Proxies may only be emptied.
TRUST_VARS = re.compile(r"^(?:PIP_(?:INDEX_URL|EXTRA_INDEX_URL|INDEX|TRUSTED_HOST|CERT|CLIENT_CERT|CONFIG_FILE|FIND_LINKS|"
                        r"NO_INDEX|ISOLATED_MODE)|UV_(?:INDEX_URL|EXTRA_INDEX_URL|DEFAULT_INDEX|INDEX|INSECURE_HOST|"
                        r"NATIVE_TLS|FIND_LINKS|CONFIG_FILE|NO_CONFIG|KEYRING_PROVIDER)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|"
                        r"SSL_CERT_FILE|SSL_CERT_DIR|GIT_SSL_NO_VERIFY|GIT_SSL_CAINFO|GIT_SSL_CAPATH|GIT_CONFIG_GLOBAL|"
                        r"GIT_CONFIG_SYSTEM|PYTHONHTTPSVERIFY|NETRC|CONDA_SSL_VERIFY)\Z")
# Files that decide the same for apt, pip, uv, git and TLS: package sources and their keys, index
# configuration, credentials, the certificate store.
TRUST_FILES = re.compile(r"^(?:/etc/apt/(?:sources\.list(?:\.d/.*)?|trusted\.gpg(?:\.d/.*)?|keyrings/.*|apt\.conf(?:\.d/.*)?|"
                         r"auth\.conf(?:\.d/.*)?|preferences(?:\.d/.*)?)|/usr/share/keyrings/.*|/etc/pip\.conf|"
                         r"/etc/xdg/pip/pip\.conf|(?:/root|/home/[^/]+)/(?:\.pip/.*|\.config/pip/.*|\.config/uv/.*|\.netrc|"
                         r"\.gitconfig|\.pypirc)|/etc/uv/.*|/etc/gitconfig|/etc/ssl/.*|/usr/local/share/ca-certificates/.*|"
                         r"/etc/ca-certificates.*|/opt/venv/pip\.conf|.*/pip\.conf)\Z")
PROXY_VARS = re.compile(r"^(?:https?_proxy|HTTPS?_PROXY|all_proxy|ALL_PROXY|ftp_proxy|FTP_PROXY)\Z")
TRUST_HINT = ("the site's index, CA bundle and netrc reach every build as BuildKit secrets ($IMGBUILD_PIP_INDEX_URL, "
              "$IMGBUILD_CA_BUNDLE, $IMGBUILD_NETRC); a layer's own index is its index_url or extra_index_urls")


def trusted_env(name: str, value: str, path: tuple) -> None:
    """Refuse a variable that would move a build's package source or switch off TLS verification."""
    if TRUST_VARS.match(name):
        raise ParamError(f"{name} decides where packages come from or whether TLS is verified; a layer does not "
                         "set it", path, hint=TRUST_HINT)
    if PROXY_VARS.match(name) and value != "":
        raise ParamError(f"{name} would send every later download through another host; a layer may only "
                         "empty it", path, hint="the engine's and the build's proxies are the site's (dockerd, "
                                                "IMGBUILD_BUILD_NETWORK)")


def trusted_file(dest: str, path: tuple) -> None:
    """Refuse a file (a copy, a download, a link) put where apt, pip, uv, git or TLS read their trust from."""
    if TRUST_FILES.match(dest):
        raise ParamError(f"{dest!r} decides where packages come from or which certificates are trusted; a layer does "
                         "not write it", path, hint=TRUST_HINT)


EXACT_HINT = "one version, e.g. 0.19.5: an image changes only when stacks.yaml does, a range would let it float"
# The folder that `file` parameters are relative to: the stacks file's, set by load_spec while loading.
FILES_ROOT: ContextVar[Path | None] = ContextVar("FILES_ROOT", default=None)


class ParamError(Exception):
    """A value does not fit its parameter; `path` is relative to the parameter."""

    def __init__(self, reason: str, path: tuple = (), hint: str | None = None):
        super().__init__(reason)
        self.reason, self.path, self.hint = reason, path, hint


@dataclass(frozen=True)
class GitPin:
    repo: str
    commit: str
    submodules: bool = False   # export the submodules at the commits this commit records
    ref: str | None = None     # the tag or branch stacks.yaml names, where the lock file resolved commit from it

    def __str__(self) -> str:
        return f"{self.repo}@{self.commit}"


@dataclass(frozen=True)
class BoundTree(GitPin):
    """Files of a git source bound into one pip step (RUN --mount=type=bind, read-only) at `at`, where that
    step's pip runs, and never left in a layer: a recipe's `pip install ".[all]"` of a partial checkout
    (NeMo's Dockerfile.ci binds setup.py, requirements/, tools/ and two files of its package). The commit is
    the pin, as for any source; the paths, the place and what pip installs from them are in the Dockerfile."""
    paths: tuple = ()
    at: str = "/"
    install: bool = False          # the tree itself ('.'), with extras
    extras: tuple = ()
    requirements_files: tuple = ()   # files of the tree, read by pip (-r), each under one of paths


@dataclass(frozen=True)
class WheelPin:
    file: str
    sha256: str


@dataclass(frozen=True)
class WheelPins:
    """One wheel per platform (torch's x86_64 and aarch64 builds, as a list under one parameter): each
    platform's chain installs the one whose tags name its platform (LayerDef.for_platform)."""
    pins: tuple   # WheelPin, each with a platform tag, one per platform

    def choose(self, platform: str) -> WheelPin | None:
        return next((p for p in self.pins if wheel_platform(p.file) == platform), None)


@dataclass(frozen=True)
class EnvPath:
    """A PATH-like variable extended, never replaced: entries put before and after what the parent
    image has. Rendered as "/pre${NAME:+:${NAME}}:/post", so an unset variable leaves no empty entry
    (an empty entry in PATH is the current directory)."""
    prepend: tuple = ()
    append: tuple = ()

    def __str__(self) -> str:
        return ":".join((*self.prepend, "${parent}", *self.append))


@dataclass(frozen=True)
class FileRef:
    """A file beside stacks.yaml (a patch, a config): its path as written, and its sha256, which goes
    into the content key; the build context gets the bytes that were hashed or the build stops. Where
    it was read from is kept outside the fields, so no host path enters a hash or a comparison."""
    path: str
    sha256: str

    @classmethod
    def read_from(cls, path: str, sha256: str, source: str) -> "FileRef":
        ref = cls(path, sha256)
        object.__setattr__(ref, "_source", source)
        return ref

    @property
    def source(self) -> str:
        return getattr(self, "_source", "")

    def __str__(self) -> str:
        return f"{self.path} (sha256:{self.sha256[:12]})"


@dataclass(frozen=True)
class FileCopy:
    src: FileRef
    dest: str
    mode: str


@dataclass(frozen=True)
class Download:
    """A file fetched by URL (a tool's release binary, an installer) and pinned by its sha256: fetched and
    verified on the host (builder.ship.downloads), sent in the build context, copied to dest with mode.
    The sha256 is in the rendered COPY line, so it is in the content key; the URL is only where to get it."""
    url: str
    sha256: str
    dest: str
    mode: str


@dataclass(frozen=True)
class Uninstall:
    """Packages the parent ships that this layer removes, and why: the reason is shown wherever the
    layer is (plan --explain, diff), so removing what the base was blessed with is never silent."""
    packages: tuple
    reason: str


@dataclass(frozen=True)
class Venv:
    path: str
    system_site_packages: bool = False
    activate: bool = False


@dataclass(frozen=True)
class Mode:
    path: str
    mode: str
    recursive: bool = False


@dataclass(frozen=True)
class Removal:
    """Paths the parent ships that a layer removes, and why (shown wherever the layer is explained)."""
    paths: tuple
    reason: str


@dataclass(frozen=True)
class AptSources:
    """/etc/apt/sources.list written whole, the way recipes point apt at a mirror: one `deb URL SUITE
    COMPONENTS` line per suite, the file it replaces kept as sources.list.bak where asked. No line takes
    options, so nothing turns signature checks off: the archive must verify against the image's own keys."""
    url: str
    suites: tuple
    components: tuple
    backup: bool = False

    def lines(self) -> list[str]:
        return [f"deb {self.url} {suite} {' '.join(self.components)}" for suite in self.suites]


@dataclass(frozen=True)
class PipConfig:
    """pip's configured index and extra indexes, written by `pip config` at a level: global (/etc/pip.conf),
    user (root's ~/.config/pip/pip.conf), site (the interpreter's prefix) or default (no level given: what
    `pip config set` itself picks, the user's file unless a site file exists)."""
    url: str
    extra: tuple = ()
    level: str = "global"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    shell: str = "/bin/bash"


@contextmanager
def files_root(folder: Path):
    token = FILES_ROOT.set(Path(folder))
    try:
        yield
    finally:
        FILES_ROOT.reset(token)


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
        pass
    pinned = re.fullmatch(r"\s*===?\s*([^\s*,]+)\s*", raw)
    if pinned and _is_version(pinned.group(1)):   # an exact pin in requirement form: the version alone is wanted
        raise ParamError(f"needs an exact version written alone ({pinned.group(1)}), got the requirement {raw!r}",
                         hint=EXACT_HINT)
    if VERSION_RANGE.search(raw):
        raise ParamError(not_exact(raw, "X.Y.Z"), hint=EXACT_HINT)
    raise ParamError(f"{raw!r} is not a valid version (PEP 440)")


def _is_version(raw: str) -> bool:
    try:
        Version(raw)
    except InvalidVersion:
        return False
    return True


def not_exact(raw: str, form: str) -> str:
    """The reason for a version constraint given where one exact version is needed (rule IB211); form is
    how that version is written there (X.Y.Z, NAME==X.Y.Z, ...)."""
    return f"needs an exact version ({form}), got the range {raw!r}"


def _str(spec: ParamSpec, value: Any) -> str:
    return text(value)


def _path(spec: ParamSpec, value: Any) -> str:
    """An absolute path in the image. No whitespace: Docker splits COPY/ADD arguments on whitespace
    before it reads quotes, so no quoting can keep such a path one argument."""
    value = text(value, "a path")
    if not value.startswith("/") or any(c.isspace() or c in "$\"'\\`" for c in value):
        raise ParamError(f"{value!r} is not an absolute path without spaces, quotes, $ or backslashes")
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
        trusted_env(key, out[key], (key,))
    return tuple(sorted(out.items()))


def _git(spec: ParamSpec, value: Any) -> GitPin:
    if not isinstance(value, dict):
        raise ParamError(f"expected a mapping with repo and commit, got {type_name(value)}",
                         hint="repo: URL and commit: a full sha, or ref: a tag or branch that imgbuild lock resolves")
    unknown = sorted(set(value) - {"repo", "commit", "ref", "submodules"})
    if unknown:
        raise ParamError(f"unknown key {unknown[0]!r}" + did_you_mean(unknown[0], ("repo", "commit", "ref", "submodules")),
                         (unknown[0],), hint="allowed: repo, commit, ref, submodules")
    if "repo" not in value:
        raise ParamError("missing 'repo'", ("repo",))
    if "commit" in value and "ref" in value:
        raise ParamError("give commit (a full sha) or ref (a tag or branch the lock file resolves), not both",
                         ("ref",))
    if "commit" not in value and "ref" not in value:
        raise ParamError("missing 'commit'", ("commit",), hint="or ref: a tag or branch, resolved by imgbuild lock")
    try:
        repo = git_url(value["repo"])
    except ParamError as exc:
        raise ParamError(exc.reason, ("repo",), exc.hint) from None
    submodules = value.get("submodules", False)
    if not isinstance(submodules, bool):
        raise ParamError(f"expected true or false, got {type_name(submodules)}", ("submodules",))
    if "ref" in value:
        return GitPin(repo, _locked_ref(repo, value["ref"]), submodules, ref=str(value["ref"]))
    commit = value["commit"]
    if not isinstance(commit, str) or not SHA40.match(commit):
        raise ParamError(f"{commit!r} is not a full 40-hex commit sha; branches, tags and short hashes "
                         "float or collide", ("commit",),
                         hint="pin the commit: git rev-parse 'TAG^{commit}'; or write ref: TAG and let "
                              "imgbuild lock record its commit")
    return GitPin(repo, commit, submodules)


TREE_KEYS = {"source", "paths", "at", "install", "extras", "requirements_files"}


def _tree(spec: ParamSpec, value: Any) -> BoundTree:
    """{source: {repo, commit|ref}, paths: [RELPATH], at: /ABS, install: bool, extras: [NAME],
    requirements_files: [RELPATH]}: what of the tree is bound where, and what pip reads from it."""
    if not isinstance(value, dict) or not {"source", "paths", "at"} <= set(value) or set(value) - TREE_KEYS:
        raise ParamError("expected a mapping with source (repo and commit or ref), paths (of the tree, bound for "
                         "this step), at (where they are bound and pip runs) and optional install, extras and "
                         "requirements_files")
    pin = _wrap(_git, ("source",), spec, value["source"])
    paths = value["paths"]
    if not isinstance(paths, list) or not paths:
        raise ParamError("expected a non-empty list of paths of the tree", ("paths",))
    paths = _wrap(_relpath, ("paths",), spec, paths)
    for i, a in enumerate(paths):
        if any(b != a and a.startswith(b + "/") for b in paths):
            raise ParamError(f"{a!r} lies inside another bound path; name it once", ("paths", i))
    at = _wrap(_path, ("at",), spec, value["at"])
    if at.rstrip("/") in SYSTEM_FOLDERS:
        raise ParamError(f"{at!r} is a system folder; bind the tree in a working folder (/workspace)", ("at",))
    files = _wrap(_relpath, ("requirements_files",), spec, value.get("requirements_files", []))
    for i, f in enumerate(files):
        if not any(f == b or f.startswith(b + "/") for b in paths):
            raise ParamError(f"{f!r} is not under a bound path, so pip would not find it", ("requirements_files", i),
                             hint="bound: " + ", ".join(paths))
    install = _wrap(_bool, ("install",), spec, value.get("install", False))
    extras = _wrap(_names, ("extras",), spec, value.get("extras", []))
    if extras and not install:
        raise ParamError("extras name what the tree installs; set install: true", ("extras",))
    if not install and not files:
        raise ParamError("the tree gives pip nothing: set install (the tree itself) or requirements_files")
    return BoundTree(pin.repo, pin.commit, pin.submodules, pin.ref, paths, at.rstrip("/") or "/", install,
                     tuple(extras), files)


def _locked_digest(url: str) -> str:
    """The sha256 the lock file records for a file by URL that stacks.yaml gives without one (or that `imgbuild
    lock` fetches and hashes now); '' where it floats beside a lock file that has none yet."""
    intents = INTENTS.get()
    try:
        digest = intents.sha256(url)
    except Exception as exc:   # `imgbuild lock` fetched it (builder.ship.downloads): said at its key
        if not hasattr(exc, "message"):
            raise
        raise ParamError(exc.message, (), getattr(exc, "hint", None)) from None
    if digest is None and not intents.accept:
        raise ParamError(f"no sha256, and there is no {intents.lock_file} to record it", (),
                         hint="imgbuild lock (fetches the file on the host and records its sha256), and commit the "
                              "lock file; or write sha256: (sha256sum FILE prints it)")
    return digest or ""


def _locked_ref(repo: str, ref: Any) -> str:
    """The commit the lock file records for a git source's tag or branch (builder.load.intent)."""
    ref = _wrap(text, ("ref",), ref, "a tag or branch name")
    if not REF.match(ref):
        raise ParamError(f"{ref[:80]!r} is not a tag or branch name (letters, digits, . _ + / -; no '..')", ("ref",))
    intents = INTENTS.get()
    try:
        commit = intents.commit(repo, ref)
    except ParamError as exc:
        raise ParamError(exc.reason, ("ref",), exc.hint) from None
    except Exception as exc:   # `imgbuild lock` asked the repository (builder.ship.sources): each ref said at its key
        if not hasattr(exc, "message"):
            raise
        raise ParamError(f"ref {ref!r} cannot be resolved: {exc.message}", ("ref",), getattr(exc, "hint", None)) from None
    if commit is None and not intents.accept:
        raise ParamError(f"ref {ref!r} floats and there is no {intents.lock_file} to record its commit", ("ref",),
                         hint="imgbuild lock (records the commit the ref names now), and commit the lock file; "
                              "or pin the commit: git rev-parse 'TAG^{commit}'")
    # Beside a lock file without the ref: intent, which nothing is built from (IB098 says so; `lock` resolves it).
    return commit or ""


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
        ranged = APT_RANGE.match(item)
        if ranged:
            raise ParamError(not_exact(item, f"{ranged.group(1)}=VERSION"), (i,),
                             hint="apt-get installs one given version; the name alone takes the one the mirror has")
        if not DEB_PACKAGE.match(item):
            raise ParamError(f"{item!r} is not a Debian package name (NAME or NAME=VERSION: lower case letters, "
                             "digits and + . -, starting with a letter or digit)", (i,))
    return out


def _requirements(spec: ParamSpec, value: Any) -> tuple:
    """Pip requirements. Without a lock file each is pinned, so that an image never changes without a file
    changing: NAME==VERSION (extras allowed), NAME @ git+URL@<full commit>, or a wheel URL with
    #sha256=. Beside a lock file a requirement may also float (a range, a bare name, a git tag or branch,
    a wheel URL without its hash): intent, which `imgbuild lock python=LAYER` resolves (builder.load.intent)."""
    if not isinstance(value, list):
        raise ParamError(f"expected a list of pinned requirements, got {type_name(value)}")
    out, seen = [], set()
    accept = INTENTS.get().accept
    for i, item in enumerate(value):
        try:
            raw = text(item)
            req = Requirement(raw)
        except ParamError as exc:
            raise ParamError(exc.reason, (i,)) from None
        except InvalidRequirement as exc:
            raise ParamError(f"{item!r} is not a valid requirement: {exc}", (i,)) from None
        specs = list(req.specifier)
        why = floating(req)
        if req.url:
            _url_requirement(raw, req.url, i, accept)
        elif [s.operator for s in specs] == ["==="]:   # compares strings, not versions: never a pin
            raise ParamError(f"{raw!r} is not pinned; write NAME==VERSION or NAME @ git+URL@COMMIT", (i,))
        elif why and not accept:
            if not specs:
                raise ParamError(f"{raw!r} is not pinned; write NAME==VERSION or NAME @ git+URL@COMMIT", (i,),
                                 hint=INTENT_HINT)
            # A wildcard (==2.*) is a range too. Refused everywhere (check, render, plan, build): one
            # behaviour, decided at load.
            raise ParamError(not_exact(raw, f"{req.name}==X.Y.Z"), (i,),
                             hint="write NAME==VERSION, e.g. numpy==2.1.3; " + INTENT_HINT)
        if CONTROL.search(str(req)):  # packaging unescapes marker strings: '\\b' becomes a backspace
            raise ParamError(f"{raw!r}: control characters (newline, tab, ...) are not allowed", (i,))
        name = req.name.lower().replace("_", "-").replace(".", "-")
        if name in seen:
            raise ParamError(f"{req.name!r} is listed twice", (i,))
        seen.add(name)
        out.append(str(req))
    return tuple(sorted(out, key=str.lower))


INTENT_HINT = ("or keep the recipe's range and create the lock file: imgbuild lock python=LAYER records the exact "
               "version and hash (docs/python-lock.md)")


def _url_requirement(raw: str, url: str, i: int, accept: bool) -> None:
    """A requirement by URL: git+URL@<commit> or an https wheel with #sha256=; beside a lock file also a git
    tag or branch (or none) and a wheel without its hash."""
    if WHEEL_URL.match(url) or (accept and WHEEL_URL_INTENT.match(url)):
        return
    m = GIT_REQ.match(url) or (accept and git_requirement(url))
    if not m:
        raise ParamError(f"{redact(raw)!r}: a URL requirement must be git+URL@<full 40-hex commit>, or an https "
                         "wheel URL ending in #sha256=<64 hex>", (i,),
                         hint="e.g. mamba-ssm @ git+https://github.com/state-spaces/mamba.git@<commit>; "
                              + INTENT_HINT)
    m = m.groupdict() if hasattr(m, "groupdict") else m
    try:
        git_url(m["url"])
    except ParamError as exc:
        raise ParamError(exc.reason, (i,), exc.hint) from None
    if m.get("ref") and not REF.match(m["ref"]):
        raise ParamError(f"{raw!r}: {m['ref'][:80]!r} is not a tag or branch name", (i,))
    if ".." in (m.get("sub") or "").split("/"):
        raise ParamError(f"{raw!r}: the subdirectory may not climb out of the repository", (i,))


def _wheel(spec: ParamSpec, value: Any) -> WheelPin | WheelPins:
    """A wheel: {file, sha256}; or a list of them, one per platform (each with its platform tag)."""
    if isinstance(value, list):
        if not value:
            raise ParamError("expected a wheel ({file, sha256}) or a non-empty list of them, one per platform")
        pins, seen = [], {}
        for i, item in enumerate(value):
            try:
                pin = _one_wheel(item)
            except ParamError as exc:
                raise ParamError(exc.reason, (i,) + tuple(exc.path), exc.hint) from None
            where = wheel_platform(pin.file)
            if where is None:
                raise ParamError(f"{pin.file!r} has no platform tag: a list names one wheel per platform "
                                 "(manylinux_2_28_x86_64, manylinux_2_28_aarch64, ...)", (i, "file"),
                                 hint="a wheel for every platform is one mapping, not a list")
            if where in seen:
                raise ParamError(f"{pin.file!r} and {seen[where]!r} are both {where} wheels: a list names one wheel "
                                 "per platform", (i, "file"))
            seen[where] = pin.file
            pins.append(pin)
        return WheelPins(tuple(pins))
    return _one_wheel(value)


def _one_wheel(value: Any) -> WheelPin:
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


def _env(spec: ParamSpec, value: Any) -> tuple:
    """Image environment: NAME: "literal" (taken literally: $ is no expansion), or a PATH-like variable
    extended: NAME: {prepend: [/dir, ...], append: [/dir, ...]}. Kept as sorted (name, value) pairs."""
    if not isinstance(value, dict):
        raise ParamError(f"expected a mapping of variable names, got {type_name(value)}")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            raise ParamError(f"{redact(str(key))[:64]!r} is not a valid variable name (letters, digits, _; not "
                             "starting with a digit)", (key,))
        if isinstance(item, dict):
            unknown = sorted(set(item) - {"prepend", "append"})
            if unknown or not item:
                raise ParamError(f"unknown key {unknown[0]!r}" if unknown else "empty: give prepend or append",
                                 (key,) + tuple(unknown[:1]), hint="allowed: prepend, append (lists of absolute folders)")
            parts = {}
            for where in ("prepend", "append"):
                entries = item.get(where, [])
                if not isinstance(entries, list):
                    raise ParamError(f"expected a list of folders, got {type_name(entries)}", (key, where))
                for j, entry in enumerate(entries):
                    entry = _wrap(text, (key, where, j), entry, "a folder")
                    if not PATH_ENTRY.match(entry):
                        raise ParamError(f"{entry!r} is not an absolute folder that ':' and '$' leave whole "
                                         "(letters, digits, . _ / + @ -)", (key, where, j))
                parts[where] = tuple(entries)
            out[key] = EnvPath(**parts)
            continue
        if isinstance(item, bool):
            item = "1" if item else "0"
        out[key] = _wrap(text, (key,), item)
        trusted_env(key, out[key], (key,))
    return tuple(sorted(out.items()))


def _wrap(fn: Callable, path: tuple, value: Any, *args: Any) -> Any:
    """fn(value, *args) with a refusal's path made relative to the parameter."""
    try:
        return fn(value, *args)
    except ParamError as exc:
        raise ParamError(exc.reason, path + exc.path, exc.hint) from None


def index_url(value: Any) -> str:
    """A package index for one layer: https (or http on loopback), no credentials (netrc gives them)."""
    url = text(value, "an index URL")
    if not re.match(rf"^(?:https://{_HOST}(?::[0-9]{{1,5}})?|http://(?:127\.0\.0\.1|localhost)(?::[0-9]{{1,5}})?)"
                    r"(?:/[A-Za-z0-9._~%+-]+)*/?\Z", url):
        raise ParamError(f"{redact(url)!r} is not an index URL (https://HOST[/PATH]; http only on loopback)",
                         hint=NETRC)
    return url


def _mirror_root(value: Any) -> str:
    """The root of an apt mirror: an index-like URL whose last folder is not a distribution's (the fragment
    keeps each source's folder: MIRROR/ubuntu, MIRROR/debian-security)."""
    url = index_url(value)
    last = url.rstrip("/").rsplit("/", 1)[-1]
    if last in ("ubuntu", "debian", "debian-security", "ubuntu-ports"):
        root = url.rstrip("/")[: -len(last)]
        raise ParamError(f"{redact(url)!r} ends in the distribution's folder {last!r}; give the mirror's root "
                         f"({redact(root)}): each source keeps its own folder (ubuntu, debian, debian-security)")
    return url


APT_NAME = re.compile(r"^[a-z0-9][a-z0-9.+~-]*\Z")   # a suite (jammy-security) or a component (non-free-firmware)
PIP_LEVELS = ("global", "user", "site", "default")


def _names_of(value: Any, what: str) -> tuple:
    if not isinstance(value, list) or not value:
        raise ParamError(f"expected a non-empty list of {what}s, got {type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not APT_NAME.match(item):
            raise ParamError(f"{str(item)[:60]!r} is not an apt {what} (lower-case letters, digits, '.', '+', "
                             "'~' and '-')", (i,))
    if len(set(value)) != len(value):
        raise ParamError(f"a {what} is listed twice")
    return tuple(value)


def _mirror(spec: ParamSpec, value: Any) -> Any:
    """Either the root of a mirror whose folders replace the archives' hosts in the image's own sources
    (a string), or sources.list written whole ({url, suites, components, backup}: the archive itself)."""
    if not isinstance(value, dict):
        return _mirror_root(value)
    keys = {"url", "suites", "components"}
    if not keys <= set(value) or set(value) - keys - {"backup"}:
        raise ParamError("expected the mirror's root (a URL), or a mapping with url (the archive, as a "
                         "sources.list line names it), suites, components and optional backup")
    return AptSources(_wrap(index_url, ("url",), value["url"]),
                      _wrap(_names_of, ("suites",), value["suites"], "suite"),
                      _wrap(_names_of, ("components",), value["components"], "component"),
                      _wrap(_bool, ("backup",), spec, value.get("backup", False)))


def _pipconf(spec: ParamSpec, value: Any) -> Any:
    """The image's pip index: a URL (global.index-url in /etc/pip.conf), or {url, extra, level}."""
    if not isinstance(value, dict):
        return index_url(value)
    if "url" not in value or set(value) - {"url", "extra", "level"}:
        raise ParamError("expected an index URL, or a mapping with url and optional extra (indexes) and level "
                         f"({', '.join(PIP_LEVELS)})")
    extra = value.get("extra", [])
    if not isinstance(extra, list):
        raise ParamError(f"expected a list of index URLs, got {type_name(extra)}", ("extra",))
    level = value.get("level", "global")
    if level not in PIP_LEVELS:
        raise ParamError(f"{str(level)[:40]!r} is not a pip configuration level", ("level",),
                         hint="one of: " + ", ".join(PIP_LEVELS))
    return PipConfig(_wrap(index_url, ("url",), value["url"]), _wrap(_index, ("extra",), spec, extra), level)


def _index(spec: ParamSpec, value: Any) -> Any:
    """One index URL, or a list of them (extra indexes)."""
    if isinstance(value, list):
        out = tuple(_wrap(index_url, (i,), v) for i, v in enumerate(value))
        if len(set(out)) != len(out):
            raise ParamError("an index is listed twice")
        return out
    return index_url(value)


def stack_file(value: Any) -> FileRef:
    """A file beside stacks.yaml, read once: regular, inside the folder, no link on the way."""
    rel = text(value, "a file path relative to the stacks file")
    if not REL_FILE.match(rel):
        raise ParamError(f"{rel!r} is not a relative path of plain names inside the stacks file's folder "
                         "(no '..', no absolute path, no leading '.')")
    root = FILES_ROOT.get()
    if root is None:
        raise ParamError("files can only be named in a stacks file")
    path = root
    try:
        for part in rel.split("/"):
            path = path / part
            if path.is_symlink():
                raise ParamError(f"{rel!r}: {path.relative_to(root)} is a symbolic link; name the file itself")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:   # missing, unreadable, a name too long for the file system, ...
        raise ParamError(f"{rel[:80]!r}: {(exc.strerror or str(exc)).lower()} (looked in {root})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ParamError(f"{rel!r} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_FILE_BYTES:
            raise ParamError(f"{rel!r} is {st.st_size} bytes; files given to a layer are at most "
                             f"{MAX_FILE_BYTES >> 20} MiB (send large artifacts through a wheelhouse or a registry)")
        digest = hashlib.sha256(fh.read(MAX_FILE_BYTES + 1)).hexdigest()
    return FileRef.read_from(rel, digest, str(path))


def _file(spec: ParamSpec, value: Any) -> Any:
    """One file beside stacks.yaml, or a list of them (in order: patches are applied in the order given)."""
    if isinstance(value, list):
        out = tuple(_wrap(stack_file, (i,), v) for i, v in enumerate(value))
        if len({f.path for f in out}) != len(out):
            raise ParamError("a file is listed twice")
        return out
    return stack_file(value)


def _files(spec: ParamSpec, value: Any) -> tuple:
    """Files copied into the image: [{src: FILE, dest: /ABS/PATH, mode: "0644"}]."""
    if not isinstance(value, list):
        raise ParamError(f"expected a list of {{src, dest, mode}}, got {type_name(value)}")
    out, dests = [], set()
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not {"src", "dest"} <= set(item) or set(item) - {"src", "dest", "mode"}:
            raise ParamError("expected a mapping with src, dest and optional mode", (i,))
        src = _wrap(stack_file, (i, "src"), item["src"])
        copy = FileCopy(src, *_placed(spec, i, item, dests, "copy"))
        trusted_file(copy.dest, (i, "dest"))
        out.append(copy)
    return tuple(out)


def _placed(spec: ParamSpec, i: int, item: dict, dests: set, what: str) -> tuple[str, str]:
    """(dest, mode) of a file put into the image (a copy, a download): an absolute file path used once in
    the list, and a mode imgbuild writes."""
    dest = _wrap(_path, (i, "dest"), spec, item["dest"])
    mode = item.get("mode", "0644")
    if mode not in MODES:
        raise ParamError(f"{mode!r} is not a file mode imgbuild writes", (i, "mode"),
                         hint="allowed: " + ", ".join(MODES) + " (quoted, e.g. \"0644\")")
    if dest in dests or dest.endswith("/"):
        raise ParamError(f"{dest!r} is a folder or a second {what} to the same place", (i, "dest"))
    dests.add(dest)
    return dest, mode


DOWNLOAD_URL = re.compile(rf"^(?:https://{_HOST}(?::[0-9]{{1,5}})?|http://(?:127\.0\.0\.1|localhost)(?::[0-9]{{1,5}})?)"
                          r"(?:/[A-Za-z0-9._~%+=,@-]+)+\Z")


def _downloads(spec: ParamSpec, value: Any) -> tuple:
    """Files fetched by URL: [{url: https://..., sha256: 64 hex digits, dest: /ABS/PATH, mode: "0755"}]. Beside a
    lock file the sha256 may be left out (intent, as a recipe's `wget URL` is): the lock file's `downloads:`
    gives it, and until it does the file is IB098 and nothing is built with it."""
    if not isinstance(value, list):
        raise ParamError(f"expected a list of {{url, sha256, dest, mode}}, got {type_name(value)}")
    out, dests = [], set()
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not {"url", "dest"} <= set(item) or set(item) - {"url", "sha256", "dest", "mode"}:
            raise ParamError("expected a mapping with url, sha256, dest and optional mode", (i,))
        url = _wrap(text, (i, "url"), item["url"], "a URL")   # text() refuses credentials in any value
        if not DOWNLOAD_URL.match(url):
            raise ParamError(f"{redact(url)[:200]!r} is not a download URL (https://HOST/PATH; http only on loopback; "
                             "no query)", (i, "url"))
        digest = (_wrap(text, (i, "sha256"), item["sha256"], "a sha256") if "sha256" in item
                  else _wrap(_locked_digest, (i, "sha256"), url))
        if digest and not SHA256.match(digest):
            raise ParamError(f"{digest[:80]!r} is not a sha256 (64 lower-case hex digits)", (i, "sha256"),
                             hint="sha256sum FILE prints it")
        got = Download(url, digest, *_placed(spec, i, item, dests, "download"))
        trusted_file(got.dest, (i, "dest"))
        out.append(got)
    return tuple(out)


def _patches(spec: ParamSpec, value: Any) -> tuple:
    """Patches applied to a git source, in order: each a file beside stacks.yaml (its path), or a file of
    another repository or release by URL and sha256 ({url, sha256}: fetched and checked on the host like a
    download, builder.ship.downloads), so a recipe's patch is never copied into the site's tree."""
    if not isinstance(value, list):
        raise ParamError(f"expected a list of patch files, got {type_name(value)}")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            if set(item) != {"url", "sha256"}:
                raise ParamError("expected a file beside stacks.yaml, or a mapping with exactly url and sha256", (i,))
            try:
                out.append(_downloads(spec, [{**item, "dest": "/opt/imgbuild/patches/by-url", "mode": "0644"}])[0])
            except ParamError as exc:
                raise ParamError(exc.reason, (i,) + exc.path[1:], exc.hint) from None
        else:
            out.append(_wrap(stack_file, (i,), item))
    names = [getattr(p, "path", None) or p.sha256 for p in out]
    if len(set(names)) != len(names):
        raise ParamError("a patch is listed twice")
    return tuple(out)


def _venvs(spec: ParamSpec, value: Any) -> tuple:
    """Virtual environments: [{path, system_site_packages, activate}]; at most one activated."""
    if not isinstance(value, list):
        raise ParamError(f"expected a list of {{path, system_site_packages, activate}}, got {type_name(value)}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or "path" not in item or set(item) - {"path", "system_site_packages", "activate"}:
            raise ParamError("expected a mapping with path and optional system_site_packages, activate", (i,))
        path = _wrap(_path, (i, "path"), spec, item["path"])
        flags = [_wrap(_bool, (i, k), spec, item.get(k, False)) for k in ("system_site_packages", "activate")]
        out.append(Venv(path, *flags))
    if len({v.path for v in out}) != len(out):
        raise ParamError("a virtual environment is listed twice")
    if sum(v.activate for v in out) > 1:
        raise ParamError("more than one virtual environment is activated; one can be first on PATH")
    return tuple(out)


def _removal(spec: ParamSpec, value: Any) -> Removal:
    if not isinstance(value, dict) or set(value) != {"paths", "reason"}:
        raise ParamError("expected a mapping with paths (absolute) and reason (why the parent's files go)")
    paths = value["paths"]
    if not isinstance(paths, list) or not paths:
        raise ParamError("expected a non-empty list of absolute paths", ("paths",))
    out = tuple(_wrap(_path, ("paths", i), spec, p) for i, p in enumerate(paths))
    for i, p in enumerate(out):
        if p.rstrip("/") in SYSTEM_FOLDERS:
            raise ParamError(f"{p!r} is a system folder; name what goes inside it", ("paths", i))
    return Removal(out, _wrap(_reason, ("reason",), spec, value["reason"]))


# Folders a removal or a chmod never names whole: what goes inside them is named instead.
SYSTEM_FOLDERS = ("", "/usr", "/etc", "/bin", "/lib", "/opt", "/home", "/root", "/var", "/usr/local")
CHMOD_MODES = MODES + ("0775", "0777", "1777")
LABEL_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\Z")


def _modes(spec: ParamSpec, value: Any) -> tuple:
    """chmod of paths in the image: [{path, mode, recursive}]."""
    if not isinstance(value, list):
        raise ParamError(f"expected a list of {{path, mode, recursive}}, got {type_name(value)}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not {"path", "mode"} <= set(item) or set(item) - {"path", "mode", "recursive"}:
            raise ParamError("expected a mapping with path, mode and optional recursive", (i,))
        path = _wrap(_path, (i, "path"), spec, item["path"])
        if path.rstrip("/") in SYSTEM_FOLDERS:
            raise ParamError(f"{path!r} is a system folder; name the tree inside it", (i, "path"))
        if item["mode"] not in CHMOD_MODES:
            raise ParamError(f"{item['mode']!r} is not a mode imgbuild sets", (i, "mode"),
                             hint="allowed: " + ", ".join(CHMOD_MODES) + " (quoted)")
        out.append(Mode(path, item["mode"], _wrap(_bool, (i, "recursive"), spec, item.get("recursive", False))))
    return tuple(out)


def _labels(spec: ParamSpec, value: Any) -> tuple:
    """OCI labels: reverse-DNS names, not imgbuild's own, plain text values; sorted pairs."""
    if not isinstance(value, dict):
        raise ParamError(f"expected a mapping of label names to values, got {type_name(value)}")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str) or not LABEL_NAME.match(key) or len(key) > 128:
            raise ParamError(f"{redact(str(key))[:64]!r} is not a label name (lower case, digits, . and -)", (str(key),))
        if key.startswith(("io.imgbuild.", "org.opencontainers.")):
            raise ParamError(f"{key!r}: labels io.imgbuild.* and org.opencontainers.* are imgbuild's, set from what "
                             "it built and measured", (key,))
        out[key] = _wrap(text, (key,), item)
    return tuple(sorted(out.items()))


def _ports(spec: ParamSpec, value: Any) -> tuple:
    if not isinstance(value, list):
        raise ParamError(f"expected a list of port numbers, got {type_name(value)}")
    out = []
    for i, port in enumerate(value):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ParamError("a port is a number from 1 to 65535", (i,))
        out.append(port)
    return tuple(sorted(set(out)))


def _uninstall(spec: ParamSpec, value: Any) -> Uninstall:
    if not isinstance(value, dict) or set(value) != {"packages", "reason"}:
        raise ParamError("expected a mapping with packages (names) and reason (why the base's copy goes)")
    names = _wrap(_names, ("packages",), spec, value["packages"])
    if not names:
        raise ParamError("no packages named", ("packages",))
    return Uninstall(names, _wrap(_reason, ("reason",), spec, value["reason"]))


def _reason(spec: ParamSpec, value: Any) -> str:
    """Why a layer departs from what the base was blessed with: a sentence, shown by plan --explain."""
    reason = text(value, "a reason").strip()
    if len(reason) < 8:
        raise ParamError("say why, in a sentence (it is shown wherever the layer is explained)")
    return reason


def _names(spec: ParamSpec, value: Any) -> Any:
    """Distribution names as pip knows them (never an option: no leading '-'); one name or a list."""
    if isinstance(value, str):
        return _names(spec, [value])[0]
    out = _list(spec, value)
    for i, item in enumerate(out):
        if not DIST.match(item):
            raise ParamError(f"{item!r} is not a distribution name (letters, digits, . _ -)", (i,))
    return out


def _users(spec: ParamSpec, value: Any) -> tuple:
    if not isinstance(value, list):
        raise ParamError(f"expected a list of users, got {type_name(value)}")
    out, names, uids = [], set(), set()
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not {"name", "uid"} <= set(item) or set(item) - {"name", "uid", "shell"}:
            raise ParamError("expected a mapping with name, uid and optional shell", (i,))
        name = _wrap(text, (i, "name"), item["name"])
        if not USER_NAME.match(name):
            raise ParamError(f"{name!r} is not a user name (lower case letters, digits, _ -; at most 32)", (i, "name"))
        uid = item["uid"]
        if isinstance(uid, bool) or not isinstance(uid, int) or not 1 <= uid <= 60000:
            raise ParamError("uid must be a number from 1 to 60000 (0 is root)", (i, "uid"))
        shell = item.get("shell", "/bin/bash")
        if shell not in SHELLS:
            raise ParamError(f"{shell!r} is not a shell imgbuild sets", (i, "shell"), hint="allowed: " + ", ".join(SHELLS))
        if name in names or uid in uids:
            raise ParamError(f"user {name!r} or uid {uid} is given twice", (i,))
        names.add(name)
        uids.add(uid)
        out.append(User(name, uid, shell))
    return tuple(out)


def _links(spec: ParamSpec, value: Any) -> tuple:
    """Symbolic links in the image: {/LINK: /TARGET}, both absolute paths, sorted pairs."""
    if not isinstance(value, dict):
        raise ParamError(f"expected a mapping of /link: /target, got {type_name(value)}")
    out = {}
    for link, target in value.items():
        link = _wrap(_path, (str(link),), spec, link)
        trusted_file(link, (link,))
        out[link] = _wrap(_path, (link,), spec, target)
    return tuple(sorted(out.items()))


def _relpath(spec: ParamSpec, value: Any) -> Any:
    """A path inside a source tree: plain names, no '..', not absolute; one, or a list of them."""
    if isinstance(value, list):
        out = tuple(_wrap(_relpath, (i,), spec, v) for i, v in enumerate(value))
        if len(set(out)) != len(out):
            raise ParamError("a path is listed twice")
        return out
    value = text(value, "a relative path")
    if not REL_FILE.match(value.rstrip("/")):
        raise ParamError(f"{value!r} is not a relative path of plain names (no '..', not absolute)")
    return value.rstrip("/")


def _gpus(spec: ParamSpec, value: Any) -> tuple:
    """GPU names from the catalog (builder/core/data/catalog.yaml), as a stack's `gpus` are."""
    from builder.core import catalog
    out = _list(spec, value)
    known = catalog.gpus()
    for i, name in enumerate(out):
        if name not in known:
            raise ParamError(f"unknown GPU {name!r}", (i,), hint="catalog GPUs: " + ", ".join(known))
    if not out:
        raise ParamError("an empty list targets no GPU; leave the parameter out to use the stack's gpus")
    return out


def _argv(spec: ParamSpec, value: Any) -> tuple:
    """A command as a list of words (exec form): repeats allowed, nothing split or expanded."""
    if not isinstance(value, list) or not value:
        raise ParamError(f"expected a non-empty list of words, got {type_name(value)}")
    return tuple(_wrap(text, (i,), v) for i, v in enumerate(value))


def _options(spec: ParamSpec, value: Any) -> tuple:
    """Options for cmake or configure, in order: -DNAME=VALUE, --flag, --name=value."""
    if not isinstance(value, list):
        raise ParamError(f"expected a list of options, got {type_name(value)}")
    out = []
    for i, item in enumerate(value):
        item = _wrap(text, (i,), item)
        if not OPTION.match(item):
            raise ParamError(f"{item[:80]!r} is not a build option (-DNAME=VALUE for CMake; --with-X[=V], "
                             "--without-X, --enable-X[=V], --disable-X for configure; no spaces, quotes, $ or "
                             "backticks)", (i,))
        out.append(item)
    return tuple(out)


_CONVERTERS: dict[str, Callable[[ParamSpec, Any], Any]] = {
    "str": _str, "int": _int, "bool": _bool, "version": _version, "enum": _enum, "list": _list,
    "map": _map, "git": _git, "requirements": _requirements, "wheel": _wheel, "path": _path, "apt": _apt,
    "env": _env, "index": _index, "file": _file, "files": _files, "uninstall": _uninstall, "users": _users,
    "downloads": _downloads, "patches": _patches, "venvs": _venvs, "removal": _removal, "ports": _ports,
    "modes": _modes, "labels": _labels, "mirror": _mirror, "pipconf": _pipconf, "tree": _tree,
    "links": _links, "argv": _argv, "options": _options, "names": _names, "relpath": _relpath, "gpus": _gpus, "reason": _reason,
}
assert set(_CONVERTERS) == set(TYPES)
