"""`imgbuild catalog` (issue 23) from the real registry, opened in a real browser: Debian's chromium, headless,
driven through chromium-driver by Selenium.

The namespace is the session's: cpu-smoke released by the first build (and whatever the tests before this
one released), plus a tiny stack (tests/tiny.py, issue 33) released here twice, so that a stack has a
previous release to compare with: catalog-mini, the mirrored Debian base, the tests' `tiny-env` layer with
no packages (no index needed) and a runtime layer whose one variable names the revision, for H100s. What
the page asserts of it (its digest, the versions its measured manifest holds, the H100 facet, the changes
since its previous release with the changed variable, the run commands) reads no framework, so a stack
built in seconds proves it as the one on cpu-smoke's 1.7 GB torch layer did. cpu-smoke stays for what only
a real framework stack can show: its DeepSpeed version on the page and the framework filter (the
catalog's frameworks are the torch/DeepSpeed versions an image's measured manifest holds, which a tiny
stack has none of); it costs nothing here, as the session's first build releases it for the other tests.
The page must show every stack the registry holds releases of, with the digest and versions the
registry holds, filter them, log no console error, resolve every link, fit a narrow window, and hold none
of the secrets the builds were given. The JSON is validated against the shipped schema by another tool
(check-jsonschema) than the one imgbuild uses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder.ship.registry import Registry

from e2e import NEEDLES, NS, REGISTRY, ROOT, imgbuild
import tiny

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def small(work: Path, rev: str) -> Path:
    """The tiny stack catalog-mini of revision rev in the session's namespace (CATALOG_REV=rev), for H100s."""
    path = tiny.site(work, f"catalog-{rev}", NS, packages=[])
    data = yaml.safe_load(path.read_text())
    data["runtimes"] = {"catalog-env": {"kind": "runtime-env", "params": {"env": {"CATALOG_REV": rev}}}}
    data["stacks"] = {"catalog-mini": {"base": "debian-bookworm", "layers": ["demo"], "runtime": "catalog-env",
                                       "gpus": ["H100"], "tags": ["{stack}", "{stack}-{date}"],
                                       "description": "python on Debian, for the catalog's test"}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def site(work, first, tmp_path_factory) -> Path:
    """catalog-mini released twice, then the catalog of the namespace (cpu-smoke from the first build)."""
    for rev, date in (("1", "2026.12.01"), ("2", "2026.12.02")):
        path = small(work, rev)
        proc = imgbuild(work, "build", "stack=catalog-mini", "-f", str(path), "--date", date, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path_factory.mktemp("catalog") / "site"
    proc = imgbuild(work, "catalog", "--registry", REGISTRY, "--namespace", NS, "-o", str(out), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def browser():
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
        pytest.fail("no chromium/chromium-driver: scripts/setup-test-host.sh installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_window_size(1280, 900)
    yield driver
    driver.quit()


def released_stacks() -> dict:
    """stack -> the digest its shortest tag names, read from the registry without imgbuild's catalog code."""
    reg = Registry(REGISTRY)
    out = {}
    for repo in reg.repositories(NS + "/"):
        rest = repo[len(NS) + 1:]
        if "/" in rest or rest == "imgbuild-leases":
            continue
        tags = [t for t in reg.tags(repo) if not t.startswith(("sha256-", "imgbuild-release-"))]
        if tags:
            out[rest] = reg.manifest_digest(repo, min(tags, key=len))
    return out


def test_the_page_shows_every_released_stack_with_its_digest_and_versions(site, browser):
    browser.get(site.joinpath("index.html").as_uri())
    expect = released_stacks()
    assert {"cpu-smoke", "catalog-mini"} <= set(expect)
    shown = {a.get_attribute("data-stack"): a for a in browser.find_elements("css selector", "article[data-stack]")}
    assert set(shown) == set(expect)
    data = json.loads(site.joinpath("catalog.json").read_text())
    for name, digest in expect.items():
        assert digest in shown[name].text, name
        release = next(s for s in data["stacks"] if s["name"] == name)["releases"][0]
        for key, value in release["platforms"][0]["versions"].items():
            assert value in shown[name].text, (name, key)
    smoke = shown["cpu-smoke"].text
    assert "deepspeed 0.19.8" in smoke.lower().replace("\n", " ") or "0.19.8" in smoke
    mini = shown["catalog-mini"].text
    assert "H100" in mini and "Changes since the previous release" in mini and "env: 1 change(s)" in mini
    assert "CATALOG_REV" in browser.page_source   # the changed variable, in the fold of the env section
    assert "docker run" in mini and "enroot import" in mini and "srun --container-image" in mini


def test_the_filter_finds_stacks_by_gpu_framework_and_text(site, browser):
    from selenium.webdriver.support.ui import Select
    browser.get(site.joinpath("index.html").as_uri())
    total = len(browser.find_elements("css selector", "article[data-stack]"))

    def visible() -> set:
        return {a.get_attribute("data-stack") for a in browser.find_elements("css selector", "article[data-stack]")
                if a.is_displayed()}
    Select(browser.find_element("id", "gpu")).select_by_value("h100")
    assert "catalog-mini" in visible() and "cpu-smoke" not in visible()
    Select(browser.find_element("id", "gpu")).select_by_value("")
    Select(browser.find_element("id", "fw")).select_by_value("deepspeed")
    assert "cpu-smoke" in visible() and "catalog-mini" not in visible()
    Select(browser.find_element("id", "fw")).select_by_value("")
    box = browser.find_element("id", "q")
    box.send_keys("catalog-mini h100")
    assert visible() == {"catalog-mini"}
    assert browser.find_element("id", "count").text == f"1 of {total} stacks"
    box.clear()
    box.send_keys("no-such-stack-anywhere")
    assert visible() == set() and browser.find_element("id", "none").is_displayed()


def test_no_console_error_every_link_resolves_and_a_narrow_window_does_not_overflow(site, browser):
    browser.get(site.joinpath("index.html").as_uri())
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []
    links = [a.get_attribute("href") for a in browser.find_elements("css selector", "a[href]")]
    assert links
    for link in links:
        if "#" in link:
            anchor = link.split("#", 1)[1]
            assert browser.find_elements("id", anchor), link
        else:
            assert link.startswith("file://") and Path(link[len("file://"):]).is_file(), link
    browser.set_window_size(360, 800)
    try:
        for a in browser.find_elements("css selector", "details"):
            browser.execute_script("arguments[0].open = true", a)
        width, client = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width <= client, (width, client)
        browser.save_screenshot(str(site.parent / "catalog-narrow.png"))
    finally:
        browser.set_window_size(1280, 900)
    browser.save_screenshot(str(site.parent / "catalog.png"))


def test_each_batch_script_carries_the_worker_and_no_path_of_this_machine(site):
    """Issue 38: the page's batch scripts are node-check's, the worker inside them (they run from any node)."""
    from builder.nodecheck import WORKER
    scripts = sorted((site / "sbatch").glob("*.sbatch"))
    assert scripts and not (site / "imgbuild-node-check-worker.py").exists()
    for path in scripts:
        text = path.read_text()
        assert WORKER.read_text().rstrip("\n") in text and str(site) not in text and "/work/" not in text, path


def test_the_json_validates_against_the_shipped_schema_and_no_secret_is_in_the_site(site):
    tool = shutil.which("check-jsonschema") or str(Path(sys.executable).with_name("check-jsonschema"))
    proc = subprocess.run([tool, "--schemafile", str(ROOT / "builder" / "catalog" / "catalog.schema.json"),
                           str(site / "catalog.json")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for path in site.rglob("*"):
        if path.is_file():
            body = path.read_bytes()
            assert not [n for n in NEEDLES if n in body], path
