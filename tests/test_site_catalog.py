"""Issue 36 (4): a site catalog. `site.catalog` names a file of the shipped catalog's schema whose records add
to or override it (a Megatron release the shipped catalog lacks, a base built in house); it is validated when
read, and findings name it as their source."""
from __future__ import annotations

import json

import pytest
import yaml

from builder.core import catalog
from builder.load.spec import load_spec
from conftest import run_cli, shipped_data, write_stacks

CORE_0_18_2 = "571370c829ca768fe37244f4e2e7f28d8accc4ab"   # NVIDIA/Megatron-LM core_v0.18.2 (a lightweight tag)
RELEASE = {"version": "0.18.2", "commit": CORE_0_18_2, "python": ">=3.12", "torch": ">=2.6.0",
           "source": "NVIDIA/Megatron-LM core_v0.18.2 tag and its pyproject.toml (requires-python >=3.12, torch>=2.6.0)"}


@pytest.fixture(autouse=True)
def _shipped_catalog_after():
    """The catalog in use is the last stacks file's (process-wide): the next test file starts from the shipped one."""
    yield
    catalog.use(None)


def _site(tmp_path, site_catalog: dict | str | None, edit=lambda data: None):
    data = shipped_data()
    params = data["projects"]["megatron-core-0.16"]["params"]
    params["source"]["commit"], params["version"] = CORE_0_18_2, "0.18.2"
    if site_catalog is not None:
        data["site"]["catalog"] = "site-catalog.yaml"
        text = site_catalog if isinstance(site_catalog, str) else yaml.safe_dump(site_catalog, sort_keys=False)
        tmp_path.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site-catalog.yaml").write_text(text)
    edit(data)
    return write_stacks(tmp_path, data, lock=True)


def _findings(file, *args):
    res = run_cli("check", "stack=h100-megatron", "--json", *args, "-f", file)
    return res, [f for f in json.loads(res.out).get("findings", []) if f["rule"].startswith("IB06")]


def test_a_megatron_release_the_shipped_catalog_lacks_is_known_from_the_site_catalog(tmp_path):
    res, found = _findings(_site(tmp_path / "without", None))
    assert [(f["rule"], f["severity"]) for f in found] == [("IB060", "unknown")], found
    assert "megatron-core 0.18.2 is not in the catalog" in found[0]["message"]
    assert "site.catalog" in found[0]["fix"]   # a hint a user of the installed package can follow
    for _ in range(2):
        res, found = _findings(_site(tmp_path / "with", {"megatron_core": {"releases": [RELEASE]}}), "--strict")
        assert res.code == 0 and found == [], res.output
    # In one process (the check above ran in this one): the shipped catalog alone is in use again for the next
    # stacks file read that names no site catalog.
    assert catalog.megatron_release(commit=CORE_0_18_2) is not None
    load_spec(_site(tmp_path / "again", None))
    assert catalog.megatron_release(commit=CORE_0_18_2) is None


def test_a_finding_judged_by_the_site_catalog_names_it_as_its_source(tmp_path):
    """The positive control: a site record that the stack breaks (Python 3.13 wanted, 3.12.3 there)."""
    strict = dict(RELEASE, python=">=3.13")
    file = _site(tmp_path, {"megatron_core": {"releases": [strict]}})
    for _ in range(2):
        res, found = _findings(file)
        assert [(f["rule"], f["severity"]) for f in found] == [("IB061", "error")], res.output
        assert f"site catalog {tmp_path / 'site-catalog.yaml'}:" in found[0]["source"] and \
            "core_v0.18.2 tag" in found[0]["source"], found[0]


def test_a_base_built_in_house_is_described_by_the_site_catalog(tmp_path):
    def internal(data):
        data["bases"]["site-base"] = {"image": "{registry}/site/base:2026.11", "family": "debian"}
        data["stacks"]["cpu-site"] = {"base": "site-base", "layers": ["cpu-torch-2.13"]}
    res = run_cli("check", "stack=cpu-site", "--strict", "--json", "-f", _site(tmp_path / "without", None, internal))
    assert [f["rule"] for f in json.loads(res.out)["findings"]] == ["IB004"] and res.code == 3, res.output
    described = {"bases": {"{registry}/site/base:2026.11": {
        "python": "3.11.2", "os": "debian-12", "source": "our base image's build log, 2026-11-30"}}}
    res = run_cli("check", "stack=cpu-site", "--strict", "--json", "-f", _site(tmp_path / "with", described, internal))
    assert res.code == 0 and json.loads(res.out)["findings"] == [], res.output


def test_a_malformed_site_catalog_is_refused_with_file_line_and_key(tmp_path):
    text = """megatron_core:
  releases:
    - {version: "0.18.2", commit: 571370c8, source: "a tag"}
    - {version: "0.20", commit: """ + CORE_0_18_2 + """}
newest_knwon:
  megatron: {version: "0.20.0", source: "x"}
"""
    file = _site(tmp_path, text)
    for _ in range(2):
        res = run_cli("check", "--json", "-f", file)
        assert res.code == 2, res.output
        got = [(e["file"].rsplit("/", 1)[-1], e["line"], e["key"], e["reason"]) for e in json.loads(res.out)["errors"]]
        assert ("site-catalog.yaml", 3, "megatron_core.releases[0].commit",
                "'571370c8' is not a full commit (40 hex digits)") in got, got
        assert ("site-catalog.yaml", 4, "megatron_core.releases[1]",
                "a record of a site catalog names its source (where the fact was read)") in got, got
        assert ("site-catalog.yaml", 5, "newest_knwon",
                "unknown catalog section 'newest_knwon' (did you mean 'newest_known'?)") in got, got


@pytest.mark.parametrize("given, words", [("nowhere.yaml", "'nowhere.yaml' is not a file"),
                                          (5, "is not a file")])
def test_a_site_catalog_that_is_not_a_file_is_refused_at_its_key(tmp_path, given, words):
    data = shipped_data()
    data["site"]["catalog"] = given
    res = run_cli("check", "--json", "-f", write_stacks(tmp_path, data))
    assert res.code == 2 and words in res.out and "site.catalog" in res.out, res.output


def test_init_starts_a_gpu_stack_on_an_ngc_month_the_catalog_knows(tmp_path):
    out = tmp_path / "stacks.yaml"
    res = run_cli("init", "--ngc", "25.09", "--gpus", "H100,A100", "--stack", "h100-ds", "-o", out)
    assert res.code == 0 and "NGC PyTorch 25.09, DeepSpeed 0.19.8" in res.out, res.output
    data = yaml.safe_load(out.read_text())
    assert data["bases"]["ngc-25.09"] == {"image": "nvcr.io/nvidia/pytorch:25.09-py3", "family": "ngc-pytorch"}
    assert data["stacks"]["h100-ds"]["gpus"] == ["H100", "A100"]
    res = run_cli("check", "--strict", "--json", "-f", out)
    found = json.loads(res.out)["findings"]
    assert res.code == 0 and [f["rule"] for f in found] == ["IB001"], res.output   # the driver floor is the site's
    # The arch list of the compiled ops is the GPUs given.
    res = run_cli("render", "stack=h100-ds", "-f", out)
    assert 'TORCH_CUDA_ARCH_LIST="8.0;9.0"' in res.out, res.output


@pytest.mark.parametrize("args, words", [
    (["--ngc", "25.13", "--gpus", "H100"], "--ngc '25.13': not an NGC PyTorch month the catalog knows (did you mean '25.12'?)"),
    (["--ngc", "25.09", "--gpus", "h-100,X9"], "unknown GPU 'h-100' (did you mean 'H100'?), unknown GPU 'X9'"),
    (["--ngc", "25.09"], "--ngc MONTH and --gpus H100,... go together"),
])
def test_init_refuses_a_month_or_gpu_it_does_not_know(tmp_path, args, words):
    res = run_cli("init", *args, "-o", tmp_path / "stacks.yaml")
    assert res.code == 2 and words in res.err and not (tmp_path / "stacks.yaml").exists(), res.output


def test_a_site_with_another_mistake_still_reads_its_own_catalog(tmp_path):
    """site.catalog is read before the rest of the section: a misspelt key beside it is reported, and the file is
    judged with its own catalog, not with that of the stacks file read before it."""
    first = _site(tmp_path / "first", {"megatron_core": {"releases": [RELEASE]}})
    load_spec(first)
    assert catalog.site_file() == (tmp_path / "first" / "site-catalog.yaml").resolve()
    second = _site(tmp_path / "second", {"megatron_core": {"releases": [dict(RELEASE, python=">=3.13")]}},
                   lambda data: data["site"].update(regstry="x"))
    for _ in range(2):
        res = run_cli("check", "--json", "-f", second)
        assert res.code == 2 and "unknown key 'regstry'" in res.out, res.output
        assert catalog.site_file() == (tmp_path / "second" / "site-catalog.yaml").resolve()
