"""The stack card: what a release is, in the stack's own words, stored beside the released image.

The measured manifest beside each layer image says what is in the image. It does not say what the
stack declared, because one layer image can serve several stacks: the GPUs it is meant for, its
description, its platforms, its runtime environment, the layers of each platform's chain, and whether the
site released it with its GPU checks waived (site.ci.gpu_checks). promote writes those as an OCI artifact,
NAMESPACE/STACK:sha256-HEX.stack, before the first tag names the release. The catalog (builder.catalog) reads it, so that it needs the registry and nothing else.
"""

from __future__ import annotations

import time

from builder.ship import gpuproof
from builder.ship.oci import put_document, stored_document
from builder.ship.registry import Registry

CARD_TYPE = "application/vnd.imgbuild.stack.v1+json"


def card_tag(release_digest: str) -> str:
    return release_digest.replace(":", "-") + ".stack"


def card(spec, plan, name: str) -> dict:
    """The card of stack `name` as the plan releases it."""
    stack = spec.stack(name)
    return {
        "stack": name, "description": stack.description or "",
        "gpus": [g.name for g in stack.gpus], "platforms": list(plan.platforms(name)),
        "base": stack.base.ref(spec.site),
        "runtime_env": stack.runtime_env(),
        "chains": {p: [{"layer": n.name, "kind": n.layer.kind.name, "key": n.short} for n in plan.chain(name, p)]
                   for p in plan.platforms(name)},
        "tag_templates": list(stack.tags),
        # Why this release's GPU checks may never have run on one of its GPUs (site.ci.gpu_checks), else None:
        # a stack with GPUs is otherwise released only on GPU proof (builder.ship.gpuproof).
        "gpu_checks_waived": gpuproof.waived(spec, plan, name),
        # When this release was made: gc orders a stack's releases by it (a rollback is the newest).
        "released": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write(reg: Registry, repo: str, release_digest: str, data: dict) -> str:
    return put_document(reg, repo, card_tag(release_digest), data, CARD_TYPE, release_digest)


def read(reg: Registry, repo: str, release_digest: str) -> dict | None:
    return stored_document(reg, repo, card_tag(release_digest), CARD_TYPE, "the stack card")


__all__ = ["card", "card_tag", "read", "write"]
