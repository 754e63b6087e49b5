"""`imgbuild diff IMAGE_A IMAGE_B` on real images built by the pipeline: two variants of a tiny stack
(tests/tiny.py, issue 33) that differ by one package's version and by one env value and one label, in a
namespace of their own.

Both variants are the mirrored Debian base, the tests' `tiny-env` layer `demo` (python3, a venv, demo-app
1.0 from a loopback index: the same key, built once and reused), a pip layer `plugin` pinning demo-dep (1.0
in A, 1.1 in B) and a system-setup layer `variant` setting DIFF_VARIANT and the label org.example.variant
(v1 in A, v2 in B). The diff reads manifests, configs and imgbuild's measured manifests, none of which
depends on torch: a tiny stack has every section cpu-smoke had, except torch's and DeepSpeed's versions and
ds_report ops, which are empty on both sides here as they were equal there. The first build takes seconds;
the second builds only the two layers above demo.
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

from tiny import NET, publish, site, wheel, served

REGISTRY = os.environ.get("IMGBUILD_TEST_REGISTRY", "127.0.0.1:5000")
NS = f"imgbuild-difftest-{uuid.uuid4().hex[:8]}"
STACK = "demo"
DOCKER = "/usr/bin/docker"

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


@pytest.fixture(scope="module")
def module_index(tmp_path_factory):
    """A loopback package index for the whole module: demo-app 1.0 (needs demo-dep>=1.0), demo-dep 1.0
    and 1.1."""
    root = tmp_path_factory.mktemp("imagediff-index")
    wheel(root, "imgbuild-demo-app", "1.0", ("imgbuild-demo-dep>=1.0",))
    wheel(root, "imgbuild-demo-dep", "1.0")
    wheel(root, "imgbuild-demo-dep", "1.1")
    publish(root)
    yield from served(root)


def stacks_file(work: Path, name: str, dep: str, variant: str) -> Path:
    """The tiny stack: demo (demo-app 1.0), plugin (demo-dep==dep), variant (DIFF_VARIANT and a label)."""
    path = site(work, name, NS, [f"imgbuild-demo-dep=={dep}"], packages=["imgbuild-demo-app==1.0"],
                tags=["{stack}", "{stack}-{date}"])
    data = yaml.safe_load(path.read_text())
    data["layers"]["variant"] = {"kind": "system-setup", "params": {"env": {"DIFF_VARIANT": variant},
                                                                   "labels": {"org.example.variant": variant}}}
    data["stacks"][STACK]["layers"].append("variant")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def imgbuild(work: Path, *args: str, timeout: float = 3000, index: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, IMGBUILD_HOME=str(work / "home"), PYTHONUNBUFFERED="1", **NET)
    if index:
        env["IMGBUILD_PIP_INDEX_URL"] = index["url"]
    return subprocess.run([sys.executable, "-m", "builder.cli", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def built(tmp_path_factory, module_index):
    """v1 (demo-dep 1.0, DIFF_VARIANT=v1) released with date tag 2026.11.28; v2 (demo-dep 1.1, v2) with 2026.11.29."""
    work = tmp_path_factory.mktemp("imagediff")
    v1 = stacks_file(work, "v1", "1.0", "v1")
    v2 = stacks_file(work, "v2", "1.1", "v2")
    for path, date in ((v1, "2026.11.28"), (v2, "2026.11.29")):
        proc = imgbuild(work, "build", f"stack={STACK}", "-f", str(path), "--date", date, index=module_index)
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


A = f"{STACK}@{STACK}-2026.11.28"
B = f"{STACK}@{STACK}-2026.11.29"


# The per-image labels imgbuild writes: they differ between any two images of different keys.
OWN_LABELS = {"io.imgbuild.key", "io.imgbuild.parent", "io.imgbuild.spec-hash", "org.opencontainers.image.created",
              "org.opencontainers.image.version"}


def test_the_two_variants_differ_where_the_spec_differs(built):
    proc = diff(built, A, B, "--json")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    data = json.loads(proc.stdout)
    assert data["a"]["imgbuild_manifest"] and data["b"]["imgbuild_manifest"] and data["not_compared"] == []
    s = data["sections"]
    # Exactly the sections the spec's changes reach: the package (and its SBOM entry, its install step, its
    # layer), the env value and the label (with imgbuild's own per-image labels); nothing else.
    assert {k for k, v in s.items() if v["changes"]} == {"python_packages", "sbom", "history", "layers", "env",
                                                         "labels"}
    # The demo-dep pin is the one package change.
    assert s["python_packages"]["changes"] == [
        {"name": "imgbuild-demo-dep", "old": "1.0", "new": "1.1", "direction": "upgrade", "note": ""}]
    assert [(c["name"], c["old"], c["new"]) for c in s["sbom"]["changes"]] == [
        ("pypi imgbuild-demo-dep", "1.0", "1.1")]
    assert s["versions"]["changes"] == [] and {v["name"] for v in data["versions"]} >= {"python"}
    # Same parents: the layers differ only at the top (plugin's pip install; variant's ENV and LABEL add none).
    layers = s["layers"]["changes"]
    n = len(data["b"]["layers"])
    assert len(data["a"]["layers"]) == n and 1 <= len(layers) <= 2
    assert [c["name"] for c in layers] == [f"layer {i}" for i in range(n - len(layers) + 1, n + 1)]
    assert data["a"]["layers"][: n - len(layers)] == data["b"]["layers"][: n - len(layers)]
    labels = {c["name"]: c for c in s["labels"]["changes"]}
    assert (labels["org.example.variant"]["old"], labels["org.example.variant"]["new"]) == ("v1", "v2")
    assert "io.imgbuild.key" in labels and set(labels) <= OWN_LABELS | {"org.example.variant"}, set(labels)
    assert s["env"]["changes"] == [{"name": "DIFF_VARIANT", "old": "v1", "new": "v2", "direction": "changed",
                                    "note": ""}]
    assert s["checks"]["changes"] == [] and s["checks"]["same"] >= 3
    assert s["debian_packages"]["changes"] == [] and s["config"]["changes"] == []
    assert s["ds_report_ops"]["changes"] == []
    assert any("imgbuild-demo-dep==1.1" in (c["new"] or "") for c in s["history"]["changes"])
    assert any((c["new"] or "") == "ENV DIFF_VARIANT=v2" for c in s["history"]["changes"])
    transfer = data["transfer"]
    assert transfer["bytes_fetched"] < 0.01 * transfer["images_total_bytes"], transfer
    print(f"\nimage diff read {transfer['bytes_fetched']} B for {transfer['images_total_bytes']} B of images "
          f"({transfer['ratio']:.5%}) in {transfer['seconds']} s")


def test_an_image_equals_itself(built):
    top = f"{REGISTRY}/{NS}/{STACK}:{STACK}"
    proc = diff(built, top, B)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "equal: same image digest" in proc.stdout


def test_the_table_and_markdown_read_well(built):
    table = diff(built, A, B)
    assert table.returncode == 1
    lines = table.stdout.splitlines()
    assert lines[0] == "imgbuild diff: images" and lines[1] == f"  A  {A}"
    assert "imgbuild manifest of variant" in lines[2]
    assert "python packages: 1 upgrade" in table.stdout and "  upgrade   imgbuild-demo-dep" in table.stdout
    assert "checks: same (" in table.stdout
    assert lines[-1].startswith("read ") and lines[-1].endswith("no layer pulled")
    md = diff(built, A, B, "--markdown")
    assert md.returncode == 1
    assert md.stdout.startswith(f"### imgbuild diff: `{A}` → `{B}`")
    assert "| upgrade | imgbuild-demo-dep | 1.0 | 1.1 |  |" in md.stdout


def test_a_missing_tag_is_an_error(built):
    proc = diff(built, A, f"{STACK}@no-such-tag")
    assert proc.returncode == 2 and "is not in the registry" in proc.stderr
