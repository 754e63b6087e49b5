"""Shell text as a Dockerfile's RUN holds it: words (quotes respected, linear in the text), comments,
NAME=value assignments and $VAR expansion, and the commands the lint reads in it: pip, uv pip, conda/mamba
install, git checkout/fetch and git URLs. How the commands of a RUN connect (lists, branches, loops, $( ))
is builder.core.shellread's. Knows no rule; builder.rules.lint judges.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterator

# pip options that take a value (the next word is not a requirement).
PIP_VALUE_OPTS = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
                  "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--src",
                  "--config-settings", "-C", "--global-option", "--build-option", "--platform", "--python-version",
                  "--implementation", "--abi", "--upgrade-strategy", "--progress-bar", "--cache-dir", "--log",
                  "--trusted-host", "--proxy", "--retries", "--timeout", "--exists-action", "--only-binary",
                  "--no-binary", "--report", "--python", "--resume-retries", "--keyring-provider", "--use-feature",
                  "--use-deprecated", "--cert", "--client-cert", "--group", "--uploaded-prior-to",
                  # uv pip
                  "-p", "--index", "--default-index", "--index-strategy", "--torch-backend", "--link-mode",
                  "--extra", "--exclude-newer", "--prerelease", "--resolution", "-P", "--upgrade-package",
                  "--reinstall-package", "--no-build-isolation-package", "--overrides", "--build-constraints",
                  "-b", "--config-setting", "--no-install-package"}
CONDA_VALUE_OPTS = {"-n", "--name", "-p", "--prefix", "-c", "--channel", "--file", "--repodata-fn", "--solver"}
PIP = re.compile(r"^pip(?:\d[\d.]*|\$\{?\w+\}?)?\Z")        # pip, pip3, pip3.11, pip${PY}
CONDA = {"conda", "mamba", "micromamba"}
GIT_PIN = re.compile(r"git (?:-C \S+ )?(?:checkout|reset --hard|switch --detach)(?: -q| --quiet| -f| --force)* "
                     r"([0-9a-f]{40})\b")
GIT_FETCH_PIN = re.compile(r"git (?:-C \S+ )?fetch\b[^\n;&|]*?\b[0-9a-f]{40}\b")


@lru_cache(maxsize=4096)
def words(text: str) -> tuple[str, ...]:
    """Shell words (quotes removed, POSIX rules as shlex.split); cached, since every rule reads the same
    commands. Linear in the text: shlex builds each word a character at a time by string concatenation,
    which took 26 s on one 1 MiB package name. An unterminated quote falls back to whitespace words."""
    out: list[str] = []
    word: list[str] = []
    in_word = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\n\r":
            if in_word:
                out.append("".join(word))
                word, in_word = [], False
            i += 1
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                return tuple(text.split())
            word.append(text[i + 1:end])
            in_word, i = True, end + 1
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n and text[i + 1] in '"\\':   # as shlex: only these two
                    i += 1
                word.append(text[i])
                i += 1
            if i >= n:
                return tuple(text.split())
            in_word, i = True, i + 1
        elif c == "\\":
            if i + 1 >= n:            # nothing to escape: shlex refuses it, so fall back as for a quote
                return tuple(text.split())
            word.append(text[i + 1])
            in_word, i = True, i + 2
        else:
            j = i
            while j < n and text[j] not in " \t\n\r'\"\\":
                j += 1
            word.append(text[i:j])
            in_word, i = True, j
    if in_word:
        out.append("".join(word))
    return tuple(out)


def assignments(text: str) -> dict[str, tuple[str, int]]:
    """NAME=value pairs in ENV/ARG arguments or a shell command (export X=1, X=1 cmd): value, offset.
    `name==1.0` is a requirement, not an assignment."""
    found = {}
    for m in re.finditer(r"(?:^|[\s;])(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(?!=)(\"[^\"]*\"|'[^']*'|\S*)", text):
        found[m.group(1)] = (m.group(2).strip("'\""), m.start(1))
    return found


VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+])((?:[^{}]|\{[^{}]*\})*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


# The most text one expansion makes. Variables that double each other (B=$A$A, C=$B$B, ... 40 times: a file of
# under 1 kB) would otherwise fill memory; a reference whose value would pass it is left unexpanded, unknown.
MAX_EXPANSION = 64 * 1024


def expand(text: str, values: dict) -> str:
    """$NAME, ${NAME}, ${NAME:-default} and ${NAME:+alternative} replaced where the value is known (a str);
    others are kept. A default or alternative is itself expanded and its quotes taken off. The result grows by at
    most MAX_EXPANSION: a reference beyond it is kept as written (not known)."""
    if "$" not in text:
        return text
    room = [MAX_EXPANSION]

    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        value = values.get(name)
        value = value[0] if isinstance(value, tuple) else value
        op, word = m.group(2), m.group(3)
        if op is not None:
            word = expand(word, values).replace('"', "").replace("'", "")
            empty = value is None or (value == "" and op.startswith(":"))
            if op.endswith("-"):
                out = word if empty else value
            elif value is None and name not in values:
                return m.group(0)       # not known whether it is set
            else:
                out = "" if empty else word
        elif isinstance(value, str):
            out = value
        else:
            return m.group(0)
        if len(out) > room[0]:
            return m.group(0)
        room[0] -= len(out)
        return out
    return VAR.sub(one, text)


def blank_comments(text: str) -> str:
    """Shell comments (a word that starts with #, outside quotes) turned into spaces, line by line, so that
    offsets and lines stay where they were: a heredoc's comment lines are not commands."""
    if "#" not in text:
        return text
    out = []
    for line in text.split("\n"):
        quote, cut = "", -1
        for i, c in enumerate(line):
            if quote:
                quote = "" if c == quote else quote
            elif c in "'\"":
                quote = c
            elif c == "#" and (i == 0 or line[i - 1] in " \t"):
                cut = i
                break
        out.append(line if cut < 0 else line[:cut] + " " * (len(line) - cut))
    return "\n".join(out)


def command_words(text: str) -> tuple[str, ...]:
    """The words of a simple command without leading NAME=value assignments, sudo, env, command, and the
    shell keywords that may open it (then, do, else)."""
    w = words(text)
    i = 0
    while i < len(w) and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w[i]) or w[i] in ("sudo", "env", "command", "then",
                                                                                    "do", "else", "exec", "time")):
        i += 1
    return w[i:]


def pip_install_args(text: str) -> tuple[str, ...] | None:
    """The arguments of `pip install` (pip, pip3, pip3.11, pip${V}, /path/to/pip, python -m pip, uv pip,
    options before `install` as in `pip -v install`), or None (uninstall, config, download ...)."""
    w = words(text)
    for i, word in enumerate(w):
        if PIP.match(word.rsplit("/", 1)[-1]):
            j = i + 1
            while j < len(w) and w[j].startswith("-"):
                j += 1
            return w[j + 1:] if w[j:j + 1] == ("install",) else None
    return None


def conda_install(text: str) -> tuple[str, tuple[str, ...]] | None:
    """(tool, specs) of `conda|mamba|micromamba install|create`, or None."""
    w = command_words(text)
    if not w or w[0].rsplit("/", 1)[-1] not in CONDA:
        return None
    rest = [x for x in w[1:]]
    j = 0
    while j < len(rest) and rest[j].startswith("-"):
        j += 1
    if rest[j:j + 1] not in (["install"], ["create"]):
        return None
    specs, skip = [], False
    for a in rest[j + 1:]:
        if skip:
            skip = False
        elif a in CONDA_VALUE_OPTS:
            skip = True
        elif not a.startswith("-"):
            specs.append(a)
    return w[0].rsplit("/", 1)[-1], tuple(specs)


def pip_requirements(args: tuple[str, ...]) -> Iterator[str]:
    """The requirements among `pip install` arguments: options, and the values of those that take one, left out."""
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in PIP_VALUE_OPTS:
            skip = True
        elif not a.startswith("-"):
            yield a


def git_url_ref(word: str) -> str | None:
    """The ref of a pip git URL (git+https://host/o/p.git@REF#egg=..., also without .git and inside
    'name @ git+...'): 'HEAD' when none is given, None when the word holds no git URL."""
    at = word.find("git+")
    if at < 0:
        return None
    url = word[at:].split("#", 1)[0]
    path = url.split("://", 1)[-1].partition("/")[2]        # after the host, so user@host is not a ref
    return path.rsplit("@", 1)[1] if "@" in path else "HEAD"


def checkout_ref(w: tuple[str, ...]) -> str | None:
    """The ref a `git [-C dir] checkout ...` moves to; None for paths (`git checkout .`, `-- file`)."""
    i = 1
    if w[1:2] == ("-C",):
        i = 3
    if w[i:i + 1] != ("checkout",):
        return None
    args = list(w[i + 1:])
    if "--" in args:
        args = args[:args.index("--")]
    refs, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-b", "-B", "--orphan"):
            skip = True                                     # the new branch's name; the start point follows
        elif not a.startswith("-"):
            refs.append(a)
    ref = refs[0] if refs else None
    return None if ref in (None, ".") or ref.startswith(("./", "/")) else ref
