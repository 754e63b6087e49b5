#!/usr/bin/env bash
# What only the test suite needs on a Debian 12 host (root), beyond scripts/setup-host.sh (the engine,
# the registry, the base and the git mirror: what building and releasing need):
#   1. packages: skopeo (a second registry client), rsync (gitlab-ci-local copies the checkout with it),
#      squashfs-tools + umoci (imgbuild export), slurm-wlm + munge (a one-machine cluster), chromium +
#      chromium-driver (the catalog page opened in a real browser, headless), podman + buildah (the
#      daemonless engine, --engine podman)
#   2. gitlab-ci-local (npm), which runs the pipelines `imgbuild ci gitlab` writes, for real
#   3. a one-machine Slurm cluster (scripts/slurm-local.sh) for the node check's batch job
#   4. nvcc and cuobjdump from PyPI (scripts/cuda-toolchain.sh), for the arch-coverage reader's tests
#   5. PyPI's torch wheel for aarch64 (CPU-only up to 2.10) in the wheelhouse, for the two-platform stack
#   6. a mirror of NVIDIA's nccl-tests, where github.com is reachable, for the nccl-tests kind's build
# scripts/test.sh runs it after setup-host.sh. Idempotent: a second run only checks and takes seconds.
#   IMGBUILD_STATE_DIR, IMGBUILD_LOG_DIR   as in setup-host.sh (default /var/lib/imgbuild, /var/log/imgbuild)
#   IMGBUILD_CUDA_TOOLCHAIN                where the CUDA toolchain goes (scripts/cuda-toolchain.sh)
#   IMGBUILD_WHEELHOUSE                    the wheelhouse (default: pip's find-links, else /opt/wheels)
set -euo pipefail

STATE_DIR="${IMGBUILD_STATE_DIR:-/var/lib/imgbuild}"
LOG_DIR="${IMGBUILD_LOG_DIR:-/var/log/imgbuild}"
PACKAGES=(skopeo rsync squashfs-tools umoci slurm-wlm munge chromium chromium-driver podman buildah)
GITLAB_CI_LOCAL_VERSION=4.73.0  # 4.74 and later need Node 22
here=$(cd "$(dirname "$0")" && pwd)

export DEBIAN_FRONTEND=noninteractive

SETUP_TAG=setup-test
# shellcheck source=lib/setup-common.sh
. "$here/lib/setup-common.sh"

[ "$(id -u)" -eq 0 ] || die "must run as root (installs packages, starts the Slurm daemons)"
mkdir -p "$STATE_DIR" "$LOG_DIR"

# One setup at a time on a host (a lock of its own: setup-host.sh may run beside it).
exec 9>"$STATE_DIR/setup-test.lock"
flock -w 900 9 || die "another setup-test-host.sh holds $STATE_DIR/setup-test.lock"

# ---------------------------------------------------------------- 1. packages
install_missing "${PACKAGES[@]}"
for b in /usr/bin/skopeo /usr/bin/rsync /usr/bin/mksquashfs /usr/bin/umoci /usr/bin/sbatch /usr/bin/podman /usr/bin/buildah; do
    [ -x "$b" ] || die "$b missing after install"
done

# ---------------------------------------------------------------- 2. gitlab-ci-local
step "gitlab-ci-local"
if [ "$(gitlab-ci-local --version 2>/dev/null)" = "$GITLAB_CI_LOCAL_VERSION" ]; then
    step_done "$GITLAB_CI_LOCAL_VERSION already installed"
else
    if ! command -v npm >/dev/null 2>&1; then
        log "installing npm (Debian)"
        apt_install npm
    fi
    npm install -g "gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION" >"$LOG_DIR/npm.log" 2>&1 ||
        { tail -n 30 "$LOG_DIR/npm.log" >&2; die "npm install -g gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION failed (log: $LOG_DIR/npm.log)"; }
    [ "$(gitlab-ci-local --version 2>/dev/null)" = "$GITLAB_CI_LOCAL_VERSION" ] ||
        die "gitlab-ci-local $GITLAB_CI_LOCAL_VERSION is not on PATH after npm install -g (log: $LOG_DIR/npm.log)"
    step_done "installed $GITLAB_CI_LOCAL_VERSION"
fi

# ---------------------------------------------------------------- 3. Slurm
step "slurm"
# 9>&-: munged would keep the setup lock, and every later run of this script would wait for it
bash "$here/slurm-local.sh" start >"$LOG_DIR/slurm.log" 2>&1 9>&- ||
    { tail -n 30 "$LOG_DIR/slurm.log" >&2; die "scripts/slurm-local.sh start failed (log: $LOG_DIR/slurm.log)"; }
step_done "$(tail -n 1 "$LOG_DIR/slurm.log")"

# ---------------------------------------------------------------- 4. CUDA toolchain
step "cuda toolchain"
cuda=$(bash "$here/cuda-toolchain.sh" 2>"$LOG_DIR/cuda-toolchain.log") ||
    { tail -n 30 "$LOG_DIR/cuda-toolchain.log" >&2; die "scripts/cuda-toolchain.sh failed (log: $LOG_DIR/cuda-toolchain.log)"; }
step_done "$cuda"

# ---------------------------------------------------------------- 5. aarch64 torch wheel
# PyPI's aarch64 torch wheels are CPU-only through 2.10.0 (2.11 and later need CUDA 13's wheels, GBs of
# them): the arm64 side of the tests' two-platform CPU stack installs this one, checked by its sha256.
step "torch aarch64 wheel"
ARM_TORCH=torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl
ARM_TORCH_SHA256=3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4
wheelhouse="${IMGBUILD_WHEELHOUSE:-$(pip config get global.find-links 2>/dev/null | awk '{print $1}')}"
wheelhouse="${wheelhouse:-/opt/wheels}"
mkdir -p "$wheelhouse"
if echo "$ARM_TORCH_SHA256  $wheelhouse/$ARM_TORCH" | sha256sum --check --status - 2>/dev/null; then
    step_done "$wheelhouse/$ARM_TORCH already there"
else
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 \
        --python-version 3.11 --dest "$tmp" torch==2.10.0 >"$LOG_DIR/torch-aarch64.log" 2>&1 ||
        { tail -n 20 "$LOG_DIR/torch-aarch64.log" >&2; rm -rf "$tmp"; die "pip download of $ARM_TORCH failed (log: $LOG_DIR/torch-aarch64.log)"; }
    echo "$ARM_TORCH_SHA256  $tmp/$ARM_TORCH" | sha256sum --check --status - ||
        { rm -rf "$tmp"; die "$ARM_TORCH from PyPI does not have sha256 $ARM_TORCH_SHA256"; }
    mv "$tmp/$ARM_TORCH" "$wheelhouse/$ARM_TORCH.part" && mv "$wheelhouse/$ARM_TORCH.part" "$wheelhouse/$ARM_TORCH"
    rm -rf "$tmp"
    step_done "downloaded to $wheelhouse"
fi

# ---------------------------------------------------------------- 6. nccl-tests mirror
# NVIDIA's nccl-tests at the commit the tests pin, for the nccl-tests kind's build (tests/test_docker_cuda.py).
# A machine without github.com (this project's CI) has none: that one test says so and is skipped.
step "nccl-tests mirror"
NCCL_TESTS_COMMIT=a0b82b2260cf5152b9f8c061bbf7eaf0ba096432   # v2.19.6
mirror="${IMGBUILD_GIT_MIRRORS:-$STATE_DIR/git}/nccl-tests.git"
if git -C "$mirror" cat-file -e "$NCCL_TESTS_COMMIT^{commit}" 2>/dev/null; then
    step_done "$mirror has $NCCL_TESTS_COMMIT"
elif timeout 120 git clone --quiet --mirror https://github.com/NVIDIA/nccl-tests.git "$mirror.part" >"$LOG_DIR/nccl-tests.log" 2>&1 &&
        git -C "$mirror.part" cat-file -e "$NCCL_TESTS_COMMIT^{commit}"; then
    rm -rf "$mirror" && mv "$mirror.part" "$mirror"
    step_done "cloned to $mirror"
else
    rm -rf "$mirror.part"
    step_done "not reachable (github.com): the nccl-tests build test is skipped ($(tail -n 1 "$LOG_DIR/nccl-tests.log" 2>/dev/null))"
fi

log "---------------- summary ----------------"
for t in "${STEP_TIMES[@]}"; do log "  step $t"; done
log "total:                 $(elapsed "$T0") s"
log "test host ready"
