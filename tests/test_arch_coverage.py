"""Compiled arch coverage (issue 13): the device code in extension binaries, read from their fat
binaries by the in-image probe, against the arch list the stack declared.

The reader is proven on real nvcc output: a tiny kernel compiled by the CUDA toolchain from PyPI
(scripts/cuda-toolchain.sh; no GPU needed) for several arch sets, with cuobjdump as the oracle."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

from builder.ship.checks import judge, request, wanted_code
from builder.load.kinds import CheckSpec

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("imgbuild_probe", ROOT / "builder" / "ship" / "checks" / "probe.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)

TOOLKIT = Path(os.environ.get("IMGBUILD_CUDA_TOOLKIT", "/var/lib/imgbuild/cuda-toolchain/cuda"))
KERNEL = """
__global__ void add(float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += b[i]; }
extern "C" void launch(float *a, const float *b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }
"""


def check(archs, packages=("ext",), **more) -> CheckSpec:
    args = {"archs": archs, "packages": list(packages), **more}
    return CheckSpec(id="x.arch-coverage", check="arch-coverage", gpu=False, args=tuple(sorted(args.items())))


def verdict(spec: CheckSpec, code: dict):
    """The judge's result for `code` ({file: targets}) found under the check's first root."""
    roots = dict(spec.args).get("packages") or []
    (res,) = judge((spec,), {"cuda_code": {roots[0]: code} if roots else {}}, gpu=False)
    return res


# -- the arch list as the compilers read it ---------------------------------------------------------

@pytest.mark.parametrize("given, want", [
    ("8.0;9.0", ["sm_80", "sm_90"]),
    ("9.0a", ["sm_90a"]),
    ("8.0 9.0+PTX", ["sm_80", "sm_90", "compute_90"]),
    ("10.0f;12.0a+PTX", ["sm_100f", "sm_120a", "compute_120a"]),
])
def test_an_arch_list_names_the_code_it_asks_for(given, want):
    assert wanted_code(given) == want


@pytest.mark.parametrize("bad", ["9", "sm_90", "9.0b", "9.0+ptx", "9.0;;x"])
def test_a_bad_arch_entry_is_named(bad):
    with pytest.raises(ValueError, match="is not an arch of TORCH_CUDA_ARCH_LIST"):
        wanted_code(bad)


# -- the judge --------------------------------------------------------------------------------------

def test_every_binary_must_hold_every_declared_arch():
    ok = verdict(check("8.0;9.0"), {"/x/a.so": ["sm_80", "sm_90"], "/x/b.so": ["sm_80", "sm_90"]})
    assert ok.status == "passed" and "2 binaries" in ok.detail
    bad = verdict(check("8.0;9.0"), {"/x/a.so": ["sm_80", "sm_90"], "/x/b.so": ["sm_80"]})
    assert bad.status == "failed" and "/x/b.so lacks sm_90 (has sm_80)" in bad.detail
    assert "/x/a.so" not in bad.detail


def test_arch_specific_and_ptx_are_not_stand_ins_for_each_other():
    assert verdict(check("9.0a"), {"/x/a.so": ["sm_90"]}).status == "failed"
    assert verdict(check("9.0"), {"/x/a.so": ["sm_90a"]}).status == "failed"
    assert verdict(check("9.0+PTX"), {"/x/a.so": ["sm_90"]}).status == "failed"
    assert verdict(check("9.0+PTX"), {"/x/a.so": ["compute_90", "sm_90"]}).status == "passed"


def test_code_nobody_declared_is_reported_not_failed():
    res = verdict(check("9.0"), {"/x/a.so": ["compute_80", "sm_80", "sm_90"]})
    assert res.status == "passed" and "not declared: compute_80, sm_80" in res.detail


def test_no_device_code_at_all_fails_unless_the_layer_may_have_none():
    res = verdict(check("9.0", packages=("flash_attn",)), {})
    assert res.status == "failed" and "no CUDA device code" in res.detail and "9.0" in res.detail
    assert verdict(check("9.0", require_code=False), {}).status == "passed"


def test_each_check_reads_only_its_own_binaries():
    """A top image runs the checks of every layer beneath it: flash-attn's check must not judge the
    binaries of a Transformer Engine built for other GPUs, nor the reverse."""
    facts = {"cuda_code": {"flash_attn": {"/fa.so": ["sm_90"]}, "transformer_engine": {"/te.so": ["sm_80"]}}}
    fa, te = judge((check("9.0", packages=("flash_attn",)), check("8.0", packages=("transformer_engine",))),
                   facts, gpu=False)
    assert fa.status == te.status == "passed", (fa, te)


def test_a_layer_that_compiles_nothing_for_the_stack_is_skipped_and_not_probed():
    assert verdict(check(None), {}).status == "skipped"
    assert "cuda_code" not in request((check(None),), gpu=False)
    assert request((check("9.0", packages=("b", "a")), check("8.0", packages=("a",))), gpu=False)["cuda_code"] == ["a", "b"]


# -- the reader, on real nvcc output ---------------------------------------------------------------

def _toolkit() -> Path:
    if not (TOOLKIT / "bin" / "nvcc").is_file():
        why = f"no CUDA toolchain at {TOOLKIT}: run scripts/cuda-toolchain.sh (scripts/test.sh does)"
        if os.environ.get("IMGBUILD_REQUIRE_CUDA_TOOLCHAIN") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return TOOLKIT


def compile_so(tmp: Path, name: str, *gencode: str) -> Path:
    tk = _toolkit()
    src = tmp / "k.cu"
    src.write_text(KERNEL)
    out = tmp / f"{name}.so"
    argv = [str(tk / "bin" / "nvcc"), "-shared", "-Xcompiler", "-fPIC", *gencode, str(src), "-o", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def cuobjdump(path: Path) -> list[str]:
    """What NVIDIA's own tool lists (it prints sm_100f as sm_100: family code is told by the flags)."""
    out = subprocess.run([str(_toolkit() / "bin" / "cuobjdump"), "--list-elf", "--list-ptx", str(path)],
                         capture_output=True, text=True, check=True).stdout
    pairs = re.findall(r"\.sm_(\d+[af]?)\.(cubin|ptx)", out)
    return sorted({("compute_" if kind == "ptx" else "sm_") + arch for arch, kind in pairs})


@pytest.mark.parametrize("gencode, want", [
    (["-gencode", "arch=compute_80,code=sm_80"], ["sm_80"]),
    (["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"],
     ["compute_90", "sm_80", "sm_90"]),
    (["-gencode", "arch=compute_90a,code=sm_90a", "-gencode", "arch=compute_100a,code=sm_100a"], ["sm_100a", "sm_90a"]),
    (["-gencode", "arch=compute_100f,code=sm_100f", "-gencode", "arch=compute_75,code=compute_75",
      "-Xfatbin", "-compress-all"], ["compute_75", "sm_100f"]),
])
def test_the_reader_sees_what_nvcc_compiled(tmp_path, gencode, want):
    so = compile_so(tmp_path, "ext", *gencode)
    found = probe.cuda_code([str(tmp_path)])
    assert found == {str(tmp_path): {str(so): want}}
    # cuobjdump agrees, but for the family suffix it does not print
    assert cuobjdump(so) == sorted(t.rstrip("f") if t.endswith("f") else t for t in want)


def test_a_binary_built_for_one_arch_fails_a_stack_that_declares_another(tmp_path):
    """The field failure this check exists for: the arch list never reached the compiler."""
    compile_so(tmp_path, "ext", "-gencode", "arch=compute_80,code=sm_80")
    found = probe.cuda_code([str(tmp_path)])
    (res,) = judge((check("9.0", packages=(str(tmp_path),)),), {"cuda_code": found}, gpu=False)
    assert res.status == "failed" and "lacks sm_90 (has sm_80)" in res.detail
    (res,) = judge((check("8.0", packages=(str(tmp_path),)),), {"cuda_code": found}, gpu=False)
    assert res.status == "passed"


def test_nvccs_own_spelling_compiles_exactly_what_the_arch_list_asks_for(tmp_path):
    """NVCC_GENCODE as imgbuild spells it (nccl-tests' Makefile reads it), given to the real nvcc: the
    binary holds exactly the code the check wants for the same list, arch-specific and PTX included."""
    from builder.plan.render import CudaTargets
    for i, (torch, ptx) in enumerate((("8.0;9.0a;10.0a", False), ("9.0;10.0f", True))):
        ints = ";".join(a.replace(".", "") for a in torch.split(";"))
        t = CudaTargets(torch_arch_list=torch, nvte_archs=ints, cmake_archs=ints)
        folder = tmp_path / str(i)
        folder.mkdir()
        so = compile_so(folder, "ext", *t.spell("NVCC_GENCODE", ptx).split())
        assert probe.cuda_code([str(folder)])[str(folder)] == {str(so): sorted(wanted_code(torch + ("+PTX" if ptx else "")))}


def test_a_folder_of_programs_is_read_as_a_folder_of_libraries(tmp_path):
    """nccl-tests installs executables (bin/all_reduce_perf), not shared objects: a folder's ELF programs are
    read; a script and a file that is not executable are not."""
    tk = _toolkit()
    (tmp_path / "k.cu").write_text(KERNEL + "int main() { return 0; }\n")
    prog = tmp_path / "bin" / "all_reduce_perf"
    prog.parent.mkdir()
    subprocess.run([str(tk / "bin" / "nvcc"), "-gencode", "arch=compute_90,code=sm_90", str(tmp_path / "k.cu"),
                    "-o", str(prog)], check=True, capture_output=True, timeout=600)
    (prog.parent / "run.sh").write_text("#!/bin/sh\nexec all_reduce_perf\n")
    (prog.parent / "run.sh").chmod(0o755)
    (prog.parent / "copy").write_bytes(prog.read_bytes())   # an ELF file, not executable
    assert probe.cuda_code([str(prog.parent)]) == {str(prog.parent): {str(prog): ["sm_90"]}}
    # A package named by import name is read for its shared objects only, as before: a program it carries
    # (a bundled tool) is not the extension's code.
    pkg = tmp_path / "site" / "somepkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "tool").write_bytes(prog.read_bytes())
    (pkg / "tool").chmod(0o755)
    (pkg / "_ext.so").write_bytes(prog.read_bytes())
    import sys
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        assert list(probe._shared_objects("somepkg")) == [str(pkg / "_ext.so")]
    finally:
        sys.path.remove(str(tmp_path / "site"))


def test_files_without_device_code_and_non_elf_files_are_left_out(tmp_path):
    (tmp_path / "notes.so").write_text("not an ELF file")
    host = tmp_path / "host.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(host)], input="int f(void){return 1;}",
                   text=True, check=True)
    assert probe.cuda_code([str(tmp_path)]) == {str(tmp_path): {}}


# -- where the declared list comes from --------------------------------------------------------------

def test_a_kind_may_take_only_values_the_stack_has(tmp_path):
    from builder.errors import SpecError
    from builder.load.kinds import load_kind
    kind = tmp_path / "k"
    kind.mkdir()
    (kind / "fragment.j2").write_text("RUN true\n")
    body = ("description: x\nrole: layer\nchecks:\n  - id: c\n    check: arch-coverage\n"
            "    args: {archs: \"stack:%s\", packages: [m]}\n")
    (kind / "kind.yaml").write_text(body % "arch_list")
    assert load_kind(kind).checks[0].check == "arch-coverage"
    (kind / "kind.yaml").write_text(body % "gpu_list")
    with pytest.raises(SpecError, match="names no value of the stack"):
        load_kind(kind)


def test_the_check_gets_the_arch_list_the_layer_is_built_with(tmp_path):
    """The stack's gpus, or the layer's own; +PTX where the layer asks for PTX; nothing on a layer that
    compiles no CUDA for the stack (cpu-smoke's DeepSpeed)."""
    import yaml

    from builder.plan.keys import make_plan
    from builder.load.spec import load_spec
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["layers"]["cuda-13.2-pypi"] = {"kind": "cuda-toolkit-pip",
                                        "params": {"packages": ["nvidia-cuda-nvcc==13.2.78"], "cuda": "13.2"}}
    src = {"repo": "file:///var/lib/imgbuild/git/tiny-cuda-ext.git", "commit": "1" * 40}
    data["layers"]["ext"] = {"kind": "cuda-source", "params": {"name": "ext", "source": src, "module": "ext"}}
    data["layers"]["ext-own"] = {"kind": "cuda-source", "params": {"name": "ext", "source": src, "module": "ext",
                                                                   "gpus": ["A100", "B200"], "ptx": True}}
    data["layers"]["ext-a"] = {"kind": "cuda-source", "params": {"name": "ext", "source": src, "module": "ext",
                                                                 "gpus": ["A100", "H100", "B200"], "arch_suffix": "a"}}
    data["layers"]["ext-f"] = {"kind": "cuda-source", "params": {"name": "ext", "source": src, "module": "ext",
                                                                 "gpus": ["H100", "B200"], "arch_suffix": "f", "ptx": True}}
    for name, layer in (("s1", "ext"), ("s2", "ext-own"), ("s3", "ext-a"), ("s4", "ext-f")):
        data["stacks"][name] = {"base": "debian-bookworm", "gpus": ["H100"], "tags": ["{stack}"],
                                "layers": ["cpu-torch-2.13", "cuda-13.2-pypi", layer]}
    (tmp_path / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    plan = make_plan(load_spec(tmp_path / "stacks.yaml", root=ROOT), ["s1", "s2", "s3", "s4", "cpu-smoke"])
    archs = {}
    for stack in ("s1", "s2", "s3", "s4", "cpu-smoke"):
        for c in plan.top(stack).checks:
            if c.check == "arch-coverage":
                archs.setdefault(stack, []).append(dict(c.args)["archs"])
    assert archs == {"s1": ["9.0"], "s2": ["8.0;10.0+PTX"], "s3": ["8.0;9.0a;10.0a"], "s4": ["9.0;10.0f+PTX"],
                     "cpu-smoke": [None]}
    # Every spelling of the build gets the suffix, and the check wants the arch-specific SASS.
    from builder.ship.checks import wanted_code
    from builder.plan.render import CudaTargets
    spec = load_spec(tmp_path / "stacks.yaml", root=ROOT)
    t = CudaTargets.of(spec.stack("s3"), spec.layers["ext-a"])
    assert [t.spell(v) for v in ("TORCH_CUDA_ARCH_LIST", "NVTE_CUDA_ARCHS", "FLASH_ATTN_CUDA_ARCHS",
                                 "CMAKE_CUDA_ARCHITECTURES")] == ["8.0;9.0a;10.0a", "80;90a;100a", "80;90a;100a",
                                                                  "80-real;90a-real;100a-real"]
    assert CudaTargets.of(spec.stack("s4"), spec.layers["ext-f"]).spell("CMAKE_CUDA_ARCHITECTURES", ptx=True) == "90-real;100f"
    assert t.spell("NVCC_GENCODE") == ("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a "
                                       "-gencode=arch=compute_100a,code=sm_100a")
    assert CudaTargets.of(spec.stack("s4"), spec.layers["ext-f"]).spell("NVCC_GENCODE", ptx=True) == (
        "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100f,code=sm_100f "
        "-gencode=arch=compute_100f,code=compute_100f")
    assert wanted_code("8.0;9.0a;10.0a") == ["sm_80", "sm_90a", "sm_100a"]
    assert wanted_code("9.0;10.0f+PTX") == ["sm_90", "sm_100f", "compute_100f"]


def test_a_toolkit_layer_makes_cuda_available_to_the_layers_above_it(tmp_path):
    """DeepSpeed compiles its CUDA ops where a CUDA toolkit is beneath it: a CUDA base, or (new) a layer
    that provides cuda on a base without one. Below that layer, and on cpu-smoke, it compiles none."""
    import yaml

    from builder.plan.keys import make_plan
    from builder.load.spec import load_spec
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["layers"]["cuda-13.2-pypi"] = {"kind": "cuda-toolkit-pip",
                                        "params": {"packages": ["nvidia-cuda-nvcc==13.2.78"], "cuda": "13.2"}}
    data["layers"]["ds-gpu"] = {"kind": "deepspeed", "params": {"version": "0.19.8", "ops": ["fused_adam"]}}
    data["stacks"]["above"] = {"base": "debian-bookworm", "gpus": ["H100"], "tags": ["{stack}"],
                               "layers": ["cpu-torch-2.13", "cuda-13.2-pypi", "ds-gpu"]}
    data["stacks"]["below"] = {"base": "debian-bookworm", "gpus": ["H100"], "tags": ["{stack}"],
                               "layers": ["cpu-torch-2.13", "ds-gpu", "cuda-13.2-pypi"]}
    (tmp_path / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    spec = load_spec(tmp_path / "stacks.yaml", root=ROOT)
    plan = make_plan(spec, ["above", "below", "cpu-smoke"])
    ds = {name: next(n for n in plan.chain(name) if n.layer.kind.name == "deepspeed") for name in ("above", "below", "cpu-smoke")}
    assert ds["above"].build_args.get("TORCH_CUDA_ARCH_LIST") == "9.0"
    assert ds["below"].build_args == {} and ds["cpu-smoke"].build_args == {}
