"""A scripted hostile registry and a second host, on loopback, for tests/test_hostile_registry.py.

`Hostile` serves one image (two tags, a and b) the way a registry would, and lets a test replace any
answer with a script: a handler function given the request (method, path, headers) that writes whatever
bytes it likes, raw. `Other` is a second host (127.0.0.2: loopback, but not the registry's host) that
records every request it gets, headers included, and answers tokens, blobs or redirects: the place a
leaked credential would arrive. Both stop at the end of the test; their request loops are bounded by
the client's own deadlines and the servers' socket timeouts.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass
class Seen:
    method: str
    path: str
    headers: dict
    body: bytes = b""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 20          # a client that stops sending is let go

    def log_message(self, *args) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self.server.owner.seen.append(seen)
        try:
            self.server.owner.handle(self, seen)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _serve

    def raw(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = True

    def answer(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _Server:
    def __init__(self, host: str):
        self.seen: list[Seen] = []
        self.httpd = ThreadingHTTPServer((host, 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self
        self.host = f"{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, h: _Handler, seen: Seen) -> None:
        raise NotImplementedError


class Other(_Server):
    """A second host: records every request; answers a token, a blob, or whatever `script` writes."""

    def __init__(self):
        super().__init__("127.0.0.2")
        self.script: Callable | None = None

    def handle(self, h: _Handler, seen: Seen) -> None:
        if self.script:
            return self.script(h, seen)
        if "token" in seen.path:
            return h.answer(200, json.dumps({"token": "OTHER-HOST-TOKEN"}).encode(), {"Content-Type": "application/json"})
        h.answer(200, b"{}", {"Content-Type": "application/json"})

    def authorizations(self) -> list[str]:
        return [s.headers["authorization"] for s in self.seen if "authorization" in s.headers]


class Hostile(_Server):
    """A registry holding repository `site/img` with tags a and b (two images differing in a label), whose
    answers a test replaces with `script(handler, seen) -> bool` (True: answered; False: serve normally)."""

    REPO = "site/img"

    def __init__(self, labels_a: dict | None = None, labels_b: dict | None = None):
        super().__init__("127.0.0.1")
        self.script: Callable | None = None
        self.manifests: dict[str, bytes] = {}
        self.types: dict[str, str] = {}
        self.blobs: dict[str, bytes] = {}
        self.tags: dict[str, str] = {}
        layer = b"layer bytes"
        self.blobs[digest(layer)] = layer
        for tag, labels in (("a", labels_a or {"org.example.v": "1"}), ("b", labels_b or {"org.example.v": "2"})):
            self.put_image(tag, {"architecture": "amd64", "os": "linux",
                                 "config": {"Labels": labels, "Env": ["PATH=/usr/bin"]},
                                 "history": [{"created_by": "RUN true"}]}, [layer])

    def put_image(self, tag: str, config, layers: list[bytes], manifest_override=None) -> str:
        cbody = config if isinstance(config, bytes) else json.dumps(config).encode()
        self.blobs[digest(cbody)] = cbody
        manifest = manifest_override if manifest_override is not None else {
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(cbody),
                       "size": len(cbody)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(l), "size": len(l)}
                       for l in layers]}
        return self.put_manifest(tag, manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode())

    def put_manifest(self, tag: str, body: bytes, media_type: str = OCI_MANIFEST) -> str:
        d = digest(body)
        self.manifests[d] = body
        self.types[d] = media_type
        if tag:
            self.tags[tag] = d
        return d

    def ref(self, tag: str) -> str:
        return f"{self.host}/{self.REPO}:{tag}"

    def handle(self, h: _Handler, seen: Seen) -> None:
        if self.script and self.script(h, seen):
            return
        self.serve(h, seen)

    def serve(self, h: _Handler, seen: Seen) -> None:
        path = seen.path.split("?", 1)[0]
        if path == "/v2/":
            return h.answer(200, b"{}")
        prefix = f"/v2/{self.REPO}/"
        if not path.startswith(prefix):
            return h.answer(404, json.dumps({"errors": [{"code": "NAME_UNKNOWN", "message": "no such repository"}]}).encode())
        kind, _, ref = path[len(prefix):].partition("/")
        if kind == "manifests":
            d = self.tags.get(ref, ref)
            body = self.manifests.get(d)
            if body is None:
                return h.answer(404, json.dumps({"errors": [{"code": "MANIFEST_UNKNOWN", "message": "unknown"}]}).encode())
            return h.answer(200, body, {"Content-Type": self.types[d], "Docker-Content-Digest": d})
        if kind == "blobs" and not ref.startswith("uploads"):
            body = self.blobs.get(ref)
            return h.answer(200, body) if body is not None else h.answer(404, b"")
        if kind == "blobs":
            return h.answer(202, b"", {"Location": f"/v2/{self.REPO}/blobs/uploads/u1"})
        if kind == "tags":
            return h.answer(200, json.dumps({"name": self.REPO, "tags": sorted(self.tags)}).encode())
        h.answer(404, b"")


class Silent:
    """A TCP port that accepts connections and never answers: the registry that hangs."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.host = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list = []
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.5)
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
            except OSError:
                continue

    def stop(self) -> None:
        self.stopped = True
        for c in self.conns:
            c.close()
        self.sock.close()


__all__ = ["Hostile", "Other", "Silent", "Seen", "digest", "OCI_MANIFEST", "OCI_INDEX"]
