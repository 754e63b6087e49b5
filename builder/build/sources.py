"""Git pins: fetched on the host into a bare cache, verified, exported into the build context.

Verification is the point: the object named by the pin must exist, must be a commit (an annotated
tag's object id is not: Megatron's core_v0.15.0 tag object 103851dc... points to commit 0d7e02bd...),
and the tree exported is that commit's, whatever the branch or tag names say today.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
import io
from pathlib import Path

from builder.errors import SourceError
from builder.load.params import GitPin

MARKER = ".imgbuild-source"   # written beside the exported tree: "<commit> <repo>", checked in the image


def cache_dir() -> Path:
    return Path(os.environ.get("IMGBUILD_CACHE", Path.home() / ".cache" / "imgbuild")) / "git"


def _git(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=False, timeout=timeout, env=env)
    except FileNotFoundError:
        raise SourceError("git is not installed", hint="apt-get install git") from None
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} did not finish within {timeout:.0f} s") from None


def _text(proc: subprocess.CompletedProcess) -> str:
    return (proc.stdout or b"").decode(errors="replace").strip()


def fetch(pin: GitPin) -> Path:
    """Make sure the pinned commit is in the local bare cache; return the cache repository."""
    repo = cache_dir() / (hashlib.sha256(pin.repo.encode()).hexdigest()[:16] + ".git")
    if not repo.exists():
        repo.parent.mkdir(parents=True, exist_ok=True)
        tmp = repo.with_suffix(".tmp")
        _git("init", "--quiet", "--bare", str(tmp))
        _git("remote", "add", "origin", pin.repo, cwd=tmp)
        tmp.rename(repo)
    if _git("cat-file", "-e", pin.commit, cwd=repo).returncode != 0:
        proc = _git("fetch", "--quiet", "--tags", "origin", pin.commit, cwd=repo)
        if proc.returncode != 0:
            # Some servers refuse fetching a bare sha; fetch everything and look again.
            proc = _git("fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*", cwd=repo)
        if proc.returncode != 0:
            err = (proc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise SourceError(f"cannot fetch {pin.repo}: {err[0]}",
                              hint="is the repository reachable from this machine (or a site mirror)?")
    verify(repo, pin)
    return repo


def verify(repo: Path, pin: GitPin) -> None:
    kind = _text(_git("cat-file", "-t", pin.commit, cwd=repo))
    if not kind:
        raise SourceError(f"{pin.repo} has no object {pin.commit}",
                          hint="pin a commit that exists in the repository (git rev-parse 'TAG^{commit}')")
    if kind != "commit":
        target = _text(_git("rev-parse", f"{pin.commit}^{{commit}}", cwd=repo))
        raise SourceError(f"{pin.commit} in {pin.repo} is a {kind} object, not a commit"
                          + (f"; it points to commit {target}" if target else ""),
                          hint="pin the commit sha, not the tag object's")
    resolved = _text(_git("rev-parse", "--verify", f"{pin.commit}^{{commit}}", cwd=repo))
    if resolved != pin.commit:
        raise SourceError(f"{pin.repo}: {pin.commit} resolves to {resolved}")


def export(pin: GitPin, dest: Path) -> None:
    """Write the pinned commit's tree to dest (no .git) and the marker naming the verified commit."""
    repo = fetch(pin)
    proc = _git("archive", "--format=tar", pin.commit, cwd=repo)
    if proc.returncode != 0:
        raise SourceError(f"cannot export {pin}: {(proc.stderr or b'').decode(errors='replace').strip()}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")
    # The marker is written from what git says HEAD of the export is, not copied from the spec.
    (dest / MARKER).write_text(f"{_text(_git('rev-parse', pin.commit + '^{commit}', cwd=repo))} {pin.repo}\n")
