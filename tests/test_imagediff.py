"""`imgbuild diff IMAGE_A IMAGE_B` on real images built by the pipeline: two cpu-smoke variants that
differ by the project pin and by one extra package, in a namespace of their own.

The first build builds every layer (minutes); the second only the project layer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml


ROOT = Path(__file__).resolve().parent.parent
REGISTRY = os.environ.get("IMGBUILD_TEST_REGISTRY", "127.0.0.1:5000")
NS = f"imgbuild-difftest-{uuid.uuid4().hex[:8]}"
PIN_V1 = "d89c5dfd761db2eb8352a3c3df6659c984547929"   # tag v1 of the smoke-project mirror
PIN_V2 = "1a6d04ff11a3a379285c6dc7862d82d095f0056c"   # tag v2
DOCKER = "/usr/bin/docker"

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


def stacks_file(work: Path, name: str, pin: str, packages: list[str]) -> Path:
    data = yaml.safe_load((ROOT / "stacks.yaml").read_text())
    data["site"] = {"registry": REGISTRY, "namespace": NS}
    project = data["projects"]["smoke-train"]["params"]
    project["source"]["commit"] = pin
    if packages:
        project["packages"] = packages
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def imgbuild(work: Path, *args: str, timeout: float = 3000) -> subprocess.CompletedProcess:
    env = dict(os.environ, IMGBUILD_HOME=str(work / "home"), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "builder.cli", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """v1 (project pin v1) released with date tag 2026.11.28; v2 (pin v2 + six) with 2026.11.29."""
    work = tmp_path_factory.mktemp("imagediff")
    v1 = stacks_file(work, "v1", PIN_V1, [])
    v2 = stacks_file(work, "v2", PIN_V2, ["six==1.16.0"])
    for path, date in ((v1, "2026.11.28"), (v2, "2026.11.29")):
        proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(path), "--date", date)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    yield {"work": work, "file": v2}
    # Only this module's own images: the namespace is unique to this run.
    refs = subprocess.run([DOCKER, "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                          text=True).stdout.split()
    mine = [r for r in refs if f"/{NS}/" in r]
    if mine:
        subprocess.run([DOCKER, "image", "rm", "--force", *mine], capture_output=True)


def diff(built, *args: str) -> subprocess.CompletedProcess:
    return imgbuild(built["work"], "diff", *args, "-f", str(built["file"]), timeout=120)


A = "cpu-smoke@cpu-smoke-2026.11.28"
B = "cpu-smoke@cpu-smoke-2026.11.29"


def test_the_two_variants_differ_where_the_spec_differs(built):
    proc = diff(built, A, B, "--json")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    data = json.loads(proc.stdout)
    assert data["a"]["imgbuild_manifest"] and data["b"]["imgbuild_manifest"] and data["not_compared"] == []
    s = data["sections"]
    # The project's version did not change (1.0.0 at both pins); the extra package is the one change.
    assert s["python_packages"]["changes"] == [
        {"name": "six", "old": None, "new": "1.16.0", "direction": "added", "note": ""}]
    assert s["versions"]["changes"] == [] and {v["name"] for v in data["versions"]} >= {"torch", "deepspeed"}
    # Same parents: the layers differ only at the top (the project layer's COPY and RUN).
    layers = s["layers"]["changes"]
    n = len(data["b"]["layers"])
    assert len(data["a"]["layers"]) == n and 1 <= len(layers) <= 2
    assert [c["name"] for c in layers] == [f"layer {i}" for i in range(n - len(layers) + 1, n + 1)]
    assert data["a"]["layers"][: n - len(layers)] == data["b"]["layers"][: n - len(layers)]
    labels = {c["name"]: c for c in s["labels"]["changes"]}
    assert labels["io.imgbuild.source.source"]["old"].endswith("@" + PIN_V1)
    assert labels["io.imgbuild.source.source"]["new"].endswith("@" + PIN_V2)
    assert "io.imgbuild.key" in labels
    assert s["checks"]["changes"] == [] and s["checks"]["same"] >= 10
    assert s["debian_packages"]["changes"] == [] and s["env"]["changes"] == []
    assert s["ds_report_ops"]["changes"] == []
    assert any("six==1.16.0" in (c["new"] or "") for c in s["history"]["changes"])
    transfer = data["transfer"]
    assert transfer["bytes_fetched"] < 0.01 * transfer["images_total_bytes"], transfer
    print(f"\nimage diff read {transfer['bytes_fetched']} B for {transfer['images_total_bytes']} B of images "
          f"({transfer['ratio']:.5%}) in {transfer['seconds']} s")


def test_an_image_equals_itself(built):
    top = f"{REGISTRY}/{NS}/cpu-smoke:cpu-smoke"
    proc = diff(built, top, "cpu-smoke@cpu-smoke-2026.11.29")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "equal: same image digest" in proc.stdout


def test_the_table_and_markdown_read_well(built):
    table = diff(built, A, B)
    assert table.returncode == 1
    lines = table.stdout.splitlines()
    assert lines[0] == "imgbuild diff: images" and lines[1] == f"  A  {A}"
    assert "imgbuild manifest of smoke-train" in lines[2]
    assert "python packages: 1 added" in table.stdout and "  added     six" in table.stdout
    assert "checks: same (" in table.stdout
    assert lines[-1].startswith("read ") and lines[-1].endswith("no layer pulled")
    md = diff(built, A, B, "--markdown")
    assert md.returncode == 1
    assert md.stdout.startswith(f"### imgbuild diff: `{A}` → `{B}`")
    assert "| added | six | - | 1.16.0 |  |" in md.stdout


def test_a_missing_tag_is_an_error(built):
    proc = diff(built, A, "cpu-smoke@no-such-tag")
    assert proc.returncode == 2 and "is not in the registry" in proc.stderr
