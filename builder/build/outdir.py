"""`imgbuild render --out DIR`: write STACK/NN-LAYER.Dockerfile files without ever following a link.

DIR itself, each STACK folder and each file are opened relative to their parent's descriptor with
O_NOFOLLOW, so a symbolic link planted anywhere on the way is refused, never written through; each
file is written to a fresh temporary name (O_EXCL) and renamed over the old one, so a reader never
sees half a Dockerfile and an existing file is replaced, not written into. Every failure is a clear
refusal (exit 2), never an internal error.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from builder.errors import RenderError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _refuse(path: Path, why: str) -> RenderError:
    return RenderError(f"{path}: {why}", hint="render --out writes into a folder it owns; it never follows a "
                                              "symbolic link nor writes over something that is not a folder")


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return "is a symbolic link; refusing to write through it"
    if exc.errno == errno.ENOTDIR:
        return "is not a folder"
    return f"cannot write: {exc.strerror or exc}"


def _open_dir(path: Path, name: str | None = None, parent: int | None = None) -> int:
    """Open (creating if missing) a folder: path, or name inside the open folder parent; never a link."""
    where = path if name is None else path / name
    target = str(path) if name is None else name
    try:
        st = os.lstat(target, dir_fd=parent)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _refuse(where, _why(exc)) from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise _refuse(where, "is a symbolic link; refusing to write through it")
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise _refuse(where, "is not a folder")
    try:
        if st is None:
            if parent is None:
                os.makedirs(where, exist_ok=True)
            else:
                os.mkdir(name, 0o755, dir_fd=parent)
        return os.open(target, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        raise _refuse(where, _why(exc)) from None


def write_file(folder_fd: int, folder: Path, name: str, text: str) -> Path:
    path = folder / name
    try:
        st = os.lstat(name, dir_fd=folder_fd)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _refuse(path, _why(exc)) from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symbolic link; refusing to write through it")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file")
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=folder_fd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=folder_fd)
            except OSError:
                pass
            raise
    except OSError as exc:
        raise _refuse(path, _why(exc)) from None
    return path


class OutDir:
    """DIR of `render --out`, opened once; folder(name) opens DIR/name, write() writes a file there."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd = _open_dir(self.path)
        self.folders: dict[str, int] = {}

    def write(self, folder: str, name: str, text: str) -> Path:
        if folder not in self.folders:
            self.folders[folder] = _open_dir(self.path, folder, self.fd)
        return write_file(self.folders[folder], self.path / folder, name, text)

    def close(self) -> None:
        for fd in [*self.folders.values(), self.fd]:
            os.close(fd)
        self.folders.clear()

    def __enter__(self) -> "OutDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
