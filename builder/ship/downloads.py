"""Files fetched by URL and pinned by sha256 (the `downloads` parameter type): yq, uv, an installer.

They are fetched on the host, like git sources, not by a RUN step in the image: the bytes are checked
against the sha256 before any build starts (a changed or truncated file is a clear error naming the URL,
the sha256 wanted and the one got), no curl or CA bundle is needed in the image, and a verified file is
kept in a cache by its sha256, so a site without network puts the file there and builds offline.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from builder.errors import SourceError
from builder.load.params import Download
from builder.redact import redact

MAX_BYTES = 4 << 30        # 4 GiB: an installer, never a dataset
TIMEOUT_S = 60             # per read: a server that stops sending is an error, not a hang


def cache_dir() -> Path:
    return Path(os.environ.get("IMGBUILD_CACHE", Path.home() / ".cache" / "imgbuild")) / "downloads"


def fetch(download: Download, ca_bundle: Path | None = None) -> Path:
    """The verified file for a download: from the cache if it is there with the right bytes, else fetched
    (written to a temporary file, hashed as it comes, renamed into the cache only when it matches)."""
    path = cache_dir() / download.sha256
    if path.is_file() and _sha256(path) == download.sha256:
        return path
    _fetch(download.url, download.sha256, ca_bundle,
           hint=f"a host without network can place the file at {path}")
    return path


def digest_of(url: str, ca_bundle: Path | None = None) -> str:
    """`imgbuild lock` for a file stacks.yaml names without its sha256: fetched on the host, hashed, and kept in
    the cache under that sha256 (so the build that follows finds it there). Returns the sha256."""
    return _fetch(url, None, ca_bundle, hint="imgbuild lock fetches each file once to record its sha256; or write "
                                             "sha256: in stacks.yaml (sha256sum FILE prints it)")


def _fetch(url: str, want: str | None, ca_bundle: Path | None, hint: str) -> str:
    """url into the cache under its sha256, which must be `want` where one is given; returns the sha256."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{(want or 'lock')[:12]}.")
    digest, size = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=TIMEOUT_S, context=context) as answer:
                    while chunk := answer.read(1 << 20):
                        size += len(chunk)
                        if size > MAX_BYTES:
                            raise SourceError(f"{redact(url)} is over {MAX_BYTES >> 30} GiB; stopped")
                        digest.update(chunk)
                        out.write(chunk)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise SourceError(f"cannot fetch {redact(url)}: {getattr(exc, 'reason', exc)}", hint=hint) from None
        got = digest.hexdigest()
        if want is not None and got != want:
            raise SourceError(f"{redact(url)} is not the file stacks.yaml pins: sha256 {got} ({size} bytes), "
                              f"stacks.yaml says {want}",
                              hint="the server's file changed, or the sha256 in stacks.yaml is wrong; nothing was built")
        os.replace(tmp, folder / got)
        tmp = None
        return got
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)


def place(download: Download, dest: Path, ca_bundle: Path | None = None) -> None:
    """The verified file into the build context at dest (a hard link where the file system allows)."""
    src = fetch(download, ca_bundle)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = ["cache_dir", "digest_of", "fetch", "place"]
