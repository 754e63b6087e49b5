"""Lint: the fragile patterns of hand-written training-image Dockerfiles (seen in public ones), found in
the spec, in imgbuild's own rendered Dockerfiles, and in any Dockerfile a site points
`imgbuild lint` at. Each finding has a rule id (IB1xx), a line, a severity and a fix.

Reading is elsewhere: builder.core.dockerfile (instructions as BuildKit reads them, variables in scope,
SHELL), builder.core.shellread (the commands of each RUN as bash runs them: lists, branches, loops, $( ))
and builder.core.shell (words, pip/conda/git commands). This module holds the rules; a finding on a
command says the shell path that reaches it.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from functools import cached_property
from dataclasses import dataclass, field
from typing import Callable, Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from builder.core import catalog
from builder.core.dockerfile import PREDEFINED_ARGS, Dockerfile, Instruction, from_image, global_args, parse
from builder.core.shellread import MAX_DEPTH, Command, read
from builder.rules.facts import jax_cuda_of, resolve
from builder.rules.findings import Finding
from builder.core.shell import (assignments, checkout_ref, command_words, conda_install, expand, git_url_ref,
                                 pip_install_args, pip_requirements, words)
from builder.load.spec import Spec, Stack
from builder.core.yamlsrc import dotted

HEX40 = re.compile(r"^[0-9a-f]{40}\Z")
HEX_SHORT = re.compile(r"^[0-9a-f]{7,39}\Z")
# A whole word of a variable name ('HF_TOKEN', not 'tiktoken').
SECRET_NAME = re.compile(r"(?:^|_)(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)\Z", re.I)
# A name that says the variable switches or points at a secret rather than holding one
# (SCCACHE_S3_NO_CREDENTIALS=0, HF_TOKEN_PATH=/run/secrets/hf), and values no secret has.
SECRET_SWITCH = re.compile(r"(?:^|_)(?:NO|DISABLE|DISABLED|ENABLE|ENABLED|USE|SKIP|ALLOW|REQUIRE|IGNORE)_", re.I)
NOT_A_SECRET = re.compile(r"(?:0|1|true|false|yes|no|on|off|none|null|y|n|t|f|disabled?|enabled?|[-+]?\d{1,6})\Z", re.I)


def holds_secret(name: str, value: str) -> bool:
    """A variable that holds a secret by its meaning, not its name alone: a secret's name, a literal value,
    and not a switch, a flag value or a reference to a file or another variable."""
    if not SECRET_NAME.search(name) or not value or value.startswith(("$", "/run/secrets/")):
        return False
    return not (SECRET_SWITCH.search(name) or NOT_A_SECRET.fullmatch(value.strip()))
USERINFO = re.compile(r"\b[a-z][a-z0-9+.-]*://([^/\s:@'\"]+):([^/\s@'\"]+)@", re.I)
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
CRED_FILES = re.compile(r"(^|/)(id_rsa|id_ed25519|id_ecdsa|\.netrc|\.pypirc|\.git-credentials|credentials(\.json)?)\Z")
ARCH_VARS = ("TORCH_CUDA_ARCH_LIST", "NVTE_CUDA_ARCHS", "CMAKE_CUDA_ARCHITECTURES")
MIX_VARS = ARCH_VARS + ("FLASH_ATTN_CUDA_ARCHS",)   # every spelling IB105 compares within a stage
ARCH_VARIANT = re.compile(r"\b\d+\.\d+a\b")   # '9.0a', '10.0a': arch-specific targets
GENCODE = re.compile(r"(?:arch=compute_|code=sm_)(\d+a?)")
# '+cu12torch2.6' is how flash-attn names its wheels.
CUDA_FLAVOUR = re.compile(r"(?:-cu(\d{2,3})\b|^cupy-cuda(\d+)x\b|\+cu(\d{2,3})(?:\b|(?=torch))|/whl/cu(\d{2,3})\b)")
TORCH_FAMILY = {"torch", "torchvision", "torchaudio"}
# DS_BUILD_ suffixes of the ops built from host code only (no nvcc): they need no arch list.
CPU_DS_OPS = {catalog.ds_build_var(op)[len("DS_BUILD_"):] for op in catalog.ds_host_ops().value}
# Commands whose failure changes nothing a build relies on: cleanup and diagnostics. `X || true` is harmless.
HARMLESS = {"rm", "rmdir", "unlink", "ls", "find", "du", "df", "cat", "echo", "printf", "which", "type", "test", "[",
            "nvidia-smi", "pkill", "kill", "killall", "umount", "ldconfig", "sync", "true", "cd", "pushd", "popd"}
HARMLESS_SUB = {("apt-get", "clean"), ("apt-get", "autoclean"), ("apt-get", "autoremove"), ("apt-get", "purge"),
                ("apt-get", "remove"), ("apt", "clean"), ("apt", "autoremove"), ("apt", "purge"), ("apt", "remove"),
                ("pip", "cache"), ("pip", "uninstall"), ("pip3", "cache"), ("pip3", "uninstall"), ("uv", "cache"),
                ("conda", "clean"), ("mamba", "clean"), ("npm", "cache")}
INSTALLS = re.compile(r"^(?:\S*pip3?|\S*python3?(?:\.\d+)? -m pip|uv pip|conda|mamba|apt-get|apt|make|cmake|"
                      r"git|curl|wget)\b.*\b(install|build|clone|checkout|--build)\b")
# The fragile pattern of public training-image Dockerfiles each rule enforces against (docs/preflight-and-lint.md).
PATTERNS = {rule: "a fragile pattern of public training-image Dockerfiles: " + re.sub(r"^[0-9 and]+\((.*)\)$", r"\1", text)
            for rule, text in {
    "IB101": "1 (floating refs)", "IB102": "1 (weak refs: short hashes)", "IB103": "1 (install without a version)",
    "IB104": "3 (arch targets missing)", "IB105": "3 (arch targets mixed)", "IB106": "3 (ARG before FROM)",
    "IB107": "4 (silent failure)", "IB108": "5 (mismatched CUDA flavours)", "IB109": "2 (replacing the base's torch)",
    "IB110": "6 (secrets and credentials baked in)", "IB112": "1 (floating refs: a base by tag)",
    "IB113": "1 and 6 (a fetched script run unverified as root: it runs whatever the server returns)",
    "IB114": "6 (secrets baked in: a private key generated into a layer)",
    "IB115": "3 (compiled parts left out: Apex built without its CUDA extensions)",
    "IB116": "4 (silent failure: a step the lint cannot read is not judged, and says so)",
    "IB117": "1 and 6 (a file fetched at build time installed unverified: it is whatever the server returns)"}.items()}


def arch_set(value: str) -> frozenset | None:
    """An arch list in any spelling as a set of sm numbers ('9.0;10.0', '90 100', '9.0+PTX', '90-real')."""
    if "$" in value:
        return None
    out = set()
    for item in re.split(r"[;,\s]+", value.strip().strip("'\"")):
        item = item.replace("+PTX", "").replace("-real", "").replace("-virtual", "").lower()
        if not item:
            continue
        m = re.fullmatch(r"(\d+)\.(\d)(a?)|(\d{2,3})(a?)", item)
        if not m:
            return None
        out.add(f"{m.group(1)}{m.group(2)}" if m.group(1) else m.group(4))
    return frozenset(out)


# -- Dockerfile rules -------------------------------------------------------------------------------

@dataclass
class Context(Dockerfile):
    """One Dockerfile as the rules see it: what Dockerfile reads, plus the base's facts and the findings."""
    file: str
    base_cuda: Version | None = None      # CUDA of the image the first stage starts from, when known
    base_torch: bool | None = None        # whether that image ships torch
    base_torch_version: str | None = None
    base_python: str | None = None        # that image's Python, when the catalog knows it
    stages: dict = field(default_factory=dict)   # stage -> Base of the image it starts from (FROM a stage: its)
    findings: list = field(default_factory=list)

    @cached_property
    def global_names(self) -> set[str]:
        """The ARGs declared before the first FROM."""
        return set(global_args(self.instructions))

    def base(self, ins: Instruction) -> "Base":
        """What the image an instruction's stage starts from ships: given (imgbuild's own layers, where the
        stack says), else its stage's FROM as resolved (a stage FROM another stage takes that one's), and the
        CUDA_VERSION in scope where the image itself does not say."""
        if self.base_cuda is not None or self.base_torch is not None:
            return Base(self.base_cuda, self.base_torch, self.base_torch_version, self.base_python)
        found = self.stages.get(ins.stage, Base())
        if found.cuda is None:
            value = (self.scope(ins).get("CUDA_VERSION") or (None,))[0]
            m = re.match(r"^(\d+\.\d+(?:\.\d+)?)", value or "")
            found = Base(Version(m.group(1)) if m else None, found.torch, found.torch_version, found.python)
        return found

    def add(self, rule_id: str, severity: str, ins: Instruction, offset: int, message: str, fix: str,
            source: str = "", cmd: Command | None = None) -> None:
        """A finding at the line that holds offset; for a command of a RUN, the shell path that reaches it
        ('in the branch where CUDA_MAJOR = 13', 'in function setup') is said too."""
        where = cmd.where if cmd is not None else ""
        if cmd is not None and cmd.loop and "loop" not in message:
            where = f"{where}, in a loop" if where else "in a loop"
        self.findings.append(Finding(rule=rule_id, severity=severity, message=message + (f" ({where})" if where else ""),
                                     file=self.file, line=ins.line_at(offset), key=ins.keyword,
                                     source=source or PATTERNS[rule_id], fix=fix))


DOCKERFILE_RULES: list[Callable[[Context], None]] = []


def dockerfile_rule(fn):
    DOCKERFILE_RULES.append(fn)
    return fn


def _exact(req: Requirement) -> bool:
    """A single version: == or === without a wildcard (==3.20.* is a range)."""
    return any(s.operator in ("==", "===") and "*" not in s.version for s in req.specifier)


# git clone's options that take a value as the next word (git-clone(1)).
CLONE_OPTIONS_WITH_VALUE = {"--depth", "-b", "--branch", "-o", "--origin", "-c", "--config", "-u", "--upload-pack",
                            "--reference", "--reference-if-able", "--separate-git-dir", "--shallow-since",
                            "--shallow-exclude", "-j", "--jobs", "--template", "--filter", "--server-option"}


def _pinned_later(ctx: Context, ins: Instruction, cmd: Command, w: tuple, index: dict) -> bool:
    """Whether a later RUN of the stage checks out a full commit in the folder this `git clone` made (`RUN git
    clone URL` then `RUN cd repo && git checkout <40-hex>`, or `git fetch origin $COMMIT && git checkout
    FETCH_HEAD` with the commit from a build argument; `pushd repo` enters it as cd does), and the clone's own
    RUN does nothing with it but cd and git first: the clone is pinned before it is used."""
    operands, skip = [], False
    for x in w[2:]:
        if skip:
            skip = False
        elif x in CLONE_OPTIONS_WITH_VALUE:
            skip = True                                 # --depth 1, -b main: the value is no operand
        elif not x.startswith("-"):
            operands.append(x)
    if not operands:
        return False
    folder = operands[1] if len(operands) > 1 else operands[0]
    folder = folder.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") if len(operands) == 1 else \
        folder.rstrip("/").rsplit("/", 1)[-1]
    if not index:                                       # once per Dockerfile: linear in the commands
        index["pins"], index["last_use"], index["pos"] = {}, {}, {}
        for k, (i, c) in enumerate(ctx.commands):
            index["pos"][id(c)] = k
            cw = command_words(c.text)
            if not (_harmless(c.text) or cw[:1] in (("cd",), ("git",))):
                index["last_use"][id(i)] = k
            ref = checkout_ref(cw) if cw[:1] == ("git",) else None
            target = cw[2] if cw[1:2] == ("-C",) and len(cw) > 2 else c.cwd
            # A full commit pins the clone; so does a ref only a build argument gives (no default: not judged,
            # as in the clone's own RUN), directly or as what FETCH_HEAD fetched. A branch does not: the clone
            # and the branch are both floating.
            if ref == "FETCH_HEAD":
                ref = _fetched_ref(ctx.commands, k, i)
            ref = expand(ref, c.values) if ref else None
            if ref and target and (HEX40.match(ref) or "$" in ref):
                index["pins"].setdefault((i.stage, target.rstrip("/").rsplit("/", 1)[-1]), []).append(i.line)
    if index["last_use"].get(id(ins), -1) > index["pos"][id(cmd)]:
        return False            # used (built, installed) in its own RUN before the later checkout
    return any(line > ins.line for line in index["pins"].get((ins.stage, folder), ()))


def _runs_with(c: Command, clone: Command) -> bool:
    """Whether command c runs whenever clone does: its branch conditions are the clone's (or a prefix of
    them), or every extra condition is known to hold."""
    extra = c.path[len(clone.path):] if c.path[:len(clone.path)] == clone.path else c.path
    return all(cond.holds(c.values) is True for cond in extra)


def _fetched_ref(items: list, n: int, ins: Instruction) -> str | None:
    """What `git checkout FETCH_HEAD` (at items[n]) checks out: the ref of the last `git fetch` before it in the
    RUN, expanded where the fetch runs ('$...' when only a build argument knows it)."""
    for i2, c in reversed(items[:n]):
        if i2 is not ins:
            break
        w = command_words(c.text)
        if w[:1] == ("git",) and "fetch" in w:
            operands = [x for x in w[w.index("fetch") + 1:] if not x.startswith("-")]
            return expand(operands[-1], c.values) if len(operands) >= 2 else None
    return None


def _verified_head(items: list, ins: Instruction) -> bool:
    """A RUN that fails unless HEAD is the commit it names (`test "$(git rev-parse HEAD)" = "$REF"`): a ref
    that is not a full commit fails the build, so what it checked out is pinned and verified."""
    return any(i2 is ins and re.search(r"(?:test|\[\[?)\s+\"?\$\(git(?: -C \S+)? rev-parse (?:--verify )?HEAD\)\"?\s*==?\s",
                                      c.text) for i2, c in items)


@dockerfile_rule
def floating_refs(ctx: Context) -> None:
    """IB101 floating refs (clones of a branch, @main, release branches, a fallback clone of the default
    branch); IB102 short hashes. A ref held in a variable is read from its value where the command runs; one
    only a build argument gives (no default) is not judged. A checkout in a branch that may not run does
    not pin a clone that always runs."""
    items = ctx.commands
    index: dict = {}
    checkouts = None
    for n, (ins, c) in enumerate(items):
        w = command_words(c.text)
        pinned = ctx.pinned[id(ins)]
        refs = []
        if w[:2] == ("git", "clone"):
            prev = items[n - 1] if n else None
            fallback = prev is not None and prev[0] is ins and prev[1].sep == "||" and \
                command_words(prev[1].text)[:2] == ("git", "clone")
            if fallback and not pinned:
                ctx.add("IB101", "error", ins, c.offset, "fallback clone of the default branch after `||`: when the "
                        "first clone fails, the image silently builds from whatever the default branch holds",
                        "drop the fallback; pin the commit (git checkout <40-hex>) after one clone", cmd=c)
                continue
            if checkouts is None:                       # once: each RUN's checkouts by position, linear
                checkouts = {}
                for k, (i2, x) in enumerate(items):
                    xw = command_words(x.text)
                    if xw[:1] == ("git",) and checkout_ref(xw):
                        checkouts.setdefault(id(i2), []).append(k)
            positions = checkouts.get(id(ins), [])
            later = [items[k][1] for k in positions[bisect.bisect_right(positions, n):]]
            always = [x for x in later if _runs_with(x, c)]
            if not always and not _pinned_later(ctx, ins, c, w, index) and (later or not pinned):
                branch = next((w[i + 1] for i, x in enumerate(w[:-1]) if x in ("-b", "--branch")), None)
                where = (f": the checkout is only {later[0].where}, so otherwise the default branch is built"
                         if later else "")
                ctx.add("IB101", "error", ins, c.offset, f"git clone{f' of branch/tag {branch}' if branch else ''} "
                        "without checking out a full commit" + (where or ": the image changes whenever the branch "
                                                                "moves"),
                        f"git checkout <40-hex commit of {_clone_url(w)}> after the clone, on every path (imgbuild: a "
                        "git parameter pins the commit)", cmd=c)
                continue
        if w[:1] == ("git",):
            ref = checkout_ref(w)
            if ref == "FETCH_HEAD":
                fetched = _fetched_ref(items, n, ins)
                ref = None if fetched is None or _verified_head(items, ins) else fetched
            if ref:
                refs.append((ref, c.offset))
        for a in w if w[:1] not in (("echo",), ("printf",)) and (w[0].rsplit("/", 1)[-1] if w else "") not in FETCHERS else ():
            value = expand(a, c.values)
            m = re.fullmatch(r"https?://\S+\.git#([^\s#/]+)", value)
            if m:                                       # REPO.git#REF given to a clone wrapper (git-clone.sh)
                refs.append((m.group(1), c.offset + max(c.text.find(a), 0)))
                continue
            ref = git_url_ref(value)                    # ARG apex_url=git+https://...@25.04
            if ref == "HEAD" and "$" in value:
                continue                                # the whole URL from a build argument: its ref is not known
            if ref:
                refs.append((ref, c.offset + max(c.text.find(a), 0)))
        for ref, offset in refs:
            ref = expand(ref, c.values)
            if HEX40.match(ref) or "$" in ref:
                continue
            if HEX_SHORT.match(ref):
                ctx.add("IB102", "error", ins, offset, f"short commit hash {ref!r}: it can become ambiguous, and a "
                        "tool that verifies pins cannot compare it", "use the full 40-hex commit", cmd=c)
            else:
                ctx.add("IB101", "error", ins, offset, f"floating git ref {ref!r}: the image changes without any file "
                        "changing", "pin the full 40-hex commit (git rev-parse 'TAG^{commit}')", cmd=c)


@dockerfile_rule
def unpinned_installs(ctx: Context) -> None:
    """IB103: pip and conda installs of a package without an exact version (paths, wheels, URLs aside:
    a git URL's ref is IB101's), and Python interpreters uv fetches by minor version."""
    for ins, c in ctx.commands:
        text, offset = c.text, c.offset
        args = pip_install_args(text)
        conda = conda_install(text) if args is None else None
        w = command_words(text)
        if w[:3] == ("uv", "python", "install"):
            for v in w[3:]:
                value = expand(v, c.values)
                if re.fullmatch(r"(?:cpython-)?3\.\d+", value):
                    ctx.add("IB103", "error", ins, offset + max(text.find(v), 0), f"uv installs Python {value} without "
                            "an exact version: the image gets whichever patch release is newest",
                            f"pin it: uv python install {value}.<patch>", cmd=c)
        if w[:2] == ("uv", "venv"):
            _uv_venv_python(ctx, ins, c, w)
        if conda is not None:
            tool, specs = conda
            for spec in specs:
                value = expand(spec, c.values)
                m = re.fullmatch(r"([A-Za-z0-9_.\-]+(?:::)?[A-Za-z0-9_.\-]*)(==?)?([^\s=<>!~*]*)", value)
                exact = m and m.group(2) and m.group(3) and (m.group(2) == "==" or m.group(3).count(".") >= 2)
                if "$" in value or exact:
                    continue
                ctx.add("IB103", "error", ins, offset + max(text.find(spec), 0), f"{tool} installs {value!r} without "
                        "an exact version: the image changes whenever a new build appears",
                        f"pin it: {value.split('=')[0]}==<version>", cmd=c)
        tool = "pip"
        if args is None and w[:2] == ("pipx", "install"):
            tool, args = "pipx", tuple(x for x in w[2:] if x not in ("--include-deps", "--force", "-f"))
        for a in pip_requirements(args or ()):
            # certifi${CERTIFI_VERSION}, "${INSTALL_WHAT}": the values where it runs; an ARG declared only before
            # FROM and not in the stage is empty there (IB106 says so).
            value = expand(expand(a, c.values), {k: "" for k in ctx.global_names if k not in c.values}).strip()
            if not value or "$" in value or value.startswith((".", "/", "git+", "http:", "https:", "file:")) or \
                    value.endswith((".whl", ".tar.gz")):
                continue
            try:
                req = Requirement(value)
            except InvalidRequirement:
                continue
            if not req.url and not _exact(req):
                shown = value if value == a else f"{a} ({value})"
                ctx.add("IB103", "error", ins, offset + max(text.find(a), 0), f"{tool} installs {shown!r} without an "
                        "exact version: the image changes whenever a new release appears", f"pin it: {req.name}==<version>",
                        cmd=c)


def _uv_venv_python(ctx: Context, ins: Instruction, c: Command, w: tuple) -> None:
    """`uv venv --python 3.10`: uv takes an interpreter of that minor from the system, and downloads the newest
    patch release of it where the system has none (uv's python-downloads default is automatic). Said where
    the base's Python is known to be another minor (an error), or not known (a warning)."""
    asked = next((w[i + 1] for i, x in enumerate(w[:-1]) if x in ("--python", "-p")), None)
    asked = asked or next((x.split("=", 1)[1] for x in w if x.startswith("--python=")), None)
    value = expand(asked, c.values) if asked else None
    if not value or not re.fullmatch(r"(?:cpython-|python)?3\.\d+", value) or "--no-python-downloads" in w \
            or c.values.get("UV_PYTHON_DOWNLOADS") in ("never", "manual"):
        return
    minor = value.rsplit("-", 1)[-1].removeprefix("python")
    if any(i2.stage == ins.stage and i2.line <= ins.line and command_words(x.text)[:3] == ("uv", "python", "install")
           and any(expand(v, x.values).startswith(minor) for v in command_words(x.text)[3:])
           for i2, x in ctx.commands if x is not c):
        return                  # installed by `uv python install` before it (that line is judged there)
    python = ctx.base(ins).python
    if python and ".".join(python.split(".")[:2]) == minor:
        return
    known = f"the base has Python {python}" if python else "the base's Python is not known"
    ctx.add("IB103", "error" if python else "warning", ins, c.offset + max(c.text.find(asked), 0),
            f"uv venv --python {value}: {known}, so uv downloads the newest {minor}.x, which changes with every "
            "patch release", f"pin the interpreter: --python {minor}.<patch>, or a path to the base's python",
            cmd=c)


def _compiles_cuda(args: str) -> str | None:
    """What in a RUN compiles CUDA with torch's extension builder, which needs TORCH_CUDA_ARCH_LIST: DeepSpeed's
    pre-built ops and Apex, each otherwise for a default list of its own (IB104 says which). Transformer Engine
    and flash-attn are not here: both carry their own list (NVTE_CUDA_ARCHS, FLASH_ATTN_CUDA_ARCHS) with a
    default for the CUDA in use."""
    ds = [op for op in re.findall(r"DS_BUILD_([A-Z_]+)=1", args) if op not in CPU_DS_OPS]
    if ds:
        return f"DeepSpeed ops ({', '.join(o.lower() for o in ds)})"
    if re.search(r"APEX_CUDA_EXT=1|--cuda_ext", args):
        return "Apex CUDA extensions"
    return None


@dockerfile_rule
def arch_lists(ctx: Context) -> None:
    """IB104 compiled CUDA without an arch list; IB105 arch lists that disagree within a stage."""
    for ins in ctx.instructions:
        if ins.keyword != "RUN":
            continue
        what = _compiles_cuda(ctx.code[id(ins)])
        scope = {**ctx.scope(ins), **{k: (v, ins, o) for k, (v, o) in assignments(ctx.code[id(ins)]).items()}}
        if what:
            needed = ("TORCH_CUDA_ARCH_LIST",)
            given = scope.get(needed[0])
            if given is not None and given[1].keyword == "FROM" and needed[0] in global_args(ctx.instructions):
                # The base sets its own list (NGC PyTorch: every arch of its release), and the global ARG of
                # that name does not reach the stage: the build compiles for the base's list, not the one written.
                ctx.add("IB106", "error", ins, 0, f"{needed[0]} is declared before FROM and not again in this stage: "
                        f"{what} compile for the list the base image sets, not for "
                        f"{global_args(ctx.instructions)[needed[0]] or 'the value given'}",
                        f"add `ARG {needed[0]}` after the FROM of this stage")
            elif not any(v in scope and scope[v][0] != "" for v in needed) and what.startswith("DeepSpeed"):
                # DeepSpeed's op builder pre-compiles (not JIT) for its own default list when no arch list is
                # given (op_builder/builder.py, get_default_compute_capabilities), never for the build host.
                ctx.add("IB104", "error", ins, 0, f"{what} compiled without {needed[0]}: DeepSpeed pre-builds them "
                        "for its own default list of archs (older releases: 6.0 6.1 7.0 8.0 8.6, no 9.0), not for the "
                        "GPUs the image is for", f"set {needed[0]} for the target GPUs in this stage")
            elif not any(v in scope and scope[v][0] != "" for v in needed):
                # Apex's setup.py sets its own list where torch sees no GPU (a docker build): NVIDIA/apex#486.
                ctx.add("IB104", "error", ins, 0, f"{what} compiled without {needed[0]}: on a builder without a GPU "
                        "Apex cross-compiles for its own default list (6.0 6.1 6.2 7.0 7.5, and 8.0 8.6 9.0 as the "
                        "CUDA allows), on one with a GPU for that GPU: not for the GPUs the image is for",
                        f"set {needed[0]} for the target GPUs in this stage (an ARG before FROM does not reach it)")

    by_stage: dict[int, dict] = {}
    inherited: dict[int, set] = {}          # spellings a stage has from the stage it is built FROM
    named: dict[str, int] = {}
    args = global_args(ctx.instructions)
    for ins in ctx.instructions:
        if ins.keyword == "FROM":
            w = [x for x in ins.args.split() if not x.startswith("--")]
            parent = named.get(expand(w[0], args).lower()) if w else None
            if parent is not None:          # BuildKit: a stage FROM another has its ARG and ENV
                by_stage[ins.stage] = {k: v for k, v in by_stage.get(parent, {}).items()
                                       if v[1].keyword in ("ARG", "ENV")}
                inherited[ins.stage] = set(by_stage[ins.stage])
            if len(w) >= 3 and w[1].upper() == "AS":
                named[w[2].lower()] = ins.stage
        spellings = by_stage.setdefault(ins.stage, {})
        if ins.keyword in ("ARG", "ENV", "RUN"):
            for name, (value, off) in assignments(ctx.code.get(id(ins), ins.args)).items():
                if name in MIX_VARS and arch_set(value) is not None:
                    spellings[name] = (arch_set(value), ins, off)
        for m in GENCODE.finditer(ctx.code.get(id(ins), ins.args)):
            old = spellings.get("-gencode", (frozenset(), ins, m.start()))
            spellings["-gencode"] = (old[0] | {m.group(1)}, old[1], old[2])
    for stage, spellings in by_stage.items():
        sets = {k: {a.rstrip("a") for a in v[0]} for k, v in spellings.items()}
        own = [v for k, v in spellings.items() if k not in inherited.get(stage, ()) or v[1].stage == stage]
        if len({frozenset(s) for s in sets.values()}) > 1 and own:
            _, ins, off = own[-1]
            shown = "; ".join(f"{k}={','.join(sorted(s))}" for k, s in sorted(sets.items()))
            ctx.add("IB105", "error", ins, off, f"arch lists disagree in one stage ({shown}): the tools build for "
                    "different GPUs", "derive every spelling from one list (imgbuild derives them from gpus)")


@dockerfile_rule
def arg_scope(ctx: Context) -> None:
    """IB106: an ARG declared before FROM used inside a stage that does not declare it again, nor inherit it
    from the stage it is built FROM, nor get it from its base image, nor set it in the shell before."""
    globals_ = {i.args.split("=")[0].split()[0] for i in ctx.instructions if i.stage == -1 and i.keyword == "ARG"
                and i.args.split()}
    # An ARG of one stage is not in another (unless that one is built FROM it): declared there, used here.
    staged = {}
    for i in ctx.instructions:
        if i.stage >= 0 and i.keyword == "ARG" and i.args.split():
            staged.setdefault(i.args.split("=")[0].split()[0], i)
    if not globals_ and not staged:
        return
    var = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
    for ins, c in ctx.commands:
        for m in var.finditer(c.text):
            name = m.group(1)
            if name in PREDEFINED_ARGS or name in c.values:
                continue
            if name in globals_:
                ctx.add("IB106", "error", ins, c.offset + m.start(), f"${name} is declared before FROM and not again "
                        "in this stage: it is empty here", f"add `ARG {name}` after the FROM of this stage", cmd=c)
            elif name in staged and staged[name].stage != ins.stage:
                ctx.add("IB106", "error", ins, c.offset + m.start(), f"${name} is an ARG of another stage (line "
                        f"{staged[name].line}), neither declared in this one nor in the stage it is built FROM: it is "
                        "empty here", f"add `ARG {name}` in this stage", cmd=c)
    for ins in ctx.instructions:
        if ins.stage < 0 or ins.keyword in ("FROM", "ARG", "RUN"):
            continue
        for m in var.finditer(ins.args):
            name = m.group(1)
            if name in globals_ and name not in PREDEFINED_ARGS and name not in ctx.scope(ins) \
                    and name not in assignments(ins.args[:m.start()]):
                ctx.add("IB106", "error", ins, m.start(), f"${name} is declared before FROM and not again in this "
                        "stage: it is empty here", f"add `ARG {name}` after the FROM of this stage")


def _harmless(text: str) -> bool:
    w = command_words(text)
    if not w:
        return True
    name = w[0].rsplit("/", 1)[-1]
    sub = next((x for x in w[1:] if not x.startswith("-")), "")
    return name in HARMLESS or (name, sub) in HARMLESS_SUB or (name == "uv" and w[1:3] == ("pip", "uninstall"))


@dockerfile_rule
def ignored_exit(ctx: Context) -> None:
    """IB107: `|| true` and friends after a step that matters, `; exit 0`, `set +e`, and installs whose
    failure `;` or a newline ignores in a shell without -e (a loop keeps only its last iteration's status).
    Not inside $( ): `V=$(git describe || echo unknown)` is a value with a fallback, not a hidden failure;
    nor in an if/while condition, whose failure chooses a branch."""
    items = ctx.commands
    for n, (ins, c) in enumerate(items):
        nxt = items[n + 1] if n + 1 < len(items) and items[n + 1][0] is ins else None
        fallback = (c.fallback or "").strip().strip("{}() \n;").strip()
        if c.sep != "||" or nxt is None or c.subst or c.test or \
                not re.fullmatch(r"true|:|exit 0|echo\b.*", nxt[1].text.strip()) or \
                re.search(r"\b(?:exit|return)\s+[1-9]|\bfalse\b|\bkill\b", fallback):
            continue
        if c.fallback and any(not re.fullmatch(r"true|:|exit 0|(?:echo|printf)\b.*", x.text.strip())
                              for x in read(c.fallback)[0]):
            continue        # `|| (echo falling back && pip install ...)`: another way to the same result, not a shrug
        chain = [c.text]
        k = n - 1
        while k >= 0 and items[k][0] is ins and items[k][1].sep == "&&" and not items[k][1].subst:
            chain.append(items[k][1].text)
            k -= 1
        if all(_harmless(t) for t in chain):
            continue
        ctx.add("IB107", "error", ins, nxt[1].offset, f"'|| {nxt[1].text.strip()}' hides a failure: the image is "
                "tagged although a step failed", "remove it; let the step fail the build", cmd=c)
    for n, (ins, c) in enumerate(items):
        w = command_words(c.text)
        after = n > 0 and items[n - 1][0] is ins and items[n - 1][1].sep in (";", "\n") and \
            not _harmless(items[n - 1][1].text)       # `echo skipped; exit 0` ends the step on purpose
        if (after and w == ("exit", "0")) or w[:2] == ("set", "+e"):
            said = "; exit 0" if w == ("exit", "0") else "set +e"
            ctx.add("IB107", "error", ins, c.offset, f"{said!r} hides a failure: the image is "
                    "tagged although a step failed", "remove it; let the step fail the build", cmd=c)
    for ins, c in items:
        if c.subst or c.test or ctx.errexit(ins) or not INSTALLS.match(" ".join(command_words(c.text))):
            continue
        if c.loop and c.last and c.sep in (";", "\n", ""):
            ctx.add("IB107", "warning", ins, c.offset, f"{command_words(c.text)[0]} ... in a loop: a failure of any "
                    "iteration but the last is ignored, only the last one's status counts", "add `|| exit 1` in the "
                    "loop, or run the RUN under set -e", cmd=c)
        elif c.sep in (";", "\n") and not c.last:
            ctx.add("IB107", "warning", ins, c.offset, f"the exit code of {command_words(c.text)[0]} ... is ignored: "
                    f"'{c.sep.strip() or 'newline'}' goes on after a failure", "join the commands with &&", cmd=c)


def _flavour(name: str) -> str | None:
    m = CUDA_FLAVOUR.search(name)
    return next((g for g in m.groups() if g), None) if m else None


def _branch_cuda(c: Command) -> Version | None:
    """The CUDA a branch is for: `if [ "$CUDA_MAJOR" = 13 ]`, `case $CUDA_VERSION in 12.8*)`, `[[ $CU == cu128 ]]`
    (a variable whose name says CUDA, compared with a version): 13, 12.8, 12.8."""
    for cond in c.path:
        if cond.negated or cond.op == "!=" or not cond.var or "CUDA" not in cond.var.upper() or not cond.value:
            continue
        m = re.fullmatch(r"(?:cu(?:da)?)?(\d{2})\.?(\d)?[\d.]*\*?|(?:cu(?:da)?)?(\d{2})(\d)\*?", cond.value.lower())
        if m:
            major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            return Version(f"{major}.{minor}" if minor else major)
    return None


CUDA_WORDS = re.compile(r"nvcc|cuda|\bcu\d{2,3}\b", re.I)


def _unread_cuda_branch(c: Command):
    """The first condition on the command's path that tests the CUDA by other means than a variable lint can
    read (`nvcc --version | grep -q "release 13"`, `case "$(nvcc --version)" in *13.*)`, `[ -d /usr/local/cuda-13 ]`):
    the branch runs only where it holds, and lint cannot tell where that is."""
    return next((cond for cond in c.path if not cond.var and CUDA_WORDS.search(cond.text)), None)


def _index_values(args: tuple) -> set[str]:
    """The values of pip's index and find-links options among its arguments."""
    opts = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--index", "--default-index"}
    out = {args[i + 1] for i, a in enumerate(args[:-1]) if a in opts}
    return out | {a.split("=", 1)[1] for a in args if "=" in a and a.split("=", 1)[0] in opts}


@dockerfile_rule
def cuda_flavours(ctx: Context) -> None:
    """IB108: *-cuXX packages, +cuXXX wheels and /whl/cuXXX indexes for another CUDA major; torch wheels
    and indexes for another CUDA minor (extensions built with the base's nvcc then differ from torch's).
    In a branch for one CUDA (`if [ "$CUDA_MAJOR" = 13 ]`), a package is judged against that CUDA: the
    branch runs only where it holds."""
    for ins, c in ctx.commands:
        args = pip_install_args(c.text) or ()
        if not args:
            continue
        branch = _branch_cuda(c)
        cuda = branch or ctx.base(ins).cuda
        indexes = _index_values(args)
        for a in args:
            value = expand(a, c.values)
            at = c.offset + max(c.text.find(a), 0)
            jax = jax_cuda_of(value)
            for major, local, extra in jax:
                _jax_flavour(ctx, ins, at, value, major, local, extra, cuda, c)
            if jax:
                continue
            flavour = _flavour(value)
            if not flavour:
                continue
            if CUDA_FLAVOUR.search(value).group(4) and a not in indexes and "download.pytorch.org" not in value \
                    and _req_name(value.rsplit("/", 1)[-1].split("-")[0]) not in TORCH_FAMILY:
                continue        # /whl/cu121 in a path that is no index (a repository named whl): not a flavour
            against = f"the branch is for CUDA {branch}" if branch else f"the base has CUDA {cuda}"
            if cuda is None:
                shown = f"{flavour[:2]}.{flavour[2]}" if len(flavour) == 3 else flavour
                ctx.add("IB108", "unknown", ins, at, f"{value!r} is built for CUDA {shown}; the base's CUDA is not "
                        "known, so the match cannot be checked", "lint against a known base (FROM nvcr.io/nvidia/"
                        "pytorch:YY.MM-py3 or nvidia/cuda:X.Y.Z-...)", cmd=c)
            elif (int(flavour[:2]) != cuda.major or (len(flavour) == 3 and len(cuda.release) > 1 and int(flavour[2]) !=
                  cuda.minor)) and not branch and (unread := _unread_cuda_branch(c)) is not None:
                # A guard that names the flavour's CUDA (the branch for 13 installs the cu13 build), or an else
                # of one that names the base's (it runs where the base's CUDA was not found): what it should be.
                named = str(cuda.major) if unread.negated else flavour[:2]
                if re.search(rf"(?<![\d.]){named}(?!\d)", unread.text):
                    continue
                shown = f"{flavour[:2]}.{flavour[2]}" if len(flavour) == 3 else flavour
                ctx.add("IB108", "unknown", ins, at, f"{value!r} is built for CUDA {shown} and the base has CUDA "
                        f"{cuda}, but it is installed only where `{unread.text[:80]}` "
                        f"{'does not hold' if unread.negated else 'holds'}, a test of the CUDA lint cannot evaluate",
                        "branch on a variable lint can read (ARG CUDA_MAJOR=...; if [ \"$CUDA_MAJOR\" = 13 ]), or "
                        "check the branch taken on this base", cmd=c)
            elif int(flavour[:2]) != cuda.major:
                ctx.add("IB108", "error", ins, at, f"{value!r} is built for CUDA {flavour[:2]}, {against}",
                        f"use the cu{cuda.major} flavour", cmd=c)
            elif len(flavour) == 3 and len(cuda.release) > 1 and int(flavour[2]) != cuda.minor and (
                    "/whl/" in value or _req_name(value) in TORCH_FAMILY):
                ctx.add("IB108", "warning", ins, at, f"{value!r} is built for CUDA {flavour[:2]}.{flavour[2]}, {against}"
                        ": extensions built with the base's nvcc differ from torch's CUDA",
                        f"use the cu{cuda.major}{cuda.minor} wheel, or a base with torch's CUDA", cmd=c)


def _jax_flavour(ctx: Context, ins: Instruction, at: int, value: str, major: int, local: bool, extra: str,
                 cuda: Version | None, c: Command) -> None:
    """JAX's CUDA builds by their extra or package name (jax[cuda12], jax[cuda13-local], jax[cuda] = CUDA 12,
    jax-cuda12-plugin, jaxlib==X+cuda12.cudnn89): a build that brings its CUDA as pip wheels needs none from
    the base; a -local one runs on the base's, which must be of its major."""
    if cuda is None:
        if local:
            ctx.add("IB108", "unknown", ins, at, f"{value!r} uses the base's CUDA {major} (a -local install brings "
                    "none); the base's CUDA is not known", "lint against a known base (FROM nvidia/cuda:X.Y.Z-... or "
                    "nvcr.io/nvidia/jax:YY.MM-py3), or use jax[cudaNN], which brings CUDA as pip wheels", cmd=c)
        return
    if major != cuda.major:
        # On the base's libraries (-local) the wrong major cannot run; with its own wheels it runs, beside a
        # second CUDA.
        ctx.add("IB108", "error" if local else "warning", ins, at, f"{value!r} is JAX's CUDA {major} build"
                + (" (plain [cuda] is the CUDA 12 plugin)" if extra.lower() == "cuda" else "")
                + ("" if local else f", with its own CUDA {major} wheels") + f"; the base has CUDA {cuda}",
                f"use jax[cuda{cuda.major}{'-local' if local else ''}]" if extra or value.lower().startswith("jax[")
                else f"use the CUDA {cuda.major} packages (jax-cuda{cuda.major}-plugin)", cmd=c)


def _req_name(text: str) -> str | None:
    try:
        return Requirement(text).name.lower()
    except InvalidRequirement:
        return None


def _torch_pin(name: str, exact: str | None, releases: dict[str, str], base: str | None) -> str | None:
    """Why installing NAME (==exact, or unpinned: its newest release) replaces the base's torch, from the
    Requires-Dist on torch of its releases; None where it keeps it or nothing is known. A release not read
    counts as pinning exactly when the releases read on either side of it both do (vllm 0.15.1 between 0.15.0
    and 0.18.0); the base's torch is kept only where it satisfies the requirement (an NGC pre-release
    satisfies no ==)."""
    from packaging.specifiers import SpecifierSet
    ordered = sorted(releases, key=Version)
    version = exact or ordered[-1]
    wants = releases.get(version)
    if wants is None:
        below = [v for v in ordered if Version(v) < Version(version)]
        above = [v for v in ordered if Version(v) > Version(version)]
        if not below or not above or not releases[below[-1]].startswith("==") or \
                not releases[above[0]].startswith("=="):
            return None
        if base and Version(base).is_prerelease is False and Version(base).local is None:
            return None         # a released torch may be the one it pins: not known for an unread release
        return (f"{name}=={version} pins one torch exactly, as its releases read on either side do ({below[-1]} "
                f"requires torch{releases[below[-1]]}, {above[0]} torch{releases[above[0]]})")
    if base and SpecifierSet(wants).contains(base, prereleases=True):
        return None                                     # the release made for (or accepting) the base's torch
    if not wants.startswith("==") and not base:
        return None                                     # a range, and the base's torch not known
    return (f"{name}=={version} requires torch{wants}" if exact else
            f"{name} is unpinned: its newest release read, {version}, requires torch{wants}")


@dockerfile_rule
def torch_replaced(ctx: Context) -> None:
    """IB109: installing torch, or a package whose releases pin their own torch exactly (xformers, vllm,
    torchvision: read from their published metadata, catalog torch_pins), over a base that ships torch, and
    disabling the constraint file that keeps it. Not when the Dockerfile removed the base's torch first, nor
    for the very torch the base ships (torch==that version, or a release of the package that pins it)."""
    replacers = catalog.torch_replacers()
    pins = catalog.torch_pins()
    removed: set[int] = set()       # stages whose base torch a RUN uninstalled
    for ins, c in ctx.commands:
        base = ctx.base(ins)
        w = command_words(c.text)
        if "uninstall" in w and any(x.lower() == "torch" for x in w):
            removed.add(ins.stage)
        hit, why, source = [], [], replacers.source
        reqs = []
        for a in pip_requirements(pip_install_args(c.text) or ()):
            value = expand(a, c.values)
            m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:[=<>!~]=?|$)", value)
            if "$" in value and m:
                reqs.append((m.group(1).lower(), "$"))  # torch==${TORCH_VERSION}: the name, a version not known
                continue
            try:
                req = Requirement(value)
            except InvalidRequirement:
                continue
            reqs.append((req.name.lower(), next((s.version for s in req.specifier if s.operator in ("==", "===")),
                                                None)))
        torch_too = any(name in replacers.value for name, _ in reqs)
        for name, exact in reqs:
            if name in replacers.value:
                if not (base.torch_version and name == "torch" and exact == base.torch_version):
                    hit.append(name)
                continue
            if name not in pins or torch_too or exact == "$":
                continue            # beside torch, pip takes the release that fits that torch: torch is the news
            releases, source = pins[name]
            said = _torch_pin(name, exact, releases, base.torch_version)
            if said:
                hit.append(name)
                why.append(said)
        if hit and base.torch and ins.stage not in removed and "--no-deps" in (pip_install_args(c.text) or ()):
            # --no-deps keeps the base's torch; what is wrong then is the package's compiled code, built for the
            # torch it pins (xformers: "xFormers can't load C++/CUDA extensions", and it runs without them).
            others = [name for name in hit if name != "torch"]
            if "torch" in hit:
                hit = ["torch"]
            elif others:
                ctx.add("IB109", "warning", ins, c.offset, f"pip installs {', '.join(others)} with --no-deps beside "
                        "the base's torch" + (f" ({'; '.join(why)})" if why else "") + ": torch stays, but compiled "
                        "code built for another torch may not load (an ABI mismatch), or runs without its kernels",
                        "install the release made for the base's torch, or build it against it "
                        "(pip install --no-build-isolation --no-binary NAME)", source=source, cmd=c)
                hit = []
        if hit and base.torch and ins.stage not in removed:
            ctx.add("IB109", "error", ins, c.offset, f"pip installs {', '.join(hit)} over the base's torch"
                    + (f" ({'; '.join(why)})" if why else "") + ": everything compiled against it (TE, Apex, "
                    "DeepSpeed ops) silently breaks", "install without torch; use --no-build-isolation and keep the "
                    "base's torch" + ("; or pin the release made for the base's torch" if why else ""),
                    source=source, cmd=c)
        if re.search(r"(sed|rm|truncate)\b.*\S*/etc/pip/constraint\.txt", c.text) or \
                any(t.endswith("/etc/pip/constraint.txt") for t in c.writes):
            ctx.add("IB109", "warning", ins, c.offset, "edits NGC's /etc/pip/constraint.txt, which keeps its torch and "
                    "the packages built with it", "leave the constraint file; pin what you add",
                    source=replacers.source, cmd=c)
    for ins in ctx.instructions:
        value = assignments(ins.args).get("PIP_CONSTRAINT") if ins.keyword in ("ENV", "ARG") else None
        if value is not None and value[0] == "":
            ctx.add("IB109", "warning", ins, value[1], "PIP_CONSTRAINT= turns off the constraint that keeps the "
                    "base's torch", "keep the constraint file", source=replacers.source)
    for ins, c in ctx.commands:
        # In a RUN: `export PIP_CONSTRAINT=` turns it off for what follows; `PIP_CONSTRAINT= pip install ...` for
        # that one install, which cannot touch torch when it takes no dependencies and is not torch itself.
        value = assignments(c.text).get("PIP_CONSTRAINT")
        if value is None or value[0] != "":
            continue
        args = pip_install_args(c.text)
        if args is not None and "--no-deps" in args and not any(
                (_req_name(expand(a, c.values)) or "") in replacers.value for a in pip_requirements(args)):
            continue
        ctx.add("IB109", "warning", ins, c.offset + value[1], "PIP_CONSTRAINT= turns off the constraint that keeps "
                "the base's torch", "keep the constraint file", source=replacers.source, cmd=c)


@dockerfile_rule
def credentials(ctx: Context) -> None:
    """IB110: passwords, tokens and keys written into a layer or its history."""
    for ins in ctx.instructions:
        args = re.sub(r"--mount=\S+", "", ctx.code.get(id(ins), ins.args))
        for m in USERINFO.finditer(args):
            if not m.group(2).startswith("$"):
                ctx.add("IB110", "error", ins, m.start(), "a URL with a password or token: it stays in the image "
                        "history", "pass it as a BuildKit secret (RUN --mount=type=secret)")
        if PRIVATE_KEY.search(args):
            ctx.add("IB110", "error", ins, PRIVATE_KEY.search(args).start(), "a private key in the Dockerfile",
                    "use RUN --mount=type=ssh or a BuildKit secret")
        if ins.keyword in ("ENV", "ARG", "RUN"):
            for name, (value, off) in assignments(args).items():
                if holds_secret(name, value):
                    ctx.add("IB110", "error", ins, off, f"{name} is given a literal value: it stays in the image",
                            "pass it as a BuildKit secret")
            if ins.keyword == "ARG" and "=" not in args and SECRET_NAME.search(args.split()[0] if args.split() else "") \
                    and not SECRET_SWITCH.search(args.split()[0]):
                ctx.add("IB110", "warning", ins, 0, f"build argument {args.split()[0]} looks like a secret: build "
                        "arguments are recorded in the image history", "use a BuildKit secret")
        if ins.keyword == "RUN" and re.search(r"\bchpasswd\b|--password[= ]\s*[^$\s-]", args):
            ctx.add("IB110", "error", ins, 0, "a password set or passed in a RUN step: it stays in the layer",
                    "use a BuildKit secret, or no password in the image")
        if ins.keyword in ("COPY", "ADD"):
            found = [w for w in words(args) if CRED_FILES.search(w.rstrip("/"))]
            if found:
                ctx.add("IB110", "error", ins, 0, f"copies {found[0]} into the image", "mount it as a BuildKit secret")


@dockerfile_rule
def ds_arch_variant(ctx: Context) -> None:
    """IB111: DeepSpeed with an arch-specific TORCH_CUDA_ARCH_LIST entry (9.0a) in the same stage."""
    fact = catalog.ds_arch_variant()
    for ins in ctx.instructions:
        value = assignments(ins.args).get("TORCH_CUDA_ARCH_LIST") if ins.keyword in ("ARG", "ENV", "RUN") else None
        if not value or not ARCH_VARIANT.search(value[0]):
            continue
        stage = [i for i in ctx.instructions if i.stage == ins.stage and i.keyword == "RUN"]
        ds = [re.search(r"deepspeed(?:==([\w.]+))?", i.args, re.I) for i in stage]
        ds = [m for m in ds if m]
        if ds:
            version = next((m.group(1) for m in ds if m.group(1)), None)
            measured = version == fact["measured"]
            ctx.add("IB111", "error" if measured else "warning", ins, value[1],
                    f"TORCH_CUDA_ARCH_LIST={value[0]!r} with DeepSpeed{f' {version}' if version else ''}: its op "
                    f"builder fails on the arch suffix ({fact['symptom']})"
                    + ("" if measured else f"; measured on {fact['measured']}, not known for this version"),
                    "write the arch without the suffix (9.0 instead of 9.0a)", source=fact["source"])


@dockerfile_rule
def base_by_digest(ctx: Context) -> None:
    """IB112: FROM an image by tag alone, written out or through ARG defaults (`FROM ${BASE}`): the base
    can change under the same Dockerfile."""
    stages = set()
    args = global_args(ctx.instructions)
    for ins in ctx.instructions:
        if ins.keyword != "FROM":
            continue
        w = [x for x in ins.args.split() if not x.startswith("--")]
        image, resolved = from_image(ins, args)
        if len(w) >= 3 and w[1].upper() == "AS":
            stages.add(w[2].lower())
        if "@sha256:" in resolved or "$" in resolved or resolved == "scratch" or resolved.lower() in stages:
            continue
        shown = image if image == resolved else f"{image} ({resolved})"
        ctx.add("IB112", "warning", ins, 0, f"FROM {shown} by tag alone: the base can change under the same "
                "Dockerfile", "pin the digest: FROM image:tag@sha256:... (imgbuild records it in stacks.lock.yaml)")
    for ins in ctx.instructions:
        # COPY --from=IMAGE takes files out of an image that is no stage: the same floating reference.
        m = re.search(r"(?:^|\s)--from=(\S+)", ins.args) if ins.keyword in ("COPY", "ADD") else None
        if not m:
            continue
        image, resolved = m.group(1), expand(m.group(1), args)
        if resolved.lower() in stages or resolved.isdigit() or "@sha256:" in resolved or "$" in resolved or \
                ("/" not in resolved and ":" not in resolved):
            continue
        shown = image if image == resolved else f"{image} ({resolved})"
        ctx.add("IB112", "warning", ins, m.start(1), f"{ins.keyword} --from={shown} by tag alone: the files copied "
                "can change under the same Dockerfile", "pin the digest: --from=image:tag@sha256:...")


FETCHERS = {"curl", "wget"}
INTERPRETERS = re.compile(r"^(?:ba|z|da|a)?sh\Z|^python[\d.]*\Z|^perl\Z")


def fetched_to(w: tuple, writes: tuple) -> tuple[str, str] | None:
    """(url, file) of a curl or wget command that saves what it fetches: -o/--output, -O (the URL's name),
    wget's default (the URL's name), --output-dir/-P, or a > redirection; None for one that writes to its
    standard output only (-O -, curl without -o)."""
    tool = w[0].rsplit("/", 1)[-1] if w else ""
    if tool not in FETCHERS:
        return None
    url = next((x for x in w if re.match(r"https?://", x)), "")
    if not url:
        return None
    name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    out, folder = None, None
    for i, x in enumerate(w[1:], 1):
        nxt = w[i + 1] if i + 1 < len(w) else None
        if (tool == "curl" and x in ("-o", "--output")) or (tool == "wget" and x in ("-O", "--output-document")):
            out = nxt
        elif tool == "curl" and re.fullmatch(r"-[a-zA-Z]*o\S+", x) and not x.startswith("--"):
            out = x[x.index("o") + 1:]
        elif tool == "wget" and x.startswith(("--output-document=", "-O")) and len(x) > 2:
            out = x.split("=", 1)[1] if "=" in x else x[2:]
        elif tool == "curl" and (x in ("-O", "--remote-name") or re.fullmatch(r"-[a-zA-Z]*O[a-zA-Z]*", x)):
            out = out or name
        elif x in ("--output-dir", "-P", "--directory-prefix"):
            folder = nxt
    if tool == "wget" and out is None:
        out = name
    if out in ("-", "/dev/stdout") or out is None:
        out = writes[0] if writes else None
    if not out:
        return None
    return url, (f"{folder.rstrip('/')}/{out}" if folder and not out.startswith("/") else out)


def _runs_file(w: tuple, target: str) -> bool:
    """Whether a command runs the file: as the command (./x, /tmp/x) or given to an interpreter (bash x)."""
    base = target.rsplit("/", 1)[-1]
    if not w:
        return False
    same = lambda x: x == target or x.rsplit("/", 1)[-1] == base and (x.startswith(("./", "/")) or x == base)   # noqa: E731
    if same(w[0]) and (w[0] != base or "/" in target):
        return True
    if INTERPRETERS.match(w[0].rsplit("/", 1)[-1]):
        operand = next((x for x in w[1:] if not x.startswith("-")), None)
        return operand is not None and same(operand)
    return False


@dockerfile_rule
def piped_installer(ctx: Context) -> None:
    """IB113: a script fetched at build time and run unverified as root: `curl ... | sh`, `bash <(curl ...)`,
    and a downloaded file (saved by -o, -O, wget's default name or a redirection) run in its RUN or a later
    one of the stage without a checksum checked first."""
    items = ctx.commands
    runs = checks_before = None
    for n, (ins, c) in enumerate(items):
        w = command_words(c.text)
        if not w or w[0].rsplit("/", 1)[-1] not in FETCHERS:
            continue
        url = next((x for x in w if re.match(r"https?://", x)), "")
        if not url:
            continue
        nxt = items[n + 1] if n + 1 < len(items) and items[n + 1][0] is ins else None
        runner = _expanded(nxt[1]) if nxt and c.sep == "|" else ()   # | python${PYTHON_VERSION} -
        if runner and INTERPRETERS.match(runner[0].rsplit("/", 1)[-1]):
            ctx.add("IB113", "warning", ins, nxt[1].offset, f"runs a script fetched from {url} unverified, as root: "
                    "the image runs whatever the server returns that day", "download a pinned release, check its "
                    "sha256 (sha256sum -c) before running it, or install a pinned package", cmd=c)
            continue
        saved = fetched_to(w, c.writes)
        if saved is None:
            continue
        target = expand(saved[1], c.values)
        if runs is None:
            runs, checks_before, count = {}, [], 0      # once, so that the rule stays linear in the commands
            for k, (_, x) in enumerate(items):
                checks_before.append(count)
                count += bool(CHECKS.search(x.text))
                xw = command_words(x.text)
                operand = next((y for y in xw[1:] if not y.startswith("-")), "") if xw and \
                    INTERPRETERS.match(xw[0].rsplit("/", 1)[-1]) else ""
                for name in {xw[0].rsplit("/", 1)[-1] if xw else "", operand.rsplit("/", 1)[-1]} - {""}:
                    runs.setdefault(name, []).append(k)
        candidates = runs.get(target.rsplit("/", 1)[-1], [])
        for k in candidates[bisect.bisect_right(candidates, n):]:
            ins2, c2 = items[k]
            if ins2.stage != ins.stage or checks_before[k] > checks_before[n]:
                break                                   # another stage, or a checksum checked before it runs
            if _runs_file(command_words(c2.text), target):
                where = "" if ins2 is ins else f" at line {ins.line_at(c.offset)}"
                ctx.add("IB113", "warning", ins2, c2.offset, f"runs {target}, downloaded from {url}{where} without a "
                        "checksum: the image runs whatever the server returns that day", "check its sha256 "
                        "(sha256sum -c) before running it, from a pinned release URL", cmd=c2)
                break
    for ins in ctx.instructions:
        if ins.keyword == "RUN":
            m = re.search(r"\b(?:ba|z|da)?sh\b[^|;&\n]*?(?:<\(|\$\()\s*(?:curl|wget)\b[^)]*?(https?://[^\s)\"']+)",
                          ctx.code[id(ins)])
            if m:
                ctx.add("IB113", "warning", ins, m.start(), f"runs a script fetched from {m.group(1)} unverified, as "
                        "root: the image runs whatever the server returns that day", "download a pinned release, "
                        "check its sha256 (sha256sum -c) before running it")


GLOB = re.compile(r"[*?\[]")
INSTALLERS = {"dpkg", "apt", "apt-get", "rpm", "yum", "dnf", "tar", "unzip", "apt-key"}
CHECKS = re.compile(r"\b(?:sha256sum|sha512sum|sha1sum|md5sum|shasum|b2sum|gpg\s+--verify|gpgv|cosign\s+verify|minisign)\b")
BIN_DIRS = re.compile(r"^/(?:usr/(?:local/)?s?bin|s?bin|opt/[^/]+/bin)/[^/]+\Z")


def _installs(w: tuple, target: str) -> str | None:
    """How a command puts a downloaded file into the image (dpkg, apt, rpm, tar, unzip, apt-key), or None. A
    name the shell globs (cuda-keyring_*.deb) names the file it matches."""
    base = target.rsplit("/", 1)[-1]
    named = [x for x in w[1:] if not x.startswith("-")]
    hit = any(x == target or x.rsplit("/", 1)[-1] == base or (GLOB.search(x) and fnmatch.fnmatchcase(
        base, x.rsplit("/", 1)[-1])) for x in named) or \
        any(x.startswith("-") and x.endswith(base) and "f" in x for x in w[1:])      # tar -xzf FILE
    if not w or not hit:
        return None
    tool = w[0].rsplit("/", 1)[-1]
    if tool == "dpkg" and any(x in ("-i", "--install") for x in w):
        return "installed with dpkg"
    if tool in ("apt", "apt-get") and "install" in w:
        return "installed with apt"
    if tool in ("rpm", "yum", "dnf") and any(x in ("-i", "-U", "-ivh", "-Uvh", "install") for x in w):
        return f"installed with {tool}"
    if tool == "tar" and any(re.fullmatch(r"-?[a-zA-Z]*x[a-zA-Z]*", x) or x == "--extract" for x in w[1:]):
        return "unpacked with tar"
    if tool == "unzip":
        return "unpacked with unzip"
    if tool == "apt-key" and "add" in w:
        return "trusted as an apt signing key"
    return None


def _expanded(c: Command) -> tuple:
    """A command's words with the variables known where it runs put in."""
    return tuple(expand(x, c.values) for x in command_words(c.text))


def _stage_downloads(ctx: Context) -> dict[int, list]:
    """Per stage: (instruction, command, url, file) of every curl/wget/aria2c that saves a file, and of every ADD
    of a URL without --checksum (BuildKit does not unpack an archive it downloads: a RUN does), in order."""
    out: dict[int, list] = {}
    for ins in ctx.instructions:
        if ins.keyword != "ADD" or "--checksum" in ins.args:
            continue
        w = tuple(expand(x, ctx.scope(ins)) for x in command_words(re.sub(r"--\S+", "", ins.args)))
        urls = [x for x in w[:-1] if re.match(r"https?://", x)]
        if urls and len(w) >= 2:
            dest = w[-1]
            for url in urls:
                name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                target = f"{dest.rstrip('/')}/{name}" if dest.endswith("/") or len(urls) > 1 else dest
                out.setdefault(ins.stage, []).append((ins, Command(text=ins.args, offset=0), url, target))
    for ins, c in ctx.commands:
        w = command_words(c.text)
        if not w:
            continue
        tool = w[0].rsplit("/", 1)[-1]
        ew = _expanded(c)
        saved = fetched_to(ew, c.writes) if tool in FETCHERS else _aria2c(ew) if tool == "aria2c" else None
        if saved:
            out.setdefault(ins.stage, []).append((ins, c, saved[0], saved[1]))
    return out


def _aria2c(w: tuple) -> tuple[str, str] | None:
    url = next((x for x in w if re.match(r"https?://", x)), "")
    if not url:
        return None
    name = next((w[i + 1] for i, x in enumerate(w[:-1]) if x in ("-o", "--out")), None)
    name = name or next((x.split("=", 1)[1] for x in w if x.startswith("--out=")), None)
    folder = next((w[i + 1] for i, x in enumerate(w[:-1]) if x in ("-d", "--dir")), None)
    name = name or url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return url, (f"{folder.rstrip('/')}/{name}" if folder else name)


@dockerfile_rule
def unverified_download(ctx: Context) -> None:
    """IB117: a file fetched at build time and put into the image unverified: installed (dpkg, apt, rpm),
    unpacked (tar, unzip: a source tree built, a binary distribution), saved straight into a bin folder, or
    trusted as an apt key, with no checksum or signature checked in between. A key or file over plain http
    is said so. Wheels are pip's (hashes: IB103's lock), scripts that run are IB113's."""
    items = ctx.commands
    for n, (ins, c) in enumerate(items):
        w = command_words(c.text)
        tool = w[0].rsplit("/", 1)[-1] if w else ""
        if tool == "apt-key" and "--fetch-keys" in w:
            url = w[w.index("--fetch-keys") + 1] if w.index("--fetch-keys") + 1 < len(w) else ""
            if url.startswith("http://"):
                ctx.add("IB117", "error", ins, c.offset, f"apt-key fetches a signing key over plain http ({url}): "
                        "whoever is on the path chooses which packages apt trusts", "fetch the key over https and "
                        "check its fingerprint (gpg --show-keys), or COPY it in", cmd=c)
            continue
        if tool not in FETCHERS or c.sep != "|" or n + 1 >= len(items) or items[n + 1][0] is not ins:
            continue
        url = next((x for x in w if re.match(r"https?://", x)), "")
        nw = command_words(items[n + 1][1].text)
        how = ("unpacked with tar" if nw[:1] == ("tar",) and any(re.fullmatch(r"-?[a-zA-Z]*x[a-zA-Z]*", x) or
                                                                   x == "--extract" for x in nw[1:])
               else "trusted as an apt signing key" if nw[:2] == ("apt-key", "add") and url.startswith("http://")
               else None)
        if url and how and not url.endswith(".whl"):
            _unverified(ctx, ins, c, url, how)
    # Linear in the commands: where each is, which RUNs check a checksum, and the commands that install a
    # file, by the file's name.
    position = {id(c): k for k, (_, c) in enumerate(items)}
    checked, checks_before, count = set(), [], 0
    for i, c in items:
        checks_before.append(count)
        if CHECKS.search(c.text):
            checked.add(id(i))
            count += 1
    installers: dict[str, list] = {}
    globbed: dict[str, list] = {}                       # dpkg -i cuda-keyring_*.deb: the shell's glob
    for k, (i, c) in enumerate(items):
        w = command_words(c.text)
        if w and w[0].rsplit("/", 1)[-1] in INSTALLERS:
            for x in _expanded(c)[1:]:                  # tar xzf mft-${MFT_VER}.tgz: the name the shell gives
                name = x.rsplit("/", 1)[-1]
                if GLOB.search(name) and not x.startswith("-"):
                    globbed.setdefault(name, []).append(k)
                else:
                    installers.setdefault(name, []).append(k)
    lines = [i.line for i, _ in items]
    for downloads in _stage_downloads(ctx).values():
        for ins, c, url, target in downloads:
            if target.endswith(".whl") or id(ins) in checked:
                continue
            if BIN_DIRS.match(target):
                _unverified(ctx, ins, c, url, f"saved as the program {target}", target)
                continue
            # An ADD of a URL is no command of a RUN: what follows it is the first command of a later line.
            at = position[id(c)] if id(c) in position else bisect.bisect_left(lines, ins.line) - 1
            name = target.rsplit("/", 1)[-1]
            # Each distinct pattern matched once per download (a file rarely holds more than a few).
            candidates = sorted(installers.get(name, []) + [k for pattern, ks in globbed.items()
                                                            if fnmatch.fnmatchcase(name, pattern) for k in ks])
            for k in candidates[bisect.bisect_right(candidates, at):]:
                i2, x = items[k]
                if i2.stage != ins.stage:
                    break
                if checks_before[k] > (checks_before[at] if at >= 0 else 0):
                    break                               # a checksum checked between the download and its use
                how = _installs(_expanded(x), target)
                if how:
                    # Said at the download, where the checksum belongs; the line that uses it is named.
                    _unverified(ctx, ins, c, url, f"{how} at line {i2.line_at(x.offset)}", target)
                    break


def _clone_url(w: tuple) -> str:
    """The repository a `git clone` command names (its first argument that is a URL or host:path), for a fix."""
    return next((x for x in w[2:] if "://" in x or re.match(r"^[\w.-]+@[\w.-]+:", x)), "the repository")


def _unverified(ctx: Context, ins: Instruction, c: Command, url: str, how: str, target: str = "") -> None:
    plain = url.startswith("http://")
    # The fix names the file as this line saves it (-O/-o), else as the URL names it.
    name = target or url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "FILE"
    ctx.add("IB117", "error" if plain else "warning", ins, c.offset, f"{url} is {how} without a checksum"
            + (", fetched over plain http: anyone on the path can change it" if plain else
               ": the image takes whatever the server returns that day"),
            f"check its sha256 before using it (echo '<sha256>  {name}' | sha256sum -c), from a versioned URL"
            + ("; fetch it over https" if plain else ""), cmd=c)


@dockerfile_rule
def generated_key(ctx: Context) -> None:
    """IB114: a private key generated in a RUN (ssh-keygen, host keys too) and left in the layer: every
    container of the image shares it, and whoever pulls the image holds it."""
    for ins in ctx.instructions:
        if ins.keyword != "RUN":
            continue
        code = ctx.code[id(ins)]
        m = re.search(r"\bssh-keygen\b", code)
        if m and not re.search(r"\brm\b[^;&|\n]*(?:id_|ssh_host_|\.ssh)", code):
            ctx.add("IB114", "error", ins, m.start(), "a private key generated into the layer (ssh-keygen): every "
                    "container shares it and anyone who pulls the image has it", "generate keys when the container "
                    "starts (entrypoint), or mount them at run time; for the build, RUN --mount=type=ssh")


# A pip install whose target is Apex: NVIDIA's repository (git URL or a checkout of it named apex), or a
# folder entered with `cd apex` and installed as `.` / `./`.
APEX_TARGET = re.compile(r"github\.com/nvidia/apex\b|(?:^|[\s/=])apex/?(?:\s|$|#|@)|\bcd\s+\S*apex\S*\s*(?:&&|;)[^;&|]*"
                         r"\bpip3?\b[^;&|]*\binstall\b[^;&|]*\s\.?/?(?:\s|$)", re.I)
APEX_CUDA = re.compile(r"--cuda_ext|\bAPEX_CUDA_EXT=|\bAPEX_ALL_CONTRIB_EXT=1")


@dockerfile_rule
def apex_python_only(ctx: Context) -> None:
    """IB115: Apex installed with no word of its CUDA extensions (neither --cuda_ext nor APEX_CUDA_EXT):
    its setup.py then builds a Python-only Apex, without FusedAdam, FusedLayerNorm or amp_C, and the image
    imports `apex` fine until a training script asks for a fused op. APEX_CUDA_EXT=0 is a choice, not a
    finding."""
    for ins in ctx.instructions:
        if ins.keyword != "RUN":
            continue
        code = ctx.code[id(ins)]
        installs = [m for m in re.finditer(r"\b(?:pip3?(?:\.\d+)?|uv pip|-m pip)\s+(?:-\S+\s+)*install\b[^;&|\n]*",
                                           code)]
        target = APEX_TARGET.search(code)
        if not target or not installs or re.search(r"\bpip3?\s+uninstall\b[^;&|]*apex", code, re.I) and \
                not any(APEX_TARGET.search(m.group(0)) for m in installs):
            continue
        pypi = next((c for i2, c in ctx.commands if i2 is ins and any(
            a.lower() == "apex" for a in pip_requirements(pip_install_args(c.text) or ()))), None)
        if pypi is not None:
            ctx.add("IB115", "error", ins, pypi.offset + pypi.text.lower().rfind("apex"), "pip installs 'apex' from "
                    "the package index: that is another project (PyPI's apex 0.9.10dev, a Pyramid web toolkit), not "
                    "NVIDIA Apex, and `import apex` still works", "build NVIDIA Apex from its repository at a pinned "
                    "commit (git+https://github.com/NVIDIA/apex@<40-hex>) with APEX_CPP_EXT=1 APEX_CUDA_EXT=1",
                    source="PyPI's apex: the sdist apex-0.9.10dev.tar.gz, PKG-INFO Summary 'Pyramid toolkit to add "
                    "Velruse, Flash Messages,CSRF, ReCaptcha and Sessions'; NVIDIA Apex is not on PyPI "
                    "(github.com/NVIDIA/apex README: install from source)", cmd=pypi)
            continue
        if APEX_CUDA.search(code) or "APEX_CUDA_EXT" in ctx.scope(ins):
            continue
        # The line shown: Apex's URL or folder in the install, else the install that follows the checkout.
        inside = any(m.start() <= target.start() < m.end() for m in installs)
        at = target.start() if inside else next((m.start() for m in installs if m.start() > target.start()),
                                                 installs[0].start())
        ctx.add("IB115", "warning", ins, at, "Apex is installed without its CUDA extensions (no "
                "--cuda_ext, no APEX_CUDA_EXT=1): setup.py builds a Python-only Apex, without FusedAdam, "
                "FusedLayerNorm or amp_C, and `import apex` still works",
                "build it with APEX_CPP_EXT=1 APEX_CUDA_EXT=1 pip install -v --no-build-isolation . (and "
                "TORCH_CUDA_ARCH_LIST); write APEX_CUDA_EXT=0 if a Python-only Apex is what you want")


@dataclass(frozen=True)
class Base:
    cuda: Version | None = None
    torch: bool | None = None           # whether the image ships torch
    torch_version: str | None = None
    python: str | None = None


def _image(image: str) -> Base:
    """What an image reference says it ships: an NGC month from the catalog, nvidia/cuda's tag,
    pytorch/pytorch's tag."""
    image = image.split("@")[0]
    ngc = catalog.ngc_release(image)
    if ngc is not None:
        cuda, torch, python = ngc.fact("cuda"), ngc.fact("torch"), ngc.fact("python")
        return Base((Version(cuda.value) if cuda else None), ngc.framework == "pytorch", (torch.value if torch else None),
                    (python.value if python else None))
    if re.search(r"(?:^|/)nvidia/pytorch:", image):
        return Base(torch=True)                             # every NGC PyTorch month ships torch
    m = re.search(r"(?:^|/)pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)", image)
    if m:
        return Base(Version(m.group(2)), True, m.group(1))
    m = re.search(r"(?:^|/)cuda:(\d+\.\d+(?:\.\d+)?)", image)
    if m:
        return Base(Version(m.group(1)), False)
    return Base()


def _stages(instructions: list[Instruction]) -> dict[int, Base]:
    """Each stage's base: its FROM with the global ARG defaults put in, a stage named there standing for
    that stage's own base (`FROM ${CUDA_VERSION} AS dev` with CUDA_VERSION=cu128 is the cu128 stage's image)."""
    args = global_args(instructions)
    out: dict[int, Base] = {}
    named: dict[str, int] = {}
    for ins in instructions:
        if ins.keyword != "FROM":
            continue
        w = [x for x in ins.args.split() if not x.startswith("--")]
        image = expand(w[0], args) if w else ""
        out[ins.stage] = out[named[image.lower()]] if image.lower() in named else _image(image)
        if len(w) >= 3 and w[1].upper() == "AS":
            named[w[2].lower()] = ins.stage
    return out


def lint_dockerfile(text: str, file: str, base_cuda: Version | None = None,
                    base_torch: bool | None = None) -> list[Finding]:
    """Findings for one Dockerfile. Without base_cuda/base_torch they are read from its first FROM."""
    instructions = parse(text)
    ctx = Context(file=file, instructions=instructions, base_cuda=base_cuda, base_torch=base_torch,
                  stages=_stages(instructions))
    for fn in DOCKERFILE_RULES:
        fn(ctx)
    for ins in ctx.too_deep:
        ctx.add("IB116", "unknown", ins, 0, f"the shell of this RUN nests deeper than {MAX_DEPTH} levels: the lint "
                "did not read past that depth, so what is there is not judged", "flatten the script (a script file "
                "COPYed in and run), or lint it on its own")
    return ctx.findings


# -- the spec and imgbuild's own rendered Dockerfiles -----------------------------------------------

def lint_spec(spec: Spec, stacks: Iterable[Stack], lock=None) -> list[Finding]:
    """Spec values: credentials (IB110), environment that sets arch lists other than the stack's gpus
    (IB105), turns off the torch constraint (IB109), or *-cuXX pins for another CUDA (IB108). lock: the
    measured facts preflight uses (builder.rules.review passes the same)."""
    out = []
    for stack in stacks:
        name = stack.name
        sf = resolve(spec, stack, lock)
        cuda = sf.version("cuda")

        def add(rule_id: str, severity: str, key: tuple, message: str, fix: str) -> None:
            out.append(Finding(rule=rule_id, severity=severity, message=message, file=spec.file,
                               line=spec.doc.line(key) if spec.doc else None, key=dotted(key), stack=name,
                               source=PATTERNS[rule_id], fix=fix))

        # A URL with a literal credential in any parameter is refused when stacks.yaml loads (params.text).
        for var, (value, key, layer) in sf.env.items():
            if holds_secret(var, value):
                add("IB110", "error", key, f"{var} holds a literal value: it would be baked into the image "
                    "environment", "inject it at run time (the scheduler's secrets), not in the image")
            if var in ARCH_VARS and stack.gpus:
                want = {g.sm for g in stack.gpus}
                got = arch_set(value)
                if got is not None and {a.rstrip("a") for a in got} != want:
                    add("IB105", "warning", key, f"{var}={value!r} disagrees with the stack's gpus "
                        f"({', '.join(g.name for g in stack.gpus)}: {stack.arch_list}): JIT builds at run time "
                        "target other GPUs", "leave the arch list to imgbuild, or make it match gpus")
            if var == "PIP_CONSTRAINT":
                add("IB109", "error", key, "PIP_CONSTRAINT set by a layer replaces the constraint that keeps the "
                    "base's torch", "leave PIP_CONSTRAINT to imgbuild")
        for package, (pinned, key, layer) in sf.pins.items():
            flavour = _flavour(package)
            if flavour and cuda is not None and int(flavour[:2]) != cuda.major:
                add("IB108", "error", key, f"{package}=={pinned} is built for CUDA {flavour[:2]}; base "
                    f"{stack.base.name} has CUDA {cuda}", f"use the cu{cuda.major} flavour")
    return out


def lint_rendered(spec: Spec, plan, lock=None) -> list[Finding]:
    """imgbuild's own Dockerfiles, each distinct node once; a finding points at the layer in stacks.yaml
    (the Dockerfile is not a file a site edits) and names the rendered line."""
    out = []
    for node in plan.nodes.values():
        stack = spec.stack(plan.users[node.key][0])
        sf = resolve(spec, stack, lock, below=node.name)   # what this layer is installed over
        torch = sf.get("torch")
        has_torch = torch is not None and torch.value is not None
        chain = stack.chain[:[d.name for d in stack.chain].index(node.name) + 1]
        swapped = any(dict(d.params).get("replace_torch") for d in chain)
        for f in lint_dockerfile(node.dockerfile, node.name, sf.version("cuda"), has_torch):
            if f.rule == "IB109" and swapped:
                # A swap stacks.yaml declares, with its reason, in this layer or beneath: preflight judges
                # it and what sits on it from the facts (IB070, IB071).
                continue
            if f.rule == "IB104" and not stack.cuda_beneath(node.layer):
                continue   # CUDA code asked for where no CUDA is: preflight says so (IB045); no arch list helps
            key = (node.layer.section, node.layer.name)
            out.append(Finding(rule=f.rule, severity=f.severity, file=spec.file, line=node.layer.line, key=dotted(key),
                               stack=stack.name, message=f"rendered Dockerfile line {f.line}: {f.message}",
                               source=f.source, fix=f.fix))
    return out
