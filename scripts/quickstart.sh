#!/usr/bin/env bash
# The main job on the embedded defaults: build, validate and release the cpu-smoke stack of stacks.yaml
# (the mirrored Debian base, torch CPU, DeepSpeed with CPU Adam, a pinned project) into the registry.
#
# As root (a fresh Debian 12 machine) it first prepares the host with scripts/setup-host.sh: the Docker
# engine with BuildKit, a registry on 127.0.0.1:5000, the mirrored Debian base, the smoke project's git
# mirror. Without root, or with IMGBUILD_SKIP_SETUP=1, it prepares nothing that needs root: it uses the
# engine and the registry that are there, and says what is missing. Then it installs imgbuild into
# .venv and runs `imgbuild build stack=cpu-smoke` (arguments are passed on to it).
#
#   IMGBUILD_SKIP_SETUP=1   do not run scripts/setup-host.sh, even as root
#   IMGBUILD_REGISTRY       the registry, host:port (default 127.0.0.1:5000, stacks.yaml's site.registry)
#   IMGBUILD_NAMESPACE      the namespace in it (default imgbuild, stacks.yaml's site.namespace)
#   IMGBUILD_GIT_MIRRORS    the folder of the smoke project's git mirror (default /var/lib/imgbuild/git;
#                           without root and without that folder: ~/.cache/imgbuild/git, made here)
# and the variables imgbuild itself reads: DOCKER_HOST, IMGBUILD_DOCKER (the engine and the docker CLI),
# IMGBUILD_WHEELHOUSE (the torch CPU wheel), IMGBUILD_CA_BUNDLE (a proxy's CA), DOCKER_CONFIG (registry
# credentials). Where the first three differ from stacks.yaml, the build reads a copy of stacks.yaml
# with them set: .imgbuild/quickstart/stacks.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$(pwd)
log() { echo "[quickstart] $*"; }
die() { echo "[quickstart] ERROR: $*" >&2; exit 1; }

DEFAULT_REGISTRY=127.0.0.1:5000 DEFAULT_NAMESPACE=imgbuild DEFAULT_MIRRORS=/var/lib/imgbuild/git
registry="${IMGBUILD_REGISTRY:-$DEFAULT_REGISTRY}"
namespace="${IMGBUILD_NAMESPACE:-$DEFAULT_NAMESPACE}"
mirrors="${IMGBUILD_GIT_MIRRORS:-$DEFAULT_MIRRORS}"

# 1. The host: root prepares it; anyone else uses what is there.
if [ "${IMGBUILD_SKIP_SETUP:-}" = 1 ]; then
    log "IMGBUILD_SKIP_SETUP=1: using the engine and the registry that are there"
    setup=no
elif [ "$(id -u)" -eq 0 ]; then
    IMGBUILD_REGISTRY="$registry" IMGBUILD_GIT_MIRRORS="$mirrors" bash scripts/setup-host.sh
    setup=yes
else
    log "not root: using the engine and the registry that are there (scripts/setup-host.sh needs root)"
    setup=no
fi

# 2. imgbuild itself (no root: a virtual environment in the checkout).
[ -x .venv/bin/python ] || python3 -m venv .venv || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
log "installing imgbuild into .venv"
.venv/bin/python -m pip install -q -e . || die "pip install -e . failed"

# 3. What the cpu-smoke build needs, checked the way imgbuild checks it.
if [ "$setup" = no ]; then
    docker_cli="${IMGBUILD_DOCKER:-$(command -v docker || echo /usr/bin/docker)}"
    "$docker_cli" info >/dev/null 2>&1 ||
        die "no Docker engine answers '$docker_cli info'${DOCKER_HOST:+ at DOCKER_HOST=$DOCKER_HOST}: start one (as root: bash scripts/setup-host.sh), join the docker group, or point DOCKER_HOST at a rootless engine"
    if [ ! -d "$mirrors/smoke-project.git" ] && [ -z "${IMGBUILD_GIT_MIRRORS:-}" ] && ! [ -w "$(dirname "$mirrors")" ]; then
        mirrors="${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild/git"
    fi
    if [ ! -d "$mirrors/smoke-project.git" ]; then
        log "making the smoke project's git mirror in $mirrors"
        IMGBUILD_GIT_MIRRORS="$mirrors" bash scripts/make-smoke-mirror.sh >/dev/null || die "scripts/make-smoke-mirror.sh failed"
    fi
fi
.venv/bin/python - "$registry" <<'EOF' || exit 1
import sys
from builder.errors import ImgbuildError
from builder.ship.registry import Registry
registry = sys.argv[1]
try:
    Registry(registry).ping()
    if not Registry(registry).manifest_digest("mirror/debian", "bookworm"):
        sys.exit(f"[quickstart] ERROR: {registry}/mirror/debian:bookworm, the cpu-smoke stack's base, is not in the "
                 "registry: as root, IMGBUILD_REGISTRY={registry} bash scripts/setup-host.sh seeds it (debootstrap); "
                 "or push any Debian 12 image there under that name")
except ImgbuildError as exc:
    sys.exit(f"[quickstart] ERROR: the registry {registry} does not answer: {exc.message} (set IMGBUILD_REGISTRY to "
             "one that does; as root, bash scripts/setup-host.sh starts one on 127.0.0.1:5000)")
EOF

# 4. stacks.yaml as it is, or a copy with this host's registry, namespace and mirror.
stacks=stacks.yaml
if [ "$registry" != "$DEFAULT_REGISTRY" ] || [ "$namespace" != "$DEFAULT_NAMESPACE" ] || [ "$mirrors" != "$DEFAULT_MIRRORS" ]; then
    stacks=.imgbuild/quickstart/stacks.yaml
    mkdir -p "$(dirname "$stacks")"
    .venv/bin/python - "$registry" "$namespace" "$DEFAULT_MIRRORS" "$mirrors" "$stacks" <<'EOF'
import sys
import yaml
registry, namespace, old, new, out = sys.argv[1:]
data = yaml.safe_load(open("stacks.yaml"))
data["site"].update(registry=registry, namespace=namespace)
for project in data.get("projects", {}).values():
    source = project.get("params", {}).get("source", {})
    if isinstance(source, dict) and str(source.get("repo", "")).startswith(f"file://{old}/"):
        source["repo"] = f"file://{new}/" + source["repo"][len(f"file://{old}/"):]
with open(out, "w") as f:
    f.write("# written by scripts/quickstart.sh from stacks.yaml: site.registry, site.namespace and the git mirror of this host\n")
    yaml.safe_dump(data, f, sort_keys=False)
EOF
    # The lock travels with it: its Python entries stand for the layers' definitions, not for this host.
    [ ! -f stacks.lock.yaml ] || cp stacks.lock.yaml "$(dirname "$stacks")/stacks.lock.yaml"
    log "registry $registry, namespace $namespace, git mirror $mirrors: building from $stacks"
fi
file_opt=()
[ "$stacks" = stacks.yaml ] || file_opt=(-f "$stacks")

# 5. The main job.
log "imgbuild build stack=cpu-smoke ${file_opt[*]} $*"
set +e
.venv/bin/imgbuild build stack=cpu-smoke "${file_opt[@]}" "$@"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
    log "imgbuild build exited $rc (README: Exit codes); the run's logs are in .imgbuild/runs/ (the newest folder)"
    exit "$rc"
fi
cat <<EOF
[quickstart] done: cpu-smoke is built, validated and released in $registry/$namespace.
[quickstart] next:
  .venv/bin/imgbuild validate stack=cpu-smoke ${file_opt[*]}   # the released image's checks, run again
  .venv/bin/imgbuild plan --explain stack=cpu-smoke ${file_opt[*]}   # its layer images and what makes each content key
  mkdir ~/my-site && cd ~/my-site && $here/.venv/bin/imgbuild init   # your first stack (README: Your first stack)
  bash scripts/test.sh                            # the whole test suite (as root: installs the test tools too)
EOF
