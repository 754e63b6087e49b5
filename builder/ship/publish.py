"""Release tags: computed from versions measured inside the image, moved only after everything passed.

A stack's release lives in its own repository ({namespace}/{stack}); moving a tag is a manifest PUT
after cross-repository blob mounts, so no layer is pulled or pushed again. Every tag of every stack
is computed and checked before the first one moves.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Callable

from builder.errors import ImgbuildError
from builder.ship.manifest import fetch_manifest
from builder.plan.layout import layer_repo, release_record_tag, release_repo
from builder.ship import card, gpuproof, sbom, trust
from builder.plan.keys import Plan
from builder.core import platforms as plat
from builder.ship import oci
from builder.ship.oci import release_serial as release_serial_of
from builder.ship.registry import Registry, digest_of
from builder.load import tags as tag_templates
from builder.load.ciconf import release_refusal
from builder.load.spec import Spec

TAG_OK = re.compile(r"[^A-Za-z0-9_.-]")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = oci.OCI_INDEX
RELEASE_TYPE = "application/vnd.imgbuild.release.v1+json"


class PublishError(ImgbuildError):
    exit_code = 7
    label = "publish"


def release_tags(template_list, stack: str, measured: dict, date: "datetime.date | str",
                 fixed: dict | None = None) -> list[str]:
    """Each template filled (builder.load.tags): the stack's name, the date (a --date text or a date), what the
    stacks file fixes (fixed: the project's commit, tags.spec_values) and the versions measured in the image."""
    when = release_date(date)
    values = {"stack": stack, **{k: v for k, v in (fixed or {}).items() if v is not None},
              **{k: TAG_OK.sub("-", str(v)) for k, v in measured.items()}}
    out = []
    for template in template_list:
        tag, missing = tag_templates.expand(template, values, when)
        if missing:
            raise PublishError(f"stack {stack!r}: tag {template!r} needs {', '.join(missing)}, which was not "
                               "measured in the image; no tag was moved")
        if len(tag) > 128 or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", tag):
            raise PublishError(f"stack {stack!r}: {tag!r} is not a valid tag; no tag was moved")
        out.append(tag)
    return out


def release_date(date) -> "datetime.date":
    """The {date} of release tags: today (UTC) when None, a date as given, or a --date text read as a day."""
    if date is None or isinstance(date, datetime.date):
        return date or tag_templates.today()
    try:
        return tag_templates.parse_date(date)
    except ValueError as exc:
        raise PublishError(f"{exc}; no tag was moved") from None


def release_serial(spec: Spec) -> int | None:
    """Which release this is, to order releases that race: $IMGBUILD_SERIAL, else the CI system's
    pipeline number ($CI_PIPELINE_IID, $GITHUB_RUN_NUMBER), else the commit time of the stacks file's
    git HEAD. None (no order: tags always move) outside CI and git."""
    for var in ("IMGBUILD_SERIAL", "CI_PIPELINE_IID", "GITHUB_RUN_NUMBER"):
        value = os.environ.get(var, "").strip()
        if value:
            if not value.isdigit():
                raise PublishError(f"${var}={value!r} is not a release serial (a whole number)")
            return int(value)
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=Path(spec.file).resolve().parent,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else None


def _recorded_serial(reg: Registry, repo: str, tag: str) -> int | None:
    found = reg.get_manifest(repo, release_record_tag(tag))
    if not found:
        return None
    return release_serial_of(found[0], f"the release record of {repo}:{tag}")


def _record_release(reg: Registry, repo: str, tag: str, digest: str, serial: int) -> None:
    config = reg.put_blob(repo, b"{}")
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"mediaType": RELEASE_TYPE, "digest": config, "size": 2}, "layers": [],
                       "annotations": {"io.imgbuild.tag": tag, "io.imgbuild.serial": str(serial),
                                       "io.imgbuild.subject": digest}}).encode()
    reg.put_manifest(repo, release_record_tag(tag), body, OCI_MANIFEST)


def promote(spec: Spec, reg: Registry, plan: Plan, stacks: list[str], date: str | None,
            say: Callable[[str], None], expected: dict | None = None, serial: int | None = None,
            gpu: bool = False, zone: "trust.Zone | None" = None) -> dict:
    """Move the release tags of `stacks`, or none of them.

    Whatever the caller believes, every node of every stack is read back from the registry first: its
    content key must resolve to an image whose stored manifest proves that it passed that node's
    checks (manifest.verdict). The proof is the registry's, not the caller's belief: when the caller
    validated another image of the same key (`expected`: a racing builder's PUT came later), the key's
    image is released only on its own proof. Any doubt about any node refuses the whole promotion
    before the first tag moves.

    Where the site signs (site.trust), only the protected pipeline releases (zone: its signing key), every
    node's proof must carry an attestation by a key of site.trust.keys valid now (builder.ship.trust), and
    the release itself is signed before any tag names it.
    """
    refusal = release_refusal(spec.site.ci, os.environ)
    if refusal:
        raise PublishError(f"release refused: {refusal}; no tag was moved")
    zone = zone or trust.zone(spec)
    if zone.signed and zone.signing is None:
        raise PublishError("release refused: this run holds no signing key (the staging zone); only the protected "
                           "pipeline, which holds one of site.trust.keys, releases; no tag was moved",
                           hint=f"give the release job ${trust.KEY_ENV} or ${trust.KEY_FILE_ENV}: docs/trust.md")
    if not zone.signed:
        say("release: unsigned (site.trust is not declared: anyone who can write to the registry can write proof)")
    at = trust.now()
    attested: dict = {}   # stack -> [(node, repo, digest, attestation digest)]
    date = release_date(date)
    problems: list[str] = []
    tops: dict = {}   # stack -> {platform: (repo, digest, recorded manifest)}
    noted: set = set()
    for name in stacks:
        top_keys = {n.key for n in plan.tops(name).values()}
        # Every platform's chain: one unproven arm64 layer holds back the amd64 image's tags too.
        for node in (plan.nodes[k] for k in plan.stacks[name]):
            repo = layer_repo(spec.site.namespace, node.name)
            on = f" [{node.platform}]" if len(plan.platforms(name)) > 1 else ""
            digest = reg.manifest_digest(repo, node.short)
            if not digest:
                problems.append(f"{name}: {node.name} ({node.short[:12]}){on} is not in the registry")
                continue
            recorded = fetch_manifest(reg, repo, digest)
            att: list = []
            # gpu: a GPU check recorded as skipped is no proof; a signing site: nor is an unsigned manifest
            why = trust.proven(reg, zone, repo, node, digest, gpu, at=at, attestation=att, recorded=recorded)
            why = why or gpuproof.unproven(spec, name, node, recorded)   # GPU stack: ran on one of its GPUs
            attested.setdefault(name, []).append((node, repo, digest, att[0] if att else None))
            mine = (expected or {}).get(node.key, digest)
            if why and mine != digest:
                problems.append(f"{name}: {node.name} ({node.short[:12]}){on} is {digest[:19]} in the registry, "
                                f"but this run validated {str(mine)[:19]}, and that one: {why}")
            elif why:
                problems.append(f"{name}: {node.name} ({node.short[:12]}){on}: {why}")
            else:
                if mine != digest and node.key not in noted:
                    # Racing builders of one key: the registry cannot compare-and-set, so the later key PUT
                    # holds it. Same content key, and that image carries its own passing proof: release it.
                    noted.add(node.key)
                    say(f"{node.name} ({node.short[:12]}): the key names {digest[:19]}, another builder's image "
                        f"with its own passing checks, not {str(mine)[:19]} validated by this run; releasing the "
                        "key's image")
                if node.key in top_keys:
                    tops.setdefault(name, {})[node.platform] = (repo, digest, recorded)
    if problems:
        raise PublishError(f"{len(problems)} layer image(s) not proven validated; no tag was moved:\n  "
                           + "\n  ".join(problems))
    moves = []  # (stack, repo, tag, manifest bytes, media type, digest)
    for name in stacks:
        dst_repo = release_repo(spec.site.namespace, name)
        tags = _agreed_tags(spec, name, {p: rec for p, (_, _, rec) in tops[name].items()}, date)
        entries = []
        for platform, (src_repo, digest, _) in tops[name].items():
            found = reg.get_manifest(src_repo, digest)
            if not found:
                raise PublishError(f"{src_repo}@{digest} vanished from the registry; no tag was moved")
            manifest, media_type, _ = found
            # Every released image has its SBOM beside it, made before any tag names the image.
            sbom.ensure(reg, spec.site.registry, src_repo, digest, say)
            # Make every blob available in the release repository before any tag points there.
            for blob in [manifest["config"]] + manifest.get("layers", []):
                reg.mount_blob(dst_repo, blob["digest"], src_repo)
            sbom.copy(reg, digest, src_repo, dst_repo)
            body = reg.manifest_bytes(src_repo, digest, media_type)
            entries.append((platform, body, media_type, digest))
        if len(entries) == 1:
            _, body, media_type, digest = entries[0]
        else:
            # One index names every platform's image: each is stored in the release repository by digest
            # first, so the index never names a manifest the repository lacks.
            for _, child, child_type, child_digest in entries:
                reg.put_manifest(dst_repo, child_digest, child, child_type)
            body, media_type = image_index(entries), OCI_INDEX
            digest = digest_of(body)
        # What the stack declared (its GPUs, platforms, chains), beside the release, before a tag names it.
        card.write(reg, dst_repo, digest, card.card(spec, plan, name))
        if zone.signing is not None:
            statement = trust.release_statement(spec, name, dst_repo, digest, tags, attested[name], zone)
            trust.store(reg, dst_repo, digest, trust.sign(zone.signing, statement), subject=(media_type, body))
            say(f"release {name}: provenance signed with key {zone.signing.key_id}")
        for tag in tags:
            moves.append((name, dst_repo, tag, body, media_type, digest))
    moved: dict = {}
    for name, repo, tag, body, media_type, digest in moves:
        before = reg.manifest_digest(repo, tag)
        held = _recorded_serial(reg, repo, tag) if serial is not None else None
        if held is not None and held > serial:
            # Tags never move backwards: an older pipeline finishing after a newer one leaves its tags.
            say(f"tag {spec.site.registry}/{repo}:{tag} kept at {str(before)[:19]}: release {held} moved it, "
                f"this is release {serial}")
            continue
        if serial is not None:
            _record_release(reg, repo, tag, digest, serial)   # first: a kill between leaves the order safe
        reg.put_manifest(repo, tag, body, media_type)
        moved.setdefault(name, {})[tag] = digest
        change = "unchanged" if before == digest else (f"moved from {before[:19]}" if before else "new")
        say(f"tag {spec.site.registry}/{repo}:{tag} -> {digest[:19]} ({change})"
            + (f" [release {serial}]" if serial is not None else ""))
    return moved


def image_index(entries) -> bytes:
    """An OCI image index of (platform, manifest bytes, media type, digest), platforms in imgbuild's order.
    Deterministic bytes: the same images make the same index digest, so releasing again moves nothing."""
    manifests = [{"mediaType": media_type, "digest": digest, "size": len(body),
                  "platform": {"os": platform.split("/")[0], "architecture": plat.arch(platform)}}
                 for platform, body, media_type, digest in sorted(entries, key=lambda e: plat.PLATFORMS.index(e[0]))]
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests},
                      separators=(",", ":")).encode()


def _agreed_tags(spec: Spec, name: str, recorded: dict, date: "datetime.date") -> list[str]:
    """The stack's tags, from the versions measured in each platform's image: one release names every
    platform, so a template may only use a version that every platform's image measured the same."""
    fixed = tag_templates.spec_values(spec.stack(name))
    per = {p: release_tags(spec.stack(name).tags, name, rec.get("versions", {}), date, fixed)
           for p, rec in recorded.items()}
    first = next(iter(per.values()))
    if any(tags != first for tags in per.values()):
        shown = "; ".join(f"{p}: {', '.join(t)}" for p, t in per.items())
        raise PublishError(f"stack {name!r}: its tags differ between platforms ({shown}); one release names every "
                           "platform, so a tag may only use versions measured the same on each; no tag was moved",
                           hint="drop the differing version from the stack's tags, or install the same version on each "
                                "platform")
    return first


__all__ = ["promote", "image_index", "release_date", "release_tags", "release_serial", "PublishError"]
