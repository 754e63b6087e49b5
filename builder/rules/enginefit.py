"""IB118: what the chosen engine cannot build, said at `check` instead of an hour into a build.

The rendered Dockerfiles are written for BuildKit. Buildah (Podman's builder) reads most of them, but the
release Debian 12 ships (1.28, the Podman 4.3 engine) refuses some BuildKit syntax outright. Each refusal
below was measured here with `podman build` on a one-line Dockerfile (docs/podman.md lists them):
- heredocs (`RUN <<EOF`): read as instructions, "Unknown instruction";
- COPY flags other than --chmod, --chown, --from (--link, --parents, --exclude);
- ADD flags other than --chmod, --chown (--checksum, --keep-git-dir, --link);
- RUN flags other than --mount (--network, --security);
- a cache mount with sharing=private, a secret mount with env= (BuildKit 0.12).
"""

from __future__ import annotations

import re

from builder.core.dockerfile import parse
from builder.rules.findings import Finding
from builder.core.yamlsrc import dotted

RULE = "IB118"
BUILDAH = "Buildah 1.28 (Podman 4.3)"
FLAGS = {"COPY": {"chmod", "chown", "from"}, "ADD": {"chmod", "chown"}, "RUN": {"mount"}}
FLAG = re.compile(r"^--([a-z][a-z-]*)(?:=(\S*))?")
SOURCE = "measured with podman build 4.3.1 / Buildah 1.28.2 (docs/podman.md)"


def refusals(text: str) -> list[tuple[int, str]]:
    """(line, what Buildah 1.28 refuses) of one Dockerfile."""
    out = []
    for ins in parse(text):
        if ins.keyword not in FLAGS:
            continue
        if ins.heredocs:
            out.append((ins.line, f"{ins.keyword} with a heredoc (<<{ins.heredocs[0].name}): {BUILDAH} reads no heredocs"))
        rest = ins.args.lstrip()
        while True:
            m = FLAG.match(rest)
            if not m:
                break
            name, value = m.group(1), m.group(2) or ""
            if name not in FLAGS[ins.keyword]:
                allowed = ", ".join(f"--{f}" for f in sorted(FLAGS[ins.keyword]))
                out.append((ins.line, f"{ins.keyword} --{name}: {BUILDAH} takes only {allowed}"))
            elif name == "mount":
                options = dict(o.split("=", 1) if "=" in o else (o, "") for o in value.split(","))
                if options.get("type") == "cache" and options.get("sharing") == "private":
                    out.append((ins.line, f"a cache mount with sharing=private: {BUILDAH} knows shared and locked"))
                if options.get("type") == "secret" and "env" in options:
                    out.append((ins.line, f"a secret mount with env=: {BUILDAH} mounts secrets as files only"))
            rest = rest[m.end():].lstrip()
    return out


def engine_findings(spec, plan, engine: str | None) -> list[Finding]:
    """IB118 per rendered layer the engine cannot build; none for Docker's BuildKit, which they are written for."""
    if (engine or spec.site.engine or "docker") != "podman":
        return []
    out = []
    for node in plan.nodes.values():
        stack = plan.users[node.key][0] if plan.users.get(node.key) else ""
        for line, what in refusals(node.dockerfile):
            out.append(Finding(rule=RULE, severity="error", file=spec.file, line=node.layer.line,
                               key=dotted((node.layer.section, node.layer.name)), stack=stack,
                               message=f"rendered Dockerfile line {line}: {what}", source=SOURCE,
                               fix="write the fragment without it (a script file COPY'd in for a heredoc), or "
                                   "build this stack with --engine docker"))
    return out
