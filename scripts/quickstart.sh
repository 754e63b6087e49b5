#!/usr/bin/env bash
# The main job on the embedded defaults: prepare this machine (Docker engine with BuildKit, a registry
# on 127.0.0.1:5000, the mirrored Debian base, the git mirror), install imgbuild in .venv, and build,
# validate and release the cpu-smoke stack. Run as root on a fresh Debian 12 machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-host.sh
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -e '.[test]'
exec .venv/bin/imgbuild build stack=cpu-smoke "$@"
