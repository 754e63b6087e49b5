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


def test_every_list_names_where_it_was_read():
    for field in ("deepspeed", "megatron", "transformer_engine", "flash_attn"):
        known = catalog.releases(field)
        assert known.verified and known.source and list(known.value) == sorted(known.value) and len(known.value) > 10
    assert catalog.releases("apex") is None
