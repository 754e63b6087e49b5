"""The measured manifest of an image, and where it is stored: beside the image in the registry.

The manifest (packages, env, ds_report ops, check results, versions, arch coverage, labels) is
pushed as a small OCI artifact tagged `sha256-<image digest hex>.imgbuild` in the image's own
repository, so `diff` and `build` read it with three small requests and never pull a layer.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict

from builder import __version__
from builder.ship import gpuproof
from builder.ship.checks import CheckResult, parse_ds_report
from builder.errors import ValidationFailed
from builder.plan.layout import artifact_tag
from builder.load.versions import measured as measured_versions
from builder.ship.oci import stored_document
from builder.ship.registry import Registry
from builder.errors import RegistryError

SCHEMA = "imgbuild.manifest/v1"
ARTIFACT_TYPE = "application/vnd.imgbuild.manifest.v1+json"
CONFIG_TYPE = "application/vnd.imgbuild.config.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# Environment that says nothing about the image (set per container by the engine).
VOLATILE_ENV = {"HOSTNAME", "HOME", "PWD", "SHLVL", "_"}


def checks_hash(checks) -> str:
    """Identifies the set of checks an image was validated against (a stricter set revalidates)."""
    body = [[c.id, c.check, c.gpu, json.dumps(c.args, sort_keys=True, default=str)] for c in checks]
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()


def build_manifest(node, facts: dict, results: list[CheckResult], image_digest: str | None, labels: dict,
                   checks, gpu: bool = False, kinds=()) -> dict:
    """kinds: the loaded layer kinds, whose `versions:` say which distributions to record as versions.
    gpu: the checks ran where a GPU was; which one (gpu_model, a catalog name, and gpu_name, as the device
    names itself) is read from the probe's measurement in the container, else from the host's nvidia-smi
    (gpuproof.identify). Release of a GPU stack asks that this GPU be one of the stack's (gpuproof.unproven)."""
    ds = facts.get("ds_report")
    gpu_model, gpu_name = gpuproof.identify(facts) if gpu else (None, None)
    return {
        "schema": SCHEMA,
        "builder_version": __version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "key": node.key,
        "layer": node.name,
        "kind": node.layer.kind.name,
        "parent": node.parent,
        "base": node.base_ref,
        "image_digest": image_digest,
        "inputs": node.inputs,
        "labels": labels,
        "checks_hash": checks_hash(checks),
        "outcome": "passed" if all(r.ok for r in results) else "failed",
        "validated_with_gpu": gpu,
        "gpu_model": gpu_model,
        "gpu_name": gpu_name,
        "checks": [asdict(r) for r in results],
        "versions": measured_versions(facts, kinds),
        "arch_list": (facts.get("torch") or {}).get("arch_list"),
        # The device code of each extension binary the arch-coverage checks read: {root: {file: targets}}.
        "cuda_code": facts.get("cuda_code") or {},
        "python_packages": facts.get("dists", {}),
        "debian_packages": facts.get("dpkg", {}),
        "env": {k: v for k, v in sorted(facts.get("env", {}).items()) if k not in VOLATILE_ENV},
        "ds_report_ops": parse_ds_report(ds["out"]) if ds and ds.get("rc") == 0 else None,
    }


def verdict(recorded: dict | None, node, digest: str, gpu: bool = False) -> str | None:
    """Why `recorded` does not prove that image `digest` passed every check of `node`, or None when it does.

    This is the one reading of "validated" (build's lookup and promote both ask it). It trusts no summary
    field: every check the node has today must appear among the recorded results, and none of them may
    have failed. A GPU check skipped on a machine without a GPU is accepted, unless the caller has a GPU
    (then the image is validated again, so that the GPU checks really run). That is proof enough to reuse an
    image, not to release a stack that declares GPUs: promote also asks gpuproof.unproven, per stack, whether
    the GPU checks ran on one of that stack's GPUs (unless site.ci.gpu_checks waives it).
    """
    if not recorded:
        return "no imgbuild manifest is stored beside it"
    if recorded.get("schema") != SCHEMA:
        return f"its manifest has schema {recorded.get('schema')!r}, not {SCHEMA}"
    if recorded.get("key") != node.key:
        return "its manifest was recorded for another content key"
    if recorded.get("image_digest") != digest:
        return "its manifest was recorded for another image"
    if recorded.get("checks_hash") != checks_hash(node.checks):
        return "its checks changed since it was validated"
    results = {r.get("id"): r for r in recorded.get("checks") or [] if isinstance(r, dict)}
    for spec in node.checks:
        r = results.get(spec.id)
        if r is None:
            return f"check {spec.id} has no recorded result"
        if r.get("status") not in ("passed", "skipped"):
            return f"check {spec.id} is recorded as {r.get('status')}"
        if r["status"] == "skipped" and spec.gpu and gpu and not recorded.get("validated_with_gpu"):
            return f"GPU check {spec.id} was skipped where no GPU was; this machine has one"
    return None


def push_manifest(reg: Registry, repo: str, manifest: dict) -> str:
    # The registry only ever says "validated": a failed result is kept in the run folder, never here,
    # so no later reader can mistake it for a pass (and no failed run erases an earlier pass).
    failed = [c["id"] for c in manifest["checks"] if c["status"] not in ("passed", "skipped")]
    if failed or manifest.get("outcome") != "passed":
        raise ValidationFailed(f"{manifest['layer']}: refusing to store a manifest with failed checks "
                               f"({', '.join(failed) or 'outcome ' + str(manifest.get('outcome'))}) in the registry")
    body = json.dumps(manifest, sort_keys=True, indent=1).encode()
    config = b"{}"
    cdig = reg.put_blob(repo, config)
    bdig = reg.put_blob(repo, body)
    oci = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": CONFIG_TYPE, "digest": cdig, "size": len(config)},
        "layers": [{"mediaType": ARTIFACT_TYPE, "digest": bdig, "size": len(body)}],
        "annotations": {"io.imgbuild.subject": manifest["image_digest"] or "", "io.imgbuild.key": manifest["key"]},
    }
    return reg.put_manifest(repo, artifact_tag(manifest["image_digest"]), json.dumps(oci).encode(), OCI_MANIFEST)


def fetch_manifest(reg: Registry, repo: str, image_digest: str) -> dict | None:
    """The check manifest stored beside an image; a RegistryError when what is stored is not one (verdict
    then reads no proof in it, and a reader says why)."""
    doc = stored_document(reg, repo, artifact_tag(image_digest), ARTIFACT_TYPE, "the check manifest")
    if doc is not None and not (isinstance(doc.get("checks", []), list) and isinstance(doc.get("key", ""), str)):
        raise RegistryError(f"the check manifest beside {repo}@{image_digest} is not of imgbuild's shape")
    return doc
