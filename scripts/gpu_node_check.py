#!/usr/bin/env python3
"""Run imgbuild's GPU checks natively on a GPU node: in this python, with no container engine.

What it does, in order (each torch step in a child process of its own, with a time limit):
  * node facts: nvidia-smi (driver, GPU, memory), nvcc, whether Python.h is there for JIT builds;
  * torch facts: version, CUDA, cuDNN, NCCL, device name, capability, arch list;
  * a bf16 matmul timing (n x n x n, TFLOP/s);
  * imgbuild's node check, one rank per GPU with NCCL: builder/nodecheck/worker.py, the one code path that
    `imgbuild node-check` runs in an image (environment, matmul against float64, all-reduce, broadcast and
    all-gather, all-reduce bus bandwidth, DeepSpeed ZeRO-2, Megatron-Core tensor and pipeline parallel);
  * every `gpu: true` check of layers/*/kind.yaml whose modules are importable here (the others are
    skipped, naming the missing module). A check's `when_op` is ignored here: DeepSpeed ops that an
    image would prebuild are JIT-compiled instead (TORCH_CUDA_ARCH_LIST from the GPU when unset).

Each check prints PASS, FAIL or SKIP with a one-line reason and its time; the last line is
"N passed, N failed, N skipped". Exit status 1 if any check failed. With --json PATH, or with $OUT
set, the results are also written as JSON (default $OUT/gpu-checks.json).

Standard library only, except PyYAML for reading the layer kinds (their checks are skipped, with that
reason, where PyYAML is missing). Without a GPU every GPU step is skipped with the reason.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT_TAG = "@@GPU_CHECK_RESULT "
NODE_CHECK_TAG = "@@IMGBUILD_NODE_CHECK "   # builder/nodecheck/worker.py's report line
CUDA_MATH_HEADERS = ("cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h", "cusolver_common.h")
WATCHED_DISTS = ("torch", "triton", "deepspeed", "megatron-core", "transformer-engine", "apex", "pydantic",
                 "pydantic-core", "numpy", "ninja", "pyyaml")
STATUS_WORD = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}

# -- child programs (run with sys.executable -c; each prints one RESULT_TAG line of JSON) ----------

def _load_probe():
    """imgbuild's one probe (builder/ship/checks/probe.py; standard library only), loaded by path: this script
    measures torch, CUDA, cuDNN and NCCL exactly as lock and the in-image checks do."""
    spec = importlib.util.spec_from_file_location("imgbuild_probe", ROOT / "builder" / "ship" / "checks" / "probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The probe's torch program, with its result also printed as this script's tagged line.
TORCH_FACTS = _load_probe().TORCH_FACTS + 'print("@@GPU_CHECK_RESULT " + json.dumps(d))\n'


BF16_MATMUL = r'''
import json, os, torch
n, iters = int(os.environ["GPU_CHECK_N"]), int(os.environ["GPU_CHECK_ITERS"])
# correctness first, on a small product against fp32
a32, b32 = torch.randn(512, 512, device="cuda"), torch.randn(512, 512, device="cuda")
ref, got = a32 @ b32, (a32.bfloat16() @ b32.bfloat16()).float()
rel = float((got - ref).norm() / ref.norm())
assert rel < 2e-2, "bf16 matmul differs from fp32 by %.3g (relative)" % rel
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    c = a @ b
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(iters):
    c = a @ b
end.record()
torch.cuda.synchronize()
ms = start.elapsed_time(end) / iters
assert torch.isfinite(c).all(), "non-finite values in the product"
tflops = 2 * n ** 3 / (ms / 1000) / 1e12
print("@@GPU_CHECK_RESULT " + json.dumps({"tflops": round(tflops, 1), "ms": round(ms, 3),
      "detail": "%dx%dx%d bf16: %.1f TFLOP/s (%.2f ms each, mean of %d after 3 warm-ups; rel. err vs fp32 %.1e)"
      % (n, n, n, tflops, ms, iters, rel)}))
'''

# -- plumbing ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_child(argv, env, timeout):
    """Run argv in a session of its own; on timeout kill that whole group (ninja, nvcc...)."""
    t0 = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(ROOT))
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        rc = None
    text = out.decode(errors="replace")
    result = None
    for line in text.splitlines():
        if line.startswith(RESULT_TAG):
            try:
                result = json.loads(line[len(RESULT_TAG):])
            except ValueError:
                pass
    return rc, text, result, time.time() - t0


def tail(text, n=25):
    lines = [l for l in text.splitlines() if not l.startswith(RESULT_TAG)]
    return "\n".join(lines[-n:])


def last_error_line(text):
    """The exception that ended a child, and the first compiler error before it, if any."""
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith(RESULT_TAG)]
    if not lines:
        return "(no output)"
    last = next((l for l in reversed(lines) if re.search(r"(Error|Exception)\b|^AssertionError|FAILED|fatal", l)),
                lines[-1])
    compiler = next((l for l in lines if re.search(r"\b(fatal )?error\b.*:|: error", l) and "Traceback" not in l
                     and l != last), None)
    return (last[:300] + (" | first compiler error: " + compiler[:300] if compiler else ""))


ARCH_VARIANT = re.compile(r"\b(\d+\.\d+)a\b")   # '9.0a': the same pattern as imgbuild's IB040


def deepspeed_parsable_arch_list(env: dict) -> str:
    """A node's own TORCH_CUDA_ARCH_LIST with an arch-specific entry ('9.0a') breaks every DeepSpeed JIT build
    (its op builder reads each entry as integers: IB040, seen on an H200 node whose environment sets one). An
    image imgbuild builds never has one beside DeepSpeed (IB040 refuses it); here the children get the list
    without the suffix, and the run says so. Returns that note, or '' when the list is left as it is."""
    value = env.get("TORCH_CUDA_ARCH_LIST", "")
    if not ARCH_VARIANT.search(value):
        return ""
    fixed = []
    for entry in re.split(r"[;\s]+", ARCH_VARIANT.sub(r"\1", value).strip()):
        if entry and entry not in fixed:
            fixed.append(entry)
    env["TORCH_CUDA_ARCH_LIST"] = " ".join(fixed)
    return (f"this node's TORCH_CUDA_ARCH_LIST={value!r} has arch-specific entries that DeepSpeed's op builder "
            f"cannot parse (IB040); the checks use {env['TORCH_CUDA_ARCH_LIST']!r}")


class Runner:
    def __init__(self, args):
        self.args = args
        self.results = []
        self.t_start = time.time()
        self.work = Path(tempfile.mkdtemp(prefix="gpu-node-check-"))
        self.env = dict(os.environ)
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
        self.env.setdefault("TORCH_EXTENSIONS_DIR", str(self.work / "torch_extensions"))
        self.facts = {}
        self.arch_note = deepspeed_parsable_arch_list(self.env)

    # budget ---------------------------------------------------------------------------------
    def time_left(self):
        if not self.args.budget:
            return None
        return self.args.budget - (time.time() - self.t_start)

    def child(self, code, timeout=None, extra_env=None):
        env = dict(self.env)
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
        env.update(extra_env or {})
        limit = timeout or self.args.timeout
        left = self.time_left()
        if left is not None:
            limit = max(1, min(limit, left))
        return run_child([sys.executable, "-c", code], env, limit)

    # reporting ------------------------------------------------------------------------------
    def record(self, name, source, status, reason, seconds=0.0, output="", data=None):
        r = {"id": name, "source": source, "status": status, "reason": reason, "seconds": round(seconds, 1)}
        if data:
            r["data"] = data
        if output and (status == "failed" or self.args.verbose):
            r["output_tail"] = tail(output, 120)
        self.results.append(r)
        print(f"[{STATUS_WORD[status]}] {name} ({source}) {seconds:.1f}s: {reason}", flush=True)
        if output and (status == "failed" or self.args.verbose):
            print("    | " + tail(output, 60 if status == "failed" else 15).replace("\n", "\n    | "), flush=True)

    def run_code(self, name, source, code, ok_reason, timeout=None, extra_env=None):
        left = self.time_left()
        if left is not None and left < 5:
            return self.record(name, source, "skipped", f"time budget of {self.args.budget}s spent")
        rc, out, result, secs = self.child(code, timeout, extra_env)
        if rc is None:
            return self.record(name, source, "failed", f"timed out after {secs:.0f}s; last output: {last_line(out)}",
                               secs, out)
        if rc != 0:
            return self.record(name, source, "failed", f"exit {rc}: {last_error_line(out)}", secs, out)
        reason = (result or {}).get("detail") or ok_reason(out)
        data = {k: v for k, v in (result or {}).items() if k != "detail"} or None
        self.record(name, source, "passed", reason, secs, out, data)

    # sections -------------------------------------------------------------------------------
    def node_facts(self):
        print("== node", flush=True)
        print(f"host {platform.node()}, {platform.system()} {platform.release()}, {platform.machine()}, "
              f"{os.cpu_count()} CPUs; python {platform.python_version()} at {sys.executable}", flush=True)
        self.facts.update(host=platform.node(), kernel=platform.release(), python=platform.python_version(),
                          executable=sys.executable, cpus=os.cpu_count())
        dists = {}
        try:
            import importlib.metadata as md
            for name in WATCHED_DISTS:
                try:
                    dists[name] = md.version(name)
                except md.PackageNotFoundError:
                    dists[name] = None
        except ImportError:
            pass
        self.facts["dists"] = dists
        print("packages: " + ", ".join(f"{k} {v or '-'}" for k, v in dists.items()), flush=True)
        smi = shutil.which("nvidia-smi")
        if smi:
            rc, out, _, _ = run_child([smi, "--query-gpu=name,driver_version,memory.total,memory.used,compute_cap",
                                       "--format=csv,noheader"], self.env, 60)
            self.facts["nvidia_smi_query"] = out.strip()
            print(f"nvidia-smi: {out.strip()}", flush=True)
            rc, out, _, _ = run_child([smi], self.env, 60)
            self.facts["nvidia_smi"] = out
            print(out.rstrip(), flush=True)
        else:
            self.facts["nvidia_smi"] = None
            print("nvidia-smi: not found on PATH", flush=True)
        nvcc = shutil.which("nvcc", path=self.env.get("PATH"))
        if not nvcc and Path("/usr/local/cuda/bin/nvcc").exists():
            self.env["PATH"] = "/usr/local/cuda/bin" + os.pathsep + self.env.get("PATH", "")
            self.env.setdefault("CUDA_HOME", "/usr/local/cuda")
            nvcc = "/usr/local/cuda/bin/nvcc"
        if nvcc:
            rc, out, _, _ = run_child([nvcc, "--version"], self.env, 60)
            m = re.search(r"release ([\d.]+)", out)
            self.facts["nvcc"] = f"{m.group(1) if m else '?'} at {nvcc}"
        else:
            self.facts["nvcc"] = None
        print(f"nvcc: {self.facts['nvcc'] or 'not found'}", flush=True)
        if self.arch_note:
            self.facts["arch_list_note"] = self.arch_note
            print(f"note: {self.arch_note}", flush=True)
        if not shutil.which("ninja", path=self.env.get("PATH")):
            beside = Path(sys.executable).parent
            if (beside / "ninja").exists():
                self.env["PATH"] = str(beside) + os.pathsep + self.env.get("PATH", "")
        ninja = shutil.which("ninja", path=self.env.get("PATH"))
        self.facts["ninja"] = ninja
        print(f"ninja: {ninja or 'not found (torch JIT extensions need it)'}", flush=True)
        inc = sysconfig.get_path("include", scheme="posix_prefix") or ""
        have_h = Path(inc, "Python.h").exists()
        self.facts["python_h"] = str(Path(inc, "Python.h")) if have_h else None
        note = f"Python.h: {'found in ' + inc if have_h else 'MISSING in ' + inc}"
        if not have_h and self.args.python_include:
            alt = Path(self.args.python_include).resolve()
            if (alt / "Python.h").exists():
                self.add_include(alt)
                self.facts["python_h"] = f"{alt}/Python.h (fallback, via CPLUS_INCLUDE_PATH)"
                note += f"; using {alt} for JIT builds"
            else:
                note += f"; --python-include {alt} has no Python.h either"
        print(note + " (torch JIT extensions need it)", flush=True)

    def add_include(self, folder):
        for var in ("CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"):
            parts = [p for p in self.env.get(var, "").split(os.pathsep) if p]
            if str(folder) not in parts:
                self.env[var] = os.pathsep.join([str(folder)] + parts)

    def cuda_headers(self, home):
        """torch's ATen/cuda headers (included by CUDA extensions) need the CUDA math libraries' headers.
        A toolkit made of pip packages may lack them in CUDA_HOME; then take them from the nvidia-*
        pip packages beside torch, through CPLUS_INCLUDE_PATH (searched after CUDA_HOME's own)."""
        home = Path(home)
        missing = [h for h in CUDA_MATH_HEADERS if not (home / "include" / h).exists()]
        self.facts["cuda_home"] = str(home)
        if not missing:
            print(f"CUDA math headers: in {home}/include", flush=True)
            return
        found = {}
        for entry in sys.path:
            base = Path(entry or ".") / "nvidia"
            if not base.is_dir():
                continue
            for inc in sorted(base.glob("*/include")):
                for h in missing:
                    if h not in found and (inc / h).exists():
                        found[h] = inc
        for inc in dict.fromkeys(found.values()):
            self.add_include(inc)
        still = [h for h in missing if h not in found]
        self.facts["cuda_math_headers"] = {h: str(found.get(h)) if h in found else None for h in missing}
        print(f"CUDA math headers: {', '.join(missing)} not in {home}/include"
              + (f"; using {', '.join(str(d) for d in dict.fromkeys(found.values()))}" if found else "")
              + (f"; still missing: {', '.join(still)} (CUDA extensions including ATen/cuda will not build)"
                 if still else ""), flush=True)

    def torch_facts(self):
        print("== torch", flush=True)
        if importlib.util.find_spec("torch") is None:
            self.facts["torch"] = None
            print("torch: not installed in this python", flush=True)
            return None
        rc, out, result, secs = self.child(TORCH_FACTS, timeout=300)
        if rc != 0 or not result:
            self.facts["torch"] = {"error": tail(out, 20)}
            self.record("torch-facts", "builtin", "failed", f"could not read torch facts: {last_error_line(out)}",
                        secs, out)
            return None
        result["torch"] = result.pop("version", None)   # the probe's name for it; this report says torch
        self.facts["torch"] = result
        for k in ("torch", "cuda", "cudnn", "nccl", "nccl_available", "cuda_available", "device_count", "device",
                  "capability", "sm_count", "memory_gib", "arch_list", "cuda_home"):
            if k in result:
                print(f"{k}: {result[k]}", flush=True)
        if result.get("cuda") and result.get("cuda_home"):
            self.cuda_headers(result["cuda_home"])
        return result

    def gpu_ready(self, tf):
        if tf is None:
            return "no torch in this python" if self.facts.get("torch") is None else "torch facts could not be read"
        if not tf.get("cuda"):
            return f"no GPU: torch {tf.get('torch')} is a CPU build"
        if not tf.get("cuda_available"):
            return "no GPU: torch.cuda.is_available() is False" + ("" if self.facts.get("nvidia_smi") else
                                                                     " (and no nvidia-smi)")
        return None

    def builtin_checks(self, no_gpu):
        print("== built-in checks", flush=True)
        tf = self.facts.get("torch") or {}
        if no_gpu:
            for name in ("cuda-available", "bf16-matmul"):
                if self.selected(name):
                    self.record(name, "builtin", "skipped", no_gpu)
        else:
            if self.selected("cuda-available"):
                self.record("cuda-available", "builtin", "passed",
                            f"{tf.get('device')} (sm_{str(tf.get('capability', '')).replace('.', '')}, "
                            f"{tf.get('memory_gib')} GiB), torch {tf.get('torch')} CUDA {tf.get('cuda')}")
            if self.selected("bf16-matmul"):   # throughput; the node check's matmul is the correctness check
                self.run_code("bf16-matmul", "builtin", BF16_MATMUL, lambda o: "matmul ok",
                              timeout=min(self.args.timeout, 150),
                              extra_env={"GPU_CHECK_N": str(self.args.matmul_n),
                                         "GPU_CHECK_ITERS": str(self.args.matmul_iters)})
        self.node_check(no_gpu, tf)

    def node_check(self, no_gpu, tf):
        """imgbuild's node check (builder/nodecheck/worker.py, the one code path `imgbuild node-check` runs
        in an image) natively here: one rank per GPU with NCCL. Each of its checks is recorded as
        node-check:ID, with the ranks that disagreed."""
        if not self.selected("node-check"):
            return
        if no_gpu:
            return self.record("node-check", "builtin", "skipped", no_gpu + " (imgbuild node-check runs the same "
                               "worker with gloo in an image)")
        procs = self.args.node_check_procs or int(tf.get("device_count") or 1)
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node-rank", "0", "--master-addr",
                "127.0.0.1", "--master-port", str(free_port()), "--nproc-per-node", str(procs),
                str(ROOT / "builder" / "nodecheck" / "worker.py")]
        rc, out, _, secs = run_child(argv, self.env, self.args.timeout * 3)
        line = next((l for l in reversed(out.splitlines()) if l.startswith(NODE_CHECK_TAG)), None)
        if line is None:
            return self.record("node-check", "builtin", "failed", f"exit {rc}: {last_error_line(out)}", secs, out)
        report = json.loads(line[len(NODE_CHECK_TAG):])
        for r in report["results"]:
            ranks = f" [rank {', '.join(map(str, r['bad_ranks']))}]" if r["bad_ranks"] else ""
            self.record(f"node-check:{r['id']}", f"builtin, {report['world_size']} ranks {report['backend']}",
                        r["status"], r["detail"] + ranks, r.get("seconds", 0.0), data=r.get("numbers") or None)

    def layer_checks(self, no_gpu):
        print("== layer checks (gpu: true, from layers/*/kind.yaml)", flush=True)
        try:
            specs = load_gpu_checks(Path(self.args.layers), self.args.cpu_checks)
        except ImportError:
            self.record("layers", "layers", "skipped", "PyYAML is not installed in this python")
            return
        tf = self.facts.get("torch") or {}
        arch = tf.get("capability")
        specs.sort(key=lambda s: (s["order"], s["name"]))
        for s in specs:
            name, src = s["name"], s["source"]
            if not self.selected(name):
                continue
            if s["check"] != "python" or not s.get("code"):
                self.record(name, src, "skipped", f"check type {s['check']!r} has no native runner here")
                continue
            if s["gpu"] and no_gpu:
                self.record(name, src, "skipped", no_gpu)
                continue
            missing = missing_modules(s["modules"])
            if missing:
                self.record(name, src, "skipped", f"module {missing[0]} not installed here")
                continue
            extra = {}
            note = ""
            if s.get("when_op"):
                note = f" [when_op {s['when_op']}: JIT-built here, not prebuilt]"
                if arch and not self.env.get("TORCH_CUDA_ARCH_LIST"):
                    extra["TORCH_CUDA_ARCH_LIST"] = arch
            self.run_code(name, src, s["code"], lambda o, note=note: (last_line(o) or "ok") + note,
                          timeout=max(self.args.timeout, self.args.jit_timeout) if s.get("when_op") else None,
                          extra_env=extra)

    def selected(self, name):
        if self.args.only and not any(re.search(p, name) for p in self.args.only):
            return False
        return not any(re.search(p, name) for p in self.args.skip)

    def summary(self):
        counts = {k: sum(1 for r in self.results if r["status"] == k) for k in ("passed", "failed", "skipped")}
        total = time.time() - self.t_start
        doc = {"tool": "scripts/gpu_node_check.py", "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "seconds": round(total, 1), "facts": self.facts, "checks": self.results, "summary": counts}
        path = self.args.json or (os.path.join(os.environ["OUT"], "gpu-checks.json") if os.environ.get("OUT") else None)
        print("== summary", flush=True)
        for r in self.results:
            print(f"  {STATUS_WORD[r['status']]}  {r['id']:<40} {r['seconds']:>6.1f}s  {r['reason'][:140]}")
        if path:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_text(json.dumps(doc, indent=2, default=str))
                print(f"results written to {path}")
            except OSError as exc:
                print(f"could not write {path}: {exc}")
        print(f"total {total:.0f}s")
        print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped", flush=True)
        return 1 if counts["failed"] else 0


def last_line(out):
    lines = [l.strip() for l in out.splitlines() if l.strip() and not l.startswith(RESULT_TAG)]
    return lines[-1][:200] if lines else ""


def missing_modules(modules):
    """Modules (dotted) whose top-level package cannot be found in this python, without importing them."""
    out = []
    for mod in modules:
        top = mod.split(".")[0]
        try:
            if importlib.util.find_spec(top) is None:
                out.append(mod)
        except (ImportError, ValueError):
            out.append(mod)
    return out


def imported_modules(code):
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    mods = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods.append(node.module)
    return list(dict.fromkeys(mods))


# Cheap checks first, JIT-compiling ones last (so a time budget cuts the slow ones).
def _order(check):
    return 1 if (check.get("args") or {}).get("when_op") else 0


def load_gpu_checks(layers_dir, include_cpu_python=False):
    import yaml  # noqa: the only non-stdlib import; ImportError is reported as a skip
    specs = []
    for path in sorted(layers_dir.glob("*/kind.yaml")):
        kind = path.parent.name
        data = yaml.safe_load(path.read_text()) or {}
        for c in data.get("checks") or []:
            gpu = bool(c.get("gpu"))
            if not gpu and not (include_cpu_python and c.get("check") == "python"):
                continue
            args = c.get("args") or {}
            code = args.get("code") if isinstance(args.get("code"), str) else None
            specs.append({"name": f"{kind}/{c.get('id')}", "source": f"layers/{kind}/kind.yaml", "gpu": gpu,
                          "check": c.get("check"), "code": code, "when_op": args.get("when_op"),
                          "modules": imported_modules(code) if code else [], "order": _order(c)})
    return specs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default=str(ROOT / "layers"), help="folder of layer kinds (default: the repo's)")
    p.add_argument("--only", action="append", default=[], metavar="REGEX", help="run only checks whose name matches")
    p.add_argument("--skip", action="append", default=[], metavar="REGEX", help="leave out checks whose name matches")
    p.add_argument("--timeout", type=int, default=300, help="seconds per check (default 300)")
    p.add_argument("--jit-timeout", type=int, default=480,
                   help="seconds for a check that JIT-compiles an op (default 480)")
    p.add_argument("--budget", type=int, default=0,
                   help="seconds for the whole run; checks left when it is spent are skipped (default: none)")
    p.add_argument("--matmul-n", type=int, default=8192)
    p.add_argument("--matmul-iters", type=int, default=10)
    p.add_argument("--python-include", default=os.environ.get("GPU_CHECK_PYTHON_INCLUDE"),
                   help="a folder with Python.h, used for JIT builds only if this python's own is missing")
    p.add_argument("--cpu-checks", action="store_true", help="also run the kinds' python checks not marked gpu")
    p.add_argument("--node-check-procs", type=int, default=0,
                   help="ranks of imgbuild's node check (default: one per GPU)")
    p.add_argument("--json", help="write the results here (default: $OUT/gpu-checks.json when OUT is set)")
    p.add_argument("-v", "--verbose", action="store_true", help="show each check's output, not only on failure")
    args = p.parse_args(argv)

    r = Runner(args)
    try:
        r.node_facts()
        tf = r.torch_facts()
        no_gpu = r.gpu_ready(tf)
        if no_gpu:
            print(f"GPU steps will be skipped: {no_gpu}", flush=True)
        r.builtin_checks(no_gpu)
        r.layer_checks(no_gpu)
    finally:
        shutil.rmtree(r.work, ignore_errors=True)
    return r.summary()


if __name__ == "__main__":
    sys.exit(main())
