"""One resolver for base digests: plan, build and diff compute the same key for the same inputs, with a
locked base and with a base mirrored in the site registry (served here by a small HTTP registry)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from builder.ship.bases import resolve
from builder.errors import RegistryError
from builder.plan.keys import make_plan
from builder.load.spec import load_spec
from conftest import REPO, run_cli
from test_imagediff_units import FakeRegistry, config

LOCKED = "sha256:" + "ab" * 32


def site(tmp_path: Path, registry: str, lock: bool) -> Path:
    """A git repository with the shipped stacks (site registry `registry`), optionally locked, committed."""
    root = tmp_path / "site"
    root.mkdir()
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    data["site"]["registry"] = registry
    (root / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    if lock:
        (root / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {"debian-bookworm": {
            "image": f"{registry}/mirror/debian:bookworm", "digest": LOCKED, "probed": "2026-12-01T00:00:00Z",
            "facts": {"os": "debian-12"}}}}))
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", "a"]):
        subprocess.run(["git", *cmd], cwd=root, check=True, capture_output=True)
    return root / "stacks.yaml"


def keys_three_ways(path: Path) -> tuple[dict, dict, dict]:
    """(plan CLI, build's resolution, diff against HEAD) -> {layer: key} for cpu-smoke."""
    res = run_cli("plan", "stack=cpu-smoke", "-f", str(path), "--json")
    assert res.code == 0, res.output
    plan = {n["layer"]: n["key"] for n in json.loads(res.out)["nodes"]}
    spec = load_spec(path)
    built = make_plan(spec, ["cpu-smoke"], resolve(spec, ["cpu-smoke"]).require())   # exactly what build() does
    build = {n.name: n.short for n in built.chain("cpu-smoke")}
    res = run_cli("diff", "HEAD", "-f", str(path), "--json")
    assert res.code == 0, res.output
    diff = {n["layer"]: n["new_key"][:32] for n in json.loads(res.out)["stacks"]["cpu-smoke"]["nodes"]}
    return plan, build, diff


def test_a_locked_base_gives_one_key_everywhere_and_asks_no_registry(tmp_path):
    path = site(tmp_path, "127.0.0.1:9", lock=True)          # nothing listens there: any lookup would fail
    plan, build, diff = keys_three_ways(path)
    assert plan == build == diff and len(plan) == 4
    spec = load_spec(path)
    assert make_plan(spec, ["cpu-smoke"], {"debian-bookworm": LOCKED}).top("cpu-smoke").short == build["smoke-train"]


def test_a_mirrored_base_gives_one_key_everywhere(tmp_path):
    fake = FakeRegistry()
    digest = fake.image("mirror/debian", "bookworm", config([], {}, ["debootstrap"]), [(b"rootfs", 10)])
    server = fake.serve()
    try:
        path = site(tmp_path, f"127.0.0.1:{server.server_address[1]}", lock=False)
        plan, build, diff = keys_three_ways(path)
    finally:
        server.shutdown()
    assert plan == build == diff and len(plan) == 4
    spec = load_spec(path)
    assert make_plan(spec, ["cpu-smoke"], {"debian-bookworm": digest}).top("cpu-smoke").short == build["smoke-train"]


def test_order_of_trust_and_never_a_guess(tmp_path):
    path = site(tmp_path, "127.0.0.1:9", lock=False)
    spec = load_spec(path)
    offline = resolve(spec, ["cpu-smoke"], lookup="none")
    assert offline.digests == {} and "neither pinned by digest nor locked" in offline.unresolved["debian-bookworm"]
    down = resolve(spec, ["cpu-smoke"], lookup="site")
    assert "unreachable" in down.unresolved["debian-bookworm"]
    with pytest.raises(RegistryError, match="cannot resolve base 'debian-bookworm'"):
        down.require()
    # The NGC bases live outside the site registry: "site" does not wait on nvcr.io, "all" would ask it.
    ngc = resolve(spec, ["h100-megatron"], lookup="site")
    assert "only the site registry is asked" in ngc.unresolved["ngc-25.09"]
    data = yaml.safe_load(path.read_text())
    data["bases"]["debian-bookworm"]["digest"] = "sha256:" + "cd" * 32
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (path.parent / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {"debian-bookworm": {
        "image": "127.0.0.1:9/mirror/debian:bookworm", "digest": LOCKED, "probed": "x", "facts": {}}}}))
    declared = resolve(load_spec(path), ["cpu-smoke"], lookup="none")
    assert declared.digests == {"debian-bookworm": "sha256:" + "cd" * 32} and declared.origins["debian-bookworm"] == "declared"


# -- a base published for several platforms (NGC PyTorch: linux/amd64 and linux/arm64 under one tag) ------

# The manifest list nvcr.io served for nvidia/pytorch:25.09-py3, as captured through the registry API on
# 2026-07-10 (github.com/kiana-0423/lammps_monitor, docs/container/evidence/train-probe-base-image-manifest.json
# at 34877a7): a Docker v2 manifest list of two entries. Its arm64 digest is pinned elsewhere as
# pytorch:25.09-py3@sha256:89172d8e...; the file's bytes are its pretty-printed form, not the registry's.
NGC_INDEX = (Path(__file__).parent / "data" / "ngc-pytorch-25.09-index.json").read_bytes()
NGC_AMD64 = "sha256:4bf906c628d572681a977681765a44a3c1d7e34b39633b7160a84de707608139"
NGC_ARM64 = "sha256:89172d8ef9c4641aacdcddf02c085bf7a736501b443ce2c4e0a660754f67106b"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


class NgcRegistry:
    """nvcr.io as the resolver sees it: the 25.09-py3 tag names the captured index."""
    asked: list = []

    def __init__(self, host):
        assert host == "nvcr.io", host

    def get_manifest(self, repo, reference):
        NgcRegistry.asked.append((repo, reference))
        if (repo, reference) != ("nvidia/pytorch", "25.09-py3"):
            return None
        import hashlib
        return json.loads(NGC_INDEX), MANIFEST_LIST, "sha256:" + hashlib.sha256(NGC_INDEX).hexdigest()


class ProbeEngine:
    """Measures nothing real: answers each probe with the platform it was asked to run on."""
    cli, mode, runner = "/usr/bin/docker", "builtin", None
    env = {"DOCKER_HOST": "tcp://builder.invalid:2376"}   # a remote engine: this host's binfmt_misc is not its

    def __init__(self):
        self.runs = []

    def platform(self):
        return "linux/amd64"

    def run_container(self, image, argv, platform=None, **kw):
        from builder.ship.engine import Result
        self.runs.append((image, platform))
        torch = "2.9.0a0+50eac811a6.nv25.09"
        return Result(0, json.dumps({"python": "3.12.3", "dists": {"torch": torch}, "os": "ubuntu-24.04",
                                     "torch": {"version": torch, "cuda": "13.0"}}), "")


def gh200_site(tmp_path: Path) -> Path:
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    data["stacks"] = {
        "gh200-megatron": {"base": "ngc-25.09", "layers": ["ngc-25.09-site"], "gpus": ["GH200"]},
        "h100-gh200": {"base": "ngc-25.09", "layers": ["ngc-25.09-site"], "gpus": ["H100", "GH200"]}}
    path = tmp_path / "stacks.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_gh200_stack_plans_arm64_on_the_ngc_index_entry_the_lock_recorded(tmp_path):
    from functools import partial
    from builder.ship.lock import lock_base
    path = gh200_site(tmp_path)
    spec = load_spec(path)
    assert spec.stack("gh200-megatron").platforms == ("linux/arm64",)
    assert spec.stack("h100-gh200").platforms == ("linux/amd64", "linux/arm64")
    engine = ProbeEngine()
    said = []
    entry = lock_base(spec, "ngc-25.09", ["gh200-megatron", "h100-gh200"], engine, said.append,
                      resolver=partial(resolve, registry=NgcRegistry))
    # One digest per platform, each probed on its platform (arm64 under QEMU on this amd64 engine).
    assert {p: e["digest"] for p, e in entry["platforms"].items()} == {"linux/amd64": NGC_AMD64,
                                                                       "linux/arm64": NGC_ARM64}
    ref = "nvcr.io/nvidia/pytorch:25.09-py3"
    assert engine.runs == [(f"{ref}@{NGC_AMD64}", "linux/amd64"), (f"{ref}@{NGC_ARM64}", "linux/arm64")]
    assert entry["digest"] not in (NGC_AMD64, NGC_ARM64)   # the index's own digest
    assert any("QEMU emulation" in line for line in said)
    (tmp_path / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {"ngc-25.09": entry}}))
    # From the lock alone (no registry asked): the arm64 chain starts on NGC's arm64 image.
    spec = load_spec(path)
    NgcRegistry.asked.clear()
    found = resolve(spec, ["gh200-megatron", "h100-gh200"], lookup="all", registry=NgcRegistry)
    assert NgcRegistry.asked == [] and found.origins == {"ngc-25.09": "lock"}
    plan = make_plan(spec, ["gh200-megatron", "h100-gh200"], found.require())
    gh = plan.chain("gh200-megatron")
    assert [n.platform for n in gh] == ["linux/arm64"] and gh[0].base_ref == f"{ref}@{NGC_ARM64}"
    assert gh[0].inputs["parent"] == f"base:{ref}@{NGC_ARM64}" and gh[0].inputs["platform"] == "linux/arm64"
    both = {p: n.base_ref for p, n in ((p, plan.chain("h100-gh200", p)[0]) for p in ("linux/amd64", "linux/arm64"))}
    assert both == {"linux/amd64": f"{ref}@{NGC_AMD64}", "linux/arm64": f"{ref}@{NGC_ARM64}"}
    # The same layer on the same base and platform is one node: the GH200 stack's and the mixed stack's arm64 one.
    assert plan.chain("h100-gh200", "linux/arm64")[0].key == gh[0].key
    res = run_cli("plan", "stack=gh200-megatron", "-f", str(path), "--offline")
    assert res.code == 0 and "linux/arm64" in res.out and "platforms linux/arm64" in res.out, res.output


def test_an_index_without_the_platform_a_stack_needs_leaves_the_base_unresolved(tmp_path):
    index = json.loads(NGC_INDEX)
    index["manifests"] = index["manifests"][:1]   # an amd64-only month

    class AmdOnly(NgcRegistry):
        def get_manifest(self, repo, reference):
            return index, MANIFEST_LIST, "sha256:" + "0" * 64
    spec = load_spec(gh200_site(tmp_path))
    found = resolve(spec, ["gh200-megatron"], registry=AmdOnly)
    assert "has no linux/arm64 image (it holds linux/amd64)" in found.unresolved["ngc-25.09"]
    with pytest.raises(RegistryError, match="cannot resolve base 'ngc-25.09'.*no linux/arm64 image"):
        found.require()


def test_preflight_reads_each_platforms_measurements_of_the_base(tmp_path):
    """The lock measured each image of the index: a fact true of the amd64 image only (its torch has sm_90
    kernels) does not speak for the arm64 one, whose finding names its own probe."""
    from builder.rules.preflight import preflight
    path = gh200_site(tmp_path)
    ref = "nvcr.io/nvidia/pytorch:25.09-py3"

    def facts(archs):
        return {"python": "3.12.3", "torch": "2.9.0a0+50eac811a6", "cuda": "13.0.1", "torch_archs": archs}
    entry = {"image": ref, "digest": "sha256:" + "f" * 64, "probed": "2026-12-04T00:00:00Z",
             "facts": facts("sm_80;sm_90;sm_100"),
             "platforms": {"linux/amd64": {"digest": NGC_AMD64, "facts": facts("sm_80;sm_90;sm_100")},
                           "linux/arm64": {"digest": NGC_ARM64, "facts": facts("sm_80;sm_100;sm_120")}}}
    (tmp_path / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {"ngc-25.09": entry}}))
    spec = load_spec(path)
    for _ in range(2):
        found = [f for f in preflight(spec, [spec.stacks["h100-gh200"], spec.stacks["gh200-megatron"]]) if f.rule == "IB012"]
        said = {(f.stack, f.message.split(";")[0]) for f in found}
        # The H100 of the mixed stack runs on x86 nodes: the arm64 image's facts do not judge it.
        assert said == {("h100-gh200", "the base's torch has no kernels for GH200 (sm_90)"),
                        ("gh200-megatron", "the base's torch has no kernels for GH200 (sm_90)")}, found
        assert all(f"@{NGC_ARM64} (linux/arm64)" in f.source for f in found)   # never the amd64 probe
    # Both images with sm_90: nothing to say.
    entry["platforms"]["linux/arm64"]["facts"] = facts("sm_80;sm_90;sm_100")
    (tmp_path / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {"ngc-25.09": entry}}))
    spec = load_spec(path)
    assert not [f for f in preflight(spec, [spec.stacks["h100-gh200"], spec.stacks["gh200-megatron"]]) if f.rule == "IB012"]
