#!/usr/bin/env bash
# Makes the local git mirrors that stacks pin, from folders of examples/, committed with fixed authors
# and dates so that the commit shas are the same on every machine and stacks pin them:
#   smoke-project.git   examples/smoke-project, revision 1 (tag v1) then revision 2 (tag v2): cpu-smoke
#   tiny-cuda-ext.git   examples/tiny-cuda-ext (tag v1), then v2 whose build ignores the stack's arch list
#                       and compiles for 8.0 only (a wheel that ships without the newest arch): the
#                       CUDA arch-coverage tests (issue 13)
# They play the part of a site's mirrors of its teams' repositories; no public git host is reachable here.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mirrors=${IMGBUILD_GIT_MIRRORS:-/var/lib/imgbuild/git}
export GIT_AUTHOR_NAME=imgbuild GIT_AUTHOR_EMAIL=imgbuild@localhost GIT_COMMITTER_NAME=imgbuild \
       GIT_COMMITTER_EMAIL=imgbuild@localhost GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

checkout() {   # checkout NAME: a fresh repository holding examples/NAME
    cp -r "$here/examples/$1/." "$work/$1/"
    find "$work/$1" -name __pycache__ -prune -exec rm -rf {} +
    chmod -R u=rwX,go=rX "$work/$1"
    git -C "$work/$1" init -q -b main
}

commit() {   # commit NAME DATE MESSAGE TAG
    git -C "$work/$1" add -A
    GIT_AUTHOR_DATE="$2" GIT_COMMITTER_DATE="$2" git -C "$work/$1" commit -q -m "$3"
    git -C "$work/$1" tag -a "$4" -m "$3"
}

refs() {   # refs REPO: each branch and tag with the commit it names
    git -C "$1" for-each-ref --format='%(refname) %(if)%(*objectname)%(then)%(*objectname)%(else)%(objectname)%(end)'
}

publish() {   # publish NAME: replace the bare mirror at once, never leave half of one
    local dest="$mirrors/$1.git"
    # The same commits as the mirror there: keep it, so that a build fetching from it meanwhile
    # (a test beside a second setup) never finds it gone.
    if [ -d "$dest" ] && [ "$(refs "$dest")" = "$(refs "$work/$1")" ]; then
        printf 'mirror %s (current):' "$dest"
        for tag in $(git -C "$dest" tag); do printf ' %s %s' "$tag" "$(git -C "$dest" rev-parse "$tag^{commit}")"; done
        echo
        return
    fi
    rm -rf "$dest.tmp" && mkdir -p "$mirrors"
    git clone -q --bare "$work/$1" "$dest.tmp"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    printf 'mirror %s:' "$dest"
    for tag in $(git -C "$dest" tag); do printf ' %s %s' "$tag" "$(git -C "$dest" rev-parse "$tag^{commit}")"; done
    echo
}

mkdir -p "$work/smoke-project" "$work/tiny-cuda-ext"
checkout smoke-project
commit smoke-project 2026-11-01T00:00:00Z "smoke-train revision 1" v1
sed -i 's/^REVISION = 1$/REVISION = 2/' "$work/smoke-project/smoke_train/__init__.py"
commit smoke-project 2026-11-02T00:00:00Z "smoke-train revision 2" v2
publish smoke-project

checkout tiny-cuda-ext
commit tiny-cuda-ext 2026-12-01T00:00:00Z "tiny-cuda-ext 1.0" v1
sed -i 's/^        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")$/        arch_list = "8.0"  # revision 2 ignores the stack/' \
    "$work/tiny-cuda-ext/setup.py"
grep -q '^        arch_list = "8.0"' "$work/tiny-cuda-ext/setup.py"
commit tiny-cuda-ext 2026-12-02T00:00:00Z "tiny-cuda-ext 1.0, built for 8.0 only" v2
publish tiny-cuda-ext
