"""site.slurm and site.partitions from stacks.yaml: what the launch files of `imgbuild node-check` (a Slurm
batch script, Kubernetes objects) need of the site's cluster, and the runtime environment that differs
between its partitions.

    site:
      slurm:
        partition: gpu              # #SBATCH --partition (a flag overrides it)
        account: proj-llm           # #SBATCH --account
        time: "00:30:00"            # #SBATCH --time, default 00:30:00
        exclusive: true             # #SBATCH --exclusive, the default: bandwidth is measured on whole nodes
        enroot_version: "3.5.0"     # the form of pyxis' --container-image: REGISTRY#REPO below 4.0 (the default)
      partitions:                   # the nodes a launch file targets (node-check --partition NAME)
        h100:
          slurm_partition: gpu-h100
          node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
          env: {NCCL_IB_HCA: "mlx5_0,mlx5_3,mlx5_4,mlx5_5", NCCL_SOCKET_IFNAME: ens21f0np0}
        a100:
          slurm_partition: gpu-a100
          node_selector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
          env: {NCCL_IB_HCA: "mlx5_0,mlx5_1", NCCL_IB_GID_INDEX: "3", NCCL_SOCKET_IFNAME: eth0}

A partition's env is laid over the stack's runtime env (the image's) in the files written for that partition,
so one image serves nodes whose HCA names, socket interface or RoCE GID index differ. Every value is checked
when stacks.yaml is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from builder.load.k8sconf import LABEL_VALUE, QUALIFIED as LABEL_KEY
from builder.load.params import type_name

SLURM_KEYS = {"partition", "account", "time", "exclusive", "enroot_version"}
PARTITION_KEYS = {"slurm_partition", "node_selector", "env", "description"}
SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")      # what a batch script can carry unquoted
TIME = re.compile(r"^(?:\d+-)?\d{1,2}(?::\d{2}){0,2}\Z|^\d+\Z")       # sbatch --time forms
VERSION = re.compile(r"^\d+(?:\.\d+){0,2}\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_VALUE = re.compile(r"^[^\x00-\x1f\x7f'\"`\\$]*\Z")   # what a batch script and a container env carry as is


@dataclass(frozen=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    time: str = "00:30:00"
    exclusive: bool = True
    enroot_version: str | None = None

    def hash_form(self) -> bool:
        """Whether pyxis needs REGISTRY#REPO (Enroot below 4.0, and an Enroot not declared)."""
        if not self.enroot_version:
            return True
        return tuple(int(p) for p in self.enroot_version.split(".")) < (4,)


@dataclass(frozen=True)
class Partition:
    name: str
    slurm_partition: str | None = None
    node_selector: tuple = ()       # (label, value)
    env: tuple = ()                 # (name, value)


def parse_slurm(loader, value: Any) -> SlurmSettings:
    if value is None:
        return SlurmSettings()
    path = ("site", "slurm")
    raw = loader.mapping(path, value, SLURM_KEYS, what="a mapping of Slurm settings")
    out: dict = {}
    for key, pattern, what in (("partition", SLURM_NAME, "a partition name"), ("account", SLURM_NAME, "an account name"),
                               ("time", TIME, "a time limit (MM, HH:MM:SS, D-HH:MM:SS)"),
                               ("enroot_version", VERSION, "a version (3.5.0)")):
        if raw.get(key) is not None:
            text = loader.string(path + (key,), raw[key])
            if not pattern.match(text):
                raise loader.err(path + (key,), f"{text[:80]!r} is not {what}")
            out[key] = text
    if raw.get("exclusive") is not None:
        if not isinstance(raw["exclusive"], bool):
            raise loader.err(path + ("exclusive",), f"expected true or false, got {type_name(raw['exclusive'])}")
        out["exclusive"] = raw["exclusive"]
    return SlurmSettings(**out)


def parse_partitions(loader, value: Any) -> dict[str, Partition]:
    if value is None:
        return {}
    path = ("site", "partitions")
    found = loader.mapping(path, value, None, what="a mapping of partition names to their settings")
    out = {}
    for name, raw in found.items():
        where = path + (str(name),)
        if not isinstance(name, str) or not SLURM_NAME.match(name):
            raise loader.err(where, f"{str(name)[:80]!r} is not a partition name")
        raw = loader.mapping(where, raw or {}, PARTITION_KEYS, what="a partition's settings")
        loader.free_text(where + ("description",), raw.get("description"))
        slurm = None
        if raw.get("slurm_partition") is not None:
            slurm = loader.string(where + ("slurm_partition",), raw["slurm_partition"])
            if not SLURM_NAME.match(slurm):
                raise loader.err(where + ("slurm_partition",), f"{slurm[:80]!r} is not a partition name")
        pairs = []
        for key, label in (loader.mapping(where + ("node_selector",), raw.get("node_selector") or {}, None,
                                          what="a mapping of node labels")).items():
            if not isinstance(key, str) or not LABEL_KEY.match(key):
                raise loader.err(where + ("node_selector", str(key)), f"{str(key)[:80]!r} is not a label key")
            if not isinstance(label, str) or not LABEL_VALUE.match(label):
                raise loader.err(where + ("node_selector", key), f"{str(label)[:80]!r} is not a label value")
            pairs.append((key, label))
        env = []
        for key, text in (loader.mapping(where + ("env",), raw.get("env") or {}, None,
                                         what="a mapping of environment variables")).items():
            if not isinstance(key, str) or not ENV_NAME.match(key):
                raise loader.err(where + ("env", str(key)), f"{str(key)[:80]!r} is not an environment variable name")
            if isinstance(text, bool) or not isinstance(text, (str, int)) or not ENV_VALUE.match(str(text)):
                raise loader.err(where + ("env", key), f"{str(text)[:80]!r}: a value without quotes, '$', backslash "
                                 "or control characters")
            env.append((key, str(text)))
        out[name] = Partition(name, slurm, tuple(pairs), tuple(env))
    return out


__all__ = ["Partition", "SlurmSettings", "parse_partitions", "parse_slurm"]
