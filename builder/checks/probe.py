"""Runs INSIDE an image (its own python, no network): measures what is there and runs the snippets
a build asked for. Reads one JSON request on stdin, prints one JSON document on stdout.
Standalone on purpose: it must not import imgbuild, only the standard library (Python >= 3.8)."""

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


def torch_facts():
    code = ("import json, torch\n"
            "d = {'version': torch.__version__, 'cuda': torch.version.cuda, 'arch_list': torch.cuda.get_arch_list(),\n"
            "     'cuda_available': torch.cuda.is_available(), 'cudnn': None, 'nccl': None}\n"
            "try:\n    d['cudnn'] = str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None\n"
            "except Exception: pass\n"
            "try:\n    d['nccl'] = '.'.join(map(str, torch.cuda.nccl.version()[:3])) if torch.version.cuda else None\n"
            "except Exception: pass\n"
            "print(json.dumps(d))\n")
    res = sh([sys.executable, "-c", code], timeout=300)
    if res["rc"] != 0:
        return {"error": res["out"][-2000:]}
    return json.loads(res["out"].strip().splitlines()[-1])


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
    }
    dpkg = sh(["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"], timeout=120)
    facts["dpkg"] = dict(line.split("\t", 1) for line in dpkg["out"].splitlines() if "\t" in line) if dpkg["rc"] == 0 else {}
    if "torch" in facts["dists"]:
        facts["torch"] = torch_facts()
    for mod in req.get("imports", []):
        res = sh([sys.executable, "-c", "import " + mod], timeout=600)
        facts["imports"][mod] = {"ok": res["rc"] == 0, "out": res["out"][-3000:]}
    if req.get("pip_check"):
        facts["pip_check"] = sh([sys.executable, "-m", "pip", "check"], timeout=300)
    if req.get("ds_report"):
        facts["ds_report"] = sh([sys.executable, "-m", "deepspeed.env_report"], timeout=600)
    for name, code in sorted(req.get("snippets", {}).items()):
        facts["snippets"][name] = sh([sys.executable, "-c", code], timeout=900)
    for name, command in sorted(req.get("commands", {}).items()):
        facts["commands"][name] = sh(command, timeout=900, shell=True)
    for path in req.get("files", []):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                facts["files"][path] = f.read(100000)
        except OSError:
            facts["files"][path] = None
    json.dump(facts, sys.stdout)


if __name__ == "__main__":
    main()
