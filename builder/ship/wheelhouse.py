"""A site's wheelhouse as the only package index: what `IMGBUILD_PIP_OFFLINE=1` gives builds and locks.

An air-gapped site keeps a folder of wheels (and sdists) that `pip download` filled; nothing else is
reachable. imgbuild serves that folder, for the length of one build or lock, as a PEP 503 simple index on
the host's loopback (each link with the file's sha256, as PyPI gives it) and hands its URL to the pip
steps the way it hands a site's index: the pip-index-url build secret. So pip resolves and installs from
the wheelhouse alone, the lock records the same hashes it would from an index, and no Dockerfile, key or
golden depends on whether a host is online. The build's RUN steps reach the loopback with the host
network (HostConf refuses another one in this mode).
"""

from __future__ import annotations

import hashlib
import html
import shutil
import tempfile
import threading
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, canonicalize_name
from packaging.utils import parse_sdist_filename, parse_wheel_filename

from builder.errors import SpecError

_HASHES: dict[tuple, str] = {}   # (path, size, mtime_ns) -> sha256: a wheelhouse is hashed once per process


def sha256_of(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def project_of(filename: str) -> str | None:
    """The normalized project name of a wheel or sdist file name; None for anything else in the folder."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[0])
        if filename.endswith((".tar.gz", ".zip")):
            return str(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def write_pages(wheelhouse: Path, root: Path) -> int:
    """root/simple/NAME/index.html for every project of the wheelhouse, each file linked as
    ../../files/FILE#sha256=HEX, and root/files pointing at the wheelhouse. Returns the number of files."""
    projects: dict[str, list[Path]] = {}
    for path in sorted(wheelhouse.iterdir()):
        name = project_of(path.name) if path.is_file() else None
        if name:
            projects.setdefault(canonicalize_name(name), []).append(path)
    if not projects:
        raise SpecError(f"IMGBUILD_PIP_OFFLINE=1: the wheelhouse {wheelhouse} holds no wheel or sdist",
                        hint="fill it with pip download -d FOLDER (or pip wheel), then build again")
    (root / "simple").mkdir(parents=True)
    (root / "files").symlink_to(wheelhouse.resolve(), target_is_directory=True)
    links = []
    for name, files in sorted(projects.items()):
        folder = root / "simple" / name
        folder.mkdir()
        anchors = "".join(f'<a href="../../files/{html.escape(p.name)}#sha256={sha256_of(p)}">{html.escape(p.name)}</a><br>\n'
                          for p in files)
        (folder / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n")
        links.append(f'<a href="{name}/">{name}</a><br>\n')
    (root / "simple" / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "".join(links) + "</body></html>\n")
    return sum(len(f) for f in projects.values())


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):   # noqa: A002  (the base class's name): pip's requests are not news
        pass


@contextmanager
def serve(wheelhouse: Path) -> Iterator[str]:
    """The wheelhouse as an index on 127.0.0.1 for the length of the block; yields its /simple URL."""
    root = Path(tempfile.mkdtemp(prefix="imgbuild-wheelhouse-"))
    server = None
    try:
        write_pages(wheelhouse, root)
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        shutil.rmtree(root, ignore_errors=True)
