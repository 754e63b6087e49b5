"""In-image checks: one probe run measures the image, small functions judge the measurements.

A node's checks are its kind's and those of every layer beneath it, so a child image re-runs its
parents' checks. GPU checks are never faked: without a GPU they are reported as skipped, with why.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from builder.ship.engine import Engine
from builder.errors import EngineError
from builder.load.kinds import CheckSpec
from builder.ship.checks import jaxcheck
from builder.ship.sources import MARKER

PROBE = Path(__file__).with_name("probe.py")
CPU_OUT = "/imgbuild-out"   # where the probe copies shared objects for the cpu-isa check (a host folder)
OP_LINE = re.compile(r"^(\S+) \.+ \[(YES|NO)\] \.+ \[(OKAY|NO)\]\s*$")


@dataclass(frozen=True)
class CheckResult:
    id: str
    status: str          # passed | failed | skipped
    detail: str          # what was measured or why it failed / was skipped
    gpu: bool = False

    @property
    def ok(self) -> bool:
        return self.status != "failed"


def parse_ds_report(text: str) -> dict:
    """ds_report's op table: {op: {"installed": bool, "compatible": bool}} (colour codes already stripped)."""
    ops = {}
    for line in text.splitlines():
        m = OP_LINE.match(line.strip())
        if m:
            ops[m.group(1)] = {"installed": m.group(2) == "YES", "compatible": m.group(3) == "OKAY"}
    return ops


def _args(spec: CheckSpec) -> dict:
    return dict(spec.args)


def request(checks: tuple[CheckSpec, ...], gpu: bool) -> dict:
    """What the probe must measure or run for these checks."""
    req: dict = {"imports": [], "snippets": {}, "commands": {}, "files": ["/etc/imgbuild/constraints.txt"],
                 "pip_check": False, "ds_report": False}
    for spec in checks:
        if spec.gpu and not gpu:
            continue
        a = _args(spec)
        if spec.check == "import" and a.get("module"):
            req["imports"].append(a["module"])
        elif spec.check == "pip-check":
            req["pip_check"] = True
        elif spec.check == "ds-report":
            req["ds_report"] = True
        elif spec.check == "python" and _op_wanted(a):
            req["snippets"][spec.id] = a["code"]
        elif spec.check == "jax" and _op_wanted(a):
            req["snippets"][spec.id] = jaxcheck.code(a["test"], a)
        elif spec.check == "command" and a.get("command") and _op_wanted(a):
            req["commands"][spec.id] = a["command"]
        elif spec.check == "source-commit" and a.get("path"):
            req["files"].append(f"{a['path'].rstrip('/')}/{MARKER}")
        elif spec.check == "arch-coverage" and a.get("archs") and _roots(a):
            req.setdefault("cuda_code", []).extend(_roots(a))
        elif spec.check == "cpu-isa" and a.get("baseline") and (_roots(a) or _dists(a)):
            code = req.setdefault("cpu_code", {"roots": [], "dists": [], "out": CPU_OUT})
            code["roots"] = sorted(set(code["roots"]) | set(_roots(a)))
            code["dists"] = sorted(set(code["dists"]) | set(_dists(a)))
    req["imports"] = sorted(set(req["imports"]))
    if "cuda_code" in req:
        req["cuda_code"] = sorted(set(req["cuda_code"]))
    return req


def _dists(a: dict) -> list[str]:
    """The distributions (names or requirement strings) whose installed shared objects a cpu-isa check reads."""
    given = a.get("dists")
    return [given] if isinstance(given, str) else [d for d in (given or []) if isinstance(d, str)]


def _roots(a: dict) -> list[str]:
    """Where an arch-coverage check reads binaries: import names or folders (one, or a list)."""
    given = a.get("packages")
    return [given] if isinstance(given, str) else list(given or [])


def _op_wanted(a: dict) -> bool:
    """A snippet runs unless its layer turned it off: when_op names an op not prebuilt, or `when` (a
    parameter such as sshd) is false."""
    if "when" in a and not a["when"]:
        return False
    return not a.get("when_op") or a["when_op"] in (a.get("ops") or [])


# -- judges: one small function per check type ---------------------------------------------------

def _import(a: dict, f: dict) -> tuple[str, str]:
    if not a.get("module"):
        return "skipped", "no module named for this layer"
    res = f["imports"].get(a["module"])
    if res and res["ok"]:
        return "passed", f"import {a['module']} ok" + (f" (imported by {res['by']}, a fresh interpreter)" if res.get("by") else "")
    return "failed", f"import {a['module']} failed: {(res or {}).get('out', '').strip()[-600:]}"


def _dist_version(a: dict, f: dict) -> tuple[str, str]:
    if not a.get("dist"):
        return "skipped", "no distribution named for this layer"
    name = a["dist"].lower().replace("_", "-")
    found = f["dists"].get(name)
    if found is None:
        return "failed", f"{a['dist']} is not installed"
    if a.get("equals") is None:
        return "passed", f"{a['dist']} {found} (no version pinned; recorded)"
    if found != str(a["equals"]):
        return "failed", f"{a['dist']} is {found}, the spec pins {a['equals']}"
    return "passed", f"{a['dist']} {found}"


def _pip_check(a: dict, f: dict) -> tuple[str, str]:
    res = f.get("pip_check") or {"rc": 1, "out": "not run"}
    return ("passed" if res["rc"] == 0 else "failed"), res["out"].strip()[-1500:]


def _ds_report(a: dict, f: dict) -> tuple[str, str]:
    res = f.get("ds_report") or {"rc": 1, "out": "not run"}
    if res["rc"] != 0:
        return "failed", "ds_report failed: " + res["out"].strip()[-1500:]
    ops = parse_ds_report(res["out"])
    if not ops:
        return "failed", "ds_report printed no op table"
    problems = []
    for op in a.get("installed") or []:
        st = ops.get(op)
        if not st or not (st["installed"] and st["compatible"]):
            problems.append(f"{op} must be prebuilt and compatible, ds_report says "
                            + (f"installed {'YES' if st['installed'] else 'NO'}, compatible {'OKAY' if st['compatible'] else 'NO'}" if st else "nothing"))
    for op in a.get("compatible") or []:
        st = ops.get(op)
        if not st or not st["compatible"]:
            problems.append(f"{op} must be compatible (JIT-buildable), ds_report says "
                            + ("NO" if st else "nothing"))
    warnings = [l.strip() for l in res["out"].splitlines() if "[WARNING]" in l]
    summary = ", ".join(f"{op} {'YES' if s['installed'] else 'NO'}/{'OKAY' if s['compatible'] else 'NO'}"
                        for op, s in sorted(ops.items()) if op in set(a.get("installed") or []) | set(a.get("compatible") or []))
    if problems:
        return "failed", "; ".join(problems) + (" | " + " ".join(warnings)[:600] if warnings else "")
    return "passed", summary or f"{len(ops)} ops reported"


def _env(a: dict, f: dict) -> tuple[str, str]:
    """Literal values must be equal; an extended PATH-like value must start with what was prepended and
    end with what was appended (the parent's entries lie between)."""
    wrong = []
    for k, v in a.get("expected") or []:
        have = f["env"].get(k)
        if isinstance(v, dict):
            pre, post = ":".join(v.get("prepend") or []), ":".join(v.get("append") or [])
            ok = have is not None and have.startswith(pre) and have.endswith(post) and "::" not in have
            want = f"{pre + ':' if pre else ''}...{':' + post if post else ''}"
        else:
            ok, want = have == v, v
        if not ok:
            wrong.append(f"{k}={have!r} (want {want!r})")
    return ("failed", "; ".join(wrong)) if wrong else ("passed", f"{len(a.get('expected') or [])} variables set")


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")   # as probe.dists() keys them


def _requirements(a: dict, f: dict) -> tuple[str, str]:
    """Each pinned requirement installed at its version (a git requirement or a bare name: installed at all;
    a range: at a version inside it), and each removed package gone."""
    from packaging.requirements import Requirement
    wrong, seen = [], []
    for raw in a.get("installed") or []:
        req = Requirement(raw)
        have = f["dists"].get(_norm(req.name))
        exact = [s.version for s in req.specifier if s.operator == "==" and len(req.specifier) == 1]
        if have is None:
            wrong.append(f"{req.name} is not installed")
        elif exact and have != exact[0]:
            wrong.append(f"{req.name} is {have}, the spec pins {exact[0]}")
        elif not exact and not req.url and req.specifier and not req.specifier.contains(have, prereleases=True):
            # Intent (a range): the lock's check holds the exact version; this one holds the range itself.
            wrong.append(f"{req.name} is {have}, outside the range stacks.yaml states ({req.specifier})")
        else:
            seen.append(f"{req.name} {have}")
    absent = a.get("absent") or {}
    for name in (absent.get("packages") if isinstance(absent, dict) else absent) or []:
        if _norm(name) in f["dists"]:
            wrong.append(f"{name} {f['dists'][_norm(name)]} is still installed, though the layer removes it")
    if wrong:
        return "failed", "; ".join(wrong)
    return "passed", ", ".join(seen) or "nothing removed is left"


def _snippet(kind: str) -> Callable[[dict, dict, str], tuple[str, str]]:
    def judge(a: dict, f: dict, cid: str) -> tuple[str, str]:
        if kind == "python" and not _op_wanted(a):
            return "skipped", (f"op {a['when_op']} is not prebuilt in this layer" if a.get("when_op")
                               else "turned off for this layer")
        if kind == "command" and not a.get("command"):
            return "skipped", "no command given for this layer"
        if kind == "command" and not _op_wanted(a):
            return "skipped", "turned off for this layer"
        res = f["snippets" if kind == "python" else "commands"].get(cid)
        if res is None:
            return "failed", "not run"
        return ("passed" if res["rc"] == 0 else "failed"), (f"exit {res['rc']}: " if res["rc"] else "") + res["out"].strip()[-1500:]
    return judge


def _source_commit(a: dict, f: dict) -> tuple[str, str]:
    path = f"{a['path'].rstrip('/')}/{MARKER}"
    text = f["files"].get(path)
    if not text:
        return "failed", f"{path} is missing: the source was not installed from a verified export"
    commit = text.split()[0]
    if commit != a["commit"]:
        return "failed", f"image holds commit {commit}, the spec pins {a['commit']}"
    return "passed", f"commit {commit}"


def _torch_unchanged(a: dict, f: dict) -> tuple[str, str]:
    pinned = (f["files"].get("/etc/imgbuild/constraints.txt") or "").splitlines()
    want = next((l.split("==", 1)[1].strip() for l in pinned if l.lower().startswith("torch==")), None)
    have = f["dists"].get("torch")
    if want is None:
        return "failed", "/etc/imgbuild/constraints.txt records no torch version"
    if have != want:
        return "failed", f"torch is {have}, but the base layer recorded {want}: something replaced it"
    return "passed", f"torch {have} as recorded by the base layer"


ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def wanted_code(arch_list: str) -> list[str]:
    """The device code a TORCH_CUDA_ARCH_LIST asks the compilers for: '8.0;9.0a+PTX' -> sm_80, sm_90a,
    compute_90a. Separators as torch reads them (';' or spaces)."""
    out = []
    for entry in re.split(r"[;\s]+", arch_list.strip()):
        m = ARCH.match(entry)
        if not m:
            raise ValueError(f"{entry!r} is not an arch of TORCH_CUDA_ARCH_LIST (e.g. 9.0, 9.0a, 10.0f, 9.0+PTX)")
        arch = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        out.append(f"sm_{arch}")
        if m.group(4):
            out.append(f"compute_{arch}")
    return out


def _arch_coverage(a: dict, f: dict) -> tuple[str, str]:
    """Every extension binary holding CUDA code has code for every arch the stack declared: SASS for
    each, PTX where '+PTX' asks for it (read from the binaries' fat binaries, not from the build's
    word). Code for archs nobody declared is reported, not failed."""
    if not a.get("archs"):
        return "skipped", "this layer compiles no CUDA code for this stack"
    if not _roots(a):
        return "skipped", "the layer names no module whose binaries could be read (set its module)"
    need = wanted_code(a["archs"])
    roots = _roots(a)
    code = {path: targets for root in roots for path, targets in ((f.get("cuda_code") or {}).get(root) or {}).items()}
    where = ", ".join(roots)
    if not code:
        if a.get("require_code", True):
            return "failed", f"no CUDA device code in any shared object of {where}, though the stack declares " \
                             f"TORCH_CUDA_ARCH_LIST={a['archs']}"
        return "passed", f"no CUDA device code in {where} (its compiled ops are CPU only)"
    missing, extra = [], set()
    for path, targets in sorted(code.items()):
        lacks = [t for t in need if t not in targets]
        if lacks:
            missing.append(f"{path} lacks {', '.join(lacks)} (has {', '.join(targets)})")
        extra.update(t for t in targets if t not in need)
    found = f"{len(code)} binar{'y' if len(code) == 1 else 'ies'} with CUDA code in {where}"
    note = f"; not declared: {', '.join(sorted(extra))}" if extra else ""
    if missing:
        return "failed", (f"the stack declares TORCH_CUDA_ARCH_LIST={a['archs']} ({', '.join(need)}), but "
                          + "; ".join(missing[:8]) + (f"; and {len(missing) - 8} more" if len(missing) > 8 else "")
                          + note)
    return "passed", f"{found}, each with {', '.join(need)}{note}"


def _cpu_isa(a: dict, f: dict) -> tuple[str, str]:
    """No shared object the layer installed uses an instruction beyond the stack's CPU baseline, unless the
    file chooses its code path at run time (then what it holds beyond is reported). Read from the binaries
    (checks/isa.py), as arch-coverage reads the device code."""
    from builder.core import cpubaseline
    from builder.ship.checks import isa
    read = f.get("cpu_isa") or {}
    platform = read.get("platform")
    level = next((cpubaseline.level(n) for n in a.get("baseline") or [] if cpubaseline.level(n)
                  and cpubaseline.level(n).platform == platform), None)
    if level is None:
        return "skipped", f"no CPU baseline for {platform or 'this platform'}"
    where = ", ".join(_roots(a) + _dists(a))
    files = read.get("files") or []
    if not files:
        return "passed", f"no shared object in {where}: no compiled code to hold to {level.name}"
    refused, dispatched = isa.beyond(files, level)
    unread = [f"{x['path']} ({x['error']})" for x in files if x["error"]]
    said = f"{len(files)} shared object{'s' if len(files) != 1 else ''} of {where} read"
    notes = ""
    if dispatched:
        notes += "; chosen at run time (the file asks the CPU), not refused: " + "; ".join(
            f"{p}: {', '.join(cpubaseline.pretty(x.feature) for x in found)} ({next(x['dispatch'] for x in files if x['path'] == p)})"
            for p, found in sorted(dispatched.items())[:4])
    if unread:
        notes += "; not read: " + "; ".join(unread[:4])
    if refused:
        lines = [f"{p}: {', '.join(str(x) for x in found[:4])}" for p, found in sorted(refused.items())]
        return "failed", (f"code beyond the CPU baseline {level.name} ({platform}), which nodes of that level "
                          f"may not run (SIGILL): " + "; ".join(lines[:6])
                          + (f"; and {len(lines) - 6} more files" if len(lines) > 6 else "") + notes)
    return "passed", f"{said}, none beyond {level.name}{notes}"


JUDGES: dict[str, Callable] = {
    "import": _import, "dist-version": _dist_version, "pip-check": _pip_check, "ds-report": _ds_report,
    "env": _env, "source-commit": _source_commit, "torch-unchanged": _torch_unchanged,
    "requirements": _requirements, "arch-coverage": _arch_coverage, "cpu-isa": _cpu_isa,
}
SNIPPETS = {"python": _snippet("python"), "jax": _snippet("python"), "command": _snippet("command")}


def judge(checks: tuple[CheckSpec, ...], facts: dict, gpu: bool, emulated: str | None = None) -> list[CheckResult]:
    """emulated: how the image runs when it runs under QEMU ("linux/arm64 on a linux/amd64 engine")."""
    results = []
    for spec in checks:
        if spec.gpu and (not gpu or emulated):
            why = (f"skipped: needs a GPU, and this image runs under QEMU emulation ({emulated}), where no GPU "
                   "check can pass" if emulated else "skipped: needs a GPU (none on this machine)")
            results.append(CheckResult(spec.id, "skipped", why, True))
            continue
        a = _args(spec)
        if spec.check in SNIPPETS:
            status, detail = SNIPPETS[spec.check](a, facts, spec.id)
        else:
            status, detail = JUDGES[spec.check](a, facts)
        results.append(CheckResult(spec.id, status, detail, spec.gpu))
    return results


def probe(engine: Engine, image: str, checks: tuple[CheckSpec, ...], gpu: bool, platform: str | None = None) -> dict:
    """Run the probe in the image (no network), on the image's platform, and return its measurements. Where
    a cpu-isa check asks, the probe copies the shared objects out to a folder of the host, whose code is
    read here (checks/isa.py) and the copies deleted."""
    req = request(checks, gpu)
    with tempfile.TemporaryDirectory(prefix="imgbuild-cpu-code-") as out:
        writable = [(out, CPU_OUT)] if "cpu_code" in req else []
        res = engine.run_container(image, ["python", "/imgbuild-probe.py"], mounts=[(str(PROBE), "/imgbuild-probe.py")],
                                   gpus=gpu, input=json.dumps(req), timeout=3600,
                                   platform=platform, writable=writable)
        if res.returncode != 0:
            raise EngineError(f"the probe could not run in {image} (exit {res.returncode}): {res.stderr.strip()[-800:]}")
        try:
            facts = json.loads(res.stdout)
        except ValueError:
            raise EngineError(f"the probe in {image} printed no JSON: {res.stdout[-400:]}{res.stderr[-400:]}") from None
        if "cpu_code" in req:
            facts["cpu_isa"] = read_cpu_code(facts.get("cpu_code") or {}, Path(out), platform or engine.platform())
    return facts


def read_cpu_code(copied: dict, folder: Path, platform: str) -> dict:
    """The instructions of each shared object the probe copied to the folder ({path in the image: copy})."""
    from builder.ship.checks import isa
    files = []
    for path, got in sorted(copied.items()):
        if got.get("copy"):
            files.append(isa.read(folder / got["copy"], shown=path).to_json())
        else:
            files.append(isa.FileIsa(path=path, error=got.get("error", "not copied")).to_json())
    return {"platform": platform, "files": files}


def run_checks(engine: Engine, image: str, checks: tuple[CheckSpec, ...], gpu: bool, platform: str | None = None,
               emulated: str | None = None) -> tuple[list[CheckResult], dict]:
    """The checks of an image, run on its platform: natively, or under emulation (`emulated` says how),
    where GPU checks are skipped with that reason."""
    gpu = gpu and not emulated
    facts = probe(engine, image, checks, gpu, platform)
    return judge(checks, facts, gpu, emulated), facts


__all__ = ["CheckResult", "run_checks", "judge", "request", "parse_ds_report", "wanted_code", "asdict"]
