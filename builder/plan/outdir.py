"""`imgbuild render --out DIR`: write STACK/NN-LAYER.Dockerfile files (and the interop files and build
contexts, builder/plan/bake.py) without ever following a link.

DIR itself, each STACK folder and each file are opened relative to their parent's descriptor with
O_NOFOLLOW, so a symbolic link planted anywhere on the way is refused, never written through; each
file is written to a fresh temporary name (O_EXCL) and renamed over the old one, so a reader never
sees half a Dockerfile and an existing file is replaced, not written into. A folder (a build context)
is filled under a fresh temporary name reached through DIR's open descriptor, then renamed into place,
the old one moved aside and removed. Every failure is a clear refusal (exit 2), never an internal error.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from typing import Callable

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
    kind = _kind(parent, target, where)
    if kind is not None and not stat.S_ISDIR(kind):
        raise _refuse(where, "is not a folder")
    try:
        if kind is None:
            if parent is None:
                os.makedirs(where, exist_ok=True)
            else:
                os.mkdir(name, 0o755, dir_fd=parent)
        return os.open(target, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        raise _refuse(where, _why(exc)) from None


def write_file(folder_fd: int, folder: Path, name: str, text: str, mode: int = 0o644) -> Path:
    path = folder / name
    kind = _kind(folder_fd, name, path)
    if kind is not None and not stat.S_ISREG(kind):
        raise _refuse(path, "is not a regular file")
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode, dir_fd=folder_fd)
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


def _kind(folder_fd: int | None, name: str, path: Path) -> int | None:
    """The st_mode of name in the open folder (or of a path, folder_fd None); None when missing; a link
    is refused."""
    try:
        st = os.lstat(name, dir_fd=folder_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refuse(path, _why(exc)) from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symbolic link; refusing to write through it")
    return st.st_mode


def _remove_tree(folder_fd: int, folder: Path, name: str) -> None:
    if _kind(folder_fd, name, folder / name) is not None:
        shutil.rmtree(name, dir_fd=folder_fd)   # never follows a link inside (fd-based walk)


def write_tree(folder_fd: int, folder: Path, name: str, fill: Callable[[Path], object]) -> Path:
    """Folder `name` inside the open folder, made by fill(path of a folder that does not exist yet).
    fill works under a temporary name reached through the descriptor (/proc/self/fd/N), so no link
    planted on DIR's path is followed; the result then replaces any old folder of that name."""
    path = folder / name
    mode = _kind(folder_fd, name, path)
    if mode is not None and not stat.S_ISDIR(mode):
        raise _refuse(path, "is not a folder")
    tmp, old = f".{name}.{os.getpid()}.tmp", f".{name}.{os.getpid()}.old"
    via = Path(f"/proc/self/fd/{folder_fd}")
    where = (via if via.is_dir() else folder) / tmp
    try:
        _remove_tree(folder_fd, folder, tmp)   # left by a killed run that had the same pid
        _remove_tree(folder_fd, folder, old)
        try:
            fill(where)
            if mode is not None:
                os.rename(name, old, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
            os.rename(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        except BaseException:
            shutil.rmtree(tmp, dir_fd=folder_fd, ignore_errors=True)
            raise
        shutil.rmtree(old, dir_fd=folder_fd, ignore_errors=True)
    except OSError as exc:
        raise _refuse(path, _why(exc)) from None
    return path


class OutDir:
    """DIR of `render --out`, opened once; folder(name) opens DIR/name, write() writes a file there."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd = _open_dir(self.path)
        self.folders: dict[str, int] = {}

    def _folder(self, folder: str) -> tuple[int, Path]:
        """DIR itself for "", else DIR/folder (opened once)."""
        if not folder:
            return self.fd, self.path
        if folder not in self.folders:
            self.folders[folder] = _open_dir(self.path, folder, self.fd)
        return self.folders[folder], self.path / folder

    def write(self, folder: str, name: str, text: str, mode: int = 0o644) -> Path:
        fd, path = self._folder(folder)
        return write_file(fd, path, name, text, mode)

    def tree(self, folder: str, name: str, fill: Callable[[Path], object]) -> Path:
        """DIR/folder/name as a whole folder made by fill(path) (a build context)."""
        fd, path = self._folder(folder)
        return write_tree(fd, path, name, fill)

    def close(self) -> None:
        for fd in [*self.folders.values(), self.fd]:
            os.close(fd)
        self.folders.clear()

    def __enter__(self) -> "OutDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
