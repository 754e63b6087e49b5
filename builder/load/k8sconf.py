"""site.k8s from stacks.yaml: what `imgbuild node-check --emit-k8s` writes into the site's Kubernetes manifests.

    site:
      k8s:
        namespace: training              # the Kubernetes namespace of the Job (default: kubectl's current one)
        rdma_resources: {rdma/ib: 1}     # extended resources each pod requests for RDMA/IB (the device plugin's names)
        node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        image_pull_secret: regcred       # a Secret of type dockerconfigjson in that namespace

Every value is checked here against what Kubernetes accepts (DNS labels, resource and label names), so
that a manifest is never written with a value the API server would refuse, or one that could carry
another key into the YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from builder.load.params import type_name

KEYS = {"namespace", "rdma_resources", "node_selector", "image_pull_secret"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
# An extended resource's name: a DNS subdomain prefix (required) and a name of 63 (rdma/ib, nvidia.com/hostdev).
EXTENDED = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
# A qualified name (label keys): an optional DNS subdomain prefix and a name of 63.
QUALIFIED = re.compile(r"^(?:[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")


@dataclass(frozen=True)
class K8sSettings:
    namespace: str | None = None
    rdma_resources: tuple = ()      # (resource name, count)
    node_selector: tuple = ()       # (label key, value)
    image_pull_secret: str | None = None


def parse(loader, value: Any) -> K8sSettings:
    """loader is spec._Loader (err, mapping, string)."""
    if value is None:
        return K8sSettings()
    path = ("site", "k8s")
    raw = loader.mapping(path, value, KEYS, what="a mapping of Kubernetes settings")
    out: dict = {}
    for key in ("namespace", "image_pull_secret"):
        if raw.get(key) is not None:
            text = loader.string(path + (key,), raw[key])
            pattern = DNS_LABEL if key == "namespace" else DNS_SUBDOMAIN
            if not pattern.match(text):
                raise loader.err(path + (key,), f"{text[:80]!r} is not a Kubernetes name (lower-case letters, digits "
                                 "and '-', starting and ending with a letter or digit)")
            out[key] = text
    if raw.get("rdma_resources") is not None:
        found = loader.mapping(path + ("rdma_resources",), raw["rdma_resources"], None,
                               what="a mapping of extended resource names to counts")
        pairs = []
        for name, count in found.items():
            if not isinstance(name, str) or not EXTENDED.match(name) or name.startswith(("kubernetes.io/", "nvidia.com/gpu")):
                raise loader.err(path + ("rdma_resources", str(name)), f"{str(name)[:80]!r} is not an extended resource "
                                 "name (e.g. rdma/ib, nvidia.com/hostdev)")
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
                raise loader.err(path + ("rdma_resources", name), f"expected a count from 1 to 64, got "
                                 f"{type_name(count) if not isinstance(count, int) else count}")
            pairs.append((name, count))
        out["rdma_resources"] = tuple(pairs)
    if raw.get("node_selector") is not None:
        found = loader.mapping(path + ("node_selector",), raw["node_selector"], None, what="a mapping of node labels")
        pairs = []
        for key, label in found.items():
            if not isinstance(key, str) or not QUALIFIED.match(key):
                raise loader.err(path + ("node_selector", str(key)), f"{str(key)[:80]!r} is not a label key")
            if not isinstance(label, str) or not LABEL_VALUE.match(label):
                raise loader.err(path + ("node_selector", key), f"{str(label)[:80]!r} is not a label value (63 "
                                 "letters, digits, '-', '_' or '.' at most)")
            pairs.append((key, label))
        out["node_selector"] = tuple(pairs)
    return K8sSettings(**out)


__all__ = ["K8sSettings", "parse", "DNS_LABEL", "QUALIFIED", "EXTENDED"]
