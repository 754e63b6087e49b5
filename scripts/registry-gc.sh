#!/usr/bin/env bash
# The registry's own garbage collection: frees the blobs that no manifest references any more, after
# `imgbuild gc --apply` (or anything else) deleted manifests through the API. Distribution collects
# offline: an upload during a collection can lose blobs, so the registry is stopped first and started
# again after, with the same configuration (as setup-host.sh starts it: lib/setup-common.sh). Untagged
# manifests are kept (no --delete-untagged): Distribution 2.8 deletes the images of a multi-platform index
# with them.
#
#   scripts/registry-gc.sh [--dry-run]
#   IMGBUILD_REGISTRY_DIR  the registry's folder: config.yml, registry.pid, data/ (default
#                          $IMGBUILD_STATE_DIR/registry, the one setup-host.sh runs; the tests run one of
#                          their own, so that collecting it never cuts another test's push in half)
#   IMGBUILD_LOG_DIR       where registry-gc.log and registry.log go (default /var/log/imgbuild)
# Prints the collector's log path and the bytes of the registry's storage before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE_DIR="${IMGBUILD_STATE_DIR:-/var/lib/imgbuild}"
REGISTRY_DIR="${IMGBUILD_REGISTRY_DIR:-$STATE_DIR/registry}"
CONFIG="$REGISTRY_DIR/config.yml"
LOG_DIR="${IMGBUILD_LOG_DIR:-/var/log/imgbuild}"
LOG="$LOG_DIR/registry-gc.log"
SETUP_TAG=registry-gc
# shellcheck source=lib/setup-common.sh
. "$(dirname "$0")/lib/setup-common.sh"
bytes() { du -sb "$REGISTRY_DIR/data" 2>/dev/null | cut -f1; }

[ -f "$CONFIG" ] || die "no registry configuration at $CONFIG (IMGBUILD_REGISTRY_DIR names the registry's folder)"
addr=$(sed -n 's/^ *addr: *//p' "$CONFIG" | head -n 1)
[ -n "$addr" ] || die "$CONFIG names no http.addr"
mkdir -p "$LOG_DIR"
before=$(bytes)
pid=$(cat "$REGISTRY_DIR/registry.pid" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    log "stopping the registry at $addr (pid $pid)"
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && die "the registry (pid $pid) did not stop within 10 s; nothing was collected"
fi
rc=0
/usr/bin/docker-registry garbage-collect "$@" "$CONFIG" >"$LOG" 2>&1 || rc=$?
start_registry "$CONFIG" "$addr" "$LOG_DIR/registry.log" "$REGISTRY_DIR/registry.pid"
log "started the registry again at $addr (pid $REGISTRY_PID)"
after=$(bytes)
log "collector log: $LOG ($(grep -c 'blob eligible for deletion' "$LOG" || true) blob(s) eligible)"
log "storage: $before bytes before, $after after ($(( before - after )) freed)"
[ "$rc" -eq 0 ] || { log "garbage-collect failed (exit $rc): see $LOG"; exit "$rc"; }
