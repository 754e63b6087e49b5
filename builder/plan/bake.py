"""Interop: the rendered tree as a buildx bake file (docker-bake.json) and a plain script (build.sh).

Both build every layer node of the plan FROM ${PARENT}, parents first, from the node's context folder
nodes/TARGET (written by `render --out DIR --context`), and tag it as imgbuild pushes it (image_ref).
They are for building, reviewing or debugging a tree without imgbuild: neither validates an image,
pushes a manifest or moves a release tag. Both are pure text from the plan: no secret is ever in them.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from builder import __version__
from builder.plan.keys import Node, Plan, image_ref

NODES = "nodes"                        # DIR/nodes/TARGET: one build context per layer node
BAKE_FILE = "docker-bake.json"
SCRIPT = "build.sh"
DEFAULT = "default"
_BAD = re.compile(r"[^A-Za-z0-9_-]")   # bake's target and group names; newer bake refuses a dot in one

# The BuildKit secrets a rendered step may mount (layers/macros.j2 net()), all optional, and the
# variable the script reads each from: the same variables imgbuild reads (builder/ship/hostconf.py).
SECRETS = (("ca-bundle", "IMGBUILD_CA_BUNDLE", "file"), ("netrc", "IMGBUILD_NETRC", "file"),
           ("pip-index-url", "IMGBUILD_PIP_INDEX_URL", "value"))


@dataclass(frozen=True)
class Names:
    targets: dict      # node key -> bake target name (also its folder under nodes/)
    groups: dict       # stack name -> bake group name


def names(plan: Plan) -> Names:
    """One target per node, LAYER-KEY12 with every character bake refuses as '_'; one group per stack.
    A clash (two stacks 'a.b' and 'a_b', a stack named 'default') gets a -2, -3 suffix."""
    taken = {DEFAULT}

    def unique(raw: str) -> str:
        base = _BAD.sub("_", raw) or "_"
        name, n = base, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        return name

    targets = {key: unique(f"{node.name}-{node.short[:12]}") for key, node in plan.nodes.items()}
    return Names(targets=targets, groups={stack: unique(stack) for stack in plan.stacks})


def parent_ref(plan: Plan, node: Node) -> str:
    """What PARENT names: the base image (with its digest where known) for a root, else the parent
    node's image as imgbuild tags it."""
    return image_ref(plan.spec, plan.nodes[node.parent]) if node.parent else node.base_ref


def ancestors(plan: Plan, node: Node) -> list[Node]:
    """The node and every node beneath it, bottom first."""
    chain = [node]
    while chain[-1].parent:
        chain.append(plan.nodes[chain[-1].parent])
    return chain[::-1]


def bake_file(plan: Plan) -> dict:
    """docker-bake.json: paths are relative to DIR (run `docker buildx bake` there).

    The parent is wired twice, on purpose. args.PARENT is the parent's tag, so that the Dockerfile is
    the very one imgbuild builds and a plain `docker build` of the folder works once the parent is in
    the registry. contexts maps that same reference to `target:PARENT_TARGET`: the Dockerfile frontend
    expands ${PARENT} first and then looks the name up among the named contexts, so bake builds the
    parent first and feeds its result in directly, with no push and no race (args alone would not
    order the targets: bake starts them all at once, and a child would pull a tag not yet there).
    Named contexts need buildx >= 0.8 and a Dockerfile frontend >= 1.4 (BuildKit >= 0.10, Docker
    Engine >= 23). The engine here (20.10, built-in BuildKit, no buildx) has neither, so build.sh,
    which orders the builds itself, is the way to build the tree on it.
    Secrets are not in the file: give them with --set (docs/bake.md)."""
    n = names(plan)
    targets = {}
    for key, node in plan.nodes.items():
        name = n.targets[key]
        parent = parent_ref(plan, node)
        target = {"context": f"{NODES}/{name}", "dockerfile": "Dockerfile",
                  "args": {"PARENT": parent, **node.build_args}, "tags": [image_ref(plan.spec, node)],
                  "platforms": [node.platform]}
        if node.parent:
            target["contexts"] = {parent: f"target:{n.targets[node.parent]}"}
        targets[name] = target
    groups = {DEFAULT: {"targets": list(targets)}}
    groups.update({n.groups[stack]: {"targets": [n.targets[k] for k in keys]} for stack, keys in plan.stacks.items()})
    return {"group": groups, "target": targets}


def bake_json(plan: Plan) -> str:
    return json.dumps(bake_file(plan), indent=2) + "\n"


_HEAD = """\
#!/usr/bin/env bash
# Written by `imgbuild render --out` (imgbuild {version}); do not edit. Builds the layer images of
# {stacks}, parents first, without imgbuild: each layer is FROM ${{PARENT}}, the base image for
# the first layer and the parent layer's tag above it. Nothing is validated, pushed or released.
#
#   ./build.sh [NAME...]   NAME: a stack, a layer target (built with the layers beneath it), or
#                          default (everything, also when no NAME is given)
#   contexts    nodes/TARGET/, written by `imgbuild render --out DIR --context`
#   DOCKER      the CLI (default: docker); it must build with BuildKit: buildx, or a 20.10-22.x CLI
#               with DOCKER_BUILDKIT=1 (set here unless you set it)
#   PUSH=1      push each image after building it (a builder that cannot see the engine's images)
#   platforms   each layer is built for its node's platform (docker build --platform); another CPU's
#               than the engine's needs QEMU registered through binfmt_misc, and is slow
#   secrets     none in this file. Steps that reach a package index mount optional BuildKit secrets;
#               give them through the variables imgbuild reads: IMGBUILD_CA_BUNDLE=FILE,
#               IMGBUILD_NETRC=FILE, IMGBUILD_PIP_INDEX_URL=URL (written to a private temporary file
#               for the builds: older CLIs take file secrets only).
set -euo pipefail
cd "$(dirname "${{BASH_SOURCE[0]}}")"
DOCKER=${{DOCKER:-docker}}
export DOCKER_BUILDKIT=${{DOCKER_BUILDKIT:-1}}

secrets=()
secret_tmp=
trap 'if [ -n "$secret_tmp" ]; then rm -f "$secret_tmp"; fi' EXIT
"""

_BUILD = """
build() {  # TARGET PLATFORM IMAGE PARENT [BUILD-ARG...]
  local target=$1 platform=$2 image=$3 parent=$4
  shift 4
  if [ ! -f "nodes/$target/Dockerfile" ]; then
    echo "build.sh: nodes/$target holds no build context; run imgbuild render --out DIR --context" >&2
    exit 2
  fi
  echo "==> $target: $image for $platform (FROM $parent)" >&2
  local args=()
  for arg in "$@"; do args+=(--build-arg "$arg"); done
  "$DOCKER" build --platform "$platform" --file "nodes/$target/Dockerfile" --build-arg "PARENT=$parent" ${args[@]+"${args[@]}"} \\
    ${secrets[@]+"${secrets[@]}"} --tag "$image" "nodes/$target"
  if [ "${PUSH:-0}" = 1 ]; then "$DOCKER" push "$image"; fi
}
"""


def _secret_lines() -> list[str]:
    lines = []
    for sid, var, how in SECRETS:
        if how == "file":
            lines.append(f'if [ -n "${{{var}:-}}" ]; then secrets+=(--secret "id={sid},src=${{{var}}}"); fi')
        else:
            lines += [f'if [ -n "${{{var}:-}}" ]; then',
                      '  secret_tmp=$(umask 077 && mktemp "${TMPDIR:-/tmp}/imgbuild-secret-XXXXXX")',
                      f'  printf %s "${{{var}}}" >"$secret_tmp"',
                      f'  secrets+=(--secret "id={sid},src=$secret_tmp")',
                      'fi']
    return lines


def build_script(plan: Plan) -> str:
    """build.sh: one `build` line per node in plan order (parents first); every value shlex-quoted."""
    n = names(plan)
    q = shlex.quote
    lines = [_HEAD.format(version=__version__, stacks=", ".join(plan.stacks) or "no stack"), *_secret_lines(), _BUILD]
    # NAME -> the targets it stands for; a target stands for itself and what lies beneath it.
    choices = {DEFAULT: list(n.targets.values())}
    choices.update({n.groups[stack]: [n.targets[k] for k in keys] for stack, keys in plan.stacks.items()})
    choices.update({n.targets[key]: [n.targets[a.key] for a in ancestors(plan, node)] for key, node in plan.nodes.items()})
    lines += ["declare -A want=()", 'if [ $# -eq 0 ]; then set -- default; fi', 'for name in "$@"; do',
              '  case $name in']
    for name, targets in choices.items():
        lines.append(f"    {q(name)}) picked=({' '.join(q(t) for t in targets)}) ;;")
    lines += ['    *) echo "build.sh: no stack or target named $name; names: ' + " ".join(choices) + '" >&2; exit 2 ;;',
              "  esac",
              '  for t in "${picked[@]}"; do want[$t]=1; done',
              "done", ""]
    for key, node in plan.nodes.items():
        target = n.targets[key]
        words = [target, node.platform, image_ref(plan.spec, node), parent_ref(plan, node),
                 *(f"{k}={v}" for k, v in node.build_args.items())]
        lines.append(f'if [ -n "${{want[{target}]:-}}" ]; then build {" ".join(q(w) for w in words)}; fi')
    lines.append('echo "build.sh: done" >&2')
    return "\n".join(lines) + "\n"


__all__ = ["BAKE_FILE", "NODES", "SCRIPT", "Names", "names", "bake_file", "bake_json", "build_script",
           "parent_ref", "ancestors"]
