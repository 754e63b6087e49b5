#!/usr/bin/env bash
# Give back the disk that earlier test and benchmark runs left on this host, then say how much is free.
# Each run pushes into its own registry namespace (imgbuild-test-<id>, imgbuild-difftest-<id>,
# bench-<id>) and keeps the local image of every layer that failed its checks, for debugging; the test
# suite fails layers on purpose, and its CUDA stacks are several GB each. A CI run once failed on a host
# where these had filled the disk (syft found no room for its layer copies). Run by scripts/test.sh
# before the suite, after setup-host.sh; safe on a fresh host (nothing to do).
#
# What goes: local images of those namespaces, of the fault-injecting registries the tests start on
# other loopback ports, and imgbuild.local/* (a failed layer's image); dangling images; the BuildKit
# cache beyond IMGBUILD_KEEP_BUILD_CACHE (default 12GB: pip's wheel cache mount lives there); and those
# namespaces' repositories in the local registry, whose blobs the registry's garbage collector then
# deletes. The collector runs with the registry stopped (the Distribution docs: an upload during a
# collection can lose blobs), and setup-host.sh starts it again. mirror/ and every other namespace stay.
#
#   IMGBUILD_MIN_FREE_GB   fail when less than this is free afterwards (default 25). A whole suite run
#                          with warm caches took 7 GB at its peak (the CUDA stacks' test, disk sampled
#                          every 20 s); one with the BuildKit cache nearly cold (4.7 GB of it left, no
#                          CUDA wheels in it: torch, DeepSpeed and Transformer Engine built again) took
#                          17 GB at its peak, two workers at once (docs/measurements/2026-12-02-test-suite.md).
#                          25 is that measurement with 8 GB of room.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE_DIR="${IMGBUILD_STATE_DIR:-/var/lib/imgbuild}"
REGISTRY_DIR="$STATE_DIR/registry"
REPOS="$REGISTRY_DIR/data/docker/registry/v2/repositories"
DOCKER=/usr/bin/docker
KEEP_CACHE="${IMGBUILD_KEEP_BUILD_CACHE:-12GB}"
MIN_FREE_GB="${IMGBUILD_MIN_FREE_GB:-25}"
TEST_NS='(imgbuild-test|imgbuild-difftest|bench|bench-fleet-[a-z0-9]+|plain-bench)-[0-9a-f]{6,8}(-gitlab|-gc|-gcl|-podman)?'
log() { echo "[reclaim] $*"; }
free_gb() { df -P -BG "$1" | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }

before=$(free_gb /var/lib)

if "$DOCKER" info >/dev/null 2>&1; then
    mapfile -t refs < <("$DOCKER" images --format '{{.Repository}}:{{.Tag}}' |
        grep -E "^(127\.0\.0\.1:5000/$TEST_NS/|127\.0\.0\.1:[0-9]+/faults/|imgbuild\.local/|plain-bench-)" || true)
    if [ "${#refs[@]}" -gt 0 ]; then
        log "removing ${#refs[@]} local image tag(s) of earlier test runs"
        printf '%s\n' "${refs[@]}" | xargs -r -n 200 "$DOCKER" rmi -f >/dev/null 2>&1 || true
    fi
    "$DOCKER" image prune -f >/dev/null
    "$DOCKER" builder prune -f --keep-storage "$KEEP_CACHE" >/dev/null
fi

# Podman's store (the daemonless engine's tests): the same namespaces' images, and what its builds left.
if command -v podman >/dev/null 2>&1; then
    mapfile -t prefs < <(podman images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null |
        grep -E "^(127\.0\.0\.1:5000/$TEST_NS/|imgbuild\.local/)" || true)
    if [ "${#prefs[@]}" -gt 0 ]; then
        log "removing ${#prefs[@]} podman image tag(s) of earlier test runs"
        printf '%s\n' "${prefs[@]}" | xargs -r -n 200 podman rmi -f >/dev/null 2>&1 || true
    fi
    podman image prune -f >/dev/null 2>&1 || true
fi

if [ -d "$REPOS" ]; then
    mapfile -t dirs < <(find "$REPOS" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
                        -regex ".*/$TEST_NS" || true)
    if [ "${#dirs[@]}" -gt 0 ]; then
        log "deleting ${#dirs[@]} test namespace(s) from the registry and collecting their blobs"
        rm -rf "${dirs[@]}"   # whole namespaces, gone from the listing at once; the collector frees their blobs
        bash scripts/registry-gc.sh || log "the registry's garbage collection failed"
    fi
fi

after=$(free_gb /var/lib)
log "free on /var/lib: ${before} GB before, ${after} GB now"
if [ "$after" -lt "$MIN_FREE_GB" ]; then
    echo "[reclaim] ERROR: only ${after} GB free on /var/lib; the whole suite needs about ${MIN_FREE_GB} GB" \
         "(images in the engine and the registry). Largest users:" >&2
    du -xsh /var/lib/docker /var/lib/imgbuild/* /tmp 2>/dev/null | sort -h | tail -n 6 >&2
    exit 1
fi
