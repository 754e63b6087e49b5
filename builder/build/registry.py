"""A small client of the OCI distribution API: manifests, blobs, cross-repository mounts and tags.

imgbuild reads and writes registry metadata directly: looking a content key up, reading stored
manifests and moving release tags never pulls a layer. Credentials come only from the Docker
credential store (~/.docker/config.json auths or a credential helper); nothing is logged of them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from builder.errors import RegistryError

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$")


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
        return cls(first, path, tag, digest)

    @property
    def reference(self) -> str:
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        return f"{self.registry}/{self.repo}" + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def docker_credentials(registry: str) -> tuple[str, str] | None:
    """Username and secret for a registry from the Docker credential store, or None."""
    config = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    helper = (data.get("credHelpers") or {}).get(registry) or data.get("credsStore")
    if helper:
        try:
            out = subprocess.run([f"docker-credential-{helper}", "get"], input=registry, capture_output=True,
                                 text=True, timeout=30, check=True).stdout
            cred = json.loads(out)
            return cred["Username"], cred["Secret"]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            pass
    auth = (data.get("auths") or {}).get(registry, {}).get("auth")
    if auth:
        user, _, secret = base64.b64decode(auth).decode().partition(":")
        return user, secret
    return None


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes


@dataclass
class Registry:
    """One registry host. `bytes_in` counts what was read from it, for the benchmarks' honesty."""

    host: str
    scheme: str = ""
    timeout: float = 30.0
    bytes_in: int = 0
    # With retries, transient faults (connection refused or reset, 429, 5xx: a registry restarting) are
    # retried with BACKOFF. build and release turn them on once ping found the registry; a plan or a
    # diff asks once and says "unreachable" at once.
    retries: bool = False
    on_retry: Callable[[str], None] = lambda line: None
    _token: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.scheme:
            self.scheme = "http" if LOOPBACK.match(self.host) else "https"
        # Loopback must never go through a site proxy.
        handlers = [urllib.request.ProxyHandler({})] if LOOPBACK.match(self.host) else []
        self._opener = urllib.request.build_opener(*handlers)

    # -- transport ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, headers: dict | None = None, data: bytes | None = None,
                 scope: str = "", ok: tuple = (200,)) -> Response:
        url = path if path.startswith("http") else f"{self.scheme}://{self.host}{path}"
        authenticated, waits = False, backoff()
        while True:
            req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
            if scope in self._token:
                req.add_header("Authorization", self._token[scope])
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    body = resp.read()
                    self.bytes_in += len(body)
                    return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, body)
            except urllib.error.HTTPError as exc:
                body = exc.read() or b""
                self.bytes_in += len(body)
                if exc.code == 401 and not authenticated:
                    authenticated = True
                    if self._authenticate(exc.headers.get("WWW-Authenticate", ""), scope):
                        continue
                    raise RegistryError(f"registry {self.host} refused the credentials for {scope or 'this request'}",
                                        hint="log in with `docker login` so that the credential store holds them") from None
                if exc.code in ok:
                    return Response(exc.code, {k.lower(): v for k, v in exc.headers.items()}, body)
                if exc.code in TRANSIENT and self._wait(waits, f"{method} answered {exc.code}"):
                    continue
                raise _http_error(self.host, method, url, exc.code, body) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if self._wait(waits, f"unreachable ({reason})"):
                    continue
                raise RegistryError(f"registry {self.host} is unreachable ({reason})"
                                    + (f" after {len(BACKOFF)} retries" if self.retries else ""),
                                    hint="start it (scripts/setup-host.sh starts one on 127.0.0.1:5000) "
                                         "or set site.registry in stacks.yaml") from None

    def _wait(self, waits, why: str) -> bool:
        """Sleep before the next try of a request that met a transient fault; False when none is left."""
        if not self.retries:
            return False
        delay = next(waits, None)
        if delay is None:
            return False
        self.on_retry(f"registry {self.host}: {why}; retrying in {delay:g} s")
        time.sleep(delay)
        return True

    def _authenticate(self, challenge: str, scope: str) -> bool:
        cred = docker_credentials(self.host)
        if challenge.lower().startswith("basic"):
            if not cred:
                return False
            self._token[scope] = "Basic " + base64.b64encode(f"{cred[0]}:{cred[1]}".encode()).decode()
            return True
        if not challenge.lower().startswith("bearer"):
            return False
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        query = {"service": params.get("service", "")}
        if scope:
            query["scope"] = scope
        req = urllib.request.Request(params["realm"] + "?" + urllib.parse.urlencode(query))
        if cred:
            req.add_header("Authorization", "Basic " + base64.b64encode(f"{cred[0]}:{cred[1]}".encode()).decode())
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                data = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return False
        token = data.get("token") or data.get("access_token")
        if not token:
            return False
        self._token[scope] = f"Bearer {token}"
        return True

    # -- API -----------------------------------------------------------------------------------

    def ping(self) -> None:
        """Is the registry there at all: asked once, without retries (a wrong address fails at once)."""
        retries, self.retries = self.retries, False
        try:
            self._request("GET", "/v2/", ok=(200, 401))
        finally:
            self.retries = retries

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """The digest a tag (or digest) resolves to, or None when absent. One HEAD request."""
        resp = self._request("HEAD", f"/v2/{repo}/manifests/{reference}", headers={"Accept": ", ".join(MANIFEST_TYPES)},
                             scope=f"repository:{repo}:pull", ok=(200, 404))
        if resp.status == 404:
            return None
        return resp.headers.get("docker-content-digest")

    def get_manifest(self, repo: str, reference: str) -> tuple[dict, str, str] | None:
        """(manifest, media type, digest), or None when absent."""
        resp = self._request("GET", f"/v2/{repo}/manifests/{reference}", headers={"Accept": ", ".join(MANIFEST_TYPES)},
                             scope=f"repository:{repo}:pull", ok=(200, 404))
        if resp.status == 404:
            return None
        digest = resp.headers.get("docker-content-digest") or "sha256:" + hashlib.sha256(resp.body).hexdigest()
        return json.loads(resp.body), resp.headers.get("content-type", ""), digest

    def manifest_bytes(self, repo: str, digest: str, media_type: str) -> bytes:
        """The exact bytes of a manifest (a copy must be byte-identical to keep its digest)."""
        body = self._request("GET", f"/v2/{repo}/manifests/{digest}", headers={"Accept": media_type},
                             scope=f"repository:{repo}:pull").body
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise RegistryError(f"manifest {digest} from {self.host}/{repo} does not match its digest")
        return body

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        resp = self._request("PUT", f"/v2/{repo}/manifests/{reference}", data=body,
                             headers={"Content-Type": media_type}, scope=f"repository:{repo}:pull,push", ok=(201,))
        return resp.headers.get("docker-content-digest") or "sha256:" + hashlib.sha256(body).hexdigest()

    def get_blob(self, repo: str, digest: str) -> bytes:
        body = self._request("GET", f"/v2/{repo}/blobs/{digest}", scope=f"repository:{repo}:pull").body
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise RegistryError(f"blob {digest} from {self.host}/{repo} does not match its digest")
        return body

    def has_blob(self, repo: str, digest: str) -> bool:
        return self._request("HEAD", f"/v2/{repo}/blobs/{digest}", scope=f"repository:{repo}:pull",
                             ok=(200, 404)).status == 200

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.has_blob(repo, digest):
            return digest
        scope = f"repository:{repo}:pull,push"
        for attempt in range(3):   # an upload session does not survive a registry restart: start a new one
            start = self._request("POST", f"/v2/{repo}/blobs/uploads/", scope=scope, ok=(202,))
            location = _absolute(self, start.headers["location"])
            sep = "&" if "?" in location else "?"
            try:
                self._request("PUT", f"{location}{sep}digest={digest}", data=data, scope=scope, ok=(201,),
                              headers={"Content-Type": "application/octet-stream"})
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
        resp = self._request("POST", f"/v2/{repo}/blobs/uploads/?mount={digest}&from={from_repo}", scope=scope, ok=(201, 202))
        if resp.status == 202:  # the registry declined to mount: copy the bytes instead
            data = self.get_blob(from_repo, digest)
            location = _absolute(self, resp.headers["location"])
            sep = "&" if "?" in location else "?"
            self._request("PUT", f"{location}{sep}digest={digest}", data=data, scope=scope, ok=(201,),
                          headers={"Content-Type": "application/octet-stream"})

    def tags(self, repo: str) -> list[str]:
        resp = self._request("GET", f"/v2/{repo}/tags/list", scope=f"repository:{repo}:pull", ok=(200, 404))
        return sorted(json.loads(resp.body).get("tags") or []) if resp.status == 200 else []


# Seconds between tries: about 45 s in all, longer than a registry restart takes, short enough that a
# registry that is really gone fails the job within a minute. IMGBUILD_REGISTRY_BACKOFF="0.1,0.2" for tests.
BACKOFF = tuple(float(x) for x in os.environ.get("IMGBUILD_REGISTRY_BACKOFF", "0.5,1,2,4,8,12,16").split(",") if x)
TRANSIENT = (429, 500, 502, 503, 504)


def backoff():
    return iter(BACKOFF)


def _absolute(reg: Registry, location: str) -> str:
    return location if location.startswith("http") else f"{reg.scheme}://{reg.host}{location}"


def _http_error(host: str, method: str, url: str, code: int, body: bytes) -> RegistryError:
    try:
        errors = json.loads(body).get("errors") or []
        detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)
    except ValueError:
        detail = body[:200].decode(errors="replace")
    path = urllib.parse.urlsplit(url).path
    return RegistryError(f"registry {host} answered {code} to {method} {path}" + (f" ({detail})" if detail else ""))
