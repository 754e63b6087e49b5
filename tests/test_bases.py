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
