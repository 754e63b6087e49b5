"""The lint's Dockerfile reader (builder/core/dockerfile.py) held to BuildKit's own parser: the `dockerfile`
package binds the Go code of moby/buildkit's frontend/dockerfile/parser. For every Dockerfile here both must
agree on each instruction: its keyword, first and last line, its arguments (continuation lines joined,
comment and empty lines inside them dropped, flags apart) and its heredocs (name and content, `<<-` tabs
stripped). The bindings ship no aarch64 wheel, which is why the lint keeps a reader of its own; where they
are missing this module is skipped and says so."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.core.dockerfile import directives, parse
from builder.core.shell import words

buildkit = pytest.importorskip("dockerfile", reason="BuildKit's parser bindings (`dockerfile`) have x86_64 wheels only")

ROOT = Path(__file__).resolve().parent.parent
TAB = "\t"

CASES = {
    "continuations": "FROM ubuntu:22.04\nRUN apt-get update && \\\n    # a comment inside\n\n    apt-get install -y git \\   \n    curl\n",
    "escape-backtick": "# escape=`\nFROM mcr.microsoft.com/windows/servercore\nRUN echo a `\n    b\nCOPY . C:\\app\n",
    "syntax-directive": "# syntax=docker/dockerfile:1.7\n# check=skip=all\nFROM alpine\nRUN echo hi\n",
    "heredoc-run": "FROM alpine\nRUN <<EOF\nset -e\napk add git\nEOF\nRUN echo after\n",
    "heredoc-bash-quoted": 'FROM alpine\nRUN bash -ex <<"EOT"\n    pip install "a<2"\n    echo $HOME\nEOT\n',
    "heredoc-two": "FROM alpine\nCOPY <<A <<B /dst/\nfirst\nA\nsecond\nB\nRUN ls /dst\n",
    "heredoc-dash-tabs": f"FROM alpine\nRUN <<-EOF sh\n{TAB}echo one\n{TAB}{TAB}echo two\n{TAB}EOF\nRUN true\n",
    "heredoc-with-flags": "FROM alpine\nRUN --mount=type=cache,target=/root/.cache \\\n    --network=none <<EOF\npip install x==1\nEOF\n",
    "exec-form": 'FROM alpine\nRUN ["/bin/bash", "-c", "echo hi && ls"]\nCMD ["python3", "-m", "http.server"]\n',
    "lowercase-and-onbuild": "from alpine as base\nrun echo lower\nONBUILD RUN echo later\nfrom base\n",
    "stages-and-args": "ARG BASE=alpine:3.20\nFROM ${BASE} AS one\nARG X=1\nENV Y=2 Z=3\nFROM one\nRUN echo $X $Y\n",
    "crlf": "FROM alpine\r\nRUN echo a && \\\r\n    echo b\r\n",
    "empty-continuation-at-end": "FROM alpine\nRUN echo a \\\n\n",
}


def corpus() -> dict[str, str]:
    """The cases above, the lint corpus where it is fetched (.cache/lint-corpus), and imgbuild's golden
    rendered Dockerfiles."""
    out = dict(CASES)
    for folder, pattern in ((ROOT / ".cache" / "lint-corpus", "*"), (ROOT / "tests" / "golden", "**/*.Dockerfile")):
        if folder.is_dir():
            out.update({str(p.relative_to(ROOT)): p.read_text() for p in sorted(folder.glob(pattern)) if p.is_file()})
    return out


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def pairs(keyword: str, words: list[str]) -> str:
    """ENV and LABEL as name value name value ..., quotes taken off: BuildKit splits them into pairs."""
    return squash(" ".join(w.strip('"').strip("'") for w in words))


def theirs(text: str) -> list[tuple]:
    out = []
    for c in buildkit.parse_string(text):
        value = pairs(c.cmd, list(c.value)) if c.cmd.upper() in ("ENV", "LABEL") else " ".join(c.value)
        # <<- : BuildKit's parser keeps the tabs and strips them when it runs the heredoc; ours strips them
        # when it reads, since the lint reads what runs.
        chomp = set(re.findall(r"<<-[\"']?([A-Za-z0-9_.-]+)", c.original.split("\n", 1)[0]))
        docs = tuple((h.name, re.sub(r"(?m)^\t+", "", h.content) if h.name in chomp else h.content)
                     for h in c.heredocs)
        out.append((c.cmd.upper(), c.start_line, c.end_line, squash(value), docs))
    return out


def ours(text: str) -> list[tuple]:
    out = []
    for ins in parse(text):
        first = ins.args.split("\n", 1)[0] if ins.heredocs else ins.args
        first = re.sub(r"^(--\S+\s+)+", "", first)                 # flags, which BuildKit keeps apart
        if ins.keyword in ("ENV", "LABEL"):
            w = words(ins.args)
            first = pairs(ins.keyword, [x for item in w for x in item.split("=", 1)] if w and "=" in w[0]
                          else ins.args.split(None, 1))
        out.append((ins.keyword, ins.line, ins.end, squash(first),
                    tuple((h.name, h.content) for h in ins.heredocs)))
    return out


def normalise_exec(rows: list[tuple]) -> list[tuple]:
    """BuildKit gives an exec form's arguments as the JSON array's strings; ours keep the JSON text."""
    out = []
    for kw, start, end, value, docs in rows:
        if value.startswith("["):
            try:
                import json
                value = squash(" ".join(json.loads(value)))
            except ValueError:
                pass
        out.append((kw, start, end, value, docs))
    return out


@pytest.mark.parametrize("name", sorted(corpus()))
def test_the_reader_reads_each_instruction_as_buildkit_does(name):
    text = corpus()[name]
    want, got = normalise_exec(theirs(text)), normalise_exec(ours(text))
    assert [r[0] for r in got] == [r[0] for r in want], name
    for a, b in zip(got, want):
        assert a[:3] == b[:3], (name, a, b)                          # keyword, first and last line
        if a[0] != "ONBUILD":
            assert a[3] == b[3], (name, a[3], b[3])
        assert a[4] == b[4], (name, a[4], b[4])


def test_the_parser_directives_are_read_from_the_top_only():
    assert directives(["# syntax=docker/dockerfile:1", "# escape=`", "FROM x"]) == {
        "syntax": "docker/dockerfile:1", "escape": "`"}
    assert directives(["FROM x", "# escape=`"]) == {}
    assert directives(["# a comment", "# escape=`"]) == {}
