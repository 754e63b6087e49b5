#!/usr/bin/env bash
# Makes the local git mirror that the cpu-smoke stack pins: examples/smoke-project committed twice
# (revision 1, then revision 2) with fixed authors and dates, so that the commit shas are the same
# on every machine and stacks.yaml can pin them. It plays the part of a site's mirror of a team's
# repository; no public git host is reachable here.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest=${IMGBUILD_GIT_MIRRORS:-/var/lib/imgbuild/git}/smoke-project.git
export GIT_AUTHOR_NAME=imgbuild GIT_AUTHOR_EMAIL=imgbuild@localhost GIT_COMMITTER_NAME=imgbuild \
       GIT_COMMITTER_EMAIL=imgbuild@localhost GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/examples/smoke-project/." "$work/"
find "$work" -name __pycache__ -prune -exec rm -rf {} +
chmod -R u=rwX,go=rX "$work"
git -C "$work" init -q -b main
git -C "$work" add -A
GIT_AUTHOR_DATE="2026-11-01T00:00:00Z" GIT_COMMITTER_DATE="2026-11-01T00:00:00Z" \
  git -C "$work" commit -q -m "smoke-train revision 1"
git -C "$work" tag -a v1 -m "revision 1"
sed -i 's/^REVISION = 1$/REVISION = 2/' "$work/smoke_train/__init__.py"
git -C "$work" add -A
GIT_AUTHOR_DATE="2026-11-02T00:00:00Z" GIT_COMMITTER_DATE="2026-11-02T00:00:00Z" \
  git -C "$work" commit -q -m "smoke-train revision 2"
git -C "$work" tag -a v2 -m "revision 2"
rm -rf "$dest.tmp" && mkdir -p "$(dirname "$dest")"
git clone -q --bare "$work" "$dest.tmp"
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "mirror $dest: v1 $(git -C "$dest" rev-parse 'v1^{commit}') v2 $(git -C "$dest" rev-parse 'v2^{commit}')"
