"""A client of the OCI distribution API that trusts nothing it is sent: manifests, blobs, mounts, tags.

imgbuild reads and writes registry metadata directly: looking a content key up, reading stored manifests
and moving release tags never pulls a layer. The registry may be a site mirror, a proxy, or compromised,
so (docs/registry-client.md says why, and how this differs from the Docker client):

- Credentials (from the Docker credential store only) go to the host they were stored for, over https
  (plain http only on loopback): the registry's to the registry and a realm on its host; a token realm on
  another host gets only what is stored for that host (usually nothing), and only over https; no scheme
  but http(s) is followed. A redirect to another host, or a downgrade to http, never
  carries an Authorization header; an upload `Location` on another host is refused.
- Every content-addressed byte is hashed: a manifest read by digest must hash to it, a manifest read by tag
  to the digest the registry claims for it, a blob to its digest. Digests are checked against their grammar
  wherever they are read. `verified_digest` is the one way a tag becomes a key input.
- Every answer is bounded: a deadline for each request as a whole (not per read), size caps on manifests,
  blobs, tokens and error bodies, and a total budget for retries.

httpx (with redirects off: each hop is judged here) carries the bytes; h11 beneath it bounds header size.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import ssl
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

import httpx

from builder.errors import RegistryError

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$")
# The digests imgbuild accepts (OCI image spec, registered algorithms): anything else is refused where read.
REPO_NAME = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
DIGEST = re.compile(r"^(?:sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})\Z")
ALGORITHMS = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}

# Caps. A manifest above 4 MiB is refused by containerd and most registries; imgbuild's own artifacts
# (check manifests, SBOMs of a training image) stay far below the blob cap.
MANIFEST_MAX = 4 << 20
BLOB_MAX = 64 << 20
BLOB_RATE_MIN = 1 << 20   # bytes a second a layer download is given time for, above the request's deadline
TOKEN_MAX = 1 << 20
ERROR_BODY_MAX = 64 << 10
REDIRECTS_MAX = 5
# Seconds. A request must be answered whole within its deadline; without retries (plan, diff, the first
# ping of build and release) that is the whole wait for a registry that never answers. With retries (build,
# release after the ping) transient faults are retried within one budget, however many tries it takes.
CONNECT_TIMEOUT = float(os.environ.get("IMGBUILD_REGISTRY_CONNECT_TIMEOUT", "5"))
DEADLINE = float(os.environ.get("IMGBUILD_REGISTRY_DEADLINE", "10"))
# Waits between tries (IMGBUILD_REGISTRY_BACKOFF="0.1,0.2" for tests) and the budget of all tries.
BACKOFF = tuple(float(x) for x in os.environ.get("IMGBUILD_REGISTRY_BACKOFF", "0.5,1,2,4,8,12,16").split(",") if x)
RETRY_BUDGET = float(os.environ.get("IMGBUILD_REGISTRY_RETRY_BUDGET", "60"))
TRANSIENT = (429, 500, 502, 503, 504)
REDIRECT = (301, 302, 303, 307, 308)


def check_digest(value, what: str) -> str:
    """A digest as the OCI grammar has it, or a RegistryError naming what held the bad one."""
    if not isinstance(value, str) or not DIGEST.match(value):
        shown = _shown(value if isinstance(value, str) else type(value).__name__)
        raise RegistryError(f"{what}: {shown} is not a digest (sha256:<64 hex> or sha512:<128 hex>)")
    return value


def digest_of(body: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:" + ALGORITHMS[algorithm](body).hexdigest()


def _shown(text: str, limit: int = 80) -> str:
    """A registry's text, quoted, cut, every control character escaped: it may be read on a terminal."""
    from builder.textsafe import inert
    return repr(inert(text[:limit]) + ("..." if len(text) > limit else ""))


@dataclass(frozen=True)
class Ref:
    registry: str
    repo: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Ref":
        rest, digest = (text.split("@", 1) + [None])[:2] if "@" in text else (text, None)
        first, _, path = rest.partition("/")
        if not path or not ("." in first or ":" in first or first == "localhost"):
            raise RegistryError(f"{text!r} does not name a registry (host[:port]/repository[:tag])")
        tag = None
        if ":" in path.rsplit("/", 1)[-1]:
            path, tag = path.rsplit(":", 1)
        if digest is not None:
            check_digest(digest, f"image reference {text!r}")
        return cls(first, path, tag, digest)

    @property
    def reference(self) -> str:
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        return f"{self.registry}/{self.repo}" + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def auth_config_from_env(env=None) -> Path | None:
    """CI hands registry credentials as $DOCKER_AUTH_CONFIG (the text of a Docker config.json: GitLab's own
    name for it). imgbuild's registry client and the docker CLI it runs both read $DOCKER_CONFIG, so the text
    is written once into a private folder (0700, removed when the process ends) and $DOCKER_CONFIG points
    there. Where $DOCKER_CONFIG is already set, the runner's own setting wins. Returns the folder, or None."""
    env = os.environ if env is None else env
    text = env.get("DOCKER_AUTH_CONFIG", "").strip()
    if not text or env.get("DOCKER_CONFIG"):
        return None
    try:
        if not isinstance(json.loads(text), dict):
            raise ValueError
    except ValueError:
        # The value is a secret: never quoted.
        raise RegistryError("$DOCKER_AUTH_CONFIG is not a Docker config.json (a JSON object with \"auths\")") from None
    import atexit
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="imgbuild-auth-"))
    (folder / "config.json").write_text(text)
    os.chmod(folder / "config.json", 0o600)
    atexit.register(lambda: __import__("shutil").rmtree(folder, ignore_errors=True))
    env["DOCKER_CONFIG"] = str(folder)
    return folder


def docker_credentials(registry: str) -> tuple[str, str] | None:
    """Username and secret for a registry from the Docker credential store, or None."""
    config = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    helper = (data.get("credHelpers") or {}).get(registry) or data.get("credsStore")
    if helper:
        try:
            out = subprocess.run([f"docker-credential-{helper}", "get"], input=registry, capture_output=True,
                                 text=True, timeout=30, check=True).stdout
            cred = json.loads(out)
            return cred["Username"], cred["Secret"]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
            pass
    auth = ((data.get("auths") or {}).get(registry) or {}).get("auth")
    if auth:
        try:
            user, _, secret = base64.b64decode(auth).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return user, secret
    return None


# -- a WWW-Authenticate challenge, read strictly ---------------------------------------------------------

_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)=(?:"((?:[^"\\\x00-\x1f\x7f]|\\[^\x00-\x1f\x7f])*)"|([^\s",=]+))\s*(,|$)')


def parse_challenge(header: str) -> tuple[str, dict]:
    """(scheme, params) of one challenge; a RegistryError for anything not in the grammar (a realm with
    CR LF, no realm, unbalanced quotes)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in header) or len(header) > 4096:
        raise RegistryError("the registry's authentication challenge holds control characters or is over 4 KiB")
    scheme, _, rest = header.strip().partition(" ")
    params, pos = {}, 0
    while pos < len(rest):
        m = _PARAM.match(rest, pos)
        if not m or m.end() == pos:
            raise RegistryError(f"the registry's authentication challenge cannot be read: {_shown(header)}")
        value = m.group(2) if m.group(2) is not None else m.group(3)
        params[m.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
        pos = m.end()
    return scheme.lower(), params


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes
    url: str = ""


@dataclass
class Registry:
    """One registry host. `bytes_in` counts what was read from it, for the benchmarks' honesty."""

    host: str
    scheme: str = ""
    timeout: float = DEADLINE          # seconds for one request, whole
    bytes_in: int = 0
    # With retries, transient faults (connection refused or reset, a deadline passed, 429, 5xx: a registry
    # restarting) are retried with BACKOFF within RETRY_BUDGET. build and release turn them on once ping
    # found the registry; a plan or a diff asks once and says what happened at once.
    retries: bool = False
    on_retry: Callable[[str], None] = lambda line: None
    _token: dict = field(default_factory=dict)
    _down: str = ""                    # why this host is taken for down (no retries): said again at once

    def __post_init__(self):
        self.loopback = bool(LOOPBACK.match(self.host))
        if not self.scheme:
            self.scheme = "http" if self.loopback else "https"
        self._local = threading.local()

    @property
    def _client(self) -> httpx.Client:
        """This thread's connection pool: `build --jobs` shares one Registry between threads, and the
        deadline's watchdog closes the pool of the request that overran, no other."""
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._new_client()
        return client

    def _new_client(self) -> httpx.Client:
        # The system's trust store (as urllib and docker use it), not a bundle shipped with a library; no
        # proxy for loopback, the environment's for anything else.
        return httpx.Client(
            follow_redirects=False, trust_env=not self.loopback, verify=ssl.create_default_context(),
            timeout=httpx.Timeout(self.timeout, connect=min(CONNECT_TIMEOUT, self.timeout)),
            headers={"User-Agent": "imgbuild"})

    # -- transport ---------------------------------------------------------------------------

    def _origin(self, url: str) -> tuple[str, str]:
        parts = urllib.parse.urlsplit(url)
        return parts.scheme.lower(), (parts.hostname or "").lower() + (f":{parts.port}" if parts.port else "")

    def _home(self) -> tuple[str, str]:
        return self._origin(f"{self.scheme}://{self.host}/")

    def _send(self, method: str, url: str, headers: dict, data: bytes | None, limit: int, deadline: float,
              sink: BinaryIO | None = None) -> Response:
        """One exchange with one URL: the body read in chunks against the size cap and the deadline. With a
        sink, a 200's body is written to it from its start (a retry writes it again), not held: a layer."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Timeout()
        # httpx's timeouts are per read: a server that sends a header line or a body chunk now and then
        # never trips them. The watchdog closes the connection pool at the deadline, which ends any read.
        fired = threading.Event()

        client = self._client

        def abort() -> None:
            fired.set()
            client.close()
        watchdog = threading.Timer(left, abort)
        watchdog.daemon = True
        watchdog.start()
        try:
            req = client.build_request(method, url, headers=headers, content=data,
                                       timeout=httpx.Timeout(left, connect=min(CONNECT_TIMEOUT, left)))
            resp = client.send(req, stream=True)
            try:
                body, streamed = bytearray(), sink is not None and resp.status_code == 200
                if streamed:
                    sink.seek(0)
                    sink.truncate()
                # A streamed request's limit is its blob's size; what it holds instead (a redirect, an error) is small.
                cap = limit if streamed or sink is None else min(limit, ERROR_BODY_MAX)
                size = 0
                for chunk in resp.iter_raw():
                    size += len(chunk)
                    self.bytes_in += len(chunk)
                    if size > cap:
                        raise _TooBig(size)
                    if streamed:
                        sink.write(chunk)
                    else:
                        body += chunk
                    if time.monotonic() > deadline:
                        raise _Timeout()
                return Response(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, bytes(body), url)
            finally:
                resp.close()
        except httpx.TimeoutException:
            raise _Timeout() from None
        except (httpx.HTTPError, RuntimeError, OSError) as exc:
            if fired.is_set():
                raise _Timeout() from None
            if isinstance(exc, httpx.HTTPError):
                raise _Broken(_transport_reason(exc)) from None
            raise _Broken(_plain(str(exc) or type(exc).__name__)) from None
        finally:
            watchdog.cancel()
            if fired.is_set():
                self._local.client = None    # closed by the watchdog: the next request opens a new pool

    def _request(self, method: str, path: str, *, headers: dict | None = None, data: bytes | None = None,
                 scope: str = "", ok: tuple = (200,), limit: int = MANIFEST_MAX, seconds: float | None = None,
                 sink: BinaryIO | None = None) -> Response:
        url = path if path.startswith("http") else f"{self.scheme}://{self.host}{path}"
        if self._down and not self.retries:
            # One deadline per host and command: a plan with three bases on a silent mirror waits once.
            raise RegistryError(self._down, hint="is the registry up? (scripts/setup-host.sh starts one on 127.0.0.1:5000)")
        authenticated, waits, started = False, iter(BACKOFF), time.monotonic()
        while True:
            try:
                resp = self._follow(method, url, headers or {}, data, scope, limit, seconds or self.timeout, sink)
            except _Timeout:
                if self._wait(waits, started, f"no answer within {seconds or self.timeout:g} s"):
                    continue
                self._down = (f"registry {self.host} did not answer {method} {_path(url)} within "
                              f"{seconds or self.timeout:g} s" + self._tried(started))
                raise RegistryError(self._down, hint="is the registry up? (scripts/setup-host.sh starts one on "
                                                     "127.0.0.1:5000)") from None
            except _Broken as exc:
                if self._wait(waits, started, f"unreachable ({exc.reason})"):
                    continue
                self._down = f"registry {self.host} is unreachable ({exc.reason})" + self._tried(started)
                raise RegistryError(self._down, hint="start it (scripts/setup-host.sh starts one on 127.0.0.1:5000) "
                                                     "or set site.registry in stacks.yaml") from None
            except _TooBig:
                raise RegistryError(f"registry {self.host} answered {method} {_path(url)} with more than "
                                    f"{_size(limit)}; imgbuild reads at most that much here") from None
            if resp.status == 401 and not authenticated:
                authenticated = True
                if self._authenticate(resp.headers.get("www-authenticate", ""), scope):
                    continue
                raise RegistryError(f"registry {self.host} asks for credentials for {scope or 'this request'} "
                                    "and none are stored for it" if not docker_credentials(self.host) else
                                    f"registry {self.host} refused the stored credentials for {scope or 'this request'}",
                                    hint="log in with `docker login` so that the credential store holds them")
            if resp.status in ok:
                return resp
            if resp.status in TRANSIENT and self._wait(waits, started, f"{method} answered {resp.status}"):
                continue
            raise _http_error(self.host, method, url, resp.status, resp.body)

    def _follow(self, method: str, url: str, headers: dict, data: bytes | None, scope: str, limit: int,
                seconds: float, sink: BinaryIO | None = None) -> Response:
        """One request and its redirects, each hop judged: http(s) only, no downgrade to http off loopback,
        and the Authorization header only on the registry's own origin."""
        deadline = time.monotonic() + seconds
        for _ in range(REDIRECTS_MAX + 1):
            scheme, origin = self._origin(url)
            if scheme not in ("http", "https"):
                raise RegistryError(f"registry {self.host} sent imgbuild to a {scheme or 'schemeless'}: URL; only "
                                    "http(s) is followed")
            if scheme == "http" and not LOOPBACK.match(origin) and self.scheme == "https":
                raise RegistryError(f"registry {self.host} redirected to plain http ({_shown(origin)}); refused")
            sent = dict(headers)
            if (scheme, origin) == self._home() and scope in self._token:
                sent["Authorization"] = self._token[scope]
            resp = self._send(method, url, sent, data, limit if method != "HEAD" else 0, deadline, sink)
            if resp.status not in REDIRECT or "location" not in resp.headers:
                return resp
            url = urllib.parse.urljoin(url, resp.headers["location"])
            if resp.status == 303:
                method, data = "GET", None
        raise RegistryError(f"registry {self.host} redirected more than {REDIRECTS_MAX} times")

    def _tried(self, started: float) -> str:
        return f" (tried for {time.monotonic() - started:.0f} s)" if self.retries else ""

    def _wait(self, waits, started: float, why: str) -> bool:
        """Sleep before the next try of a request that met a transient fault; False when none is left or
        the budget would be spent."""
        if not self.retries:
            return False
        delay = next(waits, None)
        if delay is None or time.monotonic() - started + delay + 1 > RETRY_BUDGET:
            return False
        self.on_retry(f"registry {self.host}: {why}; retrying in {delay:g} s")
        time.sleep(delay)
        return True

    def _authenticate(self, challenge: str, scope: str) -> bool:
        """A token (or Basic credentials) for scope, by the policy of the module docstring."""
        if not challenge:
            return False
        scheme, params = parse_challenge(challenge)
        cred = docker_credentials(self.host)
        if scheme == "basic":
            if not cred:
                return False
            if self.scheme != "https" and not self.loopback:
                raise RegistryError(f"registry {self.host} asks for Basic credentials over plain http; refused")
            self._token[scope] = "Basic " + base64.b64encode(f"{cred[0]}:{cred[1]}".encode()).decode()
            return True
        if scheme != "bearer":
            raise RegistryError(f"registry {self.host} asks for {_shown(scheme, 20)} authentication, which "
                                "imgbuild does not speak (Basic, Bearer)")
        realm = params.get("realm")
        if not realm:
            raise RegistryError(f"registry {self.host} sent a Bearer challenge without a realm")
        parts = urllib.parse.urlsplit(realm)
        realm_scheme, realm_origin = parts.scheme.lower(), (parts.hostname or "").lower()
        if realm_scheme not in ("http", "https") or not parts.hostname:
            raise RegistryError(f"registry {self.host} names a token realm that is not an http(s) URL "
                                f"({_shown(realm)}); imgbuild follows no other scheme")
        if realm_scheme == "http" and not LOOPBACK.match(parts.netloc.rsplit("@", 1)[-1]):
            raise RegistryError(f"registry {self.host} names a plain-http token realm on {_shown(parts.netloc)}; "
                                "a realm is asked over https (plain http only on loopback)")
        # Credentials only to the host they were stored for: the registry's own to a realm on its host; a
        # token service on another host gets the credentials stored for that host, if any, else none.
        same_host = realm_origin == (urllib.parse.urlsplit(f"//{self.host}").hostname or "").lower()
        if not same_host:
            cred = docker_credentials(parts.netloc.rsplit("@", 1)[-1]) or docker_credentials(realm_origin)
        query = {"service": params.get("service", "")}
        if scope:
            query["scope"] = scope
        headers = {}
        if cred:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{cred[0]}:{cred[1]}".encode()).decode()
        sep = "&" if parts.query else "?"
        try:
            resp = self._send("GET", realm + sep + urllib.parse.urlencode(query), headers, None, TOKEN_MAX,
                              time.monotonic() + self.timeout)
        except _Timeout:
            raise RegistryError(f"the token service of {self.host} did not answer within {self.timeout:g} s") from None
        except _Broken as exc:
            raise RegistryError(f"the token service of {self.host} is unreachable ({exc.reason})") from None
        except _TooBig:
            raise RegistryError(f"the token service of {self.host} answered more than {_size(TOKEN_MAX)}") from None
        if resp.status in (401, 403):
            return False
        if resp.status != 200:
            raise RegistryError(f"the token service of {self.host} answered {resp.status}")
        try:
            data = json.loads(resp.body)
        except (ValueError, RecursionError):
            kind = "HTML" if resp.body.lstrip()[:1] == b"<" else "something that is not JSON"
            raise RegistryError(f"the token service of {self.host} answered {kind}, not a token") from None
        token = (data.get("token") or data.get("access_token")) if isinstance(data, dict) else None
        if not isinstance(token, str) or not token or not re.fullmatch(r"[\x21-\x7e]{1,8192}", token):
            raise RegistryError(f"the token service of {self.host} answered no usable token")
        self._token[scope] = f"Bearer {token}"
        return True

    # -- API -----------------------------------------------------------------------------------

    def ping(self) -> None:
        """Is the registry there at all: asked once, without retries (a wrong address fails at once)."""
        retries, self.retries = self.retries, False
        try:
            self._request("GET", "/v2/", ok=(200, 401), limit=ERROR_BODY_MAX)
        finally:
            self.retries = retries

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """The digest the registry claims a tag (or digest) resolves to, or None when absent: one HEAD. A
        lookup, not a key input: `verified_digest` is what a key may rest on."""
        resp = self._request("HEAD", f"/v2/{repo}/manifests/{reference}", headers={"Accept": ", ".join(MANIFEST_TYPES)},
                             scope=f"repository:{repo}:pull", ok=(200, 404))
        if resp.status == 404:
            return None
        claimed = resp.headers.get("docker-content-digest")
        if claimed is None:
            return self.verified_digest(repo, reference)
        check_digest(claimed, f"the Docker-Content-Digest of {self.host}/{repo}:{reference}")
        if DIGEST.match(reference) and claimed != reference:
            raise RegistryError(f"registry {self.host} says {repo}@{reference} is {claimed}")
        return claimed

    def verified_digest(self, repo: str, reference: str) -> str | None:
        """The digest of the manifest a tag names, computed from the bytes the registry sends."""
        found = self.get_manifest(repo, reference)
        return found[2] if found else None

    def get_manifest(self, repo: str, reference: str) -> tuple[dict, str, str] | None:
        """(manifest, media type, digest), or None when absent. The digest is the body's own: it must be the
        one asked for (by digest) and the one the registry claims (by tag)."""
        resp = self._request("GET", f"/v2/{repo}/manifests/{reference}", headers={"Accept": ", ".join(MANIFEST_TYPES)},
                             scope=f"repository:{repo}:pull", ok=(200, 404))
        if resp.status == 404:
            return None
        digest = self._verify_manifest(repo, reference, resp)
        return json_object(resp.body, f"manifest {self.host}/{repo}@{digest}"), resp.headers.get("content-type", ""), digest

    def _verify_manifest(self, repo: str, reference: str, resp: Response) -> str:
        claimed = resp.headers.get("docker-content-digest")
        if claimed is not None:
            check_digest(claimed, f"the Docker-Content-Digest of {self.host}/{repo}:{reference}")
        want = reference if DIGEST.match(reference) else claimed
        algorithm = want.split(":", 1)[0] if want else "sha256"
        digest = digest_of(resp.body, algorithm)
        if want and digest != want:
            raise RegistryError(f"manifest {self.host}/{repo}:{reference} hashes to {digest}, not to the "
                                f"{'digest asked for' if want == reference else 'digest the registry claims'} ({want})")
        if reference.startswith(("sha256:", "sha512:")) and not DIGEST.match(reference):
            check_digest(reference, "the digest asked for")
        return digest

    def manifest_bytes(self, repo: str, digest: str, media_type: str) -> bytes:
        """The exact bytes of a manifest (a copy must be byte-identical to keep its digest)."""
        check_digest(digest, "the manifest digest asked for")
        body = self._request("GET", f"/v2/{repo}/manifests/{digest}", headers={"Accept": media_type},
                             scope=f"repository:{repo}:pull").body
        if digest_of(body, digest.split(":", 1)[0]) != digest:
            raise RegistryError(f"manifest {digest} from {self.host}/{repo} does not match its digest")
        return body

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        resp = self._request("PUT", f"/v2/{repo}/manifests/{reference}", data=body, headers={"Content-Type": media_type},
                             scope=f"repository:{repo}:pull,push", ok=(201,), limit=ERROR_BODY_MAX)
        digest = digest_of(body)
        claimed = resp.headers.get("docker-content-digest")
        if claimed is not None and claimed != digest:
            raise RegistryError(f"registry {self.host} says the manifest imgbuild sent is {_shown(claimed)}; "
                                f"its bytes hash to {digest}")
        return digest

    def get_blob(self, repo: str, digest: str, limit: int = BLOB_MAX) -> bytes:
        check_digest(digest, "the blob digest asked for")
        body = self._request("GET", f"/v2/{repo}/blobs/{digest}", scope=f"repository:{repo}:pull", limit=limit).body
        if digest_of(body, digest.split(":", 1)[0]) != digest:
            raise RegistryError(f"blob {digest} from {self.host}/{repo} does not match its digest")
        return body

    def download_blob(self, repo: str, digest: str, size: int, dest: Path) -> None:
        """A blob of `size` bytes (its descriptor's) written to dest as it arrives, never held in memory (a
        layer of gigabytes), and checked against its digest; dest is removed when it is not that blob. The
        deadline grows with the size: the request's own, plus a second per MiB."""
        check_digest(digest, "the blob digest asked for")
        algorithm, want = digest.split(":", 1)
        try:
            with open(dest, "wb") as sink:
                self._request("GET", f"/v2/{repo}/blobs/{digest}", scope=f"repository:{repo}:pull", limit=size,
                              seconds=self.timeout + size / BLOB_RATE_MIN, sink=sink)
            hasher = hashlib.new(algorithm)
            with open(dest, "rb") as got:
                for chunk in iter(lambda: got.read(1 << 20), b""):
                    hasher.update(chunk)
            if hasher.hexdigest() != want or dest.stat().st_size != size:
                raise RegistryError(f"blob {digest} from {self.host}/{repo} does not match its digest and size ({size} bytes)")
        except BaseException:
            dest.unlink(missing_ok=True)
            raise

    def has_blob(self, repo: str, digest: str) -> bool:
        check_digest(digest, "the blob digest asked for")
        return self._request("HEAD", f"/v2/{repo}/blobs/{digest}", scope=f"repository:{repo}:pull",
                             ok=(200, 404)).status == 200

    def _upload_url(self, resp: Response) -> str:
        """Where the registry wants the bytes: on its own origin, or nowhere (the PUT would carry the token)."""
        location = resp.headers.get("location")
        if not location:
            raise RegistryError(f"registry {self.host} started an upload without a Location")
        url = urllib.parse.urljoin(resp.url or f"{self.scheme}://{self.host}/", location)
        if self._origin(url) != self._home():
            raise RegistryError(f"registry {self.host} sent the upload to {_shown(self._origin(url)[1])}, another "
                                "host; imgbuild sends its credentials nowhere else and refused")
        return url

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = digest_of(data)
        if self.has_blob(repo, digest):
            return digest
        scope = f"repository:{repo}:pull,push"
        for attempt in range(3):   # an upload session does not survive a registry restart: start a new one
            start = self._request("POST", f"/v2/{repo}/blobs/uploads/", scope=scope, ok=(202,), limit=ERROR_BODY_MAX)
            location = self._upload_url(start)
            sep = "&" if "?" in location else "?"
            try:
                self._request("PUT", f"{location}{sep}digest={digest}", data=data, scope=scope, ok=(201,),
                              headers={"Content-Type": "application/octet-stream"}, limit=ERROR_BODY_MAX)
                return digest
            except RegistryError:
                if attempt == 2 or self.has_blob(repo, digest):
                    if self.has_blob(repo, digest):
                        return digest
                    raise
        return digest

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> None:
        """Make a blob of from_repo available in repo without moving its bytes (cross-repo mount)."""
        if self.has_blob(repo, digest):
            return
        scope = f"repository:{repo}:pull,push repository:{from_repo}:pull"
        resp = self._request("POST", f"/v2/{repo}/blobs/uploads/?mount={digest}&from={from_repo}", scope=scope,
                             ok=(201, 202), limit=ERROR_BODY_MAX)
        if resp.status == 202:  # the registry declined to mount: copy the bytes instead
            data = self.get_blob(from_repo, digest)
            location = self._upload_url(resp)
            sep = "&" if "?" in location else "?"
            self._request("PUT", f"{location}{sep}digest={digest}", data=data, scope=scope, ok=(201,),
                          headers={"Content-Type": "application/octet-stream"}, limit=ERROR_BODY_MAX)

    def repositories(self, prefix: str = "") -> list[str]:
        """Every repository the registry lists (GET /v2/_catalog, page by page) whose name starts with prefix."""
        out, last = [], ""
        while True:
            query = f"?n=1000&last={last}" if last else "?n=1000"
            resp = self._request("GET", f"/v2/_catalog{query}", scope="registry:catalog:*", ok=(200,))
            names = json_object(resp.body, f"the repository list of {self.host}").get("repositories") or []
            if not isinstance(names, list):
                raise RegistryError(f"the repository list of {self.host} is not a list")
            names = [n for n in names if isinstance(n, str) and REPO_NAME.fullmatch(n)]
            out += [n for n in names if n.startswith(prefix)]
            # The next page is announced by a Link header (rel="next"); a registry may serve fewer than n.
            more = 'rel="next"' in (resp.headers.get("link") or "")
            if not names or not (more or len(names) >= 1000) or names[-1] <= last:
                return sorted(set(out))
            last = names[-1]

    def delete_manifest(self, repo: str, digest: str) -> bool:
        """Delete a manifest by digest (every tag naming it in repo goes with it); False when it was already
        gone. A registry that does not allow deletes is an error that says how to allow them."""
        check_digest(digest, "the manifest digest to delete")
        resp = self._request("DELETE", f"/v2/{repo}/manifests/{digest}", scope=f"repository:{repo}:delete",
                             ok=(202, 404, 405), limit=ERROR_BODY_MAX)
        if resp.status == 405:
            raise RegistryError(f"registry {self.host} does not allow deleting manifests ({repo}@{digest[:19]}: "
                                "405 Method Not Allowed)",
                                hint="enable deletes in the registry's configuration (Distribution: storage.delete."
                                     "enabled: true, or REGISTRY_STORAGE_DELETE_ENABLED=true) and restart it")
        return resp.status == 202

    def tags(self, repo: str) -> list[str]:
        resp = self._request("GET", f"/v2/{repo}/tags/list", scope=f"repository:{repo}:pull", ok=(200, 404))
        if resp.status != 200:
            return []
        tags = json_object(resp.body, f"the tag list of {self.host}/{repo}").get("tags") or []
        if not isinstance(tags, list):
            raise RegistryError(f"the tag list of {self.host}/{repo} is not a list")
        return sorted(t for t in tags if isinstance(t, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", t))


class _Timeout(Exception):
    pass


class _TooBig(Exception):
    pass


class _Broken(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def _transport_reason(exc: httpx.HTTPError) -> str:
    """What went wrong on the wire, in words (the registry's own text never reaches here raw)."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return "connection refused" if "refused" in text.lower() else f"cannot connect: {_plain(text)}"
    if isinstance(exc, httpx.RemoteProtocolError):
        if "peer closed" in text.lower() or "incomplete" in text.lower():
            return "the connection closed before the whole answer came (a body shorter than its Content-Length?)"
        return f"the answer is not valid HTTP: {_plain(text)}"
    if isinstance(exc, httpx.ReadError):
        return "the connection was reset"
    return _plain(text)


def _plain(text: str) -> str:
    from builder.textsafe import inert
    return inert(text[:160])


def _path(url: str) -> str:
    return _plain(urllib.parse.urlsplit(url).path)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def json_object(body: bytes, what: str) -> dict:
    """A JSON object, or a RegistryError saying what the bytes are instead (HTML, a list, too deep, ...)."""
    try:
        data = json.loads(body)
    except RecursionError:
        raise RegistryError(f"{what} is nested too deeply to read") from None
    except (ValueError, UnicodeDecodeError):
        kind = "HTML" if body.lstrip()[:1] == b"<" else "not JSON"
        raise RegistryError(f"{what} is {kind}") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{what} is a JSON {type(data).__name__}, not an object")
    return data


def _http_error(host: str, method: str, url: str, code: int, body: bytes) -> RegistryError:
    detail = ""
    body = body[:ERROR_BODY_MAX]
    try:
        errors = json.loads(body).get("errors") or []
        detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError, RecursionError, UnicodeDecodeError):
        detail = "an HTML page" if body.lstrip()[:1] == b"<" else body[:200].decode(errors="replace")
    return RegistryError(f"registry {host} answered {code} to {method} {_path(url)}"
                         + (f" ({_plain(detail[:200])})" if detail else ""))


__all__ = ["Registry", "Ref", "Response", "RegistryError", "check_digest", "digest_of", "json_object", "parse_challenge",
           "docker_credentials", "DIGEST", "MANIFEST_TYPES"]
