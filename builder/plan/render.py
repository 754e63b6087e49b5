"""Rendering: one Jinja environment, Dockerfile.j2 as the skeleton, a fragment per layer kind.

Rendering is pure: equal inputs give byte-identical text. Nothing time- or host-dependent goes into
the text (timestamps and build ids are passed as --label at build time), so content keys are stable.
Every spec value passes through a quoting filter that refuses control characters, so no value can
start a new Dockerfile instruction.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from builder.errors import RenderError
from builder.core import dockerfile, platforms as plat
from builder.load.kindpath import SKELETON, Templates
from builder.load.params import CONTROL, EnvPath, FileRef, GitPin, WheelPin
from builder.load.spec import LayerDef, Spec, Stack, arch_list
from builder.core import catalog

# Instructions a fragment may not write: the skeleton owns the stage and the labels.
FORBIDDEN = re.compile(r"^\s*(FROM|LABEL|MAINTAINER)\b", re.IGNORECASE | re.MULTILINE)


def _check(value: Any) -> str:
    value = str(value)
    if CONTROL.search(value):
        raise RenderError(f"refusing to write {value!r} into a Dockerfile: it holds a control character")
    return value


def dq(value: Any) -> str:
    """Double-quoted for ENV/ARG/LABEL values: \\ " and $ escaped, so the value is taken literally.
    Backticks are left alone: Dockerfile double quotes only unescape \\" \\$ and \\\\ (BuildKit's
    shell lexer), so an escaped backtick would keep its backslash in the value."""
    value = _check(value)
    return '"' + re.sub(r'([\\"$])', r"\\\1", value) + '"'


def sh(value: Any) -> str:
    """One shell word, single-quoted where needed."""
    return shlex.quote(_check(value))


def shjoin(values: Any) -> str:
    return " ".join(sh(v) for v in values)


def env_value(value: Any, name: str) -> str:
    """The double-quoted value of ENV NAME=...: a literal (nothing expanded), or a PATH-like variable
    extended around what the parent image has. ${NAME:+...} leaves no empty entry when the parent has
    none (an empty PATH entry means the current directory)."""
    if not isinstance(value, EnvPath):
        return dq(value)
    pre, post = ":".join(value.prepend), ":".join(value.append)
    parent = f"${{{_check(name)}:+{':' if pre else ''}${{{name}}}{':' if post and not pre else ''}}}"
    return '"' + _check(pre + parent + (":" + post if pre and post else post)) + '"'


def prepend_to(folder: Any, name: str) -> str:
    """ENV value putting one folder in front of a PATH-like variable, keeping what the parent has."""
    folder = _check(folder)
    if ":" in folder:
        raise RenderError(f"{folder!r} holds ':', which would split {name} into two entries")
    return dq(folder)[:-1] + f"${{{name}:+:${{{name}}}}}" + '"'


def refuse(reason: str) -> str:
    """For a fragment whose parameters contradict each other (a kind's own rule, said where it applies)."""
    raise RenderError(reason)


def input_path(ref: FileRef) -> str:
    """Where a file beside stacks.yaml lies in the build context: by content, so the Dockerfile text
    (and with it the content key) changes when the file does."""
    return f"inputs/{ref.sha256}"


def list_of_lines(text) -> list[str]:
    """A macro's output (one command a line) as a list of its non-empty lines, for a fragment to join."""
    return [line.strip() for line in str(text).splitlines() if line.strip()]


def download_path(download) -> str:
    """Where a file fetched by URL lies in the build context: by its sha256, which the COPY line (and with
    it the content key) names. A file whose sha256 the lock file has not recorded yet is rendered only to be
    shown (IB098: nothing is built from it), under a name that says so."""
    return f"downloads/{download.sha256 or 'sha256-not-locked-yet'}"


def _skeleton_loader(path: Path) -> jinja2.BaseLoader:
    """Answers for Dockerfile.j2 only: the one skeleton file, wherever it lives."""
    def load(name: str):
        if name != SKELETON or not path.is_file():
            return None
        mtime = path.stat().st_mtime
        return path.read_text(encoding="utf-8"), str(path), lambda: path.is_file() and path.stat().st_mtime == mtime
    return jinja2.FunctionLoader(load)


@cache
def environment(where: Path | Templates) -> jinja2.Environment:
    """The one Jinja environment of a set of templates (Spec.kinds.templates): Dockerfile.j2 from the
    skeleton file, KIND/fragment.j2 from the folder of the kind that won KIND, any other template
    (macros.j2) from the kind folders in priority order. A plain Path is the old single layout: a
    folder holding Dockerfile.j2 and layers/."""
    if not isinstance(where, Templates):
        where = Templates(skeleton=where / SKELETON, fragments=(), search=(where / "layers",))
    loader = jinja2.ChoiceLoader([
        _skeleton_loader(where.skeleton),
        jinja2.PrefixLoader({name: jinja2.FileSystemLoader(str(folder)) for name, folder in where.fragments}),
        jinja2.FileSystemLoader([str(p) for p in where.search]),
    ])
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.globals["refuse"] = refuse
    env.filters.update(dq=dq, sh=sh, shjoin=shjoin, env_value=env_value, input_path=input_path,
                       download_path=download_path, list_of_lines=list_of_lines,
                       prepend_to=prepend_to)
    return env


@dataclass(frozen=True)
class CudaTargets:
    """The one arch list of a stack, spelled the ways the build tools want it."""

    torch_arch_list: str      # 9.0;10.0  (TORCH_CUDA_ARCH_LIST, DeepSpeed, apex; 9.0a with arch_suffix a)
    nvte_archs: str           # 90;100    (NVTE_CUDA_ARCHS: integers, TE issue #976; 90a)
    cmake_archs: str          # 90;100    (CMAKE_CUDA_ARCHITECTURES; 90a-real when spelt)

    # The variables a build may read the arch list from, as `arch_env` names them. flash-attn reads
    # FLASH_ATTN_CUDA_ARCHS (integers) and ignores TORCH_CUDA_ARCH_LIST; CMake reads its own spelling.
    # Makefiles that call nvcc themselves (nccl-tests) read NVCC_GENCODE: nvcc's own -gencode flags.
    SPELLINGS = ("TORCH_CUDA_ARCH_LIST", "FLASH_ATTN_CUDA_ARCHS", "NVTE_CUDA_ARCHS", "CMAKE_CUDA_ARCHITECTURES",
                 "CUDAARCHS", "NVCC_GENCODE")

    @classmethod
    def of(cls, stack: Stack, layer: LayerDef | None = None) -> "CudaTargets":
        """The stack's gpus, or a layer's own `gpus` parameter where it has one (a kernel library with
        code for some of the site's GPUs only, or for more of them)."""
        params = dict(layer.params) if layer is not None else {}
        own = params.get("gpus")
        lst = arch_list(catalog.gpus()[g] for g in own) if own else stack.arch_list
        suffix = params.get("arch_suffix")
        if suffix:
            # Arch-specific code (9.0a: Hopper's wgmma and TMA) exists from 9.0, family code (10.0f) from
            # 10.0; an older GPU of the list keeps its plain entry, as sites write "8.0;9.0a".
            floor = 9 if suffix == "a" else 10
            lst = ";".join(cc + suffix if int(cc.split(".")[0]) >= floor else cc for cc in lst.split(";"))
        ints = ";".join(cc.replace(".", "") for cc in lst.split(";"))
        return cls(torch_arch_list=lst, nvte_archs=ints, cmake_archs=ints)

    def build_args(self) -> dict:
        return {"TORCH_CUDA_ARCH_LIST": self.torch_arch_list, "NVTE_CUDA_ARCHS": self.nvte_archs,
                "CMAKE_CUDA_ARCHITECTURES": self.cmake_archs}

    def spell(self, variable: str, ptx: bool = False) -> str:
        """The arch list as `variable` wants it; ptx: also PTX for the newest arch, so that GPUs newer
        than the list can JIT-compile (torch: 9.0+PTX; CMake: 80-real;90 where a bare 90 is both)."""
        ints = self.nvte_archs.split(";")
        if variable == "TORCH_CUDA_ARCH_LIST":
            return self.torch_arch_list + ("+PTX" if ptx else "")
        if variable in ("CMAKE_CUDA_ARCHITECTURES", "CUDAARCHS"):
            return ";".join(f"{a}-real" if not ptx or i < len(ints) - 1 else a for i, a in enumerate(ints))
        if variable in ("FLASH_ATTN_CUDA_ARCHS", "NVTE_CUDA_ARCHS"):
            return self.nvte_archs
        if variable == "NVCC_GENCODE":
            # SASS for each arch (sm_90a keeps its suffix), and PTX of the newest where asked.
            flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in ints]
            return " ".join(flags + ([f"-gencode=arch=compute_{ints[-1]},code=compute_{ints[-1]}"] if ptx else []))
        raise RenderError(f"no spelling of the arch list for {variable!r}", hint="allowed: " + ", ".join(self.SPELLINGS))


def layer_context(stack: Stack, layer: LayerDef, platform: str = plat.DEFAULT) -> dict:
    """What a fragment sees. Only what can change the layer's bytes: never the stack's name, so that
    stacks sharing a prefix share its images. platform: what the layer is built for (linux/arm64)."""
    params = dict(layer.params)
    sources = {k: f"sources/{k}" for k, v in params.items() if isinstance(v, GitPin)}
    wheels = {k: v for k, v in params.items() if isinstance(v, WheelPin)}
    cuda = CudaTargets.of(stack, layer) if stack.compiles_cuda(layer) else None
    return {
        "layer": {"name": layer.name, "kind": layer.kind.name},
        "params": params,
        "base": {"family": stack.base.family, "has_cuda": stack.base.has_cuda,
                 **{k: str(v) for k, v in stack.base.provides}},
        "cuda": cuda,
        "sources": sources,
        "wheels": wheels,
        "platform": platform,
        # The CPU level host code is compiled for (builder.core.cpubaseline): macros.j2's host_compile.
        "cpu": _cpu(stack, platform),
    }


def _cpu(stack: Stack, platform: str) -> dict:
    level = stack.cpu_baseline(platform).level
    return {"level": level.name, "march": level.march, "simd": level.simd}


def render_layer(spec: Spec, stack: Stack, layer: LayerDef, platform: str = plat.DEFAULT,
                 reproducible: bool = True) -> str:
    """reproducible=False leaves out what only fixes the bytes (SOURCE_DATE_EPOCH, the removal of logs): what a
    lock entry stands for (builder.plan.keys.layer_definition), since neither changes what pip resolves."""
    env = environment(getattr(spec.kinds, "templates", None) or spec.root)
    ctx = layer_context(stack, layer, platform)
    ctx.update(reproducible=reproducible, source_date_epoch=spec.site.source_date_epoch)
    try:
        fragment = env.get_template(layer.kind.fragment).render(**ctx)
        bad = FORBIDDEN.search(fragment)
        if bad:
            raise RenderError(f"{layer.kind.folder.parent.name}/{layer.kind.fragment} writes {bad.group(1).upper()}; fragments must "
                              "not: the skeleton Dockerfile.j2 writes the stage and the labels")
        # As BuildKit reads the fragment (a value holding U+2028 is no line break to it, as it is to splitlines).
        runs = any(ins.keyword == "RUN" for ins in dockerfile.parse(fragment))
        text = env.get_template("Dockerfile.j2").render(fragment=fragment.strip("\n"), runs=runs, **ctx)
    except jinja2.TemplateError as exc:
        where = getattr(exc, "filename", None) or layer.kind.fragment
        line = getattr(exc, "lineno", None)
        raise RenderError(f"{where}{':' + str(line) if line else ''}: {exc.message or exc}") from None
    # Collapse runs of blank lines left by conditional blocks: the text is meant to be read.
    return re.sub(r"\n{3,}", "\n\n", text)
