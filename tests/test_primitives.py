"""The primitives real stacks need (issue 11): a pip step anywhere, git requirements pinned to a commit,
per-layer index and build environment, PATH-like env extension, removal of base packages with a
reason, a declared torch swap, files and patches beside stacks.yaml, CUDA source builds with the arch
list in each spelling, flash-attn, and system setup. Every value is validated at load, quoted when
rendered, part of the content key and shown by plan --explain. The real-engine proof is
tests/test_docker_build.py::test_primitives_build_and_validate_in_a_real_image."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from builder.ship.checks import judge
from builder.plan.keys import make_plan
from builder.plan.render import render_layer
from builder.errors import SourceError, SpecError
from builder.load.kinds import CheckSpec
from builder.load.spec import load_spec

SHA = "0123456789abcdef0123456789abcdef01234567"
BASE = {
    "version": 1,
    "site": {"registry": "127.0.0.1:5000", "namespace": "prim", "driver_floor": "580.65.06"},
    "bases": {"ngc": {"image": "nvcr.io/nvidia/pytorch:25.03-py3", "family": "ngc-pytorch", "source": "test",
                      "provides": {"python": "3.12.3", "torch": "2.7.0a0+7c8ec84dab", "cuda": "12.8.1",
                                   "os": "ubuntu-24.04"}}},
    "layers": {"site": {"kind": "ngc-pytorch"}},
    "stacks": {"s": {"base": "ngc", "layers": ["site"], "gpus": ["A100", "H100"]}},
}


def stack_with(write, **layers) -> Path:
    data = copy.deepcopy(BASE)
    for name, layer in layers.items():
        data["layers"][name] = layer
        data["stacks"]["s"]["layers"].append(name)
    return write(data, sub="spec")


def dockerfile(path: Path, layer: str) -> str:
    spec = load_spec(path)
    st = spec.stack("s")
    return render_layer(spec, st, next(d for d in st.chain if d.name == layer))


def refused(path: Path, *needles: str) -> str:
    res = run_cli("check", "-f", path)
    assert res.code == 2 and "Traceback" not in res.err, res.output
    for needle in needles:
        assert needle in res.err, res.err
    return res.err


# -- pip step -------------------------------------------------------------------------------------

def test_pip_step_renders_flags_index_build_env_and_git_pins(write):
    path = stack_with(write, tools={"kind": "pip", "params": {
        "packages": ["einops==0.8.1", f"mamba-ssm[causal] @ git+https://github.com/state-spaces/mamba.git@{SHA}"],
        "flags": ["no-build-isolation", "no-deps"],
        "index_url": "https://download.pytorch.org/whl/cu128",
        "extra_index_urls": ["https://pypi.example.org/simple"],
        "build_env": {"MAX_JOBS": "8", "MAMBA_FORCE_BUILD": "TRUE"}}})
    text = dockerfile(path, "tools")
    assert ("python -m pip install --progress-bar off --no-build-isolation --no-deps --index-url "
            "https://download.pytorch.org/whl/cu128 --extra-index-url https://pypi.example.org/simple "
            f"einops==0.8.1 'mamba-ssm[causal]@ git+https://github.com/state-spaces/mamba.git@{SHA}'") in text \
        or f"'mamba-ssm[causal] @ git+https://github.com/state-spaces/mamba.git@{SHA}'" in text, text
    assert "export MAMBA_FORCE_BUILD=TRUE; \\\n    export MAX_JOBS=8; \\" in text
    assert "ENV MAX_JOBS" not in text and "PIP_CONSTRAINT=" not in text
    res = run_cli("check", "--strict", "-f", path)
    assert res.code == 0, res.output


@pytest.mark.parametrize("req, needle", [
    ("mamba-ssm @ git+https://github.com/state-spaces/mamba.git@main", "full 40-hex commit"),
    ("mamba-ssm @ git+https://github.com/state-spaces/mamba.git@0123456", "full 40-hex commit"),
    ("mamba-ssm @ git+https://github.com/state-spaces/mamba.git", "full 40-hex commit"),
    (f"mamba-ssm @ https://example.com/mamba.tar.gz", "full 40-hex commit"),
    (f"x @ git+ext::sh -c id@{SHA}", "is not a valid requirement"),
    (f"x @ git+http://example.com/x.git@{SHA}", "is not a git URL"),
    (f"x @ git+https://user:pw@example.com/x.git@{SHA}", "credentials"),
    (f"x @ git+https://example.com/x.git@{SHA}#subdirectory=../../etc", "climb out"),
    ("protobuf==3.20.*", "needs an exact version (protobuf==X.Y.Z), got the range 'protobuf==3.20.*'"),
    ("protobuf>=3.20", "needs an exact version (protobuf==X.Y.Z), got the range 'protobuf>=3.20'"),
    ("protobuf", "'protobuf' is not pinned"),
])
def test_unpinned_or_unsafe_requirements_are_refused(write, req, needle):
    path = stack_with(write, tools={"kind": "pip", "params": {"packages": [req]}})
    err = refused(path, "layers.tools.params.packages[0]", needle)
    assert "pw@" not in err


def test_same_requirement_twice_is_refused(write):
    path = stack_with(write, tools={"kind": "pip", "params": {"packages": ["Foo_Bar==1.0", "foo-bar==1.0"]}})
    refused(path, "listed twice")


@pytest.mark.parametrize("url, needle", [
    ("http://pypi.example.org/simple", "is not an index URL"),
    ("https://user:s3cr3tpw@pypi.example.org/simple", "credentials"),
    ("--index-url=https://evil", "is not an index URL"),
    ("https://pypi.example.org/simple --trusted-host evil", "is not an index URL"),
])
def test_index_urls_are_https_without_credentials(write, url, needle):
    path = stack_with(write, tools={"kind": "pip", "params": {"packages": ["einops==0.8.1"], "index_url": url}})
    err = refused(path, "layers.tools.params.index_url", needle)
    assert "s3cr3tpw" not in err


def test_loopback_index_may_be_http(write):
    path = stack_with(write, tools={"kind": "pip", "params": {"packages": ["einops==0.8.1"],
                                                               "index_url": "http://127.0.0.1:8080/simple"}})
    assert "--index-url http://127.0.0.1:8080/simple" in dockerfile(path, "tools")


def test_uninstall_needs_packages_and_a_reason(write):
    path = stack_with(write, tools={"kind": "pip", "params": {"uninstall": {"packages": ["apex"]}}})
    refused(path, "layers.tools.params.uninstall", "reason")
    path = stack_with(write, tools={"kind": "pip", "params": {"uninstall": {"packages": ["-r/etc/x"], "reason": "a newer one is built"}}})
    refused(path, "is not a distribution name")
    path = stack_with(write, tools={"kind": "pip", "params": {"uninstall": {"packages": ["apex"], "reason": "x"}}})
    refused(path, "say why")
    path = stack_with(write, tools={"kind": "pip", "params": {"packages": ["torch==2.8.0"], "replace_torch": ""}})
    refused(path, "layers.tools.params.replace_torch", "say why")


def test_uninstall_renders_and_is_explained(write):
    reason = "the base's apex predates the one we build from source"
    path = stack_with(write, tools={"kind": "pip", "params": {
        "uninstall": {"packages": ["apex", "transformer-engine"], "reason": reason}}})
    text = dockerfile(path, "tools")
    assert "RUN python -m pip uninstall -y apex transformer-engine\n" in text
    res = run_cli("plan", "stack=s", "--explain", "--offline", "-f", path)
    assert res.code == 0 and reason in res.out, res.output
    spec = load_spec(path)
    node = make_plan(spec, ["s"]).top("s")
    check = next(c for c in node.checks if c.id == "pip.requirements")
    assert dict(check.args)["absent"] == ["apex", "transformer-engine"]


def test_torch_is_kept_unless_the_swap_is_declared(write):
    path = stack_with(write, tools={"kind": "pip", "params": {"packages": ["torch==2.8.0"]}})
    res = run_cli("check", "-f", path)
    assert res.code == 3 and "error IB070" in res.out, res.output   # a replacement nobody declared is refused
    assert "PIP_CONSTRAINT=" not in dockerfile(path, "tools")
    path = stack_with(write, tools={"kind": "pip", "params": {
        "packages": ["torch==2.8.0"], "replace_torch": "the project needs torch 2.8's FlexAttention"}})
    text = dockerfile(path, "tools")
    assert "PIP_CONSTRAINT= python -m pip install" in text
    assert text.index("PIP_CONSTRAINT= python") < text.index("/etc/imgbuild/constraints.txt")  # re-pinned after
    res = run_cli("check", "--strict", "-f", path)
    # examples/real F7: neither preflight (IB070) nor the lint of the rendered step (IB109) refuses a swap
    # stacks.yaml declares; the reason is in plan --explain.
    assert res.code == 0 and "IB070" not in res.out and "IB109" not in res.out, res.output
    assert "replace_torch" in run_cli("plan", "stack=s", "-x", "--offline", "-f", path).out


# -- env ------------------------------------------------------------------------------------------

def test_path_like_env_is_extended_not_replaced(write):
    path = stack_with(write, sys={"kind": "system-setup", "params": {"env": {
        "PATH": {"prepend": ["/opt/tools/bin", "/opt/x/bin"]},
        "LD_LIBRARY_PATH": {"append": ["/opt/tools/lib"]},
        "PYTHONPATH": {"prepend": ["/opt/a"], "append": ["/opt/b"]},
        "LITERAL": "a $b ${PATH}"}}})
    text = dockerfile(path, "sys")
    assert 'LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH}:}/opt/tools/lib"' in text
    assert 'PATH="/opt/tools/bin:/opt/x/bin${PATH:+:${PATH}}"' in text
    assert 'PYTHONPATH="/opt/a${PYTHONPATH:+:${PYTHONPATH}}:/opt/b"' in text
    assert 'LITERAL="a \\$b \\${PATH}"' in text   # a plain value is never expanded


@pytest.mark.parametrize("value, needle", [
    ({"prepend": ["relative/bin"]}, "is not an absolute folder"),
    ({"prepend": ["/a:/b"]}, "is not an absolute folder"),
    ({"prepend": ["/opt/$HOME"]}, "is not an absolute folder"),
    ({"prepend": ["/opt/x\"y"]}, "is not an absolute folder"),
    ({"replace": ["/x"]}, "unknown key 'replace'"),
    ({}, "empty"),
    ({"prepend": "/x"}, "expected a list"),
])
def test_bad_env_extensions_are_refused(write, value, needle):
    path = stack_with(write, sys={"kind": "system-setup", "params": {"env": {"PATH": value}}})
    refused(path, "layers.sys.params.env.PATH", needle)


def test_runtime_env_takes_extensions_and_its_check_judges_them():
    spec = CheckSpec("runtime-env.env", "env", False,
                     (("expected", [["PATH", {"prepend": ["/opt/x/bin"], "append": []}], ["A", "1"]]),))
    ok = judge((spec,), {"env": {"PATH": "/opt/x/bin:/usr/bin", "A": "1"}}, gpu=False)[0]
    assert ok.status == "passed", ok
    bad = judge((spec,), {"env": {"PATH": "/usr/bin:/opt/x/bin", "A": "1"}}, gpu=False)[0]
    assert bad.status == "failed" and "PATH=" in bad.detail
    empty = judge((spec,), {"env": {"PATH": "/opt/x/bin:", "A": "1"}}, gpu=False)[0]
    assert empty.status == "passed"   # "/opt/x/bin:" would be wrong only with '::' or a leading ':'


# -- files and patches beside stacks.yaml ---------------------------------------------------------

def _cuda_source(**params) -> dict:
    return {"kind": "cuda-source", "params": {"name": "grouped_gemm", "module": "grouped_gemm",
                                              "source": {"repo": "https://github.com/fanshiqing/grouped_gemm.git",
                                                         "commit": SHA}, **params}}


def test_patches_are_hashed_into_the_key_and_copied_by_content(write, tmp_path):
    path = stack_with(write, gg=_cuda_source(patches=["patches/01-fix.patch", "patches/02-more.patch"]))
    (path.parent / "patches").mkdir()
    (path.parent / "patches/01-fix.patch").write_text("one\n")
    (path.parent / "patches/02-more.patch").write_text("two\n")
    text = dockerfile(path, "gg")
    first = text.index("git apply --verbose /opt/imgbuild/patches/grouped_gemm/01.patch")
    assert first < text.index("git apply --verbose /opt/imgbuild/patches/grouped_gemm/02.patch")
    key1 = make_plan(load_spec(path), ["s"]).top("s").key
    (path.parent / "patches/02-more.patch").write_text("two, changed\n")
    key2 = make_plan(load_spec(path), ["s"]).top("s").key
    assert key1 != key2
    res = run_cli("plan", "stack=s", "--explain", "--offline", "-f", path)
    assert "patches/02-more.patch" in res.out, res.output


@pytest.mark.parametrize("given, needle", [
    ("../outside.patch", "plain names"),
    ("/etc/passwd", "plain names"),
    ("patches/missing.patch", "no such file"),
    ("patches", "not a regular file"),
    ("link.patch", "symbolic link"),
    ("linkdir/x.patch", "symbolic link"),
])
def test_bad_files_are_refused(write, tmp_path, given, needle):
    path = stack_with(write, gg=_cuda_source(patches=[given]))
    (path.parent / "patches").mkdir()
    (tmp_path / "outside.patch").write_text("x")
    (path.parent / "link.patch").symlink_to(tmp_path / "outside.patch")
    (path.parent / "linkdir").symlink_to(tmp_path)
    (tmp_path / "x.patch").write_text("x")
    refused(path, "layers.gg.params.patches[0]", needle)


def test_a_file_changed_after_load_stops_the_build(write):
    from builder.ship.pipeline import copy_input
    path = stack_with(write, gg=_cuda_source(patches=["fix.patch"]))
    (path.parent / "fix.patch").write_text("one\n")
    ref = load_spec(path).layers["gg"].param("patches")[0]
    copy_input(ref, path.parent / "ctx" / "a")
    assert (path.parent / "ctx" / "a").read_text() == "one\n"
    (path.parent / "fix.patch").write_text("changed\n")
    with pytest.raises(SourceError, match="changed or vanished"):
        copy_input(ref, path.parent / "ctx" / "b")


# -- CUDA source builds and flash-attn -----------------------------------------------------------

def test_arch_list_in_each_spelling(write):
    path = stack_with(write, gg=_cuda_source(
        arch_env=["TORCH_CUDA_ARCH_LIST", "FLASH_ATTN_CUDA_ARCHS", "NVTE_CUDA_ARCHS", "CMAKE_CUDA_ARCHITECTURES"]))
    text = dockerfile(path, "gg")
    assert "export TORCH_CUDA_ARCH_LIST='8.0;9.0'; \\" in text
    assert "export FLASH_ATTN_CUDA_ARCHS='80;90'; \\" in text
    assert "export NVTE_CUDA_ARCHS='80;90'; \\" in text
    assert "export CMAKE_CUDA_ARCHITECTURES='80-real;90-real'; \\" in text
    ptx = dockerfile(stack_with(write, gg=_cuda_source(arch_env=["TORCH_CUDA_ARCH_LIST", "CMAKE_CUDA_ARCHITECTURES"],
                                                       ptx=True)), "gg")
    assert "export TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX'; \\" in ptx
    assert "export CMAKE_CUDA_ARCHITECTURES='80-real;90'; \\" in ptx


def test_install_methods_and_options(write):
    cmake = dockerfile(stack_with(write, gg=_cuda_source(
        install="cmake", arch_env=["CMAKE_CUDA_ARCHITECTURES"], configure=["-DBUILD_TESTS=OFF", "-DX:BOOL=ON"],
        prefix="/opt/gg")), "gg")
    assert ("cmake -S . -B /tmp/imgbuild-build -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/opt/gg "
            "-DCMAKE_CUDA_ARCHITECTURES='80-real;90-real' -DBUILD_TESTS=OFF -DX:BOOL=ON") in cmake
    # Whatever arch_env says: CMake reads no CMAKE_CUDA_ARCHITECTURES variable, and would build its default.
    bare = dockerfile(stack_with(write, gg=_cuda_source(install="cmake", ptx=True)), "gg")
    assert "-DCMAKE_CUDA_ARCHITECTURES='80-real;90'" in bare
    make = dockerfile(stack_with(write, gg=_cuda_source(install="configure-make", configure=["--with-cuda=/usr/local/cuda"],
                                                        subdir="src/ucx")), "gg")
    assert "cd src/ucx" in make and "./configure --prefix=/usr/local --with-cuda=/usr/local/cuda" in make
    for bad in (["-DX=$(id)"], ["--x y"], ["; rm -rf /"], ["-Dx='q'"], ["--index-url=https://evil"], ["--fresh"]):
        refused(stack_with(write, gg=_cuda_source(configure=bad)), "layers.gg.params.configure[0]", "is not a build option")
    refused(stack_with(write, gg=_cuda_source(subdir="../x")), "layers.gg.params.subdir", "relative path")
    refused(stack_with(write, gg=_cuda_source(arch_env=["NVCC_FLAGS"])), "layers.gg.params.arch_env[0]",
            "not one of the allowed values")


def test_source_check_path_follows_the_name(write):
    path = stack_with(write, gg=_cuda_source())
    node = make_plan(load_spec(path), ["s"]).top("s")
    check = next(c for c in node.checks if c.id == "cuda-source.source-commit")
    assert dict(check.args) == {"path": "/opt/imgbuild/sources/grouped_gemm", "commit": SHA}


def test_flash_attn_reads_its_own_arch_variable_and_never_downloads_a_wheel(write):
    path = stack_with(write, fa={"kind": "flash-attn", "params": {"version": "2.8.3", "max_jobs": 8}})
    text = dockerfile(path, "fa")
    assert "export FLASH_ATTN_CUDA_ARCHS='80;90' FLASH_ATTENTION_FORCE_BUILD=TRUE; \\" in text
    assert "--no-build-isolation --no-deps flash-attn==2.8.3" in text
    res = run_cli("check", "--strict", "-f", path)
    assert res.code == 0, res.output   # no "compiled without TORCH_CUDA_ARCH_LIST" finding


def test_cuda_layers_need_gpus(write):
    data = copy.deepcopy(BASE)
    data["layers"]["fa"] = {"kind": "flash-attn", "params": {"version": "2.8.3"}}
    data["stacks"]["s"]["layers"].append("fa")
    del data["stacks"]["s"]["gpus"]
    refused(write(data, sub="nogpu"), "stacks.s.gpus", "compiles CUDA")


# -- system setup ---------------------------------------------------------------------------------

def test_system_setup_renders_users_files_links_workdir_entrypoint(write):
    path = stack_with(write, sys={"kind": "system-setup", "params": {
        "users": [{"name": "mpiuser", "uid": 1000}], "sshd": True, "sshd_port": 2222,
        "files": [{"src": "conf/hostfile", "dest": "/etc/mpi/hostfile", "mode": "0600"}],
        "symlinks": {"/usr/local/bin/py": "/usr/bin/python3"}, "workdir": "/workspace",
        "entrypoint": ["/usr/local/bin/imgbuild-sshd", "-p", "2222"]}})
    (path.parent / "conf").mkdir()
    (path.parent / "conf/hostfile").write_text("node1 slots=8\n")
    text = dockerfile(path, "sys")
    assert "apt-get install -y --no-install-recommends -- openssh-server" in text
    assert "RUN useradd --create-home --uid 1000 --shell /bin/bash mpiuser" in text
    assert "rm -f /etc/ssh/ssh_host_*key*" in text and "ssh-keygen -A" in text
    import hashlib
    digest = hashlib.sha256(b"node1 slots=8\n").hexdigest()
    assert f"COPY --chmod=0600 inputs/{digest} /etc/mpi/hostfile" in text
    assert "ln -sfn /usr/bin/python3 /usr/local/bin/py" in text
    assert "WORKDIR /workspace" in text
    assert 'ENTRYPOINT ["/usr/local/bin/imgbuild-sshd", "-p", "2222"]' in text
    res = run_cli("check", "--strict", "-f", path)
    assert res.code == 0, res.output


@pytest.mark.parametrize("params, key, needle", [
    ({"users": [{"name": "Root;id", "uid": 5}]}, "users[0].name", "is not a user name"),
    ({"users": [{"name": "x", "uid": 0}]}, "users[0].uid", "0 is root"),
    ({"users": [{"name": "x", "uid": 5, "shell": "/bin/evil"}]}, "users[0].shell", "is not a shell"),
    ({"files": [{"src": "f", "dest": "/etc/x", "mode": "4755"}]}, "files[0].mode", "is not a file mode"),
    ({"files": [{"src": "f", "dest": "relative"}]}, "files[0].dest", "absolute path"),
    ({"symlinks": {"/a": "b c"}}, "symlinks./a", "absolute path"),
    ({"workdir": "/a b"}, "workdir", "absolute path"),
    ({"entrypoint": []}, "entrypoint", "non-empty list"),
    ({"entrypoint": ["a\nb"]}, "entrypoint[0]", "control characters"),
])
def test_bad_system_setup_values_are_refused(write, params, key, needle):
    path = stack_with(write, sys={"kind": "system-setup", "params": params})
    (path.parent / "f").write_text("x")
    refused(path, f"layers.sys.params.{key}", needle)


# -- submodules -----------------------------------------------------------------------------------

def _git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_ALLOW_PROTOCOL="file")
    return subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_submodules_are_exported_at_the_recorded_commit(tmp_path, monkeypatch):
    from builder.ship.sources import MARKER, export
    from builder.load.params import GitPin
    monkeypatch.setenv("IMGBUILD_CACHE", str(tmp_path / "cache"))
    sub = tmp_path / "work-sub"
    sub.mkdir()
    _git(sub, "init", "-q", "-b", "main")
    (sub / "kernel.cu").write_text("v1\n")
    _git(sub, "add", ".")
    _git(sub, "commit", "-qm", "v1")
    v1 = _git(sub, "rev-parse", "HEAD")
    (sub / "kernel.cu").write_text("v2 (after the pin)\n")
    _git(sub, "commit", "-qam", "v2")
    _git(tmp_path, "clone", "-q", "--bare", str(sub), str(tmp_path / "sub.git"))
    top = tmp_path / "work-top"
    top.mkdir()
    _git(top, "init", "-q", "-b", "main")
    (top / "setup.py").write_text("# top\n")
    _git(top, "submodule", "add", "-q", "../sub.git", "third_party/sub")
    _git(top / "third_party/sub", "checkout", "-q", v1)
    _git(top, "add", ".")
    _git(top, "commit", "-qm", "top")
    commit = _git(top, "rev-parse", "HEAD")
    _git(tmp_path, "clone", "-q", "--bare", str(top), str(tmp_path / "top.git"))
    pin = GitPin(f"file://{tmp_path}/top.git", commit, submodules=True)
    dest = tmp_path / "out"
    export(pin, dest)
    assert (dest / "third_party/sub/kernel.cu").read_text() == "v1\n"   # the recorded commit, not the branch
    assert (dest / MARKER).read_text().split()[0] == commit
    assert not (dest / "third_party/sub" / MARKER).exists()
    plain = tmp_path / "plain"
    export(GitPin(pin.repo, commit), plain)
    assert not (plain / "third_party/sub/kernel.cu").exists()            # only when asked for


def test_submodule_urls_go_through_the_allowlist(tmp_path, monkeypatch):
    from builder.ship.sources import export
    from builder.load.params import GitPin
    monkeypatch.setenv("IMGBUILD_CACHE", str(tmp_path / "cache"))
    top = tmp_path / "work-top"
    top.mkdir()
    _git(top, "init", "-q", "-b", "main")
    (top / ".gitmodules").write_text('[submodule "evil"]\n\tpath = evil\n\turl = ext::sh -c touch% /tmp/pwned\n')
    _git(top, "update-index", "--add", "--cacheinfo", f"160000,{SHA},evil")
    _git(top, "add", ".gitmodules")
    _git(top, "commit", "-qm", "top")
    _git(tmp_path, "clone", "-q", "--bare", str(top), str(tmp_path / "top.git"))
    with pytest.raises(SourceError, match="is not a git URL"):
        export(GitPin(f"file://{tmp_path}/top.git", _git(top, "rev-parse", "HEAD"), True), tmp_path / "out")


@pytest.mark.parametrize("kind, extra", [("project", {}), ("megatron", {"version": "0.16.0"})])
def test_pythonpath_installs_extend_pythonpath(write, kind, extra):
    """examples/real finding F6: `install: pythonpath` wrote ENV PYTHONPATH=/path and dropped what a
    layer beneath had put there."""
    data = copy.deepcopy(BASE)
    data["layers"]["sys"] = {"kind": "system-setup", "params": {"env": {"PYTHONPATH": {"prepend": ["/opt/lib"]}}}}
    data["stacks"]["s"]["layers"].append("sys")
    data["projects"] = {"p": {"kind": kind, "params": {"install": "pythonpath", "path": "/mount/p", **extra,
                                                      "source": {"repo": "https://example.com/p.git", "commit": SHA}}}}
    data["stacks"]["s"]["project"] = "p"
    path = write(data, sub="pp")
    assert 'ENV PYTHONPATH="/mount/p${PYTHONPATH:+:${PYTHONPATH}}"' in dockerfile(path, "p")


def test_torch_swap_above_compiled_code_is_a_warning_and_a_release_torch_is_judged_by_vllms_pin(write):
    """examples/real findings F5 and F7: flash-attn compiled, then a layer swaps torch (IB071 warning); vllm
    pinned above a swap to a release torch is judged by the torch that vllm release requires (its published
    metadata, catalog torch_pins, issue 37): 0.10.2 requires torch==2.8.0, so over 2.8.0 it keeps it and over
    2.7.1 it replaces it; a vllm release the catalog has not read stays unknown."""
    def swapped(torch: str, vllm: str):
        return stack_with(write, fa={"kind": "flash-attn", "params": {"version": "2.8.3"}},
                          swap={"kind": "pip", "params": {"packages": [f"torch=={torch}"],
                                                          "replace_torch": f"vLLM needs torch {torch}"}},
                          vllm={"kind": "pip", "params": {"packages": [f"vllm=={vllm}"]}})
    res = run_cli("check", "-f", swapped("2.8.0", "0.10.2"))
    assert "warning IB071" in res.out and "'fa' beneath it" in res.out, res.out
    assert "IB070" not in res.out, res.out
    res = run_cli("check", "-f", swapped("2.7.1", "0.10.2"))
    assert "error IB070" in res.out and "requires torch==2.8.0" in res.out, res.out
    path = swapped("2.8.0", "0.10.1")
    res = run_cli("check", "-f", path)
    assert "unknown IB070" in res.out and "error IB070" not in res.out, res.out
    assert run_cli("check", "--strict", "-f", path).code != 0
    plain = stack_with(write, vllm={"kind": "pip", "params": {"packages": ["vllm==0.10.2"]}})
    assert "error IB070" in run_cli("check", "-f", plain).out   # over NGC's pre-release torch: certain


def test_a_layer_may_target_its_own_gpus_and_preflight_checks_them(write):
    path = stack_with(write, gg=_cuda_source(gpus=["H100", "B200"], arch_env=["TORCH_CUDA_ARCH_LIST"]))
    text = dockerfile(path, "gg")
    assert "export TORCH_CUDA_ARCH_LIST='9.0;10.0'; \\" in text and 'ARG TORCH_CUDA_ARCH_LIST="9.0;10.0"' in text
    keys = make_plan(load_spec(path), ["s"]).top("s").build_args
    assert keys["TORCH_CUDA_ARCH_LIST"] == "9.0;10.0"
    refused(stack_with(write, gg=_cuda_source(gpus=["H1000"])), "layers.gg.params.gpus[0]", "unknown GPU")
    old = copy.deepcopy(BASE)
    old["bases"]["ngc"]["provides"]["cuda"] = "12.4.1"   # B200 needs CUDA 12.8
    old["layers"]["gg"] = _cuda_source(gpus=["B200"])
    old["stacks"]["s"]["layers"].append("gg")
    res = run_cli("check", "-f", write(old, sub="oldcuda"))
    assert res.code == 3 and "error IB010" in res.out and "layers.gg.params.gpus[0]" in res.out, res.out


def test_a_wheel_url_is_pinned_by_its_sha256(write):
    url = "https://github.com/Dao-AILab/flash-attention/releases/download/v2.7.4/flash_attn-2.7.4-cp312-cp312-linux_x86_64.whl"
    path = stack_with(write, tools={"kind": "pip", "params": {"packages": [f"flash-attn @ {url}#sha256={'a' * 64}"]}})
    assert f"'flash-attn @ {url}#sha256={'a' * 64}'" in dockerfile(path, "tools")
    for bad in (url, f"{url}#md5={'a' * 32}", url.replace("https", "http") + f"#sha256={'a' * 64}",
                url.replace(".whl", ".tar.gz") + f"#sha256={'a' * 64}"):
        refused(stack_with(write, tools={"kind": "pip", "params": {"packages": [f"flash-attn @ {bad}"]}}),
                "layers.tools.params.packages[0]", "sha256")


def test_configure_options_with_a_pip_install_are_refused(write):
    res = run_cli("check", "-f", stack_with(write, gg=_cuda_source(configure=["-DX=1"])))
    assert res.code != 0 and "configure options apply to cmake and configure-make" in res.output, res.output
    assert "Traceback" not in res.output


def test_diff_reads_the_files_beside_each_revision_and_shows_reasons(write, tmp_path):
    """imgbuild diff loads each revision with its own patches (hashed as that revision holds them) and shows
    a removal's reason and a patch's change among the causes of a rebuild."""
    path = stack_with(write, tools={"kind": "pip", "params": {"uninstall": {"packages": ["apex"],
                                                                            "reason": "first reason given"}}},
                      gg=_cuda_source(patches=["patches/fix.patch"]))
    repo = path.parent
    (repo / "patches").mkdir()
    (repo / "patches/fix.patch").write_text("one\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one")
    path.write_text(path.read_text().replace("first reason given", "second reason, reworded"))
    (repo / "patches/fix.patch").write_text("two\n")
    _git(repo, "commit", "-qam", "two")
    res = run_cli("diff", "HEAD~1", "HEAD", "-f", path)
    assert res.code == 1, res.output   # 1: the revisions differ (like diff(1))
    assert "uninstall: apex (first reason given) -> apex (second reason, reworded)" in res.out
    assert "inputs: patches/fix.patch" in res.out and "gg     changed    build" in res.out
    assert "tools  unchanged  reuse" in res.out   # a reworded reason changes no image and no check
