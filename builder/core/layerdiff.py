"""What differs between two builds of one layer, file by file, and the likely cause of each difference.

A layer is a tar. Two builds of one content key that are byte-identical have one digest; where they are not,
this reads both tars and names each path that differs (only in one, its time, size, mode, owner, link target
or contents) with the cause that explains it best: a file time the engine stamped, a .pyc compiled with its
source's time in its header, an installer log, compiled code that embeds a build directory or a build id.
The causes are what `imgbuild verify --rebuild` reports and what docs/reproducible.md explains.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections import Counter
import difflib
from dataclasses import dataclass, field
from typing import IO

# A .pyc header: magic (4), flags (4), then a source time and size (flags 0) or a source hash (1, 3): PEP 552.
PYC_TIMESTAMP = 0
# Temporary build folders that compilers and pip write into what they build.
BUILD_DIRS = re.compile(rb"/tmp/(?:pip-[a-z]+-[a-z0-9_]+|tmp[a-z0-9_]{6,}|cc[A-Za-z0-9]{6})")
LOGS = ("var/log/",)
CACHES = ("var/cache/apt/", "var/cache/ldconfig/aux-cache", "var/cache/debconf/", "var/lib/dpkg/", "var/lib/apt/", "etc/ld.so.cache")
WHITEOUT = ".wh."


@dataclass(frozen=True)
class Entry:
    kind: str          # file, dir, symlink, hardlink, other
    mode: int
    owner: tuple
    size: int
    mtime: int
    sha256: str | None
    link: str
    head: bytes = b""  # the first bytes (a .pyc's header, an ELF's magic)
    build_dirs: tuple = ()   # temporary build folders named in its contents
    data: bytes | None = field(default=None, compare=False)   # the bytes, where asked for (read_layer's keep)


@dataclass
class Change:
    path: str
    what: tuple        # the aspects that differ: added, removed, time, size, mode, owner, link, contents
    cause: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.path}: {', '.join(self.what)}{f' ({self.detail})' if self.detail else ''}: {self.cause}"


@dataclass
class LayerDiff:
    changes: list = field(default_factory=list)
    files: int = 0     # paths in the released layer

    @property
    def causes(self) -> Counter:
        return Counter(c.cause for c in self.changes)

    def summary(self, examples: int = 3) -> list[str]:
        """Each cause, most frequent first, with how many paths and a few of them (what differs, and how)."""
        lines = []
        for cause, n in self.causes.most_common():
            lines.append(f"{n} path(s): {cause}")
            these = [c for c in self.changes if c.cause == cause]
            lines += [f"    {c.path}: {', '.join(c.what)}{f' ({c.detail})' if c.detail else ''}" for c in these[:examples]]
            if n > examples:
                lines.append(f"    ... and {n - examples} more (all in the JSON report)")
        return lines


TEXT_MAX = 64 << 10   # a file this small whose contents differ is shown as a unified diff


def read_layer(stream: IO[bytes], keep: frozenset = frozenset()) -> dict:
    """path -> Entry of every member of a layer tar (uncompressed or gzip); the paths in `keep` with their bytes."""
    out: dict = {}
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for member in tar:
            path = member.name.lstrip("./") or "."
            digest, head, dirs = None, b"", ()
            if member.isfile():
                data = tar.extractfile(member)
                h, found, first = hashlib.sha256(), set(), b""
                tail, kept = b"", []
                while True:
                    chunk = data.read(1 << 20) if data else b""
                    if not chunk:
                        break
                    if path in keep:
                        kept.append(chunk)
                    if not first:
                        first = chunk[:16]
                    h.update(chunk)
                    window = tail + chunk
                    found.update(m.group(0) for m in BUILD_DIRS.finditer(window))
                    tail = chunk[-64:]
                digest, head, dirs = h.hexdigest(), first, tuple(sorted(d.decode(errors="replace") for d in found))
            kind = ("file" if member.isfile() else "dir" if member.isdir() else "symlink" if member.issym()
                    else "hardlink" if member.islnk() else "other")
            out[path] = Entry(kind, member.mode, (member.uid, member.gid), member.size, int(member.mtime), digest,
                              member.linkname, head, dirs, b"".join(kept) if path in keep and member.isfile() else None)
    return out


def small_changed(diff: "LayerDiff", released: dict, rebuilt: dict) -> frozenset:
    """Paths whose contents differ and are small enough on both sides to be shown line by line."""
    return frozenset(c.path for c in diff.changes if "contents" in c.what
                     and released[c.path].size <= TEXT_MAX and rebuilt[c.path].size <= TEXT_MAX)


def show_contents(diff: "LayerDiff", released: dict, rebuilt: dict, lines: int = 8) -> None:
    """Add to each change of a text file read with its bytes the first lines of a unified diff of them."""
    for change in diff.changes:
        a, b = released.get(change.path), rebuilt.get(change.path)
        if a is None or b is None or a.data is None or b.data is None or b"\0" in a.data + b.data:
            continue
        text = [line.rstrip("\n") for line in difflib.unified_diff(
            a.data.decode(errors="replace").splitlines(True), b.data.decode(errors="replace").splitlines(True),
            "released", "rebuilt", n=0) if not line.startswith(("---", "+++", "@@"))]
        if text:
            change.detail = (change.detail + "; " if change.detail else "") + " | ".join(t[:160] for t in text[:lines])
        if sorted(a.data.splitlines()) == sorted(b.data.splitlines()):
            change.cause = ("the same lines in another order: a set or dict iterated where it was written (Python's "
                            "hash randomisation; PYTHONHASHSEED fixes it)")


def compare(released: dict, rebuilt: dict) -> LayerDiff:
    """Every path whose entry differs between the released layer and its rebuild, with its likely cause."""
    diff = LayerDiff(files=len(released))
    for path in sorted(set(released) | set(rebuilt)):
        a, b = released.get(path), rebuilt.get(path)
        if a == b:
            continue
        if a is None or b is None:
            what = ("added",) if a is None else ("removed",)
            diff.changes.append(Change(path, what, cause_of(path, what, a or b, a or b)))
            continue
        what = tuple(name for name, differs in (
            ("kind", a.kind != b.kind), ("contents", a.sha256 != b.sha256), ("size", a.size != b.size),
            ("mode", a.mode != b.mode), ("owner", a.owner != b.owner), ("link", a.link != b.link),
            ("time", a.mtime != b.mtime)) if differs)
        if not what:   # only what Entry keeps beyond these (the head, build folders) differs: same bytes
            continue
        detail = ""
        if "time" in what:
            detail = f"time {a.mtime} -> {b.mtime}"
        if "size" in what:
            detail = (detail + "; " if detail else "") + f"size {a.size} -> {b.size}"
        diff.changes.append(Change(path, what, cause_of(path, what, a, b), detail))
    return diff


def cause_of(path: str, what: tuple, a: Entry, b: Entry) -> str:
    """The likeliest reason one path differs between two builds of one key."""
    name = path.rsplit("/", 1)[-1]
    if set(what) == {"time"}:
        return ("file time not fixed: the engine stamps each file with the time it was written (a fixed time "
                "needs Buildah --timestamp, or BuildKit 0.13 rewrite-timestamp)")
    if name.startswith(WHITEOUT):
        return "a file of the layer beneath removed in one build only"
    if path.startswith(LOGS):
        return "an installer log: it records when the build ran"
    if path.startswith(CACHES):
        return "a package manager's cache or state that records times or inode numbers"
    if name.endswith(".pyc") and "contents" in what:
        flags = [int.from_bytes(e.head[4:8], "little") for e in (a, b) if len(e.head) >= 8]
        if any(f == PYC_TIMESTAMP for f in flags):
            return ("a timestamp-based .pyc: its header holds its source's time, which differs between builds "
                    "(compiled without SOURCE_DATE_EPOCH, or its source's time not fixed)")
        return "a checked-hash .pyc whose source differs"
    if name == "RECORD" and ".dist-info/" in path:
        return "pip's list of installed files and their hashes: it follows the files that differ"
    if "contents" in what and (a.head.startswith(b"\x7fELF") or b.head.startswith(b"\x7fELF") or name.endswith((".o", ".a"))):
        dirs = sorted(set(a.build_dirs) ^ set(b.build_dirs))
        if dirs:
            return ("compiled code that embeds its temporary build folder (" + ", ".join(dirs[:2])
                    + "): debug information or __FILE__ names a random path; build in a fixed folder or map it "
                      "away (-ffile-prefix-map)")
        return ("compiled code that differs between two compiles (a build id, an embedded time, or the "
                "order the compiler saw its inputs)")
    if "contents" in what:
        dirs = sorted(set(a.build_dirs) ^ set(b.build_dirs))
        if dirs:
            return "a file that names its temporary build folder (" + ", ".join(dirs[:2]) + ")"
        return "contents differ"
    if what and set(what) - {"time"}:
        return f"{'/'.join(w for w in what if w != 'time')} differ"
    return "differs"
