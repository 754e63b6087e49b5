#!/usr/bin/env bash
# The whole test suite, the Docker and registry tests included: prepares the machine like
# quickstart.sh (scripts/setup-host.sh) plus what only the tests need (scripts/setup-test-host.sh:
# Slurm, gitlab-ci-local, export's tools, the CUDA toolchain from PyPI), gives back the disk earlier runs used (scripts/reclaim.sh), installs imgbuild with its test extras in .venv, then runs pytest.
# IMGBUILD_REQUIRE_DOCKER=1 and IMGBUILD_REQUIRE_CUDA_TOOLCHAIN=1 (set here) turn "no Docker engine"
# and "no nvcc" from skips into failures.
#
#   scripts/test.sh --quick [PYTEST ARGS]   every test that needs no engine and no registry (the markers
#                  docker and registry deselected), two at a time: no root, no host setup, only .venv
#                  (made and given the test extras when missing). 158 s on 2 idle cores
#                  (docs/measurements/2026-12-02-test-suite.md).
#   IMGBUILD_TEST_WORKERS   pytest-xdist workers: default 2 with --quick, 0 (one process, file order) for
#                  the whole suite: its docker half is compiles and containers on the same 2 cores, and
#                  two workers showed no gain there (same measurements).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--quick" ]; then WORKERS="${IMGBUILD_TEST_WORKERS:-2}"; else WORKERS="${IMGBUILD_TEST_WORKERS:-0}"; fi
xdist() { [ "$WORKERS" = 0 ] || echo "-n $WORKERS --dist loadfile --no-loadscope-reorder"; }   # tests/conftest.py says why
if [ "${1:-}" = "--quick" ]; then
    shift
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -c 'import builder, hypothesis, xdist' 2>/dev/null || .venv/bin/python -m pip install -q -e '.[test]'
    # shellcheck disable=SC2046
    exec .venv/bin/python -m pytest tests -m "not docker and not registry" $(xdist) "$@"
fi
bash scripts/setup-host.sh        # engine, registry, base, git mirror: what building needs
bash scripts/setup-test-host.sh   # what only tests need: skopeo, rsync, export's tools, Slurm, gitlab-ci-local, nvcc
bash scripts/reclaim.sh      # what earlier test runs left in the engine and the registry; fails if the disk is short
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -e '.[test]'
export IMGBUILD_REQUIRE_DOCKER=1 IMGBUILD_REQUIRE_CUDA_TOOLCHAIN=1
# shellcheck disable=SC2046
exec .venv/bin/python -m pytest tests $(xdist) "$@"
