"""Intent in stacks.yaml, truth in the lock (issue 21), without an engine: what may float and where, how the
lock's answers are read back (a git ref's commit, a range's exact version), what is refused without them,
and the new primitives' renderings (patches of any git source, requirements files, uv sync of a project's
own lock, several projects). tests/test_docker_intent.py runs the same against the real engine and pip."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from packaging.requirements import Requirement

from conftest import STACKS, run_cli
from builder.errors import SpecError
from builder.load.intent import Intents, floating, layer_intents
from builder.load.spec import load_spec
from builder.plan.keys import layer_definition, make_plan
from builder.core.lockfile import LockedDist, LockedPython, load_lock
from builder.plan.pinning import pinned, requirement_lines
from builder.ship.lock import lock as write_lock
from builder.ship.resolve import read_report
from builder.ship.sources import ls_remote

DIGEST = {"debian-bookworm": "sha256:" + "ab" * 32}
EMPTY_LOCK = "version: 1\nbases: {}\n"


@pytest.mark.parametrize("req, why", [
    ("numpy==2.1.3", None), ("numpy[x]==2.1.3", None),
    ("six @ git+https://github.com/benjaminp/six.git@" + "a" * 40, None),
    ("fa @ https://h.example/fa-2.7-cp311-cp311-linux_x86_64.whl#sha256=" + "b" * 64, None),
    ("numpy>=1.26", "a range (>=1.26)"), ("numpy~=1.26", "a range (~=1.26)"), ("numpy==2.*", "a range (==2.*)"),
    ("numpy>=1,<2", "a range (<2,>=1)"), ("ninja", "no version"),
    ("six @ git+https://github.com/benjaminp/six.git@1.16.0", "a git ref (1.16.0)"),
    ("six @ git+https://github.com/benjaminp/six.git", "a git default branch"),
    ("fa @ https://h.example/fa-2.7-cp311-cp311-linux_x86_64.whl", "a wheel URL without #sha256="),
])
def test_what_floats(req, why):
    assert floating(Requirement(req)) == why


def _site(tmp_path, mutate, lock: str | None = EMPTY_LOCK):
    data = yaml.safe_load(STACKS.read_text())
    data["stacks"] = {"cpu-smoke": data["stacks"]["cpu-smoke"]}
    mutate(data)
    tmp_path.mkdir(parents=True, exist_ok=True)
    f = tmp_path / "stacks.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    if lock is not None:
        (tmp_path / "stacks.lock.yaml").write_text(lock)
    return f


def _ranged(data):
    data["layers"]["extra"] = {"kind": "pip", "params": {"packages": ["hjson>=3,<4", "tqdm",
                                                                      "six @ git+https://github.com/benjaminp/six.git@1.16.0"]}}
    data["stacks"]["cpu-smoke"]["layers"].append("extra")


@pytest.mark.parametrize("value, reason", [
    ("hjson>=3,<4", "needs an exact version (hjson==X.Y.Z), got the range 'hjson>=3,<4'"),
    ("tqdm", "'tqdm' is not pinned"),
    ("six @ git+https://github.com/benjaminp/six.git@1.16.0", "a URL requirement must be git+URL@<full 40-hex commit>"),
    ("fa @ https://h.example/fa-2.7-cp311-cp311-linux_x86_64.whl", "a URL requirement must be git+URL@<full 40-hex commit>"),
])
def test_without_a_lock_file_every_floating_value_is_refused_as_before(tmp_path, value, reason):
    f = _site(tmp_path, lambda d: (_ranged(d), d["layers"]["extra"]["params"].update(packages=[value])), lock=None)
    res = run_cli("check", "-f", f)
    assert res.code == 2 and reason in res.err and "imgbuild lock python=LAYER" in res.err, res.output
    assert "Traceback" not in res.output


def test_beside_a_lock_file_intent_is_reported_and_never_built_from(tmp_path):
    def floating(d):
        _ranged(d)
        d["layers"]["cpu-torch-2.13"]["params"]["tools"] = ["setuptools>=80,<81", "wheel"]   # a name with dots
    f = _site(tmp_path, floating)
    res = run_cli("check", "stack=cpu-smoke", "-f", f)
    assert res.code == 3, res.output
    # One finding per layer, every floating value named, the command that fixes it; lint's own words for
    # a floating pin (IB101, IB103) are not said a second time.
    assert res.out.count("error IB098 [cpu-smoke]") == 2 and "IB103" not in res.out and "IB101" not in res.out
    assert "'hjson<4,>=3' (a range (<4,>=3))" in res.out and "'tqdm' (no version)" in res.out
    assert "fix: imgbuild lock python=extra" in res.out
    for verb in (["render", "stack=cpu-smoke"], ["plan", "stack=cpu-smoke", "--offline"]):
        res = run_cli(*verb, "-f", f)
        assert res.code == 2 and "spec error[IB098]" in res.err and "layers.cpu-torch-2.13.params.tools" in res.err, res.output
        assert "nothing is built from intent" in res.err and "imgbuild lock python=cpu-torch-2.13" in res.err
    res = run_cli("lock", "--check", "-f", f)
    assert res.code == 1 and "python.extra: missing: 'hjson<4,>=3' floats" in res.out, res.output


def _locked_extra(tmp_path, steps, intents=()):
    f = _site(tmp_path, _ranged)
    spec = load_spec(f)
    entry = {"stack": "cpu-smoke", "parent": "p", "definition": layer_definition(spec, spec.stack("cpu-smoke"), "extra"),
             "resolved": "2026-12-03T12:00:00Z", "steps": steps, "intents": list(intents)}
    (tmp_path / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {}, "python": {"extra": entry}}))
    return f


STEP = [{"name": "six", "version": "1.16.0", "sha256": None, "url": "git+https://github.com/benjaminp/six.git@"
         + "c" * 40, "requested": True, "direct": True},
        {"name": "hjson", "version": "3.1.0", "sha256": "65" * 32, "url": "https://files.example/hjson.whl",
         "requested": True}]


def test_with_its_lock_entry_a_floating_layer_installs_only_the_result(tmp_path):
    f = _locked_extra(tmp_path, [STEP], [{"intent": "hjson<4,>=3", "locked": "hjson==3.1.0"}])
    res = run_cli("check", "stack=cpu-smoke", "-f", f)
    assert "IB098" not in res.out, res.output
    node = next(n for n in make_plan(load_spec(f), ["cpu-smoke"], DIGEST).nodes.values() if n.name == "extra")
    # The hashed set by its requirements file; the git requirement from the commit the lock resolved its tag
    # to, --no-deps; nothing of the intent is left in the Dockerfile.
    assert "--no-deps --require-hashes -r /imgbuild-lock/00.txt" in node.dockerfile
    assert "--no-deps 'six @ git+https://github.com/benjaminp/six.git@" + "c" * 40 + "'" in node.dockerfile
    assert "1.16.0" not in node.dockerfile and "hjson>=" not in node.dockerfile and "tqdm" not in node.dockerfile
    assert node.locked == ("hjson==3.1.0 --hash=sha256:" + "65" * 32 + "\n",)
    # Another resolution of the same intent is another key: the content key follows the result.
    other = _locked_extra(tmp_path / "b", [[STEP[0], {**STEP[1], "version": "3.1.1", "sha256": "66" * 32}]])
    key = next(n.key for n in make_plan(load_spec(other), ["cpu-smoke"], DIGEST).nodes.values() if n.name == "extra")
    assert key != node.key
    assert load_lock(f).python["extra"].intents == (("hjson<4,>=3", "hjson==3.1.0"),)


def test_a_wheel_by_url_is_installed_from_that_url_and_an_empty_step_installs_nothing():
    d = LockedDist("flash-attn", "2.7.4", "ab" * 32, "https://h.example/flash_attn-2.7.4-cp311.whl", True, direct=True)
    assert requirement_lines([d]) == "flash-attn @ https://h.example/flash_attn-2.7.4-cp311.whl --hash=sha256:" + "ab" * 32 + "\n"
    text = "RUN python -m pip install --progress-bar off hjson\n"
    out, files = pinned(text, LockedPython("s", "p", "d", "r", ((),)))
    assert "pip install" not in out and "the lock installs nothing" in out and files == ("\n",)


def _report(*items):
    return json.dumps({"version": "1", "environment": {}, "install": list(items)}).encode()


def test_pips_report_of_a_git_requirement_a_url_wheel_and_a_wheelhouse_wheel(tmp_path):
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"wheel bytes")
    got = read_report(_report(
        {"metadata": {"name": "six", "version": "1.16.0"}, "requested": True, "is_direct": True,
         "download_info": {"url": "https://github.com/benjaminp/six.git",
                           "vcs_info": {"vcs": "git", "requested_revision": "1.16.0", "commit_id": "d" * 40}}},
        {"metadata": {"name": "flash-attn", "version": "2.7.4"}, "requested": True, "is_direct": True,
         "download_info": {"url": "https://h.example/fa.whl", "archive_info": {"hashes": {"sha256": "e" * 64}}}},
        {"metadata": {"name": "torch", "version": "2.13.0+cpu"}, "requested": True, "is_direct": True,
         "download_info": {"url": "file:///wheelhouse/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                           "archive_info": {}}}), "pip", wheelhouse=tmp_path)
    assert (got[0].url, got[0].sha256, got[0].direct) == ("git+https://github.com/benjaminp/six.git@" + "d" * 40, None, True)
    assert (got[1].sha256, got[1].direct) == ("e" * 64, True)
    import hashlib
    assert got[2].sha256 == hashlib.sha256(b"wheel bytes").hexdigest()
    # The wheelhouse wheel by its path in the image (pip reads the name unquoted)
    assert requirement_lines([got[2]]).startswith("/wheelhouse/torch-2.13.0+cpu-cp311")
    with pytest.raises(Exception, match="no sha256 in the report"):   # an archive with no hash is never locked
        read_report(_report({"metadata": {"name": "x", "version": "1"}, "download_info": {
            "url": "https://h.example/x.whl", "archive_info": {}}}), "pip", wheelhouse=None)


@pytest.fixture
def tagged(tmp_path):
    """A git repository with an annotated tag v1 and a branch dev, as a file:// URL."""
    repo = tmp_path / "src.git"
    work = tmp_path / "src"
    run = lambda *a, cwd=work: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=cwd,
                                              check=True, capture_output=True, text=True).stdout.strip()
    work.mkdir()
    run("init", "-q", "-b", "main")
    (work / "a.py").write_text("x = 1\n")
    run("add", "a.py")
    run("commit", "-qm", "one")
    one = run("rev-parse", "HEAD")
    run("tag", "-a", "v1", "-m", "v1")
    (work / "a.py").write_text("x = 2\n")
    run("commit", "-qam", "two")
    two = run("rev-parse", "HEAD")
    run("branch", "dev")
    run("clone", "-q", "--bare", str(work), str(repo), cwd=tmp_path)
    return {"url": f"file://{repo}", "v1": one, "dev": two}


def test_a_git_ref_is_resolved_on_the_host_recorded_and_read_back_as_its_commit(tmp_path, tagged):
    assert ls_remote(tagged["url"], "v1") == tagged["v1"]        # the annotated tag peeled to its commit
    assert ls_remote(tagged["url"], "dev") == tagged["dev"]
    with pytest.raises(Exception, match="has no tag or branch 'v9'"):
        ls_remote(tagged["url"], "v9")

    def at_ref(ref):
        return lambda d: d["projects"]["smoke-train"]["params"].update(source={"repo": tagged["url"], "ref": ref})
    f = _site(tmp_path, at_ref("v1"))
    res = run_cli("check", "stack=cpu-smoke", "-f", f)
    assert res.code == 3 and "IB098" in res.out and "fix: imgbuild lock (records the commit of each git ref and the sha256 of each file by URL)" in res.out
    assert run_cli("lock", "--check", "-f", f).code == 1
    intents = Intents(accept=True, resolve=ls_remote)
    spec = load_spec(f, intents=intents)
    path, failures, _ = write_lock(spec, [], None, say=lambda line: None, intents=intents)
    assert not failures and [(s.ref, s.commit) for s in load_lock(f).sources] == [("v1", tagged["v1"])]
    assert run_cli("lock", "--check", "-f", f).code == 0
    assert "IB098" not in run_cli("check", "stack=cpu-smoke", "-f", f).out
    # Same key, same image: the ref locked to a commit keys as that commit written out.
    by_ref = {n.name: n.key for n in make_plan(load_spec(f), ["cpu-smoke"], DIGEST).nodes.values()}
    g = _site(tmp_path / "c", lambda d: d["projects"]["smoke-train"]["params"].update(
        source={"repo": tagged["url"], "commit": tagged["v1"]}), lock=None)
    by_commit = {n.name: n.key for n in make_plan(load_spec(g), ["cpu-smoke"], DIGEST).nodes.values()}
    assert by_ref == by_commit
    # Without any lock file the ref is refused at load, with both ways out.
    (tmp_path / "stacks.lock.yaml").unlink()
    res = run_cli("check", "-f", f)
    assert res.code == 2 and "ref 'v1' floats" in res.err and "imgbuild lock" in res.err and "rev-parse" in res.err


@pytest.mark.parametrize("source, reason", [
    ({"repo": "https://example.com/m.git", "ref": "-upload-pack=x"}, "is not a tag or branch name"),
    ({"repo": "https://example.com/m.git", "ref": "a..b"}, "is not a tag or branch name"),
    ({"repo": "https://example.com/m.git", "ref": "v1", "commit": "a" * 40}, "not both"),
    ({"repo": "https://example.com/m.git"}, "missing 'commit'"),
])
def test_a_bad_ref_is_refused_with_its_key(tmp_path, source, reason):
    f = _site(tmp_path, lambda d: d["projects"]["smoke-train"]["params"].update(source=source))
    res = run_cli("check", "-f", f)
    assert res.code == 2 and reason in res.err and "projects.smoke-train.params.source" in res.err, res.output


def test_several_projects_in_a_stack_are_layers_in_the_order_given(tmp_path):
    def two(d):
        d["projects"]["smoke-two"] = {"kind": "project", "params": {**d["projects"]["smoke-train"]["params"],
                                                                    "path": "/opt/two"}}
        d["stacks"]["cpu-smoke"]["project"] = ["smoke-train", "smoke-two"]
    spec = load_spec(_site(tmp_path, two, lock=None))
    assert [layer.name for layer in spec.stack("cpu-smoke").chain][-2:] == ["smoke-train", "smoke-two"]
    res = run_cli("check", "-f", _site(tmp_path / "e", lambda d: d["stacks"]["cpu-smoke"].update(project=[]), lock=None))
    assert res.code == 2 and "stacks.cpu-smoke.project" in res.err and "non-empty list" in res.err, res.output


def test_patches_requirements_files_and_uv_sync_render_and_key(tmp_path):
    (tmp_path / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    url = {"url": "https://raw.example/o/r/" + "1" * 40 + "/docker/patches/deepep.patch", "sha256": "f" * 64}

    def params(d):
        d["projects"]["smoke-train"]["params"].update(patches=["fix.patch", url], requirements_files=["requirements/ci.txt"],
                                                      install="uv-sync", uv_extras=["mlm"], uv_no_install=["torch"])
    f = _site(tmp_path, params, lock=None)
    spec = load_spec(f)
    stack = spec.stack("cpu-smoke")
    layer = spec.layers["smoke-train"]
    assert [i[1] for i in layer_intents(layer)] == ["requirements/ci.txt"]   # a requirements file is intent
    from builder.plan.render import render_layer
    text = render_layer(spec, stack, layer)
    assert "COPY inputs/" in text and "COPY downloads/" + "f" * 64 + " /opt/imgbuild/patches/smoke-train/02.patch" in text
    assert " && git apply --verbose /opt/imgbuild/patches/smoke-train/01.patch \\\n && git apply --verbose " \
           "/opt/imgbuild/patches/smoke-train/02.patch \\\n" in text
    assert "python -m pip install --progress-bar off -r requirements/ci.txt" in text
    assert "uv sync --locked --link-mode copy --no-cache --extra mlm --no-install-package torch" in text
    assert "uv venv /opt/venv --system-site-packages" in text and "ENV VIRTUAL_ENV=/opt/venv" in text
    # Without a lock file the requirements file's layer is not built (its lines are pip's to read: intent).
    res = run_cli("render", "stack=cpu-smoke", "-f", f)
    assert res.code == 2 and "IB098" in res.err, res.output
    # The patch's bytes are in the key: another patch, another key.
    before = {n.name: n.key for n in make_plan(spec, ["cpu-smoke"], DIGEST, intent=True).nodes.values()}
    (tmp_path / "fix.patch").write_text("--- a/x\n+++ b/y\n")
    after = {n.name: n.key for n in make_plan(load_spec(f), ["cpu-smoke"], DIGEST, intent=True).nodes.values()}
    assert before["smoke-train"] != after["smoke-train"] and before["cpu-env"] == after["cpu-env"]


@pytest.mark.parametrize("patch, reason", [
    ({"url": "http://example.com/x.patch", "sha256": "f" * 64}, "is not a download URL"),
    ({"url": "https://example.com/x.patch", "sha256": "f" * 10}, "is not a sha256"),
    ({"url": "https://example.com/x.patch"}, "exactly url and sha256"),
    ("../x.patch", "is not a relative path"),
])
def test_a_bad_patch_is_refused_with_its_key(tmp_path, patch, reason):
    f = _site(tmp_path, lambda d: d["projects"]["smoke-train"]["params"].update(patches=[patch]), lock=None)
    res = run_cli("check", "-f", f)
    assert res.code == 2 and reason in res.err and "projects.smoke-train.params.patches[0]" in res.err, res.output


def test_the_in_image_check_of_a_range_holds_the_range():
    from builder.ship.checks import _requirements
    facts = {"dists": {"hjson": "3.1.0", "tqdm": "4.70.1"}}
    assert _requirements({"installed": ["hjson<4,>=3", "tqdm"]}, facts)[0] == "passed"
    status, why = _requirements({"installed": ["hjson<3.1,>=3"]}, facts)
    assert status == "failed" and "outside the range stacks.yaml states" in why


@pytest.mark.parametrize("extra", [{}, {"requirements": "reqs.txt"}])
def test_a_pip_layer_with_a_torch_swap_renders_each_instruction_on_its_own_line(tmp_path, extra):
    """The requirements file's line once swallowed the newline before the torch pin: the pin's RUN was
    glued to the install (`... hjson==3.1.0RUN mkdir -p /etc/imgbuild`), and only lint noticed."""
    (tmp_path / "reqs.txt").write_text("hjson==3.1.0\n")

    def swap(d):
        d["layers"]["swap"] = {"kind": "pip", "params": {"packages": ["hjson==3.1.0"], **extra,
                                                          "replace_torch": "a test of the rendering of a swap"}}
        d["stacks"]["cpu-smoke"]["layers"].append("swap")
    f = _site(tmp_path, swap, lock=None)
    spec = load_spec(f)
    from builder.plan.render import render_layer
    text = render_layer(spec, spec.stack("cpu-smoke"), spec.layers["swap"])
    assert not [line for line in text.splitlines() if "RUN " in line and not line.startswith("RUN ")], text
    assert text.count("\nRUN ") >= 2, text


def test_layers_above_the_project_venvs_removals_ports_and_upgrades(tmp_path):
    def recipe(d):
        d["layers"]["venv"] = {"kind": "system-setup", "params": {
            "venvs": [{"path": "/opt/venv", "system_site_packages": True, "activate": True}, {"path": "/opt/jet"}],
            "remove": {"paths": ["/usr/lib/python3/dist-packages/cv2"], "reason": "the recipe removes OpenCV's copy"},
            "expose": [8000, 22]}}
        d["layers"]["adapter"] = {"kind": "pip", "params": {"packages": ["hjson==3.1.0"], "flags": ["upgrade"]}}
        d["stacks"]["cpu-smoke"]["layers"].append("venv")
        d["stacks"]["cpu-smoke"]["above"] = ["adapter"]
        d["projects"]["smoke-train"]["params"].update(no_build_isolation=True)
    spec = load_spec(_site(tmp_path, recipe, lock=None))
    stack = spec.stack("cpu-smoke")
    assert [layer.name for layer in stack.chain][-2:] == ["smoke-train", "adapter"]
    from builder.plan.render import render_layer
    text = render_layer(spec, stack, spec.layers["venv"])
    assert "RUN rm -rf -- /usr/lib/python3/dist-packages/cv2\n" in text
    assert "RUN python3 -m venv --system-site-packages /opt/venv\n" in text and "RUN python3 -m venv /opt/jet\n" in text
    assert "ENV VIRTUAL_ENV=/opt/venv \\\n    PATH=\"/opt/venv/bin" in text and "EXPOSE 22 8000\n" in text
    assert "pip install --progress-bar off --upgrade hjson==3.1.0" in render_layer(spec, stack, spec.layers["adapter"])
    assert "pip install --progress-bar off --no-build-isolation --no-deps /opt/project" in \
        render_layer(spec, stack, spec.layers["smoke-train"])


@pytest.mark.parametrize("params, reason", [
    ({"venvs": [{"path": "/a", "activate": True}, {"path": "/b", "activate": True}]}, "more than one virtual environment"),
    ({"venvs": [{"path": "opt/venv"}]}, "is not an absolute path"),
    ({"remove": {"paths": ["/usr"], "reason": "because the recipe does"}}, "is a system folder"),
    ({"remove": {"paths": ["/opt/x"]}}, "expected a mapping with paths"),
    ({"expose": [0]}, "a port is a number"),
])
def test_bad_system_setup_values_are_refused(tmp_path, params, reason):
    def recipe(d):
        d["layers"]["venv"] = {"kind": "system-setup", "params": params}
        d["stacks"]["cpu-smoke"]["layers"].append("venv")
    res = run_cli("check", "-f", _site(tmp_path, recipe, lock=None))
    assert res.code == 2 and reason in res.err and "layers.venv.params" in res.err, res.output


@pytest.mark.parametrize("where, params, reason", [
    ("layers.site", {"build_env": {"PIP_INDEX_URL": "https://mirror.example/simple"}}, "PIP_INDEX_URL decides where packages come from"),
    ("layers.site", {"build_env": {"PIP_TRUSTED_HOST": "mirror.example"}}, "PIP_TRUSTED_HOST decides"),
    ("layers.site", {"build_env": {"UV_INSECURE_HOST": "mirror.example"}}, "UV_INSECURE_HOST decides"),
    ("layers.site", {"build_env": {"https_proxy": "http://proxy.example:3128"}}, "https_proxy would send every later download"),
    ("layers.files", {"env": {"PIP_INDEX_URL": "https://mirror.example/simple"}}, "PIP_INDEX_URL decides"),
    ("layers.files", {"env": {"SSL_CERT_FILE": "/opt/my-ca.pem"}}, "SSL_CERT_FILE decides"),
    ("layers.files", {"files": [{"src": "f.txt", "dest": "/etc/apt/sources.list"}]}, "'/etc/apt/sources.list' decides"),
    ("layers.files", {"files": [{"src": "f.txt", "dest": "/root/.config/pip/pip.conf"}]}, "pip.conf' decides"),
    ("layers.files", {"symlinks": {"/etc/pip.conf": "/opt/pip.conf"}}, "'/etc/pip.conf' decides"),
    ("layers.files", {"downloads": [{"url": "https://h.example/k.gpg", "sha256": "a" * 64,
                                     "dest": "/etc/apt/trusted.gpg.d/k.gpg"}]}, "trusted.gpg.d/k.gpg' decides"),
])
def test_a_layer_cannot_move_the_package_source_or_switch_off_tls(tmp_path, where, params, reason):
    """FINDINGS F13: build_env, an image ENV, a copied file, a link or a download could set the index, trust a host
    without TLS, or replace apt's sources, and check said ok. Each is refused, with the way the site does it."""
    (tmp_path / "f.txt").write_text("deb http://mirror.example/debian bookworm main\n")
    kind = "pip" if where == "layers.site" else "system-setup"
    base = {"packages": ["hjson==3.1.0"]} if kind == "pip" else {}

    def layer(d):
        d["layers"][where.split(".")[1]] = {"kind": kind, "params": {**base, **params}}
        d["stacks"]["cpu-smoke"]["layers"].append(where.split(".")[1])
    res = run_cli("check", "-f", _site(tmp_path, layer, lock=None))
    assert res.code == 2 and reason in res.err and where + ".params" in res.err, res.output
    assert "IMGBUILD_PIP_INDEX_URL" in res.err or "only empty it" in res.err or "proxies" in res.err


def test_emptying_a_proxy_and_pip_user_are_allowed(tmp_path):
    def layer(d):
        d["layers"]["files"] = {"kind": "system-setup", "params": {"env": {"http_proxy": "", "PIP_ROOT_USER_ACTION": "ignore"}}}
        d["stacks"]["cpu-smoke"]["layers"].append("files")
    assert run_cli("check", "-f", _site(tmp_path, layer, lock=None)).code == 0


def test_apt_mirror_pip_index_modes_labels_and_megatron_helpers(tmp_path):
    def recipe(d):
        d["layers"]["site"] = {"kind": "system-setup", "params": {
            "apt_mirror": "https://mirrors.example.org/", "pip_index": "https://mirrors.example.org/pypi/simple",
            "modes": [{"path": "/workspace", "mode": "0777", "recursive": True}],
            "labels": {"nemo.library": "nemo-core"}}}
        d["stacks"]["cpu-smoke"]["layers"].append("site")
    spec = load_spec(_site(tmp_path, recipe, lock=None))
    from builder.plan.render import render_layer
    text = render_layer(spec, spec.stack("cpu-smoke"), spec.layers["site"])
    assert "#'https://mirrors.example.org'/\\2/#g' \"$f\"; fi" in text and "deb\\.debian\\.org" in text
    assert "grep -rqsF -- https://mirrors.example.org /etc/apt/sources.list" in text
    assert "kept).\nRUN for f in /etc/apt/sources.list " in text   # the RUN on a line of its own
    assert "RUN python3 -m pip config --global set global.index-url https://mirrors.example.org/pypi/simple\n" in text
    assert "RUN chmod -R 0777 /workspace\n" in text
    assert text.rstrip().endswith('nemo.library="nemo-core"') and text.count("LABEL ") == 1
    data = yaml.safe_load(STACKS.read_text())
    data["projects"]["megatron-core-0.16"]["params"]["dataset_helpers"] = True
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "stacks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    spec = load_spec(tmp_path / "m" / "stacks.yaml")
    text = render_layer(spec, spec.stack("h100-megatron"), spec.layers["megatron-core-0.16"])
    assert " && make -C megatron/core/datasets \\\n && python -c 'import megatron.core" in text, text


def test_sources_list_written_whole_and_pip_config_at_a_level_as_recipes_write_them(tmp_path):
    """verl's and LLaMA-Factory's recipes keep sources.list as .bak and write four `deb` lines of their own, and
    verl runs `pip config set` with no level (root's own file) for the index and the extra index: each is a
    typed step that renders the recipe's commands, and another value is another Dockerfile (so another key)."""
    sources = {"url": "https://mirrors.example.org/ubuntu/", "suites": ["jammy", "jammy-security"],
               "components": ["main", "restricted"], "backup": True}
    conf = {"url": "https://mirrors.example.org/pypi/simple", "extra": ["https://mirrors.example.org/pypi/simple"],
            "level": "default"}

    def rendered(name, params):
        def recipe(d):
            d["layers"]["site"] = {"kind": "system-setup", "params": params}
            d["stacks"]["cpu-smoke"]["layers"].append("site")
        spec = load_spec(_site(tmp_path / name, recipe, lock=None))
        from builder.plan.render import render_layer
        return render_layer(spec, spec.stack("cpu-smoke"), spec.layers["site"])

    text = rendered("a", {"apt_mirror": sources, "pip_index": conf, "apt": ["zip"]})
    assert ("RUN { [ ! -f /etc/apt/sources.list ] || cp /etc/apt/sources.list /etc/apt/sources.list.bak; } \\\n"
            " && printf '%s\\n' 'deb https://mirrors.example.org/ubuntu/ jammy main restricted' "
            "'deb https://mirrors.example.org/ubuntu/ jammy-security main restricted' > /etc/apt/sources.list\n") in text
    assert ("RUN python3 -m pip config set global.index-url https://mirrors.example.org/pypi/simple \\\n"
            " && python3 -m pip config set global.extra-index-url https://mirrors.example.org/pypi/simple\n") in text
    assert text.index("sources.list.bak") < text.index("apt-get update")   # the mirror before the packages
    assert "sed -i" not in text   # the file is written whole, not rewritten in place
    plain = rendered("b", {"apt_mirror": {**sources, "backup": False}, "pip_index": {**conf, "level": "user"}})
    assert "sources.list.bak" not in plain and "RUN printf '%s\\n' 'deb https://mirrors" in plain
    assert "pip config --user set global.index-url" in plain
    # The string forms render as they did (the site's root mirror rewritten in place; /etc/pip.conf).
    old = rendered("c", {"apt_mirror": "https://mirrors.example.org/", "pip_index": conf["url"]})
    assert "sed -i -E" in old and "RUN python3 -m pip config --global set global.index-url " in old


NEMO = {"repo": "https://github.com/NVIDIA/NeMo.git", "commit": "0021db277ae20cd6b17ecb4f0e630d7fa26dd836"}
NEMO_TREE = {"source": NEMO, "paths": ["requirements", "tools", "setup.py", "nemo/package_info.py", "nemo/__init__.py"],
             "at": "/workspace", "install": True, "extras": ["all"],
             "requirements_files": ["tools/ctc_segmentation/requirements.txt"]}


def test_a_partial_tree_is_bound_for_its_pip_command_as_nemo_binds_it(tmp_path):
    """NeMo's Dockerfile.ci binds five paths of its checkout and runs `pip install ... -r tools/.../requirements.txt
    ".[all]"` there: the pip kind's `tree` renders those binds (from the exported source, read-only, nothing
    copied into a layer) and that command; its requirements file is intent (IB098 beside a lock file, refused
    without one), the commit is the pin, and other paths are another Dockerfile."""
    def recipe(tree):
        def mutate(d):
            d["layers"]["reqs"] = {"kind": "pip", "params": {"flags": ["no-build-isolation"], "tree": tree,
                                                             "packages": ["unstructured==0.14.9"]}}
            d["stacks"]["cpu-smoke"]["layers"].append("reqs")
        return mutate
    from builder.plan.render import render_layer
    f = _site(tmp_path / "a", recipe(NEMO_TREE))
    res = run_cli("check", "-f", f)
    assert res.code == 3 and "IB098" in res.output and "0021db277ae2:tools/ctc_segmentation/requirements.txt" in res.output
    res = run_cli("render", "stack=cpu-smoke", "-f", _site(tmp_path / "b", recipe(NEMO_TREE), lock=None))
    assert res.code == 2 and "IB098" in res.err and "tools/ctc_segmentation/requirements.txt" in res.err, res.output
    bare = {k: v for k, v in NEMO_TREE.items() if k != "requirements_files"}
    spec = load_spec(_site(tmp_path / "c", recipe(bare), lock=None))
    text = render_layer(spec, spec.stack("cpu-smoke"), spec.layers["reqs"])
    assert ("RUN --mount=type=bind,source=sources/tree/requirements,target=/workspace/requirements \\\n"
            "    --mount=type=bind,source=sources/tree/tools,target=/workspace/tools \\\n") in text
    assert "source=sources/tree/nemo/__init__.py,target=/workspace/nemo/__init__.py \\\n" in text
    assert ("cd /workspace && python -m pip install --progress-bar off --no-build-isolation unstructured==0.14.9 "
            "'.[all]'\n") in text
    assert "COPY" not in text.split("FROM", 1)[1]   # bound, never copied
    other = load_spec(_site(tmp_path / "d", recipe({**bare, "paths": ["setup.py", "nemo/__init__.py"]}), lock=None))
    assert render_layer(other, other.stack("cpu-smoke"), other.layers["reqs"]) != text


@pytest.mark.parametrize("tree, reason", [
    ({**NEMO_TREE, "paths": []}, "expected a non-empty list of paths"),
    ({**NEMO_TREE, "paths": ["../etc"]}, "is not a relative path"),
    ({**NEMO_TREE, "paths": ["nemo", "nemo/__init__.py"]}, "lies inside another bound path"),
    ({**NEMO_TREE, "at": "/usr"}, "is a system folder"),
    ({**NEMO_TREE, "at": "workspace"}, "is not an absolute path"),
    ({**NEMO_TREE, "requirements_files": ["requirements/requirements.txt"], "paths": ["setup.py"]},
     "is not under a bound path"),
    ({**NEMO_TREE, "install": False, "extras": [], "requirements_files": []}, "gives pip nothing"),
    ({**NEMO_TREE, "install": False}, "set install: true"),
    ({**NEMO_TREE, "source": {"repo": "https://github.com/NVIDIA/NeMo.git", "commit": "0021db2"}}, "commit"),
    ({k: v for k, v in NEMO_TREE.items() if k != "at"}, "expected a mapping with source"),
    ({**NEMO_TREE, "copy": True}, "expected a mapping with source"),
])
def test_bad_bound_trees_are_refused_with_their_key(tmp_path, tree, reason):
    def recipe(d):
        d["layers"]["reqs"] = {"kind": "pip", "params": {"tree": tree}}
        d["stacks"]["cpu-smoke"]["layers"].append("reqs")
    res = run_cli("check", "-f", _site(tmp_path, recipe, lock=None))
    assert res.code == 2 and reason in res.err and "layers.reqs.params.tree" in res.err, res.output


@pytest.mark.parametrize("params, reason", [
    ({"apt_mirror": {"url": "https://m.example.org/ubuntu/", "suites": [], "components": ["main"]}},
     "expected a non-empty list of suites"),
    ({"apt_mirror": {"url": "https://m.example.org/ubuntu/", "suites": ["jammy [trusted=yes]"], "components": ["main"]}},
     "is not an apt suite"),
    ({"apt_mirror": {"url": "https://m.example.org/ubuntu/", "suites": ["jammy"], "components": ["main", "main"]}},
     "a component is listed twice"),
    ({"apt_mirror": {"url": "http://m.example.org/ubuntu/", "suites": ["jammy"], "components": ["main"]}},
     "is not an index URL"),
    ({"apt_mirror": {"url": "https://m.example.org/ubuntu/", "suites": ["jammy"]}}, "a mapping with url"),
    ({"apt_mirror": {"url": "https://m.example.org/ubuntu/", "suites": ["jammy"], "components": ["main"],
                     "options": "trusted=yes"}}, "a mapping with url"),
    ({"pip_index": {"url": "https://m.example.org/simple", "level": "system"}}, "is not a pip configuration level"),
    ({"pip_index": {"url": "https://m.example.org/simple", "extra": ["http://m.example.org/simple"]}},
     "is not an index URL"),
    ({"pip_index": {"url": "https://m.example.org/simple", "extra": "https://m.example.org/simple"}},
     "expected a list of index URLs"),
    ({"pip_index": {"url": "https://m.example.org/simple", "trusted_host": "m.example.org"}}, "a mapping with url"),
    ({"labels": {"io.imgbuild.key": "x"}}, "are imgbuild's"),
    ({"labels": {"Bad Name": "x"}}, "is not a label name"),
    ({"modes": [{"path": "/usr", "mode": "0777", "recursive": True}]}, "is a system folder"),
    ({"modes": [{"path": "/workspace", "mode": "4755"}]}, "is not a mode imgbuild sets"),
    ({"apt_mirror": "http://mirrors.example.org/"}, "is not an index URL"),
    ({"apt_mirror": "https://mirrors.example.org/ubuntu/"}, "ends in the distribution's folder 'ubuntu'; give the mirror's root"),
    ({"pip_index": "https://user:tok@mirrors.example.org/simple"}, "credentials"),
])
def test_bad_mirrors_modes_and_labels_are_refused(tmp_path, params, reason):
    def recipe(d):
        d["layers"]["site"] = {"kind": "system-setup", "params": params}
        d["stacks"]["cpu-smoke"]["layers"].append("site")
    res = run_cli("check", "-f", _site(tmp_path, recipe, lock=None))
    assert res.code == 2 and reason in res.err and "layers.site.params" in res.err, res.output


def test_an_upgrade_of_a_name_no_lock_entry_holds_is_refused_before_any_engine(tmp_path):
    f = _locked_extra(tmp_path, [STEP])
    res = run_cli("lock", "python=extra", "--upgrade", "numpy", "-f", f)
    assert res.code == 2 and "--upgrade numpy: no lock entry of the layers locked here holds it" in res.err, res.output
    res = run_cli("lock", "--upgrade", "hjson", "-f", f)
    assert res.code == 2 and "name them (python=LAYER or stack=NAME)" in res.err, res.output


def test_a_layer_on_two_chains_has_an_entry_for_each(tmp_path):
    """A project on two stacks with other layers beneath it: pip resolves it on each chain, and the lock holds
    one entry per chain (a list under the layer's name); each stack builds from its own (the examples/cuda-pypi
    smoke project on its DeepSpeed and Megatron stacks had one entry, and the second stack was unlocked)."""
    def two(d):
        d["layers"]["extra"] = {"kind": "pip", "params": {"packages": ["hjson==3.1.0"]}}
        d["stacks"]["other"] = {**d["stacks"]["cpu-smoke"], "layers": d["stacks"]["cpu-smoke"]["layers"] + ["extra"]}
    f = _site(tmp_path, two)
    spec = load_spec(f)
    entries = []
    for stack, sha in (("cpu-smoke", "61"), ("other", "62")):
        entries.append({"stack": stack, "parent": "p", "definition": layer_definition(spec, spec.stack(stack), "smoke-train"),
                        "resolved": "2026-12-03T12:00:00Z", "steps": [[{"name": "smoke-train", "version": "1.0.0",
                                                                         "sha256": sha * 32, "url": "https://x/s.whl",
                                                                         "requested": True}]]})
    (tmp_path / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {}, "python": {"smoke-train": entries}}))
    plan = make_plan(load_spec(f), ["cpu-smoke", "other"], DIGEST)
    sets = {name: next(n for n in plan.chain(name) if n.name == "smoke-train").locked for name in ("cpu-smoke", "other")}
    assert "61" * 32 in sets["cpu-smoke"][0] and "62" * 32 in sets["other"][0]
    assert run_cli("lock", "--check", "-f", f).code == 0   # both entries current, each for its own chain
    (tmp_path / "stacks.lock.yaml").write_text(yaml.safe_dump({"version": 1, "bases": {}, "python": {"smoke-train": entries[0]}}))
    plan = make_plan(load_spec(f), ["cpu-smoke", "other"], DIGEST)
    assert next(n for n in plan.chain("other") if n.name == "smoke-train").locked == ()   # one entry: the other chain unlocked
