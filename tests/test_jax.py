"""JAX (issue 24) without an engine: the kinds and base families, jaxlib's CUDA builds as pip names them,
preflight's refusals of impossible JAX stacks from examples/jax with the rule and its source (and the good
twin of each), lint's knowledge of jax[cudaNN] extras, the in-image checks' code, and the node check's
JAX launch under Slurm and Kubernetes. tests/test_docker_jax.py builds the CPU stack for real."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder.load.kinds import JAX_TESTS
from builder.load.spec import load_spec
from builder.nodecheck import JAX_WORKER, framework_of, worker_argv
from builder.nodecheck import k8s, sbatch
from builder.rules.facts import jax_cuda_of, resolve
from builder.rules.lint import lint_dockerfile
from builder.ship.checks import jaxcheck, request
from conftest import REPO, copy_kinds, run_cli, write_stacks

EXAMPLE = REPO / "examples" / "jax" / "stacks.yaml"
IMAGE = "127.0.0.1:5000/imgbuild/jax-cpu@sha256:" + "b" * 64


def example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


# -- the example file: one stack per framework's route ---------------------------------------------------

def test_the_jax_examples_pass_check_strict():
    res = run_cli("check", "--all", "--strict", "-f", str(EXAMPLE))
    assert res.code == 0, res.output
    assert "3 stack(s)" in res.output and "0 error(s), 0 warning(s)" in res.output


def test_the_jax_examples_plan_with_their_version_tags():
    res = run_cli("plan", "--all", "-f", str(EXAMPLE))
    assert res.code == 0, res.output
    spec = load_spec(EXAMPLE)
    facts = resolve(spec, spec.stack("h100-jax-cuda12"))
    assert str(facts.version("jax")) == "0.10.2" and str(facts.version("jax_cuda")) == "12"
    assert str(facts.version("cuda")) == "12.9.1"   # from the image's tag
    ngc = resolve(spec, spec.stack("h100-jax-ngc"))
    assert str(ngc.version("cuda")) == "13.3.0" and ngc.get("cuda").origin == "catalog"
    assert str(ngc.version("jax_cuda")) == "13.3.0"   # NGC builds jaxlib with the container's CUDA


# Each impossible stack is a one-line change of the example; its twin is the example as shipped.
IMPOSSIBLE = [
    ("the plugin's CUDA major unlike the base's", "IB085",
     lambda d: d["bases"]["cuda-12.9"].update(image="docker.io/nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04"),
     r"jaxlib's CUDA plugin is built for CUDA 12 and runs on the base's libraries \(-local\), but base cuda-12\.9 "
     r"has CUDA 13\.0\.1", "METADATA"),
    ("a cuDNN below jaxlib's minimum", "IB086",
     lambda d: d["bases"]["cuda-12.9"]["provides"].update(cudnn="9.1.0"),
     r"jax 0\.10\.2's CUDA 12 plugin needs cuDNN 9\.8 or newer; the stack has 9\.1\.0", "METADATA"),
    ("a driver floor below the base's CUDA", "IB001",
     lambda d: d["site"].update(driver_floor="535.104.05"),
     r"driver floor 535\.104\.05 cannot run base ngc-jax-26\.06: CUDA 13\.3\.0 needs .*R580",
     "minor-version-compatibility"),
]


@pytest.mark.parametrize("what,rule,change,message,source", IMPOSSIBLE, ids=[c[0] for c in IMPOSSIBLE])
def test_preflight_refuses_an_impossible_jax_stack_and_its_twin_passes(tmp_path, what, rule, change, message, source):
    data = example()
    change(data)
    bad = write_stacks(tmp_path / "bad", data)
    for _ in range(2):   # the failing case, more than once
        res = run_cli("check", "--all", "-f", str(bad))
        assert res.code == 3, res.output
        hit = [block for block in res.output.split("\nerror ") if f"{rule} [" in block and re.search(message, block)]
        assert hit, res.output
        assert re.search(source, hit[0]), hit[0]   # the rule's source is named
    twin = run_cli("check", "--all", "--strict", "-f", str(EXAMPLE))
    assert twin.code == 0, twin.output


def test_build_refuses_an_impossible_jax_stack_before_any_engine_work(tmp_path):
    data = example()
    data["layers"]["jax-0.10-cuda12-local"]["params"]["packages"] = ["jax[cuda13-local]==0.6.2"]
    data["layers"]["jax-0.10-cuda12-local"]["params"]["cuda"] = "13"
    data["bases"]["cuda-12.9"]["image"] = "docker.io/nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04"
    res = run_cli("build", "stack=h100-jax-cuda12", "-f", str(write_stacks(tmp_path, data)), "--docker",
                  "unix:///nonexistent.sock")
    assert res.code == 3, res.output
    assert "IB085" in res.output and "jax 0.6.2 has no CUDA 13 plugin on PyPI (it has CUDA 12)" in res.output


# -- kinds and families --------------------------------------------------------------------------------

def test_a_jax_kind_adopts_debian_and_cuda_bases_but_not_an_ngc_pytorch_one(tmp_path):
    data = example()
    data["bases"]["pt"] = {"image": "nvcr.io/nvidia/pytorch:25.09-py3", "family": "ngc-pytorch"}
    data["stacks"]["jax-cpu"]["base"] = "pt"
    res = run_cli("check", "--all", "-f", str(write_stacks(tmp_path, data)))
    assert res.code != 0 and "adopts debian or cuda bases but base 'pt' is a 'ngc-pytorch' image" in res.output


@pytest.mark.parametrize("old,new,message", [
    ("base_family: [debian, cuda]", "base_family: [debian, tpu]", "'tpu' is not a base family"),
    ("{test: pmap-allreduce,", "{test: pmap-allreduse,", "'pmap-allreduse' is not a JAX test"),
], ids=["unknown-base-family", "unknown-jax-test"])
def test_a_jax_kind_with_a_bad_value_is_refused_at_load(tmp_path, old, new, message):
    folder = copy_kinds(tmp_path / "site")
    kind = folder / "layers" / "jax" / "kind.yaml"
    assert old in kind.read_text()
    kind.write_text(kind.read_text().replace(old, new))
    write_stacks(folder, example())
    res = run_cli("check", "--all", "-f", str(folder / "stacks.yaml"))
    assert res.code != 0 and "layers/jax/kind.yaml" in res.output and message in res.output, res.output


# -- jaxlib's CUDA builds as pip names them --------------------------------------------------------------

@pytest.mark.parametrize("text,want", [
    ("jax[cuda12]==0.10.2", [(12, False, "cuda12")]),
    ("jax[cuda13]==0.10.2", [(13, False, "cuda13")]),
    ("jax[cuda12-local]==0.10.2", [(12, True, "cuda12-local")]),
    ("jax[cuda12_local]==0.4.30", [(12, True, "cuda12_local")]),
    ("jax[cuda12_pip]==0.4.30", [(12, False, "cuda12_pip")]),
    ("jax[cuda]==0.10.2", [(12, False, "cuda")]),          # plain [cuda] is the CUDA 12 plugin in every release
    ("jax[k8s,cuda13]==0.10.2", [(13, False, "cuda13")]),
    ("jax[cuda13,cuda12]==0.10.2", [(12, False, "cuda12"), (13, False, "cuda13")]),   # both read: IB085 refuses
    ("jax-cuda13-plugin[with-cuda]==0.10.2", [(13, False, "")]),
    ("jax-cuda12-plugin==0.10.2", [(12, True, "")]),       # no with-cuda: the base's CUDA
    ("jax-cuda12-pjrt==0.10.2", [(12, True, "")]),         # the PJRT package alone brings no CUDA wheels
    ("jaxlib==0.4.26+cuda12.cudnn89", [(12, False, "")]),
    ("jax==0.10.2", []), ("jaxlib==0.10.2", []), ("jax[tpu]==0.10.2", []), ("torch==2.11.0", []),
    ("cupy-cuda12x==13.3.0", []),
])
def test_jax_cuda_builds_are_read_from_extras_and_names(text, want):
    assert jax_cuda_of(text) == want


# -- lint: jax[cudaNN] extras against the base's CUDA ----------------------------------------------------

def _rules(text: str) -> list[tuple[str, str, str]]:
    return [(f.rule, f.severity, f.message) for f in lint_dockerfile(text, "Dockerfile")]


@pytest.mark.parametrize("req,severity", [
    # with its own CUDA 12 wheels it runs beside the base's CUDA 13 (a warning); on the base's libraries it cannot
    ('"jax[cuda12]==0.10.2"', "warning"), ('"jax[cuda]==0.10.2"', "warning"), ("jax-cuda12-plugin==0.10.2", "error"),
    ('"jax[cuda12-local]==0.10.2"', "error"), ('"jax[cuda13]==0.10.2"', None), ('"jax[cuda13-local]==0.10.2"', None),
    ("jax==0.10.2", None),
])
def test_lint_knows_jax_extras_and_their_cuda_major(req, severity):
    text = f"FROM nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04@sha256:{'c' * 64}\nRUN pip install {req}\n"
    found = [r for r in _rules(text) if r[0] == "IB108"]
    if severity is None:
        assert not found, found
    else:
        assert found and found[0][1] == severity and "CUDA 12 build" in found[0][2] and "13.0.1" in found[0][2], found


def test_lint_of_jax_extras_on_a_base_without_a_known_cuda():
    head = f"FROM debian:bookworm@sha256:{'d' * 64}\n"
    assert not [r for r in _rules(head + 'RUN pip install "jax[cuda12]==0.10.2"\n') if r[0] == "IB108"]  # brings its own
    local = [r for r in _rules(head + 'RUN pip install "jax[cuda12-local]==0.10.2"\n') if r[0] == "IB108"]
    assert local and local[0][1] == "unknown" and "uses the base's CUDA 12" in local[0][2]


def test_the_rendered_jax_layer_on_a_cuda13_base_is_linted_as_an_error(tmp_path):
    data = example()
    data["bases"]["cuda-12.9"]["image"] = "docker.io/nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04"
    res = run_cli("check", "--all", "-f", str(write_stacks(tmp_path, data)))   # preflight and lint of the rendering
    lint = [b for b in res.output.split("\nerror ") if b.startswith("IB108")]
    assert res.code == 3 and lint and "rendered Dockerfile line" in lint[0], res.output
    assert "'jax[cuda12-local]==0.10.2' is JAX's CUDA 12 build; the base has CUDA 13.0.1" in lint[0], lint[0]


# -- the in-image checks ---------------------------------------------------------------------------------

def test_every_jax_test_has_code_that_compiles_with_its_arguments():
    for test in JAX_TESTS:
        code = jaxcheck.code(test, {"devices": 4, "cuda": "12", "cudnn": "9.8", "nccl": "2.27.7",
                                    "jax": "0.10.2", "jaxlib": "0.10.2"})
        compile(code, test, "exec")
    cpu = jaxcheck.code("pmap-allreduce", {"devices": 3})
    # XLA_FLAGS is set before jax is imported, or the host devices would not be forced
    assert cpu.index("--xla_force_host_platform_device_count=3") < cpu.index("import jax")
    assert 'JAX_PLATFORMS"] = "cpu"' in cpu


def test_the_jax_cpu_layer_asks_the_probe_for_its_checks_and_skips_the_cuda_ones():
    from builder.plan.keys import _resolve_args
    spec = load_spec(EXAMPLE)
    stack = spec.stack("jax-cpu")
    layer = stack.chain[0]
    specs = tuple(_resolve_args(c, layer, stack) for c in layer.kind.checks)
    req = request(specs, gpu=False)
    assert set(req["snippets"]) == {"jax.versions", "jax.host-devices", "jax.pmap-allreduce", "jax.jit-matmul"}
    assert "device_count=4" in req["snippets"]["jax.pmap-allreduce"]
    gpu = request(specs, gpu=True)
    assert "jax.gpu-allreduce" not in gpu["snippets"]   # `when: cuda`: the CPU build has no GPU check to run
    cuda = spec.stack("h100-jax-cuda12")
    cspecs = tuple(_resolve_args(c, cuda.chain[0], cuda) for c in cuda.chain[0].kind.checks)
    assert {"jax.cuda-plugin", "jax.gpu-allreduce"} <= set(request(cspecs, gpu=True)["snippets"])
    assert "jax.gpu-allreduce" not in request(cspecs, gpu=False)["snippets"]


# -- the node check's JAX launch ---------------------------------------------------------------------------

def test_a_jax_stack_takes_the_jax_worker():
    spec = load_spec(EXAMPLE)
    assert framework_of(spec.stack("jax-cpu")) == "jax" and framework_of(spec.stack("h100-jax-ngc")) == "jax"
    assert framework_of(load_spec(REPO / "stacks.yaml").stack("cpu-smoke")) == "torch"
    argv = worker_argv(2, {"only": "env", "one_process": True}, port=29511, framework="jax")
    assert argv == ["python", "/opt/imgbuild/node_check.py", "--procs", "2", "--port", "29511", "--only", "env",
                    "--one-process"]


@pytest.mark.parametrize("packages,want", [
    (["opt/venv/lib/python3.11/site-packages/jax"], "jax"),
    (["usr/local/lib/python3.12/dist-packages/jax"], "jax"),
    (["opt/venv/lib/python3.11/site-packages/jax", "opt/venv/lib/python3.11/site-packages/torch"], "torch"),
    (["usr/local/lib/python3.12/dist-packages/torch"], "torch"),
])
def test_an_unpacked_image_is_told_jax_or_torch_by_its_packages(tmp_path, packages, want):
    from builder.nodecheck import framework_in_rootfs
    for p in packages:
        (tmp_path / p).mkdir(parents=True)
        (tmp_path / p / "__init__.py").write_text("")
    assert framework_in_rootfs(tmp_path) == want


def test_the_jax_worker_imports_only_the_standard_library_at_the_top():
    tree = __import__("ast").parse(JAX_WORKER.read_text())
    top = [n for n in tree.body if isinstance(n, (__import__("ast").Import, __import__("ast").ImportFrom))]
    names = {a.name.split(".")[0] for n in top for a in n.names} | {getattr(n, "module", "") or "" for n in top}
    assert names <= {"argparse", "glob", "json", "os", "platform", "signal", "socket", "subprocess", "sys",
                     "threading", "time", "traceback", "__future__", "annotations", ""}, names


def test_the_slurm_script_of_a_jax_stack_gives_each_task_its_own_process_id(tmp_path):
    job = tmp_path / "check.sbatch"
    res = run_cli("node-check", IMAGE, "--framework", "jax", "--emit-sbatch", str(job), "--nodes", "2",
                  "--gpus-per-node", "4")
    assert res.code == 0, res.output
    text = job.read_text()
    # single quotes: $SLURM_PROCID is expanded by each task's shell, not once by the batch script
    assert ("JAXARGS='--processes $SLURM_NTASKS --process-id $SLURM_PROCID --coordinator $MASTER_ADDR:$MASTER_PORT "
            "--local-device $SLURM_LOCALID'") in text
    assert "exec python /opt/imgbuild/node_check.py $JAXARGS" in text and "torch.distributed" not in text
    assert JAX_WORKER.read_text().rstrip("\n") in text and list(tmp_path.iterdir()) == [job]   # the worker inside
    assert subprocess.run(["bash", "-n", str(job)]).returncode == 0
    # what one task's shell makes of it
    line = next(l for l in text.splitlines() if l.startswith("JAXARGS="))
    out = subprocess.run(["bash", "-c", f"{line}; SLURM_NTASKS=8 SLURM_PROCID=5 SLURM_LOCALID=1 MASTER_ADDR=n1 "
                          "MASTER_PORT=29500 bash -c \"echo $JAXARGS\""], capture_output=True, text=True).stdout
    assert out.split() == ["--processes", "8", "--process-id", "5", "--coordinator", "n1:29500", "--local-device", "1"]


@pytest.mark.parametrize("version", ("1.30.0", "1.37.0"))
def test_the_k8s_manifests_of_a_jax_stack_validate_and_run_one_process_per_pod(tmp_path, version):
    out = tmp_path / "check.yaml"
    res = run_cli("node-check", IMAGE, "--framework", "jax", "--emit-k8s", str(out), "--nodes", "4",
                  "--gpus-per-node", "8")
    assert res.code == 0, res.output
    docs = list(yaml.safe_load_all(out.read_text()))
    container = docs[2]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "/opt/imgbuild/node_check.py", "--processes", "4", "--process-id",
                                    "$(JOB_COMPLETION_INDEX)", "--coordinator", "imgbuild-node-check-0.imgbuild-node-check:29500"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert docs[0]["data"]["node_check.py"] == JAX_WORKER.read_text()
    tool = Path(sys.executable).with_name("kubernetes-validate")
    proc = subprocess.run([str(tool), "--strict", "-k", version, str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.count("passed for resource") == 3, proc.stdout + proc.stderr


def test_node_check_refuses_an_unknown_framework():
    res = run_cli("node-check", IMAGE, "--framework", "tensorflow", "--emit-k8s", "/tmp/never.yaml")
    assert res.code != 0 and "--framework 'tensorflow'" in res.output and not Path("/tmp/never.yaml").exists()
