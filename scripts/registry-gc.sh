#!/usr/bin/env bash
# The registry's own garbage collection: frees the blobs that no manifest references any more, after
# `imgbuild gc --apply` (or anything else) deleted manifests through the API. Distribution collects
# offline: an upload during a collection can lose blobs, so the registry setup-host.sh started is stopped
# first and started again after (by setup-host.sh, with the same configuration). Untagged manifests are
# kept (no --delete-untagged): Distribution 2.8 deletes the images of a multi-platform index with them.
#
#   scripts/registry-gc.sh [--dry-run]      IMGBUILD_STATE_DIR (default /var/lib/imgbuild)
# Prints the collector's log path and the bytes of the registry's storage before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE_DIR="${IMGBUILD_STATE_DIR:-/var/lib/imgbuild}"
REGISTRY_DIR="$STATE_DIR/registry"
LOG="${IMGBUILD_LOG_DIR:-/var/log/imgbuild}/registry-gc.log"
log() { echo "[registry-gc] $*"; }
bytes() { du -sb "$REGISTRY_DIR/data" 2>/dev/null | cut -f1; }
mkdir -p "$(dirname "$LOG")"
before=$(bytes)
pid=$(cat "$REGISTRY_DIR/registry.pid" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    log "stopping the registry (pid $pid)"
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
fi
rc=0
/usr/bin/docker-registry garbage-collect "$@" "$REGISTRY_DIR/config.yml" >"$LOG" 2>&1 || rc=$?
bash scripts/setup-host.sh >/dev/null   # starts the registry again
after=$(bytes)
log "collector log: $LOG ($(grep -c 'blob eligible for deletion' "$LOG" || true) blob(s) eligible)"
log "storage: $before bytes before, $after after ($(( before - after )) freed)"
[ "$rc" -eq 0 ] || { log "garbage-collect failed (exit $rc): see $LOG"; exit "$rc"; }
