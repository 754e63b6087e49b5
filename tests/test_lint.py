"""Lint: each fragile pattern of ../shared/reference/fragile_patterns.md in a hand-written Dockerfile is
found with its rule id, line, severity and fix, and a Dockerfile without it passes. imgbuild's own
rendered Dockerfiles of every shipped stack pass; so does the shipped stacks.yaml."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

import pytest

from conftest import GOLDEN, STACKS, run_cli, write_stacks
from builder.core.dockerfile import parse
from builder.rules.lint import lint_dockerfile, lint_rendered, lint_spec
from builder.plan.keys import make_plan
from builder.load.spec import load_spec

NGC = "FROM nvcr.io/nvidia/pytorch:25.09-py3@sha256:" + "a" * 64 + "\n"
CUDA_DEVEL = "FROM nvidia/cuda:12.9.1-devel-ubuntu24.04@sha256:" + "b" * 64 + "\n"


def marked(text: str) -> int:
    return next(i + 1 for i, line in enumerate(text.splitlines()) if "# <==" in line)


@dataclass
class Bad:
    id: str
    text: str            # the line the finding points at carries '# <=='
    rule: str
    severity: str
    message: str         # regular expression


BAD = [
    Bad("git-clone-default-branch", NGC + "RUN git clone https://github.com/NVIDIA/apex /opt/apex  # <==\n",
        "IB101", "error", r"git clone without checking out a full commit"),
    Bad("git-clone-release-branch", NGC + "RUN git clone --branch release_v0.15 https://x/m.git \\  # <==\n && pip install -e m\n",
        "IB101", "error", r"git clone of branch/tag release_v0\.15"),
    Bad("pip-git-at-main", NGC + "RUN pip install 'git+https://github.com/NVIDIA/TransformerEngine.git@main'  # <==\n",
        "IB101", "error", r"floating git ref 'main'"),
    Bad("short-hash", NGC + "RUN pip install git+https://github.com/o/p.git@1a2b3c4  # <==\n",
        "IB102", "error", r"short commit hash '1a2b3c4'"),
    Bad("pip-unpinned", NGC + "RUN pip install --no-cache-dir \\\n    datasets==2.19.0 \\\n    transformers>=4.40 \\  # <==\n"
        "    accelerate==0.30.1\n", "IB103", "error", r"pip installs 'transformers>=4\.40' without an exact version"),
    Bad("pip-no-version", NGC + "RUN pip install wandb  # <==\n", "IB103", "error",
        r"pip installs 'wandb' without an exact version"),
    # nvidia/cuda sets no arch list (NGC PyTorch sets its own: tests/test_lint_shell.py)
    Bad("arch-list-missing-deepspeed", CUDA_DEVEL + "RUN DS_BUILD_FUSED_ADAM=1 pip install deepspeed==0.19.5  # <==\n",
        "IB104", "error", r"DeepSpeed ops \(fused_adam\) compiled without TORCH_CUDA_ARCH_LIST"),
    Bad("arch-list-before-from", 'ARG TORCH_CUDA_ARCH_LIST="9.0"\n' + CUDA_DEVEL
        + "RUN APEX_CUDA_EXT=1 pip install -v --no-build-isolation ./apex  # <==\n",
        "IB104", "error", r"Apex CUDA extensions compiled without TORCH_CUDA_ARCH_LIST"),
    Bad("arch-list-before-from-over-ngc", 'ARG TORCH_CUDA_ARCH_LIST="9.0"\n' + NGC
        + "RUN APEX_CUDA_EXT=1 pip install -v --no-build-isolation ./apex  # <==\n",
        "IB106", "error", r"TORCH_CUDA_ARCH_LIST is declared before FROM and not again in this stage: Apex CUDA "
        r"extensions compile for the list the base image sets, not for 9.0"),
    Bad("arch-lists-disagree", NGC + 'ENV TORCH_CUDA_ARCH_LIST="9.0"\nENV NVTE_CUDA_ARCHS="90;100"  # <==\n',
        "IB105", "error", r"arch lists disagree in one stage \(NVTE_CUDA_ARCHS=100,90; TORCH_CUDA_ARCH_LIST=90\)"),
    Bad("gencode-disagrees", NGC + 'ARG TORCH_CUDA_ARCH_LIST="8.0"\n'
        'RUN nvcc -gencode arch=compute_90,code=sm_90 -c k.cu  # <==\n',
        "IB105", "error", r"-gencode=90; TORCH_CUDA_ARCH_LIST=80"),
    Bad("global-arg-unset-in-stage", 'ARG MAX_JOBS=8\n' + NGC + 'RUN echo "jobs $MAX_JOBS"  # <==\n',
        "IB106", "error", r"\$MAX_JOBS is declared before FROM and not again in this stage"),
    Bad("or-true", NGC + "RUN pip install flash-attn==2.8.3 --no-build-isolation || true  # <==\n",
        "IB107", "error", r"'\|\| true' hides a failure"),
    Bad("exit-0", NGC + "RUN pip install apex==0.1; exit 0  # <==\n", "IB107", "error", r"'; exit 0' hides a failure"),
    Bad("semicolon-after-install", NGC + "RUN pip install six==1.16.0; echo installed  # <==\n",
        "IB107", "warning", r"the exit code of pip \.\.\. is ignored"),
    Bad("cu12-package-on-cuda13", NGC + "RUN pip install nvidia-nccl-cu12==2.27.3  # <==\n",
        "IB108", "error", r"'nvidia-nccl-cu12==2\.27\.3' is built for CUDA 12, the base has CUDA 13\.0\.1"),
    Bad("cupy-cuda11x-on-cuda12", "FROM nvidia/cuda:12.6.3-devel-ubuntu22.04@sha256:" + "b" * 64
        + "\nRUN pip install cupy-cuda11x==13.3.0  # <==\n",
        "IB108", "error", r"'cupy-cuda11x==13\.3\.0' is built for CUDA 11, the base has CUDA 12\.6\.3"),
    Bad("torch-over-ngc", NGC + "RUN pip install torch==2.9.1 --index-url https://download.pytorch.org/whl/cu130  # <==\n",
        "IB109", "error", r"pip installs torch over the base's torch"),
    Bad("vllm-over-ngc", NGC + "RUN pip install vllm==0.6.0  # <==\n", "IB109", "error", r"pip installs vllm over"),
    Bad("constraint-edited", NGC + "RUN sed -i '/^torch/d' /etc/pip/constraint.txt  # <==\n",
        "IB109", "warning", r"edits NGC's /etc/pip/constraint\.txt"),
    Bad("constraint-unset", NGC + "ENV PIP_CONSTRAINT=  # <==\n", "IB109", "warning", r"PIP_CONSTRAINT= turns off"),
    Bad("token-in-index-url", NGC + "RUN pip install --extra-index-url https://ci:glpat-123@git.example/simple p==1  # <==\n",
        "IB110", "error", r"a URL with a password or token"),
    Bad("password-env", NGC + "ENV DB_PASSWORD=hunter2  # <==\n", "IB110", "error", r"DB_PASSWORD is given a literal value"),
    Bad("secret-build-arg", NGC + "ARG HF_TOKEN  # <==\n", "IB110", "warning", r"build argument HF_TOKEN looks like a secret"),
    Bad("ssh-key-copied", NGC + "COPY id_ed25519 /root/.ssh/  # <==\n", "IB110", "error", r"copies id_ed25519 into the image"),
    Bad("chpasswd", NGC + "RUN echo 'root:root' | chpasswd  # <==\n", "IB110", "error", r"a password set or passed"),
    Bad("ds-arch-suffix", NGC + 'ENV TORCH_CUDA_ARCH_LIST="9.0a"  # <==\nRUN pip install deepspeed==0.19.8\n',
        "IB111", "error", r"TORCH_CUDA_ARCH_LIST='9\.0a' with DeepSpeed 0\.19\.8: its op builder fails on the arch suffix"),
    Bad("base-by-tag", "FROM nvcr.io/nvidia/pytorch:25.09-py3  # <==\n", "IB112", "warning",
        r"FROM nvcr\.io/nvidia/pytorch:25\.09-py3 by tag alone"),
]


def strip_markers(text: str) -> str:
    return text.replace("  # <==", "")


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_a_fragile_pattern_is_found_with_rule_line_severity_and_fix(case):
    found = lint_dockerfile(strip_markers(case.text), "Dockerfile")
    hits = [f for f in found if f.rule == case.rule and re.search(case.message, f.message)]
    assert hits, "\n".join(f.render() for f in found)
    f = hits[0]
    assert (f.severity, f.line) == (case.severity, marked(case.text)), f.render()
    assert f.fix and f.source and f.file == "Dockerfile", f.render()


GOOD = [
    ("IB101 IB102", NGC + "RUN git clone https://github.com/NVIDIA/apex /opt/apex \\\n"
     " && git -C /opt/apex checkout 0123456789abcdef0123456789abcdef01234567\n"
     "RUN pip install git+https://github.com/o/p.git@0123456789abcdef0123456789abcdef01234567\n"),
    ("IB103", NGC + "RUN pip install --no-cache-dir -r requirements.txt 'transformers==4.44.2' ./local /w/x-1.0-py3-none-any.whl\n"
     "RUN python -m pip install --progress-bar off --no-deps -e .\n"),
    ("IB104 IB105", NGC + 'ARG TORCH_CUDA_ARCH_LIST="9.0;10.0"\nARG NVTE_CUDA_ARCHS="90;100"\n'
     "RUN DS_BUILD_FUSED_ADAM=1 pip install deepspeed==0.19.5\n"
     "RUN NVTE_FRAMEWORK=pytorch pip install --no-build-isolation transformer_engine[pytorch]==2.10.0\n"
     "RUN DS_BUILD_CPU_ADAM=1 pip install deepspeed==0.19.5\n"),
    ("IB106", "ARG BASE=nvcr.io/nvidia/pytorch:25.09-py3\nFROM ${BASE}\nARG BASE\nRUN echo $BASE\n"),
    ("IB107", NGC + "RUN pip install six==1.16.0 && echo ok\n"
     "RUN if [ -f /x ]; then pip install six==1.16.0; fi\n"),
    ("IB108", NGC + "RUN pip install nvidia-nccl-cu13==2.28.9 cupy-cuda13x==13.6.0\n"),
    ("IB109", "FROM debian:bookworm@sha256:" + "c" * 64 + "\nRUN pip install torch==2.9.1\n"),
    ("IB110", NGC + "RUN --mount=type=secret,id=netrc,target=/root/.netrc pip install p==1\n"
     'RUN PIP_INDEX_URL="$(cat /run/secrets/pip-index-url)" pip install p==1\nENV HF_HOME=/data/hf\n'),
    ("IB111", NGC + 'ENV TORCH_CUDA_ARCH_LIST="9.0"\nRUN pip install deepspeed==0.19.8\n'),
    ("IB112", NGC.replace("\n", " AS builder\n") + "FROM builder AS final\n"),
]


@pytest.mark.parametrize("rules,text", GOOD, ids=[g[0] for g in GOOD])
def test_a_dockerfile_without_the_pattern_passes(rules, text):
    found = lint_dockerfile(text, "Dockerfile")
    assert not [f for f in found if f.rule in rules.split()], "\n".join(f.render() for f in found)


def test_every_lint_rule_has_a_failing_case():
    assert {c.rule for c in BAD} == {f"IB1{n:02d}" for n in range(1, 13)}


# -- the reader ------------------------------------------------------------------------------------

def test_continuations_comments_heredocs_and_lines():
    text = ("# syntax=docker/dockerfile:1\nFROM x:1 AS a\nRUN one \\\n# a comment inside\n    two \\\n    three\n"
            "RUN <<EOF\npip install numpy\nEOF\nFROM y:2\nENV A=1\n")
    ins = parse(text)
    assert [(i.keyword, i.line, i.stage) for i in ins] == [("FROM", 2, 0), ("RUN", 3, 0), ("RUN", 7, 0),
                                                           ("FROM", 10, 1), ("ENV", 11, 1)]
    run = ins[1]
    assert run.args.split() == ["one", "two", "three"]
    assert run.line_at(run.args.index("three")) == 6
    assert ins[2].line_at(ins[2].args.index("numpy")) == 8


def test_the_escape_directive_is_honoured():
    ins = parse("# escape=`\nFROM x:1\nRUN a `\n    b\n")
    assert [i.args for i in ins] == ["x:1", "a  b"]


# -- imgbuild's own output, and the CLI ------------------------------------------------------------

def test_every_rendered_dockerfile_of_the_shipped_stacks_passes_lint():
    spec = load_spec(STACKS)
    assert lint_rendered(spec, make_plan(spec)) == []
    assert lint_spec(spec, spec.stacks.values()) == []


def test_the_golden_dockerfiles_pass_lint_even_without_context():
    # The shipped stacks' goldens. Those of examples/real (golden/real/) hold declared torch swaps, which
    # only the spec's context makes acceptable: tests/test_examples_real.py reviews them with it.
    files = sorted(p for p in GOLDEN.rglob("*.Dockerfile") if p.relative_to(GOLDEN).parts[0] != "real")
    assert files
    for path in files:
        assert [f for f in lint_dockerfile(path.read_text(), str(path)) if f.severity != "unknown"] == [], path


def test_lint_cli_on_stacks_yaml_and_on_dockerfiles(tmp_path):
    res = run_cli("lint", STACKS)
    # A stacks file gets check's review: preflight's one unknown (TE in NGC 25.09) shows here too.
    assert res.code == 0 and "ok: 1 file(s) linted: 0 error(s), 0 warning(s), 1 unknown" in res.out, res.output
    assert res.out.splitlines()[-1] == "ok: 1 file(s) linted: 0 error(s), 0 warning(s), 1 unknown"
    bad = tmp_path / "site" / "Dockerfile"
    bad.parent.mkdir()
    bad.write_text(NGC + "RUN pip install deepspeed || true\n")
    (tmp_path / "site" / "train.Dockerfile").write_text(NGC + "RUN pip install six==1.16.0\n")
    res = run_cli("lint", tmp_path / "site")
    assert res.code == 3, res.output
    assert f"error IB103 {bad}:2: RUN: pip installs 'deepspeed' without an exact version" in res.out
    assert f"error IB107 {bad}:2: RUN: '|| true' hides a failure" in res.out
    assert "fix: " in res.out
    assert res.err.startswith("preflight: lint: 2 error(s), 0 warning(s), 0 unknown in 2 file(s)")


def test_lint_strict_fails_on_warnings(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text("FROM nvcr.io/nvidia/pytorch:25.09-py3\n")
    assert run_cli("lint", path).code == 0
    res = run_cli("lint", "--strict", path)
    assert res.code == 3 and "error IB112" in res.out


def test_a_credential_in_stacks_yaml_fails_check(tmp_path):
    from test_preflight import S, env, spec_data
    file = write_stacks(tmp_path, spec_data(S("ngc2509", ["site"], runtime="e"),
                                            {"runtimes": {"e": env(WANDB_API_KEY="0123abcd")}}))
    res = run_cli("check", "-f", file)
    assert res.code == 3 and "error IB110 [s]" in res.out and "runtimes.e.params.env.WANDB_API_KEY" in res.out


def test_the_build_gate_refuses_a_spec_lint_error_alone(tmp_path):
    """The gate every build passes runs the spec's lint beside preflight: a stack whose only error is a
    credential in stacks.yaml (IB110) is refused, and a spec-lint warning is refused under --strict."""
    from builder.errors import PreflightError
    from builder.rules.preflight import preflight
    from builder.prepared import prepare
    from builder.rules.review import gate
    from test_preflight import S, env, spec_data
    spec = load_spec(write_stacks(tmp_path / "token", spec_data(S("ngc2509", ["site"], runtime="e"),
                                                                 {"runtimes": {"e": env(HF_TOKEN="hf_abcdef")}})))
    assert [f for f in preflight(spec, [spec.stacks["s"]]) if f.severity == "error"] == []  # preflight alone lets it through
    said = []
    with pytest.raises(PreflightError, match=r"error\(s\) found before building \(stacks: s\); nothing was built"):
        gate(prepare(spec), say=said.append)
    [token] = [f for f in lint_spec(spec, [spec.stacks["s"]]) if f.severity == "error"]
    assert token.rule == "IB110" and token.key == "runtimes.e.params.env.HF_TOKEN"
    # The spec's lint names the key; the rendered Dockerfile's lint (the ENV line) reports it as well.
    assert token.render() in said and all("IB110" in line for line in said if line.startswith("error"))
    assert token.render().startswith(f"error IB110 [s] {spec.file}:{token.line}: runtimes.e.params.env.HF_TOKEN: ")

    spec = load_spec(write_stacks(tmp_path / "arch", spec_data(S("ngc2509", ["site"], runtime="e"),
                                                                {"runtimes": {"e": env(TORCH_CUDA_ARCH_LIST="8.0")}})))
    assert [f.rule for f in gate(prepare(spec), say=lambda line: None).findings if f.severity == "warning"] == ["IB105"]
    with pytest.raises(PreflightError):
        gate(prepare(spec), say=lambda line: None, strict=True)


def test_check_lint_and_the_build_gate_judge_alike(kinds_copy):
    """One review for all three: a fragile pattern in a site's own kind fragment shows only in its rendered
    Dockerfile. `check` refuses it, so `lint stacks.yaml` and the build gate must refuse it too, with the
    same findings (before, the gate ran no rendered lint and `lint` no preflight)."""
    from builder.errors import PreflightError
    from builder.prepared import prepare
    from builder.rules.review import gate
    root = kinds_copy("site")
    shutil.copy2(STACKS, root / "stacks.yaml")
    with (root / "layers" / "runtime-env" / "fragment.j2").open("a") as f:
        f.write("RUN git clone https://github.com/NVIDIA/apex /opt/apex || true\n")
    check = run_cli("check", "stack=cpu-smoke", "-f", root / "stacks.yaml")
    assert check.code == 3 and "error IB107 [cpu-smoke]" in check.out and "rendered Dockerfile line" in check.out
    lint = run_cli("lint", root / "stacks.yaml")
    assert lint.code == 3 and "error IB107 [cpu-smoke]" in lint.out
    said = []
    with pytest.raises(PreflightError, match="nothing was built"):
        spec = load_spec(root / "stacks.yaml")
        gate(prepare(spec, [spec.stacks["cpu-smoke"]]), say=said.append)
    check_lines = [l for l in check.out.splitlines() if l.startswith(("error", "warning", "unknown"))]
    assert [l for l in "\n".join(said).splitlines() if l.startswith(("error", "warning", "unknown"))] == check_lines
    assert set(check_lines) <= set(lint.out.splitlines())


def test_shell_words_are_read_like_shlex_and_in_linear_time():
    """lint's word splitter gives shlex.split's words (its fallback on an unterminated quote included),
    without shlex's character-by-character concatenation: a 1 MiB package name took 26 s in lint."""
    import random
    import shlex
    import time
    from builder.core.shell import words
    rng = random.Random(7)
    for _ in range(20000):
        text = "".join(rng.choice("ab '\"\\ \t$-=\n") for _ in range(rng.randint(0, 16)))
        try:
            want = tuple(shlex.split(text, posix=True))
        except ValueError:
            want = tuple(text.split())
        assert words.__wrapped__(text) == want, repr(text)
    start = time.perf_counter()
    words.__wrapped__("pip install " + "a" * 4 * 2**20 + "==1.0")
    assert time.perf_counter() - start < 5     # a sanity bound; benchmarks/hostile_inputs.py has the numbers


def test_a_run_is_read_as_bash_runs_it_in_linear_time():
    """shellread gives each command with the operator after it (quotes respected); 200,000 quoted apt names in
    one RUN are one command (the splitter before it took 2.9 s for 50,000 when it copied a segment per quote)."""
    import time
    from builder.core.shellread import read
    cmds, _ = read("a && b 'c;d' | e\nf")
    assert [(c.text, c.sep, c.offset) for c in cmds] == [("a", "&&", 0), ("b 'c;d'", "|", 5), ("e", "\n", 15),
                                                          ("f", "", 17)]
    cmds, _ = read('x="a || b"; y')
    assert [(c.text, c.sep, c.offset) for c in cmds] == [('x="a || b"', ";", 0), ("y", "", 12)]
    start = time.perf_counter()
    cmds, _ = read("apt-get install -y -- " + " ".join(f"'pkg{i:06d}'" for i in range(200000)))
    assert len(cmds) == 1
    assert time.perf_counter() - start < 5     # a sanity bound; benchmarks/hostile_inputs.py has the numbers
