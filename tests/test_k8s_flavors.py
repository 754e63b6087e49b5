"""Issue 38: the Kubernetes flavours of `node-check --emit-k8s`, validated offline. Built-in objects with
kubernetes-validate --strict (Kubernetes 1.30 and 1.37); custom resources against each project's published CRD
schema for the pinned API version (tests/data/crds, with sources), every object closed so that a misspelt
field fails; the core objects they embed (a Job template, a pod template) as the core objects they are; a
broken object per flavour as the positive control. Then what every flavour promises: one pod per node, the
site's profile, names from --name, the right environment for the partition targeted, a wait that ends on
failure, an existing file kept, bad input refused with exit 2."""

from __future__ import annotations

import copy
from dataclasses import replace
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from builder.nodecheck import k8s
from builder.load.k8sconf import K8sSettings
from conftest import run_cli, shipped_data, write_stacks

CRDS = Path(__file__).parent / "data" / "crds"
IMAGE = "127.0.0.1:5000/imgbuild/cpu-smoke@sha256:" + "a" * 64
VERSIONS = ("1.30.0", "1.37.0")
SITE = K8sSettings(namespace="training", rdma_resources=(("rdma/rdma_shared_device_a", 1),),
                   node_selector=(("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),), image_pull_secret="regcred",
                   tolerations=((("key", "nvidia.com/gpu"), ("operator", "Exists"), ("effect", "NoSchedule")),),
                   node_affinity=(("topology.kubernetes.io/zone", ("zone-a",)),), priority_class="training-high",
                   labels=(("kueue.x-k8s.io/queue-name", "gpu-queue"),),
                   annotations=(("k8s.v1.cni.cncf.io/networks", "ib-sriov"),), shm_size="16Gi", queue="gpu")
SCHEMA = {("JobSet", "jobset.x-k8s.io/v1alpha2"): "jobset.x-k8s.io_JobSet_v1alpha2",
          ("TrainJob", "trainer.kubeflow.org/v1alpha1"): "trainer.kubeflow.org_TrainJob_v1alpha1",
          ("TrainingRuntime", "trainer.kubeflow.org/v1alpha1"): "trainer.kubeflow.org_TrainingRuntime_v1alpha1",
          ("Job", "batch.volcano.sh/v1alpha1"): "batch.volcano.sh_Job_v1alpha1",
          ("PyTorchJob", "kubeflow.org/v1"): "kubeflow.org_PyTorchJob_v1"}


def closed(schema):
    """The schema with every object that lists its properties closed (additionalProperties: false)."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node and \
                    not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


def objects(flavor, nodes=4, gpus=8, framework="torch", name="imgbuild-node-check", settings=SITE, env=None):
    return k8s.manifests(IMAGE, nodes, gpus or 2, gpus, env=env or {"NCCL_IB_HCA": "mlx5"}, settings=settings,
                         name=name, worker_args=["--only", "allreduce"], worker="print('worker')\n",
                         framework=framework, flavor=flavor)


def embedded(obj) -> list[dict]:
    """The core objects a custom resource embeds, as objects kubernetes-validate reads."""
    kind, out = obj["kind"], []
    if kind == "JobSet" or kind == "TrainingRuntime":
        spec = obj["spec"] if kind == "JobSet" else obj["spec"]["template"]["spec"]
        out += [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x", **rj["template"].get("metadata", {})},
                 "spec": rj["template"]["spec"]} for rj in spec["replicatedJobs"]]
    elif kind == "Job" and obj["apiVersion"].startswith("batch.volcano.sh"):
        out += [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": t["template"]}
                for t in obj["spec"]["tasks"]]
    elif kind == "PyTorchJob":
        out += [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": r["template"]}
                for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    elif kind == "TrainJob":   # what a runtime patch lays over the cluster runtime's pod, read as a pod of its own
        for patch in obj["spec"].get("runtimePatches", []):
            for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                out.append({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"},
                            "template": rj["template"]["spec"]["template"]})
    return out


def kube_validate(docs: list[dict], tmp_path: Path, version: str) -> subprocess.CompletedProcess:
    path = tmp_path / f"core-{version}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    tool = Path(sys.executable).with_name("kubernetes-validate")
    return subprocess.run([str(tool), "--strict", "-k", version, str(path)], capture_output=True, text=True, timeout=300)


def custom(obj) -> bool:
    return (obj["kind"], obj["apiVersion"]) in SCHEMA


def crd_errors(obj) -> list[str]:
    schema = closed(json.loads((CRDS / f"{SCHEMA[(obj['kind'], obj['apiVersion'])]}.schema.json").read_text()))
    return [e.message for e in jsonschema.Draft4Validator(schema).iter_errors(obj)]


# The site profile above, and the other shapes a profile makes: host networking under another scheduler; Volcano
# as the scheduler (the TrainingRuntime's podGroupPolicy); the trainjob on the cluster's own runtime (a patch).
PROFILES = {"site": SITE,
            "host-network": replace(SITE, host_network=True, scheduler_name="scheduler-plugins-scheduler"),
            "volcano-scheduler": replace(SITE, scheduler_name="volcano"),
            "cluster-runtime": replace(SITE, trainer_runtime="torch-distributed")}


@pytest.mark.parametrize("flavor, profile", [(f, p) for p in PROFILES for f in k8s.FLAVORS
                                             if p != "cluster-runtime" or f == "trainjob"])   # only trainjob reads it
def test_each_flavor_validates_against_its_schemas(flavor, profile, tmp_path):
    docs = objects(flavor, settings=PROFILES[profile])
    if profile == "host-network":
        assert all(p["spec"]["hostNetwork"] is True and p["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
                   and p["spec"]["schedulerName"] == ("volcano" if flavor == "volcano" else "scheduler-plugins-scheduler")
                   for p in pods(docs)), flavor
    if profile == "volcano-scheduler" and flavor == "trainjob":
        assert docs[-2]["spec"]["podGroupPolicy"] == {"volcano": {}}
    if profile == "cluster-runtime":
        assert [d["kind"] for d in docs if custom(d)] == ["TrainJob"] and embedded(docs[-1]), docs
    core = [d for d in docs if not custom(d)] + [e for d in docs if custom(d) for e in embedded(d)]
    for d in docs:
        if custom(d):
            assert crd_errors(d) == [], (d["kind"], crd_errors(d))
    for version in VERSIONS if profile == "site" else VERSIONS[-1:]:   # the other profiles: the newest alone
        proc = kube_validate(core, tmp_path, version)
        assert proc.returncode == 0 and proc.stdout.count("passed for resource") == len(core), proc.stdout + proc.stderr
    # Positive controls: a misspelt field in the custom resource, a count that is no number in a core object.
    broken = copy.deepcopy(docs[-1])
    if custom(broken):
        broken["spec"]["replicatedJob" if flavor == "jobset" else "trainerr" if flavor == "trainjob" else "minAvailabel"
                       if flavor == "volcano" else "pytorchReplicaSpec"] = {}
        assert crd_errors(broken), flavor
    bad_core = copy.deepcopy(core)
    target = next(d for d in bad_core if d["kind"] in ("Job", "PodTemplate"))
    (target["spec"] if target["kind"] == "Job" else target["template"]["spec"])["restartPolicy" if target["kind"] ==
                                                                               "PodTemplate" else "completions"] = \
        {"not": "valid"}
    assert kube_validate(bad_core, tmp_path, VERSIONS[-1]).returncode != 0


def pods(docs) -> list[dict]:
    """Every pod template of a flavour's objects."""
    out = []
    for d in docs:
        spec = d.get("spec", {})
        if d["kind"] == "Job" and d["apiVersion"] == "batch/v1":
            out.append(spec["template"])
        elif d["kind"] in ("JobSet", "TrainingRuntime"):
            s = spec if d["kind"] == "JobSet" else spec["template"]["spec"]
            out += [rj["template"]["spec"]["template"] for rj in s["replicatedJobs"]]
        elif d["kind"] == "Job":
            out += [t["template"] for t in spec["tasks"]]
        elif d["kind"] == "PyTorchJob":
            out += [r["template"] for r in spec["pytorchReplicaSpecs"].values()]
    return out


@pytest.mark.parametrize("flavor", k8s.FLAVORS)
def test_every_flavor_puts_one_pod_per_node_and_carries_the_site_profile(flavor):
    for pod in pods(objects(flavor)):
        spec, meta = pod["spec"], pod["metadata"]
        anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti == {"labelSelector": {"matchLabels": {k8s.LABEL: "imgbuild-node-check"}},
                        "topologyKey": "kubernetes.io/hostname"}
        assert meta["labels"][k8s.LABEL] == "imgbuild-node-check"          # the anti-affinity selects these pods
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
        assert meta["annotations"] == {"k8s.v1.cni.cncf.io/networks": "ib-sriov"}
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert spec["priorityClassName"] == "training-high" and spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in spec["volumes"]
        box = spec["containers"][0]
        assert box["image"] == IMAGE and box["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        if flavor != "trainjob":            # the Trainer sets the node container's resources from the TrainJob
            assert box["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": 1}


def test_what_each_controller_requires_of_its_objects():
    """Rules no schema states, from the controllers' sources (tests/data/crds/SOURCES.md's releases)."""
    # PyTorchJob: a container named pytorch, one Master (training-operator pkg/webhooks/pytorch).
    job = objects("pytorchjob")[-1]
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert all(r["template"]["spec"]["containers"][0]["name"] == "pytorch"
               for r in job["spec"]["pytorchReplicaSpecs"].values())
    # Trainer v2: the runtime's trainer job is labelled ancestor-step trainer, its container is `node`
    # (pkg/constants/constants.go), and no PET_* variable is set by the TrainJob (its webhook refuses them).
    runtime, train = objects("trainjob")[-2:]
    rj = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    assert rj["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    assert rj["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == "node"
    assert train["spec"]["runtimeRef"] == {"name": "imgbuild-node-check-runtime", "kind": "TrainingRuntime",
                                           "apiGroup": "trainer.kubeflow.org"}
    assert train["spec"]["trainer"]["numNodes"] == 4 and train["spec"]["trainer"]["numProcPerNode"] == 8
    assert train["spec"]["trainer"]["command"][:2] == ["torchrun", "/opt/imgbuild/node_check.py"]
    assert not any(e["name"].startswith("PET_") for e in train["spec"]["trainer"]["env"])
    with pytest.raises(Exception, match="set by the Trainer's torch runtime"):
        objects("trainjob", env={"PET_NNODES": "2"})
    # Volcano: the gang is the whole job, placed by Volcano.
    vc = objects("volcano")[-1]
    assert vc["spec"]["minAvailable"] == 4 and vc["spec"]["schedulerName"] == "volcano"
    assert vc["spec"]["tasks"][0]["replicas"] == 4 and vc["spec"]["queue"] == "gpu"
    assert "$(VC_TASK_INDEX)" in vc["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"]
    # JobSet: pod i is NAME-node-0-i.NAME, the rendezvous pod 0's.
    js = objects("jobset")[-1]
    assert js["spec"]["network"]["enableDNSHostnames"] is True
    assert "imgbuild-node-check-node-0-0.imgbuild-node-check" in js["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["containers"][0]["command"]


@pytest.mark.parametrize("flavor", k8s.FLAVORS)
def test_two_checks_with_two_names_share_no_object_name(flavor):
    a = {(d["kind"], d["metadata"]["name"]) for d in objects(flavor, name="check-a")}
    b = {(d["kind"], d["metadata"]["name"]) for d in objects(flavor, name="check-b")}
    assert a and b and not a & b
    assert all("check-a" in n for _, n in a)


def emit(tmp_path, *extra, data=None):
    data = data or shipped_data()
    data["site"]["k8s"] = {"namespace": "training", "flavor": "jobset"}
    data["site"]["partitions"] = {
        "h100": {"slurm_partition": "gpu-h100", "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                 "env": {"NCCL_IB_HCA": "mlx5_0,mlx5_3", "NCCL_SOCKET_IFNAME": "ens21f0np0"}},
        "a100": {"slurm_partition": "gpu-a100", "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                 "env": {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_IB_GID_INDEX": "3"}}}
    stacks = write_stacks(tmp_path / "site", data)
    return lambda *args: run_cli("node-check", IMAGE, "-f", str(stacks), *args, *extra)


def test_each_partition_gets_its_own_runtime_env_in_every_launcher(tmp_path):
    run = emit(tmp_path)
    for part, hca in (("h100", "mlx5_0,mlx5_3"), ("a100", "mlx5_0,mlx5_1")):
        k, s = tmp_path / f"{part}.yaml", tmp_path / f"{part}.sbatch"
        assert run("--emit-k8s", str(k), "--partition", part, "--nodes", "2").code == 0
        assert run("--emit-sbatch", str(s), "--partition", part, "--nodes", "2").code == 0
        docs = list(yaml.safe_load_all(k.read_text()))
        box = pods(docs)[0]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in box["env"]}
        assert env["NCCL_IB_HCA"] == hca and docs[-1]["kind"] == "JobSet"        # site.k8s.flavor
        assert pods(docs)[0]["spec"]["nodeSelector"]["nvidia.com/gpu.product"].startswith(f"NVIDIA-{part.upper()}")
        text = s.read_text()
        assert f"export NCCL_IB_HCA={hca}" in text and f"#SBATCH --partition=gpu-{part}" in text
    assert "NCCL_IB_GID_INDEX" in (tmp_path / "a100.sbatch").read_text()
    assert "NCCL_IB_GID_INDEX" not in (tmp_path / "h100.sbatch").read_text()
    # Every Kubernetes flavour carries the partition's env where its pods get it (the trainjob: trainer.env).
    for flavor in k8s.FLAVORS:
        for part, hca in (("h100", "mlx5_0,mlx5_3"), ("a100", "mlx5_0,mlx5_1")):
            k = tmp_path / f"{flavor}-{part}.yaml"
            assert run("--emit-k8s", str(k), "--partition", part, "--nodes", "2", "--k8s-flavor", flavor).code == 0
            docs = list(yaml.safe_load_all(k.read_text()))
            lists = [docs[-1]["spec"]["trainer"]["env"]] if flavor == "trainjob" else \
                [p["spec"]["containers"][0]["env"] for p in pods(docs)]
            for found in lists:
                env = {e["name"]: e.get("value") for e in found}
                assert env["NCCL_IB_HCA"] == hca and ("NCCL_IB_GID_INDEX" in env) == (part == "a100"), (flavor, env)


def test_an_existing_file_is_kept_bad_input_exits_2_and_the_wait_ends_on_failure(tmp_path):
    run = emit(tmp_path)
    out = tmp_path / "check.yaml"
    assert run("--emit-k8s", str(out)).code == 0
    first = out.read_text()
    again = run("--emit-k8s", str(out), "--k8s-flavor", "volcano")
    assert again.code == 2 and "exists: nothing was written" in again.err and out.read_text() == first
    assert run("--emit-k8s", str(out), "--k8s-flavor", "volcano", "--force").code == 0
    text = out.read_text()
    assert "kubectl get vcjob/imgbuild-node-check -n training -o jsonpath='{.status.state.phase}'" in text
    assert "Completed|Failed|Aborted|Terminated" in text and "kubectl wait --for=condition=complete" not in text
    for bad, words in ((("--k8s-flavor", "mpijob"), "one of job, jobset"), (("--name", "Bad_Name"), "DNS-1035"),
                       (("--partition", "v100"), "not a partition of site.partitions")):
        res = run("--emit-k8s", str(tmp_path / "other.yaml"), *bad)
        assert res.code == 2 and words in res.err and not (tmp_path / "other.yaml").exists(), res.output
    assert "LEGACY" in (run("--emit-k8s", str(tmp_path / "v1.yaml"), "--k8s-flavor", "pytorchjob") and
                        (tmp_path / "v1.yaml").read_text())


@pytest.mark.parametrize("setting, words", [
    ({"flavor": "mpijob"}, "is not a flavour"),
    ({"tolerations": [{"key": "gpu", "operator": "Sometimes"}]}, "is not Equal or Exists"),
    ({"tolerations": [{"key": "gpu", "operator": "Exists", "value": "x"}]}, "takes no value"),
    ({"shm_size": "lots"}, "is not a quantity"),
    ({"labels": {"kueue.x-k8s.io/queue-name": "has space"}}, "is not a label value"),
    ({"annotations": {"k8s.v1.cni.cncf.io/networks": "a\nb"}}, "without control characters"),
    ({"host_network": "yes"}, "expected true or false"),
    ({"node_affinity": {"zone": []}}, "non-empty list"),
    ({"scheduler_name": "Volcano!"}, "is not a Kubernetes name"),
])
def test_a_bad_site_k8s_profile_is_refused_naming_the_key(tmp_path, setting, words):
    data = shipped_data()
    data["site"]["k8s"] = setting
    res = run_cli("check", "-f", str(write_stacks(tmp_path, data)))
    assert res.code == 2 and "site.k8s." in res.err and words in res.err, res.output


@pytest.mark.parametrize("section, setting, key, words", [
    ("slurm", {"enroot_version": "four"}, "site.slurm.enroot_version", "is not a version (3.5.0)"),
    ("slurm", {"exclusive": "yes"}, "site.slurm.exclusive", "expected true or false"),
    ("slurm", {"partiton": "gpu"}, "site.slurm", "partition"),
    ("slurm", {"time": "half an hour"}, "site.slurm.time", "is not a time limit"),
    ("slurm", {"account": "proj llm"}, "site.slurm.account", "is not an account name"),
    ("partitions", {"h100": {"env": {"NCCL_IB_HCA": "$(curl evil)"}}}, "site.partitions.h100.env.NCCL_IB_HCA", "'$'"),
    ("partitions", {"h100": {"slurm_partiton": "gpu"}}, "site.partitions.h100", "slurm_partition"),
    ("partitions", {"h 100": {}}, "site.partitions.h 100", "is not a partition name"),
])
def test_a_bad_site_slurm_or_partition_is_refused_naming_the_key(tmp_path, section, setting, key, words):
    """site.slurm and site.partitions as a site writes them in stacks.yaml: each mistake exits 2 at `check`,
    naming the file, the key and why, before any launch file is written."""
    data = shipped_data()
    data["site"][section] = setting
    for _ in range(2):
        res = run_cli("check", "-f", str(write_stacks(tmp_path, data)))
        assert res.code == 2 and key in res.err and words in res.err and "stacks.yaml" in res.err, res.output


def test_the_enroot_environment_of_a_partition_is_the_images_with_the_partitions_over_it():
    from builder.export import enroot_files
    config = {"config": {"Env": ["PATH=/opt/venv/bin:/usr/bin", "NCCL_IB_HCA=mlx5"]}}
    assert enroot_files(config)["etc/environment"] == "PATH=/opt/venv/bin:/usr/bin\nNCCL_IB_HCA=mlx5\n"
    over = enroot_files(config, {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_IB_GID_INDEX": "3"})["etc/environment"]
    assert over == "PATH=/opt/venv/bin:/usr/bin\nNCCL_IB_HCA=mlx5_0,mlx5_1\nNCCL_IB_GID_INDEX=3\n"


def test_a_trainjob_on_the_clusters_own_runtime_patches_what_a_patch_may_carry():
    """site.k8s.trainer_runtime: the TrainJob references the cluster's ClusterTrainingRuntime and writes none;
    placement and the worker's mount go in a runtime patch, which the Trainer's webhook allows to hold no image,
    no resources and no env on `node` (trainjob_types.go RuntimePatch, jobset plugin validation)."""
    from dataclasses import replace
    docs = objects("trainjob", settings=replace(SITE, trainer_runtime="torch-distributed"))
    assert [d["kind"] for d in docs] == ["ConfigMap", "TrainJob"]
    job = docs[-1]
    assert crd_errors(job) == []
    assert job["spec"]["runtimeRef"] == {"name": "torch-distributed", "kind": "ClusterTrainingRuntime",
                                         "apiGroup": "trainer.kubeflow.org"}
    patch = job["spec"]["runtimePatches"][0]
    assert patch["manager"] == "imgbuild.io/node-check"                  # domain-prefixed, as the webhook wants
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    box = pod["containers"][0]
    assert box["name"] == "node" and set(box) <= {"name", "volumeMounts", "securityContext"}
    assert set(pod) <= {"affinity", "nodeSelector", "tolerations", "volumes", "imagePullSecrets", "containers"}
    assert pod["affinity"]["podAntiAffinity"] and {"name": "worker", "configMap": {"name": "imgbuild-node-check-worker"}} \
        in pod["volumes"]


# What each flavour's object reports when it ended well, ended badly, and while it runs (jsonpath output).
_STATES = {"job": ("Complete", "Failed", ""), "jobset": ("Completed", "Failed", ""),
           "trainjob": ("Complete", "Failed", "Created"), "volcano": ("Completed", "Aborted", "Pending"),
           "pytorchjob": ("Succeeded", "Failed", "Created Running")}


@pytest.mark.parametrize("flavor", k8s.FLAVORS)
def test_the_printed_wait_exits_0_only_when_the_check_completed(tmp_path, flavor):
    """The wait the file's header prints, run by bash against a kubectl that answers as the cluster would: it
    ends on success (0) and on failure (1); an object that is not there, or one that never ends (pods that
    cannot be placed stay Pending), ends it with 1 too instead of a loop for ever."""
    run = emit(tmp_path, "--k8s-flavor", flavor)
    out = tmp_path / f"{flavor}.yaml"
    assert run("--emit-k8s", str(out)).code == 0
    head = [line[len("#   "):] for line in out.read_text().splitlines() if line.startswith("#   ")]
    start = next(i for i, line in enumerate(head) if line.startswith("kubectl apply")) + 1
    stop = next(i for i, line in enumerate(head) if line.startswith("kubectl logs"))
    script = "\n".join(head[start:stop])
    assert script.count("kubectl get") == 1, script
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "kubectl").write_text('#!/bin/sh\n[ "$STATE" = missing ] && { echo "NotFound" >&2; exit 1; }\n'
                                  'printf %s "$STATE"\n')
    (bin_ / "sleep").write_text("#!/bin/sh\nexit 0\n")   # the loop's 10 s pauses, not the test's
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    ok, bad, running = _STATES[flavor]
    for state, seconds, code, says in ((ok, "1800", 0, ok), (bad, "1800", 1, bad), ("missing", "1800", 1, "not found"),
                                       (running, "1", 1, "not ended after 1 s")):
        for _ in range(2):
            env = {"PATH": f"{bin_}:/usr/bin:/bin", "STATE": state, "WAIT_SECONDS": seconds}
            proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
            assert proc.returncode == code and says in proc.stdout, (state, proc.returncode, proc.stdout, proc.stderr)
