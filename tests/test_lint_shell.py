"""Issue 37: the lint reads a Dockerfile as BuildKit does and its RUNs as bash runs them. One pair per cause of
the held-out findings: a small Dockerfile with the pattern and the finding expected (or not), and its twin that
differs in the one thing the cause is about. A finding on a command says the shell path that reaches it."""
from __future__ import annotations

import pytest

from builder.core import catalog
from builder.core.shellread import read
from builder.rules.lint import lint_dockerfile

NGC = "FROM nvcr.io/nvidia/pytorch:25.03-py3@sha256:" + "a" * 64 + "\n"      # CUDA 12.8.1, torch, Python 3.12.3
CUDA12 = "FROM nvidia/cuda:12.4.1-devel-ubuntu22.04@sha256:" + "b" * 64 + "\n"
UBUNTU = "FROM ubuntu:22.04@sha256:" + "c" * 64 + "\n"
HEX = "0123456789abcdef0123456789abcdef01234567"


def found(text: str, rule: str) -> list:
    return [f for f in lint_dockerfile(text, "Dockerfile") if f.rule == rule]


# -- shell control flow ---------------------------------------------------------------------------------

@pytest.mark.parametrize("package, expected", [("cupy-cuda13x==13.6.0", 0), ("cupy-cuda12x==13.6.0", 1)])
def test_an_install_in_a_cuda_branch_is_judged_against_that_branch(package, expected):
    """`if [ "$CUDA_MAJOR" = 13 ]` runs only for CUDA 13: a cu13 package there is right whatever the base's CUDA
    (6 false findings in one held-out file read it as unconditional); a cu12 one there is wrong, and the finding
    names the branch."""
    text = NGC + "ARG CUDA_MAJOR\n" + \
        f'RUN if [ "$CUDA_MAJOR" = 13 ]; then pip install {package}; else pip install cupy-cuda12x==13.6.0; fi\n'
    hits = found(text, "IB108")
    assert len(hits) == expected, hits
    for f in hits:
        assert f.line == 3 and "in the branch where CUDA_MAJOR = 13" in f.message and "the branch is for CUDA 13" \
            in f.message, f.message


@pytest.mark.parametrize("run, expected", [
    ('if nvcc --version | grep -q "release 13"; then pip install cupy-cuda13x==13.6.0; '
     'else pip install cupy-cuda12x==13.6.0; fi', []),
    ('case "$(nvcc --version)" in *13.*) pip install cupy-cuda13x==13.6.0 ;; *) pip install cupy-cuda12x==13.6.0 ;; esac',
     []),
    ("if [ -d /usr/local/cuda-13 ]; then pip install cupy-cuda13x==13.6.0; fi", []),
    # twins: the guard names another CUDA than the package's (unknown: lint cannot run nvcc), and no guard at all
    ('if nvcc --version | grep -q "release 12"; then pip install cupy-cuda13x==13.6.0; fi', ["unknown"]),
    ("pip install cupy-cuda13x==13.6.0", ["error"]),
])
def test_a_cuda_test_lint_cannot_evaluate_guards_its_branch(run, expected):
    """On CUDA 12.4.1, `if nvcc --version | grep -q "release 13"; then pip install cupy-cuda13x` was an IB108 error
    (so was the same through `case "$(nvcc --version)"`): the branch runs only where the test finds CUDA 13. A
    guard naming the package's CUDA (or an else of one naming the base's) is what it should be; one naming
    another is unknown, with the test quoted; no guard is the error."""
    assert [f.severity for f in found(CUDA12 + f"RUN {run}\n", "IB108")] == expected


@pytest.mark.parametrize("cuda, expected", [("12.8", 0), ("13.0", 1)])
def test_a_case_over_the_cuda_version_takes_the_arm_that_matches(cuda, expected):
    """A `case` that sets the index URL per CUDA version: the arm the known version matches decides (before, the
    last arm always won and a CUDA 13 index was reported on a CUDA 12 base); with the version unknown, the URL is
    unknown and nothing is claimed."""
    text = NGC + f"ARG CUDA={cuda}\n" + (
        'RUN case "$CUDA" in \\\n'
        '      12.*) IDX=https://download.pytorch.org/whl/cu128 ;; \\\n'
        '      13.*) IDX=https://download.pytorch.org/whl/cu130 ;; \\\n'
        '    esac && pip install --index-url "$IDX" torchvision==0.21.0\n')
    hits = found(text, "IB108")
    assert len(hits) == expected, hits
    assert not found(text.replace(f"ARG CUDA={cuda}", "ARG CUDA"), "IB108")


@pytest.mark.parametrize("checkout, expected", [("", 1), (f" && git -C y checkout {HEX}", 0)])
def test_a_clone_right_after_then_is_read(checkout, expected):
    text = UBUNTU + f"RUN if [ -n \"$X\" ]; then git clone https://github.com/x/y{checkout}; fi\n"
    hits = found(text, "IB101")
    assert len(hits) == expected, hits
    assert all("in the branch where" in f.message for f in hits)


def test_the_reader_follows_lists_branches_loops_functions_and_substitutions():
    cmds, deep = read('set -e\nf() { pip install a; }\nfor x in 1 2; do g; done\nif t; then h; elif u; then i; else j; fi\n'
                      'V=$(k || echo none) && cd /opt && l > out.txt 2>&1\n')
    by = {c.text.split()[0] if c.text else "": c for c in cmds}
    assert not deep
    assert by["pip"].function == "f" and by["g"].loop and by["t"].test
    assert str(by["h"].path[0]) == "t" and [str(c) for c in by["i"].path] == ["not (t)", "u"]
    assert [str(c) for c in by["j"].path] == ["not (t)", "not (u)"]
    assert by["k"].subst and by["k"].sep == "||" and by["k"].fallback == "echo none"
    assert by["l"].cwd == "/opt" and by["l"].writes == ("out.txt",)


# -- variables: stages, bases, substitutions --------------------------------------------------------------

@pytest.mark.parametrize("parent, expected", [("build", 0), ("ubuntu:22.04@sha256:" + "c" * 64, 1)])
def test_a_stage_built_from_another_inherits_its_args(parent, expected):
    """BuildKit: a stage FROM another stage inherits its ARGs and ENV (docs.docker.com/build/building/variables).
    Re-declaring a global ARG in the parent is enough; a stage FROM an image starts empty."""
    text = ("ARG TORCH=2.5.1\n" + UBUNTU.replace("\n", " AS build\n") + "ARG TORCH\n"
            f"FROM {parent}\nRUN echo torch=$TORCH > /version\n")
    assert len(found(text, "IB106")) == expected


@pytest.mark.parametrize("base, expected", [(CUDA12, 0), (UBUNTU, 1)])
def test_a_variable_the_base_image_sets_is_not_missing(base, expected):
    """nvidia/cuda sets CUDA_VERSION in its own ENV: a global ARG of that name used in the stage is not empty."""
    text = "ARG CUDA_VERSION=12.4.1\n" + base + "RUN echo cuda=$CUDA_VERSION > /version\n"
    assert len(found(text, "IB106")) == expected
    assert catalog.base_env("nvidia/cuda:12.4.1-devel-ubuntu22.04")["CUDA_VERSION"] == "12.4.1"


@pytest.mark.parametrize("base, expected", [("FROM nvcr.io/nvidia/jax:25.04-py3@sha256:" + "d" * 64 + "\n", 0), (UBUNTU, 1)])
def test_the_env_an_ngc_jax_base_sets_is_not_missing(base, expected):
    """NGC JAX sets CUDA_VERSION and XLA_FLAGS (JAX-Toolbox's Dockerfiles): an ARG of that name is not empty there."""
    text = "ARG CUDA_VERSION=12.8.1\n" + base + "RUN echo cuda=$CUDA_VERSION > /version\n"
    assert len(found(text, "IB106")) == expected
    assert "XLA_FLAGS" in catalog.base_env("nvcr.io/nvidia/jax:25.04-py3")


@pytest.mark.parametrize("base, expected", [(NGC, 0), (CUDA12, 1)])
def test_the_arch_list_an_ngc_base_sets_is_not_missing(base, expected):
    """NGC PyTorch sets TORCH_CUDA_ARCH_LIST for the GPUs of its release; nvidia/cuda sets none."""
    text = base + "RUN DS_BUILD_FUSED_ADAM=1 pip install deepspeed==0.16.4\n"
    assert len(found(text, "IB104")) == expected
    assert "TORCH_CUDA_ARCH_LIST" in catalog.base_env("nvcr.io/nvidia/pytorch:25.03-py3")


@pytest.mark.parametrize("run, expected", [
    ("V=$(git describe --tags || echo unknown) && echo $V > /version", 0),
    ('LABEL_V="$(cat /v 2>/dev/null || echo unknown)"; echo "$LABEL_V"', 0),
    ("V=`git describe --tags || echo unknown` && echo $V > /version", 0),       # backticks: a substitution too
    ("git describe --tags > /version || echo unknown", 1),
])
def test_a_fallback_inside_a_substitution_is_a_value_not_a_hidden_failure(run, expected):
    assert len(found(UBUNTU + f"RUN {run}\n", "IB107")) == expected


# -- names and meaning ------------------------------------------------------------------------------------

@pytest.mark.parametrize("env, expected", [
    ("SCCACHE_S3_NO_CREDENTIALS=0", 0), ("HF_TOKEN_PATH=/run/secrets/hf", 0), ("USE_TOKEN=1", 0),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY", 1), ("HF_TOKEN=hf_abcdefghijklmnop", 1),
])
def test_a_secret_is_judged_by_its_meaning_not_its_name_alone(env, expected):
    assert len(found(UBUNTU + f"ENV {env}\n", "IB110")) == expected


@pytest.mark.parametrize("args, expected", [
    ("https://example.com/whl/cu118/mytool-1.0-py3-none-any.whl", 0),             # a folder named whl
    ("--index-url https://download.pytorch.org/whl/cu118 torch==2.4.1", 1),       # torch's CUDA 11.8 index
])
def test_whl_in_a_path_is_no_cuda_index_unless_pip_takes_it_as_one(args, expected):
    assert len([f for f in found(CUDA12 + f"RUN pip install {args}\n", "IB108") if f.severity != "unknown"]) == expected


# -- downloads followed by target ---------------------------------------------------------------------------

@pytest.mark.parametrize("run, expected", [
    ("curl -fsSL https://example.com/get -o installer.sh && bash installer.sh --yes", 1),
    ("wget -q -O /tmp/inst https://example.com/get && sh /tmp/inst", 1),
    ("curl -fsSLO https://example.com/install.sh && chmod +x install.sh && ./install.sh", 1),
    ("curl -fsSL https://example.com/get -o installer.sh && echo '" + "0" * 64 + "  installer.sh' | sha256sum -c - "
     "&& bash installer.sh", 0),
    ("curl -fsSL https://example.com/get -o installer.sh && cat installer.sh", 0),
])
def test_a_download_is_followed_by_its_target_not_by_its_url(run, expected):
    assert len(found(UBUNTU + f"RUN {run}\n", "IB113")) == expected


@pytest.mark.parametrize("run, expected", [
    ("wget -q -O - https://example.com/openmpi-4.1.6.tar.gz | tar xzf - && cd openmpi-4.1.6 && ./configure && make install", 1),
    ("aria2c https://example.com/tool_1.0_amd64.deb && dpkg -i tool_1.0_amd64.deb", 1),
    ("wget https://example.com/yq_linux_amd64 -O /usr/local/bin/yq && chmod +x /usr/local/bin/yq", 1),
    ("wget https://example.com/tool_1.0_amd64.deb && echo '" + "0" * 64 + "  tool_1.0_amd64.deb' | sha256sum -c && "
     "dpkg -i tool_1.0_amd64.deb", 0),
    ("wget https://example.com/wheels/tool-1.0-py3-none-any.whl && pip install tool-1.0-py3-none-any.whl", 0),
])
def test_a_download_put_into_the_image_unverified_is_found(run, expected):
    assert len(found(UBUNTU + f"RUN {run}\n", "IB117")) == expected


def test_a_download_installed_by_a_later_run_is_followed_across_runs():
    text = UBUNTU + "RUN aria2c https://example.com/tool_1.0_amd64.deb\nRUN apt-get install -y ./tool_1.0_amd64.deb\n"
    hits = found(text, "IB117")
    assert [f.line for f in hits] == [2] and "installed with apt at line 3" in hits[0].message


# -- what a package does to torch ----------------------------------------------------------------------------

def test_a_package_that_pins_its_own_torch_replaces_the_bases():
    """xformers' releases require one torch exactly (their published metadata): unpinned over NGC's torch it
    replaces it; over a base with no torch it replaces nothing."""
    releases, source = catalog.torch_pins()["xformers"]
    assert releases and "METADATA" in source
    hits = found(NGC + "RUN pip install xformers\n", "IB109")
    assert len(hits) == 1 and "xformers is unpinned: its newest release read" in hits[0].message, hits
    assert not found(CUDA12 + "RUN pip install xformers\n", "IB109")


@pytest.mark.parametrize("run, expected", [
    ("pip install --no-deps xformers==0.0.28.post3", [("warning", "with --no-deps beside the base's torch")]),
    ("pip install xformers==0.0.28.post3", [("error", "over the base's torch")]),
    ("pip install --no-deps torch==2.5.1", [("error", "pip installs torch over the base's torch")]),
])
def test_no_deps_keeps_torch_but_not_the_abi(run, expected):
    """`pip install --no-deps xformers==0.0.28.post3` on NGC was said to install xformers "over the base's torch":
    --no-deps keeps torch; what is wrong is xformers' compiled code, built for torch 2.5.1 (a warning naming the
    ABI). torch itself with --no-deps still replaces torch."""
    hits = found(NGC + f"RUN {run}\n", "IB109")
    assert [(f.severity, words) for f, (_, words) in zip(hits, expected) if words in f.message] == expected, \
        [(f.severity, f.message) for f in hits]
    assert len(hits) == len(expected)


@pytest.mark.parametrize("python, expected", [("3.10", 1), ("3.12", 0), ("3.10.14", 0)])
def test_uv_venv_with_a_python_the_base_lacks_downloads_one(python, expected):
    """NGC 25.03 has Python 3.12.3: `uv venv --python 3.10` downloads the newest 3.10.x."""
    assert len(found(NGC + f"RUN uv venv --python {python} /opt/venv\n", "IB103")) == expected


# -- hostile input ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("run", [
    "a=$(" * 2000 + "x" + ")" * 2000,
    "if a; then " * 500 + "pip install x" + "; fi" * 500,
    'pip install "unterminated && git clone https://github.com/x/y',
    "<<EOF bash\n" + "echo line\n" * 20000 + "EOF",
    "{ " * 3000 + "true" + "; }" * 3000,
])
def test_hostile_shell_is_linted_without_a_crash(run):
    findings = lint_dockerfile(UBUNTU + "RUN " + run + "\n", "Dockerfile")
    deep = [f for f in findings if f.rule == "IB116"]
    assert all(f.severity == "unknown" and "did not read past" in f.message for f in deep)


@pytest.mark.parametrize("shape", ["ENV", "ARG", "shell"])
def test_variables_that_double_each_other_are_linted_in_bounded_memory(tmp_path, shape):
    """Under 1 kB of B=$A$A, C=$B$B, ... 40 times filled all memory (OOM-killed; MemoryError under 2 GB): an
    expansion grows by at most shell.MAX_EXPANSION, beyond which a reference stays unexpanded (not known).
    Run by the CLI in a process held to 1 GiB, so a regression is an error here, not the test runner killed."""
    import resource
    import subprocess
    import sys
    if shape == "shell":
        body = "RUN A0=xx; " + "; ".join(f"A{i}=$A{i - 1}$A{i - 1}" for i in range(1, 41)) + "; pip install torch==$A40\n"
    else:
        body = f"{shape} A0=xx\n" + "".join(f"{shape} A{i}=$A{i - 1}$A{i - 1}\n" for i in range(1, 41)) + \
            "RUN pip install torch==$A40\n"
    path = tmp_path / "bomb.Dockerfile"
    path.write_text(UBUNTU + body)
    assert path.stat().st_size < 1200

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "builder.cli", "lint", str(path)], capture_output=True,
                              text=True, timeout=120, preexec_fn=limit)
        assert proc.returncode in (0, 3) and "MemoryError" not in proc.stderr and "Traceback" not in proc.stderr, \
            (proc.returncode, proc.stderr[-2000:])


def test_an_expansion_keeps_a_reference_it_cannot_hold():
    from builder.core.shell import MAX_EXPANSION, expand
    big = "x" * (MAX_EXPANSION // 2 + 1)
    assert expand("$A", {"A": big}) == big
    assert expand("$A-$A", {"A": big}) == big + "-$A"          # the second would pass the bound: kept, unknown
    assert expand("${B:-$A}", {"A": "1.0"}) == "1.0" and expand("$C", {}) == "$C"


@pytest.mark.parametrize("make, words", [
    (lambda p: p.write_text(UBUNTU + "RUN <<EOF bash\n" + "echo line\n" * 120000 + "EOF\n"),
     "1.1 MiB: lint reads Dockerfiles of up to 1 MiB"),
    (lambda p: __import__("os").mkfifo(p), "not a regular file"),
    (lambda p: p.write_bytes(UBUNTU.encode() + b"RUN echo \xff\n"), "not UTF-8"),
])
def test_a_dockerfile_lint_cannot_read_is_refused_naming_it(tmp_path, make, words):
    """Over 1 MiB (a real Dockerfile is kB; a 45 MB heredoc ran for minutes), a FIFO (the read blocked for
    ever), bytes that are not UTF-8: exit 2, naming the file and why."""
    from conftest import run_cli
    path = tmp_path / "hostile.Dockerfile"
    make(path)
    res = run_cli("lint", str(path))
    assert res.code == 2 and "hostile.Dockerfile" in res.err and words in res.err, res.output


def test_a_heredoc_just_under_the_limit_is_linted_whole():
    """30,000 heredoc lines (0.3 MB): read in one pass (benchmarks/lint_speed.py times it), its last line too."""
    text = UBUNTU + "RUN <<EOF bash\n" + "echo line\n" * 30000 + "pip install six\nEOF\n"
    assert [f.line for f in lint_dockerfile(text, "Dockerfile") if f.rule == "IB103"] == [30003]


# -- the second reader's held-out set (docs/lint-corpus-2.yaml): one twin pair per class it found ---------

@pytest.mark.parametrize("default, expected", [("cu128", 0), ("cu130", 1)])
def test_cuda_is_judged_per_stage_through_the_stage_an_arg_names(default, expected):
    """lmdeploy: alternative base stages, the one built chosen by an ARG default; the CUDA a package is judged
    against is that stage's (the first FROM of the file is the other alternative)."""
    text = (f"ARG CUDA_STAGE={default}\n"
            "FROM nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:" + "1" * 64 + " AS cu130\n"
            "FROM nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:" + "2" * 64 + " AS cu128\n"
            "FROM ${CUDA_STAGE} AS dev\nRUN pip install nvidia-cudnn-cu12==9.1.0.70\n")
    assert len([f for f in found(text, "IB108") if f.severity == "error"]) == expected


@pytest.mark.parametrize("ref, verify, expected", [
    ("$BASELINE_REF", "", 0),                                                     # only a build argument knows it
    ("main", "", 1),                                                              # a branch fetched and checked out
    ("main", ' && test "$(git rev-parse HEAD)" = "$REF"', 0),                    # the build fails unless it is a commit
    (HEX, "", 0),
])
def test_fetch_head_is_what_was_fetched(ref, verify, expected):
    text = UBUNTU + f"ARG BASELINE_REF\nRUN git clone https://github.com/x/y && cd y && git fetch origin {ref} && " \
                    f"git checkout FETCH_HEAD{verify} && pip install .\n"
    hits = found(text, "IB101")
    assert len(hits) == expected, hits
    assert all("'main'" in f.message for f in hits)


@pytest.mark.parametrize("tag_default, expected", [("", 1), (f"={HEX}", 0)])
def test_a_checkout_in_a_branch_that_may_not_run_does_not_pin_the_clone(tag_default, expected):
    """NeMo-Aligner: `if [ ! -z $APEX_TAG ]; then git fetch ... && git checkout FETCH_HEAD; fi` with APEX_TAG
    empty by default builds the default branch; with a default commit the branch always runs."""
    text = UBUNTU + f"ARG APEX_TAG{tag_default}\nRUN git clone https://github.com/NVIDIA/apex && cd apex && \\\n" \
                    "    if [ ! -z $APEX_TAG ]; then git fetch origin $APEX_TAG && git checkout FETCH_HEAD; fi && \\\n" \
                    "    pip install -v --no-build-isolation --config-settings --build-option=--cuda_ext ./\n"
    hits = found(text, "IB101")
    assert len(hits) == expected, hits
    assert all(f.line == 3 and "only in the branch where" in f.message for f in hits)


@pytest.mark.parametrize("url, expected", [("git+${FLA_URL}", 0), ("git+https://github.com/fla-org/fla@main", 1)])
def test_a_git_url_only_a_build_argument_gives_is_not_judged(url, expected):
    text = UBUNTU + f'ARG FLA_URL\nRUN pip install --no-deps "{url}"\n'
    assert len(found(text, "IB101")) == expected


def test_a_package_beside_torch_is_not_blamed_for_torch():
    """xtuner: `pip install torchvision torch==${TORCH_VERSION}` replaces the base's torch with the torch asked
    for, and pip takes the torchvision that fits it: the finding names torch, not torchvision's newest release."""
    hits = found(NGC + 'ARG TORCH_VERSION\nRUN pip install torchvision torch==${TORCH_VERSION}\n', "IB109")
    assert len(hits) == 1 and "pip installs torch over" in hits[0].message and "torchvision" not in hits[0].message


@pytest.mark.parametrize("before, expected", [("RUN uv python install 3.11.12\n", 0), ("", 1)])
def test_uv_venv_after_uv_python_install_downloads_nothing(before, expected):
    text = UBUNTU + before + "RUN uv venv --python 3.11 /opt/venv\n"
    assert len(found(text, "IB103")) == expected


@pytest.mark.parametrize("child, expected", [('ARG FLASH_ATTN_CUDA_ARCHS="90"', 1), ('ARG FLASH_ATTN_CUDA_ARCHS="90;100"', 0)])
def test_arch_lists_are_compared_with_those_a_stage_inherits(child, expected):
    text = UBUNTU.replace("\n", " AS setup\n") + 'ENV TORCH_CUDA_ARCH_LIST="9.0 10.0"\n' \
        f"FROM setup AS flash\n{child}\nRUN pip install flash-attn==2.8.3 --no-build-isolation\n"
    hits = found(text, "IB105")
    assert len(hits) == expected and all(f.line == 4 for f in hits), hits


@pytest.mark.parametrize("parent, expected", [("setup", 0), ("ubuntu:22.04@sha256:" + "c" * 64, 1)])
def test_an_arg_of_another_stage_is_empty_unless_inherited(parent, expected):
    text = UBUNTU.replace("\n", " AS setup\n") + f"ARG TORCH_VERSION=2.6.0\nFROM {parent} AS dev\n" \
        'RUN if [ "x${TORCH_VERSION}" = "x2.6.0" ]; then pip install nvidia-nccl-cu12==2.25.1; fi\n'
    hits = found(text, "IB106")
    assert len(hits) == expected and all("an ARG of another stage (line 2)" in f.message for f in hits), hits


@pytest.mark.parametrize("source, expected", [("ghcr.io/astral-sh/uv:0.8.6", 1), ("ghcr.io/astral-sh/uv:0.8.6@sha256:"
                                                                                 + "d" * 64, 0), ("build", 0)])
def test_copy_from_an_image_by_tag_is_a_floating_reference(source, expected):
    text = UBUNTU.replace("\n", " AS build\n") + UBUNTU + f"COPY --from={source} /uv /bin/\n"
    assert len([f for f in found(text, "IB112") if "--from" in f.message]) == expected


@pytest.mark.parametrize("run, expected", [
    ("wget https://example.com/mft-${V}-x86_64-deb.tgz && tar -xzf mft-${V}-x86_64-deb.tgz && ./install.sh", 1),
    ("P=protoc-21.12.zip && curl -OL https://github.com/p/p/releases/download/v21.12/$P && unzip -o $P -d /usr/local", 1),
    ("wget https://example.com/mft-${V}-x86_64-deb.tgz && tar -xzf other-${V}.tgz", 0),
])
def test_a_download_and_its_use_are_matched_with_their_variables_put_in(run, expected):
    """open-instruct, TGI: the file's name through a variable, in the download and in tar/unzip: said at the
    download, where the checksum belongs, naming the line that uses it."""
    hits = found(UBUNTU + "ARG V=4.31.0\nRUN " + run + "\n", "IB117")
    assert len(hits) == expected, hits
    assert all(f.line == 3 and " at line 3 " in f.message for f in hits)


# -- the third set (docs/lint-corpus-3.yaml) ------------------------------------------------------------------

@pytest.mark.parametrize("arch, expected", [("", 1), ('ENV TORCH_CUDA_ARCH_LIST="9.0"\n', 0)])
def test_deepspeed_prebuilt_ops_compile_for_deepspeeds_own_list(arch, expected):
    hits = found(CUDA12 + arch + "RUN DS_BUILD_FUSED_LAMB=1 pip install deepspeed==0.7.7\n", "IB104")
    assert len(hits) == expected and all("DeepSpeed pre-builds them for its own default list" in f.message
                                         and "build host" not in f.message for f in hits)


@pytest.mark.parametrize("run, expected", [
    ("cd /opt && pip uninstall -y nvidia-modelopt || true", 0),
    ("pip install $WHEEL || (echo 'no wheel, building' && MAX_JOBS=1 pip install flash-attn==2.7.4.post1)", 0),
    ("pip install flash-attn==2.7.4.post1 || (echo 'failed' && true)", 1),
])
def test_a_fallback_that_does_the_work_another_way_hides_nothing(run, expected):
    assert len(found(UBUNTU + f"ARG WHEEL=x.whl\nRUN {run}\n", "IB107")) == expected


@pytest.mark.parametrize("run, expected", [
    ("PIP_CONSTRAINT= pip install --no-deps nvidia-cudnn-cu12==9.1.0.70", 0),
    ("PIP_CONSTRAINT= pip install nvidia-cudnn-cu12==9.1.0.70", 1),
    ("PIP_CONSTRAINT= pip install --no-deps torch==2.6.0", 1),
    ("export PIP_CONSTRAINT= && pip install --no-deps x==1", 1),
])
def test_turning_the_constraint_off_matters_where_the_install_can_reach_torch(run, expected):
    assert len([f for f in found(NGC + f"RUN {run}\n", "IB109") if "PIP_CONSTRAINT" in f.message]) == expected


def test_an_arg_default_with_alternative_forms_names_the_base():
    text = ('ARG CUDA_VERSION=11.3.1\nARG UBUNTU_VERSION=22.04\n'
            'ARG BASE_IMAGE=${CUDA_VERSION:+"nvidia/cuda:${CUDA_VERSION}-cudnn8-devel-ubuntu${UBUNTU_VERSION}"}\n'
            'ARG BASE_IMAGE=${BASE_IMAGE:-"ubuntu:${UBUNTU_VERSION}"}\nFROM ${BASE_IMAGE}\n')
    hits = found(text, "IB112")
    assert len(hits) == 1 and "nvidia/cuda:11.3.1-cudnn8-devel-ubuntu22.04" in hits[0].message
    assert "ubuntu:22.04" in found(text.replace("ARG CUDA_VERSION=11.3.1", "ARG CUDA_VERSION="), "IB112")[0].message


@pytest.mark.parametrize("run, expected", [
    ("ARG PYTHON_VERSION=3.10\nRUN curl -fsSL https://bootstrap.pypa.io/get-pip.py | python${PYTHON_VERSION} -", 1),
    ("ARG TOOL=cat\nRUN curl -fsSL https://bootstrap.pypa.io/get-pip.py | ${TOOL}", 0),
])
def test_the_interpreter_a_script_is_piped_to_is_read_through_variables(run, expected):
    assert len(found(UBUNTU + run + "\n", "IB113")) == expected


@pytest.mark.parametrize("run, expected", [
    ('ARG CERTIFI_VERSION=">=2022.12.7"\nRUN pip install certifi${CERTIFI_VERSION}', 1),
    ('ARG CERTIFI_VERSION="==2024.8.30"\nRUN pip install certifi${CERTIFI_VERSION}', 0),
    ("ARG WHAT='mosaicml[all]'\nRUN pip install \"${WHAT}\"", 1),
    ("ARG WHAT\nRUN pip install \"${WHAT}\"", 0),                      # only a build argument knows it
    ("RUN pipx install --include-deps transformers==4.57.1 tokenizers", 1),
])
def test_requirements_are_judged_with_their_variables_put_in(run, expected):
    assert len(found(UBUNTU + run + "\n", "IB103")) == expected


@pytest.mark.parametrize("url, expected", [("https://github.com/google/jax.git#main", 1),
                                           (f"https://github.com/google/jax.git#{HEX}", 0)])
def test_a_repository_url_with_a_ref_after_hash_is_a_git_pin(url, expected):
    text = UBUNTU + f"ARG URLREF_JAX={url}\nRUN git-clone.sh ${{URLREF_JAX}} /opt/jax\n"
    assert len(found(text, "IB101")) == expected


def test_a_fix_names_what_its_line_names():
    """A fix written for the line: the repository the clone names, the file the download is saved as."""
    [clone] = found(UBUNTU + "RUN git clone https://github.com/NVIDIA/apex /opt/apex\n", "IB101")
    assert "commit of https://github.com/NVIDIA/apex" in clone.fix, clone.fix
    [saved] = found(UBUNTU + "RUN curl -fsSL https://x.org/tool?v=1 -o /usr/local/bin/tool\n", "IB117")
    assert "'<sha256>  /usr/local/bin/tool'" in saved.fix, saved.fix


# -- the fourth set (docs/lint-corpus-4.yaml; held out: 97.5% precision, 96.7% recall): a twin per class ---

@pytest.mark.parametrize("later, expected", [
    ("ARG NEMO_RUN_COMMIT\nRUN cd /opt/Run && git fetch origin $NEMO_RUN_COMMIT && git checkout FETCH_HEAD\n", 0),
    ("RUN pushd /opt/Run && git checkout " + "a" * 40 + " && popd\n", 0),
    ("RUN cd /opt/Run && git checkout main\n", 2),           # the clone and the branch: both floating
    ("RUN cd /opt/Other && git checkout " + "a" * 40 + "\n", 1),  # another folder: the clone stays unpinned
])
def test_a_clone_pinned_in_a_later_run_by_a_build_argument_or_pushd(later, expected):
    """Megatron-Bridge: `RUN git clone .../Run` then, in a later RUN, `git fetch origin $NEMO_RUN_COMMIT && git
    checkout FETCH_HEAD` (a commit only a build argument gives, not judged in the clone's own RUN either); and
    `pushd DIR` enters DIR as cd does."""
    text = UBUNTU + "WORKDIR /opt\nRUN git clone --depth 1 https://github.com/NVIDIA-NeMo/Run\n" + later
    assert len(found(text, "IB101")) == expected


@pytest.mark.parametrize("install, expected", [("dpkg -i cuda-keyring_*.deb", 1), ("dpkg -i cuda-keyring_1.1-1_all.deb", 1),
                                               ("dpkg -i other_*.deb", 0)])
def test_an_installer_given_a_glob_installs_the_download_it_matches(install, expected):
    """lmdeploy's jetson image: `wget .../cuda-keyring_1.1-1_all.deb && dpkg -i cuda-keyring_*.deb`."""
    text = UBUNTU + "RUN cd /tmp && wget -q https://developer.download.nvidia.com/x/cuda-keyring_1.1-1_all.deb && " \
        f"{install}\n"
    assert len(found(text, "IB117")) == expected


@pytest.mark.parametrize("then, expected", [("RUN bash ~/miniconda.sh -b -p /opt/conda\n", 1),
                                            ("RUN echo 'abc  /root/miniconda.sh' | sha256sum -c && bash ~/miniconda.sh\n", 0),
                                            ("FROM ubuntu:22.04@sha256:" + "c" * 64 + "\nRUN bash ~/miniconda.sh\n", 0)])
def test_a_download_run_in_a_later_run_of_its_stage_is_followed(then, expected):
    """OLMo-core: the installer saved in one RUN and run in the next, unverified; a checksum checked first, or
    another stage (which does not have the file), is no finding."""
    text = UBUNTU + "RUN curl -fsSL -o ~/miniconda.sh https://github.com/conda-forge/miniforge/releases/latest/" \
        "download/Miniforge3-Linux-x86_64.sh\n" + then
    hits = found(text, "IB113")
    assert len(hits) == expected and all("at line 2" in f.message and f.line >= 3 for f in hits), hits


@pytest.mark.parametrize("add, expected", [("ADD https://github.com/ggml-org/llama.cpp/archive/refs/tags/b4827.tar.gz /opt/src/", 1),
                                           ("ADD --checksum=sha256:" + "e" * 64 + " https://github.com/ggml-org/llama.cpp/"
                                            "archive/refs/tags/b4827.tar.gz /opt/src/", 0)])
def test_a_url_added_then_unpacked_is_followed_to_its_tar(add, expected):
    """text-generation-inference: `ADD <url> /opt/src/` (BuildKit does not unpack a download) then `tar -xzf`;
    `ADD --checksum=` verifies it."""
    text = UBUNTU + f"WORKDIR /opt/src\n{add}\nRUN tar -xzf b4827.tar.gz\n"
    hits = found(text, "IB117")
    assert len(hits) == expected and all(f.line == 3 and "unpacked with tar at line 4" in f.message for f in hits), hits


def test_apex_without_an_arch_list_is_said_to_build_for_its_own_default_list():
    [hit] = found(UBUNTU + "RUN cd apex && pip install -v --global-option=--cuda_ext ./\n", "IB104")
    assert "Apex cross-compiles for its own default list" in hit.message and "build host" not in hit.message


@pytest.mark.parametrize("clone, expected", [("git clone --depth 1 https://github.com/NVIDIA-NeMo/Export-Deploy.git", 0),
                                             ("git clone -b main https://github.com/NVIDIA-NeMo/Export-Deploy.git", 0),
                                             ("git clone --depth 1 https://github.com/NVIDIA-NeMo/Export-Deploy.git ED", 1)])
def test_the_folder_a_clone_makes_is_read_past_its_options_and_git_suffix(clone, expected):
    """`--depth 1 URL.git` makes Export-Deploy (the 1 is --depth's, the .git is dropped); an explicit folder
    (ED) is another folder than the one the later RUN pins."""
    text = UBUNTU + f"WORKDIR /opt\nRUN {clone}\nARG C\n" \
        "RUN pushd /opt/Export-Deploy && git fetch origin $C && git checkout FETCH_HEAD && popd\n"
    assert len(found(text, "IB101")) == expected
