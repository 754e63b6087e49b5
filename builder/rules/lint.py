"""Lint: the fragile patterns of hand-written training-image Dockerfiles (seen in public ones), found in
the spec, in imgbuild's own rendered Dockerfiles, and in any Dockerfile a site points
`imgbuild lint` at. Each finding has a rule id (IB1xx), a line, a severity and a fix.

Reading is elsewhere: builder.core.dockerfile (instructions, and per RUN its shell text, variables and
SHELL) and builder.core.shell (words, segments, pip/conda/git commands). This module holds the rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from builder.core import catalog
from builder.core.dockerfile import PREDEFINED_ARGS, Dockerfile, Instruction, from_image, global_args, parse
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
            "nvidia-smi", "pkill", "kill", "killall", "umount", "ldconfig", "sync", "true"}
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
    "IB115": "3 (compiled parts left out: Apex built without its CUDA extensions)"}.items()}


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
    findings: list = field(default_factory=list)

    def add(self, rule_id: str, severity: str, ins: Instruction, offset: int, message: str, fix: str,
            source: str = "") -> None:
        self.findings.append(Finding(rule=rule_id, severity=severity, message=message, file=self.file,
                                     line=ins.line_at(offset), key=ins.keyword, source=source or PATTERNS[rule_id],
                                     fix=fix))


DOCKERFILE_RULES: list[Callable[[Context], None]] = []


def dockerfile_rule(fn):
    DOCKERFILE_RULES.append(fn)
    return fn


def _exact(req: Requirement) -> bool:
    """A single version: == or === without a wildcard (==3.20.* is a range)."""
    return any(s.operator in ("==", "===") and "*" not in s.version for s in req.specifier)


@dockerfile_rule
def floating_refs(ctx: Context) -> None:
    """IB101 floating refs (clones of a branch, @main, release branches, a fallback clone of the default
    branch); IB102 short hashes. A ref held in a variable is read from its ARG/ENV default."""
    items = ctx.segments
    moves = {id(i) for i, t, _, _ in items if words(t)[:1] == ("git",) and checkout_ref(words(t))}
    for n, (ins, text, sep, offset) in enumerate(items):
        w = words(text)
        values = ctx.values(ins)
        pinned = ctx.pinned[id(ins)]
        refs = []
        if w[:2] == ("git", "clone"):
            prev = items[n - 1] if n else None
            fallback = prev is not None and prev[0] is ins and prev[2] == "||" and words(prev[1])[:2] == ("git", "clone")
            checkout = id(ins) in moves
            if fallback and not pinned:
                ctx.add("IB101", "error", ins, offset, "fallback clone of the default branch after `||`: when the "
                        "first clone fails, the image silently builds from whatever the default branch holds",
                        "drop the fallback; pin the commit (git checkout <40-hex>) after one clone")
                continue
            if not pinned and not checkout:
                branch = next((w[i + 1] for i, x in enumerate(w[:-1]) if x in ("-b", "--branch")), None)
                ctx.add("IB101", "error", ins, offset, f"git clone{f' of branch/tag {branch}' if branch else ''} "
                        "without checking out a full commit: the image changes whenever the branch moves",
                        "git checkout <40-hex commit> after the clone (imgbuild: a git parameter pins the commit)")
                continue
        if w[:1] == ("git",):
            ref = checkout_ref(w)
            if ref == "FETCH_HEAD" and pinned:
                ref = None
            if ref:
                refs.append(ref)
        refs = [(ref, offset) for ref in refs]
        for a in w:
            ref = git_url_ref(expand(a, values))          # ARG apex_url=git+https://...@25.04
            if ref:
                refs.append((ref, offset + max(text.find(a), 0)))
        for ref, offset in refs:
            ref = expand(ref, values)
            if HEX40.match(ref) or ref.startswith("$"):
                continue
            if HEX_SHORT.match(ref):
                ctx.add("IB102", "error", ins, offset, f"short commit hash {ref!r}: it can become ambiguous, and a "
                        "tool that verifies pins cannot compare it", "use the full 40-hex commit")
            else:
                ctx.add("IB101", "error", ins, offset, f"floating git ref {ref!r}: the image changes without any file "
                        "changing", "pin the full 40-hex commit (git rev-parse 'TAG^{commit}')")


@dockerfile_rule
def unpinned_installs(ctx: Context) -> None:
    """IB103: pip and conda installs of a package without an exact version (paths, wheels, URLs aside:
    a git URL's ref is IB101's)."""
    for ins, text, _, offset in ctx.runs():
        args = pip_install_args(text)
        conda = conda_install(text) if args is None else None
        w = command_words(text)
        if w[:3] == ("uv", "python", "install"):
            for v in w[3:]:
                value = expand(v, ctx.values(ins))
                if re.fullmatch(r"(?:cpython-)?3\.\d+", value):
                    ctx.add("IB103", "error", ins, offset + max(text.find(v), 0), f"uv installs Python {value} without "
                            "an exact version: the image gets whichever patch release is newest",
                            f"pin it: uv python install {value}.<patch>")
        if conda is not None:
            tool, specs = conda
            values = ctx.values(ins)
            for spec in specs:
                value = expand(spec, values)
                m = re.fullmatch(r"([A-Za-z0-9_.\-]+(?:::)?[A-Za-z0-9_.\-]*)(==?)?([^\s=<>!~*]*)", value)
                exact = m and m.group(2) and m.group(3) and (m.group(2) == "==" or m.group(3).count(".") >= 2)
                if "$" in value or exact:
                    continue
                ctx.add("IB103", "error", ins, offset + max(text.find(spec), 0), f"{tool} installs {value!r} without "
                        "an exact version: the image changes whenever a new build appears",
                        f"pin it: {value.split('=')[0]}==<version>")
        for a in pip_requirements(args or ()):
            if a.startswith((".", "/", "git+", "$", "http:", "https:", "file:")) or a.endswith((".whl", ".tar.gz")):
                continue
            try:
                req = Requirement(a)
            except InvalidRequirement:
                continue
            if not req.url and not _exact(req):
                ctx.add("IB103", "error", ins, offset + max(text.find(a), 0), f"pip installs {a!r} without an exact "
                        "version: the image changes whenever a new release appears", f"pin it: {req.name}==<version>")


def _compiles_cuda(args: str) -> str | None:
    """What in a RUN compiles CUDA with torch's extension builder, which targets the build host's GPU (or
    nvcc's default) without TORCH_CUDA_ARCH_LIST. Transformer Engine and flash-attn are not here: both
    carry their own list (NVTE_CUDA_ARCHS, FLASH_ATTN_CUDA_ARCHS) with a default for the CUDA in use."""
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
            if not any(v in scope and scope[v][0] != "" for v in needed):
                ctx.add("IB104", "error", ins, 0, f"{what} compiled without {' or '.join(needed)}: it builds for the "
                        "GPU of the build host, or for none", f"set {needed[0]} for the target GPUs in this stage "
                        "(an ARG before FROM does not reach it)")
    by_stage: dict[int, dict] = {}
    for ins in ctx.instructions:
        spellings = by_stage.setdefault(ins.stage, {})
        if ins.keyword in ("ARG", "ENV", "RUN"):
            for name, (value, off) in assignments(ctx.code.get(id(ins), ins.args)).items():
                if name in MIX_VARS and arch_set(value) is not None:
                    spellings[name] = (arch_set(value), ins, off)
        for m in GENCODE.finditer(ctx.code.get(id(ins), ins.args)):
            old = spellings.get("-gencode", (frozenset(), ins, m.start()))
            spellings["-gencode"] = (old[0] | {m.group(1)}, old[1], old[2])
    for spellings in by_stage.values():
        sets = {k: {a.rstrip("a") for a in v[0]} for k, v in spellings.items()}
        if len({frozenset(s) for s in sets.values()}) > 1:
            _, ins, off = list(spellings.values())[-1]
            shown = "; ".join(f"{k}={','.join(sorted(s))}" for k, s in sorted(sets.items()))
            ctx.add("IB105", "error", ins, off, f"arch lists disagree in one stage ({shown}): the tools build for "
                    "different GPUs", "derive every spelling from one list (imgbuild derives them from gpus)")


@dockerfile_rule
def arg_scope(ctx: Context) -> None:
    """IB106: an ARG declared before FROM used inside a stage that does not declare it again."""
    globals_ = {i.args.split("=")[0].split()[0] for i in ctx.instructions if i.stage == -1 and i.keyword == "ARG"}
    for ins in ctx.instructions:
        if ins.stage < 0 or ins.keyword in ("FROM", "ARG"):
            continue
        text = ctx.code.get(id(ins), ins.args)
        for m in re.finditer(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text):
            name = m.group(1)
            if name in globals_ and name not in PREDEFINED_ARGS and name not in ctx.scope(ins) \
                    and name not in assignments(text[:m.start()]):
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
    failure `;` or a newline ignores in a shell without -e (a loop keeps only its last iteration's status)."""
    items = ctx.segments
    for n, (ins, text, sep, offset) in enumerate(items):
        nxt = items[n + 1] if n + 1 < len(items) and items[n + 1][0] is ins else None
        if sep != "||" or nxt is None or not re.fullmatch(r"true|:|exit 0|echo\b.*", nxt[1]):
            continue
        chain = [text]
        k = n - 1
        while k >= 0 and items[k][0] is ins and items[k][2] == "&&":
            chain.append(items[k][1])
            k -= 1
        if all(_harmless(t) for t in chain):
            continue
        ctx.add("IB107", "error", ins, nxt[3], f"'|| {nxt[1]}' hides a failure: the image is tagged although a step "
                "failed", "remove it; let the step fail the build")
    for ins in ctx.instructions:
        if ins.keyword == "RUN":
            for m in re.finditer(r";\s*exit 0\b|\bset \+e\b", ctx.code[id(ins)]):
                ctx.add("IB107", "error", ins, m.start(), f"{m.group(0).strip()!r} hides a failure: the image is "
                        "tagged although a step failed", "remove it; let the step fail the build")
    strict = {id(ins): ctx.errexit(ins) for ins in ctx.instructions if ins.keyword == "RUN"}
    for n, (ins, text, sep, offset) in enumerate(items):
        if strict[id(ins)] or sep not in (";", "\n"):
            continue
        body = re.sub(r"^(then|else|do|elif)\s+", "", text)
        nxt = items[n + 1][1] if n + 1 < len(items) and items[n + 1][0] is ins else ""
        if not nxt or not INSTALLS.match(body):
            continue
        first = nxt.split()[0]
        if text.startswith("do ") and first == "done":
            ctx.add("IB107", "warning", ins, offset, f"{body.split()[0]} ... in a loop: a failure of any iteration "
                    "but the last is ignored, only the last one's status counts", "add `|| exit 1` in the loop, "
                    "or run the RUN under set -e")
        elif first not in ("fi", "done", "esac", "}", "then", "do", "else", "elif", ";;"):
            ctx.add("IB107", "warning", ins, offset, f"the exit code of {body.split()[0]} ... is ignored: "
                    f"'{sep.strip() or 'newline'}' goes on after a failure", "join the commands with &&")


def _flavour(name: str) -> str | None:
    m = CUDA_FLAVOUR.search(name)
    return next((g for g in m.groups() if g), None) if m else None


@dockerfile_rule
def cuda_flavours(ctx: Context) -> None:
    """IB108: *-cuXX packages, +cuXXX wheels and /whl/cuXXX indexes for another CUDA major; torch wheels
    and indexes for another CUDA minor (extensions built with the base's nvcc then differ from torch's)."""
    for ins, text, _, offset in ctx.runs():
        args = pip_install_args(text) or ()
        values = ctx.values(ins) if args else {}
        for a in args:
            value = expand(a, values)
            at = offset + max(text.find(a), 0)
            jax = jax_cuda_of(value)
            for major, local, extra in jax:
                _jax_flavour(ctx, ins, at, value, major, local, extra)
            if jax:
                continue
            flavour = _flavour(value)
            if not flavour:
                continue
            if ctx.base_cuda is None:
                shown = f"{flavour[:2]}.{flavour[2]}" if len(flavour) == 3 else flavour
                ctx.add("IB108", "unknown", ins, at, f"{value!r} is built for CUDA {shown}; the base's CUDA is not "
                        "known, so the match cannot be checked", "lint against a known base (FROM nvcr.io/nvidia/"
                        "pytorch:YY.MM-py3 or nvidia/cuda:X.Y.Z-...)")
            elif int(flavour[:2]) != ctx.base_cuda.major:
                ctx.add("IB108", "error", ins, at, f"{value!r} is built for CUDA {flavour[:2]}, the base has CUDA "
                        f"{ctx.base_cuda}", f"use the cu{ctx.base_cuda.major} flavour")
            elif len(flavour) == 3 and int(flavour[2]) != ctx.base_cuda.minor and (
                    "/whl/" in value or _req_name(value) in TORCH_FAMILY):
                ctx.add("IB108", "warning", ins, at, f"{value!r} is built for CUDA {flavour[:2]}.{flavour[2]}, the base "
                        f"has CUDA {ctx.base_cuda}: extensions built with the base's nvcc differ from torch's CUDA",
                        f"use the cu{ctx.base_cuda.major}{ctx.base_cuda.minor} wheel, or a base with torch's CUDA")


def _jax_flavour(ctx: Context, ins: Instruction, at: int, value: str, major: int, local: bool, extra: str) -> None:
    """JAX's CUDA builds by their extra or package name (jax[cuda12], jax[cuda13-local], jax[cuda] = CUDA 12,
    jax-cuda12-plugin, jaxlib==X+cuda12.cudnn89): a build that brings its CUDA as pip wheels needs none from
    the base; a -local one runs on the base's, which must be of its major."""
    if ctx.base_cuda is None:
        if local:
            ctx.add("IB108", "unknown", ins, at, f"{value!r} uses the base's CUDA {major} (a -local install brings "
                    "none); the base's CUDA is not known", "lint against a known base (FROM nvidia/cuda:X.Y.Z-... or "
                    "nvcr.io/nvidia/jax:YY.MM-py3), or use jax[cudaNN], which brings CUDA as pip wheels")
        return
    if major != ctx.base_cuda.major:
        # On the base's libraries (-local) the wrong major cannot run; with its own wheels it runs, beside a
        # second CUDA.
        ctx.add("IB108", "error" if local else "warning", ins, at, f"{value!r} is JAX's CUDA {major} build"
                + (" (plain [cuda] is the CUDA 12 plugin)" if extra.lower() == "cuda" else "")
                + ("" if local else f", with its own CUDA {major} wheels") + f"; the base has CUDA {ctx.base_cuda}",
                f"use jax[cuda{ctx.base_cuda.major}{'-local' if local else ''}]" if extra or value.lower().startswith("jax[")
                else f"use the CUDA {ctx.base_cuda.major} packages (jax-cuda{ctx.base_cuda.major}-plugin)")


def _req_name(text: str) -> str | None:
    try:
        return Requirement(text).name.lower()
    except InvalidRequirement:
        return None


@dockerfile_rule
def torch_replaced(ctx: Context) -> None:
    """IB109: installing torch (or a package that brings its own) over a base that ships torch, and
    disabling the constraint file that keeps it. Not when the Dockerfile removed the base's torch first,
    nor for the very version the base ships."""
    replacers = catalog.torch_replacers()
    removed: set[int] = set()       # stages whose base torch a RUN uninstalled
    for ins, text, _, offset in ctx.runs():
        w = command_words(text)
        if "uninstall" in w and any(x.lower() == "torch" for x in w):
            removed.add(ins.stage)
        args = pip_install_args(text) or []
        names = set()
        for a in pip_requirements(args):
            try:
                req = Requirement(a)
            except InvalidRequirement:
                continue
            same = ctx.base_torch_version and req.name.lower() == "torch" and any(
                s.operator in ("==", "===") and s.version == ctx.base_torch_version for s in req.specifier)
            if not same:
                names.add(req.name.lower())
        hit = sorted(names & set(replacers.value))
        if hit and ctx.base_torch and ins.stage not in removed:
            ctx.add("IB109", "error", ins, offset, f"pip installs {', '.join(hit)} over the base's torch: everything "
                    "compiled against it (TE, Apex, DeepSpeed ops) silently breaks", "install without torch; "
                    "use --no-build-isolation and keep the base's torch", source=replacers.source)
        if re.search(r"(sed|rm|truncate)\b.*\S*/etc/pip/constraint\.txt|>\s*/etc/pip/constraint\.txt", text):
            ctx.add("IB109", "warning", ins, offset, "edits NGC's /etc/pip/constraint.txt, which keeps its torch and "
                    "the packages built with it", "leave the constraint file; pin what you add",
                    source=replacers.source)
    for ins in ctx.instructions:
        value = assignments(ins.args).get("PIP_CONSTRAINT") if ins.keyword in ("ENV", "RUN", "ARG") else None
        if value is not None and value[0] == "":
            ctx.add("IB109", "warning", ins, value[1], "PIP_CONSTRAINT= turns off the constraint that keeps the "
                    "base's torch", "keep the constraint file", source=replacers.source)


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
                if SECRET_NAME.search(name) and value and not value.startswith("$"):
                    ctx.add("IB110", "error", ins, off, f"{name} is given a literal value: it stays in the image",
                            "pass it as a BuildKit secret")
            if ins.keyword == "ARG" and "=" not in args and SECRET_NAME.search(args.split()[0] if args.split() else ""):
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


FETCHERS = {"curl", "wget"}
INTERPRETERS = re.compile(r"^(?:ba|z|da|a)?sh\Z|^python[\d.]*\Z|^perl\Z")


@dockerfile_rule
def piped_installer(ctx: Context) -> None:
    """IB113: a script fetched at build time and run unverified as root: `curl ... | sh`, `bash <(curl ...)`,
    and a downloaded installer (get-pip.py, *.sh) run without a checksum."""
    items = ctx.segments
    for n, (ins, text, sep, offset) in enumerate(items):
        w = command_words(text)
        if not w or w[0].rsplit("/", 1)[-1] not in FETCHERS:
            continue
        url = next((x for x in w if re.match(r"https?://", x)), "")
        if not url:
            continue
        nxt = items[n + 1] if n + 1 < len(items) and items[n + 1][0] is ins else None
        runner = command_words(nxt[1]) if nxt and sep == "|" else ()
        if runner and INTERPRETERS.match(runner[0].rsplit("/", 1)[-1]):
            ctx.add("IB113", "warning", ins, nxt[3], f"runs a script fetched from {url} unverified, as root: the image "
                    "runs whatever the server returns that day", "download a pinned release, check its sha256 "
                    "(sha256sum -c) before running it, or install a pinned package")
            continue
        name = url.rstrip("/").rsplit("/", 1)[-1]
        code = ctx.code[id(ins)]
        if not re.search(r"\.(sh|py|run)\Z", name) or re.search(r"\b(sha256sum|sha512sum|shasum|gpg --verify)\b", code):
            continue
        for ins2, text2, _, off2 in items[n + 1:]:
            if ins2 is not ins:
                break
            run = command_words(text2)
            if run and (run[0] in (name, f"./{name}") or (INTERPRETERS.match(run[0].rsplit("/", 1)[-1])
                                                         and name in run[1:2])):
                ctx.add("IB113", "warning", ins, off2, f"runs {name}, downloaded from {url} without a checksum: the "
                        "image runs whatever the server returns that day", "check its sha256 (sha256sum -c) before "
                        "running it, from a pinned release URL")
                break
    for ins in ctx.instructions:
        if ins.keyword == "RUN":
            m = re.search(r"\b(?:ba|z|da)?sh\b[^|;&\n]*?(?:<\(|\$\()\s*(?:curl|wget)\b[^)]*?(https?://[^\s)\"']+)",
                          ctx.code[id(ins)])
            if m:
                ctx.add("IB113", "warning", ins, m.start(), f"runs a script fetched from {m.group(1)} unverified, as "
                        "root: the image runs whatever the server returns that day", "download a pinned release, "
                        "check its sha256 (sha256sum -c) before running it")


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


def _base(instructions: list[Instruction]) -> tuple[Version | None, bool | None, str | None]:
    """CUDA, whether torch is there and its version, from the first FROM (ARG defaults put in): an NGC month
    from the catalog, nvidia/cuda's tag, pytorch/pytorch's tag; else ENV CUDA_VERSION."""
    first = next((i for i in instructions if i.keyword == "FROM"), None)
    image = from_image(first, global_args(instructions))[1].split("@")[0] if first else ""
    ngc = catalog.ngc_release(image)
    if ngc is not None:
        cuda, torch = ngc.fact("cuda"), ngc.fact("torch")
        return (Version(cuda.value) if cuda else None), ngc.framework == "pytorch", (torch.value if torch else None)
    if re.search(r"(?:^|/)nvidia/pytorch:", image):
        return None, True, None                             # every NGC PyTorch month ships torch
    m = re.search(r"(?:^|/)pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)", image)
    if m:
        return Version(m.group(2)), True, m.group(1)
    m = re.search(r"(?:^|/)cuda:(\d+\.\d+(?:\.\d+)?)", image)
    if m:
        return Version(m.group(1)), False, None
    env = [assignments(i.args).get("CUDA_VERSION") for i in instructions if i.keyword == "ENV"]
    env = [e for e in env if e and re.match(r"^\d+\.\d+", e[0])]
    return (Version(re.match(r"^\d+\.\d+(\.\d+)?", env[0][0]).group(0)) if env else None), None, None


def lint_dockerfile(text: str, file: str, base_cuda: Version | None = None,
                    base_torch: bool | None = None) -> list[Finding]:
    """Findings for one Dockerfile. Without base_cuda/base_torch they are read from its first FROM."""
    instructions = parse(text)
    cuda, torch, version = _base(instructions)
    ctx = Context(file=file, instructions=instructions, base_cuda=base_cuda or cuda,
                  base_torch=base_torch if base_torch is not None else torch,
                  base_torch_version=version if base_torch is None else None)
    for fn in DOCKERFILE_RULES:
        fn(ctx)
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
            if SECRET_NAME.search(var) and value:
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
