"""Lint on the patterns of real LLM-training Dockerfiles (issue 11, part 3). One fixture per class of
false finding seen on 12 public Dockerfiles (each must give no finding of the named rules) and one per
class of fragile spot the lint missed (each must give the rule, line and severity). The corpus these
classes come from is judged in docs/lint-corpus.yaml; benchmarks/lint_corpus.py measures it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from builder.rules.lint import lint_dockerfile

SHA = "0123456789abcdef0123456789abcdef01234567"
NGC = "FROM nvcr.io/nvidia/pytorch:25.09-py3@sha256:" + "a" * 64 + "\n"        # CUDA 13.0.1, torch 2.9.0a0
NGC_2408 = "FROM nvcr.io/nvidia/pytorch:24.08-py3@sha256:" + "b" * 64 + "\n"   # CUDA 12.6
CUDA124 = "FROM nvidia/cuda:12.4.1-devel-ubuntu22.04@sha256:" + "c" * 64 + "\n"


def rules(text: str) -> list[str]:
    return sorted(f"{f.rule}:{f.line}" for f in lint_dockerfile(text, "Dockerfile"))


# -- false findings: none of the named rules may fire ---------------------------------------------

CLEAN = [
    # RUN heredocs and scripts under -e: a failing line stops the script, ';' and newlines included.
    ("heredoc-bash-ex", "IB107", NGC + 'RUN bash -ex <<"EOF"\n    apt-get update\n    apt-get install -y jq\n'
     "    pip install six==1.16.0\nEOF\n"),
    ("heredoc-bash-after-tag", "IB107", NGC + 'RUN <<"EOF" bash -exu -o pipefail\napt-get update\n'
     "apt-get install -y --no-install-recommends jq\nuv pip install six==1.16.0\nEOF\n"),
    ("heredoc-set-e-inside", "IB107", NGC + "RUN <<EOF\nset -euo pipefail\napt-get update\napt-get install -y jq\nEOF\n"),
    ("shell-bash-e", "IB107", NGC + 'SHELL ["/bin/bash", "-eo", "pipefail", "-c"]\n'
     "RUN pip install six==1.16.0; pip install idna==3.7\n"),
    ("set-ex", "IB107", NGC + "RUN set -ex; pip install six==1.16.0; pip install idna==3.7\n"),
    ("set-euo-pipefail", "IB107", NGC + "RUN set -euo pipefail && apt-get update; apt-get install -y jq\n"),
    # pip uninstall is not an install (nor a TE build, nor a torch replacement).
    ("pip-uninstall", "IB103 IB104 IB109", NGC + "RUN pip uninstall -y transformer_engine flash_attn xgboost\n"
     "RUN pip3 uninstall -y transformer-engine torch\n"),
    # git checkout of paths.
    ("git-checkout-dot", "IB101 IB102", NGC + f"RUN git clone https://github.com/o/p /p && cd /p && git checkout {SHA} \\\n"
     " && git checkout . && git checkout -- setup.py\n"),
    # git fetch <full sha>; git checkout FETCH_HEAD (literal, and through an ARG default).
    ("git-fetch-sha", "IB101 IB102", NGC + f"RUN git clone https://github.com/o/p /p && cd /p \\\n"
     f" && git fetch origin {SHA} && git checkout FETCH_HEAD\n"),
    ("git-fetch-arg-sha", "IB101 IB102", NGC + f"ARG DEEPEP_COMMIT={SHA}\nRUN bash -ex <<'EOF'\n"
     "git clone https://github.com/deepseek-ai/DeepEP.git\ncd DeepEP\ngit fetch origin $DEEPEP_COMMIT\n"
     "git checkout FETCH_HEAD\nEOF\n"),
    # option values are not requirements.
    ("pip-option-values", "IB103", NGC + "RUN pip install --resume-retries 999 -i https://mirror/simple \\\n"
     "    --extra-index-url https://download.pytorch.org/whl/cu130 -c /c.txt --target /opt/t \\\n"
     "    --trusted-host mirror --retries 5 six==1.16.0\n"),
    ("uv-option-values", "IB103", NGC + "RUN uv pip install --python /opt/venv/bin/python --index-strategy unsafe-best-match "
     "--torch-backend cu130 six==1.16.0\n"),
    # comments inside a heredoc are not package names.
    ("heredoc-comment", "IB103 IB104", NGC + "RUN bash -e <<'EOF'\n# uv pip install which can fail\n"
     "uv pip install ninja==1.11.1  # to speed up the flash-attn build\nEOF\n"),
    # shell keywords after ';' in if/fi and for loops.
    ("if-then-else-fi", "IB107", NGC + 'RUN if [ "$X" = 1 ]; then pip install six==1.16.0; else pip install idna==3.7; fi\n'),
    ("for-do-done-exit", "IB107", NGC + "RUN for f in a b; do pip install -r $f.txt || exit 1; done\n"),
    ("case-esac", "IB107", NGC + 'RUN case "$A" in x) pip install six==1.16.0 ;; *) exit 1 ;; esac\n'),
    # names that merely end in 'token'.
    ("tiktoken", "IB110", NGC + "RUN pip install tiktoken==0.7.0 tokenizers==0.19.1\nENV HF_TOKEN_PATH=/run/secrets/hf\n"
     "ENV TOKENIZERS_PARALLELISM=false\n"),
    # flash-attn: a prebuilt wheel compiles nothing; a source build uses its own list (FLASH_ATTN_CUDA_ARCHS).
    ("flash-attn-wheel-url", "IB104", NGC_2408 + "RUN pip install https://github.com/Dao-AILab/flash-attention/releases/"
     "download/v2.7.4.post1/flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp310-cp310-linux_x86_64.whl\n"),
    ("flash-attn-own-archs", "IB104", NGC + 'RUN FLASH_ATTN_CUDA_ARCHS="90;100" pip install flash-attn==2.8.3 --no-build-isolation\n'),
    ("flash-attn-wheels-dir", "IB104", NGC + "RUN pip3 install wheels/flash_attn-*.whl\n"),
    # the base's own torch, and torch after the base's was removed on purpose.
    ("no-deps-same-torch", "IB109", NGC + "RUN pip install --no-deps torch==2.9.0a0+50eac811a6\n"),
    ("pytorch-image-same-torch", "IB109", "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel@sha256:" + "d" * 64 + "\n"
     "RUN pip install --no-deps torch==2.5.1\n"),
    ("torch-after-uninstall", "IB109", NGC_2408 + "RUN pip uninstall -y torch torchvision transformer_engine apex\n"
     "RUN pip install torch==2.7.1 torchvision==0.22.1\n"),
    # harmless cleanup that may fail.
    ("cleanup-or-true", "IB107", NGC + "RUN rm -rf /tmp/build || true\nRUN apt-get clean || true\n"
     "RUN pip cache purge || true\nRUN find /root/.cache -name '*.a' 2>/dev/null || true\n"),
]


@pytest.mark.parametrize("id,forbidden,text", CLEAN, ids=[c[0] for c in CLEAN])
def test_a_real_false_finding_class_gives_no_finding(id, forbidden, text):
    found = [f for f in lint_dockerfile(text, "Dockerfile") if f.rule in forbidden.split()]
    assert not found, "\n".join(f.render() for f in found)


# -- missed fragile patterns: rule, line and severity ---------------------------------------------

@dataclass
class Missed:
    id: str
    text: str            # the line the finding points at carries '# <=='
    rule: str
    severity: str
    message: str         # regular expression


MISSED = [
    Missed("base-through-arg", "ARG BASE=nvcr.io/nvidia/pytorch:24.01-py3\nFROM ${BASE}  # <==\n",
           "IB112", "warning", r"FROM \$\{BASE\} \(nvcr\.io/nvidia/pytorch:24\.01-py3\) by tag alone"),
    Missed("base-through-several-args", 'ARG CUDA_VERSION="12.6.3"\nARG UBUNTU="22.04"\n'
           "FROM nvidia/cuda:$CUDA_VERSION-devel-ubuntu$UBUNTU AS b  # <==\n",
           "IB112", "warning", r"nvidia/cuda:12\.6\.3-devel-ubuntu22\.04\) by tag alone"),
    Missed("cu12-on-cuda13-through-arg", "ARG BASE=nvcr.io/nvidia/pytorch:25.09-py3@sha256:" + "a" * 64 + "\nFROM $BASE\n"
           "RUN pip install nvidia-cudnn-cu12==9.1.0.70  # <==\n",
           "IB108", "error", r"built for CUDA 12, the base has CUDA 13\.0\.1"),
    Missed("cu12-on-env-cuda13", "FROM ubuntu:24.04@sha256:" + "e" * 64 + "\nENV CUDA_VERSION=13.0.1\n"
           "RUN pip -v install cupy-cuda12x==13.3.0  # <==\n", "IB108", "error", r"cupy-cuda12x==13\.3\.0"),
    Missed("cu12-flash-attn-wheel-on-cuda13", NGC + "RUN pip install https://github.com/Dao-AILab/flash-attention/releases/"
           "download/v2.8.3/flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl  # <==\n",
           "IB108", "error", r"built for CUDA 12, the base has CUDA 13"),
    Missed("torch-local-version-minor", CUDA124 + "RUN pip install torch==2.5.1+cu121  # <==\n",
           "IB108", "warning", r"torch==2\.5\.1\+cu121.* CUDA 12\.1, the base has CUDA 12\.4"),
    Missed("torch-index-minor", CUDA124 + "RUN pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu121  # <==\n",
           "IB108", "warning", r"CUDA 12\.1, the base has CUDA 12\.4"),
    Missed("torch-index-through-arg", CUDA124 + "ARG CUDA=cu118\n"
           "RUN pip install torch==2.5.1 --extra-index-url https://download.pytorch.org/whl/$CUDA  # <==\n",
           "IB108", "error", r"CUDA 11, the base has CUDA 12\.4"),
    Missed("curl-pipe-sh", NGC + "RUN curl -LsSf https://astral.sh/uv/install.sh | sh  # <==\n",
           "IB113", "warning", r"runs a script fetched from https://astral\.sh/uv/install\.sh"),
    Missed("wget-pipe-bash", NGC + "RUN apt-get update && \\\n    wget -qO- https://x.example/setup | sudo bash  # <==\n",
           "IB113", "warning", r"runs a script fetched from https://x\.example/setup"),
    Missed("get-pip", NGC + "RUN curl -O https://bootstrap.pypa.io/get-pip.py && \\\n    python3 get-pip.py  # <==\n",
           "IB113", "warning", r"get-pip\.py"),
    Missed("installer-script", NGC + "RUN wget https://repo.anaconda.com/miniconda/Miniconda3-latest-Linux-x86_64.sh \\\n"
           "    && bash Miniconda3-latest-Linux-x86_64.sh -b  # <==\n", "IB113", "warning", r"Miniconda3-latest"),
    Missed("ssh-keygen", NGC + "RUN mkdir -p /root/.ssh && ssh-keygen -t ed25519 -N '' -f /root/.ssh/id_ed25519  # <==\n",
           "IB114", "error", r"private key generated into the layer"),
    Missed("ssh-host-keys", NGC + "RUN apt-get install -y openssh-server=1:8.9p1-3 && ssh-keygen -A  # <==\n",
           "IB114", "error", r"private key generated into the layer"),
    Missed("apex-python-only-git-url", NGC + "RUN pip install -v --no-build-isolation \\\n"
           "    git+https://github.com/NVIDIA/apex.git@810ffae374a2b9cb4b5c5e28eaeca7d7998fca0c  # <==\n",
           "IB115", "warning", r"Apex is installed without its CUDA extensions"),
    Missed("apex-python-only-checkout", NGC + "RUN git clone https://github.com/NVIDIA/apex /apex && cd /apex \\\n"
           " && git checkout 810ffae374a2b9cb4b5c5e28eaeca7d7998fca0c && pip install -v --no-build-isolation .  # <==\n",
           "IB115", "warning", r"Python-only Apex"),
    Missed("conda-unpinned", NGC + "RUN conda install -y -c conda-forge numba  # <==\n",
           "IB103", "error", r"conda installs 'numba' without an exact version"),
    Missed("mamba-prefix-pin", NGC + "RUN mamba create -y -n py python=3.10  # <==\n",
           "IB103", "error", r"mamba installs 'python=3\.10' without an exact version"),
    Missed("pip-dash-v-install", NGC + "RUN pip -v install --no-build-isolation transformer_engine[pytorch]  # <==\n",
           "IB103", "error", r"'transformer_engine\[pytorch\]' without an exact version"),
    Missed("pip-version-suffix", NGC + "RUN pip3.11 install wandb  # <==\n", "IB103", "error", r"'wandb'"),
    Missed("pip-version-variable", NGC + "ARG PY=3.12\nRUN pip${PY} install wandb  # <==\n", "IB103", "error", r"'wandb'"),
    Missed("python-m-pip", NGC + "RUN python3.10 -m pip install wandb  # <==\n", "IB103", "error", r"'wandb'"),
    Missed("conda-bin-pip", NGC + "RUN /opt/conda/bin/pip install wandb  # <==\n", "IB103", "error", r"'wandb'"),
    Missed("uv-pip", NGC + "RUN uv pip install wandb  # <==\n", "IB103", "error", r"'wandb'"),
    Missed("wildcard-pin", NGC + "RUN pip install protobuf==3.20.*  # <==\n", "IB103", "error", r"'protobuf==3\.20\.\*'"),
    Missed("clone-fallback", NGC + "RUN git clone --branch v1.2 https://x/p.git /p \\\n"
           "    || git clone https://x/p.git /p  # <==\n", "IB101", "error", r"fallback clone .*default branch"),
    Missed("git-url-without-dot-git", NGC + "RUN pip install git+https://github.com/fanshiqing/grouped_gemm@v1.1.4  # <==\n",
           "IB101", "error", r"floating git ref 'v1\.1\.4'"),
    Missed("pep508-git-main", NGC + 'RUN pip install "peft @ git+https://github.com/huggingface/peft.git@main"  # <==\n',
           "IB101", "error", r"floating git ref 'main'"),
    Missed("checkout-through-arg", NGC + "ARG REF=main\nRUN git clone https://x/p /p && cd /p \\\n"
           " && git checkout $REF  # <==\n", "IB101", "error", r"'main'"),
    Missed("for-loop-install", NGC + "RUN for f in a b; do pip install -r $f.txt; done  # <==\n",
           "IB107", "warning", r"in a loop: .* only the last"),
    Missed("heredoc-without-e", NGC + "RUN <<EOF\npip install six==1.16.0  # <==\nrm -rf /root/.cache\nEOF\n",
           "IB107", "warning", r"the exit code of pip \.\.\. is ignored"),
]


def marked(text: str) -> int:
    return next(i + 1 for i, line in enumerate(text.splitlines()) if "# <==" in line)


@pytest.mark.parametrize("case", MISSED, ids=lambda c: c.id)
def test_a_missed_fragile_pattern_is_found(case):
    text = case.text.replace("  # <==", "")
    found = lint_dockerfile(text, "Dockerfile")
    hits = [f for f in found if f.rule == case.rule and re.search(case.message, f.message)]
    assert hits, "\n".join(f.render() for f in found)
    assert (hits[0].severity, hits[0].line) == (case.severity, marked(case.text)), hits[0].render()
    assert hits[0].fix and hits[0].source


def test_new_rules_are_documented():
    from builder.rules.lint import PATTERNS
    assert {"IB113", "IB114", "IB115"} <= set(PATTERNS)


@pytest.mark.parametrize("run", [
    "cd /apex && APEX_CPP_EXT=1 APEX_CUDA_EXT=1 pip install -v --no-build-isolation .",
    'cd /apex && pip install -v --no-build-isolation --config-settings "--build-option=--cuda_ext" ./',
    "cd apex && pip install -v --global-option=--cpp_ext --global-option=--cuda_ext ./",
    "cd /apex && APEX_CUDA_EXT=0 pip install .",      # a Python-only Apex, asked for in so many words
    "pip uninstall -y apex",
    "cd /megatron && pip install .",
])
def test_apex_with_its_cuda_extensions_or_a_stated_choice_is_not_flagged(run):
    assert not [r for r in rules(NGC + f"RUN {run}\n") if r.startswith("IB115")]


def test_apex_cuda_ext_from_an_env_of_the_stage_counts():
    assert not [r for r in rules(NGC + "ENV APEX_CUDA_EXT=1\nRUN cd /apex && pip install --no-build-isolation .\n")
                if r.startswith("IB115")]


def test_a_git_url_held_in_an_arg_and_uv_python_are_read():
    found = rules(NGC + "ARG apex_url=git+https://github.com/NVIDIA/apex.git@25.04\nRUN pip install ${apex_url}\n"
                  "ARG PY=3.12\nRUN uv python install ${PY}\n")
    assert found == ["IB101:3", "IB103:5"]
