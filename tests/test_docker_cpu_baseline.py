"""Issue 35 on the real engine and registry: compiled host code held to the stack's CPU baseline, and proven
from the binaries inside the image.

- cpu-smoke (conftest `first`) declares x86-64-v2: its DeepSpeed layer compiles cpu_adam through the
  compiler wrappers (layers/macros.j2 host_compile), and its cpu-isa check reads every shared object of
  DeepSpeed in the image and finds nothing beyond x86-64-v2 (validated twice);
- the same layer built the old way (the kind's wrappers taken out: DeepSpeed's own -march=native and the
  build host's SIMD width) is refused by that check, naming the op's file and the extension, and no tag
  moves (twice: the second build is BuildKit's cache, the check reads the binary again);
- a prebuilt wheel compiled for x86-64-v4, served by a package index, is refused in a tiny stack of
  baseline x86-64-v3; the same wheel compiled for x86-64-v3 is released (tests/tiny.py's family).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import copy_kinds
from e2e import NS, REGISTRY, ROOT, imgbuild, release, stacks_file
from tiny import NET, index, publish, site, wheel  # noqa: F401  (index: the loopback package index fixture)

pytestmark = [pytest.mark.docker, pytest.mark.registry]

LIB = "void saxpy(float *restrict y, const float *restrict x, float a, int n) { for (int i = 0; i < n; i++) y[i] += a * x[i]; }\n"


def native_wheel(root: Path, name: str, version: str, march: str) -> Path:
    """A wheel holding one shared library compiled here with -march=MARCH (as an index's wheel built on a
    newer machine would be): the package's file `lib.so`, in its RECORD."""
    work = root / "build" / f"{name}-{version}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "lib.c").write_text(LIB)
    subprocess.run(["gcc", "-O3", "-shared", "-fPIC", f"-march={march}", str(work / "lib.c"), "-o", str(work / "lib.so")],
                   check=True, capture_output=True)
    return wheel(root, name, version, files={f"{name.replace('-', '_')}/lib.so": (work / "lib.so").read_bytes()},
                 tag="py3-none-linux_x86_64")


def test_a_wheel_built_for_a_higher_level_is_refused_and_moves_no_tag(work, index):
    namespace = f"{NS}-isa"
    native_wheel(index["root"], "imgbuild-isa-demo", "1.0", "x86-64-v4")
    native_wheel(index["root"], "imgbuild-isa-demo", "1.1", "x86-64-v3")
    publish(index["root"])
    env = {"IMGBUILD_PIP_INDEX_URL": index["url"], **NET}

    def stacks(version: str) -> str:
        path = site(work, f"isa-{version}", namespace, above=[f"imgbuild-isa-demo=={version}"])
        data = yaml.safe_load(path.read_text())
        data["stacks"]["demo"]["cpu_baseline"] = "x86-64-v3"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return str(path)

    v4, v3 = stacks("1.0"), stacks("1.1")
    for run in (1, 2):
        proc = imgbuild(work, "build", "stack=demo", "-f", v4, env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 7, f"run {run}: exit {proc.returncode}\n{out[-3000:]}"
        line = next((l for l in out.splitlines() if "pip.cpu-isa" in l and "failed" in l), "")
        assert "beyond the CPU baseline x86-64-v3 (linux/amd64)" in line, out[-3000:]
        assert re.search(r"/imgbuild_isa_demo/lib\.so: AVX-512F \(\d+ instructions?, first at 0x[0-9a-f]+ in saxpy\)", line), line
        assert _tag(namespace) is None, f"run {run} moved a tag"
    proc = imgbuild(work, "build", "stack=demo", "-f", v3, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _tag(namespace) is not None
    proc = imgbuild(work, "validate", "stack=demo", "-f", v3, env=env)
    line = next((l for l in proc.stdout.splitlines() if "pip.cpu-isa" in l), "")
    assert proc.returncode == 0 and line.split()[0] == "passed", proc.stdout[-3000:]
    assert "1 shared object of imgbuild-isa-demo==1.1 read, none beyond x86-64-v3" in line, line


def _tag(namespace: str) -> str | None:
    from builder.ship.registry import Registry
    return Registry(REGISTRY).manifest_digest(f"{namespace}/demo", "demo")


def test_the_seed_deepspeed_ops_hold_nothing_beyond_x86_64_v2(work, first):
    """cpu-smoke declares x86-64-v2; the check reads every shared object of DeepSpeed in the released image
    (cpu_adam and the shm op among them). Twice: the check is read from the binaries each time."""
    f = str(stacks_file(work, "stacks"))
    for _ in range(2):
        proc = imgbuild(work, "validate", "stack=cpu-smoke", "-f", f)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        line = next((l for l in proc.stdout.splitlines() if "deepspeed.cpu-isa" in l), "")
        assert line.split()[0] == "passed" and "none beyond x86-64-v2" in line, proc.stdout[-3000:]
        assert re.search(r"\d+ shared objects? of deepspeed read", line), line


def test_the_old_way_native_build_is_refused_by_its_binaries(work, first, tmp_path):
    """The DeepSpeed kind with its compiler wrappers taken out, as it was before issue 35: DeepSpeed compiles
    cpu_adam with -march=native and this host's SIMD width. The check refuses it, naming the op's file and
    an extension beyond x86-64-v2 (AVX2 on an AVX2 host, AVX-512F too on an AVX-512 one); no tag moves."""
    folder = copy_kinds(tmp_path / "old-way")
    fragment = folder / "layers" / "deepspeed" / "fragment.j2"
    text = fragment.read_text()
    assert "{{ m.host_compile(cpu) }}" in text
    fragment.write_text(text.replace("{{ m.host_compile(cpu) }}", ""))
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": REGISTRY, "namespace": NS}
    (folder / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copyfile(ROOT / "stacks.lock.yaml", folder / "stacks.lock.yaml")   # locked, as every e2e cpu-smoke is
    before = release("cpu-smoke")
    for run in (1, 2):
        proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(folder / "stacks.yaml"), "--date", "2026.12.05",
                        timeout=2400)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 7, f"run {run}: exit {proc.returncode}\n{out[-3000:]}"
        line = next((l for l in out.splitlines() if "deepspeed.cpu-isa" in l and "failed" in l), "")
        assert "beyond the CPU baseline x86-64-v2" in line, out[-4000:]
        assert re.search(r"deepspeed/ops/[\w/]*cpu_adam[\w.-]*\.so: [^;]*(AVX2|AVX-512F|AVX) \(\d+ instructions?", line), line
        assert "no tag of cpu-smoke was moved" in proc.stderr, proc.stderr[-2000:]
        assert release("cpu-smoke") == before and release("cpu-smoke-2026.12.05") is None
    print("\n" + line[:600])
