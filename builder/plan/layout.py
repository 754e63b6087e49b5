"""Where imgbuild keeps things in a registry: the one owner of the layout, so no module spells it.

    NAMESPACE/layers/LAYER:KEY                   a layer image, tagged by its content key
    NAMESPACE/layers/LAYER:sha256-HEX.imgbuild   the measured manifest of that image (an OCI artifact)
    NAMESPACE/layers/LAYER:sha256-HEX.att        the signed provenance of that image (site.trust: builder.ship.trust)
    NAMESPACE/layers/LAYER:KEY.pending-ID        an image staged by one run before its key tag names it
    NAMESPACE/STACK:TAG                          a stack's release tags (copies of its top layer image)
    NAMESPACE/STACK:sha256-HEX.att               the signed provenance of a release (site.trust)
    NAMESPACE/STACK:imgbuild-release-HASH        which release (serial) last moved TAG (an OCI artifact)
    NAMESPACE/STACK:sha256-HEX.sbom              the SBOM of a released image (also beside a layer image)
    NAMESPACE/imgbuild-leases:lease-RUN          the keys a running build or release may still need (gc keeps them)
"""

from __future__ import annotations

LAYERS = "layers"
LEASES = "imgbuild-leases"


def layer_repo(namespace: str, layer: str) -> str:
    return f"{namespace}/{LAYERS}/{layer}"


def pending_tag(key: str, stage_id: str) -> str:
    """Where one run stages a node's image before its key tag names it (see Builder.publish_node)."""
    return f"{key}.pending-{stage_id}"


def lease_repo(namespace: str) -> str:
    return f"{namespace}/{LEASES}"


def release_repo(namespace: str, stack: str) -> str:
    return f"{namespace}/{stack}"


def artifact_tag(image_digest: str) -> str:
    """The tag of the manifest artifact stored beside an image."""
    return image_digest.replace(":", "-") + ".imgbuild"


def attestation_tag(image_digest: str) -> str:
    """The tag of the signed attestation (a DSSE envelope) stored beside an image or release."""
    return image_digest.replace(":", "-") + ".att"


def release_record_tag(tag: str) -> str:
    """The tag of the record saying which release last moved `tag` (hashed: a tag may be 128 long)."""
    import hashlib
    return "imgbuild-release-" + hashlib.sha256(tag.encode()).hexdigest()[:24]


def layer_of_release(repo: str, layer: str) -> str | None:
    """For a release repository (NAMESPACE/STACK), the repository of the layer image it copies; None
    when repo already is a layer repository."""
    namespace = repo.rsplit("/", 1)[0] if "/" in repo else ""
    if not namespace or namespace.endswith("/" + LAYERS):
        return None
    return layer_repo(namespace, layer)


def parent_of(labels: dict) -> tuple[str, str] | None:
    """(repository, digest or tag) of the parent an image's io.imgbuild.parent label names, the registry host
    off: REGISTRY/REPO@DIGEST, or REGISTRY/REPO:KEY where the child was built on its parent's local image.
    None where the label is absent (not an imgbuild image)."""
    ref = labels.get("io.imgbuild.parent")
    if not isinstance(ref, str) or "/" not in ref:
        return None
    path = ref.split("/", 1)[1]
    if "@" in path:
        repo, _, digest = path.partition("@")
        return (repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo), digest
    repo, _, tag = path.rpartition(":")
    return (repo, tag) if repo else None


__all__ = ["layer_repo", "lease_repo", "parent_of", "release_repo", "artifact_tag", "attestation_tag", "layer_of_release", "release_record_tag"]
