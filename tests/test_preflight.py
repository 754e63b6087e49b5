"""Preflight: every rule refuses a stack that breaks it, naming the stack, the key (file:line), the rule
and the fact behind it, and lets through one that keeps it. No Docker: facts come from stacks.yaml,
the catalog, or a lock file written by the test.

Each failing case is one small stack on a library of bases and layers; the key of the finding is
asserted, and its line is read from the file the test wrote.
"""

from __future__ import annotations

import copy
import json
import re
import time
from dataclasses import dataclass, field

import pytest
import yaml

from conftest import STACKS, copy_kinds, run_cli, write_stacks
from builder.prepared import prepare
from builder.errors import PreflightError
from builder.rules.findings import Finding
from builder.rules.preflight import RULES, preflight
from builder.load.spec import load_spec
from builder.plan.keys import layer_definition

MEGATRON = "https://github.com/NVIDIA/Megatron-LM.git"
COMMITS = {"0.15": "0d7e02bd26d3eb347ad8d1bef625002babfa6df7", "0.16": "3bec9aa97dda898d16ff5a89bac0ed2b6682b172",
           "0.17": "9539a12e1b04a68423f57b3eb41d6125161dca24"}
WHEEL = {"file": "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "sha256": "6" * 64}

LIBRARY = {
    "version": 1,
    "site": {"registry": "127.0.0.1:5000", "namespace": "imgbuild", "driver_floor": "580.65.06"},
    "bases": {
        # NGC months with nothing declared: every fact comes from the catalog.
        "ngc2401": {"image": "nvcr.io/nvidia/pytorch:24.01-py3", "family": "ngc-pytorch"},
        "ngc2406": {"image": "nvcr.io/nvidia/pytorch:24.06-py3", "family": "ngc-pytorch"},
        "ngc2501": {"image": "nvcr.io/nvidia/pytorch:25.01-py3", "family": "ngc-pytorch"},
        "ngc2503": {"image": "nvcr.io/nvidia/pytorch:25.03-py3", "family": "ngc-pytorch"},
        "ngc2509": {"image": "nvcr.io/nvidia/pytorch:25.09-py3", "family": "ngc-pytorch"},
        # Bases the site declares itself.
        "old": {"image": "registry.example/pt:23.03", "family": "ngc-pytorch",
                "provides": {"torch": "2.0.0a0+1767026", "cuda": "12.1.0", "python": "3.8", "cudnn": "8.9.0"}},
        "cu120": {"image": "registry.example/pt:cu120", "family": "ngc-pytorch",
                  "provides": {"torch": "2.2.0a0+81ea7a4", "cuda": "12.0.1", "python": "3.10", "cudnn": "9.3.0"}},
        "cu126": {"image": "registry.example/pt:cu126", "family": "ngc-pytorch",
                  "provides": {"torch": "2.7.1+cu126", "cuda": "12.8.1", "python": "3.12.3"}},
        "py312t23": {"image": "registry.example/pt:t23", "family": "ngc-pytorch",
                     "provides": {"torch": "2.3.0a0+40ec155e58", "cuda": "12.4.1", "python": "3.12.3"}},
        "t212": {"image": "registry.example/pt:t212", "family": "ngc-pytorch",
                 "provides": {"torch": "2.12.0a0+abc", "cuda": "13.0.2", "python": "3.12.3"}},
        "fresh": {"image": "registry.example/pt:fresh", "family": "ngc-pytorch",
                  "provides": {"torch": "2.9.0a0+50eac811a6", "cuda": "13.0.1", "python": "3.12.3",
                               "cudnn": "9.13.0", "transformer_engine": "2.9.0", "numpy": "1.26.4"}},
        "deb": {"image": "debian:bookworm", "family": "debian", "provides": {"python": "3.11.2"}},
        # JAX: NVIDIA's CUDA images (CUDA from the tag, cuDNN declared) and an NGC JAX month of the catalog.
        "cuda13": {"image": "nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04", "family": "cuda",
                   "provides": {"cudnn": "9.13.0", "python": "3.12.3"}},
        "cuda129": {"image": "nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04", "family": "cuda",
                    "provides": {"cudnn": "9.10.2", "python": "3.12.3"}},
        "cuda129-cudnn91": {"image": "registry.example/cuda:12.9.1-cudnn-runtime-ubuntu24.04", "family": "cuda",
                            "provides": {"cudnn": "9.1.0", "python": "3.12.3"}},
        "cuda120": {"image": "nvidia/cuda:12.0.1-cudnn8-runtime-ubuntu22.04", "family": "cuda",
                    "provides": {"cudnn": "9.10.2", "python": "3.10.12"}},
        "ngcjax2606": {"image": "nvcr.io/nvidia/jax:26.06-py3", "family": "ngc-jax"},
    },
    # CUDA from PyPI on Debian (examples/cuda-pypi): the facts are declared by the layers' parameters.
    "layers": {
        "site": {"kind": "ngc-pytorch"},
        "cput": {"kind": "cpu-torch", "params": {"wheel": WHEEL}},
        "te-shipped": {"kind": "transformer-engine"},
        "te28": {"kind": "transformer-engine", "params": {"version": "2.8.0"}},
        "te22": {"kind": "transformer-engine", "params": {"version": "2.2.0"}},
        "te210": {"kind": "transformer-engine", "params": {"version": "2.10.0"}},
        "ds": {"kind": "deepspeed", "params": {"version": "0.19.5", "ops": ["fused_adam"]}},
        "ds-cpu": {"kind": "deepspeed", "params": {"version": "0.19.8", "ops": ["cpu_adam"]}},
        "pt211": {"kind": "pypi-torch", "params": {"packages": ["torch==2.11.0"], "cuda": "13.0"}},
        "nvcc130": {"kind": "cuda-toolkit-pip", "params": {"packages": ["nvidia-cuda-nvcc==13.0.88"], "cuda": "13.0"}},
        "nvcc128": {"kind": "cuda-toolkit-pip", "params": {"packages": ["nvidia-cuda-nvcc-cu12==12.8.93"], "cuda": "12.8"}},
        "jaxcpu": {"kind": "jax", "params": {"packages": ["jax==0.10.2", "jaxlib==0.10.2"]}},
        "jaxc12": {"kind": "jax", "params": {"packages": ["jax[cuda12]==0.10.2"], "cuda": "12"}},
        "jaxc13": {"kind": "jax", "params": {"packages": ["jax[cuda13]==0.10.2"], "cuda": "13"}},
        "jaxc12l": {"kind": "jax", "params": {"packages": ["jax[cuda12-local]==0.10.2"], "cuda": "12"}},
        "jax062c13l": {"kind": "jax", "params": {"packages": ["jax[cuda13-local]==0.6.2"], "cuda": "13"}},
        "jaxpip": {"kind": "jax", "params": {"packages": ["jax[cuda12_pip]==0.10.2"], "cuda": "12"}},
        "ngcjax": {"kind": "ngc-jax"},
        "apex": {"kind": "apex", "params": {"source": {"repo": "https://github.com/NVIDIA/apex.git",
                                                       "commit": "0123456789abcdef0123456789abcdef01234567"}}},
    },
    "projects": {
        "mc15": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": COMMITS["0.15"]}, "version": "0.15.0"}},
        "mc16": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": COMMITS["0.16"]}, "version": "0.16.0"}},
        "mc17": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": COMMITS["0.17"]}}},
    },
    "runtimes": {"env": {"kind": "runtime-env", "params": {"env": {"NCCL_DEBUG": "WARN"}}}},
    "stacks": {},
}


def ds(version: str, ops=("fused_adam",), **params) -> dict:
    return {"kind": "deepspeed", "params": {"version": version, "ops": list(ops), **params}}


def env(**values) -> dict:
    return {"kind": "runtime-env", "params": {"env": values}}


def spec_data(stack: dict, extra: dict | None = None, site: dict | None = None) -> dict:
    data = copy.deepcopy(LIBRARY)
    for section, items in (extra or {}).items():
        data[section].update(copy.deepcopy(items))
    if site is not None:
        data["site"] = site
    data["stacks"]["s"] = stack
    return data


LOCK = """version: 1
bases:
  {base}:
    image: {image}
    digest: sha256:{digest}
    probed: "2026-11-29T23:00:00Z"
    facts: {facts}
"""


def write_lock(folder, base: str, facts: dict, digest: str = "b" * 64) -> None:
    image = LIBRARY["bases"][base]["image"]
    (folder / "stacks.lock.yaml").write_text(LOCK.format(base=base, image=image, digest=digest,
                                                        facts=yaml.safe_dump(facts, default_flow_style=True).strip()))


def write_any_lock(folder, file, lock: tuple) -> None:
    """A base's lock entry (BASE, facts[, digest]), or a layer's: ("layer", NAME, facts, stale), whose
    definition is that of stack s now (stale: another one, as after an edit beneath it)."""
    if lock[0] != "layer":
        write_lock(folder, *lock)
        return
    _, name, facts, stale = lock
    spec = load_spec(file)
    definition = "0" * 64 if stale else layer_definition(spec, spec.stack("s"), name)
    entry = {"image": f"127.0.0.1:5000/imgbuild/layers/{name}:{'c' * 32}", "digest": "sha256:" + "c" * 64,
             "probed": "2026-12-01T00:00:00Z", "definition": definition, "facts": facts}
    (folder / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {}, "layers": {name: entry}}))


def findings(tmp_path, stack: dict, extra=None, site=None, lock=None, strict=False) -> tuple[object, list[Finding]]:
    folder = tmp_path / "site"
    file = write_stacks(folder, spec_data(stack, extra, site))
    if lock:
        write_any_lock(folder, file, lock)
    spec = load_spec(file)
    from builder.rules.lint import lint_spec
    return spec, preflight(spec, [spec.stacks["s"]], strict=strict) + lint_spec(spec, [spec.stacks["s"]])


def line_of(spec, key: str) -> int:
    path = tuple(int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"[^.\[]+|\[\d+\]", key))
    return spec.doc.line(path)


@dataclass
class Fail:
    id: str
    stack: dict
    rule: str
    severity: str
    message: str                 # a regular expression the message must match
    key: str
    extra: dict = field(default_factory=dict)
    site: dict | None = None
    lock: tuple | None = None


def S(base: str, layers: list, gpus=("H100",), **rest) -> dict:
    return {"base": base, "layers": layers, "gpus": list(gpus), **rest}


FAILS = [
    # -- IB001 driver floor ----------------------------------------------------------------------
    Fail("driver-below-cuda13-floor", S("ngc2509", ["site"]), "IB001", "error",
         r"driver floor 535\.104\.05 cannot run base ngc2509: CUDA 13\.0\.1 needs driver 580\.82\.07 .*R580",
         "site.driver_floor", site={"driver_floor": "535.104.05"}),
    Fail("stack-driver-floor-overrides-site", S("ngc2509", ["site"], driver_floor="570.124.06"), "IB001", "error",
         r"driver floor 570\.124\.06 cannot run base ngc2509", "stacks.s.driver_floor"),
    Fail("forward-compat-datacenter", S("ngc2401", ["site"]), "IB001", "warning",
         r"470\.82\.01 is below .*only through CUDA forward compatibility \(branch R470 >= 470\.57",
         "site.driver_floor", site={"driver_floor": "470.82.01"}),
    Fail("forward-compat-not-geforce", S("ngc2501", ["site"], gpus=["RTX5090"]), "IB001", "error",
         r"forward compatibility does not cover GeForce GPUs \(RTX5090\)", "site.driver_floor",
         site={"driver_floor": "470.82.01"}),
    Fail("no-driver-floor", S("ngc2509", ["site"]), "IB001", "unknown", r"no driver_floor declared", "site",
         site={"registry": "127.0.0.1:5000"}),
    # -- GPUs against CUDA ------------------------------------------------------------------------
    Fail("b200-on-cuda-12.3", S("ngc2401", ["site"], gpus=["H100", "B200"]), "IB010", "error",
         r"B200 \(sm_100\) needs CUDA 12\.8 or newer; base ngc2401 has CUDA 12\.3\.2", "stacks.s.gpus[1]"),
    Fail("b300-on-cuda-12.8", S("ngc2503", ["site"], gpus=["B300"]), "IB010", "error",
         r"B300 \(sm_103\) needs CUDA 12\.9 or newer", "stacks.s.gpus[0]"),
    Fail("v100-on-cuda-13", S("ngc2509", ["site"], gpus=["V100"]), "IB011", "error",
         r"V100 \(sm_70\) cannot be targeted by CUDA 13: CUDA 12 is the last", "stacks.s.gpus[0]"),
    Fail("v100-on-ngc-25.03", S("ngc2503", ["site"], gpus=["V100"]), "IB012", "warning",
         r"V100 \(cc 7\.0\) is below NGC 25\.03's minimum compute capability 7\.5", "stacks.s.gpus[0]"),
    Fail("v100-measured-archs", S("ngc2503", ["site"], gpus=["V100"]), "IB012", "error",
         r"the base's torch has no kernels for V100 \(sm_70\)", "stacks.s.gpus[0]",
         lock=("ngc2503", {"torch_archs": "sm_75;sm_80;sm_86;sm_90;sm_100;sm_120;compute_120", "cuda": "12.8.1"})),
    # -- IB013 a GPU on a stack not built for its nodes' CPU (issue 22: GH200 passed check --strict) ---
    Fail("gh200-on-amd64", S("ngc2503", ["site"], gpus=["H100", "GH200"], platforms=["linux/amd64"]), "IB013", "error",
         r"GH200's nodes run an NVIDIA Grace CPU \(aarch64, linux/arm64 images\); this stack is built for "
         r"linux/amd64 only", "stacks.s.gpus[1]"),
    Fail("gb300-on-amd64", S("ngc2509", ["site"], gpus=["GB300"], platforms=["linux/amd64"]), "IB013", "error",
         r"GB300's nodes run an NVIDIA Grace CPU", "stacks.s.gpus[0]"),
    Fail("h100-on-arm64", S("ngc2509", ["site"], gpus=["H100"], platforms=["linux/arm64"]), "IB013", "error",
         r"H100's nodes run an x86 CPU \(x86_64, linux/amd64 images\); this stack is built for linux/arm64 only",
         "stacks.s.gpus[0]"),
    # -- IB016 CPU ops prebuilt where no CPU baseline is known (issue 35) -------------------------------
    Fail("cpu-ops-no-baseline", S("ngc2509", ["site", "ds-cpu"], gpus=["L4"]), "IB016", "warning",
         r"layer 'ds-cpu' prebuilds the CPU op cpu_adam with no CPU baseline known for linux/amd64: compiled for "
         r"x86-64-v3, the linux/amd64 default \(no system of L4 in the catalog\)", "layers.ds-cpu.params.ops"),
    # -- IB015 an NGC month not known to publish arm64, for an arm64 stack ------------------------
    Fail("gh200-on-ngc-24.01", S("ngc2401", ["site"], gpus=["GH200"]), "IB015", "unknown",
         r"NGC 24\.01 is not known to publish a linux/arm64 image; stack 's' is built for linux/arm64", "stacks.s.base"),
    Fail("gh200-on-ngc-25.03", S("ngc2503", ["site"], gpus=["GH200"]), "IB015", "unknown",
         r"NGC 25\.03 is not known to publish a linux/arm64 image \(a source says so, unconfirmed\)", "stacks.s.base"),
    # -- IB014 an artifact of another platform than the layer's ------------------------------------
    Fail("x86-wheel-in-arm64-layer", S("deb", ["cput"], gpus=[], platforms=["linux/arm64"]), "IB014", "error",
         r"torch-2\.13\.0\+cpu-cp311-cp311-manylinux_2_28_x86_64\.whl is built for linux/amd64 \(x86_64\); stack 's' "
         r"builds this layer for linux/arm64 too", "layers.cput.params.wheel.file"),
    Fail("one-wheel-for-two-platforms", S("deb", ["cput"], gpus=[], platforms=["linux/amd64", "linux/arm64"]),
         "IB014", "error", r"manylinux_2_28_x86_64\.whl is built for linux/amd64 .* for linux/arm64 too",
         "layers.cput.params.wheel.file"),
    Fail("wheel-list-lacks-a-platform", S("deb", ["cput2"], gpus=[], platforms=["linux/amd64", "linux/arm64"]),
         "IB014", "error", r"names no linux/arm64 wheel, and stack 's' is built for linux/arm64 too",
         "layers.cput2.params.wheel",
         extra={"layers": {"cput2": {"kind": "cpu-torch", "params": {"wheel": [WHEEL]}}}}),
    Fail("aarch64-wheel-url-on-gh200-less-stack", S("ngc2509", ["site", "pipw"]), "IB014", "error",
         r"flash_attn-2\.8\.3\+cu12-cp312-cp312-linux_aarch64\.whl is built for linux/arm64 \(aarch64\); stack 's' "
         r"builds this layer for linux/amd64 too", "layers.pipw.params.packages[0]",
         extra={"layers": {"pipw": {"kind": "pip", "params": {"packages": [
             "flash-attn @ https://example.org/flash_attn-2.8.3+cu12-cp312-cp312-linux_aarch64.whl#sha256=" + "e" * 64]}}}}),
    # -- Transformer Engine -----------------------------------------------------------------------
    Fail("te-needs-cuda-12.1", S("cu120", ["site", "te28"]), "IB020", "error",
         r"Transformer Engine 2\.8\.0 needs cuda 12\.1 or newer to build; the stack has 12\.0\.1", "layers.te28.params.version"),
    Fail("te-needs-cudnn-9.3", S("ngc2401", ["site", "te28"]), "IB021", "error",
         r"Transformer Engine 2\.8\.0 needs cudnn 9\.3 or newer to build; the stack has 8\.9\.7\.29", "layers.te28.params.version"),
    Fail("te-cudnn-unknown", S("ngc2509", ["site", "te28"]), "IB021", "unknown",
         r"needs cudnn 9\.3\+ to build; the base's cudnn is not known", "layers.te28.params.version"),
    Fail("te-needs-torch-2.1", S("old", ["site", "te22"]), "IB023", "error",
         r"Transformer Engine 2\.2\.0 needs torch 2\.1 or newer to build; the stack has 2\.0\.0a0", "layers.te22.params.version"),
    Fail("te-fp8-on-a100", S("fresh", ["site", "te-shipped"], gpus=["A100"]), "IB022", "warning",
         r"A100 \(cc 8\.0\) has no FP8", "stacks.s.gpus[0]"),
    Fail("te-shipped-but-none-measured", S("ngc2509", ["site", "te-shipped"]), "IB025", "error",
         r"keeps the Transformer Engine of the base, but the base has none", "layers.te-shipped",
         lock=("ngc2509", {"transformer_engine": None, "cuda": "13.0.1"})),
    # -- DeepSpeed --------------------------------------------------------------------------------
    Fail("ds-numpy2", S("ngc2401", ["site", "d"]), "IB031", "error",
         r"DeepSpeed 0\.14\.0 with numpy >=2\.0: import deepspeed fails.*\(fixed in 0\.14\.4\)", "layers.d.params.version",
         extra={"layers": {"d": ds("0.14.0", packages=["numpy==2.0.1"])}}),
    Fail("ds-pydantic2", S("ngc2401", ["site", "d"]), "IB032", "error",
         r"DeepSpeed 0\.14\.4 with pydantic >=2\.0: .*\(fixed in 0\.15\.0\)", "layers.d.params.version",
         extra={"layers": {"d": ds("0.14.4", packages=["pydantic==2.5.2"])}}),
    Fail("ds-pydantic1", S("ngc2509", ["site", "d"]), "IB033", "error",
         r"DeepSpeed 0\.19\.5 with pydantic <2\.0: DeepSpeed requires pydantic>=2\.0\.0", "layers.d.params.version",
         extra={"layers": {"d": ds("0.19.5", packages=["pydantic==1.10.13"])}}),
    Fail("ds-torch26-checkpoints", S("ngc2503", ["site", "d"], gpus=["A100"]), "IB034", "error",
         r"DeepSpeed 0\.15\.4 with torch >=2\.6: loading DeepSpeed checkpoints fails.*\(fixed in 0\.16\.0\)",
         "layers.d.params.version", extra={"layers": {"d": ds("0.15.4")}}),
    Fail("ds-blackwell-gencode", S("ngc2503", ["site", "d"], gpus=["B200"]), "IB035", "error",
         r"DeepSpeed 0\.16\.2 with a target GPU of cc >=10\.0: op builds emit a wrong -gencode", "layers.d.params.version",
         extra={"layers": {"d": ds("0.16.2")}}),
    Fail("ds-nvcc-12.5", S("ngc2406", ["site", "d"]), "IB036", "error",
         r"DeepSpeed 0\.14\.4 with nvcc >=12\.5,<12\.6: op_builder fails with nvcc 12\.5", "layers.d.params.version",
         extra={"layers": {"d": ds("0.14.4")}}),
    Fail("ds-dynamo-py312", S("py312t23", ["site", "d"]), "IB037", "error",
         r"DeepSpeed 0\.18\.0 with .*python >=3\.12.*Dynamo is not supported", "layers.d.params.version",
         extra={"layers": {"d": ds("0.18.0")}}),
    Fail("ds-torch212-cxx20", S("t212", ["site", "d"]), "IB038", "error",
         r"DeepSpeed 0\.19\.0 with torch >=2\.12: CUDA op compilation errors", "layers.d.params.version",
         extra={"layers": {"d": ds("0.19.0")}}),
    Fail("ds-sparse-attn-torch2", S("ngc2509", ["site", "d"]), "IB039", "error",
         r"op sparse_attn prebuilt and torch >=2\.0: sparse_attn needs torch<2\.0", "layers.d.params.version",
         extra={"layers": {"d": ds("0.19.5", ops=["fused_adam", "sparse_attn"])}}),
    Fail("ds-fp-quantizer-t4", S("ngc2503", ["site", "d"], gpus=["T4"]), "IB039", "error",
         r"op fp_quantizer prebuilt and a target GPU of cc <8\.0: fp_quantizer needs compute capability 8\.0",
         "layers.d.params.version", extra={"layers": {"d": ds("0.17.6", ops=["fp_quantizer"])}}),
    Fail("ds-arch-suffix-measured", S("ngc2509", ["site", "d"], runtime="archenv"), "IB040", "error",
         r"TORCH_CUDA_ARCH_LIST='9\.0a' has an arch-specific entry; DeepSpeed 0\.19\.8's op builder fails .*'0a'",
         "runtimes.archenv.params.env.TORCH_CUDA_ARCH_LIST",
         extra={"layers": {"d": ds("0.19.8")}, "runtimes": {"archenv": env(TORCH_CUDA_ARCH_LIST="9.0a")}}),
    Fail("ds-arch-suffix-other-version", S("ngc2509", ["site", "ds"], runtime="archenv"), "IB040", "warning",
         r"DeepSpeed 0\.19\.5's op builder fails .*measured on 0\.19\.8; not known for 0\.19\.5",
         "runtimes.archenv.params.env.TORCH_CUDA_ARCH_LIST",
         extra={"runtimes": {"archenv": env(TORCH_CUDA_ARCH_LIST="8.0;9.0a")}}),
    Fail("ds-accelerator-cpu-over-cuda-ops", S("ngc2509", ["site", "d"], runtime="dsenv"), "IB044", "error",
         r"DS_ACCELERATOR='cpu' above layer 'd', whose ops are compiled for CUDA: DeepSpeed would use its cpu "
         r"accelerator", "runtimes.dsenv.params.env.DS_ACCELERATOR",
         extra={"layers": {"d": ds("0.19.8")}, "runtimes": {"dsenv": env(DS_ACCELERATOR="cpu")}}),
    # Issue 21: 0.19.99 and 0.42.0 passed `check --strict` with no finding; beyond the catalog is unknown.
    Fail("ds-version-beyond-the-catalog", S("deb", ["cput", "dsx"], gpus=[]), "IB002", "unknown",
         r"^deepspeed 0\.19\.99 is newer than any release the catalog knows \(up to 0\.19\.8\)", "layers.dsx.params.version",
         extra={"layers": {"dsx": ds("0.19.99", ops=("cpu_adam",))}}),
    # Issue 36: 0.16.99 passed `check --strict` with no finding and failed at build; it was never released.
    Fail("ds-version-never-released", S("deb", ["cput", "dsx"], gpus=[]), "IB003", "error",
         r"^deepspeed 0\.16\.99 was never released: the nearest releases are 0\.16\.8, 0\.16\.9, 0\.17\.0, 0\.17\.1$",
         "layers.dsx.params.version", extra={"layers": {"dsx": ds("0.16.99", ops=("cpu_adam",))}}),
    Fail("te-version-beyond-the-catalog", S("ngc2509", ["site", "tex"]), "IB002", "unknown",
         r"^transformer_engine 4\.0\.0 is newer than any release", "layers.tex.params.version",
         extra={"layers": {"tex": {"kind": "transformer-engine", "params": {"version": "4.0.0"}}}}),
    # A published release beyond what the catalog's facts were read through exists: said so, not "may not exist".
    Fail("te-release-beyond-the-facts", S("ngc2509", ["site", "tex"]), "IB002", "unknown",
         r"^transformer_engine 2\.15\.0 is a published release, newer than the catalog's facts were read through "
         r"\(2\.11\.0\)", "layers.tex.params.version",
         extra={"layers": {"tex": {"kind": "transformer-engine", "params": {"version": "2.15.0"}}}}),
    # flash-attn has a release list and no newest_known record: beyond the list is still judged.
    Fail("flash-attn-beyond-its-release-list", S("ngc2509", ["site", "fax"]), "IB002", "unknown",
         r"^flash_attn 2\.99\.0 is newer than any release the catalog knows \(up to 2\.8\.3\.post2\)",
         "layers.fax.params.version", extra={"layers": {"fax": {"kind": "flash-attn", "params": {"version": "2.99.0"}}}}),
    # Issue 21: was refused by lint with the arch-list message (IB104); the reason is that the op needs CUDA.
    Fail("ds-cuda-op-on-a-cpu-stack", S("deb", ["cput", "dsf"], gpus=[]), "IB045", "error",
         r"^fused_adam needs CUDA: DeepSpeed builds it from CUDA kernels with nvcc, and stack 's' has no CUDA "
         r"toolkit beneath layer 'dsf'", "layers.dsf.params.ops",
         extra={"layers": {"dsf": ds("0.19.8", ops=("cpu_adam", "fused_adam", "utils"))}}),
    Fail("ds-accelerator-unknown-name", S("deb", ["cput", "ds-cpu"], gpus=[], runtime="dsenv"), "IB044", "error",
         r"DS_ACCELERATOR='CPU' is not an accelerator DeepSpeed knows: ValueError", "runtimes.dsenv.params.env.DS_ACCELERATOR",
         extra={"runtimes": {"dsenv": env(DS_ACCELERATOR="CPU")}}),
    Fail("ds-accelerator-unknown-name-beneath-cpu-deepspeed", S("deb", ["cput", "sys-env", "ds-cpu"], gpus=[]),
         "IB044", "error", r"DS_ACCELERATOR='gpu' is not an accelerator DeepSpeed knows",
         "layers.sys-env.params.env.DS_ACCELERATOR",
         extra={"layers": {"sys-env": {"kind": "system-setup", "params": {"env": {"DS_ACCELERATOR": "gpu"}}}}}),
    # Issue 21: classifiers lag what works (0.16.0 runs on 3.12), so beyond them is unknown, not a warning.
    Fail("ds-python-classifiers", S("ngc2503", ["site", "d"], gpus=["A100"]), "IB041", "unknown",
         r"whether DeepSpeed 0\.16\.0 supports Python 3\.12\.3 is not known: its classifiers list Python up to "
         r"3\.10", "layers.d.params.version",
         extra={"layers": {"d": ds("0.16.0")}}),
    Fail("ds-nvcc-vs-torch-cuda", S("cu126", ["site", "d"]), "IB042", "error",
         r"DeepSpeed 0\.15\.4 refuses to build: nvcc 12\.8 does not match the CUDA torch was built with \(12\.6\)",
         "layers.d", extra={"layers": {"d": ds("0.15.4")}}),
    Fail("ds-pypi-nvcc-12-under-torch-cu13", S("deb", ["pt211", "nvcc128", "d"]), "IB042", "error",
         r"DeepSpeed 0\.19\.8 refuses to build: nvcc 12\.8 does not match the CUDA torch was built with \(13\.0\)",
         "layers.d", extra={"layers": {"d": ds("0.19.8")}}),
    Fail("te-pypi-nvcc-12-under-torch-cu13", S("deb", ["pt211", "nvcc128", "te210"]), "IB043", "error",
         r"layer 'te210' compiles CUDA with nvcc 12\.8, but torch was built with CUDA 13\.0: torch's extension "
         r"builder refuses", "layers.te210"),
    Fail("v100-on-pypi-cuda-13", S("deb", ["pt211", "nvcc130"], gpus=["V100"]), "IB011", "error",
         r"V100 \(sm_70\) cannot be targeted by CUDA 13", "stacks.s.gpus[0]"),
    Fail("b300-on-pypi-cuda-12.8", S("deb", ["pt211", "nvcc128"], gpus=["B300"]), "IB010", "error",
         r"B300 \(sm_103\) needs CUDA 12\.9 or newer", "stacks.s.gpus[0]"),
    # A layer measured with `imgbuild lock layer=NAME`: its measurement replaces what it declares.
    Fail("ds-pypi-measured-torch-cuda", S("deb", ["pt211", "nvcc130", "d"]), "IB042", "error",
         r"DeepSpeed 0\.19\.8 refuses to build: nvcc 13\.0 does not match the CUDA torch was built with \(12\.8\)",
         "layers.d", extra={"layers": {"d": ds("0.19.8")}},
         lock=("layer", "pt211", {"torch": "2.11.0", "torch_cuda": "12.8", "python": "3.11.2"}, False)),
    Fail("layer-declared-vs-measured", S("deb", ["pt211", "nvcc130"]), "IB093", "warning",
         r"layer pt211: torch_cuda is declared 13\.0 but measured 12\.8 in its image", "layers.pt211.params.cuda",
         lock=("layer", "pt211", {"torch": "2.11.0", "torch_cuda": "12.8"}, False)),
    Fail("layer-lock-stale", S("deb", ["pt211", "nvcc130"]), "IB091", "warning",
         r"measured facts of layer pt211 ignored: .* it or a layer beneath it, or the base, changed since",
         "layers.pt211", lock=("layer", "pt211", {"torch_cuda": "12.8"}, True)),
    Fail("apex-nvcc-vs-torch-cuda", S("cu126", ["site", "apex"]), "IB050", "error",
         r"Apex refuses to build: nvcc 12\.8 does not match the CUDA torch was built with \(12\.6\)", "layers.apex"),
    # -- Megatron-Core ----------------------------------------------------------------------------
    Fail("megatron-0.17-python-3.10", S("ngc2401", ["site"], project="mc17"), "IB061", "error",
         r"megatron-core 0\.17\.0 needs python >=3\.12; the stack has 3\.10\.12", "projects.mc17.params.source"),
    Fail("megatron-0.16-torch-2.2", S("ngc2401", ["site"], project="mc16"), "IB062", "error",
         r"megatron-core 0\.16\.0 needs torch >=2\.6\.0; the stack has 2\.2\.0a0\+81ea7a4", "projects.mc16.params.version"),
    Fail("megatron-0.15-numpy-2", S("ngc2509", ["site"], project="m"), "IB063", "error",
         r"megatron-core 0\.15\.0 needs numpy <2\.0\.0; the stack has 2\.1\.0", "projects.m.params.version",
         extra={"projects": {"m": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": COMMITS["0.15"]},
                                                                 "version": "0.15.0", "packages": ["numpy==2.1.0"]}}}}),
    Fail("megatron-version-vs-commit", S("ngc2509", ["site"], project="m"), "IB064", "error",
         r"commit 9539a12e1b04 is megatron-core 0\.17\.0, not 0\.16\.0", "projects.m.params.version",
         extra={"projects": {"m": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": COMMITS["0.17"]},
                                                                 "version": "0.16.0"}}}}),
    Fail("megatron-te-range", S("fresh", ["site", "te28"], project="mc16"), "IB065", "warning",
         r"megatron-core 0\.16\.0 is tested with Transformer Engine .*; the stack has 2\.8\.0", "projects.mc16.params.version"),
    Fail("megatron-unknown-commit", S("ngc2509", ["site"], project="m"), "IB060", "unknown",
         r"which megatron-core this commit is is not known", "projects.m.params.source",
         extra={"projects": {"m": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": "f" * 40}}}}}),
    Fail("megatron-tag-object-pin", S("ngc2509", ["site"], project="m"), "IB066", "error",
         r"103851dcf4c3 is the annotated tag object of core_v0\.15\.0, not a commit", "projects.m.params.source",
         extra={"projects": {"m": {"kind": "megatron", "params": {
             "source": {"repo": MEGATRON, "commit": "103851dcf4c380fe93463e2c128cbfba9bd84e37"}, "version": "0.15.0"}}}}),
    Fail("megatron-commit-not-the-release", S("ngc2509", ["site"], project="m"), "IB067", "warning",
         r"dddddddddddd is not core_v0\.16\.0's commit \(3bec9aa97dda\)", "projects.m.params.source",
         extra={"projects": {"m": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": "d" * 40},
                                                                 "version": "0.16.0"}}}}),
    Fail("tag-field-unknown-before-build", S("ngc2509", ["site"], project="m", tags=["{stack}-mcore{megatron}"]),
         "IB005", "warning", r"\{megatron\} is not known before the build", "stacks.s.tags[0]",
         extra={"projects": {"m": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": "f" * 40}}}}}),
    Fail("two-megatron-projects", S("ngc2509", ["site"], project=["m", "m2"]), "IB081", "error",
         r"projects 'm' and 'm2' both write /opt/Megatron-LM", "projects.m2.params.path",
         extra={"projects": {"m": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": COMMITS["0.16"]},
                                                                 "version": "0.16.0"}},
                             "m2": {"kind": "megatron", "params": {"source": {"repo": MEGATRON, "commit": COMMITS["0.17"]},
                                                                  "version": "0.17.0"}}}}),
    # -- torch replaced, NCCL, base facts ---------------------------------------------------------
    Fail("ds-requires-torch-vs-prerelease", S("old", ["site", "ds"]), "IB070", "error",
         r"deepspeed 0\.19\.5 requires torch>=2\.0\.0, which the base's torch 2\.0\.0a0\+1767026 does not satisfy",
         "layers.ds.params.version"),
    Fail("torch-pinned-over-base", S("ngc2509", ["site", "d"]), "IB070", "error",
         r"layer 'd' pins torch==2\.9\.0, which brings its own torch over the base's 2\.9\.0a0\+50eac811a6",
         "layers.d.params.packages[0]", extra={"layers": {"d": ds("0.19.5", packages=["torch==2.9.0"])}}),
    Fail("vllm-pinned-over-base", S("ngc2509", ["site"], project="p"), "IB070", "error",
         r"layer 'p' pins vllm==0\.6\.0", "projects.p.params.packages[0]",
         extra={"projects": {"p": {"kind": "project", "params": {"source": {"repo": "https://example.com/p.git",
                                                                            "commit": "a" * 40}, "packages": ["vllm==0.6.0"]}}}}),
    Fail("compiled-beneath-torch-swap", S("ngc2509", ["site", "d", "swap"]), "IB071", "warning",
         r"layer 'swap' replaces torch \(a test swap\), but 'd' beneath it was compiled against the torch it replaces",
         "layers.swap.params.replace_torch",
         extra={"layers": {"d": ds("0.19.5"), "swap": {"kind": "pip", "params": {
             "packages": ["torch==2.9.0"], "replace_torch": "a test swap"}}}}),
    Fail("extras-without-deps", S("fresh", ["site"], project="px"), "IB080", "error",
         r"layer 'px' asks for extras dev but installs with pip-no-deps, which installs none of their dependencies",
         "projects.px.params.extras", extra={"projects": {"px": {"kind": "project", "params": {
             "source": {"repo": "https://example.com/p.git", "commit": "a" * 40}, "extras": ["dev"]}}}}),
    Fail("nccl-wheel-beside-ngc", S("ngc2509", ["site", "d"]), "IB075", "warning",
         r"nvidia-nccl-cu13==2\.28\.9 beside the NGC torch, which uses the container's NCCL", "layers.d.params.packages[0]",
         extra={"layers": {"d": ds("0.19.5", packages=["nvidia-nccl-cu13==2.28.9"])}}),
    Fail("declared-vs-catalog", S("ngc2509", ["site"]), "IB090", "warning",
         r"base ngc2509: torch is 2\.9\.0 \(declared\) but 2\.9\.0a0\+50eac811a6 \(catalog\)", "bases.ngc2509.provides.torch",
         extra={"bases": {"ngc2509": {"image": "nvcr.io/nvidia/pytorch:25.09-py3", "family": "ngc-pytorch",
                                      "provides": {"torch": "2.9.0"}}}}),
    Fail("measured-vs-declared", S("fresh", ["site"]), "IB090", "warning",
         r"base fresh: numpy is 2\.1\.2 \(measured\) but 1\.26\.4 \(declared\); preflight uses the measured value",
         "bases.fresh.provides.numpy", lock=("fresh", {"numpy": "2.1.2"})),
    Fail("stale-lock", S("ngc2509", ["site"]), "IB091", "warning",
         r"measured facts ignored: .*stacks\.lock\.yaml was probed from nvcr\.io/nvidia/pytorch:25\.09-py3@sha256:b+, not",
         "bases.ngc2509", lock=("ngc2509", {"cuda": "13.0.1"}),
         extra={"bases": {"ngc2509": {"image": "nvcr.io/nvidia/pytorch:25.09-py3", "family": "ngc-pytorch",
                                      "digest": "sha256:" + "c" * 64}}}),
    # -- lint of spec values ----------------------------------------------------------------------
    Fail("env-arch-list-vs-gpus", S("ngc2509", ["site"], runtime="e"), "IB105", "warning",
         r"TORCH_CUDA_ARCH_LIST='8\.0' disagrees with the stack's gpus \(H100: 9\.0\)", "runtimes.e.params.env.TORCH_CUDA_ARCH_LIST",
         extra={"runtimes": {"e": env(TORCH_CUDA_ARCH_LIST="8.0")}}),
    Fail("cuda-flavour-pin", S("ngc2509", ["site", "d"]), "IB108", "error",
         r"cupy-cuda12x==13\.3\.0 is built for CUDA 12; base ngc2509 has CUDA 13\.0\.1", "layers.d.params.packages[0]",
         extra={"layers": {"d": ds("0.19.5", packages=["cupy-cuda12x==13.3.0"])}}),
    Fail("pip-constraint-in-env", S("ngc2509", ["site"], runtime="e"), "IB109", "error",
         r"PIP_CONSTRAINT set by a layer replaces the constraint", "runtimes.e.params.env.PIP_CONSTRAINT",
         extra={"runtimes": {"e": env(PIP_CONSTRAINT="")}}),
    # A git repo URL with a token is refused when the spec loads (tests/test_hostile_values.py); the lint
    # rule still catches one in any other value, such as an env value.
    Fail("token-in-env", S("ngc2509", ["site"], runtime="e"), "IB110", "error",
         r"HF_TOKEN holds a literal value", "runtimes.e.params.env.HF_TOKEN",
         extra={"runtimes": {"e": env(HF_TOKEN="hf_abcdef")}}),
    # -- IB085-IB089 JAX ---------------------------------------------------------------------------
    Fail("jax-plugin-major-vs-base", S("cuda13", ["jaxc12l"]), "IB085", "error",
         r"jaxlib's CUDA plugin is built for CUDA 12 and runs on the base's libraries \(-local\), but base cuda13 has "
         r"CUDA 13\.0\.1", "layers.jaxc12l.params.cuda"),
    Fail("jax-wheels-beside-another-cuda", S("cuda13", ["jaxc12"]), "IB085", "warning",
         r"jaxlib's CUDA 12 plugin brings its own CUDA 12 wheels onto base cuda13, which has CUDA 13\.0\.1",
         "layers.jaxc12.params.cuda"),
    Fail("jax-in-a-pip-layer-without-that-plugin", S("ngc2509", ["site", "jp"]), "IB085", "error",
         r"jax 0\.6\.2 has no CUDA 13 plugin on PyPI \(it has CUDA 12\)", "layers.jp.params.packages[0]",
         extra={"layers": {"jp": {"kind": "pip", "params": {"packages": ["jax[cuda13]==0.6.2"]}}}}),
    Fail("jax-two-cuda-extras", S("deb", ["jx"]), "IB085", "error",
         r"jax\[cuda12,cuda13\]==0\.10\.2 installs JAX's CUDA 12 build, but the stack declares CUDA 13",
         "layers.jx.params.packages[0]",
         extra={"layers": {"jx": {"kind": "jax", "params": {"packages": ["jax[cuda13,cuda12]==0.10.2"], "cuda": "13"}}}}),
    Fail("jax-release-without-that-plugin", S("cuda13", ["jax062c13l"]), "IB085", "error",
         r"jax 0\.6\.2 has no CUDA 13 plugin on PyPI \(it has CUDA 12\)", "layers.jax062c13l.params.cuda"),
    Fail("jax-extra-removed", S("deb", ["jaxpip"]), "IB085", "error",
         r"jax 0\.10\.2 has no extra \[cuda12_pip\] \(removed in 0\.6\.0\).*CPU-only", "layers.jaxpip.params.packages[0]"),
    Fail("jax-local-on-a-base-without-cuda", S("deb", ["jaxc12l"]), "IB085", "error",
         r"uses the CUDA of the base .*base deb has none", "layers.jaxc12l.params.packages[0]"),
    Fail("jax-extra-vs-declared-cuda", S("deb", ["jx"]), "IB085", "error",
         r"jax\[cuda13\]==0\.10\.2 installs JAX's CUDA 13 build, but the stack declares CUDA 12", "layers.jx.params.packages[0]",
         extra={"layers": {"jx": {"kind": "jax", "params": {"packages": ["jax[cuda13]==0.10.2"], "cuda": "12"}}}}),
    Fail("jax-cudnn-below-plugin", S("cuda129-cudnn91", ["jaxc12l"]), "IB086", "error",
         r"jax 0\.10\.2's CUDA 12 plugin needs cuDNN 9\.8 or newer; the stack has 9\.1\.0",
         "bases.cuda129-cudnn91.provides.cudnn"),
    Fail("jax-cuda-runtime-below-plugin", S("cuda120", ["jaxc12l"]), "IB086", "error",
         r"needs the CUDA runtime 12\.1\.105 or newer; base cuda120 has 12\.0\.1", "bases.cuda120.image"),
    Fail("jax-driver-below-plugin", S("deb", ["jaxc13"]), "IB088", "error",
         r"driver floor 575\.57\.08 cannot run jaxlib's CUDA 13 plugin: JAX asks for driver 580", "site.driver_floor",
         site={"driver_floor": "575.57.08"}),
    Fail("jax-gpu-below-min-cc", S("deb", ["jaxc13"], gpus=["V100"]), "IB089", "error",
         r"V100 \(cc 7\.0\) is below what JAX's CUDA 13 build supports \(cc 7\.5\+\)", "stacks.s.gpus[0]"),
]


def case_site(case: Fail) -> dict | None:
    """The site section of a case: the library's, changed by case.site (driver_floor dropped unless given)."""
    site = None if case.site is None else {**LIBRARY["site"], **case.site}
    if case.site is not None and "driver_floor" not in case.site:
        site.pop("driver_floor")
    return site


@pytest.mark.parametrize("case", FAILS, ids=lambda c: c.id)
def test_a_stack_breaking_the_rule_is_refused(tmp_path, case):
    spec, found = findings(tmp_path, case.stack, case.extra, case_site(case), case.lock)
    hits = [f for f in found if f.rule == case.rule and re.search(case.message, f.message)]
    assert hits, "\n".join(f.render() for f in found)
    f = hits[0]
    assert f.severity == case.severity, f.render()
    assert f.stack == "s" and f.key == case.key, f.render()
    assert f.file == spec.file and f.line == line_of(spec, case.key), f.render()
    if f.severity != "unknown" and not f.rule.startswith("IB1"):
        assert f.source, f.render()  # the fact behind the rule is named


def test_there_are_enough_distinct_failing_cases():
    assert len(FAILS) >= 25 and len({c.id for c in FAILS}) == len(FAILS)
    assert len({c.rule for c in FAILS}) >= 30


PASSES = [
    # (rules that must not fire, stack, extra, site)
    ("IB001", S("ngc2509", ["site"]), {}, None),                                    # R580 floor: minor-version compat
    ("IB001", S("ngc2503", ["site"], gpus=["A100"]), {}, None),                     # 580 >= 570.124.06
    ("IB001", S("ngc2401", ["site"]), {}, {"driver_floor": "535.104.05"}),          # CUDA 12.3 on R535: MVC
    ("IB010 IB013", S("ngc2503", ["site"], gpus=["B200", "RTX5090"]), {}, None),
    ("IB013", S("ngc2509", ["site"], gpus=["H100", "H200", "B200", "B300", "A100", "L40S"]), {}, None),
    ("IB011 IB012", S("ngc2401", ["site"], gpus=["V100"]), {}, None),
    ("IB020 IB021 IB023 IB025", S("fresh", ["site", "te210"]), {}, None),
    ("IB022", S("fresh", ["site", "te-shipped"], gpus=["H100", "L40S"]), {}, None),
    ("IB031 IB032 IB033 IB034 IB035 IB036 IB037 IB038 IB039 IB040 IB041 IB042 IB070",
     S("ngc2509", ["site", "d"], gpus=["B200"], runtime="e"),
     {"layers": {"d": ds("0.19.5", packages=["numpy==1.26.4", "pydantic==2.11.7"])},
      "runtimes": {"e": env(TORCH_CUDA_ARCH_LIST="10.0")}}, None),
    ("IB042", S("cu126", ["site", "d"]), {"layers": {"d": ds("0.17.6")}}, None),   # 12.6 and 12.8 both tolerated
    ("IB050", S("ngc2503", ["site", "apex"], gpus=["A100"]), {}, None),
    # CUDA 13.0 from PyPI under torch 2.11.0 (13.0): nothing unknown about nvcc any more.
    ("IB010 IB011 IB042 IB043 IB109", S("deb", ["pt211", "nvcc130", "d", "te210"], gpus=["A100", "H100"]),
     {"layers": {"d": ds("0.19.8")}}, None),
    ("IB060 IB061 IB062 IB063 IB064 IB065", S("fresh", ["site", "te-shipped"], project="mc16"), {}, None),
    ("IB061 IB062", S("ngc2509", ["site"], project="mc17"), {}, None),
    # The twins of IB005, IB066 and IB081: a known commit fills {megatron}; the commit, not its tag object; a
    # second project at a path of its own that installs nothing the first does.
    ("IB005 IB066 IB067 IB081", S("ngc2509", ["site"], project=["mc16", "px2"], tags=["{stack}-mcore{megatron}"]),
     {"projects": {"px2": {"kind": "project", "params": {"source": {"repo": "https://example.com/p.git", "commit": "a" * 40},
                                                         "path": "/opt/p2"}}}}, None),
    ("IB070 IB075 IB045 IB002", S("deb", ["cput", "ds-cpu"], gpus=[]), {}, None),
    # Host-code ops on a CPU stack, and CUDA ops above a CUDA toolkit from PyPI.
    ("IB045 IB104", S("deb", ["cput", "dsh"], gpus=[]),
     {"layers": {"dsh": ds("0.19.8", ops=("cpu_adam", "cpu_adagrad", "cpu_lion", "async_io", "deepspeed_shm_comm",
                                          "utils", "pin_memory"))}}, None),
    ("IB045", S("deb", ["pt211", "nvcc130", "d"], gpus=["H100"]), {"layers": {"d": ds("0.19.8")}}, None),
    # cpu-smoke's case: DeepSpeed built for CPU, and DS_ACCELERATOR=cpu above it.
    ("IB044", S("deb", ["cput", "ds-cpu"], gpus=[], runtime="dsenv"), {"runtimes": {"dsenv": env(DS_ACCELERATOR="cpu")}}, None),
    ("IB044", S("ngc2509", ["site", "d"], runtime="dsenv"),
     {"layers": {"d": ds("0.19.8")}, "runtimes": {"dsenv": env(DS_ACCELERATOR="cuda")}}, None),
    # Set beneath a CUDA DeepSpeed layer: that layer's own ENV DS_ACCELERATOR=cuda is what the image has.
    ("IB044", S("ngc2509", ["site", "sys-env", "d"]),
     {"layers": {"d": ds("0.19.8"), "sys-env": {"kind": "system-setup", "params": {"env": {"DS_ACCELERATOR": "cpu"}}}}},
     None),
    ("IB090 IB091", S("ngc2509", ["site"]), {}, None),
    # JAX: the twins of the refused stacks above.
    ("IB085 IB086 IB088 IB089 IB001", S("cuda129", ["jaxc12l"]), {}, None),
    ("IB085 IB086 IB088 IB089", S("cuda13", ["jx"]), {"layers": {"jx": {"kind": "jax", "params": {
        "packages": ["jax[cuda13-local]==0.10.2"], "cuda": "13"}}}}, None),
    ("IB085 IB086 IB088 IB089", S("deb", ["jaxc12"], gpus=["V100"]), {}, {"driver_floor": "535.104.05"}),
    ("IB085 IB086 IB088 IB089", S("deb", ["jaxc13"], gpus=["A100", "H100"]), {}, None),
    ("IB085 IB086 IB088 IB089 IB001", S("ngcjax2606", ["ngcjax"]), {}, None),
    # NGC builds jaxlib against its own cuDNN: PyPI's plugins and their floors do not judge it (jax 0.4.26 with
    # cuDNN 9.1, a release with no CUDA 13 plugin on PyPI).
    ("IB085 IB086", S("ngcjax-declared", ["ngcjax"]), {"bases": {"ngcjax-declared": {
        "image": "nvcr.io/nvidia/jax:26.06-py3", "family": "ngc-jax",
        "provides": {"jax": "0.6.2", "cudnn": "9.1.0", "nccl": "2.17.1"}}}}, None),
    # jax[cuda12] brings its own cuDNN and runtime wheels: the base's older ones are not what it runs on.
    ("IB085 IB086", S("cuda129-cudnn91", ["jaxc12"]), {}, None),
    ("IB085 IB086", S("cuda120", ["jaxc12"]), {}, None),
    ("IB085 IB086 IB088 IB089 IB108", S("deb", ["jaxcpu"], gpus=[]), {}, None),
    ("IB105 IB108 IB109 IB110", S("ngc2509", ["site", "d"], runtime="e"),
     {"layers": {"d": ds("0.19.5", packages=["nvidia-nccl-cu13==2.28.9"])},
      "runtimes": {"e": env(TORCH_CUDA_ARCH_LIST="9.0", HF_HOME="/data/hf", PIP_INDEX_URL_FILE="/run/x")}}, None),
]


@pytest.mark.parametrize("rules,stack,extra,site", PASSES, ids=lambda x: x if isinstance(x, str) else "")
def test_a_stack_keeping_the_rule_passes(tmp_path, rules, stack, extra, site):
    site = None if site is None else {**LIBRARY["site"], **site}
    _, found = findings(tmp_path, stack, extra, site)
    assert not [f for f in found if f.rule in rules.split()], "\n".join(f.render() for f in found)
    assert not [f for f in found if f.severity == "error"], "\n".join(f.render() for f in found)


def reported_rule_ids() -> set:
    """Every rule id a preflight finding can carry: the ids written in builder/preflight.py outside the
    @rule(...) registrations (IB030 registers the family whose findings carry the catalog's ids) and
    the ids of the catalog's DeepSpeed incompatibilities."""
    import inspect

    import builder.rules.preflight
    from builder.core import catalog
    source = [line for line in inspect.getsource(builder.rules.preflight).splitlines()
              if not line.lstrip().startswith("@rule(")]
    ids = set(re.findall(r'"(IB0\d\d)"', "\n".join(source)))
    return ids | {inc.rule for inc in catalog.ds_incompatibilities()}


def test_every_reported_rule_id_has_a_failing_case_of_exactly_that_id():
    ids = reported_rule_ids()
    assert {"IB001", "IB021", "IB031", "IB039", "IB040", "IB041", "IB064", "IB091"} <= ids and "IB030" not in ids
    missing = sorted(ids - {c.rule for c in FAILS})
    assert not missing, f"rule ids with no failing case: {missing}"


def test_every_registered_rule_has_a_failing_case(tmp_path):
    """Each registered rule, run on its own, produces the finding of at least one failing case (so that
    IB040 and IB041 are two rules, and IB030 is covered by a case that its own check reports)."""
    from builder.rules.facts import resolve
    from builder.core.lockfile import load_lock
    from builder.rules.preflight import Ctx

    covered: dict = {r.id: [] for r in RULES}
    assert len(covered) == len(RULES), "two rules registered under one id"
    for n, case in enumerate(c for c in FAILS if not c.rule.startswith("IB1")):  # IB1xx: lint (test_lint.py)
        folder = tmp_path / f"case{n}"
        file = write_stacks(folder, spec_data(case.stack, case.extra, case_site(case)))
        if case.lock:
            write_any_lock(folder, file, case.lock)
        spec = load_spec(file)
        ctx = Ctx(spec, spec.stack("s"), resolve(spec, spec.stack("s"), load_lock(file)))
        for r in RULES:
            if any(f.rule == case.rule and re.search(case.message, f.message) for f in r.check(ctx)):
                covered[r.id].append(case.id)
    missing = sorted(rid for rid, cases in covered.items() if not cases)
    assert not missing, f"registered rules with no failing case: {missing}"


def test_an_nccl_wheel_other_than_the_one_torch_pins(tmp_path):
    """A site's own base kind for a pip-installed CUDA torch: the catalog knows which NCCL its wheels pin."""
    root = copy_kinds(tmp_path / "site")
    kind = root / "layers" / "pip-cuda-base"
    kind.mkdir()
    (kind / "kind.yaml").write_text("description: a CUDA image with torch from PyPI\nrole: base\n"
                                    "base_family: debian\nprovides: [python, torch, cuda]\n")
    (kind / "fragment.j2").write_text("RUN true\n")
    extra = {"bases": {"pipcuda": {"image": "registry.example/pip-cuda:1", "family": "debian",
                                   "provides": {"python": "3.12.3", "torch": "2.7.1+cu126", "cuda": "12.6.3"}}},
             "layers": {"b": {"kind": "pip-cuda-base"}},
             "projects": {"p": {"kind": "project", "params": {"source": {"repo": "https://example.com/p.git",
                                                                         "commit": "a" * 40},
                                                              "packages": ["nvidia-nccl-cu12==2.21.5"]}}}}
    file = write_stacks(root, spec_data(S("pipcuda", ["b"], project="p"), extra))
    spec = load_spec(file)
    f = next(f for f in preflight(spec, [spec.stacks["s"]]) if f.rule == "IB075")
    assert f.severity == "warning" and f.key == "projects.p.params.packages[0]", f.render()
    assert f.message == "torch 2.7.1+cu126 wheels pin NCCL 2.26.2; nvidia-nccl-cu12==2.21.5 replaces it"
    assert "torch wheels' metadata on PyPI" in f.source


# -- measured facts win, and say so ------------------------------------------------------------------

def test_measured_facts_beat_declared_and_catalog_ones(tmp_path):
    """25.03's catalog says 12.8.1; a measurement of 12.9 turns B300 from refused to accepted."""
    stack = S("ngc2503", ["site"], gpus=["B300"])
    _, before = findings(tmp_path / "a", stack)
    assert [f.origin for f in before if f.rule == "IB010"] == ["catalog"]
    _, after = findings(tmp_path / "b", stack, lock=("ngc2503", {"cuda": "12.9.1.010"}))
    assert not [f for f in after if f.rule == "IB010"]
    _, refused = findings(tmp_path / "c", S("ngc2503", ["site"], gpus=["GB300"]),
                          lock=("ngc2503", {"cuda": "12.8.0.038"}))
    f = next(f for f in refused if f.rule == "IB010")
    assert f.origin == "measured" and "stacks.lock.yaml: probe of nvcr.io/nvidia/pytorch:25.03-py3@sha256:" in f.source


def test_unknown_is_reported_never_guessed(tmp_path):
    """A DeepSpeed older than the numpy fix on a base whose numpy nobody knows: unknown, not pass or fail."""
    _, found = findings(tmp_path, S("ngc2401", ["site", "d"]), {"layers": {"d": ds("0.14.0")}})
    f = next(f for f in found if f.rule == "IB031")
    assert f.severity == "unknown" and "the stack's numpy is not known" in f.message
    assert "imgbuild lock" in f.fix


def test_strict_turns_warnings_into_errors_but_not_unknowns(tmp_path):
    stack = S("ngc2503", ["site"], gpus=["V100"])
    _, relaxed = findings(tmp_path / "a", stack)
    _, strict = findings(tmp_path / "b", stack, strict=True)
    assert [f.severity for f in relaxed if f.rule == "IB012"] == ["warning"]
    assert [f.severity for f in strict if f.rule == "IB012"] == ["error"]
    _, unknown = findings(tmp_path / "c", S("ngc2509", ["site", "te28"]), strict=True)
    assert [f.severity for f in unknown if f.rule == "IB021"] == ["unknown"]


# -- the CLI and the build ------------------------------------------------------------------------

def test_check_refuses_with_exit_3_naming_stack_key_rule_and_source(tmp_path):
    file = write_stacks(tmp_path, spec_data(S("ngc2509", ["site"], gpus=["V100"])))
    res = run_cli("check", "-f", file)
    assert res.code == 3, res.output
    line = load_spec(file).doc.line(("stacks", "s", "gpus", 0))
    assert f"error IB011 [s] {file}:{line}: stacks.s.gpus[0]: V100 (sm_70) cannot be targeted by CUDA 13" in res.out
    assert "fact (declared, unverified): 13.0.1" not in res.out  # nothing declared: the catalog's CUDA
    assert "fact (catalog, verified): 13.0.1 (catalog: NGC PyTorch 25.09" in res.out
    assert res.err.startswith(f"preflight: {file}: ") and "error(s)" in res.err and "Traceback" not in res.err


def test_a_cuda_op_on_a_cpu_stack_is_refused_for_that_reason_alone(tmp_path):
    """Issue 21: `check` refused this with "compiled without TORCH_CUDA_ARCH_LIST" (IB104 on the rendered
    Dockerfile), which no stacks.yaml value can fix on a CPU stack. Now one error, saying the op needs CUDA."""
    file = write_stacks(tmp_path, spec_data(S("deb", ["cput", "dsf"], gpus=[]),
                                            {"layers": {"dsf": ds("0.19.8", ops=("cpu_adam", "fused_adam"))}}))
    res = run_cli("check", "--json", "-f", file)
    assert res.code == 3, res.output
    errors = [(f["rule"], f["key"]) for f in json.loads(res.out)["findings"] if f["severity"] == "error"]
    assert errors == [("IB045", "layers.dsf.params.ops")], res.out


def test_check_strict_fails_on_a_warning(tmp_path):
    file = write_stacks(tmp_path, spec_data(S("ngc2503", ["site"], gpus=["V100"])))
    assert run_cli("check", "-f", file).code == 0
    res = run_cli("check", "--strict", "-f", file)
    assert res.code == 3 and "error IB012" in res.out, res.output


def test_every_shipped_stack_passes_check_strict():
    res = run_cli("check", "--all", "--strict", "-f", STACKS)
    assert res.code == 0, res.output
    assert "0 error(s), 0 warning(s)" in res.out


def test_check_all_on_the_shipped_stacks_takes_under_a_second():
    run_cli("check", "--all", "-f", STACKS)  # imports and caches warm, as in one process of the CLI
    start = time.perf_counter()
    res = run_cli("check", "--all", "-f", STACKS)
    assert res.code == 0 and time.perf_counter() - start < 1.0


def test_build_refuses_an_impossible_stack_before_touching_docker(tmp_path, monkeypatch):
    from builder.ship import pipeline as build_module

    def no_docker(*args, **kwargs):
        raise AssertionError("Docker must not be reached")

    monkeypatch.setattr(build_module.Engine, "detect", no_docker)
    spec = load_spec(write_stacks(tmp_path, spec_data(S("ngc2509", ["site"], gpus=["V100"]))))
    said = []
    start = time.perf_counter()
    with pytest.raises(PreflightError, match=r"1 error\(s\) found before building \(stacks: s\); nothing was built"):
        build_module.build(prepare(spec), say=said.append)
    assert time.perf_counter() - start < 1.0
    assert any(line.startswith("error IB011 [s]") for line in said)


def test_build_lets_a_possible_stack_through_to_the_engine(monkeypatch):
    from builder.ship import pipeline as build_module

    class Reached(Exception):
        pass

    def engine(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(build_module.Engine, "detect", engine)
    said = []
    with pytest.raises(Reached):
        spec = load_spec(STACKS)
        build_module.build(prepare(spec, [spec.stacks["cpu-smoke"], spec.stacks["h100-megatron"]]), say=said.append)
    # The shipped lock (issue 36) holds cpu-smoke's pip layers; the NGC stack, which cannot be locked where its
    # base is not reachable, has its pip layers said to be unlocked (IB096, a warning without --require-locked),
    # and nothing else is.
    assert not [line for line in said if line.startswith(("error", "warning")) and " IB096 " not in line], said
    assert not any(line.startswith("warning IB096 [cpu-smoke]") for line in said), said
    assert any(line.startswith("warning IB096 [h100-megatron]") and "layers.ds-0.19.5-hopper" in line for line in said), said
    assert ("lock: 3 of 5 pip layer(s) locked (stacks.lock.yaml): cpu-torch-2.13, ds-0.19.8-cpu, smoke-train; "
            "resolved at build time: ds-0.19.5-hopper, megatron-core-0.16") in said, said


def test_the_shipped_site_declares_its_driver_floor():
    spec = load_spec(STACKS)
    assert spec.site.driver_floor == "580.65.06"
    assert all(s.driver_floor == "580.65.06" for s in spec.stacks.values())


@pytest.mark.parametrize("value", ["580.65.6.1", "R580", "58", "580..1", True])
def test_a_driver_floor_that_is_not_a_driver_version_is_a_spec_error(tmp_path, value):
    site = {**LIBRARY["site"], "driver_floor": value}
    file = write_stacks(tmp_path, spec_data(S("ngc2509", ["site"]), site=site))
    res = run_cli("check", "-f", file)
    assert res.code == 2 and "site.driver_floor" in res.err, res.output
