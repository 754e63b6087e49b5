#!/usr/bin/env python3
"""Benchmark: load + plan + render a site-scale stacks.yaml (500 stacks), and hpccm beside it.

Target (from the issue): planning and rendering all 500 stacks takes under 1 s, warm.

What is timed:
  load     builder.load.spec.load_spec on the generated file (YAML parse, kinds, validation).
  plan     builder.plan.keys.make_plan over every stack: renders every layer's Dockerfile (Jinja2) and
           computes every content key (sha256 over the inputs). This is the number the target is on.
  cold     the first make_plan in this process (Jinja environment and templates not yet built), and
           make_plan after builder.plan.render.environment.cache_clear() (templates recompiled).
  warm     make_plan with the cached Jinja environment: min and median of --repeat runs.
  hpccm    one hpccm recipe equivalent to the cpu-smoke (or h100-megatron) layer chain, built from
           building blocks and rendered to a Dockerfile string, repeated.

A benchmark, not a test: PASS/MISS against the target is printed, the exit status is always 0.

    .venv/bin/python benchmarks/plan_render.py [--stacks 500] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.plan import render as _render  # noqa: E402
from builder.plan.keys import make_plan  # noqa: E402
from builder.load.spec import load_spec  # noqa: E402

TARGET_S = 1.0


# -- a site-scale stacks.yaml ----------------------------------------------------------------------

def _sha40(rng: random.Random) -> str:
    return "%040x" % rng.getrandbits(160)


def generate(n_stacks: int, seed: int = 20240601) -> dict:
    """A stacks.yaml document with n_stacks stacks, built on the shipped bases and layers.

    Shaped like a real site: a few base adapters, a handful of DeepSpeed builds, TE as shipped or
    built, Apex pins, many teams' projects at different commits, a few fabric runtimes, and stacks
    that mostly share their lower layers (plus some `extends` variants)."""
    rng = random.Random(seed)
    shipped = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    doc = {"version": 1, "site": shipped["site"], "bases": shipped["bases"],
           "layers": dict(shipped["layers"]), "projects": dict(shipped["projects"]),
           "runtimes": dict(shipped["runtimes"]), "stacks": dict(shipped["stacks"])}
    L, P, R = doc["layers"], doc["projects"], doc["runtimes"]

    # Base adapters: site apt sets per NGC base; CPU torch wheels.
    apt_sets = [["libaio-dev", "ninja-build"], ["libaio-dev", "ninja-build", "numactl"],
                ["libaio-dev", "ninja-build", "rdma-core", "ibverbs-utils"]]
    adapters = {"ngc-25.09": ["ngc-25.09-site"], "ngc-25.03": ["ngc-25.03-site"], "debian-bookworm": ["cpu-torch-2.13"]}
    for base in ("ngc-25.09", "ngc-25.03"):
        for i, apt in enumerate(apt_sets[1:], 1):
            name = f"{base}-site-v{i}"
            L[name] = {"kind": "ngc-pytorch", "params": {"apt": apt}}
            adapters[base].append(name)
    for tools in (["setuptools==75.8.0", "wheel==0.45.1"], ["setuptools==80.9.0", "wheel==0.45.1", "ninja==1.11.1.4"]):
        name = f"cpu-torch-2.13-t{len(adapters['debian-bookworm'])}"
        L[name] = {"kind": "cpu-torch", "params": {
            "wheel": {"file": "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                      "sha256": "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"},
            "tools": tools}}
        adapters["debian-bookworm"].append(name)

    # Transformer Engine: as shipped, or built at a version (compiled for the stack's GPUs).
    te = ["te-as-shipped"]
    for v in ("2.8.0", "2.9.0"):
        L[f"te-{v}"] = {"kind": "transformer-engine", "params": {"version": v, "max_jobs": 8}}
        te.append(f"te-{v}")

    # Apex at a few pins.
    apex = []
    for i in range(3):
        L[f"apex-{i}"] = {"kind": "apex", "params": {
            "source": {"repo": "https://github.com/NVIDIA/apex.git", "commit": _sha40(rng)},
            "contrib": [[], ["FAST_LAYER_NORM"], ["FAST_LAYER_NORM", "FMHA"]][i]}}
        apex.append(f"apex-{i}")

    # DeepSpeed: versions x op sets (GPU) and CPU-only builds.
    gpu_ops = [[], ["cpu_adam"], ["cpu_adam", "fused_adam"], ["cpu_adam", "fused_adam", "async_io"],
               ["fused_adam", "fused_lamb", "transformer"]]
    ds_gpu, ds_cpu = [], []
    for v in ("0.16.9", "0.17.6", "0.18.4", "0.19.5", "0.19.8"):
        for j, ops in enumerate(gpu_ops):
            name = f"ds-{v}-g{j}"
            L[name] = {"kind": "deepspeed", "params": {"version": v, "ops": ops,
                                                        "packages": ["einops==0.8.1"] if j == 4 else []}}
            ds_gpu.append(name)
        for j, ops in enumerate([["cpu_adam"], ["cpu_adam", "cpu_lion"]]):
            name = f"ds-{v}-cpu{j}"
            L[name] = {"kind": "deepspeed", "params": {"version": v, "ops": ops}}
            ds_cpu.append(name)

    # Projects: Megatron-Core pins and many teams' own code, each at its own commit.
    mcore = ["megatron-core-0.16", "megatron-core-0.17"]
    for i in range(20):
        name = f"mcore-fork-{i}"
        P[name] = {"kind": "megatron", "params": {
            "source": {"repo": f"https://git.example.org/llm/megatron-lm-{i % 5}.git", "commit": _sha40(rng)},
            "version": rng.choice(["0.16.0", "0.17.0"]),
            "packages": [["sentencepiece==0.2.0"], ["tiktoken==0.9.0", "sentencepiece==0.2.0"], []][i % 3]}}
        mcore.append(name)
    teams = []
    for i in range(150):
        name = f"team{i:03d}-train"
        P[name] = {"kind": "project", "params": {
            "source": {"repo": f"https://git.example.org/team{i:03d}/train.git", "commit": _sha40(rng)},
            "install": ["pip-no-deps", "pip", "pythonpath"][i % 3],
            "packages": [[], ["wandb==0.19.1"], ["datasets==3.2.0", "accelerate==1.2.1"]][i % 3],
            "module": f"team{i:03d}_train", "smoke": f"python -m team{i:03d}_train --steps 1"}}
        teams.append(name)

    # Runtimes: per-cluster fabric settings.
    gpu_rt = ["nccl-ib", "nccl-roce"]
    for i in range(8):
        name = f"fabric-c{i}"
        R[name] = {"kind": "runtime-env", "params": {"env": {
            "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": f"mlx5_{i % 4}", "NCCL_SOCKET_IFNAME": f"^lo,docker{i % 2}",
            "NCCL_IB_GID_INDEX": str(i % 4), "NCCL_DEBUG": "WARN", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            **({"NCCL_NVLS_ENABLE": "0"} if i % 2 else {})}}}
        gpu_rt.append(name)
    cpu_rt = ["cpu-env"]
    for t in ("4", "8"):
        R[f"cpu-env-{t}"] = {"kind": "runtime-env", "params": {"env": {"OMP_NUM_THREADS": t, "DS_ACCELERATOR": "cpu"}}}
        cpu_rt.append(f"cpu-env-{t}")

    gpu_sets = {"ngc-25.09": [["H100"], ["H200"], ["H100", "H200"], ["B200"], ["GB200"], ["H100", "B200"], ["A100", "H100"]],
                "ngc-25.03": [["A100"], ["A100", "H100"], ["L40S"], ["H100"], ["A10", "A100"], ["B200"]]}

    S = doc["stacks"]
    plain = []  # generated stacks without extends, candidates for extends variants
    while len(S) < n_stacks:
        i = len(S)
        if i % 10 == 9 and plain:  # a "-next" variant that extends another stack and swaps the project or runtime
            parent = rng.choice(plain)
            swap = rng.choice(["project", "runtime"])
            pool = (teams + mcore) if swap == "project" else (cpu_rt if S[parent]["base"] == "debian-bookworm" else gpu_rt)
            S[f"{parent}-next{i}"] = {"extends": parent, swap: rng.choice(pool)}
            continue
        base = rng.choices(["ngc-25.09", "ngc-25.03", "debian-bookworm"], weights=[5, 3, 2])[0]
        layers = [rng.choice(adapters[base])]
        if base == "debian-bookworm":
            layers.append(rng.choice(ds_cpu))
            stack = {"base": base, "layers": layers, "project": rng.choice(teams), "runtime": rng.choice(cpu_rt)}
        else:
            if rng.random() < 0.6:
                layers.append(rng.choice(te))
            if rng.random() < 0.25:
                layers.append(rng.choice(apex))
            layers.append(rng.choice(ds_gpu))
            project = rng.choice(mcore) if rng.random() < 0.4 else rng.choice(teams)
            stack = {"base": base, "layers": layers, "project": project, "runtime": rng.choice(gpu_rt),
                     "gpus": rng.choice(gpu_sets[base])}
            if rng.random() < 0.3:
                stack["tags"] = ["{stack}", "{stack}-{date}", "{stack}-torch{torch}-cuda{cuda}-ds{deepspeed}"]
        name = f"s{i:03d}-{stack['project']}-{base}"
        S[name] = stack
        plain.append(name)
    return doc


# -- timing -----------------------------------------------------------------------------------------

def _time(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _summary(samples: list[float]) -> dict:
    return {"min_s": min(samples), "median_s": statistics.median(samples), "samples_s": samples}


def bench_imgbuild(n_stacks: int, repeat: int, keep: str | None) -> dict:
    doc = generate(n_stacks)
    with tempfile.TemporaryDirectory(prefix="imgbuild-bench-") as tmp:
        path = Path(keep or tmp) / "stacks.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
        size = path.stat().st_size

        load_cold, spec = _time(lambda: load_spec(path))  # first load also fills the GPU catalog cache
        loads = [_time(lambda: load_spec(path))[0] for _ in range(repeat)]

        # Cold: the very first make_plan of this process (no Jinja environment for this root yet).
        first_s, plan = _time(lambda: make_plan(spec))
        # Cold again, repeatably: drop the cached environment so templates are recompiled.
        cold = []
        for _ in range(repeat):
            _render.environment.cache_clear()
            cold.append(_time(lambda: make_plan(spec))[0])
        # Warm: environment and compiled templates cached (the steady state of a CLI run after the
        # first stack; Jinja caches compiled templates per environment).
        make_plan(spec)
        warm = [_time(lambda: make_plan(spec))[0] for _ in range(repeat)]

    rendered = sum(len(k) for k in plan.stacks.values())
    n = len(plan.stacks)
    return {
        "stacks": n, "stacks_yaml_bytes": size,
        "layer_defs": len(spec.layers), "distinct_nodes": len(plan.nodes), "dockerfiles_rendered": rendered,
        "load": {"first_s": load_cold, **_summary(loads)},
        "plan_render": {"first_cold_s": first_s, "cold": _summary(cold), "warm": _summary(warm),
                        "warm_per_stack_us": statistics.median(warm) / n * 1e6,
                        "warm_per_dockerfile_us": statistics.median(warm) / rendered * 1e6,
                        "cold_per_stack_us": statistics.median(cold) / n * 1e6},
        "target_s": TARGET_S,
        "verdict": "PASS" if statistics.median(warm) < TARGET_S else "MISS",
    }


def bench_single(stack: str, repeat: int) -> dict:
    """imgbuild on the shipped stacks.yaml, one stack: the like-for-like of the hpccm recipe."""
    spec = load_spec(ROOT / "stacks.yaml")
    make_plan(spec, [stack])
    runs = [_time(lambda: make_plan(spec, [stack]))[0] for _ in range(repeat)]
    return {"stack": stack, "layers": len(spec.stack(stack).chain), **_summary(runs)}


# -- hpccm ------------------------------------------------------------------------------------------

def hpccm_recipe(which: str):
    """One hpccm Stage approximating the stack's whole layer chain (hpccm has no layer DAG or keys:
    a single Dockerfile with the same steps)."""
    import hpccm
    from hpccm.building_blocks import packages, pip
    from hpccm.primitives import baseimage, copy, environment, label, shell

    hpccm.config.set_container_format("docker")
    s = hpccm.Stage()
    if which == "cpu-smoke":
        s += baseimage(image="127.0.0.1:5000/mirror/debian:bookworm", _distro="ubuntu22", _as="cpu-smoke")
        s += packages(ospackages=["python3", "python3-venv", "python3-dev", "g++", "ca-certificates"])
        s += shell(commands=["python3 -m venv /opt/venv"])
        s += environment(variables={"VIRTUAL_ENV": "/opt/venv", "PATH": "/opt/venv/bin:$PATH"})
        s += shell(commands=[
            "echo '6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b  "
            "/wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl' | sha256sum --check --strict -"])
        s += pip(packages=["ninja==1.11.1.4", "setuptools==75.8.0", "wheel==0.45.1",
                           "/wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"],
                 pip="python -m pip", ospackages=[])
        s += shell(commands=["mkdir -p /etc/imgbuild",
                             "python -c 'import importlib.metadata as m; print(\"torch==\" + m.version(\"torch\"))' "
                             "> /etc/imgbuild/constraints.txt"])
        s += environment(variables={"PIP_CONSTRAINT": "/etc/imgbuild/constraints.txt"})
        s += environment(variables={"DS_BUILD_CPU_ADAM": "1"}, _export=False)
        s += pip(packages=["deepspeed==0.19.8"], pip="python -m pip", args=["--no-build-isolation"], ospackages=[])
        s += copy(src="sources/source", dest="/opt/project")
        s += pip(packages=["/opt/project"], pip="python -m pip", args=["--no-deps"], ospackages=[])
        s += environment(variables={"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "2"})
        s += label(metadata={"io.imgbuild.stack": "cpu-smoke"})
    else:  # h100-megatron
        s += baseimage(image="nvcr.io/nvidia/pytorch:25.09-py3", _distro="ubuntu24", _as="h100-megatron")
        s += packages(ospackages=["libaio-dev", "ninja-build"])
        s += shell(commands=["mkdir -p /etc/imgbuild",
                             "python -c 'import importlib.metadata as m; print(\"torch==\" + m.version(\"torch\"))' "
                             "> /etc/imgbuild/constraints.txt"])
        s += environment(variables={"PIP_CONSTRAINT": "/etc/imgbuild/constraints.txt"})
        s += shell(commands=["python -c 'import importlib.metadata as m; print(m.version(\"transformer_engine\"))'"])
        s += environment(variables={"TORCH_CUDA_ARCH_LIST": "9.0", "DS_BUILD_CPU_ADAM": "1",
                                    "DS_BUILD_FUSED_ADAM": "1", "DS_BUILD_AIO": "1"}, _export=False)
        s += pip(packages=["deepspeed==0.19.5"], pip="python -m pip", args=["--no-build-isolation"], ospackages=[])
        s += copy(src="sources/source", dest="/opt/Megatron-LM")
        s += shell(commands=["cd /opt/Megatron-LM", "python -m pip install --no-build-isolation --no-deps ."])
        s += environment(variables={"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "^lo,docker0",
                                    "NCCL_IB_GID_INDEX": "3", "NCCL_DEBUG": "WARN", "CUDA_DEVICE_MAX_CONNECTIONS": "1"})
        s += label(metadata={"io.imgbuild.stack": "h100-megatron"})
    return s


def bench_hpccm(which: str, repeat: int) -> dict:
    try:
        import hpccm
    except ImportError as exc:
        return {"available": False, "error": f"hpccm not importable ({exc}); install: .venv/bin/pip install hpccm"}
    version = getattr(hpccm, "__version__", "?")
    str(hpccm_recipe(which))  # warm-up: imports, distro detection
    stage = hpccm_recipe(which)
    inner = 200  # a recipe renders in well under a millisecond; time batches
    build_render = [_time(lambda: [str(hpccm_recipe(which)) for _ in range(inner)])[0] / inner for _ in range(repeat)]
    render_only = [_time(lambda: [str(stage) for _ in range(inner)])[0] / inner for _ in range(repeat)]
    text = str(stage)
    return {"available": True, "version": version, "recipe": which, "dockerfile_lines": text.count("\n"),
            "build_render": _summary(build_render), "render_only": _summary(render_only)}


# -- report -----------------------------------------------------------------------------------------

def _ms(s: float) -> str:
    return f"{s * 1e3:9.2f} ms"


def _us(s: float) -> str:
    return f"{s * 1e6:9.1f} us"


def report(r: dict) -> str:
    im, pr, ld = r["imgbuild"], r["imgbuild"]["plan_render"], r["imgbuild"]["load"]
    out = [f"imgbuild plan+render benchmark  ({r['date']}, Python {r['python']}, {r['cpus']} CPUs, "
           f"repeat={r['repeat']})", "",
           f"stacks                {im['stacks']:>9}   (stacks.yaml {im['stacks_yaml_bytes'] // 1024} KiB, "
           f"{im['layer_defs']} layer/project/runtime defs)",
           f"distinct nodes        {im['distinct_nodes']:>9}",
           f"Dockerfiles rendered  {im['dockerfiles_rendered']:>9}   (one per layer per stack; make_plan renders shared layers again)",
           "",
           f"{'':32}{'first':>12}{'min':>12}{'median':>12}",
           f"{'load_spec':32}{_ms(ld['first_s'])}{_ms(ld['min_s'])}{_ms(ld['median_s'])}",
           f"{'plan+render, cold':32}{_ms(pr['first_cold_s'])}{_ms(pr['cold']['min_s'])}{_ms(pr['cold']['median_s'])}",
           f"{'plan+render, warm':32}{'':>12}{_ms(pr['warm']['min_s'])}{_ms(pr['warm']['median_s'])}",
           "",
           f"per stack, warm (median)   {pr['warm_per_stack_us']:9.1f} us   "
           f"per Dockerfile {pr['warm_per_dockerfile_us']:.1f} us   per stack, cold {pr['cold_per_stack_us']:.1f} us",
           f"target: warm plan+render of {im['stacks']} stacks < {im['target_s']:.0f} s   -> {im['verdict']} "
           f"(median {pr['warm']['median_s']:.3f} s)",
           f"load + plan+render (medians, what `imgbuild plan --all` pays besides imports): "
           f"{ld['median_s'] + pr['warm']['median_s']:.3f} s",
           "(cold 'first' = first make_plan in the process; cold min/median = after "
           "builder.plan.render.environment.cache_clear(), templates recompiled)",
           ""]
    h = r["hpccm"]
    if not h["available"]:
        out.append(f"hpccm: NOT AVAILABLE - {h['error']}")
    else:
        one = r["imgbuild_single"]
        out += [f"hpccm {h['version']} vs imgbuild, one recipe ({h['recipe']}; hpccm: one Stage, "
                f"{h['dockerfile_lines']} Dockerfile lines)",
                f"{'':48}{'min':>12}{'median':>12}",
                f"{'hpccm: build blocks + str(stage)':48}{_us(h['build_render']['min_s'])}{_us(h['build_render']['median_s'])}",
                f"{'hpccm: str(stage) only':48}{_us(h['render_only']['min_s'])}{_us(h['render_only']['median_s'])}",
                f"{'imgbuild: make_plan(shipped, [' + one['stack'] + ']), ' + str(one['layers']) + ' layers':48}"
                f"{_us(one['min_s'])}{_us(one['median_s'])}",
                f"{'imgbuild: per stack in the 500-stack plan':48}{'':>12}{_us(pr['warm']['median_s'] / im['stacks'])}",
                "(imgbuild also renders one Dockerfile per layer and hashes a content key for each; hpccm renders text only)"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stacks", type=int, default=500, help="number of stacks to generate (default 500)")
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions (default 5)")
    ap.add_argument("--hpccm-recipe", choices=["cpu-smoke", "h100-megatron"], default="cpu-smoke")
    ap.add_argument("--keep", metavar="DIR", help="write the generated stacks.yaml to DIR and keep it")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    result = {
        "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "cpus": os.cpu_count(),
        "repeat": args.repeat,
        "imgbuild": bench_imgbuild(args.stacks, args.repeat, args.keep),
        "imgbuild_single": bench_single(args.hpccm_recipe, max(args.repeat, 20)),
        "hpccm": bench_hpccm(args.hpccm_recipe, args.repeat),
    }
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0  # a benchmark, not a test: PASS/MISS is reported, never the exit status


if __name__ == "__main__":
    sys.exit(main())
