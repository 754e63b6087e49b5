#!/usr/bin/env bash
# CI on a cold machine, as issue 33 measures the suite's budget: no image, no BuildKit cache, an empty
# registry, no imgbuild state; then `.ci/run` in a fresh clone of the checkout's HEAD. DESTRUCTIVE for this
# host's engine: every local image and the whole build cache go. Root only.
#
#   scripts/cold-ci.sh DIR     DIR must not exist; the clone is DIR/main, its output DIR/ci.log
#
# What is emptied, in order: Podman's store, the second engines B and C (scripts/second-engine.sh stop), the registry and dockerd
# (with its containerd) stopped; /var/lib/docker and /var/lib/containerd (images, containers, BuildKit's
# cache and its pip cache mount), /var/lib/imgbuild (the registry's storage, the debootstrapped Debian roots
# of both platforms, the git mirrors, the CUDA toolchain, engine B's data) deleted. The Debian packages
# installed on the host stay (a fresh machine of this kind has some of them and apt installs the rest in
# seconds to a minute), and so does pip's download cache in ~/.cache/pip (the host's; the clone's .venv is new).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir="${1:?usage: scripts/cold-ci.sh DIR (a new folder)}"
[ "$(id -u)" -eq 0 ] || { echo "cold-ci: must run as root" >&2; exit 2; }
[ ! -e "$dir" ] || { echo "cold-ci: $dir exists" >&2; exit 2; }
log() { echo "[cold-ci] $(date -u +%H:%M:%S) $*"; }

# Podman's store (the Podman engine's images, issue 39): a fresh machine has none.
command -v podman >/dev/null && podman system reset --force >/dev/null 2>&1 || true
# Both second engines the tests start (B, and C: tests/conftest.py SECOND_ENGINES).
[ -x "$here/scripts/second-engine.sh" ] && bash "$here/scripts/second-engine.sh" stop >/dev/null 2>&1 || true
[ -x "$here/scripts/second-engine.sh" ] && IMGBUILD_ENGINE_B_DIR=/var/lib/imgbuild/engine-c \
    bash "$here/scripts/second-engine.sh" stop >/dev/null 2>&1 || true
for pf in /var/lib/imgbuild/registry/registry.pid; do
    [ -f "$pf" ] && kill "$(cat "$pf")" 2>/dev/null || true
done
pkill -x docker-registry 2>/dev/null || true
if pgrep -x dockerd >/dev/null; then
    pkill -x dockerd || true
    for _ in $(seq 60); do pgrep -x dockerd >/dev/null || break; sleep 1; done
fi
pkill -x containerd 2>/dev/null || true
sleep 2
pgrep -x dockerd >/dev/null && { echo "cold-ci: dockerd did not stop" >&2; exit 1; }
# Mounts a dead engine may leave (overlay, netns) would keep their folders busy.
grep -E ' (/var/lib/(docker|containerd|imgbuild)|/run/docker)/' /proc/mounts | awk '{ print $2 }' | sort -r | xargs -r umount -l || true
# Emptied, not removed: on some machines of this kind /var/lib/docker is a mount point of its own.
for d in /var/lib/docker /var/lib/containerd /var/lib/imgbuild /run/docker; do
    [ -d "$d" ] && find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
    rmdir "$d" 2>/dev/null || true
done
rm -f /var/run/docker.pid
log "emptied: no engine data, no registry storage, no imgbuild state ($(df -h --output=avail /var/lib | tail -1 | tr -d ' ') free)"

mkdir -p "$dir"
git clone -q "$here" "$dir/main"
log "cloned $(git -C "$dir/main" rev-parse --short HEAD) into $dir/main; running CI=true bash .ci/run"
start=$(date +%s)
set +e
(cd "$dir/main" && CI=true bash .ci/run </dev/null) >"$dir/ci.log" 2>&1
rc=$?
set -e
log ".ci/run exited $rc after $(( $(date +%s) - start )) s (output: $dir/ci.log)"
exit "$rc"
