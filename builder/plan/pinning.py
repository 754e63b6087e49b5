"""A layer's pip commands in their locked form: each installs exactly the set `imgbuild lock python=LAYER`
recorded (stacks.lock.yaml, builder.ship.resolve), every artifact checked against its sha256, and
nothing resolved at build time.

Each pip command keeps its options (--no-build-isolation, an index URL) and loses its requirements:
they become `--no-deps --require-hashes -r /imgbuild-lock/NN.txt`, a file of `name==version
--hash=sha256:...` lines (a wheel of the wheelhouse by its path) bind-mounted from the build context,
so pip fails on any artifact whose bytes differ and installs nothing the lock does not name. A local
source folder the layer builds (a project checkout, TE from source) has no artifact hash: it is still
installed, --no-deps, after the locked set, and its bytes are pinned by its git commit in the key.
"""

from __future__ import annotations

import hashlib
import json
import re
from urllib.parse import unquote

from builder.core.shell import PIP_VALUE_OPTS, words

PIP = "python -m pip install"
MOUNT = "--mount=type=bind,source=imgbuild-lock,target=/imgbuild-lock"
REQS = "/imgbuild-lock/{:02d}.txt"
WHEELHOUSE = "file:///wheelhouse/"


def requirement_lines(step) -> str:
    """The requirements file of one pip command: a line per hashed distribution, sorted by name."""
    lines = []
    for d in sorted(step, key=lambda d: d.name.lower()):
        if d.sha256 is None:
            continue
        # A wheel of the wheelhouse by its path; one named by URL in stacks.yaml from that URL (an index
        # would serve another artifact under its name and version, or none); the rest from the index.
        what = ("/wheelhouse/" + unquote(d.url[len(WHEELHOUSE):]) if d.url.startswith(WHEELHOUSE)
                else f"{d.name} @ {d.url}" if d.direct else f"{d.name}=={d.version}")
        lines.append(f"{what} --hash=sha256:{d.sha256}")
    return "\n".join(lines) + "\n"


def digest(entry) -> str:
    """What goes into the content key: every distribution of every pip command, as installed."""
    body = [[[d.name, d.version, d.sha256, d.url] for d in step] for step in entry.steps]
    return hashlib.sha256(json.dumps(body, separators=(",", ":")).encode()).hexdigest()


def pinned(dockerfile: str, entry) -> tuple[str, tuple[str, ...]]:
    """The layer's Dockerfile with each pip command installing its locked set: (text, the requirements
    file of each command). Raises ValueError when the lock has another number of pip commands than the
    Dockerfile (the entry is then not for this layer as rendered)."""
    starts = [m.start() for m in re.finditer(re.escape(PIP) + r"(?=\s)", dockerfile)]
    if len(starts) != len(entry.steps):
        raise ValueError(f"the lock has {len(entry.steps)} pip command(s), the layer {len(starts)}")
    out, at, files = [], 0, []
    for n, (start, step) in enumerate(zip(starts, entry.steps)):
        end = command_end(dockerfile, start + len(PIP))
        segment = dockerfile[start + len(PIP):end]
        cut = re.search(r"[\s\\]*\Z", segment).start()     # the line continuation before && stays
        options, folders = _split(words(segment[:cut].replace("\\\n", " ")), step)
        out.append(dockerfile[at:start])
        files.append(requirement_lines(step))
        hashed = [d for d in step if d.sha256 is not None]
        commands = ([f"{PIP} {' '.join(options + ['--no-deps', '--require-hashes', '-r', REQS.format(n)])}"]
                    if hashed else [])
        # A git requirement is installed from the commit the lock recorded (pip cannot hash a checkout: the
        # commit is its pin, and it is in the key with the rest of the set).
        commits = [_quote(f"{d.name} @ {d.url}") for d in sorted(step, key=lambda d: d.name.lower())
                   if d.sha256 is None and d.url.startswith("git+")]
        if folders or commits:
            commands.append(f"{PIP} {' '.join(options + ['--no-deps'] + folders + commits)}")
        if not commands:
            # Everything it asks for is held by the image beneath (pip would leave it alone): nothing to
            # install, and nothing resolved at build time either.
            commands = [f"echo {_quote(f'pip command {n + 1}: the lock installs nothing (held by the image beneath)')}"]
        command = " \\\n && ".join(commands)
        out.append(command + segment[cut:])
        at = end
    out.append(dockerfile[at:])
    return mount_lock("".join(out)), tuple(files)


def _split(args: tuple, step) -> tuple[list[str], list[str]]:
    """A pip command's options (with their values) as written, and its local source folders that the
    lock records without a hash (pip's dir_info): those are installed as they are (-e kept). Its other
    requirements, and requirement or constraint files, are what the lock replaces."""
    folders = {d.url[len("file://"):].rstrip("/") for d in step if d.sha256 is None and d.url.startswith("file://")}
    options, found, i = [], [], 0
    while i < len(args):
        a = args[i]
        value = args[i + 1] if i + 1 < len(args) else ""
        if a in ("-r", "--requirement", "-c", "--constraint"):
            i += 2
            continue
        if a in ("-e", "--editable"):
            found += ["-e", _quote(value)]
            i += 2
            continue
        if a in PIP_VALUE_OPTS:
            options += [a, _quote(value)]
            i += 2
            continue
        if a.startswith("-"):
            if a != "--no-deps":
                options.append(_quote(a))
        elif a.split("[")[0].rstrip("/") in folders or a.split("[")[0] in (".", "./"):   # '.[all]' too
            found.append(_quote(a))
        i += 1
    return options, found


def _quote(word: str) -> str:
    return word if re.fullmatch(r"[A-Za-z0-9_./:=,+@%-]+", word) else "'" + word.replace("'", "'\"'\"'") + "'"


def mount_lock(text: str) -> str:
    """Every RUN that reads a file of the lock folder (a pinned pip command, a resolution's constraints)
    gets that folder bind-mounted from the build context: the files never enter a layer."""
    lines, out = text.split("\n"), []
    for i, line in enumerate(lines):
        if line.startswith("RUN "):
            block = [line]
            j = i
            while lines[j].endswith("\\") and j + 1 < len(lines):
                j += 1
                block.append(lines[j])
            if " /imgbuild-lock/" in "\n".join(block):
                line = "RUN " + MOUNT + " \\\n    " + line[4:]
        out.append(line)
    return "\n".join(out)


def command_end(text: str, i: int) -> int:
    """Where the shell command that starts before i ends: the first && || ; | or unescaped newline
    outside quotes (a RUN's continuation lines are one command line)."""
    quote = ""
    while i < len(text):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif text.startswith("\\\n", i):
            i += 2
            continue
        elif c in ";|\n" or text.startswith("&&", i):
            return i
        i += 1
    return i


__all__ = ["PIP", "command_end", "digest", "mount_lock", "pinned", "requirement_lines"]
