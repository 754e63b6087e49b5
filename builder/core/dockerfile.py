"""A Dockerfile read as BuildKit reads it, once, for the lint: the parser directives at the top (`# syntax`,
`# escape`), instructions with their continuation lines joined (comment and empty lines inside a
continuation dropped, as BuildKit drops them), heredocs of RUN, COPY and ADD (several per instruction,
`<<-` and quoted delimiters), and for every instruction the physical line of each part, so that a finding
points at the line that holds the pattern. Then per RUN: the commands its shell runs (builder.core.shellread),
the ARG and ENV values in scope (global ARGs before FROM, a stage built FROM another stage inheriting its
ARGs and ENV, what a known base image sets), whether it pins a commit and whether its shell stops on errors.

tests/test_dockerfile_reader.py holds this reader to BuildKit's own parser (the Go code, through the
`dockerfile` bindings; those have no aarch64 wheel, which is why the lint does not depend on them).
It knows no rule: builder.rules.lint judges what it reads.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import stat
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from builder.core import shellread
from builder.core.shell import GIT_FETCH_PIN, GIT_PIN, assignments, blank_comments, expand, words

# The build arguments BuildKit predefines: usable in any stage without an ARG.
PREDEFINED_ARGS = {"HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY", "TARGETPLATFORM",
                   "TARGETOS", "TARGETARCH", "TARGETVARIANT", "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT"}
DIRECTIVE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$")
HEREDOC = re.compile(r"<<(-?)\s*([\"']?)([A-Za-z0-9_.-]+)\2")
HEREDOC_KEYWORDS = ("RUN", "COPY", "ADD")


@dataclass(frozen=True)
class Heredoc:
    name: str
    start: int            # offset of its first content line in the instruction's args
    content: str          # as BuildKit hands it over (<<- strips leading tabs)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int
    stage: int            # index of its FROM stage; -1 before the first FROM
    starts: tuple = ()    # (offset in args, physical line) of every joined part
    end: int = 0          # its last physical line (a heredoc's terminator included)
    heredocs: tuple = ()

    def line_at(self, offset: int) -> int:
        i = bisect.bisect_right([s for s, _ in self.starts], offset) - 1
        return self.starts[max(i, 0)][1] if self.starts else self.line


def directives(lines: list[str]) -> dict[str, str]:
    """The parser directives: `# name=value` lines at the very top; the first other line ends them."""
    out: dict[str, str] = {}
    for line in lines:
        m = DIRECTIVE.match(line.strip())
        if not m or m.group(1).lower() in out:
            break
        out[m.group(1).lower()] = m.group(2)
    return out


def parse(text: str) -> list[Instruction]:
    lines = text.replace("\r\n", "\n").split("\n")
    found = directives(lines)
    escape = "`" if found.get("escape") == "`" else "\\"
    cont = re.compile(re.escape(escape) + r"[ \t]*$")
    out: list[Instruction] = []
    stage, i = -1, 0
    real = len(lines) - (lines[-1] == "")        # the text's lines (a final newline ends one, opens none)
    while i < len(lines):
        raw = lines[i].strip()
        if not raw or raw.startswith("#"):
            i += 1
            continue
        # The instruction's text as parts and their running length: `body += line` copied the whole text for
        # each line of a heredoc (a 3 MB heredoc took 25 s to read).
        first, parts, size, starts = i + 1, [], 0, []
        while i < len(lines):
            line = lines[i].strip()
            if size and (not line or line.startswith("#")):
                i += 1                                  # dropped inside a continuation, as BuildKit does
                continue
            more = cont.search(line)
            starts.append((size, i + 1))
            part = (line[:more.start()] if more else line) + (" " if more else "")
            parts.append(part)
            size += len(part)
            i += 1
            if not more:
                break
        body = "".join(parts)
        keyword, _, args = body.strip().partition(" ")
        keyword = keyword.upper()
        heredocs = []
        if keyword in HEREDOC_KEYWORDS:
            for m in HEREDOC.finditer(_unquoted(body)):
                strip_tabs, name = m.group(1) == "-", m.group(3)
                content, start = [], size + 1
                while i < len(lines) and (lines[i].lstrip("\t") if strip_tabs else lines[i]) != name:
                    starts.append((size + 1, i + 1))
                    parts.append("\n" + lines[i])
                    size += 1 + len(lines[i])
                    content.append(lines[i].lstrip("\t") if strip_tabs else lines[i])
                    i += 1
                if i < len(lines):                      # the terminator: kept, so the shell reads a whole heredoc
                    starts.append((size + 1, i + 1))
                    parts.append("\n" + lines[i])
                    size += 1 + len(lines[i])
                    i += 1
                heredocs.append((name, start, "".join(c + "\n" for c in content)))
            body = "".join(parts)
        if heredocs:
            args = body.strip().partition(" ")[2]
        if keyword == "FROM":
            stage += 1
        shift = len(body) - len(body.lstrip()) + len(keyword) + 1
        shift += len(args) - len(args.lstrip())
        out.append(Instruction(keyword, args.strip(), first, stage,
                               tuple((max(s - shift, 0), n) for s, n in starts), end=min(i, real),
                               heredocs=tuple(Heredoc(n, s - shift, c) for n, s, c in heredocs)))
    return out


def _unquoted(text: str) -> str:
    """The first line of an instruction with quoted text blanked: `echo "<<EOF"` starts no heredoc."""
    first = text.split("\n", 1)[0]
    return re.sub(r"(?<!<<)(?<!<<-)(?:'[^']*'|\"(?:[^\"\\]|\\.)*\")", lambda m: " " * len(m.group(0)), first)


def run_shell(ins: Instruction) -> tuple[str, int, str]:
    """(shell text, its offset in args, how it runs) of a RUN: the shell form as written; the exec form's
    `sh -c` script; a heredoc the RUN hands to a shell (no command, or bash -ex). how: the interpreter line
    ('' for the default shell)."""
    body = re.sub(r"^(--\S+\s+)+", lambda m: " " * len(m.group(0)), ins.args)
    if body.lstrip().startswith("["):
        try:
            argv = json.loads(body.split("\n", 1)[0])
        except ValueError:
            argv = None
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            if len(argv) >= 3 and shellread.SHELLS.match(argv[0].rsplit("/", 1)[-1]) and argv[1].startswith("-") \
                    and "c" in argv[1]:
                script = argv[2]
                at = body.find(json.dumps(script)[1:-1][:20])
                return script, max(at, 0), " ".join(argv[:2])
            return " ".join(argv), 0, "exec"
    if ins.heredocs:
        first = body.split("\n", 1)[0]
        command = HEREDOC.sub(" ", first).strip()
        doc = ins.heredocs[0]
        if not command or shellread._runs_shell(words(command)):
            return body[doc.start:doc.start + len(doc.content)], doc.start, command
        return first, 0, command
    return body, 0, ""


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
    def commands(self) -> list[tuple[Instruction, shellread.Command]]:
        """(RUN, one command of its shell), in order, read once for every rule; a command's offset is in the
        RUN's args. The shell starts from the variables in scope (an ARG without a default: unknown)."""
        out = []
        for ins in self.instructions:
            if ins.keyword != "RUN":
                continue
            text, at, how = run_shell(ins)
            if how == "exec" or (ins.heredocs and text is not None and how and not shellread._runs_shell(words(how))):
                out.append((ins, shellread.Command(text=text, offset=at)))
                continue
            values = {k: v[0] for k, v in self.scope(ins).items()}
            found, deep = shellread.read(text, values)
            if deep:
                self.too_deep.append(ins)
            out += [(ins, replace(c, offset=c.offset + at)) for c in found]
        return out

    @cached_property
    def too_deep(self) -> list[Instruction]:
        """RUNs whose shell nests deeper than shellread.MAX_DEPTH: read only to that depth."""
        return []

    @cached_property
    def scopes(self) -> dict[int, dict]:
        """For each instruction (by id), the ARG/ENV values visible to it: (value or None, instruction,
        offset). Global ARGs are visible in a stage only when re-declared there, with their default; a stage
        built FROM an earlier stage inherits its ARGs and ENV (BuildKit; docs.docker.com/build/building/
        variables: "Arguments and variables are inherited from parent stages"); a stage FROM an image the
        catalog knows starts with what that image sets (CUDA_VERSION, TORCH_CUDA_ARCH_LIST, ...). One pass,
        values expanded as they are set."""
        from builder.core import catalog
        out: dict[int, dict] = {}
        glob: dict = {}
        stages: dict[str, dict] = {}
        scope: dict = {}
        current: str | None = None
        for ins in self.instructions:
            out[id(ins)] = scope
            if ins.keyword == "FROM":
                if current is not None:
                    stages[current] = scope
                w = [x for x in ins.args.split() if not x.startswith("--")]
                image = expand(w[0], glob) if w else ""
                parent = stages.get(image.lower())
                if parent is not None:
                    scope = dict(parent)
                else:
                    scope = {k: (v, ins, 0) for k, v in catalog.base_env(image).items()}
                current = w[2].lower() if len(w) >= 3 and w[1].upper() == "AS" else f"{ins.stage}"
                continue
            if ins.keyword not in ("ARG", "ENV"):
                continue
            target = glob if ins.stage < 0 else dict(scope)
            for name, (value, off) in assignments(ins.args).items():
                target[name] = (expand(value, target), ins, off)
            if ins.keyword == "ARG" and "=" not in ins.args and ins.args.split():
                for name in ins.args.split():
                    if ins.stage >= 0 and name in glob:
                        target[name] = glob[name]
                    elif name not in target or ins.stage < 0:
                        target[name] = (None, ins, 0)
            if ins.stage >= 0:
                scope = target
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
        spelling: -ex, -euo pipefail, -o errexit), or a heredoc run by `bash -e...`. Once per RUN: every
        command of it asks."""
        if id(ins) not in self._errexit:
            self._errexit[id(ins)] = self._stops_on_error(ins)
        return self._errexit[id(ins)]

    @cached_property
    def _errexit(self) -> dict:
        return {}

    def _stops_on_error(self, ins: Instruction) -> bool:
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


# The largest Dockerfile lint reads. Real ones are kB (the largest of the three lint corpora's 46 files is
# 12.6 kB); lint takes about 0.2 ms a command, so a 45 MB heredoc would run for minutes.
MAX_BYTES = 1 << 20


def read(path: Path) -> str:
    """A Dockerfile's text: a regular file of UTF-8 up to MAX_BYTES, else ValueError saying why (a FIFO would
    block the read for ever)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > MAX_BYTES:
            raise ValueError(f"{st.st_size / (1 << 20):.1f} MiB: lint reads Dockerfiles of up to {MAX_BYTES >> 20} MiB "
                             "(a real one is tens of kB)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None

