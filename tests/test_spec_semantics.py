"""What a spec means beyond its schema: where CUDA comes from for op builds, version comparisons,
project installs, Apex extensions, waivers, --require-locked and rule ids. Each test was written before
its fix (first filed as issue 11, "Defects found on the way"), seen failing against the code before it,
and its docstring says what it guards.

Defect 1 (a wildcard pin crashed `check` with exit 70) is guarded at the CLI level by
tests/test_hostile_values.py::test_hostile_value_is_refused_by_every_command[pip-wildcard-minor-*]
(check, render and plan: exit 2, file:line, key path and reason).
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from conftest import run_cli, write_stacks
from test_preflight import LOCK
from builder.load.spec import load_spec

SITE = {"registry": "127.0.0.1:5000", "namespace": "imgbuild", "driver_floor": "580.65.06"}
GIT = {"repo": "https://github.com/NVIDIA/apex.git", "commit": "0123456789abcdef0123456789abcdef01234567"}

BASE = {
    "version": 1,
    "site": SITE,
    "bases": {
        # CUDA known only from the catalog (NGC 25.09 is in it): nothing declared.
        "ngc-cat": {"image": "nvcr.io/nvidia/pytorch:25.09-py3", "family": "ngc-pytorch"},
        # CUDA known only from the lock file (an image the catalog does not know, nothing declared).
        "ngc-lock": {"image": "registry.example/pt:custom", "family": "ngc-pytorch",
                     "provides": {"torch": "2.9.0a0+50eac811a6", "python": "3.12.3"}},
        # CUDA declared.
        "ngc-decl": {"image": "registry.example/pt:declared", "family": "ngc-pytorch",
                     "provides": {"torch": "2.9.0a0+50eac811a6", "python": "3.12.3", "cuda": "13.0.1"}},
        # Issue 21: NGC images whose CUDA nobody states (a month the catalog lacks; a site's own build):
        # CUDA of an unknown version, never none.
        "ngc-2212": {"image": "nvcr.io/nvidia/pytorch:22.12-py3", "family": "ngc-pytorch"},
        "ngc-custom": {"image": "registry.example/pt:site-build", "family": "ngc-pytorch"},
        "deb": {"image": "debian:bookworm", "family": "debian", "provides": {"python": "3.11.2"}},
    },
    "layers": {
        "site": {"kind": "ngc-pytorch"},
        "ds": {"kind": "deepspeed", "params": {"version": "0.19.5", "ops": ["fused_adam"]}},
    },
    "stacks": {},
}


def write_spec(tmp_path, stacks: dict, extra: dict | None = None, lock: tuple | None = None, sub: str = "site"):
    data = copy.deepcopy(BASE)
    for section, items in (extra or {}).items():
        data.setdefault(section, {}).update(copy.deepcopy(items))
    data["stacks"] = copy.deepcopy(stacks)
    folder = tmp_path / sub
    file = write_stacks(folder, data)
    if lock:
        base, facts = lock
        (folder / "stacks.lock.yaml").write_text(LOCK.format(
            base=base, image=data["bases"][base]["image"], digest="b" * 64,
            facts=yaml.safe_dump(facts, default_flow_style=True).strip()))
    return file


# -- defect 2: one answer to "does this base have CUDA" ------------------------------------------------

@pytest.mark.parametrize("base,lock", [("ngc-cat", None), ("ngc-lock", ("ngc-lock", {"cuda": "13.0.1", "nvcc": "13.0.88"})),
                                       ("ngc-decl", None), ("ngc-2212", None), ("ngc-custom", None)],
                         ids=["catalog", "lock", "declared", "ngc-month-not-in-catalog", "ngc-family-unknown-image"])
def test_deepspeed_ops_get_the_arch_list_whatever_source_knows_the_cuda(tmp_path, base, lock):
    """Guards issue 11 defect 2: DeepSpeed CUDA ops rendered without TORCH_CUDA_ARCH_LIST when the base's
    CUDA came from the catalog or the lock file instead of `provides`; lint (IB104) then demanded an arch
    list that no stacks.yaml value could supply. Render, plan and check must all see the base's CUDA."""
    file = write_spec(tmp_path, {"s": {"base": base, "layers": ["site", "ds"], "gpus": ["H100"]}}, lock=lock)
    spec = load_spec(file)
    assert spec.stack("s").base.has_cuda
    res = run_cli("render", "stack=s", "-f", file)
    assert res.code == 0, res.output
    assert 'ARG TORCH_CUDA_ARCH_LIST="9.0"' in res.out
    assert "DS_BUILD_FUSED_ADAM=1" in res.out
    res = run_cli("check", "stack=s", "-f", file)
    assert "IB104" not in res.output, res.output


@pytest.mark.parametrize("base,lock", [("ngc-cat", None), ("ngc-lock", ("ngc-lock", {"cuda": "13.0.1"})),
                                       ("ngc-decl", None)], ids=["catalog", "lock", "declared"])
def test_cuda_ops_without_gpus_are_refused_at_load(tmp_path, base, lock):
    """Guards issue 11 defect 2: a stack that compiles CUDA (DeepSpeed fused_adam on a CUDA base) and names
    no `gpus` loaded without error when the base's CUDA came from the catalog or the lock. It must be
    refused at load, exit 2, naming the file, the key stacks.NAME.gpus and the reason."""
    file = write_spec(tmp_path, {"nogpu": {"base": base, "layers": ["site", "ds"]}}, lock=lock)
    for args in (("check",), ("render", "--all"), ("plan", "--all", "--offline")):
        res = run_cli(*args, "-f", file)
        assert res.code == 2, res.output
        assert f"{file}:" in res.err and "stacks.nogpu.gpus" in res.err, res.err
        assert "compiles CUDA code but the stack names no target GPU" in res.err, res.err


def test_measured_absence_of_cuda_wins_over_the_declared_one(tmp_path):
    """Guards issue 11 defect 2: the answer follows the one order of trust of preflight's facts (measured >
    declared > catalog): a lock that measured no CUDA toolkit (cuda: null) means no CUDA ops are compiled,
    and render and preflight agree on it."""
    from builder.rules.facts import resolve
    from builder.core.lockfile import load_lock
    file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site", "ds"]}},
                      lock=("ngc-decl", {"cuda": None}))
    spec = load_spec(file)
    stack = spec.stack("s")
    cuda = resolve(spec, stack, load_lock(file)).get("cuda")
    assert cuda.origin == "measured" and cuda.value is None
    assert not stack.base.has_cuda and not stack.compiles_cuda(stack.chain[1])
    res = run_cli("render", "stack=s", "-f", file)
    assert res.code == 0, res.output
    assert "TORCH_CUDA_ARCH_LIST" not in res.out and "DS_BUILD_FUSED_ADAM=1" in res.out


def test_a_stale_lock_entry_does_not_decide_cuda(tmp_path):
    """Guards issue 11 defect 2: a lock entry probed from another image (IB091: ignored by preflight) is
    ignored for the CUDA answer too, so render and preflight still agree. (An NGC base still has CUDA,
    of a version nobody knows: issue 21.)"""
    file = write_spec(tmp_path, {"s": {"base": "ngc-lock", "layers": ["site", "ds"], "gpus": ["H100"]}},
                      lock=("ngc-lock", {"cuda": "13.0.1"}))
    lock = file.with_name("stacks.lock.yaml")
    lock.write_text(lock.read_text().replace("registry.example/pt:custom", "registry.example/pt:other"))
    assert load_spec(file).stack("s").base.cuda == ("unknown", "family")


# -- defect 5: versions compared as versions (IB090) -------------------------------------------------------

def test_declared_version_without_local_label_agrees_with_the_catalogs(tmp_path):
    """Guards issue 11 defect 5: `torch: 2.1.0a0` declared for NGC 23.04 disagreed (IB090) with the catalog's
    2.1.0a0+fe05266f, compared as strings. Equal public versions agree when one has no local label."""
    from builder.rules.preflight import preflight
    extra = {"bases": {"ngc2304": {"image": "nvcr.io/nvidia/pytorch:23.04-py3", "family": "ngc-pytorch",
                                   "provides": {"torch": "2.1.0a0", "cuda": "12.1", "python": "3.8"}}}}
    file = write_spec(tmp_path, {"s": {"base": "ngc2304", "layers": ["site"]}}, extra)
    spec = load_spec(file)
    found = preflight(spec, [spec.stacks["s"]])
    assert not [f for f in found if f.rule == "IB090"], [f.render() for f in found]


@pytest.mark.parametrize("a,b,agree", [
    ("2.1.0a0", "2.1.0a0+fe05266f", True),            # no local label: any build of the same public version
    ("2.1.0a0+fe05266f", "2.1.0a0+fe05266f", True),
    ("2.1.0a0+FE05266F", "2.1.0a0+fe05266f", True),   # PEP 440: local labels compare case-insensitively
    ("2.1a0", "2.1.0a0+fe05266f", True),              # the same public version spelled shorter
    ("3.12", "3.12.3", True),                         # a final release spelled less precisely (as before)
    ("13.0.1", "13.0.1.006", True),
    ("2.1.0a0+abc", "2.1.0a0+fe05266f", False),       # two different builds
    ("2.9.0", "2.9.0a0+50eac811a6", False),           # a release is not its pre-release
    ("2.1.0a0", "2.1.0a1+fe05266f", False),
    ("2.9.0a0", "2.9.1a0", False),                    # precision applies to final releases only
    ("3.12", "3.11.2", False),
])
def test_ib090_compares_versions_not_strings(a, b, agree):
    """Guards issue 11 defect 5: the rule of agreement between two origins of a base fact (IB090)."""
    from packaging.version import Version
    from builder.rules.facts import agree as _agree
    assert _agree(Version(a), Version(b)) is agree
    assert _agree(Version(b), Version(a)) is agree


# -- defect 4: the project layer's install modes, packages with their dependencies, extras --------------------

PROJECT = {"kind": "project", "params": {"source": {"repo": "https://example.com/p.git", "commit": "a" * 40},
                                         "packages": ["einops==0.8.1", "numpy==1.26.4"]}}


def _pip_lines(tmp_path, sub: str, **params) -> list[str]:
    proj = copy.deepcopy(PROJECT)
    proj["params"].update(params)
    file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site"], "project": "p"}},
                      {"projects": {"p": proj}}, sub=sub)
    res = run_cli("render", "stack=s", "-f", file)
    assert res.code == 0, res.output
    dockerfile = res.out.split("# ==== s / 01 p")[1]
    return [line.strip(" \\&") for line in dockerfile.splitlines() if "pip install" in line]


def test_project_packages_install_with_their_dependencies(tmp_path):
    """Guards issue 11 defect 4: with `install: pip-no-deps` the project's `packages` were installed with
    --no-deps too (one pip command). Packages get their own pip command, with dependencies; only the project
    itself is installed with --no-deps."""
    lines = _pip_lines(tmp_path, "nodeps", install="pip-no-deps")
    assert lines == ["python -m pip install --progress-bar off einops==0.8.1 numpy==1.26.4",
                     "python -m pip install --progress-bar off --no-deps /opt/project"], lines
    assert _pip_lines(tmp_path, "pip", install="pip") == [
        "python -m pip install --progress-bar off einops==0.8.1 numpy==1.26.4",
        "python -m pip install --progress-bar off /opt/project"]
    assert _pip_lines(tmp_path, "pypath", install="pythonpath") == [
        "python -m pip install --progress-bar off einops==0.8.1 numpy==1.26.4"]


def test_project_editable_install(tmp_path):
    """Guards issue 11 defect 4 (addition): `install: pip-editable` installs the project with pip install -e
    (with its dependencies), from the pinned source left in place."""
    lines = _pip_lines(tmp_path, "edit", install="pip-editable", packages=[])
    assert lines == ["python -m pip install --progress-bar off -e /opt/project"], lines


# -- defect 3: apex extensions turned on for every apex, and verified in the image ---------------------------

APEX = {"kind": "apex", "params": {"source": GIT}}


def _apex_run(tmp_path, sub: str, **params) -> str:
    layer = copy.deepcopy(APEX)
    layer["params"].update(params)
    file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site", "apex"], "gpus": ["H100"]}},
                      {"layers": {"apex": layer}}, sub=sub)
    res = run_cli("render", "stack=s", "-f", file)
    assert res.code == 0, res.output
    body = res.out.split("# ==== s / 01 apex")[1]
    return next(line for line in body.split("\nRUN ")[1:] if "pip install" in line)


def test_apex_extensions_are_asked_for_in_both_ways(tmp_path):
    """Guards issue 11 defect 3: the apex kind turned its extensions on with APEX_CPP_EXT/APEX_CUDA_EXT only,
    which apex reads since NVIDIA/apex PR #1910 (mid-2025); an older pin built silently without them. The
    flags must also reach setup.py's argv (--config-settings "--build-option=..."), which every apex reads."""
    run = _apex_run(tmp_path, "both")
    assert "APEX_CPP_EXT=1 APEX_CUDA_EXT=1" in run
    assert "--config-settings '--build-option=--cpp_ext --cuda_ext'" in run, run
    run = _apex_run(tmp_path, "cuda-only", cpp_ext=False, contrib=["FAST_LAYER_NORM", "DISTRIBUTED_ADAM"])
    assert "APEX_CPP_EXT=0 APEX_CUDA_EXT=1" in run and "APEX_FAST_LAYER_NORM=1" in run
    assert "'--build-option=--cuda_ext --fast_layer_norm --distributed_adam'" in run, run
    run = _apex_run(tmp_path, "none", cpp_ext=False, cuda_ext=False)
    assert "--build-option" not in run, run


def test_apex_contrib_names_are_apex_names(tmp_path):
    """Guards issue 11 defect 3: a contrib extension apex does not know (a typo) was ignored by apex and
    built nothing; it is refused at load, with the allowed names."""
    layer = copy.deepcopy(APEX)
    layer["params"]["contrib"] = ["FAST_LAYERNORM"]
    file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site", "apex"], "gpus": ["H100"]}},
                      {"layers": {"apex": layer}})
    res = run_cli("check", "-f", file)
    assert res.code == 2 and "layers.apex.params.contrib[0]" in res.err and "FAST_LAYER_NORM" in res.err, res.err


def test_apex_checks_import_the_extensions_it_asked_for(tmp_path):
    """Guards issue 11 defect 3: the image must prove the extensions exist: apex_C when cpp_ext is on,
    amp_C and fused_layer_norm_cuda when cuda_ext is on (each check turned off with its parameter)."""
    from builder.load.kinds import load_kind
    from conftest import REPO
    kind = load_kind(REPO / "layers" / "apex")
    code = {c.id: dict(c.args) for c in kind.checks if c.check == "python"}
    cpp = next(a for a in code.values() if "import apex_C" in a["code"])
    cuda = next(a for a in code.values() if "import amp_C" in a["code"])
    assert cpp["when"] == "param:cpp_ext" and cuda["when"] == "param:cuda_ext"
    assert "fused_layer_norm_cuda" in cuda["code"]
    assert not [c for c in kind.checks if c.check == "import" and dict(c.args)["module"] == "fused_layer_norm_cuda"]


# -- defect 6: per-stack waivers, --strict, unknowns and --require-locked ------------------------------------

# IB075, a warning: an NCCL wheel beside the NGC torch, which uses the container's NCCL.
NCCL = {"nccl": {"kind": "pip", "params": {"packages": ["nvidia-nccl-cu13==2.28.9"]}}}


def _waived_spec(tmp_path, waivers, sub="w", **stack):
    stacks = {"s": {"base": "ngc-decl", "layers": ["site", "nccl"], "gpus": ["H100"], **stack}}
    if waivers is not None:
        stacks["s"]["waivers"] = waivers
    return write_spec(tmp_path, stacks, {"layers": NCCL}, sub=sub)


def test_a_waived_warning_does_not_fail_strict_and_is_shown(tmp_path):
    """Guards issue 11 defect 6: --strict could not accept a known, understood warning for one stack. A
    waiver (rule + reason) in stacks.NAME.waivers lets --strict pass and is shown in the text and JSON
    reports as "waived: IBxxx ... (reason)"."""
    plain = _waived_spec(tmp_path, None, sub="plain")
    assert run_cli("check", "--strict", "-f", plain).code == 3
    file = _waived_spec(tmp_path, [{"rule": "IB075", "reason": "the job sets NCCL_LIB; tested by us"}])
    res = run_cli("check", "--strict", "-f", file)
    assert res.code == 0, res.output
    assert "waived: IB075 [s]" in res.out and "(the job sets NCCL_LIB; tested by us)" in res.out, res.out
    assert "1 waived" in res.out
    res = run_cli("check", "--strict", "--json", "-f", file)
    assert res.code == 0, res.output
    found = json.loads(res.out)["findings"]
    assert [(f["rule"], f["waived"]) for f in found] == [("IB075", "the job sets NCCL_LIB; tested by us")]


def test_waivers_are_inherited_through_extends(tmp_path):
    """Guards issue 11 defect 6: a stack that extends a waiving stack inherits its waivers (and adds its own)."""
    stacks = {"s": {"base": "ngc-decl", "layers": ["site", "nccl"], "gpus": ["H100"],
                    "waivers": [{"rule": "IB075", "reason": "classifiers only"}]},
              "t": {"extends": "s", "description": "the same, described"}}
    file = write_spec(tmp_path, stacks, {"layers": NCCL})
    res = run_cli("check", "--strict", "-f", file)
    assert res.code == 0, res.output
    assert "waived: IB075 [t]" in res.out and "waived: IB075 [s]" in res.out


@pytest.mark.parametrize("waiver,key,reason", [
    ({"rule": "IB999", "reason": "x is fine"}, "stacks.s.waivers[0].rule", "not a known rule"),
    ({"rule": "IB075"}, "stacks.s.waivers[0]", "missing required key 'reason'"),
    ({"rule": "IB075", "reason": "  "}, "stacks.s.waivers[0].reason", "say why"),
    ({"rule": "IB075", "reason": "ok", "until": "2027"}, "stacks.s.waivers[0].until", "unknown key 'until'"),
    ("IB075", "stacks.s.waivers[0]", "expected a mapping"),
])
def test_bad_waivers_are_refused_at_load(tmp_path, waiver, key, reason):
    """Guards issue 11 defect 6: a waiver names a known rule id and gives a non-empty reason."""
    file = _waived_spec(tmp_path, [waiver])
    res = run_cli("check", "-f", file)
    assert res.code == 2, res.output
    assert f"{key}:" in res.err and reason in res.err, res.err


def test_an_unused_waiver_is_reported(tmp_path):
    """Guards issue 11 defect 6: a waiver that waives nothing is itself a warning (IB095), so waivers do not
    rot: --strict fails on it."""
    file = _waived_spec(tmp_path, [{"rule": "IB075", "reason": "classifiers only"},
                                   {"rule": "IB022", "reason": "no FP8 here"}])
    res = run_cli("check", "-f", file)
    assert res.code == 0, res.output
    assert "warning IB095 [s]" in res.out and "stacks.s.waivers[1]" in res.out, res.out
    assert run_cli("check", "--strict", "-f", file).code == 3


def test_errors_cannot_be_waived(tmp_path):
    """Guards issue 11 defect 6 (decision): an error is a stack that cannot work; a waiver does not cover it
    (the stack still fails, and the waiver is reported as waiving nothing)."""
    stacks = {"s": {"base": "ngc-decl", "layers": ["site"], "gpus": ["V100"],     # IB011: an error
                    "waivers": [{"rule": "IB011", "reason": "we know"}]}}
    file = write_spec(tmp_path, stacks)
    res = run_cli("check", "-f", file)
    assert res.code == 3, res.output
    assert "error IB011 [s]" in res.out and "IB095" in res.out and "errors cannot be waived" in res.out, res.out


def test_require_locked(tmp_path):
    """Guards issue 11 defect 6: a site CI can demand that every base is locked (a lock entry measured from
    the image stacks.yaml names now): check --require-locked fails without one, passes with one."""
    file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site"], "gpus": ["H100"]}})
    assert run_cli("check", "-f", file).code == 0
    res = run_cli("check", "--require-locked", "-f", file)
    assert res.code == 3, res.output
    assert "error IB092 [s]" in res.out and "bases.ngc-decl" in res.out and "imgbuild lock" in res.out, res.out
    locked = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site"], "gpus": ["H100"]}}, sub="locked",
                        lock=("ngc-decl", {"cuda": "13.0.1", "python": "3.12.3", "torch": "2.9.0a0+50eac811a6"}))
    res = run_cli("check", "--require-locked", "-f", locked)
    assert res.code == 0, res.output


def test_project_extras(tmp_path):
    """Guards issue 11 defect 4 (addition): `extras` are names (checked at load) installed as path[a,b],
    and need an install that installs dependencies (an extra only adds dependencies): with pip-no-deps or
    pythonpath they would do nothing, so preflight refuses them (IB080)."""
    assert _pip_lines(tmp_path, "x", install="pip", packages=[], extras=["dev", "1bit"]) == [
        "python -m pip install --progress-bar off '/opt/project[dev,1bit]'"]
    assert _pip_lines(tmp_path, "xe", install="pip-editable", packages=[], extras=["metrics"]) == [
        "python -m pip install --progress-bar off -e '/opt/project[metrics]'"]
    proj = copy.deepcopy(PROJECT)
    proj["params"]["extras"] = ["dev", "--index-url=http://x"]
    file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site"], "project": "p"}},
                      {"projects": {"p": proj}}, sub="bad")
    res = run_cli("check", "-f", file)
    assert res.code == 2 and "projects.p.params.extras[1]" in res.err, res.output
    proj["params"]["extras"] = ["dev"]        # install: pip-no-deps, the default
    file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site"], "project": "p"}},
                      {"projects": {"p": proj}}, sub="nodeps")
    res = run_cli("check", "-f", file)
    assert res.code == 3 and "error IB080 [s]" in res.out and "projects.p.params.extras" in res.out, res.output


# -- defect 7: spec refusals carry a rule id ---------------------------------------------------------------

@pytest.mark.parametrize("stacks,rule,key", [
    ({"s": {"base": "ngc-decl", "layers": ["site"], "colour": "blue"}}, "IB201", "stacks.s.colour"),
    ({"s": {"base": "ngc-decl", "layers": "site"}}, "IB202", "stacks.s.layers"),
    ({"s": {"layers": ["site"]}}, "IB203", "stacks.s"),
    ({"s": {"base": "ngc-99", "layers": ["site"]}}, "IB204", "stacks.s.base"),
    ({"s": {"base": "ngc-decl", "layers": ["site", "ds"]}}, "IB210", "stacks.s.gpus"),
])
def test_spec_refusals_carry_a_rule_id(tmp_path, stacks, rule, key):
    """Guards issue 11 defect 7: refusals at load had no rule id, unlike preflight and lint findings. Each
    class of refusal has a stable id (builder.errors.SPEC_RULES), in the message and in check --json."""
    file = write_spec(tmp_path, stacks)
    res = run_cli("check", "-f", file)
    assert res.code == 2 and res.err.startswith(f"spec error[{rule}]: {file}:"), res.err
    assert f": {key}: " in res.err
    res = run_cli("check", "--json", "-f", file)
    assert res.code == 2
    error = json.loads(res.out)["error"]
    assert error["rule"] == rule and error["key"] == key and error["file"] == str(file) and error["reason"]


def test_param_refusals_are_classified(tmp_path):
    """Guards issue 11 defect 7: refusals of parameter values (builder.load.params, raised as ParamError and
    turned into SpecError in spec.py) get the id of their class: unpinned requirement, bad git URL,
    credentials."""
    from builder.errors import SpecError
    cases = [({"packages": ["numpy"]}, "IB205"), ({"packages": ["numpy>=1"]}, "IB211"),
             ({"packages": ["numpy==2.*"]}, "IB211")]
    for i, (params, rule) in enumerate(cases):
        layers = {"ds": {"kind": "deepspeed", "params": {"version": "0.19.5", "ops": [], **params}}}
        file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site", "ds"]}}, {"layers": layers},
                          sub=f"c{i}")
        with pytest.raises(SpecError) as exc:
            load_spec(file)
        assert exc.value.rule == rule, exc.value.render()
    proj = copy.deepcopy(PROJECT)
    for i, (repo, rule) in enumerate([("http://example.com/p.git", "IB206"),
                                      ("https://me:s3cr3t@example.com/p.git", "IB207")]):
        proj["params"]["source"]["repo"] = repo
        file = write_spec(tmp_path, {"s": {"base": "ngc-decl", "layers": ["site"], "project": "p"}},
                          {"projects": {"p": proj}}, sub=f"g{i}")
        with pytest.raises(SpecError) as exc:
            load_spec(file)
        assert exc.value.rule == rule and "s3cr3t" not in exc.value.render(), exc.value.render()


def test_an_ngc_month_the_catalog_lacks_is_checked_not_refused_by_its_own_dockerfile(tmp_path):
    """Guards issue 21 defect 6: a public HF transformers DeepSpeed recipe on NGC 22.12 was refused only
    because the unknown month was taken for "no CUDA": DeepSpeed rendered without TORCH_CUDA_ARCH_LIST,
    and lint refused imgbuild's own Dockerfile (IB104). Its CUDA is unknown, so what depends on it is an
    unknown finding, and nothing is an error."""
    file = write_spec(tmp_path, {"s": {"base": "ngc-2212", "layers": ["site", "ds"], "gpus": ["H100"]}})
    res = run_cli("check", "--json", "-f", file)
    assert res.code == 0, res.output
    found = json.loads(res.out)["findings"]
    assert not [f for f in found if f["severity"] == "error"] and "IB104" not in {f["rule"] for f in found}, found
    # Issue 36: those unknowns (the driver floor, IB001; nvcc, IB042) are one finding for the base, IB004.
    assert not [f for f in found if f["severity"] == "unknown"], found
    (base,) = [f for f in found if f["severity"] == "warning"]
    assert base["rule"] == "IB004" and base["key"] == "bases.ngc-2212.image" and "check(s) of s cannot be judged" in \
        base["message"], found
