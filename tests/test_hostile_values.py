"""Hostile values (issue 10, part B): every value type has a grammar enforced where the spec is loaded,
so check, render and plan refuse the same inputs with exit 2 and `file:line: key.path: reason`; kind
files/ hold only regular files; `render --out` never writes through a link; no command prints a
credential. Every case goes through the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import copy_kinds, run_cli, write_stacks
from test_spec_errors import VALID, assert_refused, marked_line, unruled

GIT = 'source: {repo: "https://example.com/m.git", commit: 0123456789abcdef0123456789abcdef01234567}'
DS = 'params: {version: "0.19.5", ops: [fused_adam]}'
SECRET = "s3cr3tPa55"


def git_repo(url: str) -> str:
    return GIT.replace('"https://example.com/m.git"', json.dumps(url)) + "  # <=="


@dataclass
class Case:
    id: str
    old: str
    new: str
    key: str
    reason: str


CASES = [
    # -- apt package lists: a Debian package name with an optional =version, never an option ---------
    Case("apt-option-hook", "params: {apt: [libaio-dev]}",
         'params: {apt: ["-oDPkg::Pre-Invoke::=touch /tmp/pwned"]}  # <==',
         "layers.site.params.apt[0]", "is not a Debian package name"),
    Case("apt-allow-unauthenticated", "params: {apt: [libaio-dev]}",
         'params: {apt: [libaio-dev, "--allow-unauthenticated"]}  # <==',
         "layers.site.params.apt[1]", "is not a Debian package name"),
    Case("apt-insecure-repos", "params: {apt: [libaio-dev]}",
         'params: {apt: ["-oAcquire::AllowInsecureRepositories=true"]}  # <==',
         "layers.site.params.apt[0]", "is not a Debian package name"),
    Case("apt-space-in-name", "params: {apt: [libaio-dev]}", 'params: {apt: ["libaio-dev curl"]}  # <==',
         "layers.site.params.apt[0]", "is not a Debian package name"),
    Case("apt-bad-version", "params: {apt: [libaio-dev]}", 'params: {apt: ["libaio-dev=$(id)"]}  # <==',
         "layers.site.params.apt[0]", "is not a Debian package name"),
    Case("apt-deepspeed", DS, 'params: {version: "0.19.5", ops: [fused_adam], apt: ["-y"]}  # <==',
         "layers.ds.params.apt[0]", "is not a Debian package name"),
    # -- pip requirements: exact pins; a wildcard is a range --------------------------------------------
    Case("pip-wildcard", DS, 'params: {version: "0.19.5", ops: [fused_adam], packages: ["numpy==2.*"]}  # <==',
         "layers.ds.params.packages[0]", "needs an exact version (numpy==X.Y.Z), got the range 'numpy==2.*'"),
    Case("pip-wildcard-minor", DS,
         'params: {version: "0.19.5", ops: [fused_adam], packages: ["protobuf==3.20.*"]}  # <==',
         "layers.ds.params.packages[0]", "needs an exact version (protobuf==X.Y.Z), got the range 'protobuf==3.20.*'"),
    Case("pip-option", DS,
         'params: {version: "0.19.5", ops: [fused_adam], packages: ["--index-url=http://evil/"]}  # <==',
         "layers.ds.params.packages[0]", "is not a valid requirement"),
    Case("pip-arbitrary-equality", DS,
         'params: {version: "0.19.5", ops: [fused_adam], packages: ["numpy===1.26.4"]}  # <==',
         "layers.ds.params.packages[0]", "is not pinned"),
    # -- git repository URLs -------------------------------------------------------------------------
    Case("git-upload-pack", GIT, git_repo("--upload-pack=touch /tmp/pwned"),
         "projects.proj.params.source.repo", "is not a git URL"),
    Case("git-ext", GIT, git_repo("ext::sh -c touch% /tmp/pwned"),
         "projects.proj.params.source.repo", "is not a git URL"),
    Case("git-proxy-command", GIT, git_repo("-oProxyCommand=touch /tmp/pwned"),
         "projects.proj.params.source.repo", "is not a git URL"),
    Case("git-file-etc", GIT, git_repo("file:///etc"),
         "projects.proj.params.source.repo", "is not a git URL"),
    Case("git-file-dotdot", GIT, git_repo("file:///var/lib/../../etc/x.git"),
         "projects.proj.params.source.repo", "is not a git URL"),
    Case("git-empty", GIT, git_repo(""), "projects.proj.params.source.repo", "is not a git URL"),
    Case("git-http", GIT, git_repo("http://example.com/m.git"),
         "projects.proj.params.source.repo", "is not a git URL"),
    Case("git-token-user", GIT, git_repo(f"https://{SECRET}@example.com/m.git"),
         "projects.proj.params.source.repo", "credentials come from the netrc secret ($IMGBUILD_NETRC)"),
    Case("git-user-password", GIT, git_repo(f"https://me:{SECRET}@example.com/m.git"),
         "projects.proj.params.source.repo", "credentials come from the netrc secret ($IMGBUILD_NETRC)"),
    Case("git-password-with-quote", GIT, git_repo(f"https://me:{SECRET}'x@example.com/m.git"),
         "projects.proj.params.source.repo", "credentials come from the netrc secret ($IMGBUILD_NETRC)"),
    Case("git-ssh-password", GIT, git_repo(f"ssh://git:{SECRET}@example.com/m.git"),
         "projects.proj.params.source.repo", "credentials come from the netrc secret ($IMGBUILD_NETRC)"),
    # -- registries and image references (OCI distribution grammar) ---------------------------------
    Case("registry-dotdot", "  registry: 127.0.0.1:5000\n", "  registry: reg..example.com  # <==\n",
         "site.registry", "is not a registry host[:port]"),
    Case("registry-leading-dash", "  registry: 127.0.0.1:5000\n", "  registry: -reg.example.com  # <==\n",
         "site.registry", "is not a registry host[:port]"),
    Case("registry-credentials", "  registry: 127.0.0.1:5000\n", f"  registry: me:{SECRET}@registry  # <==\n",
         "site.registry", "holds credentials"),
    Case("image-dotdot", "    image: debian:bookworm\n", "    image: mirror/../debian:bookworm  # <==\n",
         "bases.deb.image", "is not an image reference"),
    Case("image-leading-dash", "    image: debian:bookworm\n", "    image: -debian:bookworm  # <==\n",
         "bases.deb.image", "is not an image reference"),
    Case("image-uppercase-path", "    image: debian:bookworm\n", "    image: mirror/Debian:bookworm  # <==\n",
         "bases.deb.image", "is not an image reference"),
    Case("image-double-slash", "    image: debian:bookworm\n", "    image: mirror//debian:bookworm  # <==\n",
         "bases.deb.image", "is not an image reference"),
    # -- tag templates: a valid OCI tag after expansion ----------------------------------------------
    Case("tag-leading-dash", "    gpus: [H100]\n  s2:", '    gpus: [H100]\n    tags: ["-{stack}"]  # <==\n  s2:',
         "stacks.s1.tags[0]", "can never be a valid tag"),
    Case("tag-leading-dot", "    gpus: [H100]\n  s2:", '    gpus: [H100]\n    tags: [".{stack}"]  # <==\n  s2:',
         "stacks.s1.tags[0]", "can never be a valid tag"),
    Case("tag-too-long", "    gpus: [H100]\n  s2:",
         '    gpus: [H100]\n    tags: ["{stack}-' + "x" * 130 + '"]  # <==\n  s2:',
         "stacks.s1.tags[0]", "can never be a valid tag"),
    # -- env names and control characters in free text ----------------------------------------------
    Case("env-name-dash", 'env: {A: "1"}', 'env: {"-A": "1"}  # <==',
         "runtimes.env.params.env.-A", "is not a valid variable name"),
    Case("newline-in-stack-description", "  s1:\n    base: ngc\n",
         '  s1:\n    description: "ok\\nRUN touch /tmp/pwned"  # <==\n    base: ngc\n',
         "stacks.s1.description", "control characters"),
    Case("newline-in-base-description", "    family: debian\n",
         '    family: debian\n    description: "ok\\nerror: forged"  # <==\n',
         "bases.deb.description", "control characters"),
    Case("escape-in-base-source", "    family: debian\n",
         '    family: debian\n    source: "\\e[2Jforged"  # <==\n',
         "bases.deb.source", "control characters"),
    Case("newline-in-layer-description", "    kind: deepspeed\n",
         '    kind: deepspeed\n    description: "a\\nb"  # <==\n',
         "layers.ds.description", "control characters"),
    Case("newline-in-site-description", "  namespace: imgbuild\n",
         '  namespace: imgbuild\n  description: "a\\nb"  # <==\n',
         "site.description", "control characters"),
]


@pytest.mark.parametrize("command", ["check", "render", "plan"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hostile_value_is_refused_by_every_command(case, command, write):
    assert VALID.count(case.old) == 1, f"snippet of {case.id} must occur once"
    text = VALID.replace(case.old, case.new)
    file = write(text)
    args = {"check": ["check"], "render": ["render", "--all"], "plan": ["plan", "--all", "--offline"]}[command]
    res = run_cli(*args, "-f", file)
    assert_refused(res, file, case.reason, marked_line(text), case.key)
    assert SECRET not in res.output


@pytest.mark.parametrize("good", ["libaio-dev", "g++", "libc6=2.36-9+deb12u7", "python3.11", "libfoo:amd64",
                                  "pkg=1:2.3~rc1-1"])
def test_good_apt_names_are_accepted(good, write):
    file = write(VALID.replace("params: {apt: [libaio-dev]}", f'params: {{apt: ["{good}"]}}'))
    res = run_cli("check", "-f", file)
    assert res.code == 0, res.output


@pytest.mark.parametrize("good", ["https://github.com/NVIDIA/Megatron-LM.git", "ssh://git@example.com/o/r.git",
                                  "git@github.com:NVIDIA/apex.git", "file:///var/lib/imgbuild/git/smoke.git"])
def test_good_git_urls_are_accepted(good, write):
    file = write(VALID.replace('"https://example.com/m.git"', json.dumps(good)))
    res = run_cli("check", "-f", file)
    assert res.code == 0, res.output


def test_apt_list_ends_options(write):
    """apt-get install gets `--` before the package list (apt 2.6 takes options after the command)."""
    res = run_cli("render", "stack=s1", "-f", write(VALID))
    assert res.code == 0, res.output
    assert "apt-get install -y --no-install-recommends -- libaio-dev" in res.out


# -- kind files/: regular files inside the kind folder only ------------------------------------------

def _site_with_files(tmp_path: Path, make) -> tuple[Path, Path]:
    root = copy_kinds(tmp_path / "site")
    files = root / "layers" / "runtime-env" / "files"
    files.mkdir()
    (files / "ok.txt").write_text("ok\n")
    make(files, tmp_path)
    return root, files


@pytest.mark.parametrize("what,make,reason", [
    ("dangling", lambda f, t: os.symlink(t / "nowhere", f / "bad"), "is a symbolic link"),
    ("loop", lambda f, t: (os.symlink(f / "bad2", f / "bad"), os.symlink(f / "bad", f / "bad2")), "is a symbolic link"),
    ("outside", lambda f, t: os.symlink("/etc/hostname", f / "bad"), "is a symbolic link"),
    ("dev-zero", lambda f, t: os.symlink("/dev/zero", f / "bad"), "is a symbolic link"),
    ("fifo", lambda f, t: os.mkfifo(f / "bad"), "is not a regular file"),
    ("dir-link", lambda f, t: os.symlink("/etc", f / "bad"), "is a symbolic link"),
])
def test_kind_files_must_be_regular(what, make, reason, tmp_path):
    root, files = _site_with_files(tmp_path, make)
    file = write_stacks(root, VALID)
    res = run_cli("check", "-f", file)
    assert res.code == 2, res.output
    assert "Traceback" not in res.err and "internal error" not in res.err
    assert unruled(res.err).startswith(f"spec error: {files / 'bad'}: "), res.err
    assert reason in res.err


def test_kind_folder_with_control_character(tmp_path):
    root = copy_kinds(tmp_path / "site")
    bad = root / "layers" / "bad\x1bkind"
    bad.mkdir()
    (bad / "kind.yaml").write_text("description: x\nrole: layer\n")
    (bad / "fragment.j2").write_text("RUN true\n")
    file = write_stacks(root, VALID)
    res = run_cli("check", "-f", file)
    assert res.code == 2, res.output
    assert "\x1b" not in res.err
    assert unruled(res.err).startswith(f"spec error: {root / 'layers'}: {str(repr('bad' + chr(27) + 'kind'))}"), res.err
    assert "is not a valid kind name" in res.err


# -- render --out: never through a link, never over a file -------------------------------------------

def test_render_out_onto_a_file(write, tmp_path):
    target = tmp_path / "afile"
    target.write_text("keep\n")
    res = run_cli("render", "stack=s1", "-f", write(VALID), "--out", target)
    assert res.code == 2, res.output
    assert "is not a folder" in res.err and "internal error" not in res.err
    assert target.read_text() == "keep\n"


def test_render_out_unwritable(write, tmp_path):
    res = run_cli("render", "stack=s1", "-f", write(VALID), "--out", "/proc/imgbuild-out")
    assert res.code == 2, res.output
    assert "cannot write" in res.err and "internal error" not in res.err


def test_render_out_is_a_symlink(write, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    res = run_cli("render", "stack=s1", "-f", write(VALID), "--out", link)
    assert res.code == 2, res.output
    assert "symbolic link" in res.err
    assert list(real.iterdir()) == []


def test_render_out_never_writes_through_a_link(write, tmp_path):
    out = tmp_path / "out"
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (out / "s1").mkdir(parents=True)
    first = run_cli("render", "stack=s1", "-f", write(VALID), "--out", tmp_path / "probe")
    assert first.code == 0, first.output
    name = Path(first.out.splitlines()[0]).name
    (out / "s1" / name).symlink_to(victim)
    res = run_cli("render", "stack=s1", "-f", write(VALID), "--out", out)
    assert res.code == 2, res.output
    assert "symbolic link" in res.err and "internal error" not in res.err
    assert victim.read_text() == "keep\n"


def test_render_out_writes_and_overwrites(write, tmp_path):
    out = tmp_path / "out"
    for _ in range(2):
        res = run_cli("render", "stack=s1", "-f", write(VALID), "--out", out)
        assert res.code == 0, res.output
    files = sorted((out / "s1").iterdir())
    assert files and all(f.is_file() and not f.is_symlink() for f in files)
    assert not [f for f in files if not f.name.endswith(".Dockerfile")]


# -- no secret printed -------------------------------------------------------------------------------

def test_redact_function():
    from builder.redact import redact
    assert redact(f"https://{SECRET}@h/x.git") == "https://***@h/x.git"
    assert redact(f"'me:{SECRET}@registry' is bad") == "'***@registry' is bad"
    assert redact(f"git+ssh://git:{SECRET}@h/x") == "git+ssh://***@h/x"
    for keep in ["git@github.com:o/r.git", "nvcr.io/nvidia/pytorch:25.09-py3@sha256:" + "a" * 64,
                 "https://example.com/m.git@0123456789abcdef0123456789abcdef01234567", "s1@2025-01-01",
                 "torch==2.9.0"]:
        assert redact(keep) == keep


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--markdown"]])
def test_diff_prints_no_credentials(fmt, tmp_path):
    repo = tmp_path / "repo"
    file = write_stacks(repo, VALID)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "v1")
    file.write_text(VALID.replace("https://example.com/m.git", f"https://me:{SECRET}@example.com/m.git"))
    res = run_cli("diff", "HEAD", "-f", file, "--offline", *fmt)
    assert res.code == 2, res.output
    assert SECRET not in res.output
    assert "***" in res.output or "credentials" in res.output


def test_errors_are_redacted_in_one_place():
    from builder.errors import ImgbuildError
    text = ImgbuildError(f"cannot fetch https://tok{SECRET}@example.com/x.git",
                         hint=f"try https://me:{SECRET}@h").render()
    assert SECRET not in text and "https://***@example.com/x.git" in text
