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
#   IMGBUILD_TEST_WORKERS   pytest-xdist workers for the tests that need no engine: default 2. The whole
#                  suite runs those first, two at a time (as --quick does), then the tests of the markers
#                  docker and registry in one process, in file order: that half is compiles and containers
#                  on the same 2 cores, and two workers showed no gain there (same measurements). The exit
#                  code is the first failing half's; either half collecting no test is exit 5.
# Each half writes JUnit XML under .imgbuild/test-results/; scripts/test-times.py then prints each half's time
# and the 15 slowest tests of the whole run (the budget: docs/development.md#the-suites-budget).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKERS="${IMGBUILD_TEST_WORKERS:-2}"
xdist() { [ "$WORKERS" = 0 ] || echo "-n $WORKERS --dist loadfile --no-loadscope-reorder"; }   # tests/conftest.py says why
if [ "${1:-}" = "--quick" ]; then
    shift
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -c 'import builder, hypothesis, xdist' 2>/dev/null || .venv/bin/python -m pip install -q -e '.[test]'
    # shellcheck disable=SC2046
    exec .venv/bin/python -m pytest tests -m "not docker and not registry" $(xdist) "$@"
fi
IMGBUILD_ARM64=1 bash scripts/setup-host.sh   # engine, registry, base (an index with arm64: the platform tests), git mirror
bash scripts/setup-test-host.sh   # what only tests need: skopeo, rsync, export's tools, Slurm, gitlab-ci-local, nvcc
bash scripts/reclaim.sh      # what earlier test runs left in the engine and the registry; fails if the disk is short
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -e '.[test]'
export IMGBUILD_REQUIRE_DOCKER=1 IMGBUILD_REQUIRE_CUDA_TOOLCHAIN=1
results=.imgbuild/test-results
mkdir -p "$results"
rm -f "$results"/free.xml "$results"/engine.xml
set +e
# shellcheck disable=SC2046
.venv/bin/python -m pytest tests -m "not docker and not registry" $(xdist) --junitxml="$results/free.xml" "$@"
free=$?
.venv/bin/python -m pytest tests -m "docker or registry" --junitxml="$results/engine.xml" "$@"
engine=$?
python3 scripts/test-times.py -n 15 --by-file "$results/free.xml" "$results/engine.xml"
echo "test.sh: the tests without an engine exited $free, those with the engine and registry $engine"
for rc in "$free" "$engine"; do [ "$rc" -eq 0 ] || exit "$rc"; done
