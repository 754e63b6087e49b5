"""The shapes imgbuild reads from a registry, checked before a field is used: image manifests and indexes,
and imgbuild's own artifacts beside an image (check manifests, SBOMs, release records).

A registry may answer anything, so a manifest whose config is a string, a layer size that is not a number,
an index entry without a digest or an artifact whose document is a list is a RegistryError that names the
object and the field: never a KeyError, a TypeError or exit 70.
"""

from __future__ import annotations

import json
import re

from builder.errors import RegistryError
from builder.ship.registry import Registry, check_digest, json_object

SERIAL = re.compile(r"^[0-9]{1,18}\Z")
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
OCI_INDEX = INDEX_TYPES[0]
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_CONFIG = "application/vnd.imgbuild.config.v1+json"   # the empty config of imgbuild's artifacts
CONFIG_MAX = 8 << 20   # an image config (labels, env, history); larger ones are refused, not read   # ASCII digits only: str.isdigit() also takes '²' and '٣'


def _field(obj: dict, key: str, kind: type, what: str, required: bool = True):
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RegistryError(f"{what}: {key} is {'missing' if value is None else type(value).__name__}, "
                            f"not {'a number' if kind is int else 'an object' if kind is dict else 'a list' if kind is list else 'text'}")
    if kind is int and value < 0:
        raise RegistryError(f"{what}: {key} is negative")
    return value


def descriptor(obj, what: str) -> dict:
    """An OCI descriptor: mediaType (text, when present), a digest in the grammar, a size that is a number."""
    if not isinstance(obj, dict):
        raise RegistryError(f"{what} is {type(obj).__name__}, not a descriptor object")
    check_digest(obj.get("digest"), f"{what} digest")
    _field(obj, "size", int, what, required=False)
    _field(obj, "mediaType", str, what, required=False)
    return obj


def image_manifest(manifest: dict, what: str) -> tuple[dict, list[dict]]:
    """(config descriptor, layer descriptors) of an image manifest."""
    config = descriptor(_field(manifest, "config", dict, what), f"{what}: config")
    layers = _field(manifest, "layers", list, what, required=False) or []
    return config, [descriptor(layer, f"{what}: layers[{i}]") for i, layer in enumerate(layers)]


def index_entries(index: dict, what: str) -> list[dict]:
    entries = _field(index, "manifests", list, what)
    out = []
    for i, entry in enumerate(entries):
        entry = descriptor(entry, f"{what}: manifests[{i}]")
        if entry.get("platform") is not None and not isinstance(entry["platform"], dict):
            raise RegistryError(f"{what}: manifests[{i}].platform is not an object")
        out.append(entry)
    return out


def is_index(manifest: dict, media_type: str) -> bool:
    return media_type in INDEX_TYPES or manifest.get("mediaType") in INDEX_TYPES


def platform_of(entry: dict) -> str | None:
    """An index entry's platform as os/architecture (a variant other than arm64's v8 is kept apart), or
    None for an entry that is no platform's image (BuildKit's attestations say unknown/unknown)."""
    p = entry.get("platform") or {}
    os_, arch = p.get("os"), p.get("architecture")
    if not isinstance(os_, str) or not isinstance(arch, str) or "unknown" in (os_, arch):
        return None
    variant = p.get("variant")
    return f"{os_}/{arch}" + (f"/{variant}" if isinstance(variant, str) and variant and variant != "v8" else "")


def platform_digests(reg: Registry, repo: str, reference: str, what: str) -> tuple[str, dict] | None:
    """(digest of what `reference` names, {platform: image manifest digest}), or None when absent. An index
    lists its entries; a single image is one entry, its platform read from its config."""
    found = reg.get_manifest(repo, reference)
    if not found:
        return None
    manifest, media_type, digest = found
    if is_index(manifest, media_type):
        out: dict = {}
        for entry in index_entries(manifest, f"image index {what}"):
            platform = platform_of(entry)
            if platform is not None and platform not in out:
                out[platform] = entry["digest"]
        return digest, out
    config, _ = image_manifest(manifest, f"manifest of {what}")
    conf = json_object(reg.get_blob(repo, config["digest"], limit=CONFIG_MAX), f"the config of {what}")
    os_, arch = conf.get("os"), conf.get("architecture")
    if not isinstance(os_, str) or not isinstance(arch, str):
        raise RegistryError(f"the config of {what} names no os and architecture")
    return digest, {f"{os_}/{arch}": digest}


def artifact_blob(manifest: dict, media_type: str, what: str) -> str | None:
    """The digest of the artifact's one layer of media_type, or None when it holds none."""
    _, layers = image_manifest(manifest, what)
    return next((layer["digest"] for layer in layers if layer.get("mediaType") == media_type), None)


def put_document(reg: Registry, repo: str, tag: str, data: dict, media_type: str, subject: str) -> str:
    """Store one of imgbuild's JSON documents beside an image as an OCI artifact under `tag` (the writing side of
    stored_document): an empty config, the document as its one layer, the image's digest as an annotation."""
    body = json.dumps(data, sort_keys=True, indent=1).encode()
    config = reg.put_blob(repo, b"{}")
    layer = reg.put_blob(repo, body)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": media_type,
                "config": {"mediaType": ARTIFACT_CONFIG, "digest": config, "size": 2},
                "layers": [{"mediaType": media_type, "digest": layer, "size": len(body)}],
                "annotations": {"io.imgbuild.subject": subject}}
    return reg.put_manifest(repo, tag, json.dumps(manifest, sort_keys=True).encode(), OCI_MANIFEST)


def stored_document(reg: Registry, repo: str, reference: str, media_type: str, what: str) -> dict | None:
    """imgbuild's JSON document stored as an artifact under `reference`: None when absent; a RegistryError
    when the artifact or its document is not of the shape imgbuild writes."""
    found = reg.get_manifest(repo, reference)
    if not found:
        return None
    digest = artifact_blob(found[0], media_type, f"{what} ({repo}:{reference})")
    if digest is None:
        return None
    return json_object(reg.get_blob(repo, digest), f"{what} stored at {repo}:{reference}")


def release_serial(manifest: dict, what: str) -> int | None:
    annotations = manifest.get("annotations")
    if annotations is None:
        return None
    if not isinstance(annotations, dict):
        raise RegistryError(f"{what}: annotations is not an object")
    value = annotations.get("io.imgbuild.serial")
    if value is None:
        return None
    if not isinstance(value, str) or not SERIAL.match(value):
        raise RegistryError(f"{what}: io.imgbuild.serial is not a release serial (ASCII digits); "
                            "the release record was not written by imgbuild")
    return int(value)


__all__ = ["descriptor", "image_manifest", "index_entries", "artifact_blob", "stored_document", "release_serial"]
