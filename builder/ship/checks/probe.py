"""Runs INSIDE an image (its own python, no network): measures what is there and runs the snippets
a build asked for. Reads one JSON request on stdin, prints one JSON document on stdout.
Standalone on purpose: it must not import imgbuild, only the standard library (Python >= 3.8).
It is imgbuild's one probe: the in-image checks, `imgbuild probe`/`lock` and the GPU node check
(scripts/gpu_node_check.py, which imports it by path) all measure through it."""

import json
import os
import platform
import re
import subprocess
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sh(argv, timeout=600, shell=False):
    try:
        p = subprocess.run(argv, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return {"rc": p.returncode, "out": ANSI.sub("", p.stdout.decode(errors="replace"))[-20000:]}
    except FileNotFoundError as exc:
        return {"rc": 127, "out": str(exc)}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "out": "timed out after %ss" % timeout}


def dists():
    try:
        import importlib.metadata as md
    except ImportError:
        return {}
    out = {}
    for d in md.distributions():
        name = (d.metadata["Name"] or "").lower().replace("_", "-")
        if name:
            out[name] = d.version
    return out


# torch's own view of itself, in a child process (a torch that fails to import must not take the probe
# down). The one measurement of torch, CUDA, cuDNN, NCCL and the arch list: lock, the in-image checks and
# the GPU node check all read this. cuDNN is spelled as a version (9.10.2), not torch's integer.
TORCH_FACTS = r"""
import json, torch
d = {"version": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
     "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
     "arch_list": torch.cuda.get_arch_list() if torch.version.cuda else [], "cudnn": None, "nccl": None,
     "nccl_available": False, "cuda_home": None}
try:
    v = torch.backends.cudnn.version() if torch.version.cuda and torch.backends.cudnn.is_available() else None
    if v:
        big = v >= 10000
        d["cudnn"] = "%d.%d.%d" % (v // (10000 if big else 1000), v % (10000 if big else 1000) // 100, v % 100)
except Exception as exc:
    d["cudnn_error"] = repr(exc)[:300]
try:
    d["nccl"] = ".".join(map(str, torch.cuda.nccl.version()[:3])) if torch.version.cuda else None
except Exception as exc:
    d["nccl_error"] = repr(exc)[:300]
try:
    from torch.utils.cpp_extension import CUDA_HOME
    d["cuda_home"] = CUDA_HOME
except Exception:
    pass
try:
    import torch.distributed as dist
    d["nccl_available"] = dist.is_available() and dist.is_nccl_available()
except Exception:
    pass
if d["cuda_available"]:
    p = torch.cuda.get_device_properties(0)
    d.update(device=p.name, capability="%d.%d" % (p.major, p.minor), sm_count=p.multi_processor_count,
             memory_gib=round(p.total_memory / 2**30, 1))
print(json.dumps(d))
"""


def torch_facts(python=None):
    res = sh([python or sys.executable, "-c", TORCH_FACTS], timeout=300)
    if res["rc"] != 0:
        return {"error": res["out"][-2000:]}
    return json.loads(res["out"].strip().splitlines()[-1])


def toolkit():
    """nvcc's version and the CUDA toolkit's (the image's CUDA_VERSION, else nvcc's release)."""
    out = {}
    for nvcc in ("nvcc", "/usr/local/cuda/bin/nvcc"):
        res = sh([nvcc, "--version"], timeout=60)
        m = re.search(r"release (\d+\.\d+), V([\d.]+)", res["out"]) if res["rc"] == 0 else None
        if m:
            out["nvcc"] = m.group(2)
            break
    cuda = os.environ.get("CUDA_VERSION") or (out["nvcc"].rsplit(".", 1)[0] if out.get("nvcc") else None)
    if cuda:
        out["cuda"] = cuda
    return out


def pip_constraint():
    """The torch pin pip applies: $PIP_CONSTRAINT (imgbuild's layers set it), else NGC's file (25.03+)."""
    path = os.environ.get("PIP_CONSTRAINT") or "/etc/pip/constraint.txt"
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    pin = next((l for l in lines if l.lower().startswith("torch==")), "no torch pin")
    return "%s (%s)" % (pin, path)


# CUDA fat binaries (the device code in an extension's .so): an ELF section .nv_fatbin holds containers
# (magic 0xBA55ED50: u32 magic, u16 version, u16 header size, u64 size of its entries), each entry a
# header (u16 kind: 1 PTX, 2 SASS cubin; u32 header size at 4; u64 payload size at 8; u32 arch at 28,
# e.g. 90; u64 flags at 40) and its payload. The flags mark arch-specific code (0x100000, sm_90a) and
# family-specific code (0x200000, sm_100f). Layout measured against cuobjdump --list-elf --list-ptx
# of nvcc 13.2 output (tests/test_arch_coverage.py checks the two agree).
FATBIN_MAGIC = 0xBA55ED50
ARCH_SPECIFIC, FAMILY_SPECIFIC = 0x100000, 0x200000


def _elf_section(f, name):
    """(offset, size) of the named section of an ELF64 little-endian file, or None."""
    import struct
    f.seek(0)
    ident = f.read(64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", ident, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if not shoff or shentsize < 64 or shnum > 65535 or shstrndx >= shnum:
        return None
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        return None
    heads = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
    f.seek(heads[shstrndx][4])
    names = f.read(min(heads[shstrndx][5], 1 << 20))
    for h in heads:
        end = names.find(b"\0", h[0])
        if names[h[0]:end if end >= 0 else None] == name.encode():
            return h[4], h[5]
    return None


def fatbin_targets(data):
    """The device code in a .nv_fatbin section: sorted names such as sm_90, sm_90a, compute_90."""
    import struct
    found, pos = set(), 0
    while pos + 16 <= len(data):
        magic, _, hsize, size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC or hsize < 16:
            pos += 8          # containers are 8-aligned; skip padding between them
            continue
        entry, end = pos + hsize, min(pos + hsize + size, len(data))
        while entry + 48 <= end:
            kind, _, ehsize, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            flags = struct.unpack_from("<Q", data, entry + 40)[0]
            if ehsize < 48:
                break
            suffix = "a" if flags & ARCH_SPECIFIC else "f" if flags & FAMILY_SPECIFIC else ""
            if kind in (1, 2):
                found.add("%s_%d%s" % ("compute" if kind == 1 else "sm", arch, suffix))
            entry += ehsize + payload
        pos = end
    return sorted(found)


def _shared_objects(root):
    """The binaries a root names: a folder's shared objects and ELF executables (walked: a bin/ of CUDA
    programs such as nccl-tests' is read as a lib/ is), a package's shared objects, or an extension
    module's own file (never the whole site-packages an extension module lies in). Found without importing."""
    import importlib.util
    if root.startswith("/"):
        places = [root]
    else:
        try:
            spec = importlib.util.find_spec(root)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return
        places = list(spec.submodule_search_locations or []) or ([spec.origin] if spec.origin else [])
    for place in places:
        if os.path.isfile(place):
            yield place
            continue
        folder = root.startswith("/")
        for dirpath, _, files in os.walk(place):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                if name.endswith(".so") or ".so." in name or (folder and _elf_program(path)):
                    yield path


def _elf_program(path):
    """An executable ELF file (a script is not one)."""
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def cuda_code(roots, limit=5000):
    """{root: {file: [targets]}} for every shared object the roots (import names or folders) hold that
    has CUDA device code; files without any are left out. At most `limit` files are read in all."""
    out, seen = {}, 0
    for root in roots:
        found = out.setdefault(root, {})
        for path in _shared_objects(root):
            if seen >= limit:
                break
            seen += 1
            try:
                with open(path, "rb") as f:
                    where = _elf_section(f, ".nv_fatbin")
                    if where:
                        f.seek(where[0])
                        targets = fatbin_targets(f.read(where[1]))
                        if targets:
                            found[path] = targets
            except OSError:
                continue
    return out


def _dist_objects(name):
    """The .so files a distribution installed (its RECORD): what a pip layer added, wherever it lies."""
    try:
        import importlib.metadata as md
        dist = md.distribution(re.split(r"[\s\[<>=!~;@(]", name.strip(), 1)[0])
    except Exception:
        return
    for f in dist.files or []:
        if f.name.endswith(".so") or ".so." in f.name:
            yield str(f.locate())


def copy_cpu_code(req, limit=5000, max_bytes=4 << 30):
    """Copies the shared objects of the roots (import names, folders) and distributions asked for into
    req["out"] (a folder the host mounted), for the host to read their instructions (builder/ship/checks/
    isa.py: the libraries that decode them are not in the image). {path in the image: copy's name}."""
    import shutil
    out, total = {}, 0
    paths = [p for root in req.get("roots", []) for p in _shared_objects(root)]
    paths += [p for name in req.get("dists", []) for p in _dist_objects(name)]
    for path in paths:
        real = os.path.realpath(path)
        if real in out or not os.path.isfile(real) or len(out) >= limit:
            continue
        size = os.path.getsize(real)
        if total + size > max_bytes:
            out[real] = {"error": "not copied: more than %d GiB of shared objects asked for" % (max_bytes >> 30)}
            continue
        name = "%05d.so" % len(out)
        shutil.copyfile(real, os.path.join(req["out"], name))
        total += size
        out[real] = {"copy": name, "size": size}
    return out


def proven_imports(facts):
    """{module: how} for the imports a fresh interpreter of this image already made, with this environment
    and working folder: torch's facts import torch, and `python -m deepspeed.env_report` imports the
    deepspeed package before its first line runs. Importing them again proves nothing more and costs
    seconds in every layer's checks (torch 1.7 s, deepspeed 2.7 s in cpu-smoke, measured 2026-12-06)."""
    proven = {}
    if facts.get("torch") and "error" not in facts["torch"]:
        proven["torch"] = "the torch facts"
    if (facts.get("ds_report") or {}).get("rc") == 0:
        proven["deepspeed"] = "ds_report"
    return proven


def os_release():
    try:
        with open("/etc/os-release") as f:
            rel = dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)
    except OSError:
        return None
    return "%s-%s" % (rel.get("ID", "").strip('"'), rel.get("VERSION_ID", "").strip('"'))


def main():
    req = json.load(sys.stdin)
    facts = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "env": dict(os.environ),
        "dists": dists(),
        "imports": {},
        "snippets": {},
        "commands": {},
        "files": {},
        "os": os_release(),
        "pip_constraint": pip_constraint(),
        "toolkit": toolkit(),
    }
    dpkg = sh(["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"], timeout=120)
    facts["dpkg"] = dict(line.split("\t", 1) for line in dpkg["out"].splitlines() if "\t" in line) if dpkg["rc"] == 0 else {}
    if "torch" in facts["dists"]:
        facts["torch"] = torch_facts()
    if req.get("ds_report"):
        facts["ds_report"] = sh([sys.executable, "-m", "deepspeed.env_report"], timeout=600)
    proven = proven_imports(facts)
    for mod in req.get("imports", []):
        if mod in proven:
            facts["imports"][mod] = {"ok": True, "out": "", "by": proven[mod]}
            continue
        res = sh([sys.executable, "-c", "import " + mod], timeout=600)
        facts["imports"][mod] = {"ok": res["rc"] == 0, "out": res["out"][-3000:]}
    if req.get("pip_check"):
        facts["pip_check"] = sh([sys.executable, "-m", "pip", "check"], timeout=300)
    for name, code in sorted(req.get("snippets", {}).items()):
        facts["snippets"][name] = sh([sys.executable, "-c", code], timeout=900)
    for name, command in sorted(req.get("commands", {}).items()):
        facts["commands"][name] = sh(command, timeout=900, shell=True)
    if req.get("cuda_code"):
        facts["cuda_code"] = cuda_code(req["cuda_code"])
    if req.get("cpu_code"):
        facts["cpu_code"] = copy_cpu_code(req["cpu_code"])
    for path in req.get("files", []):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                facts["files"][path] = f.read(100000)
        except OSError:
            facts["files"][path] = None
    json.dump(facts, sys.stdout)


if __name__ == "__main__":
    main()
