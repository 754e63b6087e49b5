"""The node check as Kubernetes manifests: what a cluster runs for a check over N nodes, or as the skeleton of
a training start.

The default is plain Kubernetes (batch/v1), with nothing to install: an Indexed Job of N pods, one per node,
and a headless Service whose DNS names give pod 0 a stable address for the rendezvous. Each pod runs torchrun
with --node-rank from its completion index. The worker (builder/nodecheck/worker.py) is in a ConfigMap, so
no shared filesystem is needed. The other choices, and what they change, are in docs/kubernetes.md:
  - JobSet (jobset.x-k8s.io), which restarts the whole group and has its own DNS names;
  - Kubeflow's PyTorchJob, whose operator sets MASTER_ADDR and RANK itself.

Rank 0 prints the report line into its log. `kubectl logs -l job-name=NAME --prefix --tail=-1` collects
it, and `imgbuild node-check --from-log` reads that as it reads a Slurm job's output.

Every value is checked before anything is written, so no value can change the YAML's structure or fail
at the API server:
  - names are DNS labels;
  - the image is a reference by digest;
  - environment names are C identifiers, and their values hold no control character or quote;
  - resource names and node labels are checked when stacks.yaml is read (builder.load.k8sconf).
The text is written by a YAML dumper, never by string formatting.
"""

from __future__ import annotations

import re

import yaml

from builder.load.k8sconf import K8sSettings
from builder.nodecheck import IN_IMAGE, NodeCheckFailed

PORT = 29500
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
IMAGE_BY_DIGEST = re.compile(r"^[A-Za-z0-9.-]+(?::[0-9]+)?/[a-z0-9]+(?:[._/-][a-z0-9]+)*@sha256:[0-9a-f]{64}\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
BAD_VALUE = re.compile(r"[\x00-\x1f\x7f'\"`\\$]")   # $: Kubernetes expands $(NAME) in env values
ARG = re.compile(r"^[A-Za-z0-9_.,:=/+-]+\Z")


def _refuse(what: str, value, why: str) -> NodeCheckFailed:
    shown = repr(value)[:80]
    return NodeCheckFailed(f"{what} {shown}: {why}; nothing was written")


def manifests(image: str, nodes: int, procs_per_node: int, gpus_per_node: int = 0, env: dict | None = None,
              settings: K8sSettings = K8sSettings(), name: str = "imgbuild-node-check",
              worker_args: list | None = None, worker: str = "", framework: str = "torch") -> list[dict]:
    """The ConfigMap (the worker), the headless Service and the Indexed Job, as Kubernetes objects."""
    if not DNS_1035.match(name) or len(name) > 50:   # a Service's name; pod hostnames are NAME-INDEX: 63 at most
        raise _refuse("the name", name, "not a DNS-1035 label (a letter first) of 50 characters at most")
    if not IMAGE_BY_DIGEST.match(image):
        raise _refuse("the image", image, "not a reference by digest (REGISTRY/REPOSITORY@sha256:...): a Job names "
                      "the exact image it checks")
    if not 1 <= nodes <= 1024 or not 1 <= procs_per_node <= 64 or not 0 <= gpus_per_node <= 64:
        raise _refuse("the size", (nodes, procs_per_node, gpus_per_node), "1-1024 nodes, 1-64 processes and 0-64 GPUs "
                      "per node")
    env = dict(env or {})
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            raise _refuse("the environment variable", key, "not a name a container takes (letters, digits, '_')")
        if not isinstance(value, str) or BAD_VALUE.search(value):
            raise _refuse(f"the value of {key}", value, "holds a control character (a newline), a quote, a backslash or '$'")
    for arg in worker_args or []:
        if not ARG.match(str(arg)):
            raise _refuse("the worker argument", arg, "letters, digits and . , : = / + - only")
    meta = {"name": name, "labels": {"app.kubernetes.io/name": "imgbuild-node-check",
                                     "app.kubernetes.io/managed-by": "imgbuild"}}
    if settings.namespace:
        meta["namespace"] = settings.namespace
    selector = {"job-name": name}   # set on the pods by the Job controller (also batch.kubernetes.io/job-name from 1.27)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": f"{name}-worker"},
                 "data": {"node_check.py": worker}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
               "spec": {"clusterIP": "None", "selector": selector, "publishNotReadyAddresses": True,
                        "ports": [{"name": "rendezvous", "port": PORT, "targetPort": PORT}]}}
    # torchrun on each pod: pod 0 is the rendezvous (NAME-0.NAME through the headless Service). The node's
    # rank comes from the Indexed Job's completion index; the shell only expands that one variable.
    # A JAX image: one jax.distributed process per pod, which drives all of the pod's GPUs.
    run = (["python", IN_IMAGE, "--processes", str(nodes), "--process-id", "$(JOB_COMPLETION_INDEX)",
            "--coordinator", f"{name}-0.{name}:{PORT}", *[str(a) for a in worker_args or []]] if framework == "jax" else
           ["python", "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(procs_per_node),
            "--node-rank", "$(JOB_COMPLETION_INDEX)", "--master-addr", f"{name}-0.{name}", "--master-port", str(PORT),
            IN_IMAGE, *[str(a) for a in worker_args or []]])
    limits = {**({"nvidia.com/gpu": gpus_per_node} if gpus_per_node else {}), **dict(settings.rdma_resources)}
    container = {
        "name": "check", "image": image, "imagePullPolicy": "IfNotPresent", "command": run,
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "ports": [{"containerPort": PORT, "name": "rendezvous"}],
        "volumeMounts": [{"name": "worker", "mountPath": IN_IMAGE, "subPath": "node_check.py", "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if limits:
        container["resources"] = {"limits": limits}
    if settings.rdma_resources:   # NCCL over InfiniBand registers (pins) memory: the pod needs IPC_LOCK
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    pod = {"subdomain": name, "restartPolicy": "Never", "containers": [container],
           "volumes": [{"name": "worker", "configMap": {"name": f"{name}-worker"}},
                       {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}]}
    if nodes > 1:
        # One pod per node, required: two pods on one 8-GPU node would "pass" a multi-node check that never
        # crossed the fabric.
        pod["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}]}}
    if settings.node_selector:
        pod["nodeSelector"] = dict(settings.node_selector)
    if settings.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": settings.image_pull_secret}]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
           "spec": {"completionMode": "Indexed", "completions": nodes, "parallelism": nodes, "backoffLimit": 0,
                    "ttlSecondsAfterFinished": 86400,
                    "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": pod}}}
    return [configmap, service, job]


def text(objects: list[dict], name: str, nodes: int) -> str:
    """The manifests as one YAML stream, with how to run it and read its report."""
    head = [
        f"# Written by `imgbuild node-check --emit-k8s`: the consistency check on {nodes} node(s) of a Kubernetes",
        "# cluster, one pod per node (an Indexed Job, pod 0 the rendezvous through a headless Service).",
        "#   kubectl apply -f THIS_FILE",
        f"#   kubectl wait --for=condition=complete --timeout=30m job/{name}",
        f"#   kubectl logs -l job-name={name} --prefix --tail=-1 > node-check.log",
        "#   imgbuild node-check --from-log node-check.log     (exit 8 when a check failed)",
        f"#   kubectl delete -f THIS_FILE",
    ]
    body = yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(head) + "\n" + body


__all__ = ["manifests", "text", "PORT"]
