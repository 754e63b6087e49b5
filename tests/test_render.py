"""Rendering: golden Dockerfiles for every layer of every shipped stack and of examples/real, determinism, fragments that
may not write FROM/LABEL, quoting of hostile values, and the arch-list spellings.

Golden files live in tests/golden/<stack>/<NN>-<layer>.Dockerfile; `pytest --update-golden` rewrites
them on purpose (review the diff before committing), otherwise any difference fails with a diff.
"""

from __future__ import annotations

import difflib
from pathlib import Path
import re

import pytest
import yaml
from packaging.requirements import Requirement

from builder.errors import RenderError
from builder.plan.keys import make_plan
from builder.plan.render import dq, render_layer, sh
from builder.load.spec import load_spec
from conftest import GOLDEN, STACKS, copy_kinds, instructions, keywords, run_cli, shipped_data, write_stacks


def renderings(file, prefix: str = "") -> dict:
    """{relative golden path: Dockerfile text} for every layer of every stack of a stacks file, as it is built:
    a layer whose pip set the lock file holds installs that set (builder.plan.pinning)."""
    from builder.prepared import prepare
    spec = load_spec(file)
    plan = prepare(spec).plan
    out = {}
    for stack in spec.stacks.values():
        for i, node in enumerate(plan.chain(stack.name)):
            out[f"{prefix}{stack.name}/{i:02d}-{node.name}.Dockerfile"] = (
                node.dockerfile if node.locked else render_layer(spec, stack, node.layer))
    return out


RENDERED = renderings(STACKS)
# examples/real under real/RECIPE/: twelve public recipes that use every kind, issue 11's included.
# examples/jax under jax/: a JAX CPU stack, NGC's JAX and a CUDA image with the JAX plugin (issue 24).
GOLDENS = {**RENDERED, **{k: v for f in sorted((STACKS.parent / "examples" / "real").glob("*/stacks.yaml"))
                          for k, v in renderings(f, f"real/{f.parent.name}/").items()},
           **renderings(STACKS.parent / "examples" / "jax" / "stacks.yaml", "jax/")}


@pytest.mark.parametrize("rel", sorted(GOLDENS))
def test_golden(rel, update_golden):
    path = GOLDEN / rel
    text = GOLDENS[rel]
    if update_golden:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path}; run `pytest tests/test_render.py --update-golden` and review it")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            fromfile=f"golden/{rel}", tofile="rendered now"))
        pytest.fail(f"rendering of {rel} differs from its golden file (rerun with --update-golden if "
                    f"this change is intended):\n{diff}", pytrace=False)


def test_no_stale_golden_files(update_golden):
    present = {p.relative_to(GOLDEN).as_posix() for p in GOLDEN.rglob("*.Dockerfile")}
    stale = present - set(GOLDENS)
    if update_golden:
        for rel in stale:
            (GOLDEN / rel).unlink()
        return
    assert not stale, f"golden files for layers no shipped stack has: {sorted(stale)} (--update-golden removes them)"


def test_every_shipped_stack_has_goldens():
    spec = load_spec(STACKS)
    assert {rel.split("/")[0] for rel in RENDERED} == set(spec.stacks)
    assert len(RENDERED) == sum(len(s.chain) for s in spec.stacks.values()) == 19


# -- determinism -----------------------------------------------------------------------------------

def test_every_pip_step_starts_without_wheels_built_elsewhere():
    """pip keys the wheels it builds by their source only: DeepSpeed's wheel built against torch 2.13
    for cpu-smoke was installed as it was into a torch 2.11 CUDA stack (no fused_adam, "PyTorch version
    mismatch" at run time). Every step with pip's cache mount empties the wheel cache before pip runs."""
    steps = 0
    for rel, text in GOLDENS.items():
        for keyword, rest in instructions(text):
            if keyword == "RUN" and "id=imgbuild-pip" in rest:
                steps += 1
                after_mounts = re.sub(r"^(--mount=\S+\s+)+", "", rest)
                assert after_mounts.startswith("rm -rf /root/.cache/pip/wheels;"), (rel, rest[:400])
    assert steps > 50


def test_rendering_twice_is_byte_identical():
    assert renderings(STACKS) == RENDERED


def test_no_timestamps_or_host_details():
    import getpass
    import socket
    for rel, text in RENDERED.items():
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b|\d\d:\d\d:\d\d", text), rel
        assert not re.search(rf"\b{re.escape(socket.gethostname())}\b", text), rel   # a word: "vm" is in nvvm
        assert str(STACKS.parent) not in text, rel
        user = getpass.getuser()
        assert f"/home/{user}" not in text, rel


def test_the_stack_name_is_not_in_a_layer(tmp_path):
    """Stacks that share a prefix share its images: nothing stack-specific is rendered."""
    for rel, text in RENDERED.items():
        stack = rel.split("/")[0]
        assert stack not in text, rel


def test_skeleton_shape():
    for rel, text in RENDERED.items():
        kinds = keywords(text)
        assert kinds[:3] == ["ARG", "FROM", "SHELL"], rel
        assert kinds.count("FROM") == 1 and kinds[-1] == "LABEL" and kinds.count("LABEL") == 1, rel
        assert instructions(text)[1] == ("FROM", "${PARENT}"), rel
        assert "\n\n\n" not in text, rel


# -- fragments may not write FROM or LABEL ---------------------------------------------------------

@pytest.mark.parametrize("line", ['LABEL owner="me"', "FROM ubuntu:24.04", "  label x=1", "MAINTAINER me"])
def test_fragment_writing_stage_or_labels_is_refused(tmp_path, line):
    root = copy_kinds(tmp_path / "k")
    fragment = root / "layers" / "runtime-env" / "fragment.j2"
    fragment.write_text(fragment.read_text() + line + "\n")
    file = write_stacks(root, shipped_data())
    spec = load_spec(file)
    stack = spec.stack("cpu-smoke")
    with pytest.raises(RenderError, match=r"runtime-env/fragment\.j2 writes (FROM|LABEL|MAINTAINER); fragments must not"):
        render_layer(spec, stack, next(d for d in stack.chain if d.kind.name == "runtime-env"))
    res = run_cli("render", "stack=cpu-smoke", "-f", file)
    assert res.code == 2 and "Traceback" not in res.err
    assert res.err.startswith("render error: layers/runtime-env/fragment.j2 writes"), res.err


def test_a_broken_fragment_is_a_render_error(tmp_path):
    root = copy_kinds(tmp_path / "k")
    (root / "layers" / "runtime-env" / "fragment.j2").write_text("ENV X={{ params.nope | dq }}\n")
    res = run_cli("check", "-f", write_stacks(root, shipped_data()))
    assert res.code == 2 and "Traceback" not in res.err
    assert res.err.startswith("render error: ") and "nope" in res.err, res.err


# -- quoting ---------------------------------------------------------------------------------------

EVIL = ["it's \"quoted\"", "back\\slash\\", "$HOME ${PATH} $(id)", "`id`", "x && rm -rf /", "; rm -rf / #",
        "a\\\" && rm -rf / #"]


def render_one(folder, data, stack: str, layer: str) -> str:
    """The Dockerfile of one layer of one stack of data (written to folder)."""
    spec = load_spec(write_stacks(folder, data))
    st = spec.stack(stack)
    return render_layer(spec, st, next(d for d in st.chain if d.name == layer))


_HARMLESS: dict = {}


@pytest.fixture
def harmless(tmp_path_factory):
    """harmless(point) -> the layer rendered with the value 'plain' at that injection point (cached)."""
    def _get(point: str) -> str:
        if point not in _HARMLESS:
            mutate, stack, layer, _ = INJECTION_POINTS[point]
            data = shipped_data()
            mutate(data, "plain")
            _HARMLESS[point] = render_one(tmp_path_factory.mktemp("harmless"), data, stack, layer)
        return _HARMLESS[point]
    return _get


@pytest.mark.parametrize("value", EVIL)
def test_env_values_are_quoted_exactly(tmp_path, value, harmless):
    evil = shipped_data()
    _env(evil, value)
    a = harmless("runtime-env")
    b = render_one(tmp_path, evil, "cpu-smoke", "cpu-env")
    assert keywords(a) == keywords(b)
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    assert f'EXTRA="{escaped}"' in b
    env = [rest for kw, rest in instructions(b) if kw == "ENV"]
    assert len(env) == 1 and f'EXTRA="{escaped}"' in env[0]


def test_env_value_exact_text():
    assert dq('a"b\\c$HOME`id` && rm -rf /') == '"a\\"b\\\\c\\$HOME`id` && rm -rf /"'
    assert dq("${PATH}") == '"\\${PATH}"'
    assert sh("x && rm -rf /") == "'x && rm -rf /'"
    assert sh("it's") == "'it'\"'\"'s'"


def _env(d, v):
    d["runtimes"]["cpu-env"]["params"]["env"]["EXTRA"] = v


def _apt(d, v):
    d["layers"]["ngc-25.09-site"]["params"]["apt"] = ["libaio-dev", v]


def _ds_apt(d, v):
    d["layers"]["ds-0.19.5-hopper"]["params"]["apt"] = [v]


def _packages(d, v):
    v = v.replace("\\", "")  # packaging reads backslashes in marker strings as escapes (tested below)
    d["layers"]["ds-0.19.5-hopper"]["params"]["packages"] = [f"numpy==1.26.4; platform_release == '{v}'"
                                                             if "'" not in v else "numpy==1.26.4"]


def _tools(d, v):
    v = v.replace("\\", "")
    d["layers"]["cpu-torch-2.13"]["params"]["tools"] = ["ninja==1.11.1.4", f'wheel==0.45.1; os_name != "{v}"'
                                                        if '"' not in v else "wheel==0.45.1"]


def _project_packages(d, v):
    v = v.replace("\\", "")
    d["projects"]["smoke-train"]["params"]["packages"] = [f"six==1.16.0; platform_release == '{v}'"
                                                           if "'" not in v else "six==1.16.0"]


def _repo(d, v):
    d["projects"]["megatron-core-0.16"]["params"]["source"]["repo"] = "https://example.com/" + v


def _in_path(v):
    return "/opt/" + re.sub(r"\s", "_", v)  # whitespace in a path is refused at load time (below)


def _path(d, v):
    d["projects"]["megatron-core-0.16"]["params"]["path"] = _in_path(v)


def _path_pythonpath(d, v):
    d["projects"]["megatron-core-0.16"]["params"]["path"] = _in_path(v)
    d["projects"]["megatron-core-0.16"]["params"]["install"] = "pythonpath"


def _wheel(d, v):
    d["layers"]["cpu-torch-2.13"]["params"]["wheel"]["file"] = v.replace("/", "_") + ".whl"


def _req(d, layer, key):
    from packaging.requirements import Requirement
    return str(Requirement(d["layers"][layer]["params"][key][-1]))


def _dq_text(v):
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


# point: (mutate(data, value), stack, layer, expect(data, value) -> [(KEYWORD, how, text)]) where how is
# "word": text must come back as one shell word of such an instruction, "in": text is in it verbatim
INJECTION_POINTS = {
    "runtime-env": (_env, "cpu-smoke", "cpu-env", lambda d, v: [("ENV", "in", "EXTRA=" + _dq_text(v))]),
    "apt-package": (_apt, "h100-megatron", "ngc-25.09-site", lambda d, v: [("RUN", "word", v)]),
    "deepspeed-apt": (_ds_apt, "h100-megatron", "ds-0.19.5-hopper", lambda d, v: [("RUN", "word", v)]),
    "requirement-marker": (_packages, "h100-megatron", "ds-0.19.5-hopper",
                           lambda d, v: [("RUN", "word", _req(d, "ds-0.19.5-hopper", "packages"))]),
    "tools-marker": (_tools, "cpu-smoke", "cpu-torch-2.13",
                     lambda d, v: [("RUN", "word", _req(d, "cpu-torch-2.13", "tools"))]),
    "project-packages": (_project_packages, "cpu-smoke", "smoke-train", lambda d, v: [
        ("RUN", "word", str(Requirement(d["projects"]["smoke-train"]["params"]["packages"][0])))]),
    "git-repo-label": (_repo, "h100-megatron", "megatron-core-0.16", lambda d, v: [
        ("LABEL", "in", "io.imgbuild.source.source=" + _dq_text(
            "https://example.com/" + v + "@" + d["projects"]["megatron-core-0.16"]["params"]["source"]["commit"]))]),
    "install-path": (_path, "h100-megatron", "megatron-core-0.16",
                     lambda d, v: [("COPY", "word", _in_path(v)), ("RUN", "word", _in_path(v))]),
    "pythonpath-env": (_path_pythonpath, "h100-megatron", "megatron-core-0.16",
                       lambda d, v: [("ENV", "in", "PYTHONPATH=" + _dq_text(_in_path(v))[:-1] + "${PYTHONPATH:+:"),
                                     ("COPY", "word", _in_path(v))]),
    "wheel-file": (_wheel, "cpu-smoke", "cpu-torch-2.13", lambda d, v: [
        ("RUN", "word", "/wheelhouse/" + d["layers"]["cpu-torch-2.13"]["params"]["wheel"]["file"])]),
}


def shell_words(text: str) -> list[str]:
    import shlex
    return shlex.split(text)  # raises on unbalanced quotes


# Points whose values have a grammar (issue 10): an apt package name, a git URL. Every EVIL value is
# refused when the spec loads, before anything renders (tests/test_hostile_values.py has the messages).
REFUSED_AT_LOAD = {"apt-package", "deepspeed-apt", "git-repo-label"}
# Paths in the image (issue 11): no quote, $, backslash or backtick either, since WORKDIR and COPY take
# them unquoted; a path holding one is refused at load too.
PATH_POINTS, PATH_REFUSED = {"install-path", "pythonpath-env"}, "$\"'\\`"


@pytest.mark.parametrize("value", EVIL)
@pytest.mark.parametrize("point", sorted(INJECTION_POINTS))
def test_hostile_values_do_not_change_the_instructions(tmp_path, point, value, harmless):
    from builder.errors import SpecError
    mutate, stack, layer, expect = INJECTION_POINTS[point]
    evil = shipped_data()
    mutate(evil, value)
    if point in REFUSED_AT_LOAD or (point in PATH_POINTS and any(c in value for c in PATH_REFUSED)):
        assert harmless(point)  # the same point with a plain value renders
        with pytest.raises(SpecError):
            render_one(tmp_path, evil, stack, layer)
        return
    a = harmless(point)
    b = render_one(tmp_path, evil, stack, layer)
    assert a != b
    assert keywords(a) == keywords(b), f"{point}: {value!r} changed the instructions:\n{b}"
    parsed = instructions(b)
    for keyword, how, text in expect(evil, value):
        bodies = [rest for kw, rest in parsed if kw == keyword]
        if how == "in":
            assert any(text in body for body in bodies), f"{point}: {text!r} not in any {keyword}:\n{b}"
        else:  # the value is exactly one shell word: quoted, nothing of it runs as code
            assert any(text in shell_words(body) for body in bodies), f"{point}: {text!r} split:\n{b}"


def test_project_packages_are_shell_quoted(tmp_path):
    """A project's packages are single shell words of its pip install: extras brackets (a glob),
    markers with '<', ';' and quotes are quoted, exactly as shlex.quote writes them."""
    import shlex
    data = shipped_data()
    packages = ["smoke-extra[cli,yaml]==1.0", 'numpy==1.26.4; python_version < "3.13"']
    data["projects"]["smoke-train"]["params"]["packages"] = packages
    text = render_one(tmp_path, data, "cpu-smoke", "smoke-train")
    [install] = [rest for kw, rest in instructions(text) if kw == "RUN" and "pip install" in rest]
    for pkg in packages:
        assert shlex.quote(pkg) != pkg and f" {shlex.quote(pkg)} " in install, install
    words = shell_words(install)
    start = words.index("--progress-bar") + 2
    assert words[start:start + 2] == sorted(packages, key=str.lower), words


@pytest.mark.parametrize("value", ["a\nRUN rm -rf /", "a\rb", "a\tb", "a\x00b", "a\x1bb"])
@pytest.mark.parametrize("point", ["env", "apt-package", "git-repo", "install-path"])
def test_control_characters_are_refused_at_load_time(tmp_path, point, value):
    data = shipped_data()
    if point == "env":
        data["runtimes"]["cpu-env"]["params"]["env"]["EXTRA"] = value
        key = "runtimes.cpu-env.params.env.EXTRA"
    elif point == "apt-package":
        data["layers"]["ngc-25.09-site"]["params"]["apt"] = ["libaio-dev", value]
        key = "layers.ngc-25.09-site.params.apt[1]"
    elif point == "git-repo":
        data["projects"]["smoke-train"]["params"]["source"]["repo"] = value
        key = "projects.smoke-train.params.source.repo"
    else:
        data["projects"]["smoke-train"]["params"]["path"] = value
        key = "projects.smoke-train.params.path"
    file = write_stacks(tmp_path, data)
    res = run_cli("check", "-f", file)
    assert res.code == 2 and "Traceback" not in res.err
    assert re.match(r"spec error\[IB2\d\d\]: " + re.escape(f"{file}:") + r"\d+: " + re.escape(key) + ": control characters "
                    r"\(newline, tab, \.\.\.\) are not allowed", res.err), res.err


@pytest.mark.parametrize("path", ["/opt/my project", "/opt/a\u00a0b", "relative/path", "/opt/x /etc"])
@pytest.mark.parametrize("project", ["megatron-core-0.16", "smoke-train"])
def test_paths_that_cannot_be_one_copy_argument_are_refused(tmp_path, project, path):
    """Docker splits COPY arguments on whitespace before reading quotes: such a path is refused."""
    data = shipped_data()
    data["projects"][project]["params"]["path"] = path
    file = write_stacks(tmp_path, data)
    res = run_cli("check", "-f", file)
    assert res.code == 2 and "Traceback" not in res.err
    assert re.match(r"spec error\[IB2\d\d\]: " + re.escape(f"{file}:") + r"\d+: " + re.escape(f"projects.{project}.params.path: "
                    f"{path!r} is not an absolute path without spaces"), res.err), res.err


def test_escapes_in_requirement_markers_are_refused_at_load_time(tmp_path):
    """packaging turns '\\b' in a marker string into a backspace: refused with the key, not at render."""
    data = shipped_data()
    data["layers"]["ds-0.19.5-hopper"]["params"]["packages"] = ["numpy==1.26.4; platform_release == 'a\\b'"]
    file = write_stacks(tmp_path, data)
    res = run_cli("check", "-f", file)
    assert res.code == 2 and "Traceback" not in res.err
    assert re.match(r"spec error\[IB2\d\d\]: " + re.escape(f"{file}:") + r"\d+: layers\.ds-0\.19\.5-hopper\.params\.packages\[0\]: "
                    r".*control characters", res.err), res.err


def test_the_renderer_refuses_control_characters_itself():
    for bad in ("a\nb", "a\rb", "a\tb"):
        with pytest.raises(RenderError, match="control character"):
            dq(bad)
        with pytest.raises(RenderError, match="control character"):
            sh(bad)


# -- the arch list ---------------------------------------------------------------------------------

@pytest.mark.parametrize("gpus, torch, ints", [
    (["A100", "H100"], "8.0;9.0", "80;90"),
    (["H100", "A100"], "8.0;9.0", "80;90"),
    (["H100", "H200", "A100", "A30"], "8.0;9.0", "80;90"),
    (["B200", "A100"], "8.0;10.0", "80;100"),  # numeric, not string, order
    (["RTX5090", "L40S", "T4"], "7.5;8.9;12.0", "75;89;120"),
])
def test_arch_list_spellings(tmp_path, gpus, torch, ints):
    data = shipped_data()
    data["stacks"]["a100-deepspeed"]["gpus"] = gpus
    ds = render_one(tmp_path / "s", data, "a100-deepspeed", "ds-0.17.6-ampere")
    args = dict(rest.split("=", 1) for kw, rest in instructions(ds) if kw == "ARG" and "=" in rest)
    assert args.pop("SOURCE_DATE_EPOCH") == "315532800" and args.pop("PYTHONHASHSEED") == "0"
    assert args == {"TORCH_CUDA_ARCH_LIST": f'"{torch}"', "NVTE_CUDA_ARCHS": f'"{ints}"',
                    "CMAKE_CUDA_ARCHITECTURES": f'"{ints}"'}
    assert f'io.imgbuild.cuda-arch-list="{torch}"' in ds
    plan = make_plan(load_spec(write_stacks(tmp_path / "p", data)), ["a100-deepspeed"])
    node = plan.chain("a100-deepspeed")[1]
    assert node.build_args == {"TORCH_CUDA_ARCH_LIST": torch, "NVTE_CUDA_ARCHS": ints, "CMAKE_CUDA_ARCHITECTURES": ints}


def test_layers_that_compile_nothing_get_no_arch_list():
    for rel, text in RENDERED.items():
        compiles = "ds-0.19.5-hopper" in rel or "ds-0.17.6-ampere" in rel or "nccl-tests" in rel
        assert ("TORCH_CUDA_ARCH_LIST" in text) == compiles, rel
    # DeepSpeed on a CPU base compiles host code only
    cpu_ds = [t for rel, t in RENDERED.items() if rel.endswith("-ds-0.19.8-cpu.Dockerfile")]
    assert len(cpu_ds) == 1 and "TORCH_CUDA_ARCH_LIST" not in cpu_ds[0]


# -- the CLI ---------------------------------------------------------------------------------------

def test_render_out_writes_the_files(tmp_path):
    out = tmp_path / "out"
    res = run_cli("render", "--all", "--out", out, "-f", STACKS)
    assert res.code == 0, res.output
    written = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()}
    interop = ["docker-bake.json", "build.sh"]   # tests/test_bake.py reads them
    assert {k: v for k, v in written.items() if k not in interop} == RENDERED and set(written) - set(RENDERED) == set(interop)
    assert res.out.split() == [str(out / rel) for rel in [*RENDERED, *interop]]


def test_render_to_stdout_one_stack():
    res = run_cli("render", "stack=a100-deepspeed", "-f", STACKS)
    assert res.code == 0, res.output
    for rel, text in RENDERED.items():
        if rel.startswith("a100-deepspeed/"):
            assert text in res.out
    assert res.out.count("# ==== a100-deepspeed / ") == 3
    assert "h100" not in res.out


def test_no_selection_means_every_stack():
    """One default on every verb that takes stacks: none named is every stack in the file."""
    res = run_cli("render", "-f", STACKS)
    assert res.code == 0, res.output
    named = run_cli("render", "--all", "-f", STACKS)
    assert res.out == named.out
    for stack in yaml.safe_load(Path(STACKS).read_text())["stacks"]:
        assert f"# ==== {stack} / 00 " in res.out
