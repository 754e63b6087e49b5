"""Platforms (issue 22), without an engine: what a stack is built for, what an artifact's name says it runs
on, which engine builds each platform (natively where declared, else under QEMU when binfmt_misc has a
handler, else refused), and the argv that carries the platform to the engine. The real engine builds
and releases a two-platform stack in tests/test_docker_platforms.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.errors import EngineError
from builder.core import platforms as plat
from builder.load.spec import load_spec
from builder.ship.checks import CheckResult, judge
from builder.ship.engine import BuildRequest, Engine, Result
from builder.ship.engines import binfmt_handler, engines, variable
from builder.load.kinds import CheckSpec
from conftest import run_cli, shipped_data, write_stacks
from test_build_units import FakeRunner


@pytest.mark.parametrize("name, platform", [
    ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "linux/amd64"),
    ("torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl", "linux/arm64"),
    ("numpy-2.1.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", "linux/arm64"),
    ("flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl", "linux/amd64"),
    ("ninja-1.11.1.4-py3-none-musllinux_1_1_aarch64.whl", "linux/arm64"),
    ("wheel-0.45.1-py3-none-any.whl", None),
    ("torch-2.5.0-cp311-cp311-win_amd64.whl", None),            # another OS: not a linux platform
    ("https://example.org/dl/cuda_12.8.0_570.86.10_linux_sbsa.run", "linux/arm64"),
    ("https://example.org/libnccl2_2.27.3-1+cuda12.9_arm64.deb", "linux/arm64"),
    ("https://github.com/x/tool/releases/download/v1/tool-linux-x86_64.tar.gz#sha256=ab", "linux/amd64"),
    ("https://example.org/tool-v1.tar.gz", None),
    ("https://example.org/both-x86_64-aarch64.tar.gz", None),     # names both: says nothing
    ("https://example.org/x86_64/tool.tar.gz", None),             # a folder's name is not the file's
])
def test_an_artifact_names_its_platform(name, platform):
    assert plat.artifact_platform(name) == platform


def stacks(tmp_path: Path, **stack) -> Path:
    data = shipped_data()
    data["stacks"]["s"] = {"base": "ngc-25.09", "layers": ["ngc-25.09-site"], **stack}
    return write_stacks(tmp_path, data)


@pytest.mark.parametrize("gpus, declared, want", [
    ([], None, ("linux/amd64",)),
    (["H100"], None, ("linux/amd64",)),
    (["GH200"], None, ("linux/arm64",)),
    (["GB200", "GB300"], None, ("linux/arm64",)),
    (["H100", "GH200"], None, ("linux/amd64", "linux/arm64")),
    (["H100"], ["linux/arm64", "linux/amd64"], ("linux/amd64", "linux/arm64")),   # kept in imgbuild's order
])
def test_a_stacks_platforms_follow_its_gpus_unless_it_says(tmp_path, gpus, declared, want):
    extra = {"platforms": declared} if declared else {}
    assert load_spec(stacks(tmp_path, gpus=gpus, **extra)).stack("s").platforms == want


@pytest.mark.parametrize("value, reason", [
    ("linux/arm64", "expected a non-empty list of platforms, got a string"),
    ([], "expected a non-empty list of platforms"),
    (["arm64"], "unknown platform 'arm64' (did you mean 'linux/arm64'?)"),
    (["linux/riscv64"], "unknown platform 'linux/riscv64'"),
    (["linux/amd64", "linux/amd64"], "linux/amd64 is listed twice"),
])
def test_a_bad_platforms_value_is_refused_with_file_line_and_key(tmp_path, value, reason):
    file = stacks(tmp_path, platforms=value)
    for _ in range(2):   # the same refusal every time
        res = run_cli("check", "-f", str(file))
        assert res.code == 2 and f"{file}:" in res.err and "stacks.s.platforms" in res.err and reason in res.err, res.err
        assert "Traceback" not in res.err


def binfmt(tmp_path: Path, text: str | None) -> Path:
    root = tmp_path / "binfmt_misc"
    root.mkdir(parents=True)
    (root / "status").write_text("enabled\n")
    if text is not None:
        (root / "qemu-aarch64").write_text(text)
    return root


REGISTERED = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POCF\noffset 0\n"


def engine_for(platform: str = "linux/amd64") -> Engine:
    runner = FakeRunner({("/usr/bin/docker", "version", "--format", "{{.Server.Os}}/{{.Server.Arch}}"):
                         Result(0, platform + "\n", "")})
    return Engine(cli="/usr/bin/docker", mode="builtin", runner=runner, env={})


@pytest.mark.parametrize("text, why", [
    (None, "no QEMU handler for aarch64 is registered in binfmt_misc"),
    ("disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POCF\n", "registered but disabled"),
    ("enabled\ninterpreter /usr/bin/qemu-aarch64\nflags: OC\n", "lacks the F flag"),
])
def test_emulation_without_a_usable_handler_is_refused_with_the_fix(tmp_path, text, why):
    root = binfmt(tmp_path, text)
    assert why in binfmt_handler("linux/arm64", root)
    with pytest.raises(EngineError, match="cannot build linux/arm64 images: no linux/arm64 engine is declared "
                                          r"\(IMGBUILD_DOCKER_HOST_ARM64\)") as err:
        engines(engine_for(), ["linux/amd64", "linux/arm64"], env={}, root=root)
    assert "qemu-user-static" in err.value.hint and "IMGBUILD_DOCKER_HOST_ARM64" in err.value.hint


def test_each_platform_gets_its_engine_native_declared_or_emulated(tmp_path):
    root = binfmt(tmp_path, REGISTERED)
    said = []
    on = engines(engine_for(), ["linux/amd64", "linux/arm64"], env={}, say=said.append, root=root)
    assert on["linux/amd64"].emulated is None
    assert on["linux/arm64"].emulated == "linux/arm64 on a linux/amd64 engine"
    assert on["linux/arm64"].engine is on["linux/amd64"].engine
    assert any("QEMU emulation" in line and "many times slower" in line for line in said)
    # A declared arm64 engine (another DOCKER_HOST) builds it natively: no emulation, no handler needed.
    arm = engine_for("linux/arm64")
    default = engine_for()
    default.at = lambda host: arm if host == "ssh://grace-builder" else None
    on = engines(default, ["linux/amd64", "linux/arm64"], env={variable("linux/arm64"): "ssh://grace-builder"},
                 root=binfmt(tmp_path / "none", None))
    assert on["linux/arm64"].engine is arm and on["linux/arm64"].emulated is None
    # A declared engine of another platform is refused, naming what it is.
    default.at = lambda host: engine_for("linux/amd64")
    with pytest.raises(EngineError, match="IMGBUILD_DOCKER_HOST_ARM64=ssh://grace-builder is a linux/amd64 engine"):
        engines(default, ["linux/arm64"], env={variable("linux/arm64"): "ssh://grace-builder"}, root=root)


def test_the_platform_reaches_the_engine_in_build_run_and_pull(tmp_path):
    engine = engine_for()
    req = BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tag="t:1", build_args={}, labels={},
                       platform="linux/arm64")
    argv = engine.build_argv(req)
    assert argv[argv.index("--platform") + 1] == "linux/arm64"
    engine.run_container("img@sha256:" + "a" * 64, ["true"], platform="linux/arm64")
    engine.pull("img@sha256:" + "a" * 64, "linux/arm64")
    run, pull = engine.runner.calls[-2:]
    assert run[run.index("--platform") + 1] == "linux/arm64" and run.index("--platform") < run.index("--entrypoint")
    assert pull[:2] == ["/usr/bin/docker", "pull"] and pull[pull.index("--platform") + 1] == "linux/arm64"
    assert "--platform" not in engine.build_argv(BuildRequest(context=tmp_path, dockerfile=tmp_path / "D", tag="t",
                                                              build_args={}, labels={}))


def test_a_gpu_check_under_emulation_is_skipped_with_that_reason_even_with_a_gpu():
    checks = (CheckSpec(id="cuda", check="import", gpu=True, args=(("module", "torch"),), doc=""),
              CheckSpec(id="imp", check="import", gpu=False, args=(("module", "torch"),), doc=""))
    facts = {"imports": {"torch": {"ok": True}}}
    native = judge(checks, facts, gpu=True)
    emulated = judge(checks, facts, gpu=True, emulated="linux/arm64 on a linux/amd64 engine")
    assert native[0].status != "skipped"
    assert emulated[0] == CheckResult("cuda", "skipped", "skipped: needs a GPU, and this image runs under QEMU "
                                      "emulation (linux/arm64 on a linux/amd64 engine), where no GPU check can pass",
                                      True)
    assert emulated[1].status == native[1].status


ARM_WHEEL = {"file": "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
             "sha256": "3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"}


def test_render_out_writes_each_platforms_chain_with_its_platform(tmp_path):
    import json
    data = shipped_data()
    params = data["layers"]["cpu-torch-2.13"]["params"]
    params["wheel"] = [params["wheel"], ARM_WHEEL]
    data["stacks"]["cpu-smoke"]["platforms"] = ["linux/amd64", "linux/arm64"]
    file = write_stacks(tmp_path / "site", data)
    res = run_cli("render", "stack=cpu-smoke", "-f", str(file), "--out", str(tmp_path / "out"))
    assert res.code == 0, res.output
    names = sorted(p.name for p in (tmp_path / "out" / "cpu-smoke").iterdir())
    assert names[:2] == ["00-cpu-torch-2.13.amd64.Dockerfile", "00-cpu-torch-2.13.arm64.Dockerfile"] and len(names) == 8
    arm = (tmp_path / "out" / "cpu-smoke" / "00-cpu-torch-2.13.arm64.Dockerfile").read_text()
    assert ARM_WHEEL["file"] in arm and "x86_64.whl" not in arm
    bake = json.loads((tmp_path / "out" / "docker-bake.json").read_text())
    assert sorted(t["platforms"][0] for t in bake["target"].values()) == ["linux/amd64"] * 4 + ["linux/arm64"] * 4
    script = (tmp_path / "out" / "build.sh").read_text()
    assert script.count(" linux/arm64 ") == 4 and '--platform "$platform"' in script


def test_deepspeed_ops_built_for_arm64_get_py_cpuinfo_first_and_amd64_text_is_unchanged(tmp_path):
    """Under QEMU, DeepSpeed's lscpu fallback reads the x86 host's /proc/cpuinfo and compiles cpu_adam with
    -D__AVX512__ (immintrin.h: no such file): py-cpuinfo, installed before the build, says ARM and NEON
    (docs/measurements/2026-12-04-arm64-emulation.txt). An amd64 chain renders as it always did."""
    from builder.plan.render import render_layer
    data = shipped_data()
    params = data["layers"]["cpu-torch-2.13"]["params"]
    params["wheel"] = [params["wheel"], ARM_WHEEL]
    data["stacks"]["cpu-smoke"]["platforms"] = ["linux/amd64", "linux/arm64"]
    spec = load_spec(write_stacks(tmp_path, data))
    stack, ds = spec.stack("cpu-smoke"), spec.layers["ds-0.19.8-cpu"]
    amd, arm = render_layer(spec, stack, ds, "linux/amd64"), render_layer(spec, stack, ds, "linux/arm64")
    assert "py-cpuinfo" not in amd and amd == render_layer(spec, stack, ds)
    first, build = arm.index("pip install --progress-bar off py-cpuinfo==9.0.0"), arm.index("deepspeed==0.19.8")
    assert first < build and arm.count("\nRUN ") == amd.count("\nRUN ") + 1
    # No prebuilt op, nothing to compile: no extra step on arm64 either.
    data["layers"]["ds-0.19.8-cpu"]["params"]["ops"] = []
    spec = load_spec(write_stacks(tmp_path / "noops", data))
    assert "py-cpuinfo" not in render_layer(spec, spec.stack("cpu-smoke"), spec.layers["ds-0.19.8-cpu"], "linux/arm64")


def test_each_platform_installs_its_own_locked_python_set(tmp_path):
    """The Python lock holds one resolved set per platform (its wheels and hashes are that platform's): the
    arm64 chain installs the arm64 entry, the amd64 chain the amd64 one; a platform without an entry is
    said missing by `lock --check`, and that chain is not built from intent."""
    import yaml
    from builder.plan.keys import make_plan
    from builder.plan.stale import stale_entries
    from builder.plan.keys import layer_definition
    from builder.errors import SpecError
    data = shipped_data()
    params = data["layers"]["cpu-torch-2.13"]["params"]
    params["wheel"] = [params["wheel"], ARM_WHEEL]
    data["layers"]["numpy-any"] = {"kind": "pip", "params": {"packages": ["numpy>=2"]}}   # floats: needs the lock
    data["stacks"]["cpu-smoke"].update(platforms=["linux/amd64", "linux/arm64"], layers=["cpu-torch-2.13", "numpy-any"])
    file = write_stacks(tmp_path, data)
    lock = tmp_path / "stacks.lock.yaml"
    lock.write_text(yaml.safe_dump({"version": 1, "bases": {}}))   # beside a lock file a range is intent
    spec = load_spec(file)
    stack = spec.stack("cpu-smoke")

    def entry(platform, wheel):
        return {"stack": "cpu-smoke", "parent": "p", "definition": layer_definition(spec, stack, "numpy-any", None, platform),
                "resolved": "2026-12-04T12:00:00Z", "platform": platform,
                "steps": [[{"name": "numpy", "version": "2.4.6", "sha256": wheel * 64, "requested": True,
                            "url": f"https://files.example/numpy-2.4.6-{platform.split('/')[1]}.whl"}]]}
    lock.write_text(yaml.safe_dump({"version": 1, "bases": {}, "python": {"numpy-any": [entry("linux/amd64", "a")]}}))
    assert "python.numpy-any: missing on linux/arm64: 'numpy>=2' floats" in "\n".join(stale_entries(load_spec(file)))
    with pytest.raises(SpecError, match="floats .* has an entry resolved for another definition"):
        make_plan(load_spec(file), ["cpu-smoke"], {"debian-bookworm": "sha256:" + "ab" * 32})
    lock.write_text(yaml.safe_dump({"version": 1, "bases": {}, "python": {
        "numpy-any": [entry("linux/amd64", "a"), entry("linux/arm64", "b")]}}))
    spec = load_spec(file)
    assert not [line for line in stale_entries(spec) if "numpy-any" in line]
    plan = make_plan(spec, ["cpu-smoke"], {"debian-bookworm": "sha256:" + "ab" * 32})
    locked = {p: plan.chain("cpu-smoke", p)[1].locked for p in ("linux/amd64", "linux/arm64")}
    assert locked == {"linux/amd64": ("numpy==2.4.6 --hash=sha256:" + "a" * 64 + "\n",),
                      "linux/arm64": ("numpy==2.4.6 --hash=sha256:" + "b" * 64 + "\n",)}
    keys = {p: plan.chain("cpu-smoke", p)[1].inputs["python"] for p in locked}
    assert keys["linux/amd64"] != keys["linux/arm64"]
