"""`imgbuild catalog`: what a site has released, read from the registry alone, for the cluster's users.

collect() reads every stack repository of a namespace (NAMESPACE/STACK whose images imgbuild labelled)
and, for each release (an image or an index some release tag names, newest first), what imgbuild stored
beside it: the measured manifest of each layer image of its chain (versions, ds_report ops, the archs in
the binaries, the checks and which GPU ran them), its SBOM, and the stack card promote wrote (GPUs,
description, platforms, runtime environment, and the site's reason where it released the stack with its GPU
checks waived). The newest release of a stack is compared with the one
before it by the image diff `imgbuild diff` computes. builder.catalog.page writes it as a static site.

The data is checked against catalog.schema.json (shipped beside this module) before anything is written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from builder.diff import imagediff
from builder.errors import ImgbuildError, RegistryError
from builder.plan.layout import LAYERS, LEASES, parent_of
from builder.ship import card as card_mod
from builder.ship import oci, sbom
from builder.ship.manifest import fetch_manifest
from builder.ship.registry import Ref, Registry, json_object

SCHEMA = Path(__file__).with_name("catalog.schema.json")
SCHEMA_ID = "imgbuild.catalog/1"
INTERNAL = ("imgbuild-release-", "sha256-")   # record and beside tags: never release tags
# The versions a user looks for first, in this order; every other measured version follows.
KEY_VERSIONS = ("python", "torch", "cuda", "cudnn", "nccl", "deepspeed", "apex", "transformer_engine",
                "flash_attn", "megatron_core")
FRAMEWORKS = {"torch": "PyTorch", "deepspeed": "DeepSpeed", "apex": "Apex", "transformer_engine": "Transformer Engine",
              "flash_attn": "flash-attn", "megatron_core": "Megatron-Core", "megatron": "Megatron-LM"}
PER_STACK = 10   # releases listed per stack (the newest in full)


class CatalogError(ImgbuildError):
    exit_code = 6
    label = "catalog"


def _created(labels: dict) -> str | None:
    value = labels.get("org.opencontainers.image.created")
    return value if isinstance(value, str) and value[:4].isdigit() else None


def _text(value, limit: int = 200) -> str | None:
    return str(value)[:limit] if isinstance(value, str) and value else None


def _waiver(value) -> str | None:
    return _text(value.strip() if isinstance(value, str) else value)


class _Collector:
    def __init__(self, reg: Registry, namespace: str, say: Callable[[str], None], trust=None):
        self.reg, self.ns, self.say, self.trust = reg, namespace, say, trust
        self.sboms: dict = {}    # file name -> SBOM document (written by the page beside the JSON)

    def stacks(self) -> list:
        out = []
        for repo in self.reg.repositories(self.ns + "/"):
            rest = repo[len(self.ns) + 1:]
            if "/" in rest or rest in (LAYERS, LEASES):
                continue
            releases = self.releases(repo)
            if releases:
                out.append({"name": rest, "repository": f"{self.reg.host}/{repo}", "releases": releases})
        return out

    def releases(self, repo: str) -> list:
        by_digest: dict = {}
        for tag in self.reg.tags(repo):
            if tag.startswith(INTERNAL):
                continue
            digest = self.reg.manifest_digest(repo, tag)
            if digest:
                by_digest.setdefault(digest, []).append(tag)
        found = []
        for digest, tags in by_digest.items():
            try:
                images = self.images(repo, digest)
            except (ImgbuildError, KeyError, TypeError, ValueError) as exc:   # not an image imgbuild wrote
                self.say(f"note: {repo}@{digest[:19]} is left out: {str(exc).splitlines()[0][:120] if str(exc) else exc!r}")
                continue
            if images and all("io.imgbuild.key" in i["labels"] for i in images.values()):
                created = max((_created(i["labels"]) or "" for i in images.values()), default="")
                found.append((created, digest, tags, images))
        if not found:
            return []
        found.sort(key=lambda f: (f[0], f[1]), reverse=True)
        self.say(f"catalog: {repo}: {len(found)} release(s)")
        releases = [self.release(repo, digest, tags, images, created, full=i == 0)
                    for i, (created, digest, tags, images) in enumerate(found[:PER_STACK])]
        if len(found) > 1:
            releases[0]["changes"] = self.changes(repo, found[1][1], found[0][1], releases[0]["platforms"][0]["platform"])
            releases[0]["previous"] = found[1][1]
        return releases

    def images(self, repo: str, digest: str) -> dict:
        """platform -> {digest, labels, config} of a release: its one image, or each entry of its index."""
        got = self.reg.get_manifest(repo, digest)
        if not got:
            return {}
        manifest, media_type, _ = got
        entries = ({p: m["digest"] for m in oci.index_entries(manifest, f"{repo}@{digest}")
                    if (p := oci.platform_of(m)) is not None} if oci.is_index(manifest, media_type) else {None: digest})
        out = {}
        for platform, child in entries.items():
            found = self.reg.get_manifest(repo, child) if child != digest else got
            if not found or "config" not in found[0]:
                continue
            config = json_object(self.reg.get_blob(repo, found[0]["config"]["digest"], limit=1 << 24),
                                 f"the config of {repo}@{child}")
            labels = dict((config.get("config") or {}).get("Labels") or {})
            platform = platform or f"{config.get('os', 'linux')}/{config.get('architecture', 'amd64')}"
            out[platform] = {"digest": child, "labels": labels, "config": config}
        return out

    def release(self, repo: str, digest: str, tags: list, images: dict, created: str, full: bool) -> dict:
        stack_card = self.card(repo, digest)
        out = {"digest": digest, "tags": sorted(tags), "created": created or None,
               "reference": f"{self.reg.host}/{repo}@{digest}",
               "gpus": [str(g) for g in stack_card.get("gpus") or []] if stack_card else None,
               "description": str((stack_card or {}).get("description") or ""),
               "runtime_env": {str(k): str(v) for k, v in dict((stack_card or {}).get("runtime_env") or {}).items()},
               # Why the site released it without GPU proof (site.ci.gpu_checks), from the stack card; None: not
               # waived, or a card written before waivers were.
               "gpu_checks_waived": _waiver((stack_card or {}).get("gpu_checks_waived")),
               "provenance": self.provenance(repo, digest),
               "rebuild": self.rebuild(repo, digest),
               "platforms": [self.platform(repo, p, i, full) for p, i in images.items()]}
        return out

    def provenance(self, repo: str, digest: str) -> dict | None:
        """Who signed the release (builder.ship.trust.verify_release, every signature checked), or why it does
        not verify; None where the site does not sign (site.trust not given)."""
        if self.trust is None:
            return None
        from builder.ship import trust
        try:
            found = trust.verify_release(self.reg, self.trust, repo, digest)
        except trust.TrustError as exc:
            return {"verified": False, "error": _text(exc.message, 300)}
        return {"verified": True, "signed_by": _text(found["signed_by"]), "signed_at": _text(found["signed_at"]),
                "builder": _text(found.get("builder")), "commit": _text((found.get("spec") or {}).get("commit"))}

    def rebuild(self, repo: str, digest: str) -> dict | None:
        """What `verify --rebuild --record` found for this release (docs/reproducible.md), or None: never rebuilt."""
        from builder.ship import reproduce
        try:
            found = reproduce.recorded(self.reg, repo, digest)
        except RegistryError as exc:
            self.say(f"note: {repo}@{digest[:19]}: its rebuild result cannot be read ({str(exc)[:120]})")
            return None
        if not found:
            return None
        layers = [v for v in found.get("layers") or [] if isinstance(v, dict)]
        return {"engine": _text(found.get("engine")), "when": _text(found.get("when")),
                "identical": sum(1 for v in layers if v.get("identical") is True), "total": len(layers),
                "time_only": [_text(v.get("layer")) for v in layers if v.get("time_only") is True],
                "drifting": [_text(v.get("layer")) for v in layers
                             if v.get("identical") is not True and v.get("time_only") is not True],
                "file_times": _text(found.get("file_times"), 300)}

    def card(self, repo: str, digest: str) -> dict | None:
        try:
            return card_mod.read(self.reg, repo, digest)
        except RegistryError as exc:
            self.say(f"note: {repo}@{digest[:19]}: its stack card cannot be read ({str(exc)[:120]})")
            return None

    def platform(self, repo: str, platform: str, image: dict, full: bool) -> dict:
        labels = image["labels"]
        top = f"{self.ns}/{LAYERS}/{labels.get('org.opencontainers.image.title', '')}"
        layers = self.chain(top, image["digest"])
        recorded = layers[0]["recorded"] if layers else None
        versions = dict((recorded or {}).get("versions") or {})
        ops = {op: v for op, v in dict((recorded or {}).get("ds_report_ops") or {}).items() if isinstance(v, dict)}
        checks = [c for c in (recorded or {}).get("checks") or [] if isinstance(c, dict)]
        gpu_checks = [c for c in checks if c.get("gpu")]
        archs: set = set(a for a in (recorded or {}).get("arch_list") or [] if isinstance(a, str))
        binaries: dict = {}
        for layer in layers:
            for files in dict((layer["recorded"] or {}).get("cuda_code") or {}).values():
                for path, targets in dict(files).items():
                    binaries[str(path).split("site-packages/", 1)[-1]] = sorted(str(t) for t in targets or [])
        megatron = next((c for layer in layers if layer["kind"] in ("megatron", "project")
                         for name, c in layer["sources"].items() if "megatron" in (layer["layer"] + name).lower()), None)
        out = {
            "platform": platform, "digest": image["digest"],
            "versions": {k: str(v) for k, v in sorted(versions.items(), key=lambda kv: (
                KEY_VERSIONS.index(kv[0]) if kv[0] in KEY_VERSIONS else len(KEY_VERSIONS), kv[0]))},
            "megatron_commit": megatron,
            "deepspeed_ops_prebuilt": sorted(op for op, v in ops.items() if v.get("installed")),
            "torch_arch_list": sorted(archs),
            "binary_archs": binaries,
            "checks": {"passed": sum(c.get("status") == "passed" for c in checks),
                       "failed": sum(c.get("status") == "failed" for c in checks),
                       "skipped": sum(c.get("status") == "skipped" for c in checks),
                       "gpu_checks": len(gpu_checks),
                       "gpu_checks_ran": sum(c.get("status") == "passed" for c in gpu_checks),
                       "validated_with_gpu": bool((recorded or {}).get("validated_with_gpu")),
                       "gpu_model": _text((recorded or {}).get("gpu_model")),
                       "list": [{"id": str(c.get("id")), "status": str(c.get("status")), "gpu": bool(c.get("gpu"))}
                                for c in checks] if full else []},
            "layers": [{k: layer[k] for k in ("layer", "kind", "key", "sources")} for layer in layers],
            "sbom": self.sbom(repo, top, image["digest"], platform) if full else None,
        }
        return out

    def chain(self, repo: str, digest: str) -> list:
        """Each layer image from the top down, with its measured manifest (None where none is stored)."""
        out, seen = [], set()
        while repo.startswith(f"{self.ns}/{LAYERS}/") and (repo, digest) not in seen:
            seen.add((repo, digest))
            try:
                recorded = fetch_manifest(self.reg, repo, digest) if digest.startswith("sha256:") else None
            except RegistryError:
                recorded = None
            labels = dict((recorded or {}).get("labels") or {})
            sources = dict(((recorded or {}).get("inputs") or {}).get("sources") or {})
            out.append({"layer": repo.rsplit("/", 1)[-1], "kind": str((recorded or {}).get("kind") or ""),
                        "key": str((recorded or {}).get("key") or "")[:32], "recorded": recorded,
                        "sources": {str(k): str(v) for k, v in sources.items()}})
            parent = parent_of(labels)
            if parent is None:
                break
            repo, digest = parent
            if not digest.startswith("sha256:"):
                digest = self.reg.manifest_digest(repo, digest) or ""
        return out

    def sbom(self, repo: str, layer_repo: str, digest: str, platform: str) -> str | None:
        for where in (repo, layer_repo):
            try:
                doc = sbom.fetch(self.reg, where, digest)
            except RegistryError:
                doc = None
            if doc is not None:
                name = f"sbom/{repo.rsplit('/', 1)[-1]}-{digest[7:19]}-{platform.replace('/', '-')}.cdx.json"
                self.sboms[name] = doc
                return name
        return None

    def changes(self, repo: str, old: str, new: str, platform: str) -> list:
        """What changed from the stack's previous release to this one: the sections of `imgbuild diff`."""
        try:
            a = imagediff.fetch_image(self.reg, old, Ref(self.reg.host, repo, digest=old), platform)
            b = imagediff.fetch_image(self.reg, new, Ref(self.reg.host, repo, digest=new), platform)
        except ImgbuildError as exc:
            return [{"section": "diff", "changes": [], "note": f"not compared: {str(exc)[:200]}"}]
        _, sections = imagediff.compare(a, b)
        out = []
        for s in sections:
            if s.changes:
                out.append({"section": s.title, "note": s.note,
                            "changes": [{"name": c.name, "old": c.old, "new": c.new, "direction": c.direction}
                                        for c in s.changes[:200]],
                            "more": max(0, len(s.changes) - 200)})
        return out


def collect(reg: Registry, namespace: str, say: Callable[[str], None] = lambda _: None, trust=None) -> dict:
    """The catalog's data: every released stack of the namespace, newest release first. trust: the site's
    site.trust, whose keys each release's provenance is verified against (None: not shown)."""
    collector = _Collector(reg, namespace, say, trust)
    data = {"schema": SCHEMA_ID, "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "registry": reg.host, "namespace": namespace, "stacks": collector.stacks()}
    check(data)
    return {"data": data, "sboms": collector.sboms}


def check(data: dict) -> None:
    """The data against the shipped schema: a mismatch is imgbuild's bug, said before anything is written."""
    import jsonschema
    schema = json.loads(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].path)
        raise CatalogError(f"the catalog's data does not match {SCHEMA.name} at {where or '/'}: "
                           f"{errors[0].message[:200]} (a bug: nothing was written)")


__all__ = ["collect", "check", "CatalogError", "FRAMEWORKS", "KEY_VERSIONS", "SCHEMA"]
