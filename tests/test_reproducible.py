"""Reproducible layers without an engine: what the rendered Dockerfiles carry (SOURCE_DATE_EPOCH, the
removal of what records build times), the file-level diff and its causes on real tar bytes, the Podman
engine's argv, and IB118 (what Buildah 1.28 cannot build) at check time. The real builds are in
tests/test_docker_podman.py."""

from __future__ import annotations

import io
from pathlib import Path
import tarfile

import pytest

from builder.core import layerdiff
from builder.rules.enginefit import refusals
from builder.ship.engine import BuildRequest, Engine, Result
from builder.ship.podman import PodmanEngine
from conftest import run_cli, shipped_data, write_stacks


def layer(files: dict) -> io.BytesIO:
    """A layer tar: path -> (bytes, mtime) or (None, mtime) for a folder."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path, (data, mtime) in files.items():
            info = tarfile.TarInfo(path)
            info.mtime = mtime
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def pyc(flags: int, stamp: bytes) -> bytes:
    return b"\xa7\r\r\n" + flags.to_bytes(4, "little") + stamp + b"code"


def diff(a: dict, b: dict) -> layerdiff.LayerDiff:
    return layerdiff.compare(layerdiff.read_layer(layer(a)), layerdiff.read_layer(layer(b)))


def test_identical_layers_have_no_change_and_their_twins_name_each_cause():
    same = {"opt/venv/": (None, 1), "opt/venv/a.py": (b"x = 1\n", 315532800)}
    assert diff(same, same).changes == []
    # time alone
    [c] = diff(same, {**same, "opt/venv/a.py": (b"x = 1\n", 1796000000)}).changes
    assert c.what == ("time",) and "file time not fixed" in c.cause and "315532800 -> 1796000000" in c.detail
    # a timestamp-based .pyc (flags 0) against a checked-hash one (flags 3) of the same source
    [c] = diff({"a.cpython-311.pyc": (pyc(0, b"\x01\x02\x03\x04\x05\x00\x00\x00"), 1)},
               {"a.cpython-311.pyc": (pyc(0, b"\x09\x02\x03\x04\x05\x00\x00\x00"), 1)}).changes
    assert "timestamp-based .pyc" in c.cause and "SOURCE_DATE_EPOCH" in c.cause
    [c] = diff({"a.cpython-311.pyc": (pyc(3, b"h" * 8), 1)}, {"a.cpython-311.pyc": (pyc(3, b"g" * 8), 1)}).changes
    assert c.cause == "a checked-hash .pyc whose source differs"
    # logs and caches
    [c] = diff({"var/log/dpkg.log": (b"2026-12-06 00:01", 1)}, {"var/log/dpkg.log": (b"2026-12-06 00:09", 1)}).changes
    assert "installer log" in c.cause
    [c] = diff({"var/cache/apt/pkgcache.bin": (b"a", 1)}, {"var/cache/apt/pkgcache.bin": (b"b", 1)}).changes
    assert "cache" in c.cause
    # compiled code naming its random build folder, and compiled code that differs otherwise
    elf = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    [c] = diff({"op.so": (elf + b"/tmp/pip-install-abc123_x/csrc/a.cpp", 1)},
               {"op.so": (elf + b"/tmp/pip-install-zzz999_y/csrc/a.cpp", 1)}).changes
    assert "embeds its temporary build folder" in c.cause and "/tmp/pip-install-" in c.cause
    [c] = diff({"op.so": (elf + b"A", 1)}, {"op.so": (elf + b"B", 1)}).changes
    assert "compiled code that differs" in c.cause
    # a path in one build only
    [c] = diff({}, {"var/log/apt/history.log": (b"", 1)}).changes
    assert c.what == ("added",) and "installer log" in c.cause


def test_the_summary_counts_every_cause_and_shows_a_few_paths_of_each():
    a = {f"f{i:02}": (b"x", 1) for i in range(30)} | {"lib.so": (b"\x7fELF" + b"1" * 12, 1)}
    b = {f"f{i:02}": (b"x", 2) for i in range(30)} | {"lib.so": (b"\x7fELF" + b"2" * 12, 1)}
    lines = diff(a, b).summary(examples=2)
    assert lines[0].startswith("30 path(s): file time not fixed")
    assert lines[1:4] == ["    f00: time (time 1 -> 2)", "    f01: time (time 1 -> 2)", "    ... and 28 more (all in the JSON report)"]
    assert lines[4].startswith("1 path(s): compiled code") and lines[5] == "    lib.so: contents"


def test_a_time_alone_is_a_time_whatever_the_file():
    [c] = diff({"var/log/dpkg.log": (b"same", 1)}, {"var/log/dpkg.log": (b"same", 2)}).changes
    assert "file time not fixed" in c.cause


def test_small_text_files_that_differ_show_how():
    a = {"opt/x/METADATA": (b"Name: x\nVersion: 1\nBuilt: 12:00\n", 1)}
    b = {"opt/x/METADATA": (b"Name: x\nVersion: 1\nBuilt: 12:07\n", 1)}
    ra, rb = layerdiff.read_layer(layer(a)), layerdiff.read_layer(layer(b))
    d = layerdiff.compare(ra, rb)
    keep = layerdiff.small_changed(d, ra, rb)
    assert keep == {"opt/x/METADATA"}
    layerdiff.show_contents(d, layerdiff.read_layer(layer(a), keep), layerdiff.read_layer(layer(b), keep))
    assert d.changes[0].detail == "-Built: 12:00 | +Built: 12:07" and d.changes[0].cause == "contents differ"
    # the same lines in another order (DeepSpeed's METADATA, its extras from a set): named as such
    a = {"m/METADATA": (b"Name: ds\nRequires-Dist: a; extra == 'all'\nRequires-Dist: b; extra == 'all'\n", 1)}
    b = {"m/METADATA": (b"Name: ds\nRequires-Dist: b; extra == 'all'\nRequires-Dist: a; extra == 'all'\n", 1)}
    ra, rb = layerdiff.read_layer(layer(a)), layerdiff.read_layer(layer(b))
    d = layerdiff.compare(ra, rb)
    keep = layerdiff.small_changed(d, ra, rb)
    layerdiff.show_contents(d, layerdiff.read_layer(layer(a), keep), layerdiff.read_layer(layer(b), keep))
    assert "another order" in d.changes[0].cause and "PYTHONHASHSEED" in d.changes[0].cause


def test_every_rendered_layer_declares_the_epoch_and_those_that_run_remove_build_records(tmp_path):
    from builder.load.spec import load_spec
    from builder.plan.render import render_layer
    data = shipped_data()
    data["site"]["source_date_epoch"] = 1767225600
    spec = load_spec(write_stacks(tmp_path, data))
    for name, stack in spec.stacks.items():
        for lay in stack.chain:
            text = render_layer(spec, stack, lay)
            assert "\nARG SOURCE_DATE_EPOCH=1767225600\nARG PYTHONHASHSEED=0\n" in text, (name, lay.name)
            runs = any(line.startswith("RUN ") for line in text.split("\n") if "/var/log/dpkg.log" not in line)
            assert ("/var/log/dpkg.log" in text) == runs, (name, lay.name)
            plain = render_layer(spec, stack, lay, reproducible=False)
            assert "SOURCE_DATE_EPOCH" not in plain and "PYTHONHASHSEED" not in plain and "/var/log/dpkg.log" not in plain


def test_the_epoch_is_a_key_input_and_not_a_lock_input(tmp_path):
    from builder.load.spec import load_spec
    from builder.plan.keys import layer_definition, make_plan
    data = shipped_data()
    one = load_spec(write_stacks(tmp_path / "a", data))
    data["site"]["source_date_epoch"] = 1767225600
    two = load_spec(write_stacks(tmp_path / "b", data))
    p1, p2 = make_plan(one, ["cpu-smoke"]), make_plan(two, ["cpu-smoke"])
    assert set(p1.stacks["cpu-smoke"]).isdisjoint(p2.stacks["cpu-smoke"])   # every key moves
    s1, s2 = one.stacks["cpu-smoke"], two.stacks["cpu-smoke"]
    assert layer_definition(one, s1, "smoke-train") == layer_definition(two, s2, "smoke-train")


@pytest.mark.parametrize("value, reason", [
    (12, "from 315532800"), ("soon", "is not a time"), (True, "is not a time"), (99999999999, "to now")])
def test_a_bad_source_date_epoch_is_refused_with_its_key(tmp_path, value, reason):
    data = shipped_data()
    data["site"]["source_date_epoch"] = value
    res = run_cli("check", "-f", write_stacks(tmp_path, data))
    assert res.code == 2 and "site.source_date_epoch" in res.err and reason in res.err, res.err
    assert "Traceback" not in res.output


def test_an_unknown_engine_is_refused_with_a_suggestion(tmp_path):
    data = shipped_data()
    data["site"]["engine"] = "podmn"
    res = run_cli("check", "-f", write_stacks(tmp_path, data))
    assert res.code == 2 and "site.engine" in res.err and "did you mean 'podman'" in res.err, res.err


def fake(calls):
    def runner(argv, **kw):
        calls.append(list(argv))
        return Result(0, "[]" if "inspect" in argv else "4.3.1\n", "")
    return runner


def test_podman_builds_one_layer_per_key_with_fixed_times_and_speaks_http_to_loopback_only(tmp_path):
    engine = PodmanEngine(cli="podman", runner=fake([]))
    req = BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tag="imgbuild.local/x:1",
                       build_args={"PARENT": "127.0.0.1:5000/ns/layers/a@sha256:" + "a" * 64}, labels={"k": "v"},
                       secrets={"netrc": "/run/x"}, epoch=315532800)
    argv = engine.build_argv(req)
    assert argv[:6] == ["podman", "build", "--format", "docker", "--layers=false", "--pull=missing"]
    assert argv[argv.index("--timestamp") + 1] == "315532800"
    assert "--tls-verify=false" in argv and "--secret" in argv and argv[-1] == str(tmp_path)
    remote = BuildRequest(context=tmp_path, dockerfile=tmp_path / "D", tag="t",
                          build_args={"PARENT": "registry.site.org/ns/a@sha256:" + "a" * 64}, labels={})
    assert "--tls-verify=false" not in engine.build_argv(remote) and "--timestamp" not in engine.build_argv(remote)
    # Docker's builtin BuildKit gets neither (it has no --timestamp; the Dockerfile's ARG still reaches pip)
    docker = Engine(cli="docker", mode="builtin", runner=fake([]))
    assert "--timestamp" not in docker.build_argv(req) and "--no-cache" not in docker.build_argv(req)


def test_podman_runs_checks_with_limits_and_gpus_through_cdi():
    calls: list = []
    engine = PodmanEngine(cli="podman", runner=fake(calls))
    engine.run_container("127.0.0.1:5000/a@sha256:" + "b" * 64, ["python", "-c", "1"], gpus=True)
    argv = calls[-1]
    assert "--ulimit" in argv and "nofile=20000:20000" in argv and "--device" in argv
    assert argv[argv.index("--device") + 1] == "nvidia.com/gpu=all" and "--gpus" not in argv
    assert "--network" in argv and argv[argv.index("--network") + 1] == "none"


def test_the_clean_docker_engine_skips_the_step_cache_and_the_clean_podman_one_has_its_own_store(tmp_path):
    calls: list = []
    docker = Engine(cli="docker", mode="builtin", runner=fake(calls))
    req = BuildRequest(context=tmp_path, dockerfile=tmp_path / "D", tag="t", build_args={}, labels={})
    with docker.clean(tmp_path) as clean:
        assert "--no-cache" in clean.build_argv(dataclass_replace(req, no_cache=clean.no_cache))
    podman = PodmanEngine(cli="podman", runner=fake(calls))
    with podman.clean(tmp_path) as clean:
        argv = clean.build_argv(req)
        assert argv[1] == "--root" and str(tmp_path) in argv[2] and argv[3] == "--runroot"
        clean.inspect("x")
        assert calls[-1][1] == "--root"
    assert calls[-1][-3:] == ["rmi", "--all", "--force"] and not any(tmp_path.iterdir())


def dataclass_replace(req, **kw):
    import dataclasses
    return dataclasses.replace(req, **kw)


REFUSED = [
    ("RUN <<EOF\necho a\nEOF", "heredoc"),
    ("COPY --link a /a", "COPY --link"),
    ("COPY --parents a /a", "COPY --parents"),
    ("ADD --checksum=sha256:" + "0" * 64 + " a /a", "ADD --checksum"),
    ("RUN --network=none true", "RUN --network"),
    ("RUN --security=insecure true", "RUN --security"),
    ("RUN --mount=type=cache,target=/c,sharing=private true", "sharing=private"),
    ("RUN --mount=type=secret,id=s,env=S true", "env="),
]
ACCEPTED = [
    "COPY --chmod=755 --chown=0:0 a /a", "COPY --from=build /a /a", "ADD --chown=1:1 a /a",
    "RUN --mount=type=cache,target=/c,sharing=locked true", "RUN --mount=type=secret,id=s,target=/x,mode=0400 true",
    "RUN --mount=type=bind,from=a,target=/a true", "RUN --mount=type=tmpfs,target=/t true", "RUN echo '<<EOF'",
]


@pytest.mark.parametrize("line, what", REFUSED)
def test_what_buildah_refuses_is_named(line, what):
    found = refusals(f"FROM x\n{line}\n")
    assert len(found) == 1 and found[0][0] == 2 and what in found[0][1], found


@pytest.mark.parametrize("line", ACCEPTED)
def test_what_buildah_builds_is_not(line):
    assert refusals(f"FROM x\n{line}\n") == []


def test_check_says_what_podman_cannot_build_and_docker_can(tmp_path):
    """A site kind whose fragment uses a heredoc: IB118 for podman, at check, naming the layer; nothing for docker."""
    import shutil
    import yaml
    kinds = tmp_path / "layers" / "heredoc"
    kinds.mkdir(parents=True)
    (kinds / "kind.yaml").write_text(yaml.safe_dump({"description": "a heredoc", "role": "layer", "params": {}}))
    (kinds / "fragment.j2").write_text("RUN <<EOF\necho hi > /hi\nEOF\n")
    data = shipped_data()
    data["layers"]["here"] = {"kind": "heredoc"}
    data["stacks"]["cpu-smoke"]["layers"] = data["stacks"]["cpu-smoke"]["layers"] + ["here"]
    path = write_stacks(tmp_path, data)
    ok = run_cli("check", "stack=cpu-smoke", "-f", path, "--engine", "docker")
    bad = run_cli("check", "stack=cpu-smoke", "-f", path, "--engine", "podman")
    if "IB118" not in bad.output and ok.code != 0:
        pytest.fail(f"the site kind did not load: {ok.output[-800:]}")
    assert "IB118" not in ok.output, ok.output
    assert bad.code != 0 and "IB118" in bad.output and "layers.here" in bad.output and "heredoc" in bad.output, bad.output
    assert "Traceback" not in bad.output
    shutil.rmtree(kinds)


def test_the_engine_is_chosen_by_flag_then_runner_then_site(monkeypatch):
    from builder.ship import engines
    seen = []
    monkeypatch.setattr(engines.PodmanEngine, "detect", classmethod(lambda cls, cli=None: seen.append("podman") or "P"))
    monkeypatch.setattr(engines.Engine, "detect", classmethod(lambda cls, cli=None: seen.append("docker") or "D"))
    monkeypatch.delenv("IMGBUILD_ENGINE", raising=False)
    assert engines.choose(None, None) == "D" and engines.choose(None, "podman") == "P"
    monkeypatch.setenv("IMGBUILD_ENGINE", "docker")
    assert engines.choose(None, "podman") == "D" and engines.choose("podman", "docker") == "P"
    monkeypatch.setenv("IMGBUILD_ENGINE", "containerd")
    with pytest.raises(Exception, match="'containerd' is not an engine imgbuild drives"):
        engines.choose(None, None)


def test_a_partial_rebuild_is_not_recorded(tmp_path):
    res = run_cli("verify", "--rebuild", "stack=cpu-smoke", "--layer", "smoke-train", "--record",
                  "-f", write_stacks(tmp_path, shipped_data()))
    assert res.code == 2 and "with --layer only part of it was rebuilt" in res.err, res.output
    res = run_cli("verify", "stack=cpu-smoke", "--record", "-f", write_stacks(tmp_path, shipped_data()))
    assert res.code == 2 and "go with --rebuild" in res.err, res.output


def test_the_clean_podman_store_keeps_its_runroot_within_podmans_50_characters(tmp_path):
    """Podman 4.3 refuses a --runroot over 50 characters ("the specified runroot is longer than 50 characters"):
    a scratch folder as deep as pytest's (or a site's IMGBUILD_SCRATCH) failed every rebuild. The store stays under
    scratch; the runroot moves to a short folder of its own, removed afterwards like the store."""
    deep = tmp_path / ("x" * 60)
    deep.mkdir()
    podman = PodmanEngine(cli="podman", runner=fake([]))
    for scratch in (deep, Path("/tmp")):
        with podman.clean(scratch) as clean:
            argv = clean.build_argv(BuildRequest(context=tmp_path, dockerfile=tmp_path / "D", tag="t", build_args={},
                                                 labels={}))
            runroot, root = argv[argv.index("--runroot") + 1], argv[argv.index("--root") + 1]
            assert len(runroot) <= 50 and root.startswith(str(scratch)), (runroot, root)
        assert not Path(runroot).exists() and not any(deep.iterdir())
