"""Image diff without Docker: version order, the comparison itself, and the CLI against a small
in-process registry that serves manifests and blobs (and counts nothing a real one would not)."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from builder.diff.diffreport import render
from builder.errors import DiffError
from builder.diff.imagediff import compare, diff_images, direction, dpkg_compare, resolve
from builder.plan.layout import artifact_tag
from builder.ship.manifest import ARTIFACT_TYPE, OCI_MANIFEST
from builder.ship.sbom import SBOM_TYPE, sbom_tag
from builder.load.spec import Site

DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"


@pytest.mark.parametrize("a,b", [
    ("1.0", "1.1"), ("1.0~rc1", "1.0"), ("1.0", "1.0-1"), ("2.36-9+deb12u13", "2.36-9+deb12u14"),
    ("1:1.2", "2:0.1"), ("9.1-1", "10.0-1"), ("1.0a", "1.0b"), ("1.0", "1.0a"), ("1.0a", "1.0+"),
    ("3.0.20-1~deb12u2", "3.0.20-1"), ("12.2.0-14", "12.2.0-14+deb12u1"),
])
def test_dpkg_order(a, b):
    assert dpkg_compare(a, b) < 0 and dpkg_compare(b, a) > 0 and dpkg_compare(a, a) == 0


def test_directions():
    from builder.diff.imagediff import _python_compare
    assert direction("2.9.0", "2.13.0", _python_compare) == "upgrade"    # as versions, not as text
    assert direction("0.19.8", "0.17.6", _python_compare) == "downgrade"
    assert direction("1.0", "1.0.0", _python_compare) == "changed"
    assert direction("not a version", "1.0", _python_compare) == "changed"
    assert direction(None, "1.0", _python_compare) == "added"
    assert direction("1.0", None, _python_compare) == "removed"
    assert direction("1:2.38.1-5+deb12u2", "1:2.38.1-5+deb12u3", dpkg_compare) == "upgrade"


def test_references():
    site = Site(registry="reg.example:5000", namespace="team/imgbuild")
    assert str(resolve("cpu-smoke@cpu-smoke-2026.11.29", site)) == "reg.example:5000/team/imgbuild/cpu-smoke:cpu-smoke-2026.11.29"
    digest = "sha256:" + "0" * 64
    assert str(resolve(f"cpu-smoke@{digest}", site)) == f"reg.example:5000/team/imgbuild/cpu-smoke@{digest}"
    assert resolve("127.0.0.1:5000/a/b:t", None).repo == "a/b"
    with pytest.raises(DiffError):
        resolve("@tag", site)


# -- a registry in a thread -----------------------------------------------------------------------

class FakeRegistry:
    """Manifests by repo and reference, blobs by digest; GET and HEAD only, like a pull."""

    def __init__(self):
        self.manifests: dict = {}
        self.blobs: dict = {}
        self.blob_gets: list = []

    def blob(self, data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    def image(self, repo: str, tag: str, config: dict, layers: list[tuple[bytes, int]], recorded: dict | None = None,
              artifact_repo: str | None = None, sbom: dict | None = None) -> str:
        cfg = self.blob(json.dumps(config).encode())
        body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_V2,
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **cfg},
                           "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                                       "digest": "sha256:" + hashlib.sha256(seed).hexdigest(), "size": size}
                                      for seed, size in layers]}).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.manifests[(repo, tag)] = self.manifests[(repo, digest)] = (body, DOCKER_V2, digest)
        if recorded is not None:
            rec = self.blob(json.dumps(dict(recorded, image_digest=digest)).encode())
            art = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": self.blob(b"{}"),
                              "layers": [{"mediaType": ARTIFACT_TYPE, **rec}]}).encode()
            self.manifests[(artifact_repo or repo, artifact_tag(digest))] = (art, OCI_MANIFEST, "sha256:" + hashlib.sha256(art).hexdigest())
        if sbom is not None:   # as builder.ship.sbom.store writes it: CycloneDX components with purls
            doc = {"bomFormat": "CycloneDX", "components": [{"name": n.split(" ", 1)[1], "version": v,
                                                             "purl": f"pkg:{n.split(' ', 1)[0]}/{n.split(' ', 1)[1]}@{v}"}
                                                            for n, v in sbom.items()]}
            art = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": self.blob(b"{}"),
                              "layers": [{"mediaType": SBOM_TYPE, **self.blob(json.dumps(doc).encode())}]}).encode()
            self.manifests[(artifact_repo or repo, sbom_tag(digest))] = (art, OCI_MANIFEST, "sha256:" + hashlib.sha256(art).hexdigest())
        return digest

    def serve(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.do_GET(head=True)

            def do_GET(self, head=False):
                path = self.path.split("?")[0]
                body, ctype, digest = None, "application/json", None
                if path == "/v2/":
                    body = b"{}"
                elif "/manifests/" in path:
                    repo, ref = path[4:].split("/manifests/")
                    found = fake.manifests.get((repo, ref))
                    if found:
                        body, ctype, digest = found
                elif "/blobs/" in path:
                    repo, ref = path[4:].split("/blobs/")
                    body = fake.blobs.get(ref)
                    fake.blob_gets.append(ref)
                if body is None:
                    body = b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}'
                    self.send_response(404)
                else:
                    self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                if digest:
                    self.send_header("Docker-Content-Digest", digest)
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def config(env: list, labels: dict, steps: list) -> dict:
    return {"architecture": "amd64", "os": "linux",
            "config": {"Env": env, "Labels": labels, "Cmd": ["/bin/bash"]},
            "history": [{"created": f"2026-11-29T00:00:0{i}Z", "created_by": s + " # buildkit"} for i, s in enumerate(steps)]}


def recorded(pkgs: dict, checks: dict, versions: dict, deb: dict | None = None) -> dict:
    return {"schema": "imgbuild.manifest/v1", "layer": "smoke-train", "key": "k" * 64, "versions": versions,
            "python_packages": pkgs, "debian_packages": deb or {"libc6": "2.36-9+deb12u13"},
            "env": {"OMP_NUM_THREADS": "2"}, "arch_list": [],
            "ds_report_ops": {"cpu_adam": {"installed": True, "compatible": True}},
            "checks": [{"id": i, "status": s, "detail": "", "gpu": False} for i, s in checks.items()]}


@pytest.fixture(scope="module")
def registry():
    fake = FakeRegistry()
    server = fake.serve()
    host = f"127.0.0.1:{server.server_port}"
    base_layers = [(b"debian", 50_000_000), (b"torch", 250_000_000)]
    fake.image("ns/layers/smoke-train", "v1",
               config(["PATH=/bin", "OMP_NUM_THREADS=2"], {"io.imgbuild.layer": "smoke-train", "src": "a@v1"},
                      ["FROM debian", "RUN pip install torch", "RUN pip install ."]),
               base_layers + [(b"project-v1", 30_000)],
               recorded({"torch": "2.12.0", "numpy": "2.4.6", "deepspeed": "0.19.8", "smoke-train": "1.0.0"},
                        {"project.smoke": "passed", "deepspeed.fused-adam-step": "skipped"},
                        {"torch": "2.12.0", "deepspeed": "0.19.8", "python": "3.11.2"}),
               sbom={"deb libc6": "2.36-9+deb12u13", "pypi torch": "2.12.0", "pypi numpy": "2.4.6"})
    fake.image("ns/layers/smoke-train", "v2",
               config(["PATH=/bin", "OMP_NUM_THREADS=2"], {"io.imgbuild.layer": "smoke-train", "src": "a@v2"},
                      ["FROM debian", "RUN pip install torch", "RUN pip install six==1.16.0 ."]),
               base_layers + [(b"project-v2", 60_000)],
               recorded({"torch": "2.13.0", "numpy": "2.3.0", "deepspeed": "0.19.8", "smoke-train": "1.0.0",
                         "six": "1.16.0"},
                        {"project.smoke": "passed", "deepspeed.fused-adam-step": "skipped"},
                        {"torch": "2.13.0", "deepspeed": "0.19.8", "python": "3.11.2"},
                        deb={"libc6": "2.36-9+deb12u14"}),
               artifact_repo="ns/layers/smoke-train",
               sbom={"deb libc6": "2.36-9+deb12u14", "pypi torch": "2.13.0", "pypi numpy": "2.3.0", "pypi six": "1.16.0"})
    # A release tag: the same image copied to NAMESPACE/STACK; the artifact stays beside the layer image.
    fake.manifests[("ns/cpu-smoke", "cpu-smoke")] = fake.manifests[("ns/layers/smoke-train", "v2")]
    fake.image("elsewhere/app", "1", config(["PATH=/bin", "HOME=/root"], {"vendor": "x"}, ["FROM debian", "COPY . /app"]),
               base_layers[:1] + [(b"app", 1000)])
    yield host, fake
    server.shutdown()


def test_two_recorded_images(registry):
    host, fake = registry
    d = diff_images(f"{host}/ns/layers/smoke-train:v1", f"{host}/ns/cpu-smoke:cpu-smoke")
    assert d.different and d.not_compared == []
    sections = {s.id: s for s in d.sections}
    pkgs = {c.name: (c.old, c.new, c.direction) for c in sections["python_packages"].changes}
    assert pkgs == {"torch": ("2.12.0", "2.13.0", "upgrade"), "numpy": ("2.4.6", "2.3.0", "downgrade"),
                    "six": (None, "1.16.0", "added")}
    assert [c.name for c in sections["python_packages"].changes][0] == "torch"    # key packages first
    assert [(c.name, c.direction) for c in sections["debian_packages"].changes] == [("libc6", "upgrade")]
    assert d.versions[0] == ("torch", "2.12.0", "2.13.0")
    assert [c.name for c in sections["layers"].changes] == ["layer 3"] and sections["layers"].same == 2
    assert not sections["checks"].changes and sections["checks"].same == 2
    assert [c.name for c in sections["labels"].changes] == ["src"]
    assert [c.direction for c in sections["history"].changes] == ["changed"]
    # The SBOMs beside the two images (the release tag's found beside its layer image): package changes.
    assert [(c.name, c.old, c.new) for c in sections["sbom"].changes] == [
        ("deb libc6", "2.36-9+deb12u13", "2.36-9+deb12u14"), ("pypi numpy", "2.4.6", "2.3.0"),
        ("pypi six", None, "1.16.0"), ("pypi torch", "2.12.0", "2.13.0")]
    # Metadata only: the layer blobs were never asked for.
    layer_digests = {hashlib.sha256(s).hexdigest() for s in (b"debian", b"torch", b"project-v1", b"project-v2")}
    assert not any(g.split(":")[-1] in layer_digests for g in fake.blob_gets)
    assert d.bytes_fetched < 0.01 * d.total_size


def test_an_image_without_a_manifest_is_compared_by_config_and_layers(registry):
    host, _ = registry
    d = diff_images(f"{host}/ns/layers/smoke-train:v1", f"{host}/elsewhere/app:1")
    assert d.versions == ()
    assert d.not_compared == ["versions", "python packages", "ds_report ops", "compiled arch coverage", "checks",
                              "debian packages", "packages (SBOM)"]
    assert all(s.note == "no imgbuild manifest for B" for s in d.sections if not s.compared and s.id != "sbom")
    assert {s.id: s for s in d.sections}["sbom"].note == f"no SBOM stored beside {host}/elsewhere/app:1"
    sections = {s.id: s for s in d.sections}
    assert sections["env"].title == "config env"
    assert [c.name for c in sections["env"].changes] == ["OMP_NUM_THREADS"]     # HOME is per container
    assert sections["layers"].same == 1 and len(sections["layers"].changes) == 2
    table = render(d, "table")
    assert ("not compared (no imgbuild manifest for B): versions, python packages, ds_report ops, "
            "compiled arch coverage, checks, debian packages") in table
    assert "no imgbuild manifest" in table.splitlines()[4]


def test_the_three_formats(registry):
    host, _ = registry
    d = diff_images(f"{host}/ns/layers/smoke-train:v1", f"{host}/ns/layers/smoke-train:v2")
    table = render(d, "table").splitlines()
    assert table[0] == "imgbuild diff: images"
    assert table[5] == ("different: versions (1), python packages (3), labels (1), layers (1), debian packages (1), "
                        "history (1), packages (SBOM) (4)")
    assert table[7:11] == ["versions     A       B", "  torch      2.12.0  2.13.0  upgrade",
                           "  python     3.11.2  3.11.2", "  deepspeed  0.19.8  0.19.8"]   # platform first
    assert table[12:16] == ["python packages: 1 upgrade, 1 downgrade, 1 added, 2 same",
                            "  upgrade   torch  2.12.0 -> 2.13.0", "  downgrade numpy  2.4.6 -> 2.3.0",
                            "  added     six    1.16.0"]
    assert "  upgrade   libc6  2.36-9+deb12u13 -> 2.36-9+deb12u14" in table
    assert table[-1].startswith("read ") and table[-1].endswith("no layer pulled")
    md = render(d, "markdown")
    assert md.startswith(f"### imgbuild diff: `{host}/ns/layers/smoke-train:v1` → `")
    assert "| **torch** (upgrade) | 2.12.0 | 2.13.0 |" in md
    assert "#### python packages: 1 upgrade, 1 downgrade, 1 added, 2 same" in md
    assert "Same: ds_report ops (1), compiled arch coverage: no CUDA archs on either side, checks (2)" in md
    data = json.loads(render(d, "json"))
    assert data["mode"] == "image" and data["different"] is True
    assert data["sections"]["python_packages"]["changes"][0] == {
        "name": "torch", "old": "2.12.0", "new": "2.13.0", "direction": "upgrade", "note": ""}
    assert data["transfer"]["ratio"] < 0.01 and data["a"]["imgbuild_manifest"] is True


def test_cli_exit_codes(registry, cli, tmp_path):
    host, _ = registry
    a, b = f"{host}/ns/layers/smoke-train:v1", f"{host}/ns/layers/smoke-train:v2"
    assert cli("diff", a, a).code == 0
    assert cli("diff", a, b, "--json").code == 1
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(f"site: {{registry: '{host}', namespace: ns}}\nbases: {{}}\nstacks: {{}}\n")
    same = cli("diff", "cpu-smoke@cpu-smoke", b, "-f", str(stacks))
    assert same.code == 0, same.output
    assert "equal: same image digest" in same.out
    missing = cli("diff", a, f"{host}/ns/layers/smoke-train:nope")
    assert missing.code == 2 and "is not in the registry" in missing.err
    nowhere = cli("diff", a, "127.0.0.1:9/x/y:z")
    assert nowhere.code == 2 and "unreachable" in nowhere.err and "Traceback" not in nowhere.err
    assert cli("diff", a).code == 2


def test_compare_is_pure(registry):
    host, _ = registry
    d = diff_images(f"{host}/ns/layers/smoke-train:v1", f"{host}/ns/layers/smoke-train:v2")
    assert compare(d.a, d.b) == (d.versions, d.sections)


def test_compiled_arch_coverage_of_extension_binaries_is_compared():
    """Issue 13: the device code each extension binary holds (measured by the arch-coverage checks and
    stored in the manifest) is a section of the diff, one line per binary, named from site-packages on."""
    from types import SimpleNamespace

    from builder.diff.imagediff import _recorded_sections
    site = "/opt/venv/lib/python3.11/site-packages/"
    a = recorded({}, {}, {})
    b = recorded({}, {}, {})
    a["cuda_code"] = {"tiny_cuda_ext": {site + "tiny_cuda_ext/_kernels.so": ["sm_90"]}}
    b["cuda_code"] = {"tiny_cuda_ext": {site.replace("3.11", "3.12") + "tiny_cuda_ext/_kernels.so": ["sm_80", "sm_90"]},
                      "flash_attn": {site + "flash_attn_2_cuda.so": ["sm_90"]}}
    section = _recorded_sections(SimpleNamespace(recorded=a), SimpleNamespace(recorded=b))["arch_coverage"]
    changes = {c.name: (c.old, c.new) for c in section.changes}
    assert changes == {"tiny_cuda_ext/_kernels.so": ("sm_90", "sm_80 sm_90"), "flash_attn_2_cuda.so": (None, "sm_90")}
    same = _recorded_sections(SimpleNamespace(recorded=a), SimpleNamespace(recorded=a))["arch_coverage"]
    assert not same.changes and same.same == 1
