"""imgbuild gc (issue 23) on an in-memory registry: which manifests the retention policy keeps, and why.
Images are made here the way imgbuild writes them (labels, key tags, measured manifests, SBOMs, release
records, indexes); the real registry, builds and the race are in tests/test_docker_gc.py."""

from __future__ import annotations

import json
import time

import pytest

from builder.load.retention import Retention
from builder.ship import gc, leases
from builder.ship.registry import digest_of
from conftest import run_cli, shipped_data, write_stacks
from test_build_run import MemRegistry

NS = "site"
REG = "127.0.0.1:5000"
NOW = time.time()
DAY = 86400
OCI = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


class Site:
    """A registry as imgbuild leaves it: layer images chained by their parent labels, released by copy."""

    def __init__(self):
        self.reg = MemRegistry()
        self.n = 0

    def image(self, layer: str, parent: tuple | None, age_days: float, shared: tuple = ()) -> tuple:
        """A layer image tagged by a made-up key, with its measured manifest beside it: (repo, digest, key)."""
        self.n += 1
        key = f"{self.n:032x}"
        repo = f"{NS}/layers/{layer}"
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - age_days * DAY))
        labels = {"org.opencontainers.image.title": layer, "io.imgbuild.key": key,
                  "io.imgbuild.parent": f"{REG}/{parent[0]}@{parent[1]}" if parent else f"{REG}/mirror/debian@sha256:{'b' * 64}"}
        config = json.dumps({"created": created, "config": {"Labels": labels}}).encode()
        blob = f"layer {self.n}".encode() * 100
        layers = [self.reg.put_blob(repo, blob)] + list(shared)
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": self.reg.put_blob(repo, config), "size": len(config)},
                           "layers": [{"digest": d, "size": len(self.reg.blobs[d])} for d in layers]}).encode()
        digest = self.reg.put_manifest(repo, key, body, OCI)
        self.reg.put_manifest(repo, f"{key}.pending-ab12cd34", body, OCI)
        self.artifact(repo, digest, "imgbuild")
        return repo, digest, key

    def artifact(self, repo: str, subject: str, what: str) -> str:
        config = self.reg.put_blob(repo, b"{}")
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI, "config": {"mediaType": f"application/x-{what}",
                           "digest": config, "size": 2}, "layers": [], "annotations": {"s": subject}}).encode()
        return self.reg.put_manifest(repo, subject.replace(":", "-") + f".{what}", body, OCI)

    def release(self, stack: str, top: tuple, tags: list[str]) -> str:
        repo, digest, _ = top
        dst = f"{NS}/{stack}"
        body = self.reg.manifests[(repo, digest)][0]
        for tag in tags:
            self.reg.put_manifest(dst, tag, body, OCI)
            record = json.dumps({"schemaVersion": 2, "mediaType": OCI, "config": {"mediaType": "x", "digest":
                                 self.reg.put_blob(dst, b"{}"), "size": 2}, "layers": [],
                                 "annotations": {"io.imgbuild.tag": tag, "io.imgbuild.subject": digest}}).encode()
            from builder.plan.layout import release_record_tag
            self.reg.put_manifest(dst, release_record_tag(tag), record, OCI)
        self.artifact(dst, digest, "sbom")
        return digest

    def plan(self, **policy) -> gc.GcPlan:
        return gc.plan_gc(self.reg, NS, Retention(**policy), now=NOW)


def names(items) -> set:
    return {(i.repo, i.digest) for i in items}


@pytest.fixture
def three():
    """A stack released three times, each revision a new top two layers over one shared torch image, and a
    failed build's layer that passed (pushed, never released)."""
    s = Site()
    torch = s.image("torch", None, 40)
    revs = []
    for age in (30, 20, 10):
        env = s.image("env", torch[:2], age)
        proj = s.image("proj", env[:2], age)
        revs.append((env, proj))
    failed_env = s.image("env", torch[:2], 5)
    s.tops = [s.release("stack", proj, [f"stack-{i}"]) for i, (_, proj) in enumerate(revs)]
    s.reg.put_manifest(f"{NS}/stack", "stack", s.reg.manifests[(revs[-1][1][0], revs[-1][1][1])][0], OCI)
    s.torch, s.revs, s.failed_env = torch, revs, failed_env
    return s


def test_the_oldest_release_and_the_failed_build_are_exactly_the_candidates(three):
    plan = three.plan(keep_releases=2, keep_days=0)
    (env0, proj0), _, _ = three.revs
    expect = {env0[:2], proj0[:2], three.failed_env[:2], (f"{NS}/stack", three.tops[0])}
    images = {(i.repo, i.digest) for i in plan.candidates if i.kind in ("layer", "release")}
    assert images == expect
    beside = {(i.repo, i.subject) for i in plan.candidates if i.kind == "beside"}
    assert beside == {env0[:2], proj0[:2], three.failed_env[:2], (f"{NS}/stack", three.tops[0])}
    records = [i.subject for i in plan.candidates if i.kind == "record"]
    assert records == ["stack-0"]
    kept = {(i.repo, i.digest) for i in plan.items if i.keep}
    assert three.torch[:2] in kept and all(r[1][:2] in kept and r[0][:2] in kept for r in three.revs[1:])


def test_every_release_is_kept_when_the_policy_says_so(three):
    assert {i.kind for i in three.plan(keep_releases=3, keep_days=0).candidates} == {"layer", "beside"}
    plan = three.plan(keep_releases=1, keep_tags=("stack-0",), keep_days=0)
    assert three.tops[0] not in {i.digest for i in plan.candidates}
    assert three.tops[1] in {i.digest for i in plan.candidates}
    young = three.plan(keep_releases=1, keep_days=15)   # releases 10 days old and the failed env (5) stay
    assert {i.digest for i in young.candidates if i.kind in ("layer", "release")} == \
        {three.revs[0][0][1], three.revs[0][1][1], three.tops[0], three.revs[1][0][1], three.revs[1][1][1], three.tops[1]}


def test_a_lease_keeps_its_keys_and_the_chain_beneath_until_it_expires(three):
    leases.take(three.reg, NS, "run-1", {three.failed_env[2]: "env"})
    plan = three.plan(keep_releases=3, keep_days=0)
    assert three.failed_env[:2] not in names(plan.candidates)
    lease = next(i for i in plan.items if i.kind == "lease")
    assert lease.keep.startswith("a lease of a run started")
    # Two hours after the lease was taken (now, not when this module was read: a whole suite takes longer).
    later = gc.plan_gc(three.reg, NS, Retention(keep_releases=3, keep_days=0, grace_hours=1), now=time.time() + 7200)
    assert three.failed_env[:2] in names(later.candidates)
    assert any(i.kind == "lease" for i in later.candidates)


def test_the_bytes_freed_are_the_blobs_only_candidates_reference():
    s = Site()
    shared = s.reg.put_blob(f"{NS}/layers/x", b"shared" * 1000)
    keep = s.image("a", None, 1, shared=(shared,))
    s.release("st", keep, ["st"])
    gone = s.image("b", None, 30, shared=(shared,))
    plan = s.plan(keep_releases=1, keep_days=2)
    assert names(i for i in plan.candidates if i.kind == "layer") == {gone[:2]}
    manifest = json.loads(s.reg.manifests[gone[:2]][0])
    own = [d for d in [manifest["config"]["digest"]] + [l["digest"] for l in manifest["layers"]] if d != shared]
    body = s.reg.manifests[gone[:2]][0]
    artifact = next(i for i in plan.candidates if i.kind == "beside")
    artifact_body = s.reg.manifests[(artifact.repo, artifact.digest)][0]
    # The artifact's config ("{}") is shared with kept artifacts: it frees nothing.
    expect = sum(len(s.reg.blobs[d]) for d in own) + len(body) + len(artifact_body)
    assert plan.freed == expect


def test_an_index_release_keeps_each_platform_chain_and_goes_with_its_images():
    s = Site()
    amd, arm = s.image("top", None, 30), s.image("top", None, 30)
    dst = f"{NS}/both"
    entries = []
    for top in (amd, arm):
        body = s.reg.manifests[top[:2]][0]
        s.reg.put_manifest(dst, top[1], body, OCI)
        s.artifact(dst, top[1], "sbom")
        entries.append({"mediaType": OCI, "digest": top[1], "size": len(body)})
    index = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}).encode()
    s.reg.put_manifest(dst, "both-old", index, INDEX)
    s.reg.manifests = {k: v for k, v in s.reg.manifests.items() if not (k[0] == dst and k[1] in (amd[1], arm[1]))} | \
        {(dst, amd[1]): s.reg.manifests[amd[:2]], (dst, arm[1]): s.reg.manifests[arm[:2]]}
    new = s.image("top", None, 1)
    s.release("both", new, ["both"])
    kept_both = s.plan(keep_releases=2, keep_days=0)
    assert not {amd[:2], arm[:2], (dst, amd[1]), (dst, arm[1])} & names(kept_both.candidates)
    plan = s.plan(keep_releases=1, keep_days=0)
    gone = names(plan.candidates)
    assert {amd[:2], arm[:2], (dst, amd[1]), (dst, arm[1]), (dst, digest_of(index))} <= gone
    assert {i.kind for i in plan.candidates if i.repo == dst} == {"release", "child", "beside"}


def test_nothing_outside_the_namespace_or_not_imgbuilds_is_a_candidate(three):
    three.reg.put_manifest("mirror/debian", "bookworm", b'{"schemaVersion":2,"layers":[]}', OCI)
    three.reg.put_manifest(f"{NS}/handmade", "v1", b'{"schemaVersion":2,"layers":[]}', OCI)
    three.reg.put_manifest(f"{NS}/layers/env", "latest", b'{"schemaVersion":2,"layers":[],"x":1}', OCI)
    plan = three.plan(keep_releases=1, keep_days=0)
    repos = {i.repo for i in plan.candidates}
    assert "mirror/debian" not in repos and f"{NS}/handmade" not in repos
    assert not [i for i in plan.candidates if "latest" in i.tags]


def test_apply_deletes_tops_first_and_spares_what_a_run_leased_after_the_listing(three):
    plan = three.plan(keep_releases=2, keep_days=0)
    leases.take(three.reg, NS, "late-run", {three.failed_env[2]: "env"})   # after the plan was made
    done = gc.apply(three.reg, plan, say=lambda _: None)
    assert three.failed_env[:2] not in done and three.reg.manifest_digest(*three.failed_env[:2]) is not None
    (env0, proj0), _, _ = three.revs
    assert done.index(proj0[:2]) < done.index(env0[:2])
    assert three.reg.manifest_digest(*env0[:2]) is None and three.reg.manifest_digest(*proj0[:2]) is None
    assert three.reg.manifest_digest(f"{NS}/stack", "stack-0") is None
    for tag in ("stack", "stack-1", "stack-2"):
        assert three.reg.manifest_digest(f"{NS}/stack", tag)
    # Nothing a kept release needs went: every image of the two kept chains is there.
    for env, proj in three.revs[1:]:
        assert three.reg.manifest_digest(*env[:2]) and three.reg.manifest_digest(*proj[:2])
    assert three.reg.manifest_digest(*three.torch[:2])


def test_a_lease_taken_after_applys_second_reading_still_spares_its_key(three, monkeypatch):
    """The leases are read once more just before each batch of deletes: a run that takes its lease after
    apply's second reading of the registry, and before the deletes, keeps its key (the other tests lease
    before that reading, which alone would spare it)."""
    plan = three.plan(keep_releases=2, keep_days=0)
    reading = gc.plan_gc

    def second_reading_then_a_run_starts(*args, **kwargs):
        again = reading(*args, **kwargs)
        leases.take(three.reg, NS, "later-run", {three.failed_env[2]: "env"})
        return again

    monkeypatch.setattr(gc, "plan_gc", second_reading_then_a_run_starts)
    said: list = []
    done = gc.apply(three.reg, plan, say=said.append)
    assert three.failed_env[:2] not in done and three.reg.manifest_digest(*three.failed_env[:2]) is not None
    assert "gc: 1 candidate(s) kept: a run leased them just now" in said, said


def test_a_registry_without_deletes_is_refused_before_anything_goes(three, monkeypatch):
    from builder.errors import RegistryError

    def refuse(repo, digest):
        raise RegistryError("registry x does not allow deleting manifests (405)")
    monkeypatch.setattr(three.reg, "delete_manifest", refuse)
    plan = three.plan(keep_releases=1, keep_days=0)
    with pytest.raises(gc.GcError, match="does not allow deleting manifests: nothing was deleted"):
        gc.apply(three.reg, plan, say=lambda _: None)


@pytest.mark.parametrize("policy, reason", [
    ({"keep_releases": 0, "keep_days": 0}, "this policy keeps nothing"),
    ({"keep_releases": -1}, "is not between 0 and"),
    ({"keep_days": "7"}, "expected a whole number"),
    ({"keep_tags": "prod"}, "expected a list of release tags"),
    ({"grace_hours": 0}, "would let gc delete what a running build is about to use"),
    ({"keep_tags": ["bad tag"]}, "is not a tag or a glob of tags"),
    ({"keep": 3}, "unknown key 'keep'"),
])
def test_a_bad_policy_is_refused_naming_the_key(tmp_path, policy, reason):
    data = shipped_data()
    data.setdefault("site", {})["retention"] = policy
    out = run_cli("check", "-f", str(write_stacks(tmp_path, data)))
    assert out.code == 2 and "site.retention" in out.output and reason in out.output, out.output
    assert "Traceback" not in out.output


def test_a_run_holds_a_lease_while_it_runs_and_drops_it_after(tmp_path):
    reg = MemRegistry()
    seen = {}
    with leases.held(reg, NS, "r1", {"k" * 32: "env"}, say=lambda _: None):
        seen["during"] = leases.read(reg, NS)
    assert [l.keys for l in seen["during"]] == [{"k" * 32: "env"}]
    assert leases.read(reg, NS) == []
    with pytest.raises(RuntimeError):
        with leases.held(reg, NS, "r2", {"a" * 32: "x"}, say=lambda _: None):
            raise RuntimeError("the build failed")
    assert leases.read(reg, NS) == []


@pytest.mark.parametrize("label, expect", [
    (f"127.0.0.1:5000/site/layers/env@sha256:{'a' * 64}", ("site/layers/env", f"sha256:{'a' * 64}")),
    ("127.0.0.1:5000/site/layers/env:0123456789abcdef0123456789abcdef", ("site/layers/env", "0123456789abcdef0123456789abcdef")),
    (f"reg.example.org/site/layers/env:k@sha256:{'b' * 64}", ("site/layers/env", f"sha256:{'b' * 64}")),
    ("debian", None),
])
def test_the_parent_label_is_read_in_each_form_imgbuild_writes(label, expect):
    """By digest (built on the parent's pushed image) or by key tag (built on its local image, the label
    naming where it is pushed): gc and the catalog follow chains through both."""
    from builder.plan.layout import parent_of
    assert parent_of({"io.imgbuild.parent": label}) == expect


def test_what_imgbuild_did_not_write_takes_no_release_slot_and_is_never_deleted(three):
    """A cosign signature beside a release, a hand-pushed image in a stack's repository, and a tag a person put on
    an old layer image: none is ranked as a release, none is a candidate, and the layer image keeps its chain."""
    dst = f"{NS}/stack"
    three.reg.put_manifest(dst, f"sha256-{three.tops[0][7:]}.sig", b'{"schemaVersion":2,"layers":[],"sig":1}', OCI)
    config = json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW)), "config": {"Labels": {}}}).encode()
    hand = json.dumps({"schemaVersion": 2, "mediaType": OCI, "layers": [], "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json", "digest": three.reg.put_blob(dst, config),
        "size": len(config)}}).encode()
    three.reg.put_manifest(dst, "handmade", hand, OCI)
    env0 = three.revs[0][0]
    three.reg.put_manifest(env0[0], "pinned-by-hand", three.reg.manifests[env0[:2]][0], OCI)
    plan = three.plan(keep_releases=2, keep_days=0)
    gone = names(plan.candidates)
    assert (dst, three.tops[1]) not in gone and (dst, three.tops[2]) not in gone   # the two newest, as before
    assert (dst, digest_of(hand)) not in gone and not [i for i in plan.candidates if i.tags and i.tags[0].endswith(".sig")]
    assert env0[:2] not in gone and three.torch[:2] not in gone
    assert next(i for i in plan.items if (i.repo, i.digest) == env0[:2]).keep.startswith("also named by pinned-by-hand")


def test_a_rollback_is_the_newest_release_whatever_its_build_time(three):
    """Releasing an old image again (its stack card records the release time) makes it the newest release."""
    from builder.ship import card
    card.write(three.reg, f"{NS}/stack", three.tops[0], {"stack": "stack", "released": "2099-01-01T00:00:00Z"})
    plan = three.plan(keep_releases=1, keep_days=0)
    gone = names(plan.candidates)
    assert (f"{NS}/stack", three.tops[0]) not in gone and (f"{NS}/stack", three.tops[2]) in gone
    assert three.revs[0][1][:2] not in gone   # and the rolled-back release keeps its chain


def test_a_release_whose_key_a_run_leased_is_kept():
    s = Site()
    old = s.image("top", None, 30)
    s.release("st", old, ["st-old"])
    new = s.image("top", None, 20)
    s.release("st", new, ["st"])
    leases.take(s.reg, NS, "rollback", {old[2]: "top"})
    assert (f"{NS}/st", old[1]) not in names(s.plan(keep_releases=1, keep_days=0).candidates)
