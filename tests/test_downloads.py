"""Files fetched by URL and pinned by sha256 (issue 21: yq, uv, an installer), without an engine: the
`downloads` parameter type and its refusals, the rendered COPY and the key, and the host-side fetch with
its cache. tests/test_docker_downloads.py builds one into a real image."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from conftest import STACKS, run_cli
from builder.errors import SourceError
from builder.load.params import Download
from builder.load.spec import load_spec
from builder.plan.keys import make_plan
from builder.ship import downloads

BODY = b"#!/bin/sh\necho tool 1.0\n"
SHA = hashlib.sha256(BODY).hexdigest()


def site(tmp_path, items) -> "Path":
    data = yaml.safe_load(STACKS.read_text())
    data["layers"]["tools"] = {"kind": "system-setup", "params": {"downloads": items}}
    data["stacks"]["cpu-tools"] = {"extends": "cpu-smoke", "layers": ["cpu-torch-2.13", "ds-0.19.8-cpu", "tools"]}
    f = tmp_path / "stacks.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    return f


ONE = {"url": "https://github.com/example/tool/releases/download/v1.0/tool_linux_amd64", "sha256": SHA,
       "dest": "/usr/local/bin/tool", "mode": "0755"}


def node(f, name="tools"):
    spec = load_spec(f)
    return next(n for n in make_plan(spec, ["cpu-tools"], {"debian-bookworm": "sha256:" + "ab" * 32}).nodes.values()
                if n.name == name)


def test_a_download_is_copied_by_its_sha256_and_the_key_follows_the_bytes_not_the_url(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    n = node(site(tmp_path / "a", [ONE]))
    assert f"COPY --chmod=0755 downloads/{SHA} /usr/local/bin/tool\n" in n.dockerfile
    mirror = node(site(tmp_path / "b", [{**ONE, "url": "https://mirror.example/tools/tool_linux_amd64"}]))
    other = node(site(tmp_path / "c", [{**ONE, "sha256": "cd" * 32}]))
    assert mirror.key == n.key and other.key != n.key


@pytest.mark.parametrize("item,key,reason", [
    ({**ONE, "url": "ftp://example.org/tool"}, "[0].url", "is not a download URL"),
    ({**ONE, "url": "http://example.org/tool"}, "[0].url", "http only on loopback"),
    ({**ONE, "url": "https://example.org/tool?version=latest"}, "[0].url", "no query"),
    ({**ONE, "url": "https://user:s3cret@example.org/tool"}, "[0].url", "credential"),
    ({**ONE, "sha256": "AB" * 32}, "[0].sha256", "is not a sha256"),
    ({**ONE, "sha256": "ab" * 31}, "[0].sha256", "is not a sha256"),
    ({**ONE, "dest": "usr/local/bin/tool"}, "[0].dest", "is not an absolute path"),
    ({**ONE, "dest": "/usr/local/bin/"}, "[0].dest", "is a folder"),
    ({**ONE, "mode": "4755"}, "[0].mode", "is not a file mode imgbuild writes"),
    # without a lock file beside stacks.yaml the sha256 is still required (with one it is intent: tests/test_intent.py)
    ({k: v for k, v in ONE.items() if k != "sha256"}, "[0].sha256", "no sha256, and there is no stacks.lock.yaml"),
    ({**ONE, "checksum": "x"}, "[0]", "expected a mapping with url, sha256, dest"),
])
def test_a_bad_download_is_refused_naming_its_key(tmp_path, item, key, reason):
    res = run_cli("check", "-f", site(tmp_path, [item]))
    assert res.code == 2, res.output
    assert f"layers.tools.params.downloads{key}" in res.err and reason in res.err, res.err
    assert "s3cret" not in res.output


def test_two_downloads_to_one_place_are_refused(tmp_path):
    res = run_cli("check", "-f", site(tmp_path, [ONE, {**ONE, "sha256": "cd" * 32}]))
    assert res.code == 2 and "a second download to the same place" in res.err, res.err


@pytest.fixture
def server(tmp_path, serve):
    root = tmp_path / "srv"
    root.mkdir()
    (root / "tool").write_bytes(BODY)
    return {"root": root, "url": serve(root) + "/tool", "stop": serve.stop}


def test_fetched_once_verified_and_kept_by_sha256(tmp_path, server, monkeypatch):
    monkeypatch.setenv("IMGBUILD_CACHE", str(tmp_path / "cache"))
    d = Download(server["url"], SHA, "/usr/local/bin/tool", "0755")
    path = downloads.fetch(d)
    assert path == tmp_path / "cache" / "downloads" / SHA and path.read_bytes() == BODY
    server["stop"]()                               # offline now: the cache answers
    assert downloads.fetch(d).read_bytes() == BODY
    downloads.place(d, tmp_path / "ctx" / "downloads" / SHA)
    assert (tmp_path / "ctx" / "downloads" / SHA).read_bytes() == BODY


def test_a_changed_file_on_the_server_is_refused_and_nothing_is_kept(tmp_path, server, monkeypatch):
    monkeypatch.setenv("IMGBUILD_CACHE", str(tmp_path / "cache"))
    (server["root"] / "tool").write_bytes(BODY + b"# changed\n")
    for _ in range(2):   # the same answer every time: nothing half-written stays behind
        with pytest.raises(SourceError) as err:
            downloads.fetch(Download(server["url"], SHA, "/usr/local/bin/tool", "0755"))
        assert f"stacks.yaml says {SHA}" in err.value.message and "is not the file stacks.yaml pins" in err.value.message
        assert list((tmp_path / "cache" / "downloads").iterdir()) == []


def test_an_unreachable_url_says_where_a_host_without_network_puts_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("IMGBUILD_CACHE", str(tmp_path / "cache"))
    with pytest.raises(SourceError) as err:
        downloads.fetch(Download("http://127.0.0.1:9/tool", SHA, "/t", "0644"))
    assert "cannot fetch http://127.0.0.1:9/tool" in err.value.message
    assert str(tmp_path / "cache" / "downloads" / SHA) in err.value.hint


def test_beside_a_lock_file_a_download_may_leave_out_its_sha256_and_the_lock_records_it(tmp_path, server, monkeypatch):
    """A recipe's `wget URL` (issue 21, intent): beside a lock file the sha256 may be left out. Until the lock
    file records it the layer is IB098 and render refuses it; `imgbuild lock` fetches the file on the host once,
    keeps it in the cache under its sha256 and records it under downloads:; read back, the layer renders and
    keys exactly as with the sha256 written out, and lock --check follows the URLs stacks.yaml names."""
    from builder.core.lockfile import load_lock
    from builder.load.intent import Intents, pins
    from builder.ship.lock import downloads_section
    monkeypatch.setenv("IMGBUILD_CACHE", str(tmp_path / "cache"))
    floating = {**ONE, "url": server["url"]}
    del floating["sha256"]
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    f = site(tmp_path / "a", [floating])
    lock = f.with_name("stacks.lock.yaml")
    lock.write_text("version: 1\nbases: {}\n")
    res = run_cli("check", "stack=cpu-tools", "-f", f)
    assert res.code == 3 and "IB098" in res.output and "a download the lock file records no sha256 for" in res.output
    assert "imgbuild lock" in res.output, res.output
    res = run_cli("render", "stack=cpu-tools", "-f", f)
    assert res.code == 2 and server["url"] in res.err, res.output
    assert run_cli("lock", "--check", "-f", f).code == 1

    # What `imgbuild lock` does while reading stacks.yaml (tests/test_docker_intent.py runs the command itself).
    intents = Intents(accept=True, fetch=downloads.digest_of)
    load_spec(f, intents=intents)
    section = downloads_section(intents)
    assert [(r["url"], r["sha256"]) for r in section] == [(server["url"], SHA)]
    assert (tmp_path / "cache" / "downloads" / SHA).read_bytes() == BODY
    lock.write_text(yaml.safe_dump({"version": 1, "bases": {}, "downloads": section}))
    assert pins(load_lock(f))["digests"] == {server["url"]: SHA}
    written = node(site(tmp_path / "b", [{**ONE, "url": server["url"]}]))
    locked = node(f)
    assert f"COPY --chmod=0755 downloads/{SHA} /usr/local/bin/tool\n" in locked.dockerfile and locked.key == written.key
    assert run_cli("check", "stack=cpu-tools", "-f", f).code == 0
    assert run_cli("lock", "--check", "-f", f).code == 0
    f.write_text(f.read_text().replace(server["url"], server["url"] + "-2"))
    res = run_cli("lock", "--check", "-f", f)
    assert res.code == 1 and "has no sha256" in res.out and "no layer names it without a sha256" in res.out, res.output


def test_a_hand_edited_download_in_the_lock_file_is_refused_at_load(tmp_path):
    f = site(_dir(tmp_path / "a"), [{k: v for k, v in ONE.items() if k != "sha256"}])
    f.with_name("stacks.lock.yaml").write_text(yaml.safe_dump(
        {"version": 1, "bases": {}, "downloads": [{"url": ONE["url"], "sha256": "not-a-sha", "resolved": "x"}]}))
    res = run_cli("check", "-f", f)
    assert res.code == 2 and "not a lock file imgbuild wrote" in res.err and "is not 64 hex digits" in res.err, res.output


def _dir(path):
    path.mkdir()
    return path
