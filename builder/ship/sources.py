"""Git pins: fetched on the host into a bare cache, verified, exported into the build context.

Verification is the point: the object named by the pin must exist, must be a commit (an annotated
tag's object id is not: Megatron's core_v0.15.0 tag object 103851dc... points to commit 0d7e02bd...),
and the tree exported is that commit's, whatever the branch or tag names say today.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

from builder.errors import SourceError
from builder.load.params import GitPin
from builder.redact import redact

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


def ls_remote(repo: str, ref: str) -> str:
    """The commit a tag or branch of a repository names now (`imgbuild lock` for a source at `ref:`): an
    annotated tag is peeled to its commit; a tag wins over a branch of the same name, as git's own lookup
    does. Credentials come from the netrc, as for every fetch."""
    proc = _git("ls-remote", "--", repo, f"refs/tags/{ref}", f"refs/tags/{ref}^{{}}", f"refs/heads/{ref}", timeout=120)
    if proc.returncode != 0:
        raise SourceError(f"git ls-remote of {redact(repo)} failed: " + (proc.stderr or b"").decode(errors="replace").strip()[-300:])
    found = dict(reversed(line.split("\t", 1)) for line in _text(proc).splitlines() if "\t" in line)
    for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}"):
        if name in found:
            return found[name]
    raise SourceError(f"{redact(repo)} has no tag or branch {ref!r}",
                      hint="git ls-remote --tags --heads REPO lists them; or pin the commit: commit: <40-hex sha>")


def fetch(pin: GitPin) -> Path:
    """Make sure the pinned commit is in the local bare cache; return the cache repository."""
    repo = cache_dir() / (hashlib.sha256(pin.repo.encode()).hexdigest()[:16] + ".git")
    repo.parent.mkdir(parents=True, exist_ok=True)
    # One fetch into a cache repository at a time: `build --jobs N` exports the same repository for
    # several layers at once, and so do builders side by side (two once raced on creating it).
    with open(repo.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _fetch_locked(repo, pin)


def _fetch_locked(repo: Path, pin: GitPin) -> Path:
    if not repo.exists():
        tmp = Path(tempfile.mkdtemp(dir=repo.parent, prefix=repo.stem + "."))
        _git("init", "--quiet", "--bare", str(tmp))
        _git("remote", "add", "origin", pin.repo, cwd=tmp)
        tmp.rename(repo)
    if _git("cat-file", "-e", pin.commit, cwd=repo).returncode != 0:
        # --force: the pin is a sha, and a tag the remote moved since the last fetch (a re-tagged mirror)
        # must not make git refuse the whole fetch ("would clobber existing tag").
        proc = _git("fetch", "--quiet", "--force", "--tags", "origin", pin.commit, cwd=repo)
        if proc.returncode != 0:
            # Some servers refuse fetching a bare sha; fetch everything and look again.
            proc = _git("fetch", "--quiet", "--force", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*",
                        cwd=repo)
        if proc.returncode != 0:
            err = [line for line in (proc.stderr or b"").decode(errors="replace").splitlines() if line.strip()][-1:]
            raise SourceError(f"cannot fetch {pin.repo}: " + (err[0].strip() if err else
                                                              f"git fetch exited {proc.returncode} and said nothing"),
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


def export(pin: GitPin, dest: Path, depth: int = 0) -> None:
    """Write the pinned commit's tree to dest (no .git) and the marker naming the verified commit.
    With submodules, each submodule is exported at the commit the superproject's tree records (its
    gitlink), fetched from the URL .gitmodules gives at that same commit and verified like any pin."""
    repo = fetch(pin)
    proc = _git("archive", "--format=tar", pin.commit, cwd=repo)
    if proc.returncode != 0:
        raise SourceError(f"cannot export {pin}: {(proc.stderr or b'').decode(errors='replace').strip()}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")
    if pin.submodules:
        for path, sub in submodules(repo, pin):
            if depth >= MAX_SUBMODULE_DEPTH:
                raise SourceError(f"{pin.repo}: submodules nest deeper than {MAX_SUBMODULE_DEPTH}")
            target = (dest / path).resolve()
            if not target.is_relative_to(dest.resolve()):
                raise SourceError(f"{pin.repo}: submodule path {path!r} leaves the source tree")
            export(sub, target, depth + 1)
            (target / MARKER).unlink()
    # The marker is written from what git says HEAD of the export is, not copied from the spec.
    (dest / MARKER).write_text(f"{_text(_git('rev-parse', pin.commit + '^{commit}', cwd=repo))} {pin.repo}\n")


MAX_SUBMODULE_DEPTH = 4


def submodules(repo: Path, pin: GitPin) -> list[tuple[str, GitPin]]:
    """(path, pin) of every submodule of the pinned commit: commits from the tree's gitlinks, URLs from
    the commit's own .gitmodules (relative ones resolved against the superproject's URL), each URL
    through the same allowlist as a pin written in stacks.yaml."""
    from builder.load.params import ParamError, git_url
    links = {}
    for line in _text(_git("ls-tree", "-r", "-z", pin.commit, cwd=repo)).split("\0"):
        meta, _, path = line.partition("\t")
        if meta.startswith("160000 commit "):
            links[path] = meta.split()[2]
    if not links:
        return []
    conf = _git("config", "--blob", f"{pin.commit}:.gitmodules", "-z", "--get-regexp", r"^submodule\..*\.(path|url)$",
                cwd=repo)
    entries: dict[str, dict] = {}
    for item in (conf.stdout or b"").decode(errors="replace").split("\0"):
        key, _, value = item.partition("\n")
        if key:
            name, _, attr = key[len("submodule."):].rpartition(".")
            entries.setdefault(name, {})[attr] = value
    by_path = {e.get("path"): e.get("url") for e in entries.values()}
    out = []
    for path, commit in sorted(links.items()):
        url = by_path.get(path)
        if not url:
            raise SourceError(f"{pin.repo}@{pin.commit[:12]}: submodule {path!r} has no URL in .gitmodules")
        if url.startswith(("../", "./")):
            base = pin.repo.rstrip("/")
            for part in url.split("/"):
                base = base.rsplit("/", 1)[0] if part == ".." else base if part == "." else f"{base}/{part}"
            url = base
        try:
            url = git_url(url)
        except ParamError as exc:
            raise SourceError(f"{pin.repo}@{pin.commit[:12]}: submodule {path!r}: {exc.reason}", hint=exc.hint) from None
        out.append((path, GitPin(url, commit, True)))
    return out
