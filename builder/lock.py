"""`imgbuild probe` and `imgbuild lock`: measure what a base image really holds, and record what each
base resolved to (its digest) with those measurements in stacks.lock.yaml beside stacks.yaml.

Preflight prefers measured facts over declared and catalog ones. The probe runs the image with no
network and only its own interpreter; an image without Python (the mirrored Debian base) reports
its OS, and everything Python would have measured stays unknown rather than "not installed".
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import yaml

from .bases import resolve
from .engine import Engine
from .errors import EngineError, ImgbuildError, SpecError
from .lockfile import LOCK_VERSION, load_lock, lock_path
from .spec import Spec

# Runs inside the image; standard library only, Python >= 3.6. Prints one JSON object.
PROBE = r'''
import json, os, platform, re, subprocess
out = {"python": platform.python_version()}
try:
    import importlib.metadata as md
except ImportError:
    md = None
def dist(*names):
    for n in names:
        try:
            return md.version(n)
        except Exception:
            pass
    return None
if md is not None:
    for key, names in (("torch", ["torch"]), ("numpy", ["numpy"]), ("pydantic", ["pydantic"]),
                       ("deepspeed", ["deepspeed"]), ("apex", ["apex"]),
                       ("transformer_engine", ["transformer_engine", "transformer-engine"])):
        out[key] = dist(*names)
if out.get("torch"):
    try:
        import torch
        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.version.cuda
        flags = getattr(torch._C, "_cuda_getArchFlags", lambda: "")() or ""
        if flags:
            out["torch_archs"] = ";".join(flags.split())
        v = torch.backends.cudnn.version() if torch.version.cuda else None
        if v:
            big = v >= 10000
            out["cudnn"] = "%d.%d.%d" % (v // (10000 if big else 1000), v % (10000 if big else 1000) // 100, v % 100)
        if torch.version.cuda:
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()[:3]))
    except Exception as exc:
        out["torch_error"] = repr(exc)[:300]
for nvcc in ("nvcc", "/usr/local/cuda/bin/nvcc"):
    try:
        text = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()
    except OSError:
        continue
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", text)
    if m:
        out["nvcc"] = m.group(2)
        break
cuda = os.environ.get("CUDA_VERSION") or (out["nvcc"].rsplit(".", 1)[0] if out.get("nvcc") else None)
if cuda:
    out["cuda"] = cuda
# The constraint pip applies: $PIP_CONSTRAINT (imgbuild's layers set it), else NGC's file (25.03+).
path = os.environ.get("PIP_CONSTRAINT") or "/etc/pip/constraint.txt"
try:
    lines = open(path).read().splitlines()
    pin = next((l for l in lines if l.lower().startswith("torch==")), "no torch pin")
    out["pip_constraint"] = "%s (%s)" % (pin, path)
except OSError:
    out["pip_constraint"] = None
try:
    rel = dict(l.split("=", 1) for l in open("/etc/os-release").read().splitlines() if "=" in l)
    out["os"] = "%s-%s" % (rel.get("ID", "").strip('"'), rel.get("VERSION_ID", "").strip('"'))
except OSError:
    pass
print(json.dumps(out))
'''
# No Python in the image: report the OS only.
WRAPPER = ('for p in python3 python; do if command -v "$p" >/dev/null 2>&1; then exec "$p" -; fi; done; '
           '. /etc/os-release 2>/dev/null; printf \'{"os": "%s-%s"}\\n\' "${ID:-unknown}" "${VERSION_ID:-}"')


def probe(engine: Engine, ref: str) -> dict:
    """Measure an image: {fact: value or None}. Facts it could not measure are left out."""
    res = engine.run_container(ref, ["sh", "-c", WRAPPER], input=PROBE, timeout=600)
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode != 0 or not lines:
        raise EngineError(f"probing {ref} failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-600:]}")
    facts = json.loads(lines[-1])
    return {k: (None if v is None else str(v)) for k, v in sorted(facts.items())}


def lock(spec: Spec, bases: list[str], engine: Engine, say: Callable[[str], None]) -> tuple[Path, list[ImgbuildError]]:
    """Resolve and probe each named base, then write the lock file (atomically; entries of other bases
    kept). Returns the path and the failures (a base that failed keeps its previous entry, if any)."""
    old = load_lock(spec.file)
    entries = {name: asdict(rec) for name, rec in (old.bases if old else {}).items()}
    failures: list[ImgbuildError] = []
    for name in bases:
        base = spec.bases[name]
        users = [s for s, st in spec.stacks.items() if st.base.name == name]
        ref = base.ref(spec.site)
        try:
            digest = resolve(spec, users[:1], use_lock=False).require()[name] if users else base.digest
            if not digest:
                raise SpecError(f"base {name!r} is used by no stack and declares no digest; nothing to resolve")
            facts = probe(engine, f"{ref}@{digest}")
        except ImgbuildError as exc:
            failures.append(exc)
            say(f"{name}: not locked: {exc.message}")
            continue
        entries[name] = {"image": ref, "digest": digest, "probed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         "facts": facts}
        say(f"{name}: {ref}@{digest}: " + ", ".join(f"{k} {v}" for k, v in facts.items() if v is not None))
    path = lock_path(spec.file)
    text = ("# Written by `imgbuild lock`: what each base resolved to and what was measured inside it.\n"
            "# null: measured, not installed; a fact that is missing was not measured. Do not edit.\n"
            + yaml.safe_dump({"version": LOCK_VERSION, "bases": dict(sorted(entries.items()))}, sort_keys=False))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".stacks.lock.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return path, failures
