"""A Dockerfile read once for the lint: instructions with their continuation lines joined (comment lines
inside a continuation dropped, as Docker does), heredocs kept, and for every instruction the physical line
of each part, so that a finding points at the line that holds the pattern; then, per RUN, its shell text,
segments, the ARG/ENV values in scope, whether it pins a commit and whether its shell stops on errors.

The reader is small on purpose. It knows no rule: builder.rules.lint judges what it reads.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterator

from builder.core.shell import GIT_FETCH_PIN, GIT_PIN, assignments, blank_comments, expand, segments

# The build arguments BuildKit predefines: usable in any stage without an ARG.
PREDEFINED_ARGS = {"HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY", "TARGETPLATFORM",
                   "TARGETOS", "TARGETARCH", "TARGETVARIANT", "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT"}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int
    stage: int            # index of its FROM stage; -1 before the first FROM
    starts: tuple = ()    # (offset in args, physical line) of every joined part

    def line_at(self, offset: int) -> int:
        i = bisect.bisect_right([s for s, _ in self.starts], offset) - 1
        return self.starts[max(i, 0)][1] if self.starts else self.line


def parse(text: str) -> list[Instruction]:
    lines = text.split("\n")
    escape = "`" if re.match(r"#\s*escape\s*=\s*`", lines[0] if lines else "") else "\\"
    out: list[Instruction] = []
    stage, i = -1, 0
    while i < len(lines):
        raw = lines[i].strip()
        if not raw or raw.startswith("#"):
            i += 1
            continue
        first, body, starts = i + 1, "", []
        while True:
            line = lines[i].strip() if i < len(lines) else ""
            if body and line.startswith("#"):
                i += 1
                continue
            cont = line.endswith(escape)
            starts.append((len(body), i + 1))
            body += (line[:-1] if cont else line) + (" " if cont else "")
            i += 1
            if not cont or i >= len(lines):
                break
        for tag in re.findall(r"<<-?[\"']?([A-Za-z_][A-Za-z0-9_]*)[\"']?", body):
            while i < len(lines) and lines[i].strip() != tag:  # a heredoc: its lines belong to this instruction
                starts.append((len(body) + 1, i + 1))
                body += "\n" + lines[i]
                i += 1
            i += 1
        keyword, _, args = body.strip().partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        shift = len(body) - len(body.lstrip()) + len(keyword) + 1
        out.append(Instruction(keyword, args.strip(), first, stage,
                               tuple((max(s - shift, 0), n) for s, n in starts)))
    return out


@dataclass
class Dockerfile:
    """The instructions of one Dockerfile and what the rules read in them, each computed once."""
    instructions: list

    @cached_property
    def code(self) -> dict[int, str]:
        """A RUN's shell text, by id: flags (--mount=...) and comments blanked, offsets kept."""
        out = {}
        for ins in self.instructions:
            if ins.keyword == "RUN":
                body = re.sub(r"^(--\S+\s+)+", lambda m: " " * len(m.group(0)), ins.args)
                # a backslash-newline inside a heredoc continues the shell line, as in any script
                out[id(ins)] = blank_comments(body).replace("\\\n", "  ")
        return out

    @cached_property
    def segments(self) -> list[tuple[Instruction, str, str, int]]:
        """(RUN, one shell segment, the separator after it, its offset), split once for every rule."""
        out = []
        for ins in self.instructions:
            if ins.keyword == "RUN":
                out += [(ins, text, sep, offset) for text, sep, offset in segments(self.code[id(ins)])]
        return out

    def runs(self) -> Iterator[tuple[Instruction, str, str, int]]:
        return iter(self.segments)

    @cached_property
    def scopes(self) -> dict[int, dict]:
        """For each instruction (by id), the ARG/ENV values visible to it: (value or None, instruction,
        offset). Global ARGs are visible in a stage only when re-declared there, with their default; ENV
        carries over to a stage built FROM an earlier stage. One pass, values expanded as they are set."""
        out: dict[int, dict] = {}
        glob: dict = {}
        stage_env: dict[str, dict] = {}
        scope: dict = {}
        for ins in self.instructions:
            out[id(ins)] = scope
            if ins.keyword == "FROM":
                w = [x for x in ins.args.split() if not x.startswith("--")]
                parent = stage_env.get(w[0].lower(), {}) if w else {}
                scope = dict(parent)
                if len(w) >= 3 and w[1].upper() == "AS":
                    stage_env[w[2].lower()] = {}
                    current = w[2].lower()
                else:
                    current = None
                continue
            if ins.keyword not in ("ARG", "ENV"):
                continue
            target = glob if ins.stage < 0 else dict(scope)
            for name, (value, off) in assignments(ins.args).items():
                target[name] = (expand(value, target), ins, off)
            if ins.keyword == "ARG" and "=" not in ins.args and ins.args.split():
                name = ins.args.split()[0]
                target[name] = glob.get(name) if ins.stage >= 0 and name in glob else (None, ins, 0)
            if ins.stage < 0:
                continue
            scope = target
            if ins.keyword == "ENV" and current is not None:
                stage_env[current] = {k: v for k, v in scope.items() if v[1].keyword == "ENV" or k in stage_env[current]}
        return out

    def scope(self, ins: Instruction) -> dict[str, tuple[str | None, Instruction, int]]:
        """Variables visible to an instruction: ARG/ENV of its stage before it (global ARGs only when
        re-declared in the stage, which is the Docker rule). None: an ARG whose value comes from --build-arg."""
        return self.scopes[id(ins)]

    def values(self, ins: Instruction) -> dict:
        """The stage's variables plus the RUN's own assignments (X=1 cmd, export X=1); once per RUN, since
        every segment of a long RUN asks."""
        if id(ins) not in self._values:
            own = {k: v for k, (v, _) in assignments(self.code.get(id(ins), "")).items()}
            self._values[id(ins)] = {**self.scope(ins), **own}
        return self._values[id(ins)]

    @cached_property
    def _values(self) -> dict:
        return {}

    @cached_property
    def pinned(self) -> dict[int, bool]:
        """Whether a RUN checks out a full commit (literal, through a variable, or fetched + FETCH_HEAD), and
        whether it moves to a ref at all (`git checkout X`), by id."""
        out = {}
        for ins in self.instructions:
            if ins.keyword == "RUN":
                code = expand(self.code[id(ins)], self.values(ins))
                out[id(ins)] = bool(GIT_PIN.search(code) or (GIT_FETCH_PIN.search(code) and "FETCH_HEAD" in code))
        return out

    @cached_property
    def shell_e(self) -> dict[int, bool]:
        """Whether the SHELL in force for each instruction (by id) has -e."""
        out, current = {}, False
        for ins in self.instructions:
            if ins.keyword == "SHELL":
                current = bool(re.search(r'"-\w*e\w*"', ins.args))
            out[id(ins)] = current
        return out

    def errexit(self, ins: Instruction) -> bool:
        """Whether the RUN's shell stops at the first failing command: SHELL [..., "-e..."], `set -e` (any
        spelling: -ex, -euo pipefail, -o errexit), or a heredoc run by `bash -e...`."""
        if self.shell_e[id(ins)]:
            return True
        code = self.code[id(ins)]
        return bool(re.search(r"\bset\s+(?:-[a-zA-Z]+\s+)*-[a-zA-Z]*e|\bset\s+-o\s+errexit", code)
                    or re.match(r"^\s*(?:<<-?\S+\s+)?(?:\S*/)?(?:ba|z|da)?sh\s+(?:-\S+\s+)*-[a-zA-Z]*e[a-zA-Z]*\b",
                                code))


def global_args(instructions: list[Instruction]) -> dict[str, str | None]:
    """ARGs declared before the first FROM, with their defaults (None: only --build-arg sets it)."""
    out: dict[str, str | None] = {}
    for ins in instructions:
        if ins.stage >= 0:
            break
        if ins.keyword == "ARG" and ins.args.split():
            found = assignments(ins.args)
            for name, (value, _) in found.items():
                out[name] = expand(value, out)
            if not found:
                out[ins.args.split()[0]] = None
    return out


def from_image(ins: Instruction, args: dict) -> tuple[str, str]:
    """(image as written, image with the global ARG defaults put in) of a FROM."""
    w = [x for x in ins.args.split() if not x.startswith("--")]
    image = w[0] if w else ""
    return image, expand(image, args)


def dockerfiles_in(path: Path) -> list[Path]:
    """The Dockerfiles under a folder (Dockerfile, Dockerfile.*, *.Dockerfile), or the file given."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and
                      (p.name == "Dockerfile" or p.name.startswith("Dockerfile.") or p.name.endswith(".Dockerfile")))
    return [path]
