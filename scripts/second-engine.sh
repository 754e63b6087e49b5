#!/usr/bin/env bash
# A second Docker engine beside the first: the smallest honest model of two CI runners sharing one
# registry. Its own data root, exec root, pid file, socket and bridge; the first engine is untouched.
#
#   scripts/second-engine.sh start   start it (idempotent) and print the DOCKER_HOST line to use
#   scripts/second-engine.sh stop    stop it (its images stay in the data root for the next start)
#   scripts/second-engine.sh host    print DOCKER_HOST=... if it answers, else exit 1
#
# Never --bridge none: at start-up such a daemon deletes the host's docker0 and the first engine's
# builds fail until it restarts. It gets a bridge of its own and no iptables rules (two daemons would
# fight over the DOCKER chains), so its containers have no NAT: builds through it need
# IMGBUILD_BUILD_NETWORK=host (docker build --network host) to reach package indexes quickly.
# Needs root. Environment: IMGBUILD_ENGINE_B_DIR (default /var/lib/imgbuild/engine-b),
# IMGBUILD_ENGINE_B_BRIDGE (default imgb1), IMGBUILD_ENGINE_B_ADDR (default 10.213.0.1/24).
set -euo pipefail

DIR="${IMGBUILD_ENGINE_B_DIR:-/var/lib/imgbuild/engine-b}"
BRIDGE="${IMGBUILD_ENGINE_B_BRIDGE:-imgb1}"
ADDR="${IMGBUILD_ENGINE_B_ADDR:-10.213.0.1/24}"
SOCK="$DIR/sock"
DOCKER=/usr/bin/docker
DOCKERD="$(command -v dockerd || echo /usr/sbin/dockerd)"

answers() { DOCKER_HOST="unix://$SOCK" "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

case "${1:-}" in
start)
    if answers; then echo "DOCKER_HOST=unix://$SOCK"; exit 0; fi
    mkdir -p "$DIR/data" "$DIR/exec"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add name "$BRIDGE" type bridge
        ip addr add "$ADDR" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
    # A pid file left by a dead daemon blocks a new one.
    if [ -f "$DIR/pid" ] && ! kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then rm -f "$DIR/pid"; fi
    rm -f "$SOCK"
    setsid nohup "$DOCKERD" --data-root "$DIR/data" --exec-root "$DIR/exec" --pidfile "$DIR/pid" \
        -H "unix://$SOCK" --bridge "$BRIDGE" --iptables=false --ip-masq=false \
        >>"$DIR/dockerd.log" 2>&1 </dev/null 9>&- &
    for _ in $(seq 1 60); do
        answers && { echo "DOCKER_HOST=unix://$SOCK"; exit 0; }
        sleep 1
    done
    tail -n 20 "$DIR/dockerd.log" >&2
    echo "second-engine.sh: the second dockerd did not answer within 60 s (log: $DIR/dockerd.log)" >&2
    exit 1
    ;;
stop)
    if [ -f "$DIR/pid" ]; then
        pid="$(cat "$DIR/pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    fi
    ;;
host)
    answers && echo "DOCKER_HOST=unix://$SOCK"
    ;;
*)
    echo "usage: $0 start|stop|host" >&2
    exit 2
    ;;
esac
