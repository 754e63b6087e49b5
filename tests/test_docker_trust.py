"""Only the protected pipeline writes proof (issue 34), on the real engine, the real registry and the real CI
runner: gitlab-ci-local runs the generated GitLab pipeline of a tiny chain (tests/tiny_chain.py: what is
proven is about keys, signatures and tags, never torch) in a temporary git repository.

The site signs (site.trust, one Ed25519 key made here) and maps its signing key to the release branch's jobs
(site.ci.secrets, reach protected, a file-type variable). GitLab gives a protected variable only to pipelines
of protected branches; gitlab-ci-local has no such notion, so the key is handed only to the pipelines of main,
as GitLab would.

Each round, twice (a new knob each round, so new keys):
(a) a feature branch whose .gitlab-ci.yml adds a job doing what a hostile merge request could: build its own
    image, push it under the release namespace's key tag of the stack's top layer and store a check manifest
    beside it that says every check passed. Its node jobs build into the staging namespace. No tag moves;
    the forged bytes sit under the key the default branch will release;
(b) main's pipeline: the node job of that key finds an image the protected pipeline does not vouch for,
    builds it again, signs it, and the release job releases the protected build's digest. `imgbuild verify`
    verifies the release; no tag names the forged bytes.
Last, against the real registry: a valid attestation copied beside forged bytes under the key tag is refused
by `imgbuild release`, naming the layer, and no tag moves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from builder.ship.registry import Registry
from e2e import NS, REGISTRY, env_for, imgbuild, make_work
from tiny_chain import chain

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

NS_T = f"{NS}-trust"
STAGING = f"{NS_T}-staging"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
GIT = ("git", "-c", "user.email=ci@example.invalid", "-c", "user.name=imgbuild-test")
IMGBUILD = f"{sys.executable} -m builder.cli"
FORGE = '''"""What a hostile merge request's job can do with the runner's registry access and no signing key: its own
image under the release namespace's key tag of the top layer, and a check manifest that says it passed."""
import subprocess
from builder.load.spec import load_spec
from builder.prepared import prepare
from builder.plan.layout import layer_repo
from builder.ship.checks import CheckResult
from builder.ship.manifest import build_manifest, push_manifest
from builder.ship.registry import Registry

spec = load_spec("stacks.yaml")
plan = prepare(spec, [spec.stack("demo")], bases="all").require()
top = plan.top("demo")
repo = layer_repo(spec.site.namespace, top.name)
ref = f"{spec.site.registry}/{repo}:{top.short}"
dockerfile = f"FROM {plan.chain('demo')[0].base_ref}\\nRUN echo forged > /forged\\n"
subprocess.run(["docker", "build", "-q", "-t", ref, "-"], input=dockerfile, text=True, check=True)
subprocess.run(["docker", "push", "-q", ref], check=True)
reg = Registry(spec.site.registry)
digest = reg.manifest_digest(repo, top.short)
push_manifest(reg, repo, build_manifest(top, {}, [CheckResult(c.id, "passed", "ok", c.gpu) for c in top.checks],
                                        digest, {}, top.checks))
print("FORGED", top.short, digest)
'''


def keypair(folder: Path) -> tuple[Path, str]:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    from securesystemslib.signer import CryptoSigner
    signer = CryptoSigner.generate_ed25519()
    private = folder / "signing-key.pem"
    private.write_bytes(signer.private_bytes)
    private.chmod(0o600)
    public = signer._private_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


def write_stacks(repo: dict, knob: str) -> None:
    """The tiny chain with TINY_KNOB=knob, signing, its key mapped to the release branch's jobs; committed."""
    path = Path(chain(repo["work"], f"stacks-{knob}", NS_T, knob=knob))
    data = yaml.safe_load(path.read_text())
    data["site"]["trust"] = {"staging_namespace": STAGING,
                             "keys": [{"id": "ci-test", "public_key": "trust/ci-test.pub",
                                       "not_before": "2026-01-01", "not_after": "2099-01-01"}]}
    # The tiny chain installs from the tests' loopback index and is not locked: this site turns the lock jobs
    # off (site.ci.lock_check, require_locked; the pipeline's header says so). What is proven here is signing.
    data["site"]["ci"] = {"secrets": {"IMGBUILD_SIGNING_KEY_FILE": {"from": "SIGNING_KEY", "reach": "protected",
                                                                    "file": True}},
                          "lock_check": False, "require_locked": False}
    shutil.copytree(path.parent / "layers", repo["path"] / "layers", dirs_exist_ok=True)
    (repo["path"] / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    proc = imgbuild(repo["work"], "ci", "gitlab", "stack=demo", "-f", str(repo["path"] / "stacks.yaml"),
                    "--imgbuild", IMGBUILD, "--out", str(repo["path"] / ".gitlab-ci.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"knob {knob}")


def git(repo: dict, *args: str) -> None:
    subprocess.run([*GIT, *args], cwd=repo["path"], check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> dict:
    missing = [t for t in ("gitlab-ci-local", "git") if not shutil.which(t)]
    if missing:
        why = f"{', '.join(missing)} not installed (scripts/setup-test-host.sh installs them)"
        if os.environ.get("IMGBUILD_REQUIRE_DOCKER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    work = make_work(tmp_path_factory.mktemp("trust-work"))
    origin = tmp_path_factory.mktemp("trust-origin") / "images.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    path = tmp_path_factory.mktemp("trust-repo")
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    subprocess.run(["git", "remote", "add", "origin", str(origin)], cwd=path, check=True)
    private, public = keypair(work)
    (path / "trust").mkdir()
    (path / "trust" / "ci-test.pub").write_text(public)
    (path / ".gitignore").write_text(".gitlab-ci-local/\n")
    out = {"path": path, "work": work, "signing_key": private}
    git(out, "add", "-A")
    git(out, "commit", "-q", "-m", "the site's public key")
    return out


def pipeline(repo: dict, label: str, protected: bool) -> dict:
    """Run the checked-out branch's pipeline; protected: hand it the signing key, as GitLab hands a protected
    variable to a protected branch's pipelines only."""
    argv = ["gitlab-ci-local", "--shell-executor-no-image"]
    if protected:
        argv += ["--variable", f"SIGNING_KEY={repo['signing_key']}"]
    start = time.time()
    env = {k: v for k, v in env_for(repo["work"]).items() if not k.startswith("IMGBUILD_SIGNING_KEY")}
    proc = subprocess.run(argv, cwd=repo["path"], env=env, capture_output=True, text=True, timeout=1800)
    out = ANSI.sub("", proc.stdout + proc.stderr)
    (repo["work"] / f"pipeline-{label}.log").write_text(out)
    print(f"\npipeline {label}: exit {proc.returncode} in {time.time() - start:.0f} s")
    return {"rc": proc.returncode, "out": out}


def tag_digest(repo: str, tag: str) -> str | None:
    return Registry(REGISTRY).manifest_digest(repo, tag)


def top_key(repo: dict) -> str:
    proc = imgbuild(repo["work"], "plan", "stack=demo", "-f", str(repo["path"] / "stacks.yaml"), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["stacks"]["demo"]["nodes"][-1]


def test_a_forged_proof_is_never_released(repo):
    released_before = None
    for knob in ("1", "2"):   # twice: the attack and the release, with new keys each round
        git(repo, "checkout", "-q", "main")
        write_stacks(repo, knob)
        git(repo, "push", "-q", "origin", "main")
        key = top_key(repo)
        git(repo, "checkout", "-q", "-b", f"feature/evil-{knob}")
        (repo["path"] / "forge.py").write_text(FORGE)
        ci = yaml.safe_load((repo["path"] / ".gitlab-ci.yml").read_text())
        ci["evil"] = {"stage": "build", "needs": [], "script": [f"{sys.executable} forge.py"]}
        (repo["path"] / ".gitlab-ci.yml").write_text(yaml.safe_dump(ci, sort_keys=False))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "evil")

        run = pipeline(repo, f"a-feature-{knob}", protected=False)
        assert run["rc"] == 0, run["out"][-6000:]
        forged = re.search(rf"FORGED {key[:12]}\S* (sha256:[0-9a-f]{{64}})", run["out"])
        assert forged, run["out"][-4000:]
        forged = forged.group(1)
        # The attack landed: the release namespace's key tag names the forged bytes, with a 'passed' manifest.
        assert tag_digest(f"{NS_T}/layers/rt", key) == forged
        # The branch's node jobs wrote staging, signed nothing, and no tag moved.
        assert "zone: staging" in run["out"] or "staging zone" in run["out"], run["out"][-4000:]
        assert "provenance signed" not in run["out"]
        assert not re.search(r"release-demo .*released", run["out"]), run["out"][-4000:]
        assert tag_digest(f"{NS_T}/demo", "demo") == released_before

        git(repo, "checkout", "-q", "main")
        run = pipeline(repo, f"b-main-{knob}", protected=True)
        assert run["rc"] == 0, run["out"][-6000:]
        assert "does not vouch for" in run["out"], run["out"][-6000:]
        assert "provenance signed with key ci-test" in run["out"], run["out"][-6000:]
        assert re.search(r"release-demo .*ok: 1 stack\(s\) released", run["out"]), run["out"][-4000:]
        released = tag_digest(f"{NS_T}/demo", "demo")
        assert released and released != forged and released != released_before
        top_now = tag_digest(f"{NS_T}/layers/rt", key)
        assert top_now == released and top_now != forged
        proc = imgbuild(repo["work"], "verify", "stack=demo", "-f", str(repo["path"] / "stacks.yaml"))
        assert proc.returncode == 0 and "signed by key ci-test" in proc.stdout, proc.stdout + proc.stderr
        released_before = released
    # The signing key travelled as a file's path: its text is in no pipeline's log (the control: it is in the file).
    secret = repo["signing_key"].read_text().splitlines()[1]
    assert secret and secret in repo["signing_key"].read_text()
    for log in repo["work"].glob("pipeline-*.log"):
        assert secret not in log.read_text(), log
    repo["forged"], repo["released"], repo["key"] = forged, released_before, key


def test_a_copied_attestation_beside_forged_bytes_is_refused_by_release(repo):
    """The last round's forged image is still in the registry by digest: the key tag is pointed back at it
    and the protected build's attestation copied beside it. release (holding the key) refuses, no tag moves."""
    assert repo.get("forged"), "needs the pipelines"
    reg = Registry(REGISTRY)
    layer = f"{NS_T}/layers/rt"
    short = repo["key"]
    good = reg.manifest_digest(layer, short)
    forged = repo["forged"]
    found = reg.get_manifest(layer, forged)
    body = reg.manifest_bytes(layer, forged, found[1])
    att = reg.get_manifest(layer, good.replace(":", "-") + ".att")
    att_body = reg.manifest_bytes(layer, att[2], att[1])
    try:
        reg.put_manifest(layer, short, body, found[1])
        reg.put_manifest(layer, forged.replace(":", "-") + ".att", att_body, att[1])
        env = {"IMGBUILD_SIGNING_KEY_FILE": str(repo["signing_key"])}
        for _ in range(2):
            proc = imgbuild(repo["work"], "release", "stack=demo", "-f", str(repo["path"] / "stacks.yaml"), env=env)
            assert proc.returncode == 7, proc.stdout + proc.stderr
            assert re.search(r"rt \([0-9a-f]{12}\).*was made for sha256:[0-9a-f]{12}.*not for this image", proc.stderr), proc.stderr
            assert "no tag was moved" in proc.stderr
            assert tag_digest(f"{NS_T}/demo", "demo") == repo["released"]
    finally:
        reg.put_manifest(layer, short, reg.manifest_bytes(layer, good, found[1]), found[1])
    # The control: put back, the same release verifies again.
    proc = imgbuild(repo["work"], "verify", "stack=demo", "-f", str(repo["path"] / "stacks.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_export_verifies_first_and_keeps_the_provenance_beside_the_file(repo, tmp_path):
    """What a cluster runs is checked before it is written: export of the signed release prints its provenance
    and keeps it in the record beside the squashfs; with a stacks file that trusts another key, nothing is
    written (exit 10)."""
    assert repo.get("released"), "needs the pipelines"
    stacks = repo["path"] / "stacks.yaml"
    out = tmp_path / "demo.sqsh"
    proc = imgbuild(repo["work"], "export", "stack=demo", "-o", str(out), "-f", str(stacks), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "signed by key ci-test" in proc.stdout, proc.stdout
    record = json.loads(out.with_name(out.name + ".json").read_text())
    assert record["source_digest"] == repo["released"]
    assert record["provenance"]["signed_by"] == "ci-test" and record["provenance"]["stack"] == "demo"
    # The same release, read by a site whose stacks file trusts another key.
    _, other = keypair(tmp_path)
    (repo["path"] / "trust" / "other.pub").write_text(other)
    data = yaml.safe_load(stacks.read_text())
    data["site"]["trust"]["keys"][0]["public_key"] = "trust/other.pub"
    stranger = repo["path"] / "stranger.yaml"
    stranger.write_text(yaml.safe_dump(data, sort_keys=False))
    refused = tmp_path / "refused.sqsh"
    for _ in range(2):
        proc = imgbuild(repo["work"], "export", "stack=demo", "-o", str(refused), "-f", str(stranger), timeout=900)
        assert proc.returncode == 10, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "its signature does not verify with key ci-test" in proc.stderr, proc.stderr
        assert not refused.exists() and not refused.with_name(refused.name + ".json").exists()
