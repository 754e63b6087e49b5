#!/usr/bin/env bash
# A CUDA compiler on a machine without NVIDIA's registry or a GPU: nvcc, its headers and cuobjdump from
# PyPI (CUDA 13.2), in a virtual environment of their own. Compiling needs no GPU; running does.
# Idempotent. Prints the toolkit folder (bin/nvcc, include/, lib/), also reachable as
# $IMGBUILD_CUDA_TOOLCHAIN/cuda (default /var/lib/imgbuild/cuda-toolchain/cuda).
# The pinned versions are in scripts/cuda-13.2-pypi.txt (they must go together).
set -euo pipefail

DIR="${IMGBUILD_CUDA_TOOLCHAIN:-/var/lib/imgbuild/cuda-toolchain}"
PY="${PYTHON:-python3}"
mapfile -t PINS < <(grep -v '^#' "$(dirname "$0")/cuda-13.2-pypi.txt" | grep .)

if [ -x "$DIR/cuda/bin/nvcc" ] && [ -f "$DIR/pins" ] && [ "$(cat "$DIR/pins")" = "${PINS[*]}" ]; then
    echo "$DIR/cuda"; exit 0
fi
rm -rf "$DIR"
"$PY" -m venv "$DIR/venv"
"$DIR/venv/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}" >&2
site="$("$DIR/venv/bin/python" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0] if hasattr(nvidia, "__path__") else nvidia.__file__))')"
ln -sfn "$site/nvidia/cu13" "$DIR/cuda"
"$DIR/cuda/bin/nvcc" --version | tail -n 2 >&2
echo "${PINS[*]}" > "$DIR/pins"
echo "$DIR/cuda"
