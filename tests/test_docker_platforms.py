"""A stack of two platforms (issue 22) on the real engine and registry: linux/amd64 natively, linux/arm64
under QEMU user-mode emulation (Debian's qemu-user-static and binfmt-support, registered through
binfmt_misc by scripts/setup-host.sh), on the mirrored Debian base, which is an index of both.

The stack is a tiny one (tests/tiny.py, issue 33): the mirrored Debian base and the tests' own `tiny-env`
layer with Debian's python3 and demo-app from the loopback index, each platform's chain from the index's own
entry (uname, Python's platform.machine() and the aarch64 ELF of python3.11 in the export show which). Not
the tiny C extension: apt's compiler and Python headers took 318 s under QEMU on a cold cache, and its
compile is proven natively (test_docker_tiny.py); compiling under emulation is what the platform code
hands to QEMU, not something imgbuild does differently per platform. What this file
proves of platforms (one chain per platform from the index's own entries, both built, checked on their
platform and released as one OCI index of two entries with one SBOM each; `docker run --platform` of each
entry; validate and diff of one entry; a failing arm64 check holding back both platforms' tags; export of
the arm64 entry) is imgbuild's code for any stack: none of it reads what the layers install, so the
tiny stack proves it as cpu-smoke's chain did, in about a minute where cpu-smoke's arm64 torch and
DeepSpeed took 7 to 11 minutes of emulation.

What is torch- and DeepSpeed-specific about arm64 is proven without building it: the plan (the arm64
chain installs PyPI's torch 2.10.0 aarch64 wheel, the newest CPU-only one, checked by its sha256 from the
wheelhouse; the amd64 chain keeps cpu-smoke's torch image by key; DeepSpeed is installed with no op
prebuilt and checked JIT-free, since compiling cpu_adam and shm_comm under emulation took over 15
minutes, docs/measurements/2026-12-04-arm64-emulation.txt; the tags use no torch version, which differs
between the platforms), and one light engine check: the aarch64 wheel in this host's wheelhouse is one
pip accepts for the mirrored base's arm64 Python, and the x86_64 one is refused there.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from builder.ship.registry import Registry

from conftest import DOCKER, shipped_data, write_stacks
from e2e import NS, REGISTRY, imgbuild, reports
from tiny import env_for_index, publish, site, wheel, served

NSP = NS + "-platforms"
PLATFORMS = ["linux/amd64", "linux/arm64"]
TAGS = ["{stack}", "{stack}-{date}"]
INDEX = "application/vnd.oci.image.index.v1+json"
ARM_WHEEL = {"file": "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
             "sha256": "3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"}
# A pure wheel whose metadata asks, on aarch64 only, for a demo-dep older than the one demo-app needs:
# installed --no-deps it is a broken environment that pip check finds on arm64 and not on amd64.
ARM_CONFLICT = 'imgbuild-demo-dep<1.0; platform_machine == "aarch64"'


def engine(test):
    """The marks of a test on the real engine and registry (all but the plan test)."""
    return pytest.mark.docker(pytest.mark.registry(pytest.mark.slow(test)))


def release(tag: str, stack: str = "demo") -> str | None:
    return Registry(REGISTRY).manifest_digest(f"{NSP}/{stack}", tag)


def two_platforms(work: Path, name: str, plugin: list | None = None) -> Path:
    """The tiny stack `demo` for both platforms, and `demo-amd64`, the same layer for linux/amd64 only; with
    `plugin`, a pip layer above demo installing those --no-deps."""
    path = site(work, name, NSP, plugin, packages=["imgbuild-demo-app==1.0"], platforms=PLATFORMS, tags=TAGS)
    data = yaml.safe_load(path.read_text())
    data["stacks"]["demo-amd64"] = {"base": "debian-bookworm", "layers": ["demo"], "tags": ["{stack}"]}
    if plugin:
        data["layers"]["plugin"]["params"]["flags"] = ["no-deps"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def plan_of(path: Path, stacks: list):
    from builder.load.spec import load_spec
    from builder.plan.keys import make_plan
    from builder.ship.bases import resolve
    spec = load_spec(path)
    return make_plan(spec, stacks, resolve(spec, stacks).require())


def run(ref: str, platform: str, *argv: str, mounts: tuple = ()) -> str:
    """docker run of one platform's entry of a release tag. Docker 20.10 keeps one image per local name and
    digest: the other platform's entry, pulled before, is removed (with the references it holds), else the
    pull is refused ("Cannot overwrite digest"); then this platform's entry is pulled."""
    subprocess.run([DOCKER, "image", "rm", "--force", ref], capture_output=True, timeout=300)
    subprocess.run([DOCKER, "pull", "--quiet", "--platform", platform, ref], check=True, capture_output=True,
                   timeout=900)
    volumes = [a for m in mounts for a in ("-v", m)]
    proc = subprocess.run([DOCKER, "run", "--rm", "--platform", platform, "--network", "none", *volumes, ref, *argv],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def module_index(tmp_path_factory):
    """tiny.index for the whole module (its fixture is per test): demo-app 1.0 (needs demo-dep>=1.0),
    demo-dep 1.0 and demo-armconflict 1.0 (ARM_CONFLICT), served on loopback."""
    root = tmp_path_factory.mktemp("platforms-index")
    wheel(root, "imgbuild-demo-app", "1.0", ("imgbuild-demo-dep>=1.0",))
    wheel(root, "imgbuild-demo-dep", "1.0")
    wheel(root, "imgbuild-demo-armconflict", "1.0", (ARM_CONFLICT,))
    publish(root)
    yield from served(root)


@pytest.fixture(scope="module")
def built(work, module_index) -> dict:
    path = two_platforms(work, "platforms")
    proc = imgbuild(work, "build", "stack=demo", "-f", str(path), "--date", "2026.12.04", timeout=1800,
                    env=env_for_index(module_index))
    return {"proc": proc, "report": reports(work)[-1], "path": path, "env": env_for_index(module_index)}


@engine
def test_both_platforms_are_built_checked_and_released_as_one_index(built):
    proc, rep = built["proc"], built["report"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "building and checking under QEMU emulation on the linux/amd64 engine" in proc.stdout
    assert "under emulation (linux/arm64 on a linux/amd64 engine)" in proc.stdout
    assert rep["ok"] and set(rep["tags"]["demo"]) == {"demo", "demo-2026.12.04"}
    plan = plan_of(built["path"], ["demo"])
    # One chain per platform, each FROM its own entry of the mirrored base's index; both built, both passed.
    amd, arm = plan.chain("demo", "linux/amd64"), plan.chain("demo", "linux/arm64")
    base = Registry(REGISTRY).get_manifest("mirror/debian", "bookworm")[0]
    entries = {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in base["manifests"]
               if m.get("platform", {}).get("architecture") in ("amd64", "arm64")}
    assert entries["linux/amd64"] in amd[0].base_ref and entries["linux/arm64"] in arm[0].base_ref
    assert amd[0].key != arm[0].key
    nodes = {n["key"]: n for n in rep["nodes"].values()}
    assert {(nodes[n.short]["action"], nodes[n.short]["status"]) for n in amd + arm} == {("build", "passed")}
    # The tags name one OCI index whose entries are the two top images, each stored in the release repository.
    reg = Registry(REGISTRY)
    index, media_type, digest = reg.get_manifest(f"{NSP}/demo", "demo")
    assert media_type == INDEX and release("demo-2026.12.04") == digest
    tops = {p: reg.manifest_digest(f"{NSP}/layers/{n.name}", n.short) for p, n in plan.tops("demo").items()}
    assert {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in index["manifests"]} == tops
    assert len(set(tops.values())) == 2
    for child in tops.values():
        assert reg.get_manifest(f"{NSP}/demo", child) is not None
    # Each platform's image checked inside, on its platform: the arm64 one under emulation, recorded as passed.
    from builder.ship.manifest import fetch_manifest
    for platform, node in plan.tops("demo").items():
        recorded = fetch_manifest(reg, f"{NSP}/layers/{node.name}", tops[platform])
        assert recorded["outcome"] == "passed", (platform, recorded)
        assert {c["id"]: c["status"] for c in recorded["checks"]}["tiny-env.pip-check"] == "passed", platform
        assert recorded["python_packages"]["imgbuild-demo-app"] == "1.0", platform
    # One SBOM per platform image, beside each in the release repository.
    from builder.ship import sbom
    for child in tops.values():
        assert reg.manifest_digest(f"{NSP}/demo", sbom.sbom_tag(child)), child


@engine
def test_the_index_runs_on_each_platform(built):
    assert built["proc"].returncode == 0
    ref = f"{REGISTRY}/{NSP}/demo:demo"
    # One pull and one container per platform (each pull of an entry replaces the other's local image).
    code = "import platform, imgbuild_demo_app as a; print(platform.machine(), a.__version__)"
    argv = ("sh", "-c", f'uname -m && python -c "{code}"')
    assert run(ref, "linux/arm64", *argv).splitlines() == ["aarch64", "aarch64 1.0"]
    assert run(ref, "linux/amd64", *argv).splitlines() == ["x86_64", "x86_64 1.0"]
    # The local tag of the mirrored base stays the amd64 image other tests build FROM.
    subprocess.run([DOCKER, "pull", "--quiet", f"{REGISTRY}/mirror/debian:bookworm"], check=True, capture_output=True)


@engine
def test_validate_and_diff_read_each_platform_of_the_release(work, built):
    assert built["proc"].returncode == 0
    path, env = built["path"], built["env"]
    # The arm64 image's checks again, under emulation, and only that platform's.
    proc = imgbuild(work, "validate", "stack=demo", "--platform", "linux/arm64", "-f", str(path), env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("checks:") == 1 and "QEMU emulation" in proc.stdout, proc.stdout[-3000:]
    # A stack built for linux/amd64 only (the same layer: its image is demo's amd64 one, by key): its
    # validate for linux/arm64 is refused.
    single = imgbuild(work, "build", "stack=demo-amd64", "-f", str(path), env=env, timeout=900)
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    wrong = imgbuild(work, "validate", "stack=demo-amd64", "--platform", "linux/arm64", "-f", str(path), env=env)
    assert wrong.returncode == 7 and "is not built for linux/arm64" in wrong.stderr, wrong.stderr
    # diff reads the named entry of the index: amd64 is the amd64-only release's own image; arm64 is another.
    a, b = f"{REGISTRY}/{NSP}/demo:demo", f"{REGISTRY}/{NSP}/demo-amd64:demo-amd64"
    same = imgbuild(work, "diff", a, b, "--platform", "linux/amd64", "--json")
    assert same.returncode in (0, 1), same.stdout[-2000:] + same.stderr[-2000:]   # 1: an index against an image
    assert not [s for s, v in json.loads(same.stdout)["sections"].items() if v["changes"]], same.stdout[-3000:]
    other = imgbuild(work, "diff", a, b, "--platform", "linux/arm64", "--json")
    assert other.returncode == 1, other.stdout[-2000:] + other.stderr[-2000:]
    sections = json.loads(other.stdout)["sections"]
    config = {c["name"]: (c["old"], c["new"]) for c in sections["config"]["changes"]}
    assert config["architecture"] == ("arm64", "amd64") and sections["layers"]["changes"], config


@engine
def test_an_arm64_check_that_fails_moves_no_tag_of_either_platform(work, built):
    """A pip layer above demo installs, --no-deps, a package that on aarch64 only asks for a demo-dep older
    than the one installed: pip check fails in the arm64 image and passes in the amd64 one. The amd64
    layer is built, validated and pushed under its key; no tag moves, not the index, not an amd64 image.
    Run twice: it fails the same way each time, the second time reusing the amd64 image."""
    assert built["proc"].returncode == 0
    before = {t: release(t) for t in ("demo", "demo-2026.12.04")}
    path = two_platforms(work, "platforms-arm-fails", ["imgbuild-demo-armconflict==1.0"])
    plan = plan_of(path, ["demo"])
    amd, arm = plan.top("demo", "linux/amd64"), plan.top("demo", "linux/arm64")
    for attempt in range(2):
        proc = imgbuild(work, "build", "stack=demo", "-f", str(path), "--date", "2026.12.05", timeout=1800,
                        env=built["env"])
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert "no tag of demo was moved" in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert {t: release(t) for t in before} == before, attempt
        assert release("demo-2026.12.05") is None
        nodes = {n["key"]: n for n in reports(work)[-1]["nodes"].values()}
        failed = [n for n in nodes.values() if n["status"] == "failed"]
        assert [n["key"] for n in failed] == [arm.short], failed
        pip_check = {c["id"]: c for c in failed[0]["checks"]}["pip.pip-check"]
        assert pip_check["status"] == "failed" and "imgbuild-demo-dep" in pip_check["detail"], pip_check
        assert nodes[amd.short]["status"] == "passed"
        assert nodes[amd.short]["action"] == ("build", "reuse")[attempt], nodes[amd.short]
    # The amd64 image is in the registry under its key, with its passing proof.
    from builder.ship.manifest import fetch_manifest
    reg = Registry(REGISTRY)
    digest = reg.manifest_digest(f"{NSP}/layers/plugin", amd.short)
    assert digest and fetch_manifest(reg, f"{NSP}/layers/plugin", digest)["outcome"] == "passed"


@engine
def test_export_writes_the_platform_it_is_asked_for(work, built, tmp_path):
    import os
    if os.geteuid() != 0:
        pytest.skip("umoci unpacks with the image's owners only as root")
    assert built["proc"].returncode == 0
    out = tmp_path / "arm.sqsh"
    proc = imgbuild(work, "export", "stack=demo", "--platform", "linux/arm64", "-o", str(out), "-f",
                    str(built["path"]), env=built["env"], timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads(Path(str(out) + ".json").read_text())
    assert record["platform"] == "linux/arm64" and record["source_digest"] == release("demo")
    # The python in it is an aarch64 ELF (e_machine 183), read from the squashfs without running it.
    elf = subprocess.run(["unsquashfs", "-cat", str(out), "usr/bin/python3.11"], capture_output=True, timeout=300).stdout
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 183, elf[:20]


# -- torch and DeepSpeed on arm64: by plan, and one light engine check ----------------------------------

def cpu_both(data: dict) -> None:
    """cpu-smoke's chain for x86 and Grace nodes: the torch layer lists one wheel per platform, DeepSpeed
    with no op prebuilt (cpu_adam must be JIT-compatible), tags without the torch version."""
    params = data["layers"]["cpu-torch-2.13"]["params"]
    params["wheel"] = [params["wheel"], ARM_WHEEL]    # cpu-smoke (amd64 only) installs the first, as before
    data["layers"]["ds-0.19.8-jit"] = {"kind": "deepspeed", "params": {"version": "0.19.8", "runtime_ops": ["cpu_adam"]}}
    data["stacks"]["cpu-both"] = {"extends": "cpu-smoke", "layers": ["cpu-torch-2.13", "ds-0.19.8-jit"],
                                  "platforms": PLATFORMS, "tags": ["{stack}", "{stack}-ds{deepspeed}"],
                                  "description": "cpu-smoke for x86 and Grace nodes: one index of two images"}


def test_torch_and_deepspeed_on_arm64_by_plan(tmp_path):
    """No engine: what cpu-smoke's chain for both platforms would build and check on arm64."""
    from builder.load.spec import load_spec
    from builder.plan.keys import make_plan
    from builder.ship.checks import request
    from builder.ship.hostconf import HostConf
    from builder.ship.publish import PublishError, _agreed_tags
    from builder.ship.wheelhouse import sha256_of
    data = shipped_data()
    cpu_both(data)
    spec = load_spec(write_stacks(tmp_path, data))
    digests = {"debian-bookworm": {"linux/amd64": "sha256:" + "a" * 64, "linux/arm64": "sha256:" + "b" * 64}}
    plan = make_plan(spec, ["cpu-both", "cpu-smoke"], digests)
    amd, arm, smoke = plan.chain("cpu-both", "linux/amd64"), plan.chain("cpu-both", "linux/arm64"), plan.chain("cpu-smoke")
    assert [n.name for n in arm] == [n.name for n in amd] == \
        [n.name.replace("ds-0.19.8-cpu", "ds-0.19.8-jit") for n in smoke]
    # The amd64 torch image is cpu-smoke's, by key; the arm64 chain is its own, from the base's arm64 entry.
    assert amd[0].key == smoke[0].key and not {n.key for n in arm} & {n.key for n in smoke + amd}
    assert arm[0].base_ref.endswith("b" * 64)
    # The arm64 torch layer installs the aarch64 wheel by its sha256, from the wheelhouse; no x86 wheel.
    assert arm[0].inputs["wheels"] == {ARM_WHEEL["file"]: ARM_WHEEL["sha256"]}
    assert f"{ARM_WHEEL['sha256']}  /wheelhouse/{ARM_WHEEL['file']}" in arm[0].dockerfile
    assert "x86_64" not in arm[0].dockerfile and ARM_WHEEL["file"] not in amd[0].dockerfile
    # ... and this host's wheelhouse holds that very file (the build links it into the context).
    house = HostConf.from_env().wheelhouse
    assert house and sha256_of(house / ARM_WHEEL["file"]) == ARM_WHEEL["sha256"], house
    # DeepSpeed JIT-free on arm64: no op compiled (no DS_BUILD_, no py-cpuinfo step), ds_report must find
    # cpu_adam compatible, and the cpu_adam step (which needs it prebuilt) is not asked for.
    ds = arm[1].dockerfile
    assert "deepspeed==0.19.8" in ds and "DS_BUILD_" not in ds and "py-cpuinfo" not in ds
    ds_report = {c.id: dict(c.args) for c in arm[1].checks}["deepspeed.ds-report"]
    assert ds_report["installed"] == [] and ds_report["compatible"] == ["cpu_adam"]
    wanted = request(arm[1].checks, gpu=False)
    assert wanted["ds_report"] and "deepspeed.cpu-adam-step" not in wanted["snippets"]
    # The tags agree across the platforms (deepspeed is the same); a torch version in a tag would not.
    measured = {"linux/amd64": {"versions": {"torch": "2.13.0+cpu", "deepspeed": "0.19.8"}},
                "linux/arm64": {"versions": {"torch": "2.10.0", "deepspeed": "0.19.8"}}}
    assert _agreed_tags(spec, "cpu-both", measured, "2026.12.04") == ["cpu-both", "cpu-both-ds0.19.8"]
    data["stacks"]["cpu-both"]["tags"] = ["{stack}-torch{torch}"]
    with pytest.raises(PublishError, match="its tags differ between platforms"):
        _agreed_tags(load_spec(write_stacks(tmp_path / "torch-tag", data)), "cpu-both", measured, "2026.12.04")


@engine
def test_the_aarch64_torch_wheel_fits_the_bases_arm64_python(built):
    """The one engine check of the torch arm64 path: pip in the arm64 image of the tiny stack (Debian's
    python3 on the mirrored base's arm64 entry, as cpu-torch's arm64 chain has) accepts the wheelhouse's
    aarch64 torch wheel, and refuses the x86_64 one (a dry run: nothing unpacked under emulation)."""
    from builder.ship.hostconf import HostConf
    assert built["proc"].returncode == 0
    house = HostConf.from_env().wheelhouse
    x86 = yaml.safe_load((Path(__file__).resolve().parent.parent / "stacks.yaml").read_text())[
        "layers"]["cpu-torch-2.13"]["params"]["wheel"]["file"]
    pip = "python -m pip install --dry-run --no-deps --no-index --disable-pip-version-check"
    out = run(f"{REGISTRY}/{NSP}/demo:demo", "linux/arm64", "sh", "-c",
              f"{pip} /wheelhouse/{ARM_WHEEL['file']} && {{ {pip} /wheelhouse/{x86} 2>&1 || echo refused; }}",
              mounts=(f"{house}:/wheelhouse:ro",))
    assert "Would install torch-2.10.0" in out and "is not a supported wheel on this platform" in out, out
    assert out.endswith("refused"), out
    subprocess.run([DOCKER, "pull", "--quiet", f"{REGISTRY}/mirror/debian:bookworm"], check=True, capture_output=True)
