"""CUDA code compiled in an image here, and its arch coverage proven from the binaries (issue 13),
against the real engine and registry. No GPU is needed to compile: the toolkit comes from PyPI
(layers/cuda-toolkit-pip, the pins of scripts/cuda-13.2-pypi.txt) on the cpu-smoke stack's torch
layer, and the extension is examples/tiny-cuda-ext (a mirror made by scripts/make-smoke-mirror.sh)
built by the cuda-source kind with the stack's arch list.

- one GPU and two GPU generations: the binaries hold code for exactly what the stack declares, and the
  stacks are released;
- a layer whose build ignores the arch list (tiny-cuda-ext v2 compiles for 8.0 whatever it is given,
  as a wheel shipped without the newest arch) passes preflight, builds, and fails its coverage check
  for the H100 the stack declares: no tag moves;
- CMake given the rendered spelling of the arch list compiles exactly that code.

This is the smallest real extension that shows promise 7's arch half: nvcc, the stack's arch list, and the
coverage read from the binary, for one and for two archs, once per run. The examples/cuda-pypi stacks (torch
2.11 with CUDA from PyPI, DeepSpeed's fused_adam, Transformer Engine compiled here: 17-20 minutes on 2 cores)
prove nothing more of that promise and are not built by the suite: docs/development.md says when and how to
build them by hand.
"""

from __future__ import annotations

import json
import os

import pytest

from e2e import NS, REGISTRY, ROOT, imgbuild, release, reports, stacks_file

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

TINY = {"repo": "file:///var/lib/imgbuild/git/tiny-cuda-ext.git", "commit": "0" * 40}   # set below
PINS = [line for line in (ROOT / "scripts" / "cuda-13.2-pypi.txt").read_text().splitlines()
        if line and not line.startswith("#")]


def _tiny_commit(tag: str) -> str:
    import subprocess
    out = subprocess.run(["git", "-C", TINY["repo"][len("file://"):], "rev-parse", f"{tag}^{{commit}}"],
                         capture_output=True, text=True)
    assert out.returncode == 0, "no tiny-cuda-ext mirror: run scripts/setup-host.sh " + out.stderr
    return out.stdout.strip()


def cuda_stacks(data: dict) -> None:
    data["layers"]["cuda-13.2-pypi"] = {"kind": "cuda-toolkit-pip", "params": {"packages": PINS, "cuda": "13.2"}}
    tiny = {"name": "tiny-cuda-ext", "source": {**TINY, "commit": _tiny_commit("v1")}, "install": "pip",
            "module": "tiny_cuda_ext", "dist": "tiny-cuda-ext", "version": "1.0"}
    data["layers"]["tiny-cuda-ext"] = {"kind": "cuda-source", "params": tiny}
    # Revision 2's build ignores the arch list it is given and compiles for 8.0 only: nothing in
    # stacks.yaml or the Dockerfile shows it (preflight cannot), only the binary does.
    data["layers"]["tiny-cuda-ext-v2"] = {"kind": "cuda-source",
                                          "params": {**tiny, "source": {**TINY, "commit": _tiny_commit("v2")}}}
    # The same kernel built by CMake from CMAKE_CUDA_ARCHITECTURES (the spelling imgbuild renders,
    # 80-real;90 with ptx), installed outside any Python package and read from its folder.
    data["layers"]["tiny-cuda-cmake"] = {"kind": "cuda-source", "params": {
        "name": "tiny-cuda-ext", "source": tiny["source"], "install": "cmake", "apt": ["cmake", "make", "g++"], "ptx": True,
        "prefix": "/opt/tiny-cmake", "binaries": "/opt/tiny-cmake/lib"}}
    chain = ["cpu-torch-2.13", "cuda-13.2-pypi"]
    data["stacks"]["cuda-h100"] = {"base": "debian-bookworm", "layers": chain + ["tiny-cuda-ext"], "gpus": ["H100"],
                                   "tags": ["{stack}"]}
    data["stacks"]["cuda-a100-h100"] = {**data["stacks"]["cuda-h100"], "gpus": ["A100", "H100"]}
    data["stacks"]["cuda-h100-v2"] = {**data["stacks"]["cuda-h100"], "layers": chain + ["tiny-cuda-ext-v2"]}
    data["stacks"]["cuda-cmake"] = {**data["stacks"]["cuda-a100-h100"], "layers": chain + ["tiny-cuda-cmake"]}
    # Hopper's arch-specific code (wgmma, TMA) as sites ask for it: 8.0;9.0a, CMake 80-real;90a.
    data["layers"]["tiny-cuda-cmake-90a"] = {"kind": "cuda-source", "params": {
        **data["layers"]["tiny-cuda-cmake"]["params"], "arch_suffix": "a"}}
    data["stacks"]["cuda-cmake-90a"] = {**data["stacks"]["cuda-cmake"], "layers": chain + ["tiny-cuda-cmake-90a"]}


# NVIDIA's nccl-tests at its 2.19.6 commit, from a mirror: this machine cannot reach github.com, and
# fetched third-party code is not committed. scripts/setup-test-host.sh clones it where the network allows.
NCCL_TESTS = {"repo": "file:///var/lib/imgbuild/git/nccl-tests.git", "commit": "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"}
# The NCCL of torch's CUDA 13 wheels (torch 2.11's nvidia-nccl-cu13 pin is older; this one goes with CUDA 13.2).
NCCL_WHEEL = "nvidia-nccl-cu13==2.32.6"


def nccl_stacks(data: dict) -> None:
    cuda_stacks(data)
    data["layers"]["nccl-2.32"] = {"kind": "pip", "params": {"packages": [NCCL_WHEEL]}}
    data["layers"]["nccl-tests"] = {"kind": "nccl-tests", "params": {
        "source": NCCL_TESTS, "version": "2.19.6", "tests": ["all_reduce"], "apt": ["make", "g++"]}}
    data["stacks"]["nccl-tests-h100"] = {"base": "debian-bookworm", "gpus": ["H100"], "tags": ["{stack}"],
                                         "layers": ["cpu-torch-2.13", "cuda-13.2-pypi", "nccl-2.32", "nccl-tests"]}


def coverage(rep: dict, layer: str) -> dict:
    node = next(n for n in rep["nodes"].values() if n["layer"] == layer)
    return next(c for c in node["checks"] if c["id"] == "cuda-source.arch-coverage")


def test_deepspeed_fails_on_an_arch_specific_entry_as_preflight_says(work, first):
    """IB040, reproduced in a built image rather than taken on trust: DeepSpeed 0.19.8's op builder cannot
    parse TORCH_CUDA_ARCH_LIST=9.0a and fails at its first build of a CUDA op, before any compiling (no GPU,
    no CUDA torch needed: it is the parser); 9.0 is parsed (the control). The image is the seed release
    (cpu-smoke: real DeepSpeed 0.19.8), with DeepSpeed's CUDA accelerator asked for, as a GPU stack has it.
    Preflight refuses the stack that would set it, before a build."""
    import subprocess
    import yaml
    image = f"{REGISTRY}/{NS}/cpu-smoke:cpu-smoke"
    code = "from deepspeed.ops.op_builder import FusedLambBuilder as B; print(B().compute_capability_args())"
    runs = {arch: subprocess.run(["docker", "run", "--rm", "--network", "none", "-e", "DS_ACCELERATOR=cuda",
                                  "-e", f"TORCH_CUDA_ARCH_LIST={arch}", image, "python", "-c", code],
                                 capture_output=True, text=True, timeout=300)
            for arch in ("9.0", "9.0a")}
    assert runs["9.0"].returncode == 0 and "-gencode=arch=compute_90,code=sm_90" in runs["9.0"].stdout, runs["9.0"]
    assert runs["9.0a"].returncode != 0, runs["9.0a"]
    assert "ValueError: invalid literal for int() with base 10: '0a'" in runs["9.0a"].stderr, runs["9.0a"].stderr[-2000:]
    # The same value in a GPU stack is refused before anything is built.
    data = yaml.safe_load((ROOT / "examples" / "cuda-pypi" / "stacks.yaml").read_text())
    data["site"] = {**data["site"], "registry": REGISTRY, "namespace": NS}
    data["runtimes"]["nccl-ib"]["params"]["env"]["TORCH_CUDA_ARCH_LIST"] = "9.0a"
    f = work / "cuda-pypi-9.0a.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = imgbuild(work, "check", "-f", str(f))
    assert proc.returncode != 0 and "IB040" in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "invalid literal for int() with base 10: '0a'" in proc.stdout + proc.stderr


def test_cuda_layers_compiled_here_cover_exactly_the_declared_gpus(work, first):
    f = str(stacks_file(work, "cuda", cuda_stacks))
    proc = imgbuild(work, "build", "stack=cuda-h100", "stack=cuda-a100-h100", "-f", f, "--jobs", "2")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    rep = reports(work)[-1]
    built = sorted(n["layer"] for n in rep["nodes"].values() if n["action"] == "build")
    assert built == ["cuda-13.2-pypi", "tiny-cuda-ext", "tiny-cuda-ext"], built   # torch reused from cpu-smoke
    details = sorted(c["detail"] for n in rep["nodes"].values() if n["layer"] == "tiny-cuda-ext"
                     for c in n["checks"] if c["id"] == "cuda-source.arch-coverage")
    assert details == ["1 binary with CUDA code in tiny_cuda_ext, each with sm_80, sm_90",
                       "1 binary with CUDA code in tiny_cuda_ext, each with sm_90"], details
    assert release("cuda-h100", "cuda-h100") and release("cuda-a100-h100", "cuda-a100-h100")


def test_a_build_that_ignored_the_arch_list_fails_its_coverage_and_moves_no_tag(work, first):
    f = str(stacks_file(work, "cuda-v2", cuda_stacks))
    for attempt in range(2):   # a failure is a failure every time, and never turns into a release
        proc = imgbuild(work, "build", "stack=cuda-h100-v2", "-f", f)
        assert proc.returncode == 7, proc.stdout[-4000:] + proc.stderr[-3000:]
        check = coverage(reports(work)[-1], "tiny-cuda-ext-v2")
        assert check["status"] == "failed", check
        assert "lacks sm_90 (has sm_80)" in check["detail"], check
        assert "TORCH_CUDA_ARCH_LIST=9.0" in check["detail"]
        assert release("cuda-h100-v2", "cuda-h100-v2") is None
    assert "arch-coverage" in proc.stdout and "lacks sm_90" in proc.stdout
    json.dumps(check)   # what the report records is plain data


def test_cmake_turns_the_rendered_spelling_into_exactly_the_declared_code(work, first):
    """CMAKE_CUDA_ARCHITECTURES as imgbuild spells it (80-real;90 for A100 + H100 with PTX), read by the
    real CMake and nvcc: the library holds SASS for sm_80 and sm_90 and PTX for compute_90, no more."""
    f = str(stacks_file(work, "cuda-cmake", cuda_stacks))
    proc = imgbuild(work, "render", "stack=cuda-cmake", "-f", f)
    assert "-DCMAKE_CUDA_ARCHITECTURES='80-real;90'" in proc.stdout, proc.stdout[-3000:]
    proc = imgbuild(work, "build", "stack=cuda-cmake", "-f", f)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    check = coverage(reports(work)[-1], "tiny-cuda-cmake")
    assert check["status"] == "passed" and check["detail"] == \
        "1 binary with CUDA code in /opt/tiny-cmake/lib, each with sm_80, sm_90, compute_90", check
    assert release("cuda-cmake", "cuda-cmake")
    # 9.0a: CMake passes the arch-specific target on, and the check wants exactly sm_90a.
    proc = imgbuild(work, "build", "stack=cuda-cmake-90a", "-f", f)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    check = coverage(reports(work)[-1], "tiny-cuda-cmake-90a")
    assert check["status"] == "passed" and check["detail"] == \
        "1 binary with CUDA code in /opt/tiny-cmake/lib, each with sm_80, sm_90a, compute_90a", check


def test_nccl_tests_are_built_at_their_pin_for_the_stacks_gpus(work, first):
    """The nccl-tests kind, with the real nccl-tests source at its pinned commit, the real nvcc and NCCL from
    PyPI: all_reduce_perf is built for exactly the stack's GPU (sm_90, read from the program), its host code
    within the CPU baseline, the loader finds the wheel's libnccl, it starts (its usage needs no GPU), and it
    is the all_reduce_perf on PATH that node-check runs. Running it needs GPUs: not here."""
    mirror = NCCL_TESTS["repo"][len("file://"):]
    if not os.path.isdir(mirror):
        pytest.skip(f"no nccl-tests mirror at {mirror}: this machine cannot reach github.com "
                    "(git clone --mirror https://github.com/NVIDIA/nccl-tests there, where it can)")
    f = str(stacks_file(work, "nccl-tests", nccl_stacks))
    proc = imgbuild(work, "build", "stack=nccl-tests-h100", "-f", f)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    node = next(n for n in reports(work)[-1]["nodes"].values() if n["layer"] == "nccl-tests")
    checks = {c["id"]: c for c in node["checks"]}
    assert checks["nccl-tests.arch-coverage"]["status"] == "passed", checks
    assert checks["nccl-tests.arch-coverage"]["detail"] == \
        "1 binary with CUDA code in /opt/nccl-tests/bin, each with sm_90", checks["nccl-tests.arch-coverage"]
    for check in ("programs", "cpu-isa", "source-commit"):
        assert checks[f"nccl-tests.{check}"]["status"] == "passed", checks[f"nccl-tests.{check}"]
    assert release("nccl-tests-h100", "nccl-tests-h100")
