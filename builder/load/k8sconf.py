"""site.k8s from stacks.yaml: the site's Kubernetes profile, which `imgbuild node-check --emit-k8s` writes into
every flavour's launch files (builder/nodecheck/k8s.py).

    site:
      k8s:
        flavor: jobset                   # job (default), jobset, trainjob, volcano or pytorchjob
        namespace: training              # the namespace of the objects (default: kubectl's current one)
        rdma_resources: {rdma/ib: 1}     # extended resources each pod requests for RDMA/IB (the device plugin's
                                         # names: rdma/rdma_shared_device_a with NVIDIA's network operator)
        node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        node_affinity: {topology.kubernetes.io/zone: [zone-a, zone-b]}   # required: the label has one of the values
        tolerations:                     # as Kubernetes writes them
          - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
        priority_class: training-high
        scheduler_name: volcano          # a secondary scheduler (Volcano, a coscheduling plugin)
        queue: gpu                       # a Volcano queue (the volcano flavour's spec.queue)
        labels: {kueue.x-k8s.io/queue-name: gpu-queue}      # on every object and pod (Kueue reads this one)
        annotations: {k8s.v1.cni.cncf.io/networks: ib-sriov}   # on every object and pod (Multus: secondary NICs)
        host_network: false              # true on clouds whose RDMA is only on the host's interfaces
        shm_size: 16Gi                   # /dev/shm of each pod (NCCL's shared memory), default 8Gi
        image_pull_secret: regcred       # a Secret of type dockerconfigjson in that namespace
        trainer_runtime: torch-distributed   # trainjob: run the cluster's ClusterTrainingRuntime (default: write one)

Every value is checked here against what Kubernetes accepts (DNS labels and subdomains, qualified names, label
values, quantities, toleration operators and effects), so that a file is never written with a value the API
server would refuse, or one that could carry another key into the YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from builder.load.params import type_name

KEYS = {"flavor", "namespace", "rdma_resources", "node_selector", "node_affinity", "tolerations", "priority_class",
        "scheduler_name", "queue", "labels", "annotations", "host_network", "shm_size", "image_pull_secret",
        "trainer_runtime"}
FLAVORS = ("job", "jobset", "trainjob", "volcano", "pytorchjob")      # builder.nodecheck.k8s.API's keys
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
# An extended resource's name: a DNS subdomain prefix (required) and a name of 63 (rdma/ib, nvidia.com/hostdev).
EXTENDED = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
# A qualified name (label keys): an optional DNS subdomain prefix and a name of 63.
QUALIFIED = re.compile(r"^(?:[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
QUANTITY = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:Ki|Mi|Gi|Ti|k|M|G|T)?\Z")
TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NO_CONTROL = re.compile(r"^[^\x00-\x1f\x7f]*\Z")


@dataclass(frozen=True)
class K8sSettings:
    namespace: str | None = None
    rdma_resources: tuple = ()      # (resource name, count)
    node_selector: tuple = ()       # (label key, value)
    image_pull_secret: str | None = None
    flavor: str | None = None
    node_affinity: tuple = ()       # (label key, (values...))
    tolerations: tuple = ()         # tuples of (field, value) pairs
    priority_class: str | None = None
    scheduler_name: str | None = None
    queue: str | None = None
    labels: tuple = ()              # (key, value)
    annotations: tuple = ()         # (key, value)
    host_network: bool = False
    shm_size: str = "8Gi"
    trainer_runtime: str | None = None   # a ClusterTrainingRuntime of the cluster the trainjob flavour runs on


def parse(loader, value: Any) -> K8sSettings:
    """loader is spec._Loader (err, mapping, string)."""
    if value is None:
        return K8sSettings()
    path = ("site", "k8s")
    raw = loader.mapping(path, value, KEYS, what="a mapping of Kubernetes settings")
    out: dict = {}

    def name(key: str, pattern: re.Pattern, what: str) -> None:
        if raw.get(key) is not None:
            text = loader.string(path + (key,), raw[key])
            if not pattern.match(text):
                raise loader.err(path + (key,), f"{text[:80]!r} is not {what}")
            out[key] = text

    k8s_name = "a Kubernetes name (lower-case letters, digits and '-', starting and ending with a letter or digit)"
    name("namespace", DNS_LABEL, k8s_name)
    name("image_pull_secret", DNS_SUBDOMAIN, k8s_name)
    name("priority_class", DNS_SUBDOMAIN, k8s_name)
    name("scheduler_name", DNS_SUBDOMAIN, k8s_name)
    name("queue", DNS_LABEL, k8s_name)
    name("trainer_runtime", DNS_SUBDOMAIN, k8s_name)
    name("shm_size", QUANTITY, "a quantity (e.g. 8Gi, 512Mi)")
    if raw.get("flavor") is not None:
        text = loader.string(path + ("flavor",), raw["flavor"])
        if text not in FLAVORS:
            raise loader.err(path + ("flavor",), f"{text[:80]!r} is not a flavour", hint="one of " + ", ".join(FLAVORS))
        out["flavor"] = text
    if raw.get("host_network") is not None:
        if not isinstance(raw["host_network"], bool):
            raise loader.err(path + ("host_network",), f"expected true or false, got {type_name(raw['host_network'])}")
        out["host_network"] = raw["host_network"]
    if raw.get("rdma_resources") is not None:
        found = loader.mapping(path + ("rdma_resources",), raw["rdma_resources"], None,
                               what="a mapping of extended resource names to counts")
        pairs = []
        for key, count in found.items():
            if not isinstance(key, str) or not EXTENDED.match(key) or key.startswith(("kubernetes.io/", "nvidia.com/gpu")):
                raise loader.err(path + ("rdma_resources", str(key)), f"{str(key)[:80]!r} is not an extended resource "
                                 "name (e.g. rdma/ib, rdma/rdma_shared_device_a, nvidia.com/hostdev)")
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
                raise loader.err(path + ("rdma_resources", key), f"expected a count from 1 to 64, got "
                                 f"{type_name(count) if not isinstance(count, int) else count}")
            pairs.append((key, count))
        out["rdma_resources"] = tuple(pairs)
    for key, values_ok in (("node_selector", LABEL_VALUE), ("labels", LABEL_VALUE), ("annotations", NO_CONTROL)):
        if raw.get(key) is None:
            continue
        found = loader.mapping(path + (key,), raw[key], None, what=f"a mapping of {key.replace('_', ' ')}")
        pairs = []
        for k, v in found.items():
            if not isinstance(k, str) or not QUALIFIED.match(k):
                raise loader.err(path + (key, str(k)), f"{str(k)[:80]!r} is not a label or annotation key")
            if not isinstance(v, str) or not values_ok.match(v) or len(v) > 4096:
                raise loader.err(path + (key, k), f"{str(v)[:80]!r} is not a " + (
                    "label value (63 letters, digits, '-', '_' or '.' at most)" if values_ok is LABEL_VALUE else
                    "string without control characters"))
            pairs.append((k, v))
        out[key] = tuple(pairs)
    if raw.get("node_affinity") is not None:
        found = loader.mapping(path + ("node_affinity",), raw["node_affinity"], None,
                               what="a mapping of node labels to the values one of which a node must have")
        pairs = []
        for k, values in found.items():
            if not isinstance(k, str) or not QUALIFIED.match(k):
                raise loader.err(path + ("node_affinity", str(k)), f"{str(k)[:80]!r} is not a label key")
            if not isinstance(values, list) or not values or not all(isinstance(v, str) and LABEL_VALUE.match(v)
                                                                     for v in values):
                raise loader.err(path + ("node_affinity", k), "expected a non-empty list of label values")
            pairs.append((k, tuple(values)))
        out["node_affinity"] = tuple(pairs)
    if raw.get("tolerations") is not None:
        if not isinstance(raw["tolerations"], list):
            raise loader.err(path + ("tolerations",), f"expected a list of tolerations, got {type_name(raw['tolerations'])}")
        items = []
        for i, t in enumerate(raw["tolerations"]):
            where = path + ("tolerations", i)
            t = loader.mapping(where, t, TOLERATION_KEYS, what="a toleration (key, operator, value, effect)")
            op = t.get("operator", "Equal")
            if op not in ("Equal", "Exists"):
                raise loader.err(where + ("operator",), f"{str(op)[:40]!r} is not Equal or Exists")
            if t.get("effect") is not None and t["effect"] not in EFFECTS:
                raise loader.err(where + ("effect",), f"{str(t['effect'])[:40]!r} is not one of {', '.join(EFFECTS)}")
            if t.get("key") is not None and (not isinstance(t["key"], str) or not QUALIFIED.match(t["key"])):
                raise loader.err(where + ("key",), f"{str(t['key'])[:80]!r} is not a taint key")
            if t.get("value") is not None and (not isinstance(t["value"], str) or not LABEL_VALUE.match(t["value"])):
                raise loader.err(where + ("value",), f"{str(t['value'])[:80]!r} is not a taint value")
            if op == "Exists" and t.get("value") is not None:
                raise loader.err(where + ("value",), "a toleration with operator Exists takes no value")
            secs = t.get("tolerationSeconds")
            if secs is not None and (isinstance(secs, bool) or not isinstance(secs, int) or secs < 0):
                raise loader.err(where + ("tolerationSeconds",), "expected a number of seconds")
            items.append(tuple((k, v) for k, v in (("key", t.get("key")), ("operator", op), ("value", t.get("value")),
                                                   ("effect", t.get("effect")), ("tolerationSeconds", secs))
                               if v is not None))
        out["tolerations"] = tuple(items)
    return K8sSettings(**out)


__all__ = ["K8sSettings", "parse", "DNS_LABEL", "QUALIFIED", "EXTENDED", "FLAVORS", "LABEL_VALUE"]
