"""Issue 36: the catalog's release lists (with where each was read) make a version that was never published an
error at `check`, naming the nearest real releases; a real release passes, and one newer than the list stays
IB002's unknown."""
from __future__ import annotations

import json

import pytest

from builder.core import catalog
from conftest import run_cli, shipped_data, write_stacks


def _check(tmp_path, ds: str | None = None, mcore: str | None = None):
    data = shipped_data()
    if ds:
        data["layers"]["ds-0.19.8-cpu"]["params"]["version"] = ds
    if mcore:
        data["projects"]["megatron-core-0.16"]["params"]["version"] = mcore
    res = run_cli("check", "--strict", "--json", "-f", write_stacks(tmp_path, data))
    return res, [f for f in json.loads(res.out)["findings"] if f["rule"] in ("IB002", "IB003")]


def test_versions_that_were_never_released_are_errors_naming_the_nearest_ones(tmp_path):
    for _ in range(2):
        res, found = _check(tmp_path, ds="0.16.99", mcore="0.13.99")
        assert res.code != 0
        by_key = {f["key"]: f for f in found}
        ds = by_key["layers.ds-0.19.8-cpu.params.version"]
        assert ds["severity"] == "error" and ds["message"] == \
            "deepspeed 0.16.99 was never released: the nearest releases are 0.16.8, 0.16.9, 0.17.0, 0.17.1"
        assert "PyPI's deepspeed releases" in ds["source"]
        mc = by_key["projects.megatron-core-0.16.params.version"]
        assert mc["severity"] == "error" and "megatron 0.13.99 was never released" in mc["message"] \
            and "0.13.1, 0.14.0" in mc["message"]


@pytest.mark.parametrize("ds, mcore", [("0.16.9", "0.15.3"), ("0.19.8", "0.19.0")])
def test_real_releases_pass(tmp_path, ds, mcore):
    _, found = _check(tmp_path, ds=ds, mcore=mcore)
    assert not [f for f in found if f["rule"] == "IB003"], found


def test_a_version_beyond_the_newest_is_unknown_not_an_error(tmp_path):
    _, found = _check(tmp_path, ds="0.42.0")
    assert [(f["rule"], f["severity"]) for f in found] == [("IB002", "unknown")], found


@pytest.mark.parametrize("version, rules", [("2.15.99", ["IB003"]), ("2.15.0", ["IB002"]), ("2.11.0", []),
                                             ("2.21.0", ["IB002"])])
def test_one_finding_per_version_never_two_that_disagree(tmp_path, version, rules):
    """transformer-engine 2.15.99 was both "never released" (IB003) and "newer than any release" (IB002), and the
    real 2.15.0 "may not exist": the newest known is the release list's as much as newest_known's."""
    data = shipped_data()
    data["layers"]["te-as-shipped"]["params"] = {"version": version}
    res = run_cli("check", "--json", "stack=h100-megatron", "-f", write_stacks(tmp_path, data))
    found = [f for f in json.loads(res.out)["findings"] if f["rule"] in ("IB002", "IB003")
             and f["key"] == "layers.te-as-shipped.params.version"]
    assert sorted({f["rule"] for f in found}) == rules, found
    if rules == ["IB002"] and version == "2.15.0":
        assert "may not exist" not in found[0]["message"] and "published release" in found[0]["message"], found


def test_every_list_names_where_it_was_read():
    for field in ("deepspeed", "megatron", "transformer_engine", "flash_attn"):
        known = catalog.releases(field)
        assert known.verified and known.source and list(known.value) == sorted(known.value) and len(known.value) > 10
    assert catalog.releases("apex") is None


def _ngc(tmp_path, month: str, provides: bool = False):
    data = shipped_data()
    base = data["bases"]["ngc-25.09"]
    base["image"] = f"nvcr.io/nvidia/pytorch:{month}-py3"
    if not provides:
        base.pop("provides")
        base.pop("source", None)
    res = run_cli("check", "--strict", "--json", "-f", write_stacks(tmp_path / month, data))
    doc = json.loads(res.out)
    return res, [f for f in doc["findings"] if f["stack"] in ("h100-megatron", "h100-megatron-next")]


def test_an_ngc_month_that_cannot_exist_is_one_error_for_the_base(tmp_path):
    for _ in range(2):
        res, found = _ngc(tmp_path, "25.13")
        assert res.code == 3   # preflight refused it (README: Exit codes)
        assert [(f["rule"], f["severity"], f["key"]) for f in found] == [("IB004", "error", "bases.ngc-25.09.image")], found
        assert found[0]["message"].startswith("NGC PyTorch 25.13 is not a month NGC can have") and \
            "check(s) of h100-megatron, h100-megatron-next cannot be judged" in found[0]["message"], found


def test_an_ngc_month_the_catalog_lacks_is_one_warning_naming_the_months_it_knows(tmp_path):
    res, found = _ngc(tmp_path, "26.02")
    assert [(f["rule"], f["severity"]) for f in found] == [("IB004", "error")], found   # --strict: refused
    assert res.code == 3, res.output
    assert "it knows 23.04 to 25.12" in found[0]["message"] and "imgbuild lock base=ngc-25.09" in found[0]["fix"]
    # A base that declares what it provides is judged by that: no IB004, its own findings stand.
    _, found = _ngc(tmp_path, "26.03", provides=True)
    assert not [f for f in found if f["rule"] == "IB004"], found


def test_a_month_that_cannot_exist_is_refused_whatever_the_base_declares(tmp_path):
    """What a base declares it provides does not make nvcr.io/nvidia/pytorch:25.13-py3 pullable."""
    for month in ("25.13", "25.00"):
        res, found = _ngc(tmp_path, month, provides=True)
        assert res.code == 3 and [(f["rule"], f["severity"]) for f in found] == [("IB004", "error")], found
        assert "is not a month NGC can have" in found[0]["message"]


@pytest.mark.parametrize("provides, refused", [(None, True), ({"python": "3.11.2", "os": "debian-12"}, False)])
def test_a_base_nobody_knows_or_measured_fails_strict(tmp_path, provides, refused):
    """Any base, not only NGC: no catalog record, nothing declared, no lock entry is one IB004 warning, which
    --strict refuses; the same base declaring what it provides passes."""
    data = shipped_data()
    data["bases"]["nobody"] = {"image": "127.0.0.1:5000/nobody/knows:1.0", "family": "debian",
                               **({"provides": provides} if provides else {})}
    data["stacks"]["nb"] = {"base": "nobody", "layers": ["cpu-torch-2.13"]}
    for _ in range(2):
        res = run_cli("check", "--strict", "--json", "stack=nb", "-f", write_stacks(tmp_path, data))
        found = [(f["rule"], f["severity"], f["key"]) for f in json.loads(res.out)["findings"]]
        if refused:
            assert res.code == 3 and found == [("IB004", "error", "bases.nobody.image")], res.output
        else:
            assert res.code == 0 and found == [], res.output


def test_facts_lists_the_bases_and_releases_the_catalog_knows():
    res = run_cli("facts", "--json")
    assert res.code == 0, res.output
    doc = json.loads(res.out)
    row = doc["bases"]["nvcr.io/nvidia/pytorch:25.09-py3"]
    assert row["torch"] and row["cuda"] and row["python"] and row["source"]
    assert "0.16.9" in doc["releases"]["deepspeed"] and "0.16.99" not in doc["releases"]["deepspeed"]
    assert run_cli("facts").out.splitlines()[0].split()[:4] == ["base", "torch", "jax", "cuda"]
