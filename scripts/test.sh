#!/usr/bin/env bash
# The whole test suite, the Docker and registry tests included: prepares the machine like
# quickstart.sh, installs imgbuild with its test extras in .venv, then runs pytest.
# IMGBUILD_REQUIRE_DOCKER=1 (set here) turns "no Docker engine" from a skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-host.sh
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -e '.[test]'
export IMGBUILD_REQUIRE_DOCKER=1
exec .venv/bin/python -m pytest tests "$@"
