"""The catalog page (issue 23) from data, without a registry: the schema it ships, escaping of what a registry
says, a site written whole or not at all. The page read from a real registry in a real browser is in
tests/test_docker_catalog.py."""

from __future__ import annotations

import json
import re

import pytest

from builder.catalog import CatalogError, SCHEMA, check
from builder.catalog import page

DIGEST = "sha256:" + "ab" * 32
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def platform(**over) -> dict:
    p = {"platform": "linux/amd64", "digest": DIGEST,
         "versions": {"python": "3.11.2", "torch": "2.13.0+cpu", "deepspeed": "0.19.8"},
         "megatron_commit": None, "deepspeed_ops_prebuilt": ["cpu_adam"], "torch_arch_list": [],
         "binary_archs": {}, "layers": [{"layer": "torch", "kind": "cpu-torch", "key": "k" * 32, "sources": {}}],
         "checks": {"passed": 3, "failed": 0, "skipped": 1, "gpu_checks": 1, "gpu_checks_ran": 0,
                    "validated_with_gpu": False, "list": [{"id": "a", "status": "passed", "gpu": False}]},
         "sbom": None}
    p.update(over)
    return p


def data(**release) -> dict:
    r = {"digest": DIGEST, "tags": ["cpu-smoke"], "created": "2026-12-04T10:00:00Z",
         "reference": f"127.0.0.1:5000/site/cpu-smoke@{DIGEST}", "gpus": ["H100"], "description": "",
         "runtime_env": {"NCCL_IB_DISABLE": "0"}, "platforms": [platform()]}
    r.update(release)
    return {"schema": "imgbuild.catalog/1", "generated": "2026-12-04T10:00:00Z", "registry": "127.0.0.1:5000",
            "namespace": "site", "stacks": [{"name": "cpu-smoke", "repository": "127.0.0.1:5000/site/cpu-smoke",
                                             "releases": [r]}]}


def test_the_data_imgbuild_writes_fits_the_schema_it_ships():
    check(data())
    check(data(gpus=None, previous=DIGEST, changes=[{"section": "versions", "note": "", "more": 0, "changes": [
        {"name": "torch", "old": "2.12.0", "new": "2.13.0", "direction": "upgrade"}]}]))
    json.loads(SCHEMA.read_text())   # and the schema is JSON itself


@pytest.mark.parametrize("break_it, where", [
    (lambda d: d["stacks"][0]["releases"][0].update(digest="sha256:short"), "stacks/0/releases/0/digest"),
    (lambda d: d["stacks"][0]["releases"][0]["platforms"][0]["checks"].pop("failed"), "stacks/0/releases/0/platforms/0/checks"),
    (lambda d: d["stacks"][0].update(extra=1), "stacks/0"),
    (lambda d: d["stacks"][0]["releases"][0].update(tags=[]), "stacks/0/releases/0/tags"),
])
def test_data_that_does_not_fit_is_refused_before_anything_is_written(break_it, where):
    bad = data()
    break_it(bad)
    with pytest.raises(CatalogError, match=f"at {re.escape(where)}"):
        check(bad)


def test_what_the_registry_says_is_escaped_everywhere(tmp_path):
    d = data(description=HOSTILE, tags=["cpu-smoke", "x" + "<b>"], gpus=[HOSTILE])
    d["stacks"][0]["releases"][0]["platforms"][0]["versions"]["torch"] = HOSTILE
    d["stacks"][0]["releases"][0]["platforms"][0]["layers"][0]["sources"] = {"source": HOSTILE}
    d["stacks"][0]["releases"][0]["runtime_env"] = {"NCCL_IB_HCA": "mlx5_0"}
    page.write(tmp_path / "site", {"data": d, "sboms": {}})
    text = (tmp_path / "site" / "index.html").read_text()
    assert HOSTILE not in text and "<b>" not in text and "onerror=alert" not in text.replace("onerror=alert(1)&gt;", "")
    assert text.count("<script>") == 1   # the page's own filter, and nothing a registry said


def test_the_page_has_no_external_asset_and_every_file_it_links_is_written(tmp_path):
    written = page.write(tmp_path / "site", {"data": data(), "sboms": {}})
    text = (tmp_path / "site" / "index.html").read_text()
    assert not re.search(r'(?:src|href)="(?:https?:)?//', text), "an external asset"
    for link in re.findall(r'href="([^"#][^"]*)"', text):
        assert (tmp_path / "site" / link).is_file(), link
    for anchor in re.findall(r'href="#([^"]+)"', text):
        assert f'id="{anchor}"' in text, anchor
    assert "sbatch/cpu-smoke.sbatch" in written
    script = (tmp_path / "site" / "sbatch" / "cpu-smoke.sbatch").read_text()
    assert "export NCCL_IB_DISABLE=0" in script and "#SBATCH --gpus-per-node=8" in script


def test_a_failed_write_leaves_the_previous_site(tmp_path, monkeypatch):
    out = tmp_path / "site"
    page.write(out, {"data": data(), "sboms": {}})
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    monkeypatch.setattr(page, "page", lambda *a: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(RuntimeError):
        page.write(out, {"data": data(description="new"), "sboms": {}})
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["site"]   # no temporary folder left


def test_a_folder_that_is_not_a_catalog_is_never_replaced(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    with pytest.raises(CatalogError, match="does not hold a catalog"):
        page.write(home, {"data": data(), "sboms": {}})
    assert (home / "thesis.tex").read_text() == "years of work"
    page.write(tmp_path / "empty", {"data": data(), "sboms": {}})
    page.write(tmp_path / "empty", {"data": data(description="again"), "sboms": {}})   # over an earlier catalog
    assert "again" in (tmp_path / "empty" / "index.html").read_text()
