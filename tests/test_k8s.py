"""`imgbuild node-check --emit-k8s` (issue 24): Kubernetes manifests for the node check over N nodes, validated
offline against the Kubernetes schemas of two versions (PyPI's kubernetes-validate ships them), hostile
values refused before anything is written, and the pods' logs read back by --from-log. No cluster runs
here: the manifests are checked, not applied."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder.load.k8sconf import K8sSettings
from builder.nodecheck import RESULT_TAG, parse
from builder.nodecheck import k8s
from conftest import run_cli, shipped_data, write_stacks

IMAGE = "127.0.0.1:5000/imgbuild/cpu-smoke@sha256:" + "a" * 64
VERSIONS = ("1.30.0", "1.37.0")
SITE = K8sSettings(namespace="training", rdma_resources=(("rdma/ib", 1),),
                   node_selector=(("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),), image_pull_secret="regcred")


def validate(path: Path, version: str) -> subprocess.CompletedProcess:
    tool = Path(sys.executable).with_name("kubernetes-validate")
    return subprocess.run([str(tool), "--strict", "-k", version, str(path)], capture_output=True, text=True,
                          timeout=300)


def emitted(tmp_path: Path, *extra: str, data=None) -> tuple:
    data = data or shipped_data()
    data.setdefault("site", {})["k8s"] = {"namespace": "training", "rdma_resources": {"rdma/ib": 1},
                                          "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                                          "image_pull_secret": "regcred"}
    stacks = write_stacks(tmp_path / "site", data)
    out = tmp_path / "check.yaml"
    res = run_cli("node-check", IMAGE, "--emit-k8s", str(out), "-f", str(stacks), *extra)
    return res, out


@pytest.mark.parametrize("version", VERSIONS)
def test_the_manifests_validate_against_the_kubernetes_schemas(tmp_path, version):
    res, out = emitted(tmp_path, "--nodes", "4", "--gpus-per-node", "8", "--only", "allreduce")
    assert res.code == 0, res.output
    proc = validate(out, version)
    assert proc.returncode == 0 and proc.stdout.count("passed for resource") == 3, proc.stdout + proc.stderr
    # A positive control: the same validator refuses a Job whose completions is not a number.
    docs = list(yaml.safe_load_all(out.read_text()))
    docs[2]["spec"]["completions"] = "four"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump_all(docs))
    assert validate(broken, version).returncode != 0


def test_the_job_is_what_a_multi_node_check_needs(tmp_path):
    res, out = emitted(tmp_path, "--nodes", "4", "--gpus-per-node", "8")
    assert res.code == 0, res.output
    configmap, service, job = yaml.safe_load_all(out.read_text())
    assert configmap["data"]["node_check.py"].startswith('"""') and configmap["metadata"]["namespace"] == "training"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE   # the released digest, never a tag
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/ib": 1}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    cmd = container["command"]
    assert cmd[cmd.index("--nnodes") + 1] == "4" and cmd[cmd.index("--nproc-per-node") + 1] == "8"
    assert cmd[cmd.index("--node-rank") + 1] == "$(JOB_COMPLETION_INDEX)"
    assert cmd[cmd.index("--master-addr") + 1] == "imgbuild-node-check-0.imgbuild-node-check"


def test_the_stacks_runtime_environment_goes_into_the_container(tmp_path):
    objects = k8s.manifests(IMAGE, 2, 8, 8, env={"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "^docker0,lo"},
                            settings=SITE, worker="x")
    env = {e["name"]: e["value"] for e in objects[2]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "^docker0,lo"}


@pytest.mark.parametrize("env, image, why", [
    ({"NCCL_DEBUG": "INFO\nkind: Secret"}, IMAGE, "a newline"),
    ({"NCCL_DEBUG": 'INFO"'}, IMAGE, "a quote"),
    ({"NCCL_DEBUG": "$(SECRET)"}, IMAGE, "'$'"),
    ({"A=B": "1"}, IMAGE, "not a name"),
    ({}, "127.0.0.1:5000/imgbuild/cpu-smoke:latest", "not a reference by digest"),
    ({}, IMAGE + "\n", "not a reference by digest"),
])
def test_a_hostile_value_is_refused_before_anything_is_written(env, image, why):
    with pytest.raises(Exception, match="nothing was written") as caught:
        k8s.manifests(image, 2, 1, 0, env=env, worker="x")
    assert why in str(caught.value)


def test_the_cli_writes_nothing_on_a_refused_value(tmp_path):
    out = tmp_path / "check.yaml"
    res = run_cli("node-check", "127.0.0.1:5000/imgbuild/cpu-smoke:cpu-smoke", "--emit-k8s", str(out),
                  "-f", str(write_stacks(tmp_path / "site", shipped_data())))
    assert res.code == 2 and "not a reference by digest" in res.output and "Traceback" not in res.output, res.output
    assert not out.exists()


@pytest.mark.parametrize("setting, reason", [
    ({"namespace": "Training"}, "is not a Kubernetes name"),
    ({"rdma_resources": {"rdma/ib": 0}}, "expected a count from 1 to 64"),
    ({"rdma_resources": {"bad name": 1}}, "is not an extended resource name"),
    ({"node_selector": {"gpu": "a b"}}, "is not a label value"),
    ({"kubeconfig": "x"}, "unknown key 'kubeconfig'"),
])
def test_bad_site_k8s_settings_are_refused_naming_the_key(tmp_path, setting, reason):
    data = shipped_data()
    data.setdefault("site", {})["k8s"] = setting
    res = run_cli("check", "-f", str(write_stacks(tmp_path, data)))
    assert res.code == 2 and "site.k8s" in res.output and reason in res.output, res.output


def test_from_log_reads_the_pods_logs_as_kubectl_prints_them():
    report = {"world_size": 16, "backend": "nccl", "seconds": 12.5,
              "results": [{"id": "allreduce", "status": "passed", "bad_ranks": [], "seconds": 1.0, "detail": "",
                           "numbers": {}}]}
    log = "\n".join([
        "[pod/imgbuild-node-check-1-x2b9q/check] W1204 12:00:00 torch.distributed starting",
        f"[pod/imgbuild-node-check-0-a81kz/check] {RESULT_TAG}{json.dumps(report)}",
        "[pod/imgbuild-node-check-1-x2b9q/check] done"])
    parsed = parse("job", log, log, 0)
    assert parsed.world_size == 16 and parsed.ok and parsed.results[0]["id"] == "allreduce"


def test_rdma_pods_may_lock_memory_and_an_extended_resource_needs_its_domain(tmp_path):
    objects = k8s.manifests(IMAGE, 2, 8, 8, settings=SITE, worker="x")
    container = objects[2]["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    plain = k8s.manifests(IMAGE, 2, 8, 8, worker="x")[2]["spec"]["template"]["spec"]["containers"][0]
    assert "securityContext" not in plain
    data = shipped_data()
    data.setdefault("site", {})["k8s"] = {"rdma_resources": {"rdma": 1}}
    res = run_cli("check", "-f", str(write_stacks(tmp_path, data)))
    assert res.code == 2 and "is not an extended resource name" in res.output
