"""The node check as Kubernetes launch files a cluster admin runs unchanged, in the flavour the cluster
schedules with (docs/kubernetes.md argues the default):

  - job:        plain Kubernetes (batch/v1), nothing to install: an Indexed Job of N pods and a headless
                Service whose DNS names give pod 0 a stable address for the rendezvous (the default);
  - jobset:     a JobSet (jobset.x-k8s.io), which restarts or fails the group as one and names its pods;
  - trainjob:   Kubeflow Trainer v2: a TrainJob and the TrainingRuntime it references (its JobSet template
                holds the pod this module writes); the torch runtime gives each node PET_* for torchrun;
  - volcano:    a Volcano Job with minAvailable = N, so the gang is scheduled whole or not at all;
  - pytorchjob: Kubeflow Training Operator v1's PyTorchJob, deprecated since Trainer v2: for clusters that
                still run the v1 operator, and said so in the file.

Every flavour: one pod per node (a required pod anti-affinity on hostname: two pods on one 8-GPU node would
"pass" a multi-node check that never crossed the fabric), the worker (builder/nodecheck/worker.py) in a
ConfigMap so no shared filesystem is needed, the image by digest, and the site's profile (site.k8s:
tolerations, node selector and affinity, priority class, scheduler, labels, annotations, host network, RDMA
resources, /dev/shm size, pull secret). Each object's name derives from --name, so two checks in one
namespace share none. Rank 0 prints the report line into its log; `kubectl logs -l imgbuild.io/node-check=NAME
--prefix --tail=-1` collects it and `imgbuild node-check --from-log` reads it.

Every value is checked before anything is written (DNS labels, the digest, environment names and values,
worker arguments; site.k8s when stacks.yaml is read, builder.load.k8sconf), and the text is written by a
YAML dumper, never by string formatting: no value can change the YAML's structure.
"""

from __future__ import annotations

import re

import yaml

from builder.errors import SpecError
from builder.load.k8sconf import K8sSettings
from builder.nodecheck import IN_IMAGE

PORT = 29500
# The API version each flavour writes, in one place, and the release of its controller whose CRD the tests
# validate it against (tests/data/crds/SOURCES.md).
API = {
    "job": "batch/v1",                                   # Kubernetes 1.30 and 1.37 schemas (kubernetes-validate)
    "jobset": "jobset.x-k8s.io/v1alpha2",                # JobSet v0.12.0
    "trainjob": "trainer.kubeflow.org/v1alpha1",         # Kubeflow Trainer v2.3.0
    "volcano": "batch.volcano.sh/v1alpha1",              # Volcano v1.15.1
    "pytorchjob": "kubeflow.org/v1",                     # Kubeflow Training Operator v1.9.4 (legacy)
}
FLAVORS = tuple(API)
DEFAULT_FLAVOR = "job"
LABEL = "imgbuild.io/node-check"     # on every pod: the anti-affinity's selector and the logs' selector
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
IMAGE_BY_DIGEST = re.compile(r"^[A-Za-z0-9.-]+(?::[0-9]+)?/[a-z0-9]+(?:[._/-][a-z0-9]+)*@sha256:[0-9a-f]{64}\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
BAD_VALUE = re.compile(r"[\x00-\x1f\x7f'\"`\\$]")   # $: Kubernetes expands $(NAME) in env values
ARG = re.compile(r"^[A-Za-z0-9_.,:=/+-]+\Z")
# Set by the Trainer's torch runtime; a TrainJob may not set them (its webhook refuses them).
TRAINER_RESERVED = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}


def _refuse(what: str, value, why: str) -> SpecError:
    shown = repr(value)[:80]
    return SpecError(f"{what} {shown}: {why}; nothing was written")


def check_input(image: str, nodes: int, procs_per_node: int, gpus_per_node: int, env: dict, name: str,
                worker_args: list | None, flavor: str) -> None:
    if flavor not in API:
        raise _refuse("--k8s-flavor", flavor, "one of " + ", ".join(FLAVORS))
    # A JobSet pod is NAME-node-0-INDEX-xxxxx and a Job's NAME-INDEX-xxxxx: 63 characters at most, so 40 here.
    if not DNS_1035.match(name) or len(name) > 40:
        raise _refuse("the name", name, "not a DNS-1035 label (a letter first, then lower-case letters, digits and "
                      "'-') of 40 characters at most")
    if not IMAGE_BY_DIGEST.match(image):
        raise _refuse("the image", image, "not a reference by digest (REGISTRY/REPOSITORY@sha256:...): a launch "
                      "file names the exact image it checks")
    if not 1 <= nodes <= 1024 or not 1 <= procs_per_node <= 64 or not 0 <= gpus_per_node <= 64:
        raise _refuse("the size", (nodes, procs_per_node, gpus_per_node), "1-1024 nodes, 1-64 processes and 0-64 "
                      "GPUs per node")
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            raise _refuse("the environment variable", key, "not a name a container takes (letters, digits, '_')")
        if not isinstance(value, str) or BAD_VALUE.search(value):
            raise _refuse(f"the value of {key}", value, "holds a control character (a newline), a quote, a "
                          "backslash or '$'")
        if flavor == "trainjob" and key in TRAINER_RESERVED:
            raise _refuse("the environment variable", key, "set by the Trainer's torch runtime itself")
    for arg in worker_args or []:
        if not ARG.match(str(arg)):
            raise _refuse("the worker argument", arg, "letters, digits and . , : = / + - only")


def _pod(name: str, image: str, command: list, env: dict, gpus_per_node: int, settings: K8sSettings,
         container: str, labels: dict) -> dict:
    """The pod template every flavour runs: the site's profile, one pod per node."""
    limits = {**({"nvidia.com/gpu": gpus_per_node} if gpus_per_node else {}), **dict(settings.rdma_resources)}
    spec_env = [{"name": k, "value": v} for k, v in sorted(env.items())]
    box = {
        "name": container, "image": image, "imagePullPolicy": "IfNotPresent", "command": command,
        "env": spec_env,
        "ports": [{"containerPort": PORT, "name": "rendezvous"}],
        "volumeMounts": [{"name": "worker", "mountPath": IN_IMAGE, "subPath": "node_check.py", "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if limits:
        box["resources"] = {"limits": limits, "requests": dict(limits)}
    if settings.rdma_resources:   # NCCL over InfiniBand registers (pins) memory: the pod needs IPC_LOCK
        box["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    affinity: dict = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {LABEL: name}}, "topologyKey": "kubernetes.io/hostname"}]}}
    if settings.node_affinity:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": "In", "values": list(v)}
                                  for k, v in settings.node_affinity]}]}}
    pod: dict = {"restartPolicy": "Never", "containers": [box], "affinity": affinity,
                 "volumes": [{"name": "worker", "configMap": {"name": f"{name}-worker"}},
                             {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}}]}
    if settings.node_selector:
        pod["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.priority_class:
        pod["priorityClassName"] = settings.priority_class
    if settings.scheduler_name:
        pod["schedulerName"] = settings.scheduler_name
    if settings.host_network:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"   # the rendezvous name still resolves through cluster DNS
    if settings.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": settings.image_pull_secret}]
    meta: dict = {"labels": {**dict(settings.labels), **labels, LABEL: name}}
    if settings.annotations:
        meta["annotations"] = dict(settings.annotations)
    return {"metadata": meta, "spec": pod}


def _command(framework: str, nodes: int, procs: int, rank: str | None, master: str, worker_args: list) -> list:
    """torchrun (one per node, its ranks the node's GPUs) or one jax.distributed process per pod. rank None:
    torchrun takes what it needs from the PET_* environment (the Trainer's torch runtime sets it)."""
    if framework == "jax":
        return ["python", IN_IMAGE, "--processes", str(nodes), "--process-id", rank or "$(JOB_COMPLETION_INDEX)",
                "--coordinator", f"{master}:{PORT}", *worker_args]
    if rank is None:
        return ["torchrun", IN_IMAGE, *worker_args]
    return ["python", "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(procs),
            "--node-rank", rank, "--master-addr", master, "--master-port", str(PORT), IN_IMAGE, *worker_args]


def manifests(image: str, nodes: int, procs_per_node: int, gpus_per_node: int = 0, env: dict | None = None,
              settings: K8sSettings = K8sSettings(), name: str = "imgbuild-node-check",
              worker_args: list | None = None, worker: str = "", framework: str = "torch",
              flavor: str = DEFAULT_FLAVOR) -> list[dict]:
    """The objects of one flavour: the worker's ConfigMap first, the object to wait on last."""
    env = dict(env or {})
    check_input(image, nodes, procs_per_node, gpus_per_node, env, name, worker_args, flavor)
    args = [str(a) for a in worker_args or []]
    meta = {"name": name, "labels": {"app.kubernetes.io/name": "imgbuild-node-check",
                                     "app.kubernetes.io/managed-by": "imgbuild", **dict(settings.labels)}}
    if settings.namespace:
        meta["namespace"] = settings.namespace
    if settings.annotations:
        meta["annotations"] = dict(settings.annotations)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": f"{name}-worker"},
                 "data": {"node_check.py": worker}}
    return [configmap, *_BUILDERS[flavor](name, meta, image, nodes, procs_per_node, gpus_per_node, env, settings,
                                          args, framework)]


def _job(name, meta, image, nodes, procs, gpus, env, settings, args, framework) -> list[dict]:
    master = f"{name}-0.{name}"
    pod = _pod(name, image, _command(framework, nodes, procs, "$(JOB_COMPLETION_INDEX)", master, args), env, gpus,
               settings, "check", {})
    pod["spec"]["subdomain"] = name
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
               "spec": {"clusterIP": "None", "selector": {LABEL: name}, "publishNotReadyAddresses": True,
                        "ports": [{"name": "rendezvous", "port": PORT, "targetPort": PORT}]}}
    job = {"apiVersion": API["job"], "kind": "Job", "metadata": meta,
           "spec": {"completionMode": "Indexed", "completions": nodes, "parallelism": nodes, "backoffLimit": 0,
                    "ttlSecondsAfterFinished": 86400, "template": pod}}
    return [service, job]


def _jobset_spec(name, image, nodes, procs, gpus, env, settings, args, framework, container="check",
                 command=None, labels=None) -> dict:
    """One replicated job `node` of N pods (an Indexed Job): pod i is NAME-node-0-i.NAME."""
    master = f"{name}-node-0-0.{name}"
    pod = _pod(name, image, command or _command(framework, nodes, procs, "$(JOB_COMPLETION_INDEX)", master, args),
               env, gpus, settings, container, {})
    return {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {
                "metadata": {"labels": dict(labels or {})},
                "spec": {"completionMode": "Indexed", "completions": nodes, "parallelism": nodes, "backoffLimit": 0,
                         "template": pod}}}],
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"}, "failurePolicy": {"maxRestarts": 0}}


def _jobset(name, meta, image, nodes, procs, gpus, env, settings, args, framework) -> list[dict]:
    spec = _jobset_spec(name, image, nodes, procs, gpus, env, settings, args, framework)
    spec["ttlSecondsAfterFinished"] = 86400
    return [{"apiVersion": API["jobset"], "kind": "JobSet", "metadata": meta, "spec": spec}]


def _trainjob(name, meta, image, nodes, procs, gpus, env, settings, args, framework) -> list[dict]:
    """The TrainingRuntime (a JobSet template whose pod is this module's) and the TrainJob that runs it. The
    Trainer sets the `node` container's image, command, env and resources from the TrainJob, and for torch the
    PET_* variables torchrun reads (rank from the completion index, master NAME-node-0-0.NAME). With
    site.k8s.trainer_runtime the TrainJob runs the cluster's own ClusterTrainingRuntime instead, and the pod's
    placement and the worker's mount reach it as a runtime patch (Trainer v2.2 and later)."""
    if settings.trainer_runtime:
        return [_trainjob_on(settings.trainer_runtime, name, meta, image, nodes, procs, gpus, env, settings, args,
                             framework)]
    runtime = f"{name}-runtime"
    if framework == "jax":
        policy = {"numNodes": nodes, "jax": {}}
        command = _command("jax", nodes, procs, "$(JOB_COMPLETION_INDEX)", f"{name}-node-0-0.{name}", args)
    else:
        policy = {"numNodes": nodes, "torch": {}}
        command = _command("torch", nodes, procs, None, "", args)
    spec = _jobset_spec(name, image, nodes, procs, gpus, {}, settings, args, framework, container="node",
                        command=command, labels={"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"})
    spec.pop("failurePolicy")                           # the Trainer owns the JobSet's policies
    spec.pop("successPolicy")
    spec["network"] = {"publishNotReadyAddresses": True}   # the Trainer names the subdomain after the TrainJob
    template = {"apiVersion": API["trainjob"], "kind": "TrainingRuntime",
                "metadata": {**meta, "name": runtime,
                             "labels": {**meta["labels"], "trainer.kubeflow.org/framework": framework}},
                "spec": {"mlPolicy": policy, "template": {"spec": spec}}}
    if settings.scheduler_name == "volcano":
        template["spec"]["podGroupPolicy"] = {"volcano": {}}
    limits = {**({"nvidia.com/gpu": gpus} if gpus else {}), **dict(settings.rdma_resources)}
    trainer = {"image": image, "command": command, "numNodes": nodes, "numProcPerNode": procs,
               "env": [{"name": k, "value": v} for k, v in sorted(env.items())]}
    if limits:
        trainer["resourcesPerNode"] = {"limits": limits, "requests": dict(limits)}
    job = {"apiVersion": API["trainjob"], "kind": "TrainJob", "metadata": meta,
           "spec": {"runtimeRef": {"name": runtime, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
                    "trainer": trainer}}
    return [template, job]


# What a runtime patch may set of the trainer's pod (Trainer v2.3.0, trainjob_types.go RuntimePatch): no image,
# no resources, no env on the `node` container; the manager must be a domain-prefixed path.
PATCHABLE_POD = ("affinity", "nodeSelector", "tolerations", "volumes", "imagePullSecrets", "priorityClassName")


def _trainjob_on(runtime: str, name, meta, image, nodes, procs, gpus, env, settings, args, framework) -> dict:
    command = (_command("jax", nodes, procs, "$(JOB_COMPLETION_INDEX)", f"{name}-node-0-0.{name}", args)
               if framework == "jax" else _command("torch", nodes, procs, None, "", args))
    pod = _pod(name, image, command, {}, gpus, settings, "node", {})
    box = pod["spec"]["containers"][0]
    patch_pod = {k: v for k, v in pod["spec"].items() if k in PATCHABLE_POD and k != "priorityClassName"}
    patch_pod["containers"] = [{"name": "node", "volumeMounts": box["volumeMounts"],
                                **({"securityContext": box["securityContext"]} if "securityContext" in box else {})}]
    limits = {**({"nvidia.com/gpu": gpus} if gpus else {}), **dict(settings.rdma_resources)}
    trainer = {"image": image, "command": command, "numNodes": nodes, "numProcPerNode": procs,
               "env": [{"name": k, "value": v} for k, v in sorted(env.items())]}
    if limits:
        trainer["resourcesPerNode"] = {"limits": limits, "requests": dict(limits)}
    patch = {"manager": "imgbuild.io/node-check", "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": dict(pod["metadata"]["labels"])},
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
            "metadata": pod["metadata"], "spec": patch_pod}}}}]}}}}
    return {"apiVersion": API["trainjob"], "kind": "TrainJob", "metadata": meta,
            "spec": {"runtimeRef": {"name": runtime, "kind": "ClusterTrainingRuntime",
                                    "apiGroup": "trainer.kubeflow.org"},
                     "trainer": trainer, "runtimePatches": [patch]}}


def _volcano(name, meta, image, nodes, procs, gpus, env, settings, args, framework) -> list[dict]:
    """Gang-scheduled: minAvailable = N. Volcano's svc plugin makes pod i NAME-node-i.NAME and its env plugin
    gives VC_TASK_INDEX."""
    master = f"{name}-node-0.{name}"
    pod = _pod(name, image, _command(framework, nodes, procs, "$(VC_TASK_INDEX)", master, args), env, gpus,
               settings, "check", {})
    pod["spec"]["schedulerName"] = "volcano"            # the gang is Volcano's to place
    spec = {"schedulerName": "volcano", "minAvailable": nodes, "maxRetry": 1,
            "plugins": {"svc": [], "env": []},
            "policies": [{"event": "PodFailed", "action": "AbortJob"}, {"event": "PodEvicted", "action": "AbortJob"}],
            "tasks": [{"name": "node", "replicas": nodes, "template": pod}], "ttlSecondsAfterFinished": 86400}
    if settings.queue:
        spec["queue"] = settings.queue
    return [{"apiVersion": API["volcano"], "kind": "Job", "metadata": meta, "spec": spec}]


def _pytorchjob(name, meta, image, nodes, procs, gpus, env, settings, args, framework) -> list[dict]:
    """Legacy: the v1 operator sets MASTER_ADDR/MASTER_PORT (NAME-master-0) and RANK (the node's) per pod; its
    webhook wants the container named `pytorch` and one Master."""
    if framework == "jax":
        raise _refuse("--k8s-flavor", "pytorchjob", "a PyTorchJob runs torch ranks; a JAX image takes job, jobset, "
                      "trainjob or volcano")
    command = _command("torch", nodes, procs, "$(RANK)", "$(MASTER_ADDR)", args)
    command[command.index("--master-port") + 1] = "$(MASTER_PORT)"

    def replica(count: int) -> dict:
        return {"replicas": count, "restartPolicy": "Never",
                "template": _pod(name, image, command, env, gpus, settings, "pytorch", {})}
    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    return [{"apiVersion": API["pytorchjob"], "kind": "PyTorchJob", "metadata": meta,
             "spec": {"pytorchReplicaSpecs": specs, "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None",
                                                                  "ttlSecondsAfterFinished": 86400}}}]


_BUILDERS = {"job": _job, "jobset": _jobset, "trainjob": _trainjob, "volcano": _volcano, "pytorchjob": _pytorchjob}

# What `kubectl get` calls each flavour's object, and how its end shows: a wait that ends on success and on
# failure (kubectl wait --for=condition waits out its timeout on a failed Job).
_DONE = {
    "job": ("job", "{.status.conditions[?(@.status==\"True\")].type}", "Complete", "Failed"),
    "jobset": ("jobset", "{.status.conditions[?(@.status==\"True\")].type}", "Completed", "Failed"),
    "trainjob": ("trainjob", "{.status.conditions[?(@.status==\"True\")].type}", "Complete", "Failed"),
    "volcano": ("vcjob", "{.status.state.phase}", "Completed", "Failed|Aborted|Terminated"),
    "pytorchjob": ("pytorchjob", "{.status.conditions[?(@.status==\"True\")].type}", "Succeeded", "Failed"),
}


def wait_lines(flavor: str, name: str, namespace: str | None = None) -> list[str]:
    """A wait for the check's end, in bash, that exits 0 only when it completed: 1 when it failed, when the
    object is gone (a typo, deleted) and when it has not ended in WAIT_SECONDS (30 min by default: pods that
    cannot be placed stay Pending for ever, and `kubectl wait --for=condition` sits out its timeout on a failure)."""
    kind, path, ok, bad = _DONE[flavor]
    n = f" -n {namespace}" if namespace else ""
    return [
        "end=$((SECONDS + ${WAIT_SECONDS:-1800})); s=",
        "while [ \"$SECONDS\" -lt \"$end\" ]; do",
        f"  s=$(kubectl get {kind}/{name}{n} -o jsonpath='{path}') || {{ s=\"{kind}/{name} not found\"; break; }}",
        f"  echo \"$s\" | grep -qE '{ok}|{bad}' && break; s=\"not ended after ${{WAIT_SECONDS:-1800}} s\"; sleep 10",
        f"done; echo \"{kind}/{name}: $s\"; echo \"$s\" | grep -qE '{ok}' && ! echo \"$s\" | grep -qE '{bad}'",
    ]


def text(objects: list[dict], name: str, nodes: int, flavor: str = DEFAULT_FLAVOR) -> str:
    """The objects as one YAML stream, headed by what they need and how to run, wait for and read the check."""
    ns = objects[-1]["metadata"].get("namespace")
    n = f" -n {ns}" if ns else ""
    needs = {"job": "nothing beyond Kubernetes 1.24 (Indexed Jobs)",
             "jobset": "the JobSet controller (jobset.x-k8s.io/v1alpha2; validated against v0.12.0)",
             "trainjob": "Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1; validated against v2.3.0) and JobSet",
             "volcano": "the Volcano scheduler and controllers (batch.volcano.sh/v1alpha1; validated against v1.15.1)",
             "pytorchjob": "Kubeflow Training Operator v1 (kubeflow.org/v1; validated against v1.9.4). LEGACY: the "
                           "v1 operator is deprecated in favour of Kubeflow Trainer v2 (--k8s-flavor trainjob)"}[flavor]
    head = [
        f"# Written by `imgbuild node-check --emit-k8s --k8s-flavor {flavor}`: the consistency check on {nodes} "
        "node(s),",
        f"# one pod per node (a required anti-affinity on kubernetes.io/hostname). Needs {needs}.",
        "# Adjust for your cluster in stacks.yaml's site.k8s (namespace, tolerations, node_selector, node_affinity,",
        "# priority_class, scheduler_name, labels, annotations, host_network, rdma_resources, shm_size,",
        "# image_pull_secret, queue), not here: the file is written again from it.",
        "#   kubectl apply -f THIS_FILE",
        *(f"#   {line}" for line in wait_lines(flavor, name, ns)),
        f"#   kubectl logs{n} -l {LABEL}={name} --prefix --tail=-1 > node-check.log",
        "#   imgbuild node-check --from-log node-check.log     (exit 8 when a check failed)",
        "#   kubectl delete -f THIS_FILE",
    ]
    body = yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(head) + "\n" + body


__all__ = ["API", "DEFAULT_FLAVOR", "FLAVORS", "LABEL", "PORT", "check_input", "manifests", "text", "wait_lines"]
