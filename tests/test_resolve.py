"""What `imgbuild lock python=LAYER` runs and records (issue 21), without an engine: the layer's Dockerfile
as the resolver rewrites it, pip's report as it is read (and refused), the lock file's python: section,
and `lock --check`. The real resolution against the engine and registry is tests/test_docker_resolve.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import STACKS, run_cli
from builder.errors import EngineError, SpecError
from builder.load.spec import load_spec
from builder.plan.keys import make_plan
from builder.core.lockfile import load_lock
from builder.plan.stale import stale_entries
from builder.plan.keys import layer_definition
from builder.ship.resolve import read_report, resolving

REPORT = Path(__file__).parent / "data" / "pip-report-deepspeed-0.19.8.json"   # pip 23.0.1, cpu-smoke's torch
DIGESTS = {"debian-bookworm": "sha256:" + "ab" * 32, "ngc-25.09": "sha256:" + "cd" * 32,
           "ngc-25.03": "sha256:" + "ef" * 32}


def nodes():
    spec = load_spec(STACKS)
    return {n.name: n for n in make_plan(spec, None, DIGESTS).nodes.values()}


def test_the_last_pip_command_only_reports_and_nothing_after_it_runs(tmp_path):
    """cuda-toolkit-pip installs, then links nvcc in the same RUN: in the resolver's Dockerfile the pip
    command is the last thing that runs, with --dry-run (nothing installed or compiled), and the reports
    are the build's only output. The example without its lock: `imgbuild lock` resolves the unlocked layer."""
    from builder.load.spec import load_spec as load
    copy = tmp_path / "stacks.yaml"
    copy.write_text((Path(__file__).parent.parent / "examples" / "cuda-pypi" / "stacks.yaml").read_text())
    spec = load(copy)
    node = next(n for n in make_plan(spec, ["h100-pypi-deepspeed"], {"debian-bookworm": DIGESTS["debian-bookworm"]})
                .nodes.values() if n.name == "cuda-13.0-pypi")
    text, count = resolving(node.dockerfile)
    assert count == 1
    run = text.split("python -m pip install", 1)[1]
    assert run.startswith(" --report /tmp/imgbuild-resolve-00.json --dry-run --progress-bar off nvidia-cuda-cccl==13.0.85 ")
    assert "ln -sfn" not in text and "ldconfig" not in text and "ENV CUDA_HOME" not in text
    assert text.rstrip().endswith("FROM scratch\nCOPY --from=0 /tmp/imgbuild-resolve-*.json /")


def test_every_pip_command_reports_and_the_ones_before_the_last_install():
    """cpu-smoke's project layer installs its packages, then the project with --no-deps, in one RUN: the
    first command installs (the second must see it, as in the build) and reports; the second reports only."""
    node = nodes()["smoke-train"]
    text, count = resolving(node.dockerfile.replace("python -m pip install --progress-bar off --no-deps",
                                                    "python -m pip install --progress-bar off six==1.17.0 \\\n"
                                                    " && python -m pip install --progress-bar off --no-deps"))
    assert count == 2
    assert "pip install --report /tmp/imgbuild-resolve-00.json --progress-bar off six==1.17.0" in text
    assert "pip install --report /tmp/imgbuild-resolve-01.json --dry-run --progress-bar off --no-deps /opt/project" in text


@pytest.mark.parametrize("layer", sorted(n for n in ["cpu-torch-2.13", "ds-0.19.8-cpu", "ds-0.19.5-hopper",
                                                      "megatron-core-0.16", "smoke-train"]))
def test_each_shipped_layer_with_pip_has_one_last_dry_run(layer):
    node = nodes()[layer]
    text, count = resolving(node.dockerfile)
    assert count >= 1 and text.count("--dry-run") == 1
    before, after = text.rsplit("--dry-run", 1)
    assert "RUN " not in after.split("FROM scratch")[0], after       # nothing runs after the last pip command
    assert "LABEL" not in after


def test_a_layer_without_pip_has_nothing_to_resolve():
    with pytest.raises(SpecError, match="runs no pip command"):
        resolving(nodes()["cpu-env"].dockerfile)


def test_pips_report_is_read_with_every_artifacts_hash():
    got = read_report(REPORT.read_bytes(), "r")
    assert [(d.name, d.version, d.requested) for d in got] == [
        ("deepspeed", "0.19.8", True), ("pydantic_core", "2.50.5", False), ("hjson", "3.1.0", False)]
    assert got[0].sha256 == "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af"
    assert got[0].url.endswith("/deepspeed-0.19.8.tar.gz")


def _report(**change) -> bytes:
    data = json.loads(REPORT.read_text())
    item = data["install"][0]
    for path, value in change.items():
        where, key = {"hash": (item["download_info"]["archive_info"]["hashes"], "sha256"),
                      "name": (item["metadata"], "name"), "version": (item["metadata"], "version"),
                      "format": (data, "version")}[path]
        if value is None:
            del where[key]
        else:
            where[key] = value
    return json.dumps(data).encode()


@pytest.mark.parametrize("change,reason", [
    ({"hash": None}, "no sha256 in the report"),
    ({"hash": "ab" * 31}, "no sha256 in the report"),
    ({"hash": "AB" * 32}, "no sha256 in the report"),
    ({"name": "deep speed"}, "cannot be read"),
    ({"version": "latest"}, "cannot be read"),
    ({"format": "2"}, "not a pip installation report of format 1"),
])
def test_a_report_that_cannot_be_locked_is_refused(change, reason):
    with pytest.raises(EngineError, match=reason):
        read_report(_report(**change), "pip command 1 of 1")


def test_an_index_credential_in_a_url_never_reaches_the_lock():
    data = json.loads(REPORT.read_text())
    data["install"][0]["download_info"]["url"] = "https://__token__:pypi-s3cr3t@index.example/p/deepspeed-0.19.8.tar.gz"
    got = read_report(json.dumps(data).encode(), "r")
    assert got[0].url == "https://index.example/p/deepspeed-0.19.8.tar.gz"


@pytest.mark.parametrize("data", [b"", b"[]", b"{}", b"\xff", b"x" * (9 << 20)])
def test_anything_but_a_report_is_refused(data):
    with pytest.raises(EngineError):
        read_report(data, "r")


def _locked(tmp_path, steps, definition=None) -> Path:
    file = tmp_path / "stacks.yaml"
    file.write_text(STACKS.read_text())
    spec = load_spec(file)
    stack = spec.stack("cpu-smoke")
    entry = {"stack": "cpu-smoke", "parent": "127.0.0.1:5000/imgbuild/layers/cpu-torch-2.13@sha256:" + "12" * 32,
             "definition": definition or layer_definition(spec, stack, "ds-0.19.8-cpu"),
             "resolved": "2026-12-02T12:00:00Z", "steps": steps}
    (tmp_path / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {}, "python": {"ds-0.19.8-cpu": entry}}))
    return file


STEP = [[{"name": "deepspeed", "version": "0.19.8", "sha256": "9e" * 32, "url": "https://x/deepspeed-0.19.8.tar.gz",
          "requested": True},
         {"name": "hjson", "version": "3.1.0", "sha256": "65" * 32, "url": "https://x/hjson.whl", "requested": False}]]


def test_the_lock_files_python_section_is_read_and_checked(tmp_path):
    file = _locked(tmp_path, STEP)
    entry = load_lock(file).python["ds-0.19.8-cpu"]
    assert sorted(entry.dists()) == ["deepspeed", "hjson"] and entry.dists()["hjson"].version == "3.1.0"
    assert stale_entries(load_spec(file)) == []
    assert run_cli("lock", "--check", "-f", file).code == 0


@pytest.mark.parametrize("bad,reason", [
    ({"sha256": "9e" * 31}, "is not 64 hex digits"),
    ({"version": "one"}, "Invalid version"),
    ({"name": "a b"}, "invalid project name|is invalid"),
])
def test_a_hand_edited_python_entry_is_refused_at_load(tmp_path, bad, reason):
    step = [[{**STEP[0][0], **bad}, STEP[0][1]]]
    file = _locked(tmp_path, step)
    res = run_cli("lock", "--check", "-f", file)
    assert res.code == 2 and "not a lock file imgbuild wrote" in res.err, res.output
    import re
    assert re.search(reason, res.err), res.err


def test_a_changed_layer_makes_its_entry_stale_and_check_fails(tmp_path):
    """lock --check: the entry was resolved for the layer as it was; a new DeepSpeed version (or anything
    beneath it, or the base) makes it stale, exit 1, with the command that fixes it."""
    file = _locked(tmp_path, STEP)
    file.write_text(file.read_text().replace('{version: "0.19.8", ops', '{version: "0.19.7", ops', 1))
    assert '{version: "0.19.7", ops' in file.read_text()
    res = run_cli("lock", "--check", "-f", file)
    assert res.code == 1, res.output
    assert "stale: python.ds-0.19.8-cpu: the layer, a layer beneath it or its base changed" in res.out
    assert "imgbuild lock python=ds-0.19.8-cpu" in res.out
    res = run_cli("lock", "--check", "--json", "-f", file)
    body = json.loads(res.out)
    assert res.code == 1 and body["ok"] is False and body["stale"] and body["exit_code"] == 1


def test_no_lock_file_is_stale(tmp_path):
    file = tmp_path / "stacks.yaml"
    file.write_text(STACKS.read_text())
    res = run_cli("lock", "--check", "-f", file)
    assert res.code == 1 and "no lock file" in res.out, res.output


def test_what_the_set_would_replace_is_read_with_the_resolvers_chain():
    """The image beneath has hjson 3.0.0: the report's hjson 3.1.0 replaces it, and deepspeed's own
    requirements say why (markers of the report's environment; extras left out)."""
    data = json.loads(REPORT.read_text())
    data["install"][0]["metadata"]["requires_dist"] = ["hjson", "tqdm; extra == \"dev\"", "pydantic_core>=2"]
    got = {d.name: d for d in read_report(json.dumps(data).encode(), "r", {"hjson": "3.0.0", "deepspeed": "0.19.8"})}
    assert got["hjson"].replaces == "3.0.0" and got["hjson"].required_by == ["deepspeed (hjson)"]
    assert got["deepspeed"].replaces is None          # the same version beneath: nothing replaced
    assert got["pydantic_core"].required_by == ["deepspeed (pydantic_core>=2)"]


def test_the_resolver_reads_what_the_image_beneath_holds_before_the_first_pip_command():
    text, _ = resolving(nodes()["ds-0.19.8-cpu"].dockerfile)
    # A build argument new each run, declared before: BuildKit never serves a report from its cache.
    assert text.index("ARG IMGBUILD_RESOLVE_RUN\n") < text.index("RUN (python -m pip list")
    before = text.index("RUN (python -m pip list --format=json 2>/dev/null || echo '[]') > /tmp/imgbuild-resolve-before.json")
    assert before < text.index("--dry-run") and text.count("imgbuild-resolve-before.json") == 1


def test_a_resolution_that_replaces_a_package_beneath_is_refused_with_its_chain(tmp_path):
    """IB097: pulled in by another requirement, an error naming the chain; asked for by the layer, a
    warning. The check refuses before any build."""
    step = [dict(STEP[0][0]), {**STEP[0][1], "replaces": "3.0.0", "required_by": ["deepspeed (hjson)"]}]
    file = _locked(tmp_path, [step])
    res = run_cli("check", "stack=cpu-smoke", "--json", "-f", file)
    assert res.code == 3, res.output
    found = [f for f in json.loads(res.out)["findings"] if f["rule"] == "IB097"]
    assert [(f["severity"], f["key"]) for f in found] == [("error", "layers.ds-0.19.8-cpu")], found
    assert "replaces hjson 3.0.0 of the image beneath with 3.1.0 (required by: deepspeed (hjson))" in found[0]["message"]
    step[1]["requested"] = True
    file = _locked(tmp_path / "asked", [step]) if (tmp_path / "asked").mkdir() is None else None
    res = run_cli("check", "stack=cpu-smoke", "--json", "-f", file)
    assert res.code == 0 and [f["severity"] for f in json.loads(res.out)["findings"] if f["rule"] == "IB097"] == ["warning"]


def _wheelhouse(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "Demo_App-1.0-py3-none-any.whl").write_bytes(b"app 1.0")
    (wheels / "demo_app-1.1-py3-none-any.whl").write_bytes(b"app 1.1")
    (wheels / "demo-dep-2.0.tar.gz").write_bytes(b"dep sdist")
    (wheels / "notes.txt").write_text("not a distribution")
    return wheels


def test_a_wheelhouse_is_served_as_an_index_with_each_files_sha256(tmp_path):
    """IMGBUILD_PIP_OFFLINE's index: a page per project (names normalized, wheels and sdists), each link with
    the file's sha256, the files themselves from the wheelhouse; nothing else of the folder is offered."""
    import hashlib
    import urllib.request
    from builder.ship import wheelhouse
    wheels = _wheelhouse(tmp_path)
    with wheelhouse.serve(wheels) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/simple")
        app = urllib.request.urlopen(url + "/demo-app/", timeout=10).read().decode()
        sha = hashlib.sha256(b"app 1.1").hexdigest()
        assert f'href="../../files/demo_app-1.1-py3-none-any.whl#sha256={sha}"' in app and "Demo_App-1.0" in app
        assert "demo-dep-2.0.tar.gz#sha256=" + hashlib.sha256(b"dep sdist").hexdigest() in \
            urllib.request.urlopen(url + "/demo-dep/", timeout=10).read().decode()
        assert urllib.request.urlopen(url.rsplit("/", 1)[0] + "/files/demo_app-1.1-py3-none-any.whl",
                                      timeout=10).read() == b"app 1.1"
        assert "notes" not in urllib.request.urlopen(url + "/", timeout=10).read().decode()
    with pytest.raises(OSError):   # gone with the block
        urllib.request.urlopen(url + "/", timeout=5)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="holds no wheel or sdist"):
        with wheelhouse.serve(tmp_path / "empty"):
            pass


@pytest.mark.parametrize("env, reason", [
    ({"IMGBUILD_PIP_OFFLINE": "1"}, "needs a wheelhouse"),
    ({"IMGBUILD_PIP_OFFLINE": "1", "WHEELS": "1", "IMGBUILD_PIP_INDEX_URL": "https://pypi.example/simple"},
     "both set"),
    ({"IMGBUILD_PIP_OFFLINE": "1", "WHEELS": "1", "IMGBUILD_BUILD_NETWORK": "none"}, "on the host's loopback"),
])
def test_offline_needs_a_wheelhouse_no_index_and_the_host_network(tmp_path, monkeypatch, env, reason):
    from builder.ship.hostconf import HostConf
    for name in ("IMGBUILD_PIP_INDEX_URL", "IMGBUILD_BUILD_NETWORK", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    # (no folder: the host's pip configuration may name a find-links folder, which counts as a wheelhouse)
    monkeypatch.setenv("IMGBUILD_WHEELHOUSE", str(_wheelhouse(tmp_path) if env.pop("WHEELS", None) else tmp_path / "none"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SpecError, match=reason):
        HostConf.from_env()


def test_offline_the_served_index_is_the_builds_index_secret_and_its_files_are_recorded_by_name(tmp_path, monkeypatch):
    from builder.ship.hostconf import HostConf
    for name in ("IMGBUILD_PIP_INDEX_URL", "IMGBUILD_BUILD_NETWORK", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IMGBUILD_WHEELHOUSE", str(_wheelhouse(tmp_path)))
    monkeypatch.setenv("IMGBUILD_PIP_OFFLINE", "1")
    conf = HostConf.from_env()
    assert conf.offline and conf.network == "host" and conf.pip_index_url is None
    with conf.secrets() as secrets:
        served = Path(secrets["pip-index-url"]).read_text()
        assert served.startswith("http://127.0.0.1:") and served.endswith("/simple")
    report = json.loads(REPORT.read_text())
    item = report["install"][0]
    item["download_info"]["url"] = served.replace("/simple", "/files/") + "x-1.0-py3-none-any.whl"
    got = read_report(json.dumps(report).encode(), "t", offline=True)
    assert got[0].url == "wheelhouse:x-1.0-py3-none-any.whl"
    assert read_report(json.dumps(report).encode(), "t")[0].url.startswith("http://127.0.0.1:")   # online: as given
