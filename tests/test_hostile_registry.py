"""A registry client that trusts nothing (issue 19), against a scripted hostile registry on loopback and a
second host (127.0.0.2) that records what reaches it (tests/hostile_registry.py). Each class of the
issue has several cases; each is judged from the outside: the exit code (never 70), no traceback, what the
other host received, the bytes printed. A positive control shows each kind of thing working against a
well-behaved registry first (Basic credentials reach the registry; a benign diff works).

The property test at the end serves random manifest and config shapes and demands an ImgbuildError or a
result, never another exception."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from builder.ship.registry import DEADLINE, RETRY_BUDGET, Registry
from builder.errors import ImgbuildError, RegistryError
from conftest import REPO, write_stacks
from hostile_registry import OCI_INDEX, OCI_MANIFEST, Hostile, Other, Silent, digest

SECRET = "s3cr3t-registry-password"
ESCAPES = (b"\x1b", b"\x07", b"\r")


@pytest.fixture
def reg():
    server = Hostile()
    yield server
    server.stop()


@pytest.fixture
def other():
    server = Other()
    yield server
    server.stop()


@pytest.fixture
def creds(tmp_path, monkeypatch, reg):
    """A Docker config holding Basic credentials for the hostile registry's host (and only that host)."""
    folder = tmp_path / "docker"
    folder.mkdir()
    auth = base64.b64encode(f"site-user:{SECRET}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {reg.host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    return f"Basic {auth}"


def diff(cli, reg, *extra):
    return cli("diff", reg.ref("a"), reg.ref("b"), *extra)


def basic_auth(reg, expected: str):
    """A script: every registry request without the expected Basic credentials gets a 401 challenge."""
    def script(h, seen):
        if seen.path.startswith("/v2/") and seen.headers.get("authorization") != expected:
            h.answer(401, b'{"errors":[{"code":"UNAUTHORIZED","message":"auth"}]}',
                     {"WWW-Authenticate": 'Basic realm="registry"'})
            return True
        return False
    return script


def bearer(realm: str, expected_token: str | None = None):
    def script(h, seen):
        if seen.path.startswith("/v2/") and (expected_token is None or seen.headers.get("authorization") != f"Bearer {expected_token}"):
            h.answer(401, b"", {"WWW-Authenticate": f'Bearer realm="{realm}",service="reg",scope="repository:site/img:pull"'})
            return True
        return False
    return script


def no_crash(res) -> None:
    assert res.code != 70 and "Traceback" not in res.output and "internal error" not in res.output, res.output


# -- positive controls --------------------------------------------------------------------------------

def test_a_benign_diff_works(cli, reg):
    res = diff(cli, reg)
    assert res.code == 1, res.output
    assert "org.example.v" in res.out and "1 -> 2" in res.out


def test_basic_credentials_reach_the_registry_they_were_stored_for(cli, reg, creds):
    reg.script = basic_auth(reg, creds)
    res = diff(cli, reg)
    assert res.code == 1, res.output
    assert any(s.headers.get("authorization") == creds for s in reg.seen)
    assert SECRET not in res.output


def test_a_token_realm_on_the_registry_s_own_host_gets_the_credentials(cli, reg, creds):
    """The same host's token service (another port) is where Docker-style registries keep it."""
    token = Other.__new__(Other)
    from hostile_registry import _Server
    _Server.__init__(token, "127.0.0.1")
    token.script = None
    try:
        reg.script = bearer(f"http://{token.host}/token", "OTHER-HOST-TOKEN")
        res = diff(cli, reg)
        assert res.code == 1, res.output
        assert token.authorizations() == [creds] * len(token.authorizations()) and token.authorizations()
    finally:
        token.stop()


# -- credentials go nowhere else ----------------------------------------------------------------------

def test_a_token_realm_on_another_host_is_asked_without_credentials(cli, reg, other, creds):
    reg.script = bearer(f"http://{other.host}/token", "OTHER-HOST-TOKEN")
    for _ in range(2):
        res = diff(cli, reg)
        no_crash(res)
        assert res.code == 1, res.output
    assert other.seen and other.authorizations() == []
    assert all(SECRET not in json.dumps(s.headers) + s.path for s in other.seen)


@pytest.mark.parametrize("realm", ["http://203.0.113.9/token", "ftp://127.0.0.2/token", "file:///REALM",
                                   "//127.0.0.2/token", "gopher://127.0.0.2:70/token"])
def test_a_realm_that_is_not_https_off_loopback_is_refused_before_anything_is_sent(cli, reg, creds, tmp_path, realm):
    token_file = tmp_path / "token.json"
    token_file.write_text(json.dumps({"token": "FILE-TOKEN"}))
    reg.script = bearer(realm.replace("/REALM", str(token_file)))
    res = diff(cli, reg)
    no_crash(res)
    assert res.code == 2 and "registry error" in res.err, res.output
    assert "token realm" in res.err
    assert not any("FILE-TOKEN" in json.dumps(s.headers) for s in reg.seen)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_to_another_host_carries_no_authorization(cli, reg, other, creds, status):
    """A registry that redirects its manifests elsewhere: they may be fetched there (the digest is checked),
    but without the credentials of the registry."""
    guarded = basic_auth(reg, creds)

    def script(h, seen):
        if guarded(h, seen):
            return True
        if "/manifests/" in seen.path:
            h.answer(status, b"", {"Location": f"http://{other.host}{seen.path}"})
            return True
        return False
    reg.script = script
    other.script = lambda h, seen: reg.serve(h, seen)
    res = diff(cli, reg)
    no_crash(res)
    assert res.code == 1, res.output           # followed, checked, compared
    assert other.seen and other.authorizations() == []


def test_an_upload_location_on_another_host_is_refused(reg, other, creds):
    def script(h, seen):
        if seen.method == "POST" and "/blobs/uploads/" in seen.path:
            h.answer(202, b"", {"Location": f"http://{other.host}/upload/here"})
            return True
        if seen.method == "HEAD" and "/blobs/" in seen.path:
            h.answer(404, b"")
            return True
        return False
    reg.script = script
    client = Registry(reg.host)
    for _ in range(2):
        with pytest.raises(RegistryError, match="sent the upload to '127.0.0.2"):
            client.put_blob("site/img", b"record")
    assert other.seen == []


def test_a_redirect_to_a_non_http_scheme_is_refused(cli, reg):
    def script(h, seen):
        if "/manifests/" in seen.path:
            h.answer(302, b"", {"Location": "file:///etc/passwd"})
            return True
        return False
    reg.script = script
    res = diff(cli, reg)
    no_crash(res)
    assert res.code == 2 and "only http(s) is followed" in res.err, res.output


# -- digests are computed, not believed ---------------------------------------------------------------

def forged_digest_header(value: str):
    def script(h, seen):
        if "/manifests/a" in seen.path:
            body = reg_body(h, "a")
            h.answer(200, body if seen.method == "GET" else b"", {"Content-Type": OCI_MANIFEST,
                                                                  "Docker-Content-Digest": value,
                                                                  "Content-Length": str(len(body))})
            return True
        return False
    return script


def reg_body(h, tag: str) -> bytes:
    owner = h.server.owner
    return owner.manifests[owner.tags[tag]]


@pytest.mark.parametrize("claimed,reason", [
    ("sha256:" + "0" * 64, "hashes to"),
    ("not-a-digest", "is not a digest"),
    ("sha256:" + "A" * 64, "is not a digest"),
    ("sha256: " + "0" * 63, "is not a digest"),
    ("md5:" + "0" * 32, "is not a digest"),
])
def test_a_digest_header_that_the_body_does_not_hash_to_is_refused(cli, reg, claimed, reason):
    reg.script = forged_digest_header(claimed)
    for _ in range(2):
        res = diff(cli, reg)
        no_crash(res)
        assert res.code == 2 and reason in res.err, res.output


def test_a_forged_base_digest_never_becomes_a_key_input(cli, reg, tmp_path):
    """plan resolves a mirrored base by reading its manifest: a forged header leaves the base unresolved
    (provisional keys, said so), and the forged digest appears nowhere in the plan."""
    forged = "sha256:" + "e" * 64
    reg.script = forged_digest_header(forged)
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    data["site"] = {"registry": reg.host, "namespace": "imgbuild"}
    data["bases"]["debian-bookworm"]["image"] = "{registry}/site/img:a"
    file = write_stacks(tmp_path / "s", data)
    for fmt in ((), ("--json",), ("--explain",)):
        res = cli("plan", "stack=cpu-smoke", "-f", str(file), *fmt)
        no_crash(res)
        assert f"@{forged}" not in res.output and "e" * 64 not in res.out.replace(f"({forged})", "")
    said = cli("plan", "stack=cpu-smoke", "-f", str(file)).output
    assert f"hashes to {reg.tags['a']}, not to the digest the registry claims ({forged})" in said, said
    reg.script = None
    good = cli("plan", "stack=cpu-smoke", "-f", str(file), "--json")
    assert good.code == 0 and reg.tags["a"] in good.out, good.output   # the positive control


def test_an_index_child_that_does_not_hash_to_its_entry_is_refused(cli, reg):
    real = reg.tags["a"]
    lie = "sha256:" + "1" * 64
    reg.manifests[lie] = reg.manifests[real]          # served under a digest it does not hash to
    reg.types[lie] = OCI_MANIFEST
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": lie, "size": 10, "platform": {"os": "linux", "architecture": "amd64"}}]}
    reg.put_manifest("a", json.dumps(index).encode(), OCI_INDEX)
    res = diff(cli, reg)
    no_crash(res)
    assert res.code == 2 and "hashes to" in res.err, res.output


# -- registry text is inert ---------------------------------------------------------------------------

HOSTILE_LABELS = {
    "title": "\x1b]0;pwned\x07",                          # set the window title
    "clipboard": "\x1b]52;c;cm0gLXJmIH4=\x07",             # write the clipboard
    "clear": "\x1b[2J\x1b[H",                             # clear the screen
    "forged": "ok\r\nok: every check passed\rok",          # a forged report line
    "html": "<img src=x onerror=alert(1)> [click](http://evil.example) **bold** | cell",
    "bidi": "safe\u202etxt.exe",
}


@pytest.mark.parametrize("fmt", [(), ("--markdown",), ("--json",)], ids=["table", "markdown", "json"])
def test_labels_full_of_escape_sequences_print_as_inert_text(cli, fmt):
    server = Hostile(labels_a={"v": "1"}, labels_b=HOSTILE_LABELS)
    try:
        res = cli("diff", server.ref("a"), server.ref("b"), *fmt)
    finally:
        server.stop()
    assert res.code == 1, res.output
    printed = res.out.encode()
    for byte in ESCAPES:
        assert byte not in printed, (byte, res.out)
    assert not any(line.startswith("ok: every check passed") for line in res.out.splitlines())
    assert "\u202e" not in res.out
    if fmt == ("--markdown",):
        assert "<img src" not in res.out and "[click](http" not in res.out and "&lt;img src" in res.out
    if fmt == ("--json",):
        assert json.loads(res.out)["different"] is True


def test_a_registry_error_message_prints_as_inert_text(cli, reg):
    def script(h, seen):
        if "/manifests/" in seen.path:
            msg = "gone\x1b]0;pwned\x07\r\nok: released"
            h.answer(404 if seen.method == "GET" else 500, json.dumps({"errors": [{"code": "X", "message": msg}]}).encode())
            return True
        return False
    reg.script = script
    reg.tags["b"] = "sha256:" + "2" * 64
    res = cli("diff", reg.ref("a"), f"{reg.host}/site/img@sha256:{'2' * 64}")
    no_crash(res)
    assert res.code == 2
    for byte in ESCAPES:
        assert byte not in res.output.encode()
    assert not any(line.startswith("ok: released") for line in res.output.splitlines())


def test_redaction_takes_linear_time():
    from builder.redact import redact
    times = []
    for n in (250_000, 1_000_000):
        texts = ("x!" * (n // 2) + ":" + "@", "a." * (n // 2) + "://x@", "ab" * (n // 2) + "@", "-a:" * (n // 3) + "@")
        start = time.perf_counter()
        for text in texts:
            redact(text)
        times.append(time.perf_counter() - start)
    # Four times the text takes about four times as long; quadratic would be sixteen.
    assert times[1] < max(8 * times[0], 0.2), times


# -- malformed answers are refusals, never crashes ----------------------------------------------------

def _serve_manifest(body: bytes, media_type: str = OCI_MANIFEST, header_digest: bool = True):
    def script(h, seen):
        if "/manifests/a" in seen.path:
            headers = {"Content-Type": media_type}
            if header_digest:
                headers["Docker-Content-Digest"] = digest(body)
            h.answer(200, body if seen.method == "GET" else b"", dict(headers, **{"Content-Length": str(len(body))}))
            return True
        return False
    return script


def _image_with(reg, config=None, manifest=None) -> bytes:
    cbody = config if isinstance(config, bytes) else json.dumps(config if config is not None else {"config": {}}).encode()
    reg.blobs[digest(cbody)] = cbody
    m = manifest if manifest is not None else {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "x", "digest": digest(cbody), "size": len(cbody)}, "layers": []}
    return m if isinstance(m, bytes) else json.dumps(m).encode()


MALFORMED = {
    "html manifest": lambda reg: b"<html><body>Bad gateway</body></html>",
    "list manifest": lambda reg: b"[1, 2, 3]",
    "deep manifest": lambda reg: b"[" * 100_000 + b"]" * 100_000,
    "string config": lambda reg: _image_with(reg, config="just a string"),
    "config not json": lambda reg: _image_with(reg, config=b"\x00\x01 not json"),
    "config a list": lambda reg: _image_with(reg, config=[1, 2]),
    "config field a string": lambda reg: _image_with(reg, config={"config": "labels?", "history": "none"}),
    "layer size a word": lambda reg: _image_with(reg, manifest={
        "schemaVersion": 2, "config": {"digest": digest(b"{}"), "size": 2}, "layers": [{"digest": digest(b"x"), "size": "big"}]}),
    "config a string descriptor": lambda reg: _image_with(reg, manifest={"schemaVersion": 2, "config": "sha256:abc"}),
    "index entry without digest": lambda reg: json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "size": 3, "platform": {"os": "linux", "architecture": "amd64"}}]}).encode(),
    "digest with a space": lambda reg: json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"digest": "sha256: " + "a" * 63, "size": 3, "platform": {"os": "linux", "architecture": "amd64"}}]}).encode(),
    "index manifests a dict": lambda reg: json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": {}}).encode(),
}


TOLERATED = {"config field a string"}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_answer_is_a_clear_refusal(cli, reg, case):
    body = MALFORMED[case](reg)
    if case != "config not json" and case != "string config":
        reg.blobs.setdefault(digest(b"{}"), b"{}")
    media = OCI_INDEX if b"manifests" in body[:200] else OCI_MANIFEST
    reg.script = _serve_manifest(body, media)
    for fmt in ((), ("--json",), ("--markdown",)):
        res = diff(cli, reg, *fmt)
        no_crash(res)
        if case in TOLERATED:   # the image is read; its odd fields count as empty
            assert res.code == 1, (case, res.output)
            continue
        assert res.code == 2 and ("registry error" in res.err or "diff error" in res.err), (case, res.output)


def _raw_answer(data: bytes):
    def script(h, seen):
        if "/manifests/a" in seen.path:
            h.raw(data)
            return True
        return False
    return script


RAW = {
    "content-length longer than the body": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{}",
    "more than 100 headers": b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"Content-Length: 2\r\n\r\n{}",
    "not http at all": b"SSH-2.0-OpenSSH_9.2\r\n",
    "a challenge without a realm": b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer service=\"x\"\r\nContent-Length: 0\r\n\r\n",
    "a challenge that cannot be read": b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://127.0.0.2/t,\r\nContent-Length: 0\r\n\r\n",
    "an unknown auth scheme": b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Negotiate\r\nContent-Length: 0\r\n\r\n",
    "a status line of its own": b"HTTP/1.1 999 Whatever\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("case", list(RAW))
def test_a_broken_http_answer_is_a_clear_refusal(cli, reg, case):
    reg.script = _raw_answer(RAW[case])
    res = diff(cli, reg)
    no_crash(res)
    assert res.code == 2 and ("registry" in res.err or "diff error" in res.err), (case, res.output)


def test_a_release_record_with_a_unicode_serial_is_refused_not_a_crash():
    from builder.ship.oci import release_serial
    for value in ("²", "٣", "1.5", "-1", "", " 7"):
        with pytest.raises(RegistryError, match="not a release serial"):
            release_serial({"annotations": {"io.imgbuild.serial": value}}, "the release record")
    assert release_serial({"annotations": {"io.imgbuild.serial": "42"}}, "x") == 42


def test_stored_artifacts_of_the_wrong_shape_are_refused(reg):
    """A check manifest, an SBOM whose document is a list: refusals naming the artifact."""
    from builder.ship.manifest import ARTIFACT_TYPE, fetch_manifest
    from builder.plan.layout import artifact_tag
    doc = b"[1, 2]"
    reg.blobs[digest(doc)] = doc
    reg.blobs[digest(b"{}")] = b"{}"
    image = reg.tags["a"]
    reg.put_manifest(artifact_tag(image), json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {"digest": digest(b"{}"), "size": 2},
        "layers": [{"mediaType": ARTIFACT_TYPE, "digest": digest(doc), "size": len(doc)}]}).encode())
    with pytest.raises(RegistryError, match="check manifest .* is a JSON list"):
        fetch_manifest(Registry(reg.host), Hostile.REPO, image)


# -- limits and honest time-outs ----------------------------------------------------------------------

def test_a_huge_manifest_is_refused_at_its_cap_without_reading_it_whole(reg, tmp_path):
    """200 MB announced and streamed: refused at 4 MiB, in a process limited to 1 GiB of address space."""
    def script(h, seen):
        if "/manifests/a" in seen.path:
            h.send_response(200)
            h.send_header("Content-Type", OCI_MANIFEST)
            h.send_header("Content-Length", str(200 << 20))
            h.end_headers()
            chunk = b" " * (1 << 20)
            try:
                for _ in range(200):
                    h.wfile.write(chunk)
            except OSError:
                pass
            return True
        return False
    reg.script = script
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from builder.cli import main; sys.argv = ['imgbuild', 'diff', sys.argv[1], sys.argv[2]]; main()")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, reg.ref("a"), reg.ref("b")], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "with more than 4 MiB" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("what", ["body", "header"])
def test_an_answer_that_never_ends_is_cut_by_the_deadline(reg, what):
    stop = threading.Event()

    def script(h, seen):
        if "/manifests/a" in seen.path:
            h.wfile.write(b"HTTP/1.1 200 OK\r\n")
            if what == "body":
                h.wfile.write(b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            while not stop.is_set():
                try:
                    h.wfile.write(b"1\r\n \r\n" if what == "body" else b"X-Slow: 1\r\n")
                    h.wfile.flush()
                except OSError:
                    return True
                time.sleep(0.05)
            return True
        return False
    reg.script = script
    client = Registry(reg.host, timeout=3)
    start = time.monotonic()
    try:
        with pytest.raises(RegistryError) as info:
            client.get_manifest(Hostile.REPO, "a")
    finally:
        stop.set()
    assert time.monotonic() - start < 6, time.monotonic() - start
    assert "within 3 s" in info.value.message or "not valid HTTP" in info.value.message, info.value.message


def test_retries_stop_within_the_budget(monkeypatch):
    """A registry that answers 503 forever: build and release retry, then stop within the budget of all
    tries, however many waits are left (here a 3 s budget and forty 0.2 s waits; by default 60 s and the
    waits of BACKOFF, 43.5 s in all, which docs/many-builders.md states)."""
    import builder.ship.registry as registry
    monkeypatch.setattr(registry, "BACKOFF", (0.2,) * 40)
    monkeypatch.setattr(registry, "RETRY_BUDGET", 3.0)
    assert sum(registry.__dict__["BACKOFF"]) > 3
    server = Hostile()
    server.script = lambda h, seen: (h.answer(503, b"busy"), True)[1]
    retried: list = []
    client = Registry(server.host, retries=True, on_retry=retried.append)
    start = time.monotonic()
    try:
        with pytest.raises(RegistryError, match="answered 503"):
            client.get_manifest(Hostile.REPO, "a")
    finally:
        server.stop()
    assert time.monotonic() - start <= 3.0 + 1, time.monotonic() - start
    assert 3 <= len(retried) < 40 and "retrying in 0.2 s" in retried[0]
    assert sum(float(x) for x in os.environ.get("IMGBUILD_REGISTRY_BACKOFF", "0.5,1,2,4,8,12,16").split(",")) < RETRY_BUDGET


def test_an_unanswered_registry_fails_plan_diff_and_release_within_the_readme_s_times(tmp_path):
    """docs/many-builders.md: without an answer, plan, diff and release stop after one request's deadline (10 s),
    saying so; a second base on the same registry is not asked again."""
    silent = Silent()
    data = yaml.safe_load((REPO / "stacks.yaml").read_text())
    data["site"] = {"registry": silent.host, "namespace": "imgbuild"}
    data["bases"]["debian-bookworm"]["image"] = "{registry}/mirror/debian:bookworm"
    data["bases"]["ngc-25.03"]["image"] = "{registry}/mirror/ngc:25.03"
    file = write_stacks(tmp_path / "s", data)
    runs = {"plan": ["plan", "--all", "-f", str(file)],
            "diff": ["diff", f"{silent.host}/site/img:a", f"{silent.host}/site/img:b"],
            "release": ["release", "stack=cpu-smoke", "-f", str(file)]}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CI_", "GITHUB_"))}
    started = time.monotonic()
    procs = {name: subprocess.Popen([sys.executable, "-m", "builder.cli", *argv], cwd=REPO, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, argv in runs.items()}
    try:
        outs = {name: p.communicate(timeout=60)[0] for name, p in procs.items()}
        took = time.monotonic() - started
    finally:
        silent.stop()
    print(f"\nunanswered registry: plan, diff and release at once, all done in {took:.1f} s (deadline {DEADLINE:g} s)")
    assert took < DEADLINE + 8, (took, outs)
    assert procs["diff"].returncode == 2 and procs["release"].returncode == 6, outs
    for name, out in outs.items():
        assert "did not answer" in out, (name, out)
        assert "Traceback" not in out
    # plan keeps going with provisional keys, and says why; the second base costs no second deadline.
    assert procs["plan"].returncode == 0 and "did not answer" in outs["plan"], outs["plan"]


# -- a property: whatever shape, a result or a refusal ------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
FIELDS = st.fixed_dictionaries({}, optional={"schemaVersion": JSON, "mediaType": JSON, "config": JSON,
                                             "layers": JSON, "manifests": JSON, "annotations": JSON})
CONFIGS = st.fixed_dictionaries({}, optional={"config": st.fixed_dictionaries({}, optional={"Labels": JSON, "Env": JSON}) | JSON,
                                              "history": JSON, "architecture": JSON, "os": JSON})


_SHARED: dict = {}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(manifest=FIELDS, config=CONFIGS, real_config=st.booleans())
def test_any_manifest_and_config_shape_gives_a_result_or_a_refusal(manifest, config, real_config):
    from builder.diff.diffreport import render
    from builder.diff.imagediff import diff_images
    if "server" not in _SHARED:    # one registry for every example; each example replaces tag a
        _SHARED["server"] = Hostile()
    server = _SHARED["server"]
    cbody = json.dumps(config).encode()
    server.blobs[digest(cbody)] = cbody
    if real_config:
        manifest = dict(manifest, config={"digest": digest(cbody), "size": len(cbody)})
    server.put_manifest("a", json.dumps(manifest).encode(), manifest.get("mediaType") if isinstance(
        manifest.get("mediaType"), str) and "/" in manifest.get("mediaType", "") else OCI_MANIFEST)
    try:
        result = diff_images(server.ref("a"), server.ref("b"))
    except ImgbuildError:
        return
    for fmt in ("table", "markdown", "json"):
        render(result, fmt)


# -- layer downloads (verify --rebuild reads a released layer's blob from the registry) -----------------------

def _layer(n: int) -> bytes:
    return bytes((i * 7 + n) % 251 for i in range(3 << 20))   # 3 MiB, not one repeated chunk


def test_a_layer_is_streamed_to_a_file_and_checked(reg, tmp_path):
    body = _layer(1)
    reg.blobs[digest(body)] = body
    dest = tmp_path / "blob"
    Registry(reg.host).download_blob(Hostile.REPO, digest(body), len(body), dest)
    assert dest.read_bytes() == body


@pytest.mark.parametrize("served, words", [("other", "does not match its digest"), ("longer", "with more than 3 MiB"),
                                           ("shorter", "does not match its digest")])
def test_a_layer_that_is_not_its_descriptor_is_refused_and_not_kept(reg, tmp_path, served, words):
    body = _layer(2)
    wrong = {"other": _layer(3), "longer": body + b"x" * 4096, "shorter": body[:-1]}[served]
    reg.blobs[digest(body)] = wrong
    dest = tmp_path / "blob"
    with pytest.raises(RegistryError, match=words):
        Registry(reg.host).download_blob(Hostile.REPO, digest(body), len(body), dest)
    assert not dest.exists()


def test_a_layer_cut_off_mid_way_is_fetched_again_from_its_start(reg, tmp_path):
    """The first answer stops after a third of the bytes; with retries the second is written over it, not after."""
    body = _layer(4)
    reg.blobs[digest(body)] = body
    tries = []

    def script(h, seen):
        if "/blobs/" in seen.path and not tries:
            tries.append(1)
            h.raw(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:1 << 20])
            return True
        return False
    reg.script = script
    dest = tmp_path / "blob"
    Registry(reg.host, retries=True).download_blob(Hostile.REPO, digest(body), len(body), dest)
    assert tries and dest.read_bytes() == body


def test_a_rebuild_reads_only_the_released_nodes_own_layers(reg, tmp_path):
    """Of an image of three layers, the node's own (the top one) is fetched; its parent's are never asked for."""
    import gzip
    import io
    import tarfile
    from builder.ship.reproduce import _fetch_own_layers, _image, _released_entries

    def layer(name: str, data: bytes) -> tuple[bytes, str]:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return gzip.compress(raw.getvalue(), mtime=0), digest(raw.getvalue())
    layers = [layer(f"opt/{n}", n.encode() * 100) for n in ("base", "torch", "project")]
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [d for _, d in layers]}}
    for blob, _ in layers:
        reg.blobs[digest(blob)] = blob
    top = reg.put_image("three", config, [b for b, _ in layers])
    manifest, config = _image(Registry(reg.host), Hostile.REPO, top)
    own = {layers[2][1]: dict(zip(config["rootfs"]["diff_ids"], manifest["layers"]))[layers[2][1]]}
    reg.seen.clear()
    blobs = _fetch_own_layers(Registry(reg.host), Hostile.REPO, top, own, tmp_path / "released")
    asked = [s.path.rsplit("/", 1)[1] for s in reg.seen if "/blobs/" in s.path]
    assert digest(layers[2][0]) in asked and digest(layers[0][0]) not in asked and digest(layers[1][0]) not in asked
    assert list(_released_entries(blobs, [layers[2][1]])) == ["opt/project"]
