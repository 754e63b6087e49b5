"""Unit tests of the build side that need no engine: argv building, engine detection, the check
judges, release tags, git pin verification, registry references."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from builder.ship.checks import CheckResult, judge, parse_ds_report, request
from builder.ship.engine import BuildRequest, Engine, Result
from builder.errors import RegistryError, SourceError
from builder.load.kinds import CheckSpec
from builder.load.params import GitPin
from builder.ship.publish import PublishError, release_tags
from builder.ship.registry import Ref
from builder.ship.sources import MARKER, export, fetch

# The op table of a real ds_report (NGC 23.04, DeepSpeed 0.9.5; compat_facts.md 4.5), colours stripped.
DS_REPORT = """\
--------------------------------------------------
DeepSpeed C++/CUDA extension op report
--------------------------------------------------
JIT compiled ops requires ninja
ninja .................. [OKAY]
--------------------------------------------------
op name ................ installed .. compatible
--------------------------------------------------
 [WARNING]  async_io requires the dev libaio .so object and headers but these were not found.
async_io ............... [NO] ....... [NO]
fused_adam ............. [NO] ....... [OKAY]
cpu_adam ............... [YES] ...... [OKAY]
--------------------------------------------------
DeepSpeed general environment info:
torch version .................... 2.1.0a0+fe05266
"""


class FakeRunner:
    """Records argv and answers from a table of (argv prefix -> Result)."""

    def __init__(self, answers: dict):
        self.answers, self.calls = answers, []

    def __call__(self, argv, **kw):
        self.calls.append(list(argv))
        for prefix, result in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return result
        return Result(0, "", "")


def test_detects_buildx_then_builtin_then_refuses_a_new_cli_without_buildx():
    with_buildx = FakeRunner({("docker", "buildx", "version"): Result(0, "github.com/docker/buildx v0.17", "")})
    assert Engine.probe("docker", with_buildx)[0] == "buildx"
    old = FakeRunner({("docker", "buildx", "version"): Result(1, "", "not a command"),
                      ("docker", "version"): Result(0, "20.10.24+dfsg1\n", "")})
    assert Engine.probe("docker", old)[0] == "builtin"
    new = FakeRunner({("docker", "buildx", "version"): Result(1, "", "not a command"),
                      ("docker", "version"): Result(0, "28.2.2\n", "")})
    mode, why = Engine.probe("docker", new)
    assert mode is None and "no buildx" in why


def test_build_argv_passes_secrets_as_files_never_values(tmp_path, monkeypatch):
    """The host's secrets as the build hands them over (HostConf.secrets: an id per file; a value held
    only in memory is first written to a private file) reach argv as --secret id=ID,src=PATH: each
    path is there, the index URL with its token is not, and no secret becomes a build arg or label."""
    from builder.ship.hostconf import HostConf
    ca, netrc = tmp_path / "ca.pem", tmp_path / "netrc"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    netrc.write_text("machine files.example login user password pw\n")  # a file: never read here
    monkeypatch.setenv("IMGBUILD_CA_BUNDLE", str(ca))
    monkeypatch.setenv("IMGBUILD_NETRC", str(netrc))
    monkeypatch.setenv("IMGBUILD_PIP_INDEX_URL", "https://user:tok3n@index.example/simple")
    engine = Engine(cli="/usr/bin/docker", mode="builtin", runner=FakeRunner({}))
    with HostConf.from_env().secrets() as secrets:
        index_file = Path(secrets["pip-index-url"])
        assert index_file.read_text() == "https://user:tok3n@index.example/simple"
        req = BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tag="t:1",
                           build_args={"PARENT": "base@sha256:ab"}, labels={"io.imgbuild.key": "k"}, secrets=secrets)
        argv = engine.build_argv(req)
    assert argv[:2] == ["/usr/bin/docker", "build"]
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "--secret"]
    assert pairs == [f"id=ca-bundle,src={ca}", f"id=netrc,src={netrc}", f"id=pip-index-url,src={index_file}"]
    assert "tok3n" not in " ".join(argv) and "index.example" not in " ".join(argv)
    values = [argv[i + 1] for i, a in enumerate(argv) if a in ("--build-arg", "--label")]
    assert values == ["PARENT=base@sha256:ab", "io.imgbuild.key=k", "BUILDKIT_INLINE_CACHE=1"]
    buildx = Engine(cli="docker", mode="buildx", runner=FakeRunner({})).build_argv(req)
    assert buildx[:4] == ["docker", "buildx", "build", "--load"]


def test_the_build_network_comes_from_the_host_and_a_bad_one_is_refused(tmp_path, monkeypatch):
    """IMGBUILD_BUILD_NETWORK=host: a runner whose engine gives containers no NAT (the second engine of
    scripts/second-engine.sh) builds with --network host; unset, argv has no --network; a typo is a
    clear error naming the variable, not a docker failure an hour later."""
    from builder.ship.hostconf import HostConf
    from builder.errors import SpecError
    engine = Engine(cli="/usr/bin/docker", mode="builtin", runner=FakeRunner({}))

    def argv():
        req = BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tag="t:1", build_args={},
                           labels={}, network=HostConf.from_env().network)
        return engine.build_argv(req)
    monkeypatch.delenv("IMGBUILD_BUILD_NETWORK", raising=False)
    assert "--network" not in argv()
    monkeypatch.setenv("IMGBUILD_BUILD_NETWORK", "host")
    got = argv()
    assert got[got.index("--network") + 1] == "host" and got[-1] == str(tmp_path)
    monkeypatch.setenv("IMGBUILD_BUILD_NETWORK", "hots")
    with pytest.raises(SpecError) as err:
        argv()
    assert "IMGBUILD_BUILD_NETWORK='hots'" in err.value.message and "host" in err.value.hint


def test_build_argv_passes_every_arch_list_spelling(tmp_path):
    """A layer that compiles CUDA gets the stack's arch list in every spelling the build tools read
    (TORCH_CUDA_ARCH_LIST for torch extensions, DeepSpeed and Apex, NVTE_CUDA_ARCHS for Transformer
    Engine, CMAKE_CUDA_ARCHITECTURES for CMake), from the plan to argv, each value unchanged."""
    import yaml

    from builder.plan.keys import make_plan
    from builder.load.spec import load_spec
    root = Path(__file__).resolve().parent.parent
    data = yaml.safe_load((root / "stacks.yaml").read_text())
    data["stacks"]["h100-megatron"]["gpus"] = ["H100", "B200"]
    (tmp_path / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    plan = make_plan(load_spec(tmp_path / "stacks.yaml", root=root), ["h100-megatron"])
    node = next(n for n in plan.chain("h100-megatron") if n.name == "ds-0.19.5-hopper")
    spellings = {"TORCH_CUDA_ARCH_LIST": "9.0;10.0", "NVTE_CUDA_ARCHS": "90;100", "CMAKE_CUDA_ARCHITECTURES": "90;100"}
    assert node.build_args == spellings
    req = BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tag="t:1",
                       build_args={"PARENT": "base@sha256:ab", **node.build_args}, labels={})
    argv = Engine(cli="/usr/bin/docker", mode="builtin", runner=FakeRunner({})).build_argv(req)
    args = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    for name, value in spellings.items():
        assert f"{name}={value}" in args, (name, argv)
    # sorted (deterministic), nothing else added but the inline cache
    assert args == ["CMAKE_CUDA_ARCHITECTURES=90;100", "NVTE_CUDA_ARCHS=90;100", "PARENT=base@sha256:ab",
                    "TORCH_CUDA_ARCH_LIST=9.0;10.0", "BUILDKIT_INLINE_CACHE=1"]


def test_ds_report_table_is_parsed():
    ops = parse_ds_report(DS_REPORT)
    assert ops == {"async_io": {"installed": False, "compatible": False},
                   "fused_adam": {"installed": False, "compatible": True},
                   "cpu_adam": {"installed": True, "compatible": True}}


def _facts(**over) -> dict:
    facts = {"dists": {"deepspeed": "0.19.8", "torch": "2.13.0+cpu"}, "imports": {"deepspeed": {"ok": True, "out": ""}},
             "env": {"NCCL_IB_DISABLE": "0"}, "snippets": {}, "commands": {},
             "files": {"/etc/imgbuild/constraints.txt": "torch==2.13.0+cpu\n", "/opt/p/" + MARKER: "a" * 40 + " repo\n"},
             "ds_report": {"rc": 0, "out": DS_REPORT}, "pip_check": {"rc": 0, "out": "No broken requirements found."}}
    facts.update(over)
    return facts


def check(cid, kind, gpu=False, **args) -> CheckSpec:
    return CheckSpec(id=cid, check=kind, gpu=gpu, args=tuple(sorted(args.items())))


@pytest.mark.parametrize("spec, facts, status, words", [
    (check("a", "ds-report", installed=["cpu_adam"], compatible=[]), _facts(), "passed", "cpu_adam YES/OKAY"),
    (check("b", "ds-report", installed=["cpu_adam"], compatible=["async_io"]), _facts(), "failed",
     "async_io must be compatible"),
    (check("c", "ds-report", installed=["fused_adam"], compatible=[]), _facts(), "failed", "fused_adam must be prebuilt"),
    (check("d", "dist-version", dist="deepspeed", equals="0.19.8"), _facts(), "passed", "deepspeed 0.19.8"),
    (check("e", "dist-version", dist="deepspeed", equals="0.17.6"), _facts(), "failed", "the spec pins 0.17.6"),
    (check("f", "torch-unchanged"), _facts(), "passed", "as recorded"),
    (check("g", "torch-unchanged"), _facts(dists={"torch": "2.14.1"}), "failed", "something replaced it"),
    (check("h", "env", expected=[["NCCL_IB_DISABLE", "0"]]), _facts(), "passed", "1 variables"),
    (check("i", "env", expected=[["NCCL_IB_DISABLE", "1"]]), _facts(), "failed", "want '1'"),
    (check("j", "source-commit", path="/opt/p", commit="a" * 40), _facts(), "passed", "commit aaaa"),
    (check("k", "source-commit", path="/opt/p", commit="b" * 40), _facts(), "failed", "the spec pins bbbb"),
    (check("l", "import", module="deepspeed"), _facts(), "passed", "import deepspeed ok"),
    (check("m", "import", module="apex"), _facts(imports={"apex": {"ok": False, "out": "No module named 'apex'"}}),
     "failed", "No module named"),
    (check("n", "pip-check"), _facts(pip_check={"rc": 1, "out": "x 1.0 has requirement y>2"}), "failed", "requirement"),
    (check("o", "python", code="print(1)", when_op="fused_adam", ops=["cpu_adam"]), _facts(), "skipped", "not prebuilt"),
    (check("p", "python", gpu=True, code="import torch"), _facts(), "skipped", "needs a GPU"),
])
def test_judges(spec, facts, status, words):
    [result] = judge((spec,), facts, gpu=False)
    assert result.status == status, result
    assert words in result.detail


def test_probe_request_leaves_out_gpu_checks_without_a_gpu():
    specs = (check("x", "python", gpu=True, code="import torch"), check("y", "ds-report"), check("z", "import", module="m"))
    req = request(specs, gpu=False)
    assert req["snippets"] == {} and req["ds_report"] and req["imports"] == ["m"]
    assert request(specs, gpu=True)["snippets"] == {"x": "import torch"}


def _fake_site(root: Path, ds_report_rc: int, ds_init_ok: bool = True) -> Path:
    """A site-packages with a stand-in torch and deepspeed (dist-info included, so the probe sees them
    installed) whose every import appends a line to imports.log: how many interpreters imported each."""
    site = root / "site"
    log = root / "imports.log"
    for name in ("torch", "deepspeed"):
        (site / name).mkdir(parents=True)
        (site / f"{name}-1.0.dist-info").mkdir()
        (site / f"{name}-1.0.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        init = f"open({str(log)!r}, 'a').write('{name}\\n')\n"
        if name == "torch":
            init += ("import types\n__version__ = '1.0'\nversion = types.SimpleNamespace(cuda=None)\n"
                     "cuda = types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0)\n")
        elif not ds_init_ok:
            init += "raise ImportError('deepspeed is broken here')\n"
        (site / name / "__init__.py").write_text(init)
    (site / "deepspeed" / "env_report.py").write_text(f"print('op report')\nraise SystemExit({ds_report_rc})\n")
    return site


def _run_probe(site: Path, req: dict) -> dict:
    import json
    import os
    import sys
    from builder.ship.checks import PROBE
    env = dict(os.environ, PYTHONPATH=str(site), PIP_CONSTRAINT="/nonexistent")
    proc = subprocess.run([sys.executable, "-S", str(PROBE)], input=json.dumps(req), capture_output=True, text=True,
                          env=env, cwd=site.parent, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_an_import_a_fresh_interpreter_already_made_is_not_made_again(tmp_path):
    """torch's facts import torch and ds_report imports deepspeed, each in a fresh interpreter of the image:
    the import checks take those (seconds saved in every layer's checks) and say whose interpreter it was."""
    site = _fake_site(tmp_path, ds_report_rc=0)
    facts = _run_probe(site, {"imports": ["deepspeed", "torch"], "ds_report": True})
    assert sorted((tmp_path / "imports.log").read_text().split()) == ["deepspeed", "torch"]   # once each, by the probes that prove them
    assert facts["torch"]["version"] == "1.0" and facts["ds_report"]["rc"] == 0
    assert facts["imports"]["torch"] == {"ok": True, "out": "", "by": "the torch facts"}
    assert facts["imports"]["deepspeed"]["by"] == "ds_report"
    results = judge((check("t", "import", module="torch"), check("d", "import", module="deepspeed")), facts, gpu=False)
    assert [r.detail for r in results] == ["import torch ok (imported by the torch facts, a fresh interpreter)",
                                           "import deepspeed ok (imported by ds_report, a fresh interpreter)"]


@pytest.mark.parametrize("ds_report_rc, ds_init_ok", [(1, True), (0, False)])
def test_an_import_nothing_proved_is_made_in_its_own_interpreter(tmp_path, ds_report_rc, ds_init_ok):
    """ds_report failing proves nothing of the import: deepspeed is imported on its own and judged by that."""
    site = _fake_site(tmp_path, ds_report_rc=ds_report_rc, ds_init_ok=ds_init_ok)
    facts = _run_probe(site, {"imports": ["deepspeed"], "ds_report": True})
    assert (tmp_path / "imports.log").read_text().split().count("deepspeed") == 2
    assert "by" not in facts["imports"]["deepspeed"] and facts["imports"]["deepspeed"]["ok"] is ds_init_ok
    [result] = judge((check("d", "import", module="deepspeed"),), facts, gpu=False)
    assert result.status == ("passed" if ds_init_ok else "failed"), result
    if not ds_init_ok:
        assert "deepspeed is broken here" in result.detail


def test_release_tags_from_measured_versions():
    tags = release_tags(["{stack}", "{stack}-{date}", "{stack}-torch{torch}-ds{deepspeed}"], "cpu-smoke",
                        {"torch": "2.13.0+cpu", "deepspeed": "0.19.8"}, "2026.11.29")
    assert tags == ["cpu-smoke", "cpu-smoke-2026.11.29", "cpu-smoke-torch2.13.0-cpu-ds0.19.8"]
    with pytest.raises(PublishError, match="needs cuda"):
        release_tags(["{stack}-cuda{cuda}"], "cpu-smoke", {"torch": "2.13.0+cpu"}, "2026.11.29")


def test_registry_refs():
    ref = Ref.parse("127.0.0.1:5000/imgbuild/layers/x:abc")
    assert (ref.registry, ref.repo, ref.tag) == ("127.0.0.1:5000", "imgbuild/layers/x", "abc")
    ref = Ref.parse("nvcr.io/nvidia/pytorch:25.09-py3@sha256:" + "a" * 64)
    assert ref.reference == "sha256:" + "a" * 64
    with pytest.raises(RegistryError):
        Ref.parse("ubuntu:22.04")


@pytest.fixture
def repo(tmp_path, monkeypatch) -> tuple[str, str, str]:
    """A real git repository with a commit and an annotated tag; the cache goes to tmp."""
    monkeypatch.setenv("IMGBUILD_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "one"], ["tag", "-a", "v1", "-m", "v1"]):
        subprocess.run(["git", *cmd], cwd=src, env=env, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    tag = subprocess.run(["git", "rev-parse", "v1"], cwd=src, capture_output=True, text=True).stdout.strip()
    return f"file://{src}", commit, tag


def test_git_pin_is_fetched_verified_and_exported(repo, tmp_path):
    url, commit, _ = repo
    export(GitPin(url, commit), tmp_path / "out")
    assert (tmp_path / "out" / "train.py").read_text() == "print('hi')\n"
    assert not (tmp_path / "out" / ".git").exists()
    assert (tmp_path / "out" / MARKER).read_text().split()[0] == commit


def test_many_exports_of_one_pin_at_once_share_the_cache(repo, tmp_path):
    """`build --jobs N` exports one repository for several layers at once (found building two CUDA
    stacks: the cache repository was created twice and one rename failed). Five rounds of eight."""
    from concurrent.futures import ThreadPoolExecutor
    url, commit, _ = repo
    for round_ in range(5):
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: export(GitPin(url, commit), tmp_path / f"out-{round_}-{i}"), range(8)))
        for i in range(8):
            assert (tmp_path / f"out-{round_}-{i}" / MARKER).read_text().split()[0] == commit
        assert [p.name for p in (tmp_path / "cache" / "git").iterdir() if p.suffix == ".git"] != []
        assert not [p for p in (tmp_path / "cache" / "git").iterdir() if p.is_dir() and p.suffix != ".git"]


def test_a_tag_the_remote_moved_does_not_stop_the_fetch_of_a_new_pin(repo, tmp_path):
    """A mirror re-tagged since the last fetch (found when tiny-cuda-ext's v1 was remade): git refuses
    a fetch that would clobber a cached tag, and imgbuild said only "cannot fetch ...: ?"."""
    url, first, _ = repo
    fetch(GitPin(url, first))
    src = url[len("file://"):]
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    (Path(src) / "train.py").write_text("print('two')\n")
    for cmd in (["commit", "-q", "-am", "two"], ["tag", "-f", "-a", "v1", "-m", "v1 again"]):
        subprocess.run(["git", *cmd], cwd=src, env=env, check=True, capture_output=True)
    second = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    export(GitPin(url, second), tmp_path / "out")
    assert (tmp_path / "out" / "train.py").read_text() == "print('two')\n"


def test_a_tag_object_is_not_a_commit(repo):
    url, commit, tag = repo
    assert tag != commit
    with pytest.raises(SourceError, match=f"tag object, not a commit; it points to commit {commit}"):
        fetch(GitPin(url, tag))


def test_a_missing_commit_is_refused(repo):
    url, _, _ = repo
    with pytest.raises(SourceError, match="has no object"):
        fetch(GitPin(url, "0123456789" * 4))
    with pytest.raises(SourceError, match="cannot fetch"):
        fetch(GitPin("file:///nonexistent/repo.git", "0123456789" * 4))


def test_check_results_are_data():
    assert CheckResult("a", "skipped", "x").ok and not CheckResult("a", "failed", "x").ok


def test_an_index_url_secret_lives_in_a_private_file_only_during_the_build(monkeypatch, tmp_path):
    from builder.ship.hostconf import HostConf
    monkeypatch.setenv("IMGBUILD_PIP_INDEX_URL", "https://user:tok3n@index.example/simple")
    monkeypatch.setenv("IMGBUILD_WHEELHOUSE", str(tmp_path))
    conf = HostConf.from_env()
    assert conf.wheelhouse == tmp_path
    with conf.secrets() as secrets:
        path = Path(secrets["pip-index-url"])
        assert path.read_text() == "https://user:tok3n@index.example/simple"
        assert path.stat().st_mode & 0o077 == 0
    assert not path.exists()
    assert "tok3n" not in repr(secrets)


def test_every_check_type_a_kind_may_name_has_a_judge_and_no_judge_is_unreachable():
    """kinds.CHECK_TYPES (checked when kind.yaml loads) and the judges (checks/__init__) are two tables;
    this keeps them one: a type added to one side only fails here, not after an hour of building."""
    from builder.ship.checks import JUDGES, SNIPPETS
    from builder.load.kinds import CHECK_TYPES
    assert set(CHECK_TYPES) == set(JUDGES) | set(SNIPPETS)
    assert not set(JUDGES) & set(SNIPPETS)


def test_lock_reads_the_one_probe_output_as_base_facts():
    """lock, the checks and the GPU node check share builder/ship/checks/probe.py; lock maps its output to
    base facts: None means measured and not installed, a missing name was not measured."""
    from builder.ship.measure import base_facts
    from builder.load.spec import load_spec
    kinds = load_spec(Path(__file__).resolve().parent.parent / "stacks.yaml").kinds.values()
    assert base_facts({"os": "debian-12"}, kinds) == {"os": "debian-12"}          # no Python: all else unknown
    cuda = {"python": "3.12.3", "os": "ubuntu-24.04", "pip_constraint": "torch==2.9.0a0 (/etc/pip/constraint.txt)",
            "toolkit": {"nvcc": "13.0.88", "cuda": "13.0.1"},
            "dists": {"torch": "2.9.0a0+50eac811a6.nv25.9", "transformer-engine": "2.7.0", "numpy": "1.26.4",
                      "pydantic": "2.11.7"},
            "torch": {"version": "2.9.0a0+50eac811a6.nv25.9", "cuda": "13.0", "arch_list": ["sm_80", "sm_90",
                      "compute_90"], "cudnn": "9.13.0", "nccl": "2.27.7"}}
    facts = base_facts(cuda, kinds)
    assert facts["transformer_engine"] == "2.7.0" and facts["deepspeed"] is None and facts["apex"] is None
    assert facts["torch_archs"] == "sm_80;sm_90;compute_90" and facts["cudnn"] == "9.13.0"
    assert facts["nvcc"] == "13.0.88" and facts["cuda"] == "13.0.1" and facts["torch_cuda"] == "13.0"
    cpu = dict(cuda, toolkit={}, torch={"version": "2.13.0+cpu", "cuda": None, "arch_list": []},
               dists={"torch": "2.13.0+cpu"})
    facts = base_facts(cpu, kinds)
    assert facts["torch_cuda"] is None and "cudnn" not in facts and "cuda" not in facts and "nvcc" not in facts
