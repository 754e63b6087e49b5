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
#   IMGBUILD_TEST_WORKERS   pytest-xdist workers: default 2. Every test runs two at a time, each file
#                  whole on one worker (--dist loadfile): the Podman file first, the files that build on
#                  the session's cpu-smoke, then the other docker files, then the rest (tests/conftest.py).
#                  No test stops what the others share: the gc tests collect a registry of their own.
#                  Two workers fill the time one spends waiting on a push, a container or a sleeping
#                  compile: with warm caches a single process left a core idle a third of the time (vmstat,
#                  2026-12-05). Collecting no test is exit 5 (.ci/run fails on it).
# The run writes JUnit XML under .imgbuild/test-results/; scripts/test-times.py then prints its time and the
# 15 slowest tests (the budget: docs/development.md#the-suites-budget).
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
rm -f "$results"/*.xml
set +e
# shellcheck disable=SC2046
.venv/bin/python -m pytest tests $(xdist) --junitxml="$results/suite.xml" "$@"
rc=$?
python3 scripts/test-times.py -n 15 --by-file "$results/suite.xml"
echo "test.sh: pytest exited $rc"
exit "$rc"
