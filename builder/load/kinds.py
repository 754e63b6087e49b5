"""Layer kinds: one folder under layers/ each, holding kind.yaml (parameters, checks), fragment.j2
and optional files/ that are sent in the build context. Adding a framework means adding a folder."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import SpecError, SpecErrors, did_you_mean
from builder.load.params import TYPES, ParamError, ParamSpec
from builder.core.yamlsrc import Doc, dotted, load_file

ROLES = ("base", "layer", "project", "runtime")
# ngc-pytorch / ngc-jax: NVIDIA's framework images (nvcr.io/nvidia/pytorch, nvcr.io/nvidia/jax); cuda: NVIDIA's
# CUDA images (nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04: the toolkit's runtime, no Python); debian: a
# plain OS image.
FAMILIES = ("ngc-pytorch", "ngc-jax", "cuda", "debian")
NGC_FAMILIES = ("ngc-pytorch", "ngc-jax")
CUDA_MODES = ("never", "always", "if-cuda")   # if-cuda: when a CUDA toolkit is beneath the layer
# The in-image check types that builder.ship.checks knows how to run. Kept here so a typo in a
# kind.yaml fails at load time, not after an hour of building.
CHECK_TYPES = ("import", "dist-version", "pip-check", "ds-report", "env", "python", "command",
               "source-commit", "torch-unchanged", "requirements", "arch-coverage", "jax", "cpu-isa")
# The tests of check type `jax` (builder/ship/checks/jaxcheck.py holds their code).
JAX_TESTS = ("versions", "host-devices", "pmap-allreduce", "jit-matmul", "cuda-plugin", "gpu-allreduce")
# Check argument values taken from the stack rather than the layer: "stack:arch_list" is the stack's
# TORCH_CUDA_ARCH_LIST where the layer compiles CUDA code for it, else null.
# "stack:cpu_baseline" is the CPU level of each platform the stack is built for (builder.core.cpubaseline).
STACK_VALUES = ("arch_list", "cpu_baseline")
KIND_KEYS = {"description", "role", "base_family", "needs", "provides", "compiles_cuda",
             "compiles_cuda_param", "params", "checks", "versions", "facts"}
# Facts of the stack that a kind may declare from one of its version parameters (a toolkit layer says
# which CUDA and nvcc it installs, a torch layer which CUDA its wheel was built with). Preflight reads them
# as it reads a base's `provides`; the kind's checks verify them inside the built image.
LAYER_FACTS = ("cuda", "nvcc", "torch_cuda", "jax_cuda", "cudnn", "nccl")
VERSION_FIELD = re.compile(r"^[a-z][a-z0-9_]*\Z")      # a {field} of tag templates and a fact name
KIND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # a folder under layers/; \Z: no trailing newline
DIST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
PARAM_KEYS = {"type", "required", "default", "choices", "doc"}
CHECK_KEYS = {"id", "check", "gpu", "args", "doc"}


@dataclass(frozen=True)
class CheckSpec:
    """A check a kind contributes; args values of the form 'param:NAME' are taken from the layer."""

    id: str
    check: str
    gpu: bool
    args: tuple  # sorted (name, value) pairs
    doc: str = ""


@dataclass(frozen=True)
class Kind:
    name: str
    folder: Path
    description: str
    role: str
    base_family: tuple    # the base families a role-base kind adopts (empty for other roles)
    needs: tuple
    provides: tuple
    compiles_cuda: str
    compiles_cuda_param: str | None
    params: dict = field(hash=False)
    checks: tuple = ()
    files: tuple = ()  # (relative path, sha256, mode) of everything under files/, sorted
    # What the kind installs: (field, (distribution names as pip knows them, first found wins)). Each
    # field is a {field} for tag templates, a version in the manifest and image diff, and a fact for
    # preflight (declared from the kind's `version` parameter, measured by probe/lock).
    versions: tuple = ()
    facts: tuple = ()   # (fact name, version parameter that declares it)

    @property
    def fragment(self) -> str:
        return f"{self.name}/fragment.j2"


def _require(doc: Doc, path: tuple, value: Any, types: type | tuple, what: str) -> Any:
    if not isinstance(value, types) or isinstance(value, bool) and types is not bool:
        raise doc.error(path, f"expected {what}")
    return value


def _strings(doc: Doc, path: tuple, value: Any) -> tuple:
    _require(doc, path, value, list, "a list of names")
    for i, item in enumerate(value):
        _require(doc, path + (i,), item, str, "a name")
    return tuple(value)


def _unknown(doc: Doc, path: tuple, mapping: dict, allowed: set) -> None:
    for key in mapping:
        if key not in allowed:
            raise doc.error(path + (key,), f"unknown key {key!r}" + did_you_mean(key, allowed),
                            hint="allowed: " + ", ".join(sorted(allowed)))


def _hash_files(folder: Path) -> tuple:
    """(relative path, sha256, mode) of every file under files/. Only regular files and folders, never
    a symbolic link (it could point out of the kind, at nothing, at itself, or at /dev/zero) nor a
    device, fifo or socket: each is refused naming the file. Files are opened with O_NOFOLLOW and
    checked again once open, so nothing swapped in between is read."""
    out = []
    if folder.is_symlink():
        raise SpecError("is a symbolic link; a kind's files/ must be a folder inside the kind", file=str(folder))
    if not folder.is_dir():
        return ()
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(dirs) + sorted(names):
            path = Path(root) / name
            if not name.isprintable():
                raise SpecError(f"{name!r}: a file name in files/ may hold no control character",
                                file=repr(str(path)))
            if path.is_symlink():
                raise SpecError(f"is a symbolic link (to {os.readlink(path)!r}); a kind's files/ holds only "
                                "regular files inside the kind folder", file=str(path),
                                hint="copy the file into files/ instead of linking it")
        for name in sorted(names):
            path = Path(root) / name
            rel = path.relative_to(folder.parent).as_posix()
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            except OSError as exc:
                raise SpecError(f"cannot read: {exc.strerror}", file=str(path)) from None
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise SpecError("is not a regular file (a device, fifo or socket); a kind's files/ holds "
                                    "only regular files", file=str(path))
                digest = hashlib.sha256()
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            mode = "755" if st.st_mode & 0o111 else "644"
            out.append((rel, digest.hexdigest(), mode))
    return tuple(out)


class _Refusals(list):
    """The independent refusals of one kind folder (issue 20: every mistake at once). `guard()` records a
    refusal and lets reading go on with what does not depend on it; `unread` names the parameters that
    were refused, so nothing that names them is refused again for that (a cascade)."""

    def __init__(self):
        super().__init__()
        self.unread: set = set()

    @contextmanager
    def guard(self):
        try:
            yield
        except SpecError as exc:
            self.append(exc)

    def raise_all(self) -> None:
        if len(self) == 1:
            raise self[0]
        if self:
            raise SpecErrors(sorted(self, key=lambda e: (e.file or "", e.line or 0)))


def load_kind(folder: Path) -> Kind:
    """A kind folder, every independent mistake of its kind.yaml reported at once (SpecErrors). A name
    that cannot be a kind, or a kind.yaml that is not a YAML mapping, stops the reading at once."""
    if not KIND_NAME.match(folder.name):
        # repr: a name holding a control character must not break (or forge) the message
        raise SpecError(f"{folder.name!r} is not a valid kind name: use lowercase letters, digits and . _ - "
                        "(it becomes part of image names and labels)", file=repr(str(folder.parent))
                        if not str(folder.parent).isprintable() else str(folder.parent))
    doc = load_file(folder / "kind.yaml")
    data = doc.data
    _require(doc, (), data, dict, "a mapping")
    refused = _Refusals()
    with refused.guard():
        _unknown(doc, (), data, KIND_KEYS)
    for key in ("description", "role"):
        if key not in data:
            refused.append(doc.error((key,), "missing required key"))
    role = data.get("role")
    if "role" in data and role not in ROLES:
        refused.append(doc.error(("role",), f"{role!r} is not a role", hint="allowed: " + ", ".join(ROLES)))
    cuda = data.get("compiles_cuda", "never")
    if cuda not in CUDA_MODES:
        refused.append(doc.error(("compiles_cuda",), f"{cuda!r} is not allowed", hint="allowed: " + ", ".join(CUDA_MODES)))
    params: dict[str, ParamSpec] = {}
    with refused.guard():
        given = _require(doc, ("params",), data.get("params", {}), dict, "a mapping")
        for pname, pdef in given.items():
            with refused.guard():
                refused.unread.add(pname)
                params[pname] = _param(doc, pname, pdef)
                refused.unread.discard(pname)
    cparam = data.get("compiles_cuda_param")
    if cparam is not None and cparam not in params and cparam not in refused.unread:
        refused.append(doc.error(("compiles_cuda_param",), f"{cparam!r} is not a parameter of this kind"))
    checks = []
    with refused.guard():
        for i, cdef in enumerate(_require(doc, ("checks",), data.get("checks", []), list, "a list")):
            with refused.guard():
                checks.append(_check(doc, folder, ("checks", i), cdef, params, refused.unread))
    versions = []
    with refused.guard():
        for vfield, dists in _require(doc, ("versions",), data.get("versions", {}), dict, "a mapping").items():
            with refused.guard():
                if not isinstance(vfield, str) or not VERSION_FIELD.match(vfield):
                    raise doc.error(("versions", vfield), "a version field is lower case letters, digits and _",
                                    hint="e.g. flash_attn: [flash-attn, flash_attn]")
                names = _strings(doc, ("versions", vfield), dists)
                if not names or not all(DIST_NAME.match(n) for n in names):
                    raise doc.error(("versions", vfield), "expected one or more distribution names as pip knows them")
                versions.append((vfield, names))
    facts = []
    with refused.guard():
        for fname, ref in _require(doc, ("facts",), data.get("facts", {}), dict, "a mapping").items():
            with refused.guard():
                if fname not in LAYER_FACTS:
                    raise doc.error(("facts", fname), f"{fname!r} is not a fact a layer can declare",
                                    hint="allowed: " + ", ".join(LAYER_FACTS))
                pname = ref[6:] if isinstance(ref, str) and ref.startswith("param:") else None
                if pname in refused.unread:
                    continue
                if pname not in params or params[pname].type != "version":
                    raise doc.error(("facts", fname), f"expected 'param:NAME' naming a version parameter, not {ref!r}")
                facts.append((fname, pname))
    if not (folder / "fragment.j2").is_file():
        refused.append(SpecError("layer kind has no fragment.j2", file=str(folder)))
    needs = provides = ()
    with refused.guard():
        needs = _strings(doc, ("needs",), data.get("needs", []))
    with refused.guard():
        provides = _strings(doc, ("provides",), data.get("provides", []))
    files = ()
    with refused.guard():
        files = _hash_files(folder / "files")
    family = data.get("base_family", [])
    with refused.guard():
        family = (family,) if isinstance(family, str) else tuple(_strings(doc, ("base_family",), family))
        wrong = [f for f in family if f not in FAMILIES]
        if wrong:
            raise doc.error(("base_family",), f"{wrong[0]!r} is not a base family", hint="allowed: " + ", ".join(FAMILIES))
    refused.raise_all()
    return Kind(name=folder.name, folder=folder, description=str(data["description"]), role=role,
                base_family=family, needs=needs, provides=provides, compiles_cuda=cuda,
                compiles_cuda_param=cparam, params=params, checks=tuple(checks),
                files=files, versions=tuple(versions), facts=tuple(facts))


def _param(doc: Doc, pname: str, pdef: Any) -> ParamSpec:
    path = ("params", pname)
    _require(doc, path, pdef, dict, "a mapping with a type")
    _unknown(doc, path, pdef, PARAM_KEYS)
    ptype = pdef.get("type")
    if pname == "apt" and ptype == "list":
        ptype = "apt"   # an apt list of an older site kind gets the Debian package name grammar too
    if ptype not in TYPES:
        raise doc.error(path + ("type",), f"{ptype!r} is not a parameter type", hint="allowed: " + ", ".join(TYPES))
    spec = ParamSpec(name=pname, type=ptype, required=bool(pdef.get("required", False)),
                     choices=tuple(pdef.get("choices", ())), doc=str(pdef.get("doc", "")))
    if "default" in pdef and pdef["default"] is not None:
        try:
            spec = ParamSpec(**{**spec.__dict__, "default": spec.convert(pdef["default"])})
        except ParamError as exc:
            raise doc.error(path + ("default",) + exc.path, exc.reason) from None
    return spec


def _check(doc: Doc, folder: Path, path: tuple, cdef: Any, params: dict, unread: set) -> CheckSpec:
    _require(doc, path, cdef, dict, "a mapping")
    _unknown(doc, path, cdef, CHECK_KEYS)
    if cdef.get("check") not in CHECK_TYPES:
        raise doc.error(path + ("check",), f"{cdef.get('check')!r} is not a check type",
                        hint="allowed: " + ", ".join(CHECK_TYPES))
    if not isinstance(cdef.get("id"), str):
        raise doc.error(path + ("id",), "every check needs an id")
    args = _require(doc, path + ("args",), cdef.get("args", {}), dict, "a mapping")
    if cdef["check"] == "jax" and args.get("test") not in JAX_TESTS:
        raise doc.error(path + ("args", "test"), f"{args.get('test')!r} is not a JAX test",
                        hint="allowed: " + ", ".join(JAX_TESTS))
    for key, value in args.items():
        if isinstance(value, str) and value.startswith("stack:") and value[6:] not in STACK_VALUES:
            raise doc.error(path + ("args", key), f"{value!r} names no value of the stack",
                            hint="allowed: " + ", ".join("stack:" + v for v in STACK_VALUES))
        named = [n for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)
                 for n in ([v[6:]] if v.startswith("param:") else re.findall(r"\{param:([^}]*)\}", v))]
        for pname in named:
            if pname not in params and pname not in unread:
                raise doc.error(path + ("args", key), f"{value!r} names no parameter of this kind ({pname!r})")
    return CheckSpec(id=f"{folder.name}.{cdef['id']}", check=cdef["check"], gpu=bool(cdef.get("gpu", False)),
                     args=tuple(sorted(args.items())), doc=str(cdef.get("doc", "")))


def load_kinds(layers_dir: Path) -> dict[str, Kind]:
    """Every kind folder of a layers/ folder; the refusals of all of them together."""
    if not layers_dir.is_dir():
        raise SpecError("layers folder not found", file=str(layers_dir))
    kinds, refused = {}, _Refusals()
    for folder in sorted(layers_dir.iterdir()):
        if folder.is_dir() and (folder / "kind.yaml").exists():
            try:
                kinds[folder.name] = load_kind(folder)
            except SpecErrors as exc:
                refused.extend(exc.errors)
            except SpecError as exc:
                refused.append(exc)
    refused.raise_all()
    return kinds


__all__ = ["Kind", "CheckSpec", "load_kind", "load_kinds", "dotted"]
