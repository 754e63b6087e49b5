"""How long `imgbuild lint` takes on a large Dockerfile and on hostile RUNs (issue 37: a 2,000-line
Dockerfile under 2 s; hostile shell linted without a crash, in time linear in its commands).

    .venv/bin/python benchmarks/lint_speed.py [--runs 5]

Each case is linted in this process (no start-up counted), best and median of --runs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from builder.rules.lint import lint_dockerfile  # noqa: E402

BASE = "FROM nvcr.io/nvidia/pytorch:25.03-py3\n"
HEX = "0123456789abcdef0123456789abcdef01234567"


def cases() -> dict[str, str]:
    # 2,000 lines of what training Dockerfiles hold: branches on CUDA, clones, pinned and unpinned
    # installs, downloads, ENV and ARG, continuation lines.
    body = []
    for i in range(250):
        body += [f"ARG V{i}=1.{i}.0",
                 f"ENV PATH=/opt/t{i}/bin:$PATH",
                 f'RUN if [ "$CUDA_MAJOR" = 13 ]; then pip install cupy-cuda13x==13.{i % 7}.0; \\',
                 f"    else pip install cupy-cuda12x==13.{i % 7}.0 pkg{i}; fi && \\",
                 f"    git clone https://github.com/org/repo{i} /opt/r{i} && cd /opt/r{i} && git checkout {HEX} && \\",
                 f"    wget -q https://example.com/t{i}.tar.gz && tar xzf t{i}.tar.gz -C /opt && \\",
                 f"    V=$(git describe --tags || echo unknown) && echo $V > /opt/r{i}/VERSION",
                 ""]
    return {
        "2000-line Dockerfile": BASE + "ARG CUDA_MAJOR=12\n" + "\n".join(body[:1998]) + "\n",
        "200,000 quoted apt names in one RUN": BASE + "RUN apt-get install -y -- "
        + " ".join(f"'pkg{i:06d}'" for i in range(200000)) + "\n",
        "20,000 heredoc lines": BASE + "RUN <<EOF bash\n" + "echo line\n" * 20000 + "EOF\n",
        "3,000 clones in one RUN": BASE + "RUN <<EOF bash\n" + "git clone https://github.com/a/b\n" * 3000 + "EOF\n",
        "3,000 downloads run and installed": BASE + "RUN <<EOF bash\n"
        + "wget https://x/y.sh && bash y.sh; wget https://x/y.deb && dpkg -i y.deb\n" * 3000 + "EOF\n",
        "nesting 2,000 $( deep": BASE + "RUN " + "a=$(" * 2000 + "x" + ")" * 2000 + "\n",
        "unterminated quote": BASE + 'RUN pip install "unterminated && git clone https://github.com/x/y\n',
        # Just under lint's 1 MiB limit: one heredoc of 30,000 lines (reading it was quadratic: 3 MB took 38 s).
        "a 0.96 MB heredoc": BASE + "RUN <<EOF bash\n" + "echo line number something here\n" * 30000 + "EOF\n",
        # Variables that double each other 40 times (under 1 kB): a bounded expansion, not all of memory.
        "ENV doubled 40 times": BASE + "ENV A0=xx\n" + "".join(f"ENV A{i}=$A{i - 1}$A{i - 1}\n" for i in range(1, 41))
        + "RUN pip install torch==$A40\n",
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    for name, text in cases().items():
        times, found = [], 0
        for _ in range(args.runs):
            start = time.perf_counter()
            found = len(lint_dockerfile(text, "Dockerfile"))
            times.append(time.perf_counter() - start)
        print(f"{name:<40} {len(text.splitlines()):>7} lines  best {min(times):6.3f} s  "
              f"median {statistics.median(times):6.3f} s  {found} findings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
