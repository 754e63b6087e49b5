"""Trust zones and signed provenance (builder.ship.trust) against the in-memory registry and engine of
test_build_run.py: who writes where, what promote believes, and every way around a signature refused.

The real-registry and real-CI-runner proof of the same promise is tests/test_docker_trust.py.
"""

from __future__ import annotations

import datetime
import json

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from securesystemslib.signer import CryptoSigner

from builder.errors import SpecError
from builder.load.spec import load_spec
from builder.plan.keys import make_plan
from builder.plan.layout import attestation_tag, layer_repo, release_repo
from builder.ship import trust
from builder.ship.publish import PublishError, promote

from conftest import REPO, shipped_data, write_stacks
from test_build_run import BASE, TAGS, world  # noqa: F401  (world: the fixture)

CI_VARS = ("CI", "CI_PIPELINE_SOURCE", "CI_COMMIT_BRANCH", "CI_DEFAULT_BRANCH", "GITHUB_ACTIONS", "GITHUB_REF",
           "GITHUB_EVENT_NAME", trust.KEY_ENV, trust.KEY_FILE_ENV, "IMGBUILD_SERIAL", "CI_PIPELINE_IID", "GITHUB_RUN_NUMBER")


def keypair() -> tuple[str, str]:
    signer = CryptoSigner.generate_ed25519()
    public = signer._private_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    return signer.private_bytes.decode(), public.decode()


KEYS = {name: keypair() for name in ("ci-2026", "ci-2027", "stranger")}


def signer_as(key_id: str, private_pem: str | None = None) -> trust.Signing:
    """A signer whose signatures carry key_id, with a key of its own (a forger) or the given private key."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import SSlibKey
    private = load_pem_private_key(private_pem.encode(), None) if private_pem else CryptoSigner.generate_ed25519()._private_key
    return trust.Signing(key_id, CryptoSigner(private, SSlibKey.from_crypto(private.public_key(), keyid=key_id)))


def entry(name: str, start: str = "2026-01-01", end: str = "2099-01-01") -> dict:
    return {"id": name, "public_key": KEYS[name][1], "not_before": start, "not_after": end}


def signing_spec(tmp_path, name="signed", keys=None, mutate=lambda data: None):
    data = shipped_data()
    data["site"]["trust"] = {"keys": keys if keys is not None else [entry("ci-2026"), entry("ci-2027")]}
    mutate(data)
    return load_spec(write_stacks(tmp_path / name, data), root=REPO)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in CI_VARS:
        monkeypatch.delenv(var, raising=False)


def as_protected(monkeypatch, key="ci-2026"):
    monkeypatch.setenv(trust.KEY_ENV, KEYS[key][0])


def as_staging(monkeypatch):
    monkeypatch.delenv(trust.KEY_ENV, raising=False)


def build(builder, spec):
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    return builder(spec).run(plan, ["cpu-smoke"], date="2026.12.01"), plan


def release_tags(reg, spec) -> dict:
    return {t: reg.manifest_digest(release_repo(spec.site.namespace, "cpu-smoke"), t) for t in TAGS}


def key_digest(reg, spec, node, namespace=None) -> str | None:
    return reg.manifest_digest(layer_repo(namespace or spec.site.namespace, node.name), node.short)


def forge(reg, spec, node, label="forged"):
    """What a hostile merge request's job can do with registry write access and no key: push its own image
    under the key tag of the release namespace, with a check manifest that says every check passed."""
    from builder.ship.manifest import build_manifest, push_manifest
    from builder.ship.checks import CheckResult
    repo = layer_repo(spec.site.namespace, node.name)
    config = reg.put_blob(repo, json.dumps({"forged": label}).encode())
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 1},
                       "layers": []}).encode()
    digest = reg.put_manifest(repo, node.short, body, "application/vnd.oci.image.manifest.v1+json")
    results = [CheckResult(c.id, "passed", "ok", c.gpu) for c in node.checks]
    push_manifest(reg, repo, build_manifest(node, {}, results, digest, {}, node.checks))
    return digest


# -- site.trust, read ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("trust_value, key, reason", [
    ({"keys": []}, "site.trust.keys", "expected a list of the protected pipeline's public keys"),
    ({"keys": [{"id": "a", "public_key": "x.pub", "not_before": "2026-01-01"}]}, "site.trust.keys[0]",
     "missing key 'not_after'"),
    ({"keys": [dict(entry("ci-2026"), public_key=KEYS["ci-2026"][0])]}, "site.trust.keys[0].public_key",
     "holds a PRIVATE key"),
    ({"keys": [dict(entry("ci-2026"), public_key="nowhere.pub")]}, "site.trust.keys[0].public_key", "cannot read nowhere.pub"),
    ({"keys": [dict(entry("ci-2026"), public_key="-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")]},
     "site.trust.keys[0].public_key", "is not a PEM public key"),
    ({"keys": [entry("ci-2026", "2027-01-01", "2026-01-01")]}, "site.trust.keys[0].not_after", "is not after not_before"),
    ({"keys": [dict(entry("ci-2026"), not_before="soon")]}, "site.trust.keys[0].not_before", "is not a date"),
    ({"keys": [entry("ci-2026"), entry("ci-2026")]}, "site.trust.keys[1].id", "listed twice"),
    ({"keys": [entry("ci-2026")], "staging_namespace": "imgbuild"}, "site.trust.staging_namespace", "overlaps site.namespace"),
    ({"keys": [entry("ci-2026")], "staged_keys": "trust"}, "site.trust.staged_keys", "is not a choice imgbuild offers"),
    ({"keys": [entry("ci-2026")], "signing_key": "x"}, "site.trust.signing_key", "unknown key"),
])
def test_bad_trust_settings_are_refused_naming_the_key(tmp_path, trust_value, key, reason):
    data = shipped_data()
    data["site"]["trust"] = trust_value
    with pytest.raises(SpecError) as exc:
        load_spec(write_stacks(tmp_path / "bad", data), root=REPO)
    text = exc.value.render() if hasattr(exc.value, "render") else str(exc.value)
    assert key in text and reason in text, text
    assert "BEGIN PRIVATE" not in text and KEYS["ci-2026"][0][40:80] not in text


def test_a_key_file_beside_the_stacks_file(tmp_path):
    folder = tmp_path / "site"
    (folder / "trust").mkdir(parents=True)
    (folder / "trust" / "ci.pub").write_text(KEYS["ci-2026"][1])
    data = shipped_data()
    data["site"]["trust"] = {"keys": [dict(entry("ci-2026"), public_key="trust/ci.pub")]}
    spec = load_spec(write_stacks(folder, data), root=REPO)
    assert spec.site.trust.keys[0].pem.decode() == KEYS["ci-2026"][1]
    assert spec.site.trust.staging_namespace == "imgbuild-staging"


# -- zones --------------------------------------------------------------------------------------------------

def test_zones(tmp_path, monkeypatch):
    spec = signing_spec(tmp_path)
    assert trust.zone(spec).name == "staging" and trust.zone(spec).namespace == "imgbuild-staging"
    as_protected(monkeypatch)
    zone = trust.zone(spec)
    assert (zone.name, zone.namespace, zone.signing.key_id) == ("release", "imgbuild", "ci-2026")
    # A key file (GitLab's file-type variable) works the same.
    monkeypatch.delenv(trust.KEY_ENV)
    key_file = tmp_path / "k.pem"
    key_file.write_text(KEYS["ci-2027"][0])
    monkeypatch.setenv(trust.KEY_FILE_ENV, str(key_file))
    assert trust.zone(spec).signing.key_id == "ci-2027"
    # Without site.trust: one namespace, nothing signed.
    plain = load_spec(write_stacks(tmp_path / "plain", shipped_data()), root=REPO)
    assert trust.zone(plain).name == "open"


@pytest.mark.parametrize("env, reason", [
    ({"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "feature/x", "CI_DEFAULT_BRANCH": "main"},
     "the signing key reached a job that may not release (this pipeline runs for branch 'feature/x'"),
    ({"CI_PIPELINE_SOURCE": "merge_request_event"}, "this is a merge request pipeline"),
    ({"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_REF": "refs/pull/7/merge"},
     "started by a pull_request event"),
])
def test_a_signing_key_in_a_branch_job_stops_the_run(tmp_path, monkeypatch, env, reason):
    spec = signing_spec(tmp_path)
    as_protected(monkeypatch)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(trust.TrustError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        trust.zone(spec)


def test_signing_keys_not_listed_or_out_of_their_period_are_refused(tmp_path, monkeypatch):
    spec = signing_spec(tmp_path, keys=[entry("ci-2026", "2020-01-01", "2021-01-01"), entry("ci-2027", "2090-01-01")])
    monkeypatch.setenv(trust.KEY_ENV, KEYS["stranger"][0])
    with pytest.raises(trust.TrustError, match="is none of site.trust.keys"):
        trust.zone(spec)
    as_protected(monkeypatch, "ci-2026")
    with pytest.raises(trust.TrustError, match="key ci-2026 expired on 2021-01-01"):
        trust.zone(spec)
    as_protected(monkeypatch, "ci-2027")
    with pytest.raises(trust.TrustError, match="key ci-2027 is not valid before 2090-01-01"):
        trust.zone(spec)
    monkeypatch.setenv(trust.KEY_ENV, "-----BEGIN " + "PRIVATE KEY-----\nnot a key\n-----END " + "PRIVATE KEY-----")
    with pytest.raises(trust.TrustError) as exc:
        trust.zone(spec)
    assert "not a key" not in exc.value.message   # a secret's text never reaches the log


# -- the protected pipeline's release, and each way around it -------------------------------------------------

def test_the_protected_pipeline_signs_every_layer_and_the_release(world, tmp_path, monkeypatch):
    reg, engine, builder = world
    spec = signing_spec(tmp_path)
    as_protected(monkeypatch)
    report, plan = build(builder, spec)
    assert report.ok, report.error
    tags = release_tags(reg, spec)
    assert None not in tags.values()
    for node in plan.chain("cpu-smoke"):
        repo = layer_repo(spec.site.namespace, node.name)
        assert reg.manifest_digest(repo, attestation_tag(key_digest(reg, spec, node))), node.name
    # A consumer verifies the release and reads its provenance.
    digest = tags["cpu-smoke"]
    found = trust.verify_release(reg, spec.site.trust, release_repo(spec.site.namespace, "cpu-smoke"), digest)
    assert found["stack"] == "cpu-smoke" and found["signed_by"] == "ci-2026"
    assert [l["layer"] for l in found["layers"]] == [n.name for n in plan.chain("cpu-smoke")]
    assert set(found["tags"]) == {"cpu-smoke", "cpu-smoke-2026.12.01", "cpu-smoke-torch2.13.0-cpu-ds0.19.8"}
    lines = "\n".join(trust.provenance_lines(found))
    assert "signed by key ci-2026" in lines and "checks passed" in lines
    # Built again (a second run): everything reused, nothing unsigned was written.
    engine.built.clear()
    report, _ = build(builder, spec)
    assert report.ok and {n.action for n in report.nodes.values()} == {"reuse"} and engine.built == []


def test_a_staging_run_writes_only_staging_and_releases_nothing(world, tmp_path, monkeypatch):
    reg, engine, builder = world
    spec = signing_spec(tmp_path)
    as_protected(monkeypatch)
    assert build(builder, spec)[0].ok
    before = release_tags(reg, spec)

    def new_pin(data):
        data["projects"]["smoke-train"]["params"]["source"]["commit"] = "1a6d04ff11a3a379285c6dc7862d82d095f0056c"
    changed = signing_spec(tmp_path, "branch", mutate=new_pin)
    as_staging(monkeypatch)
    puts = len(reg.puts)
    engine.built.clear()
    report, plan = build(builder, changed)
    assert report.ok and report.held and "staging zone" in report.held
    acts = {n.layer: n.action for n in report.nodes.values()}
    # The release namespace is its cache: the three signed layers beneath are reused, the new one built.
    assert acts == {"cpu-torch-2.13": "reuse", "ds-0.19.8-cpu": "reuse", "cpu-env": "reuse", "smoke-train": "build"}
    assert engine.built == ["smoke-train"]
    written = {repo for repo, _ in reg.puts[puts:] if not repo.endswith("imgbuild-leases")}
    assert written and all(repo.startswith("imgbuild-staging/") for repo in written), written
    assert release_tags(reg, changed) == before
    # Nothing staging wrote is proof for the release namespace: the protected pipeline builds the key itself.
    top = plan.top("cpu-smoke")
    assert key_digest(reg, changed, top) is None and key_digest(reg, changed, top, "imgbuild-staging")
    as_protected(monkeypatch)
    engine.built.clear()
    report, _ = build(builder, changed)
    assert report.ok and engine.built == ["smoke-train"] and release_tags(reg, changed)["cpu-smoke"] != before["cpu-smoke"]
    # And a release run without the key is refused outright.
    as_staging(monkeypatch)
    with pytest.raises(PublishError, match="holds no signing key"):
        promote(changed, reg, plan, ["cpu-smoke"], "2026.12.02", lambda line: None)


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_forged_proof_under_a_release_key_is_never_released(world, tmp_path, monkeypatch, attempt):
    """A merge request's job pushes its own image and a 'passed' manifest under a key the release branch will
    release. promote refuses it; the protected build replaces it with its own, signed, and releases that."""
    reg, engine, builder = world
    spec = signing_spec(tmp_path)
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    forged = {node.key: forge(reg, spec, node) for node in plan.chain("cpu-smoke")}
    as_protected(monkeypatch)
    with pytest.raises(PublishError, match="no attestation is stored beside it") as exc:
        promote(spec, reg, plan, ["cpu-smoke"], "2026.12.02", lambda line: None)
    assert "no tag was moved" in exc.value.message and set(release_tags(reg, spec).values()) == {None}
    said: list = []
    report = builder(spec)
    report.say = said.append
    result = report.run(plan, ["cpu-smoke"], date="2026.12.01")
    assert result.ok, result.error
    assert {n.action for n in result.nodes.values()} == {"build"}
    assert any("does not vouch for" in line for line in said), said
    released = set(release_tags(reg, spec).values())
    assert len(released) == 1 and not released & set(forged.values())
    for node in plan.chain("cpu-smoke"):
        assert key_digest(reg, spec, node) != forged[node.key]


def signed_release(world, tmp_path, monkeypatch):
    reg, engine, builder = world
    spec = signing_spec(tmp_path)
    as_protected(monkeypatch)
    report, plan = build(builder, spec)
    assert report.ok, report.error
    return reg, spec, plan


def refused(reg, spec, plan, match):
    before = release_tags(reg, spec)
    puts = len(reg.release_puts())
    with pytest.raises(PublishError) as exc:
        promote(spec, reg, plan, ["cpu-smoke"], "2026.12.02", lambda line: None)
    assert "no tag was moved" in exc.value.message
    assert any(match in line for line in exc.value.message.splitlines()), exc.value.message
    assert release_tags(reg, spec) == before and len(reg.release_puts()) == puts
    return exc.value.message


def test_each_way_around_the_signature_is_refused(world, tmp_path, monkeypatch):
    reg, spec, plan = signed_release(world, tmp_path, monkeypatch)
    ds = next(n for n in plan.chain("cpu-smoke") if n.name == "ds-0.19.8-cpu")
    env = plan.chain("cpu-smoke")[2]
    repo = layer_repo(spec.site.namespace, ds.name)
    digest = key_digest(reg, spec, ds)
    att_tag = attestation_tag(digest)
    good_att = reg.manifests[(repo, att_tag)]
    # The positive control: the release as the protected pipeline left it verifies and releases again.
    assert promote(spec, reg, plan, ["cpu-smoke"], "2026.12.02", lambda line: None)["cpu-smoke"]

    # 1. A proof signed by a key the site does not trust (same id as a trusted one, another key).
    stranger = signer_as("ci-2026")
    recorded = json.loads(json.dumps(__import__("builder.ship.manifest", fromlist=["x"]).fetch_manifest(reg, repo, digest)))
    zone = trust.Zone("release", "imgbuild", "imgbuild", spec.site.trust, stranger)
    trust.store(reg, repo, digest, trust.sign(stranger, trust.layer_statement(spec, ds, repo, digest, recorded, zone)))
    refused(reg, spec, plan, f"ds-0.19.8-cpu ({ds.short[:12]}): its signature does not verify with key ci-2026")
    # ... and one whose key id is not listed at all.
    unknown = signer_as("someone")
    trust.store(reg, repo, digest, trust.sign(unknown, trust.layer_statement(spec, ds, repo, digest, recorded, zone)))
    refused(reg, spec, plan, "signed by 'someone', which site.trust.keys does not list")
    reg.manifests[(repo, att_tag)] = good_att

    # 2. A valid attestation copied beside another image: the key tag moved to other bytes, the envelope with it.
    other = forge(reg, spec, ds, "copied")
    reg.manifests[(repo, attestation_tag(other))] = good_att
    refused(reg, spec, plan, f"was made for {digest[:19]}, not for this image")

    # 3. The key tag overwritten after signing, no attestation beside the new bytes.
    del reg.manifests[(repo, attestation_tag(other))]
    refused(reg, spec, plan, "no attestation is stored beside it")
    reg.put_manifest(repo, ds.short, reg.manifests[(repo, digest)][0], reg.manifests[(repo, digest)][1])

    # 4. The check manifest changed after signing (a 'passed' written over the signed one).
    from builder.plan.layout import artifact_tag
    signed_manifest = reg.manifests[(repo, artifact_tag(digest))]
    from builder.ship.manifest import build_manifest, push_manifest
    from builder.ship.checks import CheckResult
    push_manifest(reg, repo, build_manifest(ds, {"dists": {"torch": "9.9"}}, [CheckResult(c.id, "passed", "ok", c.gpu)
                                                                             for c in ds.checks], digest, {}, ds.checks))
    refused(reg, spec, plan, "its check manifest was changed after key ci-2026 signed it")
    reg.manifests[(repo, artifact_tag(digest))] = signed_manifest

    # 5. The key expired since it signed: half a year on, the site rotated to ci-2027; what ci-2026 signed is
    # no longer released (its consumers still verify it: test_an_expired_key_still_verifies...).
    expired = signing_spec(tmp_path, "expired", keys=[entry("ci-2026", "2026-01-01", "2027-01-01"), entry("ci-2027")])
    as_protected(monkeypatch, "ci-2027")
    real_now = trust.now
    monkeypatch.setattr(trust, "now", lambda: datetime.datetime(2027, 6, 1, tzinfo=datetime.timezone.utc))
    message = refused(reg, expired, make_plan(expired, ["cpu-smoke"], BASE),
                      "signed by a key that is no longer trusted: key ci-2026 expired on 2027-01-01")
    assert "cpu-torch-2.13" in message and env.name in message
    monkeypatch.setattr(trust, "now", real_now)
    as_protected(monkeypatch, "ci-2026")

    # The control again: with everything put back the release goes through.
    assert promote(spec, reg, plan, ["cpu-smoke"], "2026.12.03", lambda line: None)["cpu-smoke"]


def test_a_staging_attestation_is_no_proof_in_the_release_namespace(world, tmp_path, monkeypatch):
    """Even signed by a trusted key, a statement that says it was made in the staging zone does not count."""
    reg, spec, plan = signed_release(world, tmp_path, monkeypatch)
    top = plan.top("cpu-smoke")
    repo = layer_repo(spec.site.namespace, top.name)
    digest = key_digest(reg, spec, top)
    from builder.ship.manifest import fetch_manifest
    recorded = fetch_manifest(reg, repo, digest)
    signing = trust.zone(spec).signing
    staging = trust.Zone("staging", "imgbuild-staging", "imgbuild", spec.site.trust, signing)
    trust.store(reg, repo, digest, trust.sign(signing, trust.layer_statement(spec, top, repo, digest, recorded, staging)))
    refused(reg, spec, plan, "its attestation says zone 'staging'")


def test_verify_names_what_does_not_hold(world, tmp_path, monkeypatch):
    reg, spec, plan = signed_release(world, tmp_path, monkeypatch)
    rrepo = release_repo(spec.site.namespace, "cpu-smoke")
    digest = release_tags(reg, spec)["cpu-smoke"]
    assert trust.verify_release(reg, spec.site.trust, rrepo, digest)["layers"]
    # Keys a cluster holds as files: the right one verifies, another is refused.
    right, wrong = tmp_path / "ci-2026.pub", tmp_path / "other.pub"
    right.write_text(KEYS["ci-2026"][1])
    wrong.write_text(KEYS["stranger"][1])
    assert trust.verify_release(reg, trust.keys_from_files([right]), rrepo, digest)["signed_by"] == "ci-2026"
    with pytest.raises(trust.TrustError, match="which site.trust.keys does not list"):
        trust.verify_release(reg, trust.keys_from_files([wrong]), rrepo, digest)
    # A layer's attestation removed: the release's own still verifies, the chain does not.
    ds = plan.chain("cpu-smoke")[1]
    lrepo = layer_repo(spec.site.namespace, ds.name)
    del reg.manifests[(lrepo, attestation_tag(key_digest(reg, spec, ds)))]
    with pytest.raises(trust.TrustError, match=f"layer {ds.name} .*no attestation is stored beside it"):
        trust.verify_release(reg, spec.site.trust, rrepo, digest)


def test_an_expired_key_still_verifies_what_it_signed_in_its_period_for_consumers(tmp_path):
    """Rotation: what a key signed while valid stays verifiable by a consumer; promote (at=now) refuses it."""
    spec = signing_spec(tmp_path, keys=[entry("ci-2026", "2020-01-01", "2030-01-01")])
    signing = signer_as("ci-2026", KEYS["ci-2026"][0])
    statement = {"_type": trust.STATEMENT, "predicateType": trust.PROVENANCE, "subject": [],
                 "predicate": {"runDetails": {"metadata": {"finishedOn": "2026-06-01T00:00:00Z"}}}}
    envelope = trust.sign(signing, statement)
    assert trust.open_envelope(envelope, spec.site.trust)[1] == "ci-2026"
    later = datetime.datetime(2031, 1, 1, tzinfo=datetime.timezone.utc)
    with pytest.raises(trust.TrustError, match="no longer trusted: key ci-2026 expired on 2030-01-01"):
        trust.open_envelope(envelope, spec.site.trust, at=later)
    statement["predicate"]["runDetails"]["metadata"]["finishedOn"] = "2019-06-01T00:00:00Z"
    with pytest.raises(trust.TrustError, match="is not valid before 2020-01-01"):
        trust.open_envelope(trust.sign(signing, statement), spec.site.trust)


def test_the_catalog_shows_each_release_verified_or_why_not(world, tmp_path, monkeypatch):
    from builder.catalog import collect
    from builder.catalog.page import _provenance
    reg, spec, plan = signed_release(world, tmp_path, monkeypatch)
    found = collect(reg, spec.site.namespace, trust=spec.site.trust)["data"]
    release = found["stacks"][0]["releases"][0]
    assert release["provenance"]["verified"] and release["provenance"]["signed_by"] == "ci-2026"
    assert "signed by key ci-2026" in _provenance(release["provenance"])
    # Without site.trust nothing is claimed either way.
    assert collect(reg, spec.site.namespace)["data"]["stacks"][0]["releases"][0]["provenance"] is None
    # The release's attestation removed: the catalog says so rather than leaving it out.
    digest = release["digest"]
    del reg.manifests[(release_repo(spec.site.namespace, "cpu-smoke"), attestation_tag(digest))]
    release = collect(reg, spec.site.namespace, trust=spec.site.trust)["data"]["stacks"][0]["releases"][0]
    assert release["provenance"] == {"verified": False, "error": release["provenance"]["error"]}
    assert "no attestation is stored beside it" in release["provenance"]["error"]
    assert "NOT VERIFIED" in _provenance(release["provenance"])


def test_ci_says_where_a_signing_site_gives_its_pipeline_no_key(tmp_path, cli):
    """A site that signs but maps no signing key to the release branch's jobs would refuse every release: ci
    says so; with the key mapped (reach protected) it does not; a site that does not sign is told it is unsigned."""
    from test_ci_policy import BY_GENERATION, generate
    key = {"IMGBUILD_SIGNING_KEY_FILE": {"from": "SIGNING_KEY", "reach": "protected", "file": True}}
    for ci, trusts, said in ((BY_GENERATION, True, "maps no signing key"),
                             (dict(BY_GENERATION, secrets=key), True, None),
                             (BY_GENERATION, False, "site.trust is not declared: nothing is signed")):
        data = shipped_data()
        data["site"]["ci"] = ci
        if trusts:
            data["site"]["trust"] = {"keys": [entry("ci-2026")]}
        file = write_stacks(tmp_path / f"ci-{len(str(ci))}-{trusts}", data)
        _, _, err = generate(cli, "gitlab", file)
        for text in ("maps no signing key", "site.trust is not declared"):
            assert (text in err) == (said is not None and text in said), (ci, trusts, err)


def test_the_spec_revision_names_the_stacks_file_and_its_lock(tmp_path):
    from builder.core.lockfile import lock_path
    spec = signing_spec(tmp_path, "rev")
    assert "lock_sha256" not in trust.spec_revision(spec, env={"CI_COMMIT_SHA": "a" * 40})
    lock_path(spec.file).write_text("version: 1\n")
    found = trust.spec_revision(spec, env={"CI_COMMIT_SHA": "b" * 40})
    assert found["commit"] == "b" * 40 and len(found["lock_sha256"]) == 64 and found["file"] == "stacks.yaml"
