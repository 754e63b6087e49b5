"""CUDA code compiled in an image here, and its arch coverage proven from the binaries (issue 13),
against the real engine and registry. No GPU is needed to compile: the toolkit comes from PyPI
(layers/cuda-toolkit-pip, the pins of scripts/cuda-13.2-pypi.txt) on the cpu-smoke stack's torch
layer, and the extension is examples/tiny-cuda-ext (a mirror made by scripts/make-smoke-mirror.sh)
built by the cuda-source kind with the stack's arch list.

- one GPU and two GPU generations: the binaries hold code for exactly what the stack declares, and the
  stacks are released;
- a layer whose build ignores the arch list (tiny-cuda-ext v2 compiles for 8.0 whatever it is given,
  as a wheel shipped without the newest arch) passes preflight, builds, and fails its coverage check
  for the H100 the stack declares: no tag moves.
"""

from __future__ import annotations

import json

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
    chain = ["cpu-torch-2.13", "cuda-13.2-pypi"]
    data["stacks"]["cuda-h100"] = {"base": "debian-bookworm", "layers": chain + ["tiny-cuda-ext"], "gpus": ["H100"],
                                   "tags": ["{stack}"]}
    data["stacks"]["cuda-a100-h100"] = {**data["stacks"]["cuda-h100"], "gpus": ["A100", "H100"]}
    data["stacks"]["cuda-h100-v2"] = {**data["stacks"]["cuda-h100"], "layers": chain + ["tiny-cuda-ext-v2"]}


def coverage(rep: dict, layer: str) -> dict:
    node = next(n for n in rep["nodes"].values() if n["layer"] == layer)
    return next(c for c in node["checks"] if c["id"] == "cuda-source.arch-coverage")


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


def test_the_cuda_pypi_stacks_build_here_with_their_ops_compiled_for_their_gpus(work, first):
    """Issue 13's GPU stack (examples/cuda-pypi/stacks.yaml), built on a machine with no GPU and no NGC: torch 2.11.0 (CUDA 13.0) and
    nvcc 13.0 from PyPI, DeepSpeed 0.19.8 with fused_adam and cpu_adam compiled, for H100 and for
    A100 + H100. ds_report shows fused_adam installed, the binary holds exactly the declared archs, the
    GPU-only step is skipped with its reason, and both stacks are released. (This caught two bugs: a
    DeepSpeed wheel built for cpu-smoke reused from pip's cache, and DeepSpeed building no CUDA op on
    a GPU-less host unless DS_ACCELERATOR=cuda.)"""
    import yaml
    data = yaml.safe_load((ROOT / "examples" / "cuda-pypi" / "stacks.yaml").read_text())
    data["site"] = {**data["site"], "registry": REGISTRY, "namespace": NS}
    f = work / "cuda-pypi.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = imgbuild(work, "build", "stack=h100-pypi-deepspeed", "stack=a100-h100-pypi-deepspeed", "-f", str(f))
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    rep = reports(work)[-1]
    ds = [n for n in rep["nodes"].values() if n["layer"] == "ds-0.19.8-cuda"]
    assert len(ds) == 2 and all(n["action"] == "build" for n in ds), [(n["layer"], n["action"]) for n in ds]
    checks = [{c["id"]: c for c in n["checks"]} for n in ds]
    assert sorted(c["deepspeed.arch-coverage"]["detail"] for c in checks) == [
        "1 binary with CUDA code in deepspeed, each with sm_80, sm_90",
        "1 binary with CUDA code in deepspeed, each with sm_90"], [c["deepspeed.arch-coverage"] for c in checks]
    for c in checks:
        assert c["deepspeed.ds-report"]["status"] == "passed" and "fused_adam YES/OKAY" in c["deepspeed.ds-report"]["detail"]
        assert c["deepspeed.cpu-adam-step"]["status"] == "passed", c["deepspeed.cpu-adam-step"]
        assert c["deepspeed.fused-adam-step"]["status"] == "skipped" and "needs a GPU" in c["deepspeed.fused-adam-step"]["detail"]
    assert release("h100-pypi-deepspeed", "h100-pypi-deepspeed")
    assert release("a100-h100-pypi-deepspeed", "a100-h100-pypi-deepspeed")
