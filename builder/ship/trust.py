"""Signed proof: which run may write where, and the attestations that promote and `imgbuild verify` believe.

A check manifest (builder.ship.manifest) says an image passed its checks, but anyone who can write to the
registry can write one. With site.trust declared (builder.load.trustconf) a run is in one of two zones:

- release: the protected pipeline. Its jobs alone receive the signing key ($IMGBUILD_SIGNING_KEY, PEM
  text, or $IMGBUILD_SIGNING_KEY_FILE, a path: a GitLab protected variable, a GitHub environment secret).
  They write the release namespace and sign an in-toto statement with a SLSA provenance predicate for
  every layer image they validate and for every release, in a DSSE envelope stored beside the image
  (NAMESPACE/...:sha256-HEX.att, an OCI artifact whose `subject` names the image).
- staging: every other run (branches, merge requests, a developer without the key). It writes the
  staging namespace, reads the release namespace as a cache (only images whose attestation verifies),
  signs nothing and releases nothing.

Without site.trust one namespace holds everything and nothing is signed ("open"): the local default.

Envelopes and signatures are securesystemslib's (DSSE, Ed25519 / ECDSA keys through `cryptography`); this
module builds statements, stores them, and decides what a verified statement must say.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from builder import __version__
from builder.errors import ImgbuildError, RegistryError
from builder.load.ciconf import release_refusal
from builder.load.trustconf import TrustSettings
from builder.plan.layout import attestation_tag, layer_repo
from builder.ship.manifest import fetch_manifest, verdict
from builder.ship.oci import stored_document
from builder.ship.registry import Registry

STATEMENT = "https://in-toto.io/Statement/v1"
PROVENANCE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
ENVELOPE_TYPE = "application/vnd.dsse.envelope.v1+json"
CONFIG_TYPE = "application/vnd.imgbuild.config.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
LAYER_BUILD = "urn:imgbuild:layer-image:v1"     # buildType of a layer image's provenance
RELEASE_BUILD = "urn:imgbuild:release:v1"       # buildType of a release's
KEY_ENV, KEY_FILE_ENV = "IMGBUILD_SIGNING_KEY", "IMGBUILD_SIGNING_KEY_FILE"
ENVELOPE_MAX = 1024 * 1024


class TrustError(ImgbuildError):
    """A signature, key or attestation that cannot be believed; or a key where it must not be."""
    exit_code = 10
    label = "trust"


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def stamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_stamp(text) -> datetime.datetime | None:
    try:
        return datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


# -- keys -----------------------------------------------------------------------------------------------

def _public_der(public) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    return public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def fingerprint(public) -> str:
    return "SHA256:" + hashlib.sha256(_public_der(public)).hexdigest()[:32]


def _sslib_key(pem: bytes, key_id: str):
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey
    return SSlibKey.from_crypto(load_pem_public_key(pem), keyid=key_id)


@dataclass(frozen=True)
class Signing:
    key_id: str
    signer: object      # securesystemslib CryptoSigner


def signing_from_env(trust: TrustSettings, env) -> Signing | None:
    """The protected pipeline's signer from the environment, or None where no key was given (an empty
    value is none: GitHub gives a secret that does not reach a job as an empty string). A key that is not
    one of site.trust.keys is refused: it would sign what promote then refuses."""
    text, file = env.get(KEY_ENV, "").strip(), env.get(KEY_FILE_ENV, "").strip()
    if not text and not file:
        return None
    if text and file:
        raise TrustError(f"both ${KEY_ENV} and ${KEY_FILE_ENV} are set; give the signing key once")
    if file:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise TrustError(f"${KEY_FILE_ENV}: cannot read the signing key file ({exc.strerror or exc})") from None
    else:
        data = text.encode()
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner, SSlibKey
    try:
        private = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        # Never the text: it is a secret, and this message reaches CI logs.
        raise TrustError(f"${KEY_FILE_ENV if file else KEY_ENV} is not an unencrypted PEM private key "
                         f"({type(exc).__name__})") from None
    public = private.public_key()
    mine = _public_der(public)
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    match = next((k for k in trust.keys if _public_der(load_pem_public_key(k.pem)) == mine), None)
    if match is None:
        raise TrustError(f"the signing key (public key {fingerprint(public)}) is none of site.trust.keys: what it "
                         "signed would be refused", hint="list its public half in site.trust.keys, or give the "
                                                         "protected pipeline the key that is listed")
    return Signing(match.id, CryptoSigner(private, SSlibKey.from_crypto(public, keyid=match.id)))


# -- zones ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Zone:
    name: str                 # release | staging | open
    namespace: str            # where this run writes layer images
    release_namespace: str    # site.namespace: what releases are made of
    trust: TrustSettings | None = None
    signing: Signing | None = None

    @property
    def signed(self) -> bool:
        """Whether proof in the release namespace must carry a verified attestation."""
        return self.trust is not None

    def describe(self) -> str:
        if self.name == "open":
            return f"zone: open (site.trust not declared: nothing is signed; {self.namespace} holds everything)"
        if self.name == "release":
            return (f"zone: release (protected pipeline; writes {self.namespace}, signs with key "
                    f"{self.signing.key_id})")
        return (f"zone: staging (no signing key: writes {self.namespace}, reads {self.release_namespace} as a "
                "cache, releases nothing)")


def zone(spec, env=None, at: datetime.datetime | None = None) -> Zone:
    """This run's zone. A signing key is only ever where a release may happen: a key that reached a branch's
    or merge request's job means the CI variables leak (GitLab: not protected; GitHub: an environment without
    a branch rule), and the run stops rather than sign for a branch."""
    env = os.environ if env is None else env
    site = spec.site
    trust = site.trust
    if trust is None:
        return Zone("open", site.namespace, site.namespace)
    signing = signing_from_env(trust, env)
    if signing is None:
        return Zone("staging", trust.staging_namespace, site.namespace, trust)
    refusal = release_refusal(site.ci, env)
    if refusal:
        raise TrustError(f"the signing key reached a job that may not release ({refusal})",
                         hint="mark the CI variable protected (GitLab) or give it only to an environment limited "
                              "to the release branch (GitHub); docs/trust.md")
    why = trust.key(signing.key_id).valid_at(at or now())
    if why:
        raise TrustError(f"the signing key cannot sign now: {why}", hint="rotate: list a new key in "
                                                                          "site.trust.keys and give it to the pipeline")
    return Zone("release", site.namespace, site.namespace, trust, signing)


# -- statements -----------------------------------------------------------------------------------------

def canonical(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def manifest_sha256(recorded: dict) -> str:
    """The check manifest as signed: its canonical JSON, so that the reader computes the same from what it reads."""
    return hashlib.sha256(canonical(recorded)).hexdigest()


_REVISIONS: dict = {}   # (stacks file, its mtime, CI commit) -> spec_revision: asked once per run, not per layer


def spec_revision(spec, env=None) -> dict:
    """Which revision of the stacks file built this: the CI system's commit, else git's HEAD."""
    env = os.environ if env is None else env
    file = Path(spec.file)
    memo = (str(file.resolve()), file.stat().st_mtime_ns, env.get("CI_COMMIT_SHA") or env.get("GITHUB_SHA"))
    if memo not in _REVISIONS:
        _REVISIONS[memo] = _revision(spec, env)
    return dict(_REVISIONS[memo])


def _revision(spec, env) -> dict:
    out = {"file": Path(spec.file).name, "sha256": hashlib.sha256(Path(spec.file).read_bytes()).hexdigest()}
    commit = env.get("CI_COMMIT_SHA") or env.get("GITHUB_SHA")
    if not commit:
        try:
            res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(spec.file).resolve().parent,
                                 capture_output=True, text=True, timeout=30)
            commit = res.stdout.strip() if res.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            commit = ""
    if commit:
        out["commit"] = commit
    from builder.core.lockfile import lock_path
    lock = lock_path(spec.file)
    if lock.is_file():
        out["lock_sha256"] = hashlib.sha256(lock.read_bytes()).hexdigest()
    return out


def builder_details(env=None, engine: str = "") -> dict:
    env = os.environ if env is None else env
    if env.get("CI_JOB_URL"):
        where, invocation = env.get("CI_PROJECT_URL", "gitlab"), env["CI_JOB_URL"]
    elif env.get("GITHUB_ACTIONS") == "true":
        base = f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/{env.get('GITHUB_REPOSITORY', '')}"
        where, invocation = base, f"{base}/actions/runs/{env.get('GITHUB_RUN_ID', '')}"
    else:
        where, invocation = f"host:{os.uname().nodename}", ""
    return {"builder": {"id": f"imgbuild+{where}", "version": {"imgbuild": __version__, **({"engine": engine} if engine else {})}},
            "invocationId": invocation}


def _sha(digest: str) -> dict:
    algorithm, _, hexpart = digest.partition(":")
    return {algorithm: hexpart}


def _statement(spec, repo: str, digest: str, build_type: str, external: dict, internal: dict, dependencies: list,
               run: dict) -> dict:
    """An in-toto statement of SLSA provenance for the image repo@digest."""
    return {"_type": STATEMENT,
            "subject": [{"name": f"{spec.site.registry}/{repo}", "digest": _sha(digest)}],
            "predicateType": PROVENANCE,
            "predicate": {"buildDefinition": {"buildType": build_type, "externalParameters": external,
                                              "internalParameters": internal, "resolvedDependencies": dependencies},
                          "runDetails": run}}


def _run(details: dict, started: datetime.datetime, finished: datetime.datetime) -> dict:
    return {"builder": details["builder"],
            "metadata": {"invocationId": details["invocationId"], "startedOn": stamp(started),
                         "finishedOn": stamp(finished)}}


def layer_statement(spec, node, repo: str, digest: str, recorded: dict, zone_: Zone, engine: str = "",
                    started: datetime.datetime | None = None, env=None) -> dict:
    """The provenance of one validated layer image: what built it (key, spec revision, lock, base or parent),
    who (builder, engine, zone) and what it passed (each check and its result, bound to the check
    manifest by its hash)."""
    finished = now()
    parent = (recorded.get("labels") or {}).get("io.imgbuild.parent") or node.base_ref or ""
    run = _run(builder_details(env, engine), started or finished, finished)
    run["byproducts"] = [{"name": "imgbuild check manifest", "mediaType": "application/vnd.imgbuild.manifest.v1+json",
                          "digest": {"sha256": manifest_sha256(recorded)},
                          "annotations": {"outcome": recorded.get("outcome"),
                                          "validated_with_gpu": bool(recorded.get("validated_with_gpu")),
                                          "gpu_model": recorded.get("gpu_model"),
                                          "checks": [{"id": c.get("id"), "status": c.get("status")}
                                                     for c in recorded.get("checks") or []]}}]
    return _statement(
        spec, repo, digest, LAYER_BUILD,
        {"layer": node.name, "content_key": node.key, "platform": node.platform, "spec": spec_revision(spec, env)},
        {"zone": zone_.name, "namespace": zone_.namespace, "checks_hash": recorded.get("checks_hash")},
        [{"uri": f"docker://{parent}", **({"digest": _sha(parent.split("@", 1)[1])} if "@" in parent else {})}]
        if parent else [],
        run)


def release_statement(spec, stack: str, repo: str, digest: str, tags: list, nodes: list, zone_: Zone,
                      env=None) -> dict:
    """nodes: [(node, layer repository, digest, attestation digest)] of every platform's chain."""
    moment = now()
    return _statement(
        spec, repo, digest, RELEASE_BUILD,
        {"stack": stack, "tags": list(tags), "spec": spec_revision(spec, env)},
        {"zone": zone_.name, "namespace": zone_.namespace},
        [{"uri": f"docker://{spec.site.registry}/{lrepo}@{ldigest}", "digest": _sha(ldigest),
          "annotations": {"layer": node.name, "content_key": node.key, "platform": node.platform, "attestation": att}}
         for node, lrepo, ldigest, att in nodes],
        _run(builder_details(env), moment, moment))


# -- envelopes in the registry --------------------------------------------------------------------------

def sign(signing: Signing, statement: dict) -> dict:
    from securesystemslib.dsse import Envelope
    envelope = Envelope(payload=canonical(statement), payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signing.signer)
    return envelope.to_dict()


def store(reg: Registry, repo: str, subject_digest: str, envelope: dict, subject: tuple | None = None) -> str:
    """The envelope beside its subject: an OCI artifact whose `subject` names the image (registries with the
    referrers API list it), tagged sha256-HEX.att (how every registry finds it). Returns its digest.
    subject: (media type, manifest bytes) where the image is not in repo yet (a release, signed before its
    first tag puts it there)."""
    if subject is None:
        found = reg.get_manifest(repo, subject_digest)
        if not found:
            raise RegistryError(f"{repo}@{subject_digest} is not in the registry: nothing to attest")
        subject = (found[1], reg.manifest_bytes(repo, subject_digest, found[1]))
    media_type, subject_body = subject
    body = json.dumps(envelope, sort_keys=True).encode()
    config = reg.put_blob(repo, b"{}")
    layer = reg.put_blob(repo, body)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": PAYLOAD_TYPE,
                "config": {"mediaType": CONFIG_TYPE, "digest": config, "size": 2},
                "layers": [{"mediaType": ENVELOPE_TYPE, "digest": layer, "size": len(body)}],
                "subject": {"mediaType": media_type or OCI_MANIFEST, "digest": subject_digest, "size": len(subject_body)},
                "annotations": {"io.imgbuild.subject": subject_digest}}
    return reg.put_manifest(repo, attestation_tag(subject_digest), json.dumps(manifest, sort_keys=True).encode(),
                            OCI_MANIFEST)


def fetch(reg: Registry, repo: str, subject_digest: str) -> tuple[dict, str] | None:
    """(envelope, the attestation artifact's digest) stored beside an image, or None."""
    tag = attestation_tag(subject_digest)
    digest = reg.manifest_digest(repo, tag)
    if not digest:
        return None
    doc = stored_document(reg, repo, digest, ENVELOPE_TYPE, "the attestation")
    return (doc, digest) if doc is not None else None


@dataclass(frozen=True)
class Verified:
    statement: dict
    key_id: str
    signed_at: datetime.datetime
    attestation: str          # the artifact's digest

    @property
    def predicate(self) -> dict:
        return self.statement.get("predicate") or {}

    @property
    def parameters(self) -> dict:
        return (self.predicate.get("buildDefinition") or {}).get("externalParameters") or {}

    @property
    def internal(self) -> dict:
        return (self.predicate.get("buildDefinition") or {}).get("internalParameters") or {}

    @property
    def byproduct(self) -> dict:
        found = (self.predicate.get("runDetails") or {}).get("byproducts") or [{}]
        return found[0] if isinstance(found[0], dict) else {}


def open_envelope(doc: dict, trust: TrustSettings, at: datetime.datetime | None = None) -> tuple[dict, str, datetime.datetime]:
    """(statement, key id, signing time) of an envelope signed by a key of site.trust.keys that was valid when
    it signed, and (at: promote's moment) is still valid then. Raises TrustError saying why not."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    try:
        envelope = Envelope.from_dict(json.loads(json.dumps(doc)))   # from_dict takes the dict apart: a copy
    except Exception as exc:   # a KeyError, TypeError or binascii error, whatever the forger wrote
        raise TrustError(f"the attestation is not a DSSE envelope ({type(exc).__name__})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise TrustError(f"the attestation's payload is {str(envelope.payload_type)[:60]!r}, not an in-toto statement")
    ids = [str(s.keyid) for s in envelope.signatures.values()]
    known = [trust.key(i) for i in ids if trust.key(i)]
    if not known:
        shown = ", ".join(repr(i[:40]) for i in ids[:3]) or "no key"
        raise TrustError(f"signed by {shown}, which site.trust.keys does not list")
    try:
        used = envelope.verify([_sslib_key(k.pem, k.id) for k in known], 1)
    except VerificationError:
        raise TrustError(f"its signature does not verify with key {', '.join(k.id for k in known)}") from None
    key = trust.key(next(iter(used)))
    try:
        statement = json.loads(envelope.payload)
    except ValueError:
        raise TrustError(f"signed by {key.id}, but its payload is not JSON") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT or statement.get("predicateType") != PROVENANCE:
        raise TrustError(f"signed by {key.id}, but it is not an in-toto statement of SLSA provenance")
    signed_at = _parse_stamp(((statement.get("predicate") or {}).get("runDetails") or {}).get("metadata", {}).get("finishedOn"))
    if signed_at is None:
        raise TrustError(f"signed by {key.id}, but it says not when")
    why = key.valid_at(signed_at)
    if why:
        raise TrustError(f"signed at {stamp(signed_at)}, when {why.replace('expired on', 'had expired on')}")
    if at is not None:
        why = key.valid_at(at)
        if why:
            raise TrustError(f"signed by a key that is no longer trusted: {why}")
    return statement, key.id, signed_at


def verified(reg: Registry, trust: TrustSettings, repo: str, digest: str, at: datetime.datetime | None = None) -> Verified:
    """The verified attestation beside repo@digest, bound to that image: refused when absent, unsigned by a
    trusted key, or made for another image (an attestation copied beside other bytes)."""
    found = fetch(reg, repo, digest)
    if found is None:
        raise TrustError("no attestation is stored beside it (not built by the protected pipeline)")
    envelope, att = found
    statement, key_id, signed_at = open_envelope(envelope, trust, at)
    subjects = statement.get("subject") or []
    named = [s.get("digest", {}) for s in subjects if isinstance(s, dict)]
    algorithm, _, hexpart = digest.partition(":")
    if not any(isinstance(d, dict) and d.get(algorithm) == hexpart for d in named):
        other = next((f"{k}:{v}" for d in named if isinstance(d, dict) for k, v in d.items()), "nothing")
        raise TrustError(f"its attestation (key {key_id}) was made for {other[:19]}, not for this image: copied "
                         "beside other bytes")
    return Verified(statement, key_id, signed_at, att)


def vouched(reg: Registry, zone_: Zone, repo: str, node, digest: str, at: datetime.datetime | None = None
            ) -> tuple[str | None, Verified | None]:
    """(why not, the attestation): whether the protected pipeline vouches for repo@digest as node's image: an
    attestation by a trusted key that names this image, this content key and layer, and the release zone.
    Says nothing of the checks (proven does); the bytes alone."""
    try:
        proof = verified(reg, zone_.trust, repo, digest, at)
    except TrustError as exc:
        return exc.message, None
    if proof.parameters.get("content_key") != node.key or proof.parameters.get("layer") != node.name:
        return f"its attestation (key {proof.key_id}) was made for another layer or content key", proof
    if proof.internal.get("zone") != "release":
        return (f"its attestation says zone {str(proof.internal.get('zone'))[:20]!r}: only the protected "
                "pipeline's proof counts"), proof
    return None, proof


def signed_here(zone_: Zone, repo: str) -> bool:
    """Whether proof in repo must carry an attestation: the release namespace of a site that signs (a staging
    image is staging's own, unsigned, and never released)."""
    return zone_.signed and repo.startswith(zone_.release_namespace + "/")


def proven(reg: Registry, zone_: Zone, repo: str, node, digest: str, gpu: bool = False,
           at: datetime.datetime | None = None, attestation: list | None = None,
           recorded: dict | None = None) -> str | None:
    """Why repo@digest is no proof that node's image passed its checks, or None where it is. The one reading
    of "validated": the check manifest (manifest.verdict) and, where proof must be signed (signed_here), the
    protected pipeline's attestation of this image (vouched) bound to this very check manifest by its hash.
    attestation: a list that receives the verified attestation's digest. recorded: the check manifest the
    caller read (one read: what it judges further is what was verified here)."""
    recorded = fetch_manifest(reg, repo, digest) if recorded is None else recorded
    why = verdict(recorded, node, digest, gpu)
    if why or not signed_here(zone_, repo):
        return why
    why, proof = vouched(reg, zone_, repo, node, digest, at)
    if why:
        return why
    if (proof.byproduct.get("digest") or {}).get("sha256") != manifest_sha256(recorded):
        return f"its check manifest was changed after key {proof.key_id} signed it"
    if attestation is not None:
        attestation.append(proof.attestation)
    return None


def attest_layer(reg: Registry, spec, zone_: Zone, repo: str, node, digest: str, recorded: dict,
                 engine: str = "", started: datetime.datetime | None = None) -> str | None:
    """Sign and store a layer image's provenance where this run signs (the release zone); its digest."""
    if zone_.signing is None:
        return None
    statement = layer_statement(spec, node, repo, digest, recorded, zone_, engine, started)
    return store(reg, repo, digest, sign(zone_.signing, statement))


def release_repo_of(zone_: Zone, node) -> str:
    return layer_repo(zone_.release_namespace, node.name)


__all__ = ["Zone", "zone", "TrustError", "verify_release", "provenance_lines", "keys_from_files", "proven", "vouched", "signed_here", "verified", "attest_layer", "release_statement", "sign", "store",
           "fetch", "open_envelope", "Verified", "manifest_sha256", "signing_from_env"]


# -- consumers ------------------------------------------------------------------------------------------

def keys_from_files(files) -> TrustSettings:
    """Trusted keys a cluster holds as files (`imgbuild verify --key FILE.pub`), without stacks.yaml: each valid
    from the epoch to the far future (a site that rotates lists its keys with their periods in site.trust)."""
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from builder.load.trustconf import TrustedKey
    out = []
    for file in files:
        try:
            pem = Path(file).read_bytes()
            load_pem_public_key(pem)
        except (OSError, ValueError, TypeError) as exc:
            raise TrustError(f"--key {file}: not a readable PEM public key ({type(exc).__name__})") from None
        out.append(TrustedKey(Path(file).stem, pem, datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc),
                              datetime.datetime(9999, 1, 1, tzinfo=datetime.timezone.utc)))
    return TrustSettings(staging_namespace="", keys=tuple(out))


def verify_release(reg: Registry, trust_: TrustSettings, repo: str, digest: str) -> dict:
    """The provenance of a released image, every signature checked: the release's attestation (signed by a
    trusted key, naming this digest), and through it each layer image's attestation and check manifest.
    Raises TrustError naming the first thing that does not hold."""
    from builder.ship.manifest import fetch_manifest
    try:
        release = verified(reg, trust_, repo, digest)
    except TrustError as exc:
        raise TrustError(f"{reg.host}/{repo}@{digest[:19]}: {exc.message}") from None
    params = release.parameters
    build = (release.predicate.get("buildDefinition") or {})
    if build.get("buildType") != RELEASE_BUILD or release.internal.get("zone") != "release":
        raise TrustError(f"{reg.host}/{repo}@{digest[:19]}: its attestation is not a release by the protected pipeline")
    layers = []
    for dep in build.get("resolvedDependencies") or []:
        notes = dep.get("annotations") or {}
        uri = str(dep.get("uri", ""))
        ref = uri.removeprefix("docker://").split("/", 1)[-1]
        lrepo, _, ldigest = ref.partition("@")
        name = f"{notes.get('layer')} ({str(notes.get('content_key'))[:12]})"
        try:
            proof = verified(reg, trust_, lrepo, ldigest)
        except TrustError as exc:
            raise TrustError(f"layer {name}: {exc.message}") from None
        if proof.parameters.get("content_key") != notes.get("content_key") or proof.internal.get("zone") != "release":
            raise TrustError(f"layer {name}: its attestation names another content key or zone")
        recorded = fetch_manifest(reg, lrepo, ldigest)
        if recorded is None or (proof.byproduct.get("digest") or {}).get("sha256") != manifest_sha256(recorded):
            raise TrustError(f"layer {name}: its check manifest is missing or was changed after signing")
        checks = recorded.get("checks") or []
        if recorded.get("outcome") != "passed" or any(c.get("status") not in ("passed", "skipped") for c in checks):
            raise TrustError(f"layer {name}: its check manifest does not say passed")
        layers.append({"layer": notes.get("layer"), "content_key": notes.get("content_key"),
                       "platform": notes.get("platform"), "digest": ldigest, "signed_by": proof.key_id,
                       "signed_at": stamp(proof.signed_at),
                       "checks": {s: sum(1 for c in checks if c.get("status") == s) for s in ("passed", "skipped")},
                       "validated_with_gpu": bool(recorded.get("validated_with_gpu")),
                       "gpu_model": recorded.get("gpu_model")})
    if not layers:
        raise TrustError(f"{reg.host}/{repo}@{digest[:19]}: its attestation names no layer image")
    details = (release.predicate.get("runDetails") or {})
    return {"image": f"{reg.host}/{repo}@{digest}", "stack": params.get("stack"), "tags": params.get("tags"),
            "spec": params.get("spec"), "signed_by": release.key_id, "signed_at": stamp(release.signed_at),
            "builder": (details.get("builder") or {}).get("id"),
            "invocation": (details.get("metadata") or {}).get("invocationId"), "layers": layers}


def provenance_lines(report: dict) -> list[str]:
    spec = report.get("spec") or {}
    out = [f"provenance: {report['image']}",
           f"  release of stack {report.get('stack')} signed by key {report['signed_by']} at {report['signed_at']}",
           f"  built by {report.get('builder')}" + (f", {report['invocation']}" if report.get("invocation") else ""),
           f"  from {spec.get('file')} sha256 {str(spec.get('sha256'))[:12]}" + (f" at commit {spec['commit'][:12]}" if spec.get("commit") else "")]
    for layer in report["layers"]:
        gpu = f", GPU checks ran on {layer['gpu_model'] or 'a GPU'}" if layer["validated_with_gpu"] else ""
        out.append(f"  layer {layer['layer']} {str(layer['content_key'])[:12]} [{layer['platform']}] {layer['digest'][:19]}: "
                   f"{layer['checks']['passed']} checks passed, {layer['checks']['skipped']} skipped{gpu}; "
                   f"signed by {layer['signed_by']}")
    return out
