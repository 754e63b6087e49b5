"""site.trust: who may write proof. Branch and merge-request pipelines build into a staging namespace;
the release namespace, and every attestation that promote believes, come from the protected pipeline,
which alone holds a signing key whose public half is listed here.

    site:
      trust:
        staging_namespace: imgbuild-staging   # default: NAMESPACE-staging
        staged_keys: rebuild                  # a key only staging holds, met by the protected pipeline
        keys:                                 # the public keys of the protected pipeline's signers
          - id: ci-2026
            public_key: trust/ci-2026.pub     # a PEM file beside stacks.yaml (or the PEM text itself)
            not_before: 2026-01-01
            not_after: 2027-01-01

Several keys, each with its own validity period, let a site rotate: a new key is listed before the
old one expires. builder.ship.trust signs and verifies; this module only reads and checks the file.
Without site.trust nothing is signed and one namespace holds everything (said where it matters).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.load.params import type_name
from builder.redact import redact

KEYS = {"staging_namespace", "staged_keys", "keys"}
KEY_KEYS = {"id", "public_key", "not_before", "not_after"}
# What the protected pipeline does with a key that only the staging namespace holds: rebuild it from the
# reviewed spec (the default and only choice today: staging bytes were made by a job whose code any
# branch chose). Kept a key so the choice is written down where the site reads its trust settings.
STAGED_KEYS = ("rebuild",)
KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*\Z")
PEM_MAX = 16 * 1024


@dataclass(frozen=True)
class TrustedKey:
    id: str
    pem: bytes                     # the public key, PEM
    not_before: datetime.datetime  # UTC
    not_after: datetime.datetime   # UTC, exclusive

    def valid_at(self, when: datetime.datetime) -> str | None:
        """Why the key was not valid at `when`, or None."""
        if when < self.not_before:
            return f"key {self.id} is not valid before {self.not_before:%Y-%m-%d}"
        if when >= self.not_after:
            return f"key {self.id} expired on {self.not_after:%Y-%m-%d}"
        return None


@dataclass(frozen=True)
class TrustSettings:
    staging_namespace: str
    keys: tuple                    # TrustedKey, in the order written
    staged_keys: str = "rebuild"

    def key(self, key_id: str) -> TrustedKey | None:
        return next((k for k in self.keys if k.id == key_id), None)


def parse(loader, value: Any, namespace: str) -> TrustSettings | None:
    """site.trust from stacks.yaml (loader is spec._Loader); None where the site declares none."""
    if value is None:
        return None
    path = ("site", "trust")
    raw = loader.mapping(path, value, KEYS, what="a mapping of trust settings (staging_namespace, staged_keys, keys)")
    staging = loader.string(path + ("staging_namespace",), raw.get("staging_namespace", f"{namespace}-staging"))
    if not all(NAME.match(p) for p in staging.split("/")):
        raise loader.err(path + ("staging_namespace",), f"{redact(staging[:80])!r} is not a valid repository path")
    if staging == namespace or staging.startswith(namespace + "/") or namespace.startswith(staging + "/"):
        raise loader.err(path + ("staging_namespace",), f"{staging!r} overlaps site.namespace {namespace!r}: "
                         "staging must be a namespace of its own, which branch pipelines write and the release "
                         "namespace's writers never read as proof")
    staged = loader.string(path + ("staged_keys",), raw.get("staged_keys", "rebuild"))
    if staged not in STAGED_KEYS:
        raise loader.err(path + ("staged_keys",), f"{redact(staged[:40])!r} is not a choice imgbuild offers",
                         hint="rebuild: the protected pipeline builds a key again that only staging holds")
    items = raw.get("keys")
    if not isinstance(items, list) or not items:
        raise loader.err(path + ("keys",), "expected a list of the protected pipeline's public keys, got "
                         + (type_name(items) if items is not None else "nothing"),
                         hint="each: {id: NAME, public_key: FILE.pub, not_before: DATE, not_after: DATE}; "
                              "docs/trust.md shows how to make one")
    keys: list[TrustedKey] = []
    for i, item in enumerate(items):
        keys.append(_key(loader, path + ("keys", i), item, Path(loader.doc.file).parent))
        if [k.id for k in keys].count(keys[-1].id) > 1:
            raise loader.err(path + ("keys", i, "id"), f"key id {keys[-1].id!r} is listed twice")
    return TrustSettings(staging_namespace=staging, keys=tuple(keys), staged_keys=staged)


def _key(loader, path: tuple, item: Any, here: Path) -> TrustedKey:
    raw = loader.mapping(path, item, KEY_KEYS, what="a mapping with id, public_key, not_before, not_after")
    for needed in ("id", "public_key", "not_before", "not_after"):
        if raw.get(needed) is None:
            raise loader.err(path, f"missing key {needed!r}",
                             hint="a key without a validity period can never be rotated out" if "not_" in needed else None)
    key_id = loader.string(path + ("id",), raw["id"])
    if not KEY_ID.match(key_id):
        raise loader.err(path + ("id",), f"{redact(key_id[:70])!r} is not a key id: letters, digits and . _ -")
    pem = _pem(loader, path + ("public_key",), raw["public_key"], here)
    start, end = _when(loader, path + ("not_before",), raw["not_before"]), _when(loader, path + ("not_after",), raw["not_after"])
    if end <= start:
        raise loader.err(path + ("not_after",), f"{end:%Y-%m-%d} is not after not_before ({start:%Y-%m-%d})")
    return TrustedKey(key_id, pem, start, end)


def _pem(loader, path: tuple, value: Any, here: Path) -> bytes:
    text = loader.string(path, value) if not isinstance(value, str) else value
    if "PRIVATE KEY" in text:
        # Said before anything else: a private key in the spec is a leaked key, whoever reads the repository.
        raise loader.err(path, "holds a PRIVATE key: only the public half belongs in stacks.yaml (the private one "
                         "is the protected pipeline's secret)", hint="rotate that key: it is in the repository now")
    if text.lstrip().startswith("-----BEGIN"):
        data = text.encode()
    else:
        file = (here / text) if not Path(text).is_absolute() else Path(text)
        try:
            if file.stat().st_size > PEM_MAX:
                raise loader.err(path, f"{redact(text[:80])} is larger than {PEM_MAX // 1024} KiB: not a public key")
            data = file.read_bytes()
        except OSError as exc:
            raise loader.err(path, f"cannot read {redact(text[:80])}: {exc.strerror or exc}",
                             hint="a PEM public key file, relative to stacks.yaml") from None
        if b"PRIVATE KEY" in data:
            raise loader.err(path, f"{redact(text[:80])} holds a PRIVATE key: only the public half belongs beside "
                             "stacks.yaml", hint="rotate that key: it is in the repository now")
    try:
        from cryptography.hazmat.primitives.serialization import load_pem_public_key
        load_pem_public_key(data)
    except Exception as exc:   # cryptography raises ValueError or UnsupportedAlgorithm for what is not a key
        raise loader.err(path, f"is not a PEM public key ({type(exc).__name__})",
                         hint="an Ed25519 or ECDSA P-256 public key: docs/trust.md") from None
    return data


def _when(loader, path: tuple, value: Any) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, datetime.date):
        moment = datetime.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value)
        except ValueError:
            raise loader.err(path, f"{redact(value[:40])!r} is not a date (YYYY-MM-DD)") from None
    else:
        raise loader.err(path, f"expected a date (YYYY-MM-DD), got {type_name(value)}")
    return moment.replace(tzinfo=datetime.timezone.utc) if moment.tzinfo is None else moment.astimezone(datetime.timezone.utc)


__all__ = ["TrustSettings", "TrustedKey", "parse", "STAGED_KEYS"]
