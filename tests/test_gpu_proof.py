"""GPU proof (issue 34, part 5): a stack that declares GPUs is released only where the GPU checks of its layer
images ran on one of its GPUs, unless the site waives that for the stack (site.ci.gpu_checks), and the waiver
shows wherever the release is read. No Docker: an in-memory registry and engine (test_build_run's), the probe's
measurement of the GPU scripted per run; `imgbuild ci` and `imgbuild diff` run for real on copies of the
shipped stacks.yaml.

The bug it keeps out: without GPU runners `imgbuild ci` wrote a pipeline anyway and its release job ran
without --require-gpu-checks, and promote took a GPU check recorded as skipped for proof, so fused Adam,
TE FP8 and Megatron checks were released never having run on a GPU."""

from __future__ import annotations

import json

import pytest
import yaml

import builder.ship.pipeline as build_mod
from builder.catalog import collect
from builder.catalog import page as catalog_page
from builder.errors import SpecError
from builder.load.spec import load_spec
from builder.plan.keys import make_plan
from builder.plan.layout import layer_repo, release_repo
from builder.ship import card as card_mod
from builder.ship import gpuproof
from builder.ship.checks import CheckResult
from builder.ship.hostconf import HostConf
from builder.ship.manifest import build_manifest, fetch_manifest
from builder.ship.pipeline import Builder
from builder.ship.publish import PublishError, promote
from conftest import REPO, shipped_data, write_stacks
from test_build_run import BASE, FakeEngine, MemRegistry, layer_of

REASON = "no H100 runner until 2026-09; fused Adam checked by hand on node h100-07"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
GPU_CHECK = "deepspeed.fused-adam-step"     # the GPU check of cpu-smoke's DeepSpeed layer


# -- naming the GPU that ran the checks ----------------------------------------------------------------------

@pytest.mark.parametrize("device, model", [
    (H100, "H100"), ("NVIDIA H100 PCIe", "H100"), ("NVIDIA H100 NVL", "H100"), ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", "GH200"), (A100, "A100"), ("NVIDIA A100 80GB PCIe", "A100"), ("A100-PCIE-40GB", "A100"),
    ("Tesla V100-SXM2-32GB", "V100"), ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA RTX A6000", "RTXA6000"), ("NVIDIA GeForce RTX 5090", "RTX5090"), ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"), ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", None), ("NVIDIA L40", None), ("", None), ("NVIDIA H100 / A100 mix", None)])
def test_a_device_name_maps_to_the_catalog_gpu(device, model):
    assert gpuproof.catalog_gpu(device) == model


def test_the_gpu_is_read_in_the_container_first_then_on_the_host():
    assert gpuproof.identify({"torch": {"device": H100}}, host=lambda: [A100]) == ("H100", H100)
    assert gpuproof.identify({"torch": {"error": "no torch"}}, host=lambda: [A100, A100]) == ("A100", A100)
    assert gpuproof.identify({}, host=lambda: []) == (None, None)
    # Two models on one machine: which one ran the checks is not known, so none is claimed.
    assert gpuproof.identify({}, host=lambda: [A100, H100]) == (None, f"{A100}; {H100}")


def test_the_manifest_records_the_gpu_model_only_where_a_gpu_ran_the_checks():
    spec = load_spec(REPO / "stacks.yaml")
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    node = plan.chain("cpu-smoke")[1]
    facts = {"torch": {"device": H100}}
    with_gpu = build_manifest(node, facts, [], "sha256:" + "1" * 64, {}, node.checks, gpu=True)
    assert (with_gpu["validated_with_gpu"], with_gpu["gpu_model"], with_gpu["gpu_name"]) == (True, "H100", H100)
    without = build_manifest(node, facts, [], "sha256:" + "1" * 64, {}, node.checks, gpu=False)
    assert (without["validated_with_gpu"], without["gpu_model"], without["gpu_name"]) == (False, None, None)


# -- promote, per stack ---------------------------------------------------------------------------------------

@pytest.fixture
def world(tmp_path, monkeypatch):
    """A registry, an engine, and builders with or without a GPU, the GPU's name as torch in the container
    says it (world.device)."""
    monkeypatch.setenv("IMGBUILD_HOME", str(tmp_path / "home"))
    reg = MemRegistry()
    engine = FakeEngine(reg)
    state = {"device": None}

    def run_checks(eng, image, checks, gpu, platform=None, emulated=None):
        eng.validated.append(layer_of(image))
        results = [CheckResult(c.id, "skipped", "skipped: needs a GPU (none on this machine)", True)
                   if c.gpu and not gpu else CheckResult(c.id, "passed", "ok", c.gpu) for c in checks]
        torch = {"version": "2.13.0+cpu"} | ({"device": state["device"]} if gpu else {})
        return results, {"dists": {"torch": "2.13.0+cpu", "deepspeed": "0.19.8"}, "python": "3.11.2", "torch": torch}

    monkeypatch.setattr(build_mod, "run_checks", run_checks)
    import builder.ship.sbom as sbom_mod
    monkeypatch.setattr(sbom_mod, "generate", lambda registry, repo, digest, timeout=0: json.dumps(
        {"bomFormat": "CycloneDX", "components": []}).encode())
    monkeypatch.setattr(build_mod, "assemble_context", lambda node, conf, dest: dest)
    conf = HostConf(ca_bundle=None, wheelhouse=None, netrc=None, pip_index_url=None)

    def builder(spec, device=None):
        state["device"] = device
        return Builder(spec, engine, reg, conf, say=lambda line: None, gpu=device is not None)

    return reg, engine, builder


def gpu_site(tmp_path, name: str, waive: dict | None = None, **more_stacks) -> object:
    """cpu-smoke for H100 nodes (its DeepSpeed layer has the GPU check fused-adam-step), beside it a stack of the
    same layers for A100 (CPU-only layers: the same content keys, one layer image for both)."""
    data = shipped_data()
    data["stacks"]["cpu-smoke"]["gpus"] = ["H100"]
    data["stacks"]["cpu-a100"] = dict(data["stacks"]["cpu-smoke"], gpus=["A100"])
    data["stacks"].update(more_stacks)
    if waive:
        data["site"]["ci"] = {"gpu_checks": {"waive": waive}}
    return load_spec(write_stacks(tmp_path / name, data), root=REPO)


def build(builder, spec, stacks=("cpu-smoke",), device=None):
    plan = make_plan(spec, list(stacks), BASE)
    return builder(spec, device).run(plan, list(stacks), date="2026.12.01"), plan


def tags_of(reg, spec, stack: str) -> list:
    return [t for t in reg.tags(release_repo(spec.site.namespace, stack)) if not t.startswith("sha256-")]


def test_a_gpu_stack_validated_without_a_gpu_is_not_released(world, tmp_path):
    reg, engine, builder = world
    spec = gpu_site(tmp_path, "no-gpu")
    with pytest.raises(PublishError) as exc:
        build(builder, spec)
    text = str(exc.value)
    # The stack, the layer, the check and the reason, and the two ways out.
    assert "cpu-smoke: ds-0.19.8-cpu (" in text and GPU_CHECK in text, text
    assert "never ran on a GPU" in text and "the stack targets H100" in text, text
    assert "site.ci.gpu_checks: {waive: {cpu-smoke: REASON}}" in text and "no tag was moved" in text, text
    assert reg.release_puts() == [] and tags_of(reg, spec, "cpu-smoke") == []
    # `imgbuild release` (no engine) reads the same registry and refuses the same.
    plan = make_plan(spec, ["cpu-smoke"], BASE)
    with pytest.raises(PublishError, match=GPU_CHECK):
        promote(spec, reg, plan, ["cpu-smoke"], "2026.12.01", lambda line: None)
    assert reg.release_puts() == []


def test_a_gpu_stack_validated_on_another_gpu_is_not_released(world, tmp_path):
    reg, engine, builder = world
    spec = gpu_site(tmp_path, "a100")
    with pytest.raises(PublishError) as exc:
        build(builder, spec, device=A100)
    assert f"{GPU_CHECK} ran on A100, not on one of the stack's GPUs (H100)" in str(exc.value), str(exc.value)
    assert reg.release_puts() == []


def test_a_gpu_stack_validated_on_its_gpu_is_released_and_the_proof_is_per_stack(world, tmp_path):
    reg, engine, builder = world
    spec = gpu_site(tmp_path, "h100")
    report, plan = build(builder, spec, device=H100)
    assert report.ok and set(report.tags["cpu-smoke"]) == {"cpu-smoke", "cpu-smoke-2026.12.01",
                                                            "cpu-smoke-torch2.13.0-cpu-ds0.19.8"}
    ds = plan.chain("cpu-smoke")[1]
    repo = layer_repo(spec.site.namespace, ds.name)
    recorded = fetch_manifest(reg, repo, reg.manifest_digest(repo, ds.short))
    assert (recorded["validated_with_gpu"], recorded["gpu_model"], recorded["gpu_name"]) == (True, "H100", H100)
    # The same layer images serve the A100 stack, whose proof that is not: refused, naming that stack.
    both = make_plan(spec, ["cpu-smoke", "cpu-a100"], BASE)
    assert both.stacks["cpu-a100"] == both.stacks["cpu-smoke"]
    before = len(reg.release_puts())
    with pytest.raises(PublishError) as exc:
        promote(spec, reg, both, ["cpu-a100"], "2026.12.01", lambda line: None)
    assert f"cpu-a100: ds-0.19.8-cpu ({ds.short[:12]}): GPU check {GPU_CHECK} ran on H100, not on one of the " \
           "stack's GPUs (A100)" in str(exc.value), str(exc.value)
    assert len(reg.release_puts()) == before
    # The card of the release says nothing is waived.
    digest = reg.manifest_digest(release_repo(spec.site.namespace, "cpu-smoke"), "cpu-smoke")
    assert card_mod.read(reg, release_repo(spec.site.namespace, "cpu-smoke"), digest)["gpu_checks_waived"] is None


def test_a_cpu_stack_with_gpu_checks_needs_no_gpu_proof(world, tmp_path):
    """cpu-smoke as shipped (no gpus): its fused-adam-step check stays skipped, and it is released."""
    reg, engine, builder = world
    spec = load_spec(write_stacks(tmp_path / "cpu", shipped_data()), root=REPO)
    report, _ = build(builder, spec)
    assert report.ok and report.tags["cpu-smoke"]


def test_a_waived_stack_is_released_without_a_gpu_and_says_so_on_its_card_and_in_the_catalog(world, tmp_path):
    reg, engine, builder = world
    spec = gpu_site(tmp_path, "waived", waive={"cpu-smoke": REASON})
    report, plan = build(builder, spec)
    assert report.ok and report.tags["cpu-smoke"]
    ds = plan.chain("cpu-smoke")[1]
    repo = layer_repo(spec.site.namespace, ds.name)
    recorded = fetch_manifest(reg, repo, reg.manifest_digest(repo, ds.short))
    assert recorded["validated_with_gpu"] is False and recorded["gpu_model"] is None
    released = release_repo(spec.site.namespace, "cpu-smoke")
    card = card_mod.read(reg, released, reg.manifest_digest(released, "cpu-smoke"))
    assert card["gpu_checks_waived"] == REASON and card["gpus"] == ["H100"]
    # The waiver is the stack's, not the layer image's: the A100 stack on the same images is still refused.
    with pytest.raises(PublishError, match="cpu-a100: ds-0.19.8-cpu .*never ran on a GPU"):
        promote(spec, reg, make_plan(spec, ["cpu-a100"], BASE), ["cpu-a100"], "2026.12.01", lambda line: None)
    # The catalog, read from the registry alone: the JSON and the page.
    data = collect(reg, spec.site.namespace)["data"]
    release = next(s for s in data["stacks"] if s["name"] == "cpu-smoke")["releases"][0]
    assert release["gpu_checks_waived"] == REASON
    assert release["platforms"][0]["checks"]["validated_with_gpu"] is False
    html = catalog_page.page(data, {})
    assert f"GPU checks waived: {REASON}" in html and "(GPU checks waived)" in html


def test_the_catalog_names_the_gpu_that_ran_the_checks(world, tmp_path):
    reg, engine, builder = world
    spec = gpu_site(tmp_path, "catalog-h100")
    report, _ = build(builder, spec, device=H100)
    assert report.ok
    data = collect(reg, spec.site.namespace)["data"]
    release = data["stacks"][0]["releases"][0]
    assert release["gpu_checks_waived"] is None
    html = catalog_page.page(data, {})
    assert "GPU checks waived" not in html
    top = release["platforms"][0]["checks"]
    assert top["validated_with_gpu"] is True and top["gpu_model"] == "H100"


def recorded_proof(**over) -> dict:
    doc = {"validated_with_gpu": True, "gpu_model": "H100", "gpu_name": H100,
           "checks": [{"id": GPU_CHECK, "status": "passed", "detail": "ok", "gpu": True}]}
    doc.update(over)
    return doc


def test_unproven_reads_the_proof_itself(tmp_path):
    spec = gpu_site(tmp_path, "unit")
    plan = make_plan(spec, ["cpu-smoke", "cpu-a100"], BASE)
    ds, torch = plan.chain("cpu-smoke")[1], plan.chain("cpu-smoke")[0]
    assert gpuproof.unproven(spec, "cpu-smoke", ds, recorded_proof()) is None
    assert gpuproof.unproven(spec, "cpu-smoke", torch, recorded_proof(validated_with_gpu=False)) is None  # no GPU check
    assert "ran on H100, not on one of the stack's GPUs (A100)" in gpuproof.unproven(spec, "cpu-a100", ds, recorded_proof())
    assert "never ran on a GPU" in gpuproof.unproven(spec, "cpu-smoke", ds, recorded_proof(validated_with_gpu=False))
    # On a GPU machine but under emulation, the check was still skipped for want of a GPU: no proof.
    emulated = [{"id": GPU_CHECK, "status": "skipped", "gpu": True,
                 "detail": "skipped: needs a GPU, and this image runs under QEMU emulation (linux/arm64)"}]
    assert "never ran on a GPU" in gpuproof.unproven(spec, "cpu-smoke", ds, recorded_proof(checks=emulated))
    # A proof written before imgbuild named the GPU, or on a GPU the catalog does not know.
    assert "could not name (none recorded)" in gpuproof.unproven(spec, "cpu-smoke", ds,
                                                                 recorded_proof(gpu_model=None, gpu_name=None))
    assert "could not name (NVIDIA A10G)" in gpuproof.unproven(spec, "cpu-smoke", ds,
                                                               recorded_proof(gpu_model=None, gpu_name="NVIDIA A10G"))
    # Skipped on a GPU machine because its condition does not hold (an op not prebuilt): the GPU was there.
    off = [{"id": GPU_CHECK, "status": "skipped", "detail": "skipped: fused_adam is not prebuilt", "gpu": True}]
    assert gpuproof.unproven(spec, "cpu-smoke", ds, recorded_proof(checks=off)) is None


# -- site.ci.gpu_checks ---------------------------------------------------------------------------------------

def stacks_text(ci: str) -> str:
    text = (REPO / "stacks.yaml").read_text()
    return text.replace("site:\n", "site:\n  ci:\n    gpu_checks: " + ci + "\n", 1)


@pytest.mark.parametrize("ci, key, reason", [
    ("waive all", "site.ci.gpu_checks", "expected a mapping with waive, got a string"),
    ("{waive: 'no GPU runners'}", "site.ci.gpu_checks.waive",
     "expected a mapping of stack name to the reason its GPU checks are waived, got a string"),
    ("{waive: {h100-megatorn: no runner}}", "site.ci.gpu_checks.waive.h100-megatorn", "unknown stack 'h100-megatorn'"),
    ("{waive: {H100-megatron: no runner}}", "site.ci.gpu_checks.waive.H100-megatron",
     "unknown stack 'H100-megatron' (did you mean 'h100-megatron'?)"),
    ("{waive: {h100-megatron: ''}}", "site.ci.gpu_checks.waive.h100-megatron", "a waiver needs its reason"),
    ("{waive: {h100-megatron: }}", "site.ci.gpu_checks.waive.h100-megatron", "a waiver needs its reason"),
    ("{waive: {h100-megatron: '   '}}", "site.ci.gpu_checks.waive.h100-megatron", "a waiver needs its reason"),
    ("{waive: {h100-megatron: [a, b]}}", "site.ci.gpu_checks.waive.h100-megatron", "expected the reason as text"),
    ("{waive: {h100-megatron: \"a\\u2028b: x\"}}", "site.ci.gpu_checks.waive.h100-megatron",
     "control or format characters"),
    ("{waive: {h100-megatron: " + "x" * 201 + "}}", "site.ci.gpu_checks.waive.h100-megatron",
     "the reason is 201 characters; at most 200"),
    ("{waive: {}}", "site.ci.gpu_checks.waive", "waives no stack: it is empty"),
    ("{}", "site.ci.gpu_checks", "missing key 'waive'"),
    ("{waiver: {h100-megatron: x}}", "site.ci.gpu_checks.waiver", "unknown key 'waiver'"),
])
def test_bad_gpu_checks_are_refused_with_file_line_and_key(tmp_path, cli, ci, key, reason):
    file = write_stacks(tmp_path / "s", stacks_text(ci))
    with pytest.raises(SpecError) as exc:
        load_spec(file)
    assert exc.value.key == key and reason in exc.value.reason and exc.value.line == 8, (exc.value.key, str(exc.value))
    res = cli("ci", "gitlab", "--all", "--offline", "-f", str(file))
    assert res.code == 2 and f"{file}:8: {key}: " in res.err, res.err


def test_a_waiver_is_read_per_stack(tmp_path):
    spec = load_spec(write_stacks(tmp_path / "s", stacks_text("{waive: {h100-megatron: '" + REASON + "'}}")))
    assert spec.site.ci.gpu_waiver("h100-megatron") == REASON
    assert spec.site.ci.gpu_waiver("h100-megatron-next") is None     # extends it, yet is not waived by its line


# -- imgbuild ci ----------------------------------------------------------------------------------------------

def ci_site(tmp_path, ci: dict | None, sub: str = "s"):
    data = shipped_data()
    data["site"].pop("ci", None)
    if ci is not None:
        data["site"]["ci"] = ci
    return write_stacks(tmp_path / sub, data)


def releases(system: str, text: str) -> dict:
    doc = yaml.safe_load(text)
    jobs = doc if system == "gitlab" else doc["jobs"]
    return {k[len("release-"):]: (v["script"][0] if system == "gitlab" else v["steps"][1]["run"]).split()
            for k, v in jobs.items() if k.startswith("release-")}


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_ci_refuses_a_pipeline_releasing_gpu_stacks_unproven(cli, tmp_path, system):
    key = "gpu_runner_tags" if system == "gitlab" else "github_gpu_runs_on"
    file = ci_site(tmp_path, {"runner_tags": ["docker"]})
    res = cli("ci", system, "--all", "--offline", "-f", str(file))
    assert res.code == 2 and res.out == "", res.output
    assert f"{file}: site.ci.{key}: stacks 'h100-megatron' (H100), 'h100-megatron-next' (H100), 'a100-deepspeed' " \
           f"(A100) have GPU checks, and site.ci.{key} is not declared" in res.err, res.err
    assert "site.ci.gpu_checks: {waive: {h100-megatron: REASON, h100-megatron-next: REASON, a100-deepspeed: REASON}}" \
        in res.err, res.err
    # A CPU stack alone is written as before.
    assert cli("ci", system, "stack=cpu-smoke", "--offline", "-f", str(file)).code == 0
    # Runners for H100 only: the A100 stack is refused, naming the runners offered and the waiver.
    file = ci_site(tmp_path, {key: {"H100": ["gpu", "h100"]}}, "h100")
    res = cli("ci", system, "--all", "--offline", "-f", str(file))
    assert res.code == 2 and "stack 'a100-deepspeed' targets A100, and no" in res.err, res.err
    assert "site.ci.gpu_checks: {waive: {a100-deepspeed: REASON}}" in res.err


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_ci_writes_a_waived_stack_without_gpu_proof_and_says_why(cli, tmp_path, system):
    key = "gpu_runner_tags" if system == "gitlab" else "github_gpu_runs_on"
    waive = {"a100-deepspeed": "A100 partition retired; images kept for old jobs"}
    # No GPU runner at all: every GPU stack waived.
    every = {"h100-megatron": REASON, "h100-megatron-next": REASON, **waive}
    res = cli("ci", system, "--all", "--offline", "-f", str(ci_site(tmp_path, {"gpu_checks": {"waive": every}})))
    assert res.code == 0, res.output
    for stack, argv in releases(system, res.out).items():
        assert "--require-gpu-checks" not in argv, (stack, argv)
    for stack, why in every.items():
        assert f"# imgbuild: stack {stack}: GPU checks waived (site.ci.gpu_checks): {why}; released with them skipped" \
            in res.out
        assert f"note: stack {stack} is released with its GPU checks waived (site.ci.gpu_checks: {why}); no GPU " \
               "job runs them" in res.err, res.err
    # H100 runners, the A100 stack waived: the H100 stacks keep their GPU jobs and --require-gpu-checks, the
    # waived one alone goes without.
    file = ci_site(tmp_path, {key: {"H100": ["gpu", "h100"]}, "gpu_checks": {"waive": waive}}, "mixed")
    res = cli("ci", system, "--all", "--offline", "-f", str(file))
    assert res.code == 0, res.output
    argv = releases(system, res.out)
    assert "--require-gpu-checks" in argv["h100-megatron"] and "--require-gpu-checks" in argv["h100-megatron-next"]
    assert "--require-gpu-checks" not in argv["a100-deepspeed"] and "--require-gpu-checks" not in argv["cpu-smoke"]
    assert "# imgbuild: stack a100-deepspeed: GPU checks waived" in res.out
    assert "# imgbuild: stack h100-megatron:" not in res.out
    # A waived stack that has a GPU runner keeps its GPU jobs, and its release keeps requiring them.
    file = ci_site(tmp_path, {key: {"H100": ["gpu", "h100"]}, "gpu_checks": {"waive": {"h100-megatron": REASON}}}, "h")
    res = cli("ci", system, "stack=h100-megatron", "--offline", "-f", str(file))
    assert res.code == 0 and "--require-gpu-checks" in releases(system, res.out)["h100-megatron"], res.output
    assert "its GPU jobs still run them, and its release requires them" in res.err


# -- imgbuild diff --------------------------------------------------------------------------------------------

def test_diff_reports_a_waiver_added_changed_and_removed(tmp_path):
    from builder.diff.specdiff import diff_revisions
    from test_specdiff import commit, edit, site_repo
    root = site_repo(tmp_path / "site", "base")

    def ci(waive):
        def change(d):
            d["site"]["ci"] = {"gpu_checks": {"waive": waive}} if waive else {}
        return change
    steps = [("added", {"h100-megatron": "no runner"}), ("changed", {"h100-megatron": "still no runner"}),
             ("removed", None)]
    for tag, waive in steps:
        edit(root, ci(waive))
        commit(root, tag)
    notes = {}
    for old, new in (("base", "added"), ("added", "changed"), ("changed", "removed")):
        d = diff_revisions(root / "stacks.yaml", old, new, offline=True)
        stack = next(s for s in d.stacks if s.name == "h100-megatron")
        assert stack.status == "changed" and stack.tag_action == "none"
        assert all(n.change == "unchanged" for n in stack.nodes)    # no image changes, no tag moves
        assert all(s.status == "unchanged" for s in d.stacks if s.name != "h100-megatron")
        notes[new] = list(stack.notes)
    assert notes["added"] == ["GPU checks waived (site.ci.gpu_checks): no runner (released with its GPU checks "
                              "skipped where no GPU of its ran them)"]
    assert notes["changed"] == ["GPU checks waiver changed (site.ci.gpu_checks): no runner -> still no runner "
                                "(released with its GPU checks skipped where no GPU of its ran them)"]
    assert notes["removed"] == ["GPU checks no longer waived (site.ci.gpu_checks; was: still no runner): released "
                                "only where its GPU checks ran on one of its GPUs"]
