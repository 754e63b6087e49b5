# Sourced by scripts/setup-host.sh and scripts/setup-test-host.sh (root, Debian 12): timed steps, one
# way to fail, and apt installs that start no service. The caller sets SETUP_TAG ("setup", ...) and
# LOG_DIR before sourcing it.

T0=$(date +%s.%N)
STEP_NAME="" STEP_T0="" STEP_TIMES=()
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "[$SETUP_TAG] $*"; }
die() { echo "[$SETUP_TAG] ERROR${STEP_NAME:+ in step '$STEP_NAME'}: $*" >&2; exit 1; }
step() { STEP_NAME="$1"; STEP_T0=$(now); log "==> $STEP_NAME"; }
step_done() { log "<== $STEP_NAME: done in $(elapsed "$STEP_T0") s${1:+ ($1)}"; STEP_TIMES+=("$STEP_NAME: $(elapsed "$STEP_T0") s${1:+ ($1)}"); STEP_NAME=""; }
trap 'rc=$?; [ $rc -eq 0 ] || echo "[$SETUP_TAG] FAILED (exit $rc)${STEP_NAME:+ in step '"'"'$STEP_NAME'"'"'} after $(elapsed "$T0") s" >&2' EXIT

apt_install() {   # apt_install PKG...: install, with the maintainer scripts kept from starting services
    local created_policy="" apt_log="$LOG_DIR/apt.log"   # no init system here
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && created_policy=1
    fi
    if ! { apt-get -o Acquire::Retries=3 update &&
           apt-get -o Acquire::Retries=3 install -y --no-install-recommends "$@"; } >>"$apt_log" 2>&1; then
        [ -z "$created_policy" ] || rm -f /usr/sbin/policy-rc.d
        tail -n 30 "$apt_log" >&2
        die "apt-get install $* failed (full log: $apt_log)"
    fi
    [ -z "$created_policy" ] || rm -f /usr/sbin/policy-rc.d
}

install_missing() {   # install_missing PKG...: the packages dpkg does not have, as one timed step
    local missing=() p
    step "packages"
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing: ${missing[*]}"
        apt_install "${missing[@]}"
        step_done "installed ${#missing[@]} package(s)"
    else
        step_done "all present"
    fi
}

start_registry() {   # start_registry CONFIG ADDR LOGFILE PIDFILE: serve CONFIG in the background, wait for ADDR
    local config="$1" addr="$2" logfile="$3" pidfile="$4" rpid
    echo "=== $(date -Is) $SETUP_TAG starting registry" >>"$logfile"
    setsid nohup /usr/bin/docker-registry serve "$config" >>"$logfile" 2>&1 </dev/null 9>&- &
    rpid=$!
    for _ in $(seq 1 30); do
        registry_answers "$addr" && break
        kill -0 "$rpid" 2>/dev/null || { tail -n 20 "$logfile" >&2; die "registry exited (log: $logfile)"; }
        sleep 1
    done
    registry_answers "$addr" || { tail -n 20 "$logfile" >&2; die "registry did not answer at http://$addr/v2/ within 30 s"; }
    echo "$rpid" >"$pidfile"
    REGISTRY_PID=$rpid
}

registry_answers() { curl -fsS --noproxy '*' -m 5 -o /dev/null "http://$1/v2/" 2>/dev/null; }
