"""A file fetched by URL and pinned by sha256, built into a real image (issue 21): the host fetches it
from a server on loopback, the image holds those bytes at dest with the mode asked, and a server whose
file changed stops the build before the engine is asked, with no tag moved."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from conftest import DOCKER
from e2e import NS, REGISTRY, imgbuild, release, stacks_file

pytestmark = [pytest.mark.docker, pytest.mark.registry]

BODY = b"#!/bin/sh\necho imgbuild-download-ok\n"


@pytest.fixture
def server(tmp_path, serve):
    root = tmp_path / "srv"
    root.mkdir()
    (root / "tool").write_bytes(BODY)
    return {"root": root, "url": serve(root) + "/tool"}


def _tools(url: str, tag: str):
    def mutate(data):
        data["layers"]["tools"] = {"kind": "system-setup", "params": {"downloads": [
            {"url": url, "sha256": hashlib.sha256(BODY).hexdigest(), "dest": "/usr/local/bin/imgbuild-tool",
             "mode": "0755"}]}}
        data["stacks"]["cpu-smoke"]["layers"] = ["cpu-torch-2.13", "ds-0.19.8-cpu", "tools"]
        data["stacks"]["cpu-smoke"]["tags"] = [tag]
    return mutate


def test_a_download_lands_in_the_image_with_its_bytes_and_mode(work, first, server, tmp_path):
    cache = {"IMGBUILD_CACHE": str(tmp_path / "cache")}
    f = stacks_file(work, "downloads", _tools(server["url"], "{stack}-downloads"))
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(f), env=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    digest = release("cpu-smoke-downloads")
    assert digest
    run = subprocess.run([DOCKER, "run", "--rm", "--network", "none", f"{REGISTRY}/{NS}/cpu-smoke@{digest}", "sh", "-c",
                          "stat -c %a /usr/local/bin/imgbuild-tool && imgbuild-tool"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.split() == ["755", "imgbuild-download-ok"], run.stdout + run.stderr
    # The server's file changes: the next build of a stack asking for it (a new layer above, so it is
    # built) stops before the engine, naming the URL and both sha256s; its tag does not exist.
    (server["root"] / "tool").write_bytes(BODY + b"# changed upstream\n")
    g = stacks_file(work, "downloads-changed", _tools(server["url"], "{stack}-downloads-changed"))
    g.write_text(g.read_text().replace("/usr/local/bin/imgbuild-tool", "/usr/local/bin/imgbuild-tool-2"))
    proc = imgbuild(work, "build", "stack=cpu-smoke", "-f", str(g), env={"IMGBUILD_CACHE": str(tmp_path / "cache2")})
    assert proc.returncode != 0, proc.stdout[-3000:]
    out = proc.stdout + proc.stderr
    assert "is not the file stacks.yaml pins" in out and hashlib.sha256(BODY).hexdigest() in out, out[-3000:]
    assert release("cpu-smoke-downloads-changed") is None
