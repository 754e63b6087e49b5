"""Issue 35, without an engine: the CPU baseline a stack's host code is compiled for (declared, derived from its
GPUs' hosts, or the platform's default, and said by `check`), the compiler wrappers that hold a build system
to it, and the reader of shared objects that refuses an instruction beyond it.

The binaries here are real: compiled by the host's gcc for each x86-64 level (and for this host, -march=native),
and AArch64 libraries from the torch wheel that scripts/setup-test-host.sh puts in /opt/wheels. This host's
CPU has AVX2 at least (docs/measurements/2026-12-05-cpu-baseline.md names what it had when this was written),
so code built for it goes beyond x86-64-v2 whatever else it has.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from builder.core import cpubaseline
from builder.load.spec import load_spec
from builder.plan.render import render_layer
from builder.ship.checks import JUDGES, isa
from conftest import run_cli, write_stacks

ROOT = Path(__file__).resolve().parent.parent
TORCH_ARM64 = Path("/opt/wheels/torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl")
SAXPY = "void saxpy(float *restrict y, const float *restrict x, float a, int n) { for (int i = 0; i < n; i++) y[i] += a * x[i]; }\n"
needs_gcc = pytest.mark.skipif(not shutil.which("gcc"), reason="no gcc on this host")


def compile_so(folder: Path, name: str, *flags: str, source: str = SAXPY, cc: str = "gcc") -> Path:
    (folder / f"{name}.c").write_text(source)
    out = folder / f"{name}.so"
    subprocess.run([cc, "-O3", "-shared", "-fPIC", *flags, str(folder / f"{name}.c"), "-o", str(out)], check=True,
                   capture_output=True, text=True)
    return out


def judged(paths: list[Path], level: str, platform: str = "linux/amd64") -> tuple[str, str]:
    facts = {"cpu_isa": {"platform": platform, "files": [isa.read(p).to_json() for p in paths]}}
    return JUDGES["cpu-isa"]({"baseline": [level], "packages": ["demo"]}, facts)


# -- levels and how a stack's is chosen ------------------------------------------------------------

def test_each_level_allows_what_the_levels_below_it_allow():
    lv = cpubaseline.levels()
    assert {"SSE4_2", "POPCNT"} <= lv["x86-64-v2"].features and "AVX2" not in lv["x86-64-v2"].features
    assert {"SSE4_2", "AVX2", "FMA"} <= lv["x86-64-v3"].features and "AVX512F" not in lv["x86-64-v3"].features
    assert {"AVX2", "AVX512F", "AVX512VL"} <= lv["x86-64-v4"].features
    assert {"LSE", "SVE", "SVE2"} <= lv["neoverse-v2"].features and "SVE" not in lv["armv8.2-a"].features
    assert cpubaseline.beyond("AVX2", lv["x86-64-v2"]) and not cpubaseline.beyond("AVX2", lv["x86-64-v3"])
    # Beyond every level: AMX and AVX-512 VNNI are Sapphire Rapids', not x86-64-v4's.
    assert cpubaseline.beyond("AMX_TILE", lv["x86-64-v4"]) and cpubaseline.beyond("AVX512_VNNI", lv["x86-64-v4"])
    # ENDBR64 runs as a NOP everywhere; SSE2 is x86-64 itself.
    assert not cpubaseline.beyond("CET_IBT", lv["x86-64"]) and not cpubaseline.beyond("SSE2", lv["x86-64"])


def test_a_stack_without_a_declared_level_gets_the_lowest_host_of_its_gpus():
    h100 = cpubaseline.derive(("H100",), "linux/amd64")
    assert h100.name == "x86-64-v3" and h100.how == "derived"     # DGX H100 is v4, but H100s sit on Milan too
    assert "DGX H100" in h100.origin and "AMD EPYC 7003" in h100.origin
    assert cpubaseline.derive(("B200",), "linux/amd64").name == "x86-64-v4"
    assert cpubaseline.derive(("GH200",), "linux/arm64").name == "neoverse-v2"
    none = cpubaseline.derive((), "linux/amd64")
    assert none.name == "x86-64-v3" and none.how == "default" and "Haswell" in none.origin


def _spec(tmp_path, mutate) -> Path:
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    mutate(data)
    return write_stacks(tmp_path, data)


def test_check_says_which_baseline_it_chose_and_why(tmp_path):
    def site_v4(data):
        data["site"]["cpu_baseline"] = "x86-64-v4"
    res = run_cli("check", "--all", "-f", str(_spec(tmp_path, site_v4)))
    assert res.code == 0, res.output
    out = res.output
    assert "cpu baseline [cpu-smoke] linux/amd64: x86-64-v2 (declared by stacks.cpu-smoke.cpu_baseline)" in out, out
    assert "cpu baseline [h100-megatron] linux/amd64: x86-64-v4 (declared by site.cpu_baseline)" in out, out
    res = run_cli("check", "--all", "-f", str(ROOT / "stacks.yaml"))
    assert re.search(r"cpu baseline \[h100-megatron\] linux/amd64: x86-64-v3 \(derived from the hosts of H100", res.output)


@pytest.mark.parametrize("where, value, words", [
    (("site",), "x86-64-V3", ["site.cpu_baseline", "'x86-64-V3' is not a CPU level", "did you mean 'x86-64-v3'"]),
    (("site",), "skylake", ["site.cpu_baseline", "'skylake' is not a CPU level", "levels: x86-64, x86-64-v2"]),
    (("site",), ["x86-64-v3", "x86-64-v4"], ["site.cpu_baseline[1]", "two levels for linux/amd64"]),
    (("site",), {"amd64": "x86-64-v3"}, ["site.cpu_baseline", "expected a CPU level or a list of them"]),
    (("stacks", "cpu-smoke"), "neoverse-v2", ["stacks.cpu-smoke.cpu_baseline", "'neoverse-v2' is a linux/arm64 level",
                                              "built for linux/amd64 only"]),
])
def test_a_bad_baseline_is_refused_with_its_key_and_reason(tmp_path, where, value, words):
    def mutate(data):
        node = data
        for k in where:
            node = node[k]
        node["cpu_baseline"] = value
    for _ in range(2):
        res = run_cli("check", "--all", "-f", str(_spec(tmp_path, mutate)))
        assert res.code == 2, res.output
        for w in words:
            assert w in res.output, (w, res.output)
        assert "Traceback" not in res.output


def test_preflight_warns_where_cpu_ops_are_prebuilt_with_no_baseline_known(tmp_path):
    def unsaid(data):
        del data["stacks"]["cpu-smoke"]["cpu_baseline"]
    res = run_cli("check", "stack=cpu-smoke", "-f", str(_spec(tmp_path, unsaid)))
    assert "warning IB016 [cpu-smoke]" in res.output and "prebuilds the CPU ops cpu_adam" in res.output, res.output
    assert "compiled for x86-64-v3, the linux/amd64 default" in res.output, res.output
    res = run_cli("check", "stack=cpu-smoke", "-f", str(ROOT / "stacks.yaml"))      # declared: nothing to say
    assert "IB016" not in res.output, res.output
    res = run_cli("check", "stack=a100-deepspeed", "-f", str(ROOT / "stacks.yaml"))  # derived from DGX A100 & co
    assert "IB016" not in res.output, res.output


# -- the wrappers: what a build system asks for the build host becomes the baseline ------------------

def _wrappers(tmp_path: Path, stack: str, layer: str) -> Path:
    """The compiler wrappers the rendered layer writes, written here (their folder moved under tmp_path)."""
    spec = load_spec(ROOT / "stacks.yaml")
    st = spec.stack(stack)
    text = render_layer(spec, st, next(d for d in st.chain if d.name == layer))
    start = text.index("    mkdir -p /usr/local/libexec/imgbuild; \\")
    end = text.index("    export CC=")
    script = text[start:end].rstrip().rstrip("\\").rstrip().rstrip(";").replace("/usr/local/libexec/imgbuild", str(tmp_path / "bin"))
    subprocess.run(["sh", "-ec", script], check=True)
    return tmp_path / "bin"


SIMD_GUARD = """#if defined(__AVX512__) || defined(__AVX256__)
#error the build host's SIMD width reached the compiler
#endif
#ifndef __SCALAR__
#error the baseline's SIMD width did not reach the compiler
#endif
"""


@needs_gcc
def test_native_flags_become_the_baseline_and_the_binary_shows_it(tmp_path):
    """DeepSpeed's op builder passes -march=native and the build host's SIMD width (-D__AVX512__ here, or
    -D__AVX256__); through the wrappers of the x86-64-v2 cpu-smoke layer they become -march=x86-64-v2 and
    -D__SCALAR__, and the binary holds nothing beyond x86-64-v2. The control: the same flags straight to gcc
    (the build before issue 35) give code the check refuses. Each twice."""
    bin_ = _wrappers(tmp_path, "cpu-smoke", "ds-0.19.8-cpu")
    assert "-march=x86-64-v2" in (bin_ / "g++").read_text() and "-D__SCALAR__" in (bin_ / "gcc").read_text()
    for run in range(2):
        ok = compile_so(tmp_path, f"wrapped{run}", "-march=native", "-D__AVX512__", source=SIMD_GUARD + SAXPY,
                        cc=str(bin_ / "gcc"))
        status, detail = judged([ok], "x86-64-v2")
        assert status == "passed" and "none beyond x86-64-v2" in detail, detail
        native = compile_so(tmp_path, f"native{run}", "-march=native", "-D__AVX512__")
        status, detail = judged([native], "x86-64-v2")
        assert status == "failed", detail
        assert f"native{run}.so" in detail and re.search(r"AVX2? \(\d+ instructions?, first at 0x[0-9a-f]+ in saxpy\)", detail), detail
        assert "beyond the CPU baseline x86-64-v2 (linux/amd64)" in detail and "SIGILL" in detail


@needs_gcc
@pytest.mark.parametrize("built_for, baseline, refused", [
    ("x86-64-v4", "x86-64-v3", "AVX-512F"), ("x86-64-v3", "x86-64-v2", "AVX2"), ("x86-64-v3", "x86-64-v3", None),
    ("x86-64-v2", "x86-64-v2", None), ("x86-64", "x86-64", None)])
def test_each_level_is_read_from_the_binary(tmp_path, built_for, baseline, refused):
    so = compile_so(tmp_path, built_for, f"-march={built_for}")
    status, detail = judged([so], baseline)
    if refused is None:
        assert status == "passed" and f"none beyond {baseline}" in detail, detail
    else:
        assert status == "failed" and refused in detail and f"{built_for}.so" in detail, detail


@needs_gcc
def test_a_file_that_asks_the_cpu_is_reported_not_refused(tmp_path):
    """Code for AVX-512 behind __builtin_cpu_supports (the way torch's kernels and OpenSSL dispatch): reported
    as chosen at run time. The same kernel without the question is refused."""
    kernel = '__attribute__((target("avx512f"))) void k512(float *y, const float *x, int n) { for (int i = 0; i < n; i++) y[i] += 2 * x[i]; }\n'
    asks = kernel + "void k(float *y, const float *x, int n) { if (__builtin_cpu_supports(\"avx512f\")) k512(y, x, n); }\n"
    status, detail = judged([compile_so(tmp_path, "asks", "-march=x86-64", source=asks)], "x86-64-v2")
    assert status == "passed" and "chosen at run time" in detail and "AVX-512F" in detail, detail
    status, detail = judged([compile_so(tmp_path, "blind", "-march=x86-64", source=kernel)], "x86-64-v2")
    assert status == "failed" and "AVX-512F" in detail, detail


def test_a_file_that_is_not_elf_is_said_not_read(tmp_path):
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"not an ELF file")
    status, detail = judged([bad], "x86-64-v3")
    assert status == "passed" and "not read" in detail, detail


# -- AArch64: Capstone decodes, the extension is read from what it decoded --------------------------

@pytest.mark.parametrize("word, features", [
    (0xA540A000, ("SVE",)),             # ld1w {z0.s}, p0/z, [x0]
    (0x04223800, ("SVE", "SVE2")),      # eor3 z0.d, z0.d, z2.d, z0.d
    (0x45D0E800, ("SVE", "SVE2")),      # srsra z0.d, z0.d, #16
    (0xB8210002, ("LSE",)),             # ldadd w1, w2, [x0]
    (0x4E9E9400, ("DOTPROD",)),         # sdot v0.4s, v0.16b, v30.16b
    (0x4E20D400, ()),                   # fadd v0.4s, v0.4s, v0.4s: Armv8.0 NEON
])
def test_aarch64_extensions_from_capstones_decoding(word, features):
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    (_, _, mnemonic, op_str), = md.disasm_lite(struct.pack("<I", word), 0)
    assert isa.arm64_features(mnemonic, op_str) == features


@pytest.mark.skipif(not TORCH_ARM64.exists(), reason=f"{TORCH_ARM64} not here (scripts/setup-test-host.sh fetches it)")
def test_real_aarch64_libraries_are_read(tmp_path):
    """torch's aarch64 wheel: libc10 uses LSE atomics (beyond armv8-a) and asks getauxval, so it is reported, not
    refused; libshm holds plain Armv8.0 code."""
    with zipfile.ZipFile(TORCH_ARM64) as z:
        for name in ("torch/lib/libc10.so", "torch/lib/libshm.so"):
            z.extract(name, tmp_path)
    c10, shm = tmp_path / "torch/lib/libc10.so", tmp_path / "torch/lib/libshm.so"
    read = isa.read(c10).to_json()
    assert read["machine"] == "EM_AARCH64" and read["instructions"] > 100000 and "LSE" in read["features"], read["features"]
    assert read["dispatch"] == "it refers to getauxval"
    status, detail = judged([c10, shm], "armv8-a", "linux/arm64")
    assert status == "passed" and "chosen at run time" in detail and "LSE" in detail, detail
    status, detail = judged([shm], "armv8-a", "linux/arm64")
    assert status == "passed" and "none beyond armv8-a" in detail, detail
